"""Probe the sm_90a warpgroup tiles on a GPU: are they right, and if not, how wrong?

    python benchmarks/gpu_wgmma_probe.py --prepare build/wgmma-probe   # here (compiler)
    python3 benchmarks/gpu_wgmma_probe.py --run build/wgmma-probe       # on an H100/H200

`--prepare` exports small matmuls that take the TMA + wgmma tile
(transforms/gpu/warpgroup_tiles.py, `chip=sm_90a`, tiles forced large): bf16
operands with f32 results (the tile's accumulators as they are), of one and
several 128 x 128 output tiles, as many steps of 64 as there are stages and
more (the mbarrier phases wrap), one bf16 result (the conversion epilogue),
one of 128 x 256 tiles (two warpgroups), the transposed layouts (A stored
k x m, B stored n x k: the descriptors written by warpgroup_tiles.py rather
than upstream's lowering), bf16 results, and row-major operands through those
descriptors too (beside upstream's lowering of the same). `--run` needs numpy and this tree's `python/` only. It calls each
on inputs whose products are exact in f32 (small integers), and on index
patterns: A the identity and B holding each element's row (or column) index,
and the same with the roles swapped, so that a wrong output names the element
of A or B it read instead. It prints one line per case (wrong count, the
residues mod 128 of the wrong rows and columns) and, with `--json`, writes
the full outputs of the wrong cases (`.npz` beside it) for a closer look.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

#: name -> (m, k, n, bf16 result?, the tile's columns (256: two warpgroups), layout:
#: n/t for A stored m x k / k x m, then for B stored k x n / n x k)
SHAPES = {
    "one tile, 3 steps": (128, 192, 128, False, 128, "nn"),
    "2x2 tiles, 4 steps": (256, 256, 256, False, 128, "nn"),
    "3x5 tiles, 10 steps": (384, 640, 640, False, 128, "nn"),
    "2x2 tiles, bf16 result": (256, 256, 256, True, 128, "nn"),
    "2x2 tiles of 128x256, 5 steps": (256, 320, 512, False, 256, "nn"),
    "nt (B stored n x k), 2x2 tiles": (256, 256, 256, True, 128, "nt"),
    "tn (A stored k x m), 2x2 tiles": (256, 256, 256, True, 128, "tn"),
    "tt, 2x2 tiles of 128x256": (256, 256, 512, True, 256, "tt"),
    "nn through our own descriptors, 2x2 tiles": (256, 256, 256, False, 128, "nn own"),
}
_BODIES = {"nn": lambda a, b: a @ b, "nt": lambda a, b: a @ b.T,
           "tn": lambda a, b: a.T @ b, "tt": lambda a, b: a.T @ b.T}


def _stored(x: np.ndarray, transposed: str) -> np.ndarray:
    return np.ascontiguousarray(x.T) if transposed == "t" else x


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def prepare(folder: str) -> int:
    import ml_dtypes

    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp
    from mlir_autodiff.transforms.gpu import contractions, warpgroup_tiles

    contractions.LARGE_MIN_TILES = 1
    warpgroup_tiles.ENABLED = True
    os.makedirs(folder, exist_ok=True)
    for name, (m, k, n, half, tile_n, layout) in SHAPES.items():
        warpgroup_tiles.TILE_N = tile_n
        warpgroup_tiles.OWN_DESCRIPTORS = layout.endswith("own")
        a = _stored(np.zeros((m, k), ml_dtypes.bfloat16), layout[0])
        b = _stored(np.zeros((k, n), ml_dtypes.bfloat16), layout[1])
        if half:
            fn = _BODIES[layout[:2]]
        else:  # (row-major operands only: the f32 accumulators as they are)
            fn = lambda a, b: a.astype(anp.float32) @ b.astype(anp.float32)  # noqa: E731
        ad.export(fn, a, b, path=os.path.join(folder, _slug(name)), device="gpu",
                  chip="sm_90a")
        print("prepared", name, flush=True)
    return 0


def _cases(m: int, k: int, n: int, rng: np.random.Generator) -> dict[str, tuple]:
    rows_mk, cols_mk = np.indices((m, k))
    rows_kn, cols_kn = np.indices((k, n))
    eye_mk = (rows_mk == cols_mk).astype(np.float32)
    eye_kn = (rows_kn == cols_kn).astype(np.float32)
    # indices below 256 are exact in bf16
    return {
        "random integers": (rng.integers(-2, 3, (m, k)).astype(np.float32),
                            rng.integers(-2, 3, (k, n)).astype(np.float32)),
        "I @ (B = its row index)": (eye_mk, (rows_kn % 256).astype(np.float32)),
        "I @ (B = its column index)": (eye_mk, (cols_kn % 256).astype(np.float32)),
        "(A = its row index) @ I": ((rows_mk % 256).astype(np.float32), eye_kn),
        "(A = its column index) @ I": ((cols_mk % 256).astype(np.float32), eye_kn),
    }


def run(folder: str, out_json: str | None) -> int:
    import ml_dtypes

    from mlir_autodiff import aot

    rng = np.random.default_rng(0)
    lines, wrong_outputs, results = [], {}, []
    for name, (m, k, n, half, _, layout) in SHAPES.items():
        layout = layout[:2]
        try:
            f = aot.load(os.path.join(folder, _slug(name)))
        except aot.NoCudaDevice as err:
            print(err)
            return 0
        for case, (a, b) in _cases(m, k, n, rng).items():
            try:
                got = np.asarray(f(_stored(a, layout[0]).astype(ml_dtypes.bfloat16),
                                   _stored(b, layout[1]).astype(ml_dtypes.bfloat16)))
            except Exception as err:  # a CUDA error: name it, go on
                lines.append(f"{name} | {case}: failed: {err}")
                results.append({"shape": name, "case": case, "error": str(err)})
                continue
            got = got.astype(np.float32)
            want = a @ b
            if half:
                want = want.astype(ml_dtypes.bfloat16).astype(np.float32)
            bad = ~np.isclose(got, want, rtol=1e-6, atol=0)
            rows, cols = np.nonzero(bad)
            lines.append(f"{name} | {case}: {int(bad.sum())} of {bad.size} wrong"
                         + (f"; rows mod 128 {sorted(set((rows % 128).tolist()))[:16]}, "
                            f"columns mod 128 {sorted(set((cols % 128).tolist()))[:16]}"
                            if bad.any() else ""))
            results.append({"shape": name, "case": case, "wrong": int(bad.sum()),
                            "size": int(bad.size)})
            if bad.any():
                wrong_outputs[_slug(f"{name} {case}")] = got
    print("\n".join(lines))
    if out_json:
        with open(out_json, "w") as fh:
            json.dump(results, fh, indent=1)
        if wrong_outputs:
            np.savez_compressed(os.path.splitext(out_json)[0] + ".npz", **wrong_outputs)
    return 0 if all(r.get("wrong") == 0 for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prepare", metavar="DIR")
    mode.add_argument("--run", metavar="DIR")
    p.add_argument("--json", metavar="FILE", help="--run: results here, wrong outputs beside")
    a = p.parse_args(argv)
    return prepare(a.prepare) if a.prepare else run(a.run, a.json)


if __name__ == "__main__":
    sys.exit(main())
