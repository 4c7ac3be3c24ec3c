"""Contractions on the GPU (transforms/gpu/contractions.py): f16 and bf16 on tensor cores,
f32 as register tiles of threads; both stage their operands' tiles through
shared memory.

No GPU is needed. The PTX is checked for the tensor-core pipeline's
instructions (`mma.sync`, `ldmatrix` from shared memory, `cp.async`
copies, barriers) and for the f32 tiles' shared-memory traffic, and ptxas
compiles it for sm_80 and sm_90; the `parallel` stage (the tiles before
the GPU mapping and the nvgpu lowering) runs on the CPU against numpy for
every operand layout a contraction (and its derivatives) can have, a
batch, an f16 accumulator and shapes that are not multiples of the tile
(the generic path).
"""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from gpu_lowering import lowered as _lowered
from mlir import ir

from mlir_autodiff import dialects
from mlir_autodiff import gpu as adgpu
from mlir_autodiff.argspec import bfloat16
from mlir_autodiff.dialects.vocabulary import GPU_SIMT_TILE
from mlir_autodiff.runtime import CompiledModule
from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu, parallel_stage_on_cpu_pipeline
from mlir_autodiff.transforms.pipeline import run_pipeline

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")

_PAR2 = '"parallel", "parallel", "reduction"'
_PAR3 = '"parallel", "parallel", "parallel", "reduction"'


def _contraction(name: str, ashape, bshape, cshape, maps, iters: str, out: str = "f32",
                 inp: str = "f16") -> str:
    """A contraction generic on `inp` inputs, accumulating into `out` from a zero fill."""
    a, b, c = ("x".join(map(str, s)) for s in (ashape, bshape, cshape))
    if inp == "f32":
        body = "%p = arith.mulf %x, %y : f32\n    %s = arith.addf %acc, %p : f32"
    elif out == "f32":
        body = (f"%xa = arith.extf %x : {inp} to f32\n    %ya = arith.extf %y : {inp} to f32\n"
                "    %p = arith.mulf %xa, %ya : f32\n    %s = arith.addf %acc, %p : f32")
    else:
        body = "%p = arith.mulf %x, %y : f16\n    %s = arith.addf %acc, %p : f16"
    am, bm, cm = (f"affine_map<{m}>" for m in maps)
    return f"""
func.func @{name}(%a: tensor<{a}x{inp}>, %b: tensor<{b}x{inp}>) -> tensor<{c}x{out}> {{
  %z = arith.constant 0.0 : {out}
  %e = tensor.empty() : tensor<{c}x{out}>
  %f = linalg.fill ins(%z : {out}) outs(%e : tensor<{c}x{out}>) -> tensor<{c}x{out}>
  %m = linalg.generic {{indexing_maps = [{am}, {bm}, {cm}], iterator_types = [{iters}]}}
      ins(%a, %b : tensor<{a}x{inp}>, tensor<{b}x{inp}>) outs(%f : tensor<{c}x{out}>) {{
  ^bb0(%x: {inp}, %y: {inp}, %acc: {out}):
    {body}
    linalg.yield %s : {out}
  }} -> tensor<{c}x{out}>
  return %m : tensor<{c}x{out}>
}}"""


M, N, K = 128, 192, 96
_IK, _KJ, _KI, _JK, _IJ = ("(i, j, k) -> (i, k)", "(i, j, k) -> (k, j)", "(i, j, k) -> (k, i)",
                           "(i, j, k) -> (j, k)", "(i, j, k) -> (i, j)")
#: name -> (function text, shapes of a and b, numpy reference on f32 copies)
LAYOUTS = {
    "nn": (_contraction("nn", (M, K), (K, N), (M, N), (_IK, _KJ, _IJ), _PAR2),
           ((M, K), (K, N)), lambda a, b: a @ b),
    # what reverse mode makes of a matmul: one operand transposed, or both
    "tn": (_contraction("tn", (K, M), (K, N), (M, N), (_KI, _KJ, _IJ), _PAR2),
           ((K, M), (K, N)), lambda a, b: a.T @ b),
    "nt": (_contraction("nt", (M, K), (N, K), (M, N), (_IK, _JK, _IJ), _PAR2),
           ((M, K), (N, K)), lambda a, b: a @ b.T),
    "tt": (_contraction("tt", (K, M), (N, K), (M, N), (_KI, _JK, _IJ), _PAR2),
           ((K, M), (N, K)), lambda a, b: a.T @ b.T),
    # the first input indexes the columns
    "swapped": (_contraction("swapped", (K, N), (M, K), (M, N), (_KJ, _IK, _IJ), _PAR2),
                ((K, N), (M, K)), lambda a, b: b @ a),
    "batch": (_contraction("batch", (3, M, K), (3, K, N), (3, M, N),
                           ("(b, i, j, k) -> (b, i, k)", "(b, i, j, k) -> (b, k, j)",
                            "(b, i, j, k) -> (b, i, j)"), _PAR3),
              ((3, M, K), (3, K, N)), lambda a, b: a @ b),
    "f16_accumulator": (_contraction("f16_accumulator", (64, 32), (32, 64), (64, 64),
                                     (_IK, _KJ, _IJ), _PAR2, out="f16"),
                        ((64, 32), (32, 64)), lambda a, b: a @ b),
    # bf16 (f32 accumulators): the tiles are read as raw 16-bit fragments, the
    # mma.sync ops retyped to bf16 after the NVVM lowering
    "bf16_nt": (_contraction("bf16_nt", (M, K), (N, K), (M, N), (_IK, _JK, _IJ), _PAR2,
                             inp="bf16"), ((M, K), (N, K)), lambda a, b: a @ b.T),
    # not multiples of the 64 x 64 x 16 tile: the generic path
    "ragged_rows": (_contraction("ragged_rows", (70, 64), (64, 64), (70, 64), (_IK, _KJ, _IJ),
                                 _PAR2), ((70, 64), (64, 64)), lambda a, b: a @ b),
    "ragged_k": (_contraction("ragged_k", (64, 40), (40, 64), (64, 64), (_IK, _KJ, _IJ), _PAR2),
                 ((64, 40), (40, 64)), lambda a, b: a @ b),
}
TILED = ("nn", "tn", "nt", "tt", "swapped", "batch", "f16_accumulator", "bf16_nt")
RAGGED = ("ragged_rows", "ragged_k")
#: Run on the CPU (each warp tile costs ~2 s of LLVM compilation): `tt` takes both
#: transposed branches (A's and B's are independent), `batch` the untransposed ones.
ON_CPU = ("tt", "batch", "f16_accumulator", "bf16_nt", *RAGGED)


def _parallel_functions(text: str) -> dict[str, str]:
    """Each function of `text` (by name) after the GPU pipeline's `parallel` stage."""
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        run_pipeline(module, [LowerToGpu(stage="parallel")])
        return {ir.StringAttr(fn.attributes["sym_name"]).value: str(fn)
                for fn in module.body.operations}


def _ptx(module: ir.Module) -> str:
    return "\n".join(obj.data.decode() for obj in adgpu.gpu_objects(module))


def _ptx_kernels(ptx: str) -> list[tuple[str, str]]:
    """(kernel name, its PTX body) for each kernel (the names of several modules'
    kernels may repeat)."""
    parts = re.split(r"^\.visible \.entry (\w+)", ptx, flags=re.M)
    return list(zip(parts[1::2], parts[2::2]))


def _assert_tensor_core_kernel(body: str) -> None:
    assert re.search(r"^\s*mma\.sync\.aligned\.m16n8k16\.row\.col\.f(32|16)\.(b?f16)\.\2",
                     body, re.M)
    assert re.search(r"^\s*ldmatrix\.sync\.aligned\.\S*\.shared\.b16", body, re.M)
    assert re.search(r"^\s*cp\.async\.\S*shared\.global", body, re.M)
    assert "cp.async.wait_group" in body and "bar.sync" in body


def test_parallel_stage_warp_tiles_match_numpy() -> None:
    """The layouts in one module (one compilation): the tiled ones are warp tiles of
    vector contractions (8 mma-shaped 16x8x16 contractions per warp), the ragged ones
    are not, and all match numpy."""
    text = "\n".join(LAYOUTS[n][0] for n in ON_CPU)
    contracts = {name: fn.count("vector.contract")
                 for name, fn in _parallel_functions(text).items()}
    for name in ON_CPU:
        assert contracts[name] == (0 if name in RAGGED else 8), name
    compiled = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline(), opt_level=0)
    rng = np.random.default_rng(22)
    for name in ON_CPU:
        _, shapes, ref = LAYOUTS[name]
        dtype = bfloat16() if name.startswith("bf16") else np.float16
        a, b = (rng.standard_normal(s).astype(dtype) for s in shapes)
        got = compiled[name](a, b)
        want = ref(a.astype(np.float32), b.astype(np.float32))
        if name == "f16_accumulator":  # rounded to f16 after every product
            np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=6e-2)
        else:  # f16 products are exact in f32; only the summation order differs
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@needs_ptxas
@pytest.mark.parametrize("chip", ["sm_80", "sm_90"])
def test_f16_matmul_and_batch_matmul_ptx_use_tensor_cores(chip: str) -> None:
    """A 256^3 f16 matmul and the tiled layouts (every one on sm_80; the batch matmul
    and bf16 on sm_90): mma.sync fed by ldmatrix from tiles that cp.async copied into
    shared memory; ptxas accepts the program for the chip."""
    names = TILED if chip == "sm_80" else ("batch", "bf16_nt")
    text = (_contraction("mm", (256, 256), (256, 256), (256, 256), (_IK, _KJ, _IJ), _PAR2)
            + "\n".join(LAYOUTS[n][0] for n in names))
    kernels = _ptx_kernels(_ptx(_lowered(text, chip=chip, format="isa")))
    mma = [(k, body) for k, body in kernels if "mma.sync" in body]
    assert sorted(k.split("_kernel")[0] for k, _ in mma) == sorted({"mm", *names})
    for k, body in mma:
        _assert_tensor_core_kernel(body)
        if k.startswith("bf16"):
            assert ".f32.bf16.bf16.f32" in body
    module = _lowered(text, chip=chip, format="bin")
    sm = int(chip[3:])
    for obj in adgpu.gpu_objects(module):
        assert adgpu.cubin_arch(obj.data) == sm


def test_before_sm80_and_ragged_shapes_take_the_generic_path() -> None:
    text = LAYOUTS["nn"][0] + LAYOUTS["ragged_rows"][0]
    ptx = _ptx(_lowered(text, chip="sm_75", format="isa"))
    assert "mma.sync" not in ptx and "cp.async" not in ptx
    kernels = _ptx_kernels(_ptx(_lowered(text, chip="sm_80", format="isa")))
    assert any("mma.sync" in b for k, b in kernels if k.startswith("nn"))
    assert not any("mma.sync" in b for k, b in kernels if k.startswith("ragged"))


# -- f32: register tiles, shared memory ---------------------------------------------------------

F32_LAYOUTS = {
    "f32_tn": (_contraction("f32_tn", (K, M), (K, N), (M, N), (_KI, _KJ, _IJ), _PAR2,
                            inp="f32"), ((K, M), (K, N)), lambda a, b: a.T @ b),
    "f32_nt": (_contraction("f32_nt", (M, K), (N, K), (M, N), (_IK, _JK, _IJ), _PAR2,
                            inp="f32"), ((M, K), (N, K)), lambda a, b: a @ b.T),
    "f32_batch": (_contraction("f32_batch", (2, 64, K), (2, K, 64), (2, 64, 64),
                               ("(b, i, j, k) -> (b, i, k)", "(b, i, j, k) -> (b, k, j)",
                                "(b, i, j, k) -> (b, i, j)"), _PAR3, inp="f32"),
                  ((2, 64, K), (2, K, 64)), lambda a, b: a @ b),
    "f32_ragged": (_contraction("f32_ragged", (70, 64), (64, 64), (70, 64), (_IK, _KJ, _IJ),
                                _PAR2, inp="f32"), ((70, 64), (64, 64)), lambda a, b: a @ b),
}


def test_f32_parallel_stage_register_tiles_match_numpy() -> None:
    """f32 contractions: 4 x 4 register tiles per thread, the zero fill folded into
    the accumulators (no read of the output, no fill kernel); exact f32 accuracy."""
    text = "\n".join(t for t, _, _ in F32_LAYOUTS.values())
    for name, fn_text in _parallel_functions(text).items():
        tiled = name != "f32_ragged"
        assert (GPU_SIMT_TILE in fn_text) == tiled, name
        if tiled:  # one kernel: no fill loop of its own
            assert fn_text.count("scf.parallel") == 2, name
    compiled = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline(), opt_level=0)
    rng = np.random.default_rng(7)
    for name, (_, shapes, ref) in F32_LAYOUTS.items():
        a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
        want = ref(a.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(compiled[name](a, b), want, rtol=1e-5, atol=1e-5)


@needs_ptxas
def test_f32_matmul_ptx_stages_tiles_through_shared_memory() -> None:
    """A 256^3 f32 matmul: one kernel of 64 x 64 tiles, 256 threads, each step's A and B
    tiles stored to and read from shared memory between barriers; no tensor cores
    (f32 keeps f32 accuracy: no tf32)."""
    text = _contraction("mm", (256, 256), (256, 256), (256, 256), (_IK, _KJ, _IJ), _PAR2,
                        inp="f32")
    kernels = _ptx_kernels(_ptx(_lowered(text, chip="sm_80", format="isa")))
    assert len(kernels) == 1
    ((_, body),) = kernels
    assert re.search(r"^\s*st\.shared\S*\.b32", body, re.M)
    assert re.search(r"^\s*ld\.shared\S*\.b32", body, re.M)
    assert "bar.sync" in body and "mma" not in body and "tf32" not in body
    module = _lowered(text, chip="sm_90", format="bin")
    for obj in adgpu.gpu_objects(module):
        assert adgpu.cubin_arch(obj.data) == 90


# -- the front end's f16: widened to f32 around the product --------------------------------------


def test_front_end_f16_gradient_uses_tensor_cores_and_is_correct() -> None:
    """`anp` widens f16 matmul operands to f32 (`extf` kernels) and contracts in f32:
    the contraction reads the f16 buffers on tensor cores instead (f16 x f16 products
    are exact in f32, so the values do not change); the backward contractions, whose
    cotangent is f32, stay f32 register tiles. The gradient matches numpy."""
    import mlir_autodiff as ad
    import mlir_autodiff.numpy as anp

    def f(w, x):
        return anp.sum(anp.tanh(x @ w))

    rng = np.random.default_rng(3)
    w = (rng.standard_normal((64, 128)) * 0.1).astype(np.float16)
    x = rng.standard_normal((128, 64)).astype(np.float16)
    text = ad.lower(ad.grad(f, argnums=(0, 1)), w, x).as_text("autodiff")
    kernels = _ptx_kernels(_ptx(_lowered(text, chip="sm_80", format="isa")))
    assert sum("mma.sync" in b for _, b in kernels) == 1
    assert sum("mma.sync" not in b and "st.shared" in b and "bar.sync" in b
               for _, b in kernels) >= 2
    dw, dx = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline(), opt_level=0)[
        "main"](w, x)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    # the product is rounded to f16 before tanh (the program's dtype)
    g = 1 - np.tanh((x64 @ w64).astype(np.float16).astype(np.float64)) ** 2
    np.testing.assert_allclose(dw.astype(np.float64), x64.T @ g, rtol=2e-2, atol=5e-2)
    np.testing.assert_allclose(dx.astype(np.float64), g @ w64.T, rtol=2e-2, atol=5e-2)


def test_f32_tile_takes_its_fill_copy_and_elementwise_epilogue() -> None:
    """`tanh(x @ w + b)` whose output starts as a copy of a zero-filled buffer: the
    copy and the bias/tanh epilogue run in the tile's kernel (one launch), on the
    accumulators, and the result matches numpy."""
    text = """
func.func @layer(%x: tensor<128x96xf32>, %w: tensor<96x64xf32>, %b: tensor<64xf32>)
    -> (tensor<128x64xf32>, tensor<128x64xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128x64xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<128x64xf32>) -> tensor<128x64xf32>
  %m = linalg.matmul ins(%x, %w : tensor<128x96xf32>, tensor<96x64xf32>)
      outs(%f : tensor<128x64xf32>) -> tensor<128x64xf32>
  %e2 = tensor.empty() : tensor<128x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>,
      affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>],
      iterator_types = ["parallel", "parallel"]}
      ins(%m, %b : tensor<128x64xf32>, tensor<64xf32>) outs(%e2 : tensor<128x64xf32>) {
  ^bb0(%v: f32, %bb: f32, %o: f32):
    %s = arith.addf %v, %bb : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<128x64xf32>
  return %r, %f : tensor<128x64xf32>, tensor<128x64xf32>
}"""
    module = _lowered(text, stage="kernels")
    assert str(module).count("gpu.launch_func") == 2  # the tile, and %f's own fill
    tiles = [b for _, b in _ptx_kernels(_ptx(_lowered(text, format="isa")))
             if "st.shared" in b]
    assert len(tiles) == 1  # the tile kernel (shared memory), epilogue included
    rng = np.random.default_rng(11)
    x = rng.standard_normal((128, 96)).astype(np.float32)
    w = (rng.standard_normal((96, 64)) * 0.1).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    got, zeros = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline(),
                                opt_level=0)["layer"](x, w, b)
    np.testing.assert_allclose(got, np.tanh(x.astype(np.float64) @ w + b), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(zeros, np.zeros((128, 64), np.float32))


# -- the large tile, its pipeline, dynamic shared memory -------------------------------------------

from mlir_autodiff.transforms.gpu import contractions  # noqa: E402
from mlir_autodiff.transforms.gpu.support import ops_of  # noqa: E402


def test_large_tile_parallel_stage_matches_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """128 x 128 tiles of 4 warps of 64 x 64 (32 fragments, two mma steps per staged
    step: 64 contractions per warp and step) in the layouts of A (row-major and
    k-major) and B, on the CPU against numpy."""
    monkeypatch.setattr(contractions, "LARGE_MIN_TILES", 1)
    tn = _contraction("large_tn", (64, 128), (64, 256), (128, 256), (_KI, _KJ, _IJ), _PAR2,
                      inp="bf16")
    nt = _contraction("large_nt", (128, 64), (128, 64), (128, 128), (_IK, _JK, _IJ), _PAR2)
    text = tn + nt
    for fn in _parallel_functions(text).values():
        assert fn.count("vector.contract") == 64
    compiled = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline(), opt_level=0)
    rng = np.random.default_rng(5)
    for name, shapes, dtype, ref in (
            ("large_tn", ((64, 128), (64, 256)), bfloat16(), lambda a, b: a.T @ b),
            ("large_nt", ((128, 64), (128, 64)), np.float16, lambda a, b: a @ b.T)):
        a, b = (rng.standard_normal(s).astype(dtype) for s in shapes)
        want = ref(a.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(compiled[name](a, b), want, rtol=1e-5, atol=1e-4)


def _kernel_ir(text: str, **options) -> str:
    return str(_lowered(text, stage="kernels", chip="sm_90", **options))


@needs_ptxas
def test_large_tile_ptx_pipelines_its_copies() -> None:
    """A bf16 matmul of 128 output tiles (2048 x 1024) with A k-major: the large tile,
    three stages (each step waits for its copy group, the next one may be pending;
    one barrier per step) in dynamic shared memory, rows padded, L1 bypassed; each
    k-major A fragment's second and third 8 x 8 matrices reordered after
    ldmatrix.trans (MLIR 22's conversion swaps them)."""
    text = _contraction("big_tn", (256, 2048), (256, 1024), (2048, 1024), (_KI, _KJ, _IJ),
                        _PAR2, inp="bf16")
    ptx = _ptx(_lowered(text, chip="sm_90", format="isa"))
    ((_, body),) = [(k, b) for k, b in _ptx_kernels(ptx) if "mma.sync" in b]
    _assert_tensor_core_kernel(body)
    assert body.count("mma.sync") == 64  # one unrolled step: 32 fragments x 2 mma steps
    assert re.search(r"cp\.async\.wait_group\s+1;", body) and body.count("bar.sync") == 1
    assert "cp.async.cg.shared.global" in body
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in body
    ir_text = _kernel_ir(text)
    # 32 x (128 + 8) halves of A and as many of B per stage, three stages
    assert re.search(rf"dynamic_shared_memory_size %c{3 * 2 * 2 * 32 * 136}_i32", ir_text)
    lds = re.findall(r"(%\w+) = nvgpu\.ldmatrix .*numTiles = 4 : i32, transpose = true", ir_text)
    assert lds
    for v in lds:
        assert re.search(rf"vector\.shuffle {v}, {v} \[0, 2, 1, 3\]", ir_text), v


@needs_ptxas
def test_tile_over_48k_takes_dynamic_shared_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four stages of the large tile (75 KB): the kernel's tiles are views of dynamic
    shared memory and its launch names the size; ptxas accepts it."""
    tile = contractions.Tile(128, 128, 2, 2, 32, 4)
    monkeypatch.setattr(contractions, "LARGE", tile)
    monkeypatch.setattr(contractions, "LARGE_MIN_TILES", 1)
    text = _contraction("mm", (256, 256), (256, 256), (256, 256), (_IK, _KJ, _IJ), _PAR2,
                        inp="bf16")
    ir_text = _kernel_ir(text)
    size = 4 * 2 * (128 * (32 + 8) + 32 * (128 + 8))
    assert re.search(rf"gpu\.launch_func .*dynamic_shared_memory_size %c{size}_i32", ir_text)
    assert "gpu.dynamic_shared_memory" in ir_text and "memref.global" not in ir_text
    module = _lowered(text, chip="sm_90", format="bin")
    for obj in adgpu.gpu_objects(module):
        assert adgpu.cubin_arch(obj.data) == 90


def test_tiles_that_do_not_fit_are_rejected() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        contractions.Tile(256, 256, 2, 2, 64, 4)  # shared memory
    with pytest.raises(ValueError, match="does not fit"):
        contractions.Tile(64, 64, 2, 2, 24, 2)  # not a multiple of the mma k
    assert contractions.SMALL.shared_bytes <= contractions.STATIC_SHARED_LIMIT


def test_tensor_core_tile_applies_its_elementwise_epilogue() -> None:
    """`bf16(max(a @ b, 0))` (f32 accumulators into a temporary only the epilogue reads):
    one kernel, the epilogue on each lane's accumulators after the mma lowering
    (converted to bf16 in registers, no f32 store), the temporary gone; the parallel
    stage matches numpy."""
    contraction = _contraction("relu_bf16", (128, 64), (64, 192), (128, 192), (_IK, _KJ, _IJ),
                               _PAR2, inp="bf16")
    text = contraction.replace(
        "  return %m : tensor<128x192xf32>\n}", """  %e2 = tensor.empty() : tensor<128x192xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>,
      affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%m : tensor<128x192xf32>) outs(%e2 : tensor<128x192xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %zero = arith.constant 0.0 : f32
    %p = arith.maximumf %v, %zero : f32
    %t = arith.truncf %p : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<128x192xbf16>
  return %r : tensor<128x192xbf16>
}""").replace("-> tensor<128x192xf32> {\n  %z", "-> tensor<128x192xbf16> {\n  %z")
    kernels_ir = _kernel_ir(text)
    assert kernels_ir.count("gpu.launch_func") == 1
    assert "memref.alloc" not in kernels_ir and "alloca" not in kernels_ir
    ptx = _ptx(_lowered(text, chip="sm_90", format="isa"))
    ((_, body),) = _ptx_kernels(ptx)
    _assert_tensor_core_kernel(body)
    assert re.search(r"cvt\.rn\.bf16x2\.f32", body) and "max.NaN.f32" in body
    assert "st.global.b32" in body and not re.search(r"st\.global\.(v2\.)?(f32|b16)", body)
    rng = np.random.default_rng(9)
    a = rng.standard_normal((128, 64)).astype(bfloat16())
    b = rng.standard_normal((64, 192)).astype(bfloat16())
    got = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline(), opt_level=0)[
        "relu_bf16"](a, b)
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=8e-3, atol=1e-6)


def _with_epilogue(name: str, out: str, body: str) -> str:
    """A 128 x 64 x 192 f16 contraction (f32 accumulators) followed by the elementwise op
    `body` (of `%v`, yielding `%t` of type `out`) into a new tensor."""
    text = _contraction(name, (128, 64), (64, 192), (128, 192), (_IK, _KJ, _IJ), _PAR2)
    return text.replace("  return %m : tensor<128x192xf32>\n}", f"""  %e2 = tensor.empty() : tensor<128x192x{out}>
  %r = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>,
      affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}}
      ins(%m : tensor<128x192xf32>) outs(%e2 : tensor<128x192x{out}>) {{
  ^bb0(%v: f32, %o: {out}):
{body}
    linalg.yield %t : {out}
  }} -> tensor<128x192x{out}>
  return %r : tensor<128x192x{out}>
}}""").replace("-> tensor<128x192xf32> {\n  %z", f"-> tensor<128x192x{out}> {{\n  %z")


def test_tile_epilogue_that_copies() -> None:
    """An epilogue that yields its input (a copy into another buffer) runs in the tile,
    the accumulators stored as they are; the parallel stage matches numpy."""
    text = _with_epilogue("copy_out", "f32", "    %t = arith.addf %v, %v : f32")
    text = text.replace("    linalg.yield %t : f32\n  } -> tensor<128x192xf32>\n  return %r",
                        "    linalg.yield %v : f32\n  } -> tensor<128x192xf32>\n  return %r")
    ir_text = _kernel_ir(text)
    assert ir_text.count("gpu.launch_func") == 1 and "alloca" not in ir_text
    _ptx(_lowered(text, chip="sm_90", format="isa"))  # lowers to PTX
    compiled = CompiledModule(text, pipeline=parallel_stage_on_cpu_pipeline(), opt_level=0)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((128, 64)).astype(np.float16)
    b = rng.standard_normal((64, 192)).astype(np.float16)
    np.testing.assert_allclose(compiled["copy_out"](a, b),
                               a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


# -- lane by lane: the fragments each mma.sync reads ---------------------------------------------

_CMP = {0: lambda a, b: a == b, 1: lambda a, b: a != b, 2: lambda a, b: a < b,
        3: lambda a, b: a <= b, 4: lambda a, b: a > b, 5: lambda a, b: a >= b}


def _index_value(v: ir.Value, tid: int, memo: dict) -> int:
    """The value of the index `v` in thread `tid` of block 0 at the first step of the
    reduction loop (an interpreter for the arith ops of a kernel's index math)."""
    if v in memo:
        return memo[v]
    owner = v.owner
    if isinstance(owner, ir.Block):
        out = 0  # the reduction loop's induction variable, at its first step
    else:
        op = owner.operation if isinstance(owner, ir.OpView) else owner
        name = op.name
        args = [_index_value(x, tid, memo) for x in op.operands] if name not in (
            "arith.constant",) else []

        def trunc_div(a: int, b: int) -> int:
            q = abs(a) // abs(b)
            return q if (a >= 0) == (b > 0) else -q

        if name == "arith.constant":
            out = ir.IntegerAttr(op.attributes["value"]).value
        elif name == "gpu.thread_id":
            out = tid if str(op.attributes["dimension"]).endswith("x>") else 0
        elif name == "gpu.lane_id":
            out = tid % 32
        elif name == "gpu.block_id":
            out = 0
        elif name == "arith.select":
            out = args[1] if args[0] else args[2]
        elif name == "arith.cmpi":
            out = int(_CMP[ir.IntegerAttr(op.attributes["predicate"]).value](*args))
        else:
            a, b = args
            out = {"arith.addi": lambda: a + b, "arith.subi": lambda: a - b,
                   "arith.muli": lambda: a * b, "arith.divsi": lambda: trunc_div(a, b),
                   "arith.remsi": lambda: a - trunc_div(a, b) * b,
                   "arith.minsi": lambda: min(a, b), "arith.maxsi": lambda: max(a, b)}[name]()
    memo[v] = out
    return out


def _view_key(view: ir.Value, tid: int, memos: dict) -> tuple:
    """A staged tile view (`memref.view` of a shared buffer at a byte shift): the buffer
    and the shift's value in thread `tid`."""
    op = view.owner.operation
    assert op.name == "memref.view", op
    return op.operands[0], _index_value(op.operands[1], tid, memos.setdefault(tid, {}))


def _copied(func: ir.Operation, threads: int, memos: dict) -> dict:
    """What the copies before the reduction loop (the first steps' stages) put where:
    (buffer, shift, row, column) of a staged view -> (source, global indices), over
    every thread of block 0."""
    where = {}
    loop = next(o for o in contractions.walk_ops(func) if o.name == "scf.for")
    prologue = [o for o in ops_of(loop.block) if o.name == "nvgpu.device_async_copy"]
    prologue = [o for o in prologue
                if ops_of(loop.block).index(o) < ops_of(loop.block).index(loop)]
    for tid in range(threads):
        memo = memos.setdefault(tid, {})
        for cp in prologue:
            v = cp.opview
            dst_idx = [_index_value(x, tid, memo) for x in v.dstIndices]
            src_idx = [_index_value(x, tid, memo) for x in v.srcIndices]
            buf, shift = _view_key(v.dst, tid, memos)
            for e in range(ir.IntegerAttr(cp.attributes["dstElements"]).value):
                where[buf, shift, dst_idx[0], dst_idx[1] + e] = (
                    v.src, (*src_idx[:-1], src_idx[-1] + e))
    return where


def _fragment_elements(value: ir.Value, tid_of_lane, regs: int, memos: dict) -> dict:
    """For an mma operand: lane -> [(register, element) -> (row, column) of the shared
    tile view the value comes from], following `vector.shuffle` and `nvgpu.ldmatrix`
    (the PTX semantics: lanes 8i..8i+7 give the rows of matrix i; without .trans lane t
    gets row t/4, columns 2(t%4)+j of each matrix; with it, the transposed element)."""
    op = value.owner.operation
    perm = list(range(regs))
    if op.name == "vector.shuffle":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["mask"]))
        op = op.operands[0].owner.operation
    assert op.name == "nvgpu.ldmatrix", op
    trans = ir.BoolAttr(op.attributes["transpose"]).value
    n = ir.IntegerAttr(op.attributes["numTiles"]).value
    assert n == regs
    addr = []
    for p in range(32):  # memos: per thread, the index values computed so far
        tid = tid_of_lane(p)
        memo = memos.setdefault(tid, {})
        r, c = (_index_value(x, tid, memo) for x in op.operands[1:3])
        addr.append((*_view_key(op.operands[0], tid, memos), r, c))
    out = {}
    for t in range(32):
        for i in range(regs):
            m = perm[i]
            for j in range(2):
                if trans:
                    buf, shift, r, c = addr[8 * m + 2 * (t % 4) + j]
                    out[t, i, j] = (buf, shift, r, c + t // 4)
                else:
                    buf, shift, r, c = addr[8 * m + t // 4]
                    out[t, i, j] = (buf, shift, r, c + 2 * (t % 4) + j)
    return out


@pytest.mark.parametrize("tile", ["small", "large"])
def test_mma_fragments_hold_the_tiles_elements(tile: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """After the nvgpu lowering, thread by thread (index math evaluated per thread, the
    PTX semantics of cp.async and ldmatrix applied) for block 0's first step: the
    copies put global elements into the staged tiles, and every mma.sync's A registers
    then hold A[m0 + t/4 + 8(i%2), k0 + 2(t%4) + j + 8(i/2)] and its B registers
    B[k0 + 2(t%4) + j + 8i, n0 + t/4] (global indices), one (m0, n0, k0) per mma, the
    same k0 for A and B, in every operand layout. This is what found k-major A
    fragments wrong on a GPU (MLIR 22 swaps two matrices); here it runs on the CPU."""
    if tile == "large":
        monkeypatch.setattr(contractions, "LARGE_MIN_TILES", 1)
        m, n = 128, 128
    else:
        m, n = 64, 64
    k = 64
    for lay, maps in (("nn", (_IK, _KJ, _IJ)), ("nt", (_IK, _JK, _IJ)),
                      ("tn", (_KI, _KJ, _IJ)), ("tt", (_KI, _JK, _IJ))):
        a = (k, m) if lay[0] == "t" else (m, k)
        b = (n, k) if lay[1] == "t" else (k, n)
        module = _lowered(_contraction(lay, a, b, (m, n), maps, _PAR2, inp="bf16"),
                          stage="kernels", chip="sm_90")
        (func,) = [o for o in contractions.walk_ops(module.operation) if o.name == "gpu.func"]
        mmas = [o for o in contractions.walk_ops(func) if o.name == "nvgpu.mma.sync"]
        a_arg, b_arg = func.regions[0].blocks[0].arguments[:2]
        memos: dict = {}
        copied = _copied(func, 128, memos)
        for warp in range(4):
            seen = set()
            lane = lambda p, warp=warp: 32 * warp + p  # noqa: E731
            for mma in mmas:
                fa = _fragment_elements(mma.operands[0], lane, 4, memos)
                fb = _fragment_elements(mma.operands[1], lane, 2, memos)
                ga = {key: copied[at] for key, at in fa.items()}
                gb = {key: copied[at] for key, at in fb.items()}
                assert {src for src, _ in ga.values()} == {a_arg}, (lay, tile)
                assert {src for src, _ in gb.values()} == {b_arg}, (lay, tile)
                mk = {key: (g if lay[0] == "n" else g[::-1]) for key, (_, g) in ga.items()}
                kn = {key: (g if lay[1] == "n" else g[::-1]) for key, (_, g) in gb.items()}
                m0 = {r - (t // 4 + 8 * (i % 2)) for (t, i, j), (r, _) in mk.items()}
                ka = {c - (2 * (t % 4) + j + 8 * (i // 2)) for (t, i, j), (_, c) in mk.items()}
                kb = {r - (2 * (t % 4) + j + 8 * i) for (t, i, j), (r, _) in kn.items()}
                n0 = {c - t // 4 for (t, i, j), (_, c) in kn.items()}
                assert len(m0) == len(ka) == len(kb) == len(n0) == 1, (lay, tile)
                assert ka == kb, (lay, tile)
                seen.add((*m0, *n0, *ka))
            assert len(seen) == len(mmas), (lay, tile)  # each mma its own tile


def test_one_step_bf16_contraction_lowers() -> None:
    """A bf16 contraction whose reduced extent is one staged step (16): its loop folds
    away and nothing would be staged, and the nvgpu conversion cannot read bf16
    fragments from global memory: it takes the generic path (was an internal error);
    f16 keeps its tensor cores."""
    for inp in ("f16", "bf16"):
        text = _contraction("mm", (64, 16), (16, 64), (64, 64), (_IK, _KJ, _IJ), _PAR2,
                            inp=inp)
        ptx = _ptx(_lowered(text, chip="sm_90", format="isa"))
        assert ("mma.sync" in ptx) == (inp == "f16")
