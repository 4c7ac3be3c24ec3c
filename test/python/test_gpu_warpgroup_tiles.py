"""The sm_90a warpgroup tiles (transforms/gpu/warpgroup_tiles.py): TMA + wgmma kernels.

No GPU here: the tests check which contractions take the path, the kernels' IR and
PTX (ptxas assembles them for sm_90a), the kernel's data path block by block in an
interpreter of its IR (the copies' swizzle, the stages and mbarrier phases, the
descriptors' layouts, the epilogue; it catches a missing realignment, swapped
coordinates or halves, a parity that never flips, a refill of the buffers the MMA in
flight reads), and the host side end to end: an exported artifact, loaded with a fake
CUDA driver, encodes the tensor maps the kernel reads (the shapes, strides, boxes and
swizzle the kernel assumes) and launches the grid with the shared memory the kernel
carves up. What none of this can check is the hardware's reading of the descriptors:
the interpreter assumes the layouts upstream's nvgpu lowering encodes
(benchmarks/gpu_wgmma_probe.py is the check on a device).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from fake_cuda import build_fake_driver
from gpu_lowering import lowered as _lowered
from mlir import ir

from mlir_autodiff import gpu as adgpu
from mlir_autodiff.transforms.gpu import contractions, warpgroup_tiles
from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
CC = shutil.which("cc")

_IK, _KJ, _IJ, _JK = ("(i, j, k) -> (i, k)", "(i, j, k) -> (k, j)", "(i, j, k) -> (i, j)",
                      "(i, j, k) -> (j, k)")
_PAR2 = '"parallel", "parallel", "reduction"'


def _matmul(name: str, ashape, bshape, cshape, maps=(_IK, _KJ, _IJ), inp: str = "bf16",
            out: str = "bf16", par: str = _PAR2) -> str:
    """`out(a @ b)` on `inp` operands: the f32 accumulation of widened inputs, then a
    conversion to `out` (none for f32), as the front end writes a half matmul."""
    a, b, c = ("x".join(map(str, s)) for s in (ashape, bshape, cshape))
    am, bm, cm = (f"affine_map<{m}>" for m in maps)
    conv = "" if out == "f32" else f"""
  %e2 = tensor.empty() : tensor<{c}x{out}>
  %r = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>,
      affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}}
      ins(%m : tensor<{c}xf32>) outs(%e2 : tensor<{c}x{out}>) {{
  ^bb0(%v: f32, %o: {out}):
    %t = arith.truncf %v : f32 to {out}
    linalg.yield %t : {out}
  }} -> tensor<{c}x{out}>"""
    result = "%m" if out == "f32" else "%r"
    return f"""
func.func @{name}(%a: tensor<{a}x{inp}>, %b: tensor<{b}x{inp}>) -> tensor<{c}x{out}> {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{c}xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<{c}xf32>) -> tensor<{c}xf32>
  %m = linalg.generic {{indexing_maps = [{am}, {bm}, {cm}], iterator_types = [{par}]}}
      ins(%a, %b : tensor<{a}x{inp}>, tensor<{b}x{inp}>) outs(%f : tensor<{c}xf32>) {{
  ^bb0(%x: {inp}, %y: {inp}, %acc: f32):
    %xa = arith.extf %x : {inp} to f32
    %ya = arith.extf %y : {inp} to f32
    %p = arith.mulf %xa, %ya : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }} -> tensor<{c}xf32>{conv}
  return {result} : tensor<{c}x{out}>
}}"""


@pytest.fixture(autouse=True)
def _large_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """The large (128 x 128) tile for every size here: the warpgroup tile replaces it."""
    monkeypatch.setattr(contractions, "LARGE_MIN_TILES", 1)


def _kernels(text: str, **options) -> str:
    return str(_lowered(text, stage="kernels", **options))


def _ptx(text: str, **options) -> str:
    module = _lowered(text, format="isa", **options)
    return "\n".join(obj.data.decode() for obj in adgpu.gpu_objects(module))


NN = _matmul("nn", (256, 256), (256, 384), (256, 384))
#: 32 steps of 64: a loop LLVM keeps (the 4 steps of NN are unrolled)
NN_LONG = _matmul("nn_long", (256, 2048), (2048, 384), (256, 384))


def test_wgmma_needs_sm90a() -> None:
    with pytest.raises(ValueError, match="wgmma needs chip=sm_90a"):
        LowerToGpu(chip="sm_90", wgmma=True)
    with pytest.raises(ValueError, match="wgmma needs chip=sm_90a"):
        LowerToGpu.from_options({"chip": "sm_100a", "wgmma": "true"})


def test_off_by_default_and_the_parallel_stage_is_the_same() -> None:
    """Without the option (or on another chip) the mma.sync tile stays; the CPU-runnable
    `parallel` stage is the same with it (the rewrite is a kernel-stage one)."""
    for options in ({"chip": "sm_90a"}, {"chip": "sm_90"}):
        kernels = _kernels(NN, **options)
        assert "nvgpu.tma.create.descriptor" not in kernels and "nvgpu.mma.sync" in kernels
    assert str(_lowered(NN, chip="sm_90a", stage="parallel", wgmma=True)) == \
        str(_lowered(NN, chip="sm_90a", stage="parallel"))


def test_kernel_stage_launch() -> None:
    """One launch: a 128-thread block per 128 x 128 output tile, the stages' dynamic shared
    memory, the two tensor maps (A in 128 x 64 boxes, B in 64 x 64, 128-byte swizzle)
    passed as pointers; the mbarriers, TMA loads and warpgroup MMA in the kernel."""
    kernels = _kernels(NN, chip="sm_90a", wgmma=True)
    assert kernels.count("gpu.launch_func") == 1
    maps = re.findall(r"nvgpu\.tma\.create\.descriptor %\w+ box\[%(\w+), %(\w+)\] : "
                      r"memref<\*xbf16> -> <tensor = memref<(\d+)x(\d+)xbf16, "
                      r"#gpu\.address_space<workgroup>>, swizzle = swizzle_128b", kernels)
    assert [m[2:] for m in maps] == [("128", "64"), ("64", "64")]
    size = warpgroup_tiles.STAGES * 32768 + 1024
    launch = re.search(r"gpu\.launch_func .*", kernels).group(0)
    assert re.search(r"blocks in \(%c3, %c2, %c1\) threads in \(%c128, %c1, %c1\)", launch)
    assert f"dynamic_shared_memory_size %c{size}_i32" in launch
    assert launch.count(": !llvm.ptr") == 2
    for op in ("nvgpu.mbarrier.init", "nvgpu.tma.async.load", "nvgpu.mbarrier.try_wait.parity",
               "nvgpu.warpgroup.generate.descriptor", "nvgpu.warpgroup.mma ",
               "nvgpu.warpgroup.mma.store", "memref.extract_aligned_pointer_as_index"):
        assert op in kernels, op
    assert "nvgpu.mma.sync" not in kernels and "nvgpu.ldmatrix" not in kernels


@needs_ptxas
def test_ptx_and_cubin() -> None:
    """The kernel's PTX: per 64-deep step one warpgroup MMA of eight m64n128k16 bf16
    wgmmas (B MN-major: trans-b 1), the previous step's group waited for (wait_group 1)
    before a barrier and thread 0's refill of its buffers (three bulk tensor copies
    completing on an mbarrier); the accumulators leave through shared memory, converted
    to bf16 four at a time. ptxas assembles it for sm_90a."""
    ptx = _ptx(NN_LONG, chip="sm_90a", wgmma=True)
    assert ".target sm_90a" in ptx
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16 .*", ptx)
    assert len(mmas) == 8 and all(re.search(r"p, 1,\s+1, 0,\s+1;$", m) for m in mmas), mmas
    assert ptx.count("wgmma.fence.sync.aligned") == 1
    loop = ptx[ptx.index("wgmma.commit_group"):]
    wait1 = loop.index("wgmma.wait_group.sync.aligned \t1")
    assert wait1 < loop.index("bar.sync") < loop.index("cp.async.bulk.tensor")
    copies = re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\."
                        r"mbarrier::complete_tx::bytes", ptx)
    assert len(copies) == 3 * warpgroup_tiles.STAGES  # the prologue's stages - 1, the loop's
    assert "mbarrier.try_wait.parity.shared.b64" in ptx
    assert "mbarrier.arrive.expect_tx.shared.b64" in ptx and "prefetch.tensormap" in ptx
    assert "wgmma.wait_group.sync.aligned \t0" in ptx
    assert "ld.shared.v4.b32" in ptx and "cvt.rn.bf16x2.f32" in ptx
    assert "st.global.v2.b32" in ptx and "mma.sync" not in ptx
    module = _lowered(NN_LONG, chip="sm_90a", wgmma=True, format="bin")
    (obj,) = adgpu.gpu_objects(module)
    assert adgpu.cubin_arch(obj.data) == 90


@needs_ptxas
@pytest.mark.parametrize("layout,trans", [("nt", "0,\\s+0"), ("tn", "1,\\s+1"),
                                          ("tt", "1,\\s+0")])
def test_transposed_operands_ptx(layout: str, trans: str) -> None:
    """A stored k x m is read MN-major (trans-a 1), B stored n x k K-major (trans-b 0), by
    wgmma ops written with their own descriptors (upstream's warpgroup MMA knows neither):
    eight per 64-deep step, the copies of the operand's boxes, ptxas assembles it."""
    maps, shapes, _ = _LAYOUTS[layout]
    a, b = shapes(256, 2048, 384)
    ptx = _ptx(_matmul(layout, a, b, (256, 384), maps=maps), chip="sm_90a", wgmma=True)
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16 .*", ptx)
    assert len(mmas) == 8 and all(re.search(rf"p, 1,\s+1, {trans};$", m) for m in mmas), mmas
    assert ptx.count("wgmma.commit_group.sync.aligned") == 1
    assert "wgmma.wait_group.sync.aligned \t1" in ptx and "mma.sync" not in ptx
    module = _lowered(_matmul(layout, a, b, (256, 384), maps=maps), chip="sm_90a", wgmma=True,
                      format="bin")
    (obj,) = adgpu.gpu_objects(module)
    assert adgpu.cubin_arch(obj.data) == 90


def _batched(layout: str, batch: int, m: int, k: int, n: int, out: str = "f32") -> str:
    """A batched contraction in `layout` (a leading batch dimension on every operand)."""
    a = (batch, k, m) if layout[0] == "t" else (batch, m, k)
    b = (batch, n, k) if layout[1] == "t" else (batch, k, n)
    am = "(b, i, j, k) -> (b, k, i)" if layout[0] == "t" else "(b, i, j, k) -> (b, i, k)"
    bm = "(b, i, j, k) -> (b, j, k)" if layout[1] == "t" else "(b, i, j, k) -> (b, k, j)"
    return _matmul(f"batch_{layout}", a, b, (batch, m, n), out=out,
                   maps=(am, bm, "(b, i, j, k) -> (b, i, j)"),
                   par='"parallel", "parallel", "parallel", "reduction"')


def _wgmma_kernel(text: str) -> bool:
    return "nvgpu.tma.create.descriptor" in _kernels(text, chip="sm_90a", wgmma=True)


def test_which_contractions_take_it() -> None:
    """A and B in any of the four layouts, extents multiples of 128 x 128 x 64 with at
    least `STAGES` steps, f16 or bf16, no batch; the others keep the mma.sync tile."""
    assert _wgmma_kernel(NN)
    assert _wgmma_kernel(_matmul("f16", (128, 192), (192, 128), (128, 128), inp="f16",
                                 out="f32"))
    # B given as n x k, A as k x m (what reverse mode makes of x @ w)
    assert _wgmma_kernel(_matmul("nt", (256, 256), (384, 256), (256, 384),
                                 maps=(_IK, _JK, _IJ)))
    assert _wgmma_kernel(_matmul("tn", (256, 256), (256, 384), (256, 384),
                                 maps=("(i, j, k) -> (k, i)", _KJ, _IJ)))
    # k a multiple of 16, not of 64; k of two steps only
    assert not _wgmma_kernel(_matmul("k208", (256, 208), (208, 256), (256, 256)))
    assert not _wgmma_kernel(_matmul("k128", (256, 128), (128, 256), (256, 256)))
    # a batch (each block one matrix of it)
    assert _wgmma_kernel(_batched("nn", 2, 128, 256, 128))


def test_elementwise_epilogue_runs_on_the_accumulators() -> None:
    """`tanh(a @ b)` (f32): the epilogue on four accumulators at a time, one kernel, the
    f32 temporary gone."""
    text = _matmul("act", (128, 192), (192, 256), (128, 256), out="f32").replace(
        "  return %m : tensor<128x256xf32>\n}", """  %e2 = tensor.empty() : tensor<128x256xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>,
      affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      ins(%m : tensor<128x256xf32>) outs(%e2 : tensor<128x256xf32>) {
  ^bb0(%v: f32, %o: f32):
    %two = arith.constant 2.0 : f32
    %w = arith.mulf %v, %two : f32
    %t = math.tanh %w : f32
    linalg.yield %t : f32
  } -> tensor<128x256xf32>
  return %r : tensor<128x256xf32>
}""")
    kernels = _kernels(text, chip="sm_90a", wgmma=True)
    assert kernels.count("gpu.launch_func") == 1 and "gpu.alloc" not in kernels.split(
        "gpu.module")[0].split("func.func @act(")[0]
    assert re.search(r"arith\.mulf %\S+, %\S+ : vector<4xf32>", kernels)
    assert re.search(r"math\.tanh %\S+ : vector<4xf32>", kernels)
    assert re.search(r"vector\.store %\S+, %\S+\[%\S+, %\S+\] \{alignment = 16 : i64\} : "
                     r"memref<128x256xf32>, vector<4xf32>", kernels)


def _child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full, timeout=300)


@needs_ptxas
@pytest.mark.skipif(CC is None, reason="no C compiler `cc`")
def test_exported_artifact_encodes_the_maps_the_kernel_reads(tmp_path, monkeypatch) -> None:
    """An sm_90a export (warpgroup tiles on) run with a fake driver: per call the host
    encodes A's map (dims k, m innermost first, rows 2k bytes apart, 64 x 128 boxes)
    and B's (n, k; 64 x 64 boxes), bf16 with the 128-byte swizzle, each copied to the
    device once (the second call finds both), and launches (n/128, m/128) blocks of 128
    threads with the stages' shared memory, opted in above 48 KB; with B given as n x k
    (`a @ b.T`), B's map is of 64 x 128 boxes of its rows."""
    import ml_dtypes

    import mlir_autodiff as ad

    monkeypatch.setattr(warpgroup_tiles, "ENABLED", True)
    m, k, n = 256, 192, 384
    a = np.zeros((m, k), ml_dtypes.bfloat16)
    b = np.zeros((k, n), ml_dtypes.bfloat16)
    ad.export(lambda a, b: a @ b, a, b, path=tmp_path / "mm", device="gpu", chip="sm_90a")
    # B given as n x k: one 128 x 64 box of its rows per step (K-major)
    ad.export(lambda a, b: a @ b.T, a, b.T.copy(), path=tmp_path / "nt", device="gpu",
              chip="sm_90a")
    manifest = json.loads((tmp_path / "mm" / "manifest.json").read_text())
    assert manifest["target"]["chip"] == "sm_90a"
    driver = build_fake_driver(tmp_path / "fake", CC)
    log = tmp_path / "driver.log"
    proc = _child(f"""
        import ml_dtypes, numpy as np
        from mlir_autodiff import aot
        g = aot.load({str(tmp_path / "mm")!r})
        a = np.zeros(({m}, {k}), ml_dtypes.bfloat16)
        b = np.zeros(({k}, {n}), ml_dtypes.bfloat16)
        for _ in range(2):
            g(a, b)
        print("launches", g.kernel_launches())
        print("nt", aot.load({str(tmp_path / "nt")!r})(a, b.T.copy()).shape)
    """, {"AUTODIFF_CUDA_DRIVER": str(driver), "FAKE_CUDA_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    assert "launches 2" in proc.stdout
    lines = log.read_text().splitlines()
    maps = [re.sub(r"addr=\d+ ", "", x) for x in lines if x.startswith("cuTensorMapEncodeTiled")]
    flags = "elementstrides=1,1 interleave=0 swizzle=3 l2=0 oob=0"
    want_a = f"cuTensorMapEncodeTiled type=9 rank=2 dims={k},{m} strides={2 * k} box=64,128 "
    want_b = f"cuTensorMapEncodeTiled type=9 rank=2 dims={n},{k} strides={2 * n} box=64,64 "
    want_bt = f"cuTensorMapEncodeTiled type=9 rank=2 dims={k},{n} strides={2 * k} box=64,128 "
    assert maps == [want_a + flags, want_b + flags] * 2 + [want_a + flags, want_bt + flags], maps
    assert f"nt ({m}, {n})" in proc.stdout
    # each map copied once: two per artifact (each carries its own runtime)
    assert sum(x == "cuMemcpyHtoD_v2 128" for x in lines) == 4
    smem = warpgroup_tiles.STAGES * 32768 + 1024
    launches = [x for x in lines if x.startswith("cuLaunchKernel")]
    assert len(launches) == 3 and all(
        x.startswith(f"cuLaunchKernel grid={n // 128},{m // 128},1 block=128,1,1 smem={smem} ")
        for x in launches), launches
    assert f"cuFuncSetAttribute 8 {smem}" in lines


@needs_ptxas
@pytest.mark.skipif(CC is None, reason="no C compiler `cc`")
def test_device_probe_prepares_and_runs(tmp_path) -> None:
    """benchmarks/gpu_wgmma_probe.py (what a device session runs first): it exports its
    matmuls here; there, without a device it says so and exits 0, and on a fake driver
    (kernels that compute nothing) every case is reported wrong, exit 1, the outputs
    kept for a closer look."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks",
                          "gpu_wgmma_probe.py")
    folder = tmp_path / "probe"
    proc = subprocess.run([sys.executable, script, "--prepare", str(folder)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    env = dict(os.environ, AUTODIFF_CUDA_DRIVER="/nonexistent/libcuda.so.1")
    proc = subprocess.run([sys.executable, script, "--run", str(folder)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0 and proc.stdout.startswith("no CUDA device:"), proc.stderr
    driver = build_fake_driver(tmp_path / "fake", CC)
    env = dict(os.environ, AUTODIFF_CUDA_DRIVER=str(driver))
    proc = subprocess.run([sys.executable, script, "--run", str(folder), "--json",
                           str(tmp_path / "p.json")], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 1, proc.stderr
    results = json.loads((tmp_path / "p.json").read_text())
    assert len(results) == 45 and all(r["wrong"] > 0 for r in results)
    assert len(np.load(tmp_path / "p.npz").files) == 45


# -- the kernel, block by block, on the CPU ------------------------------------------------
#
# An interpreter for the kernel stage's gpu.func: every block of the grid, its threads in
# lockstep (per-thread values are numpy arrays; warpgroup values one per 128 threads),
# shared memory as bytes. The nvgpu and nvvm ops are given the semantics the kernel relies
# on: a bulk tensor copy writes its box with the 128-byte swizzle (address bits 4-6 XOR
# bits 7-9) and completes its bytes on the slot's mbarrier; a wait on a phase that has not
# completed is a deadlock; upstream's warpgroup MMA reads A from its descriptor's base as
# 128-byte swizzled rows and B as 64-column boxes 8 KiB apart (the layouts its descriptor
# lowering encodes); a `wgmma.mma_async` decodes its 64-bit descriptors as the PTX ISA lays
# out swizzled K-major and MN-major operands (`_Sim._operand`); a swizzled operand starts on
# a 1 KiB boundary (the pattern's period: the descriptors carry no base offset); a copy
# must not land in the buffers a wgmma group still in flight reads.

_SMEM_BASE = 48  # where dynamic shared memory starts: after the static mbarriers


class _Sim:
    def __init__(self, func, grid, threads, smem_bytes, args):
        self.func, self.grid, self.args = func, grid, args
        self.threads, self.smem_bytes = threads, smem_bytes

    # shared memory
    @staticmethod
    def _swizzled(addr):
        return addr ^ (((addr >> 7) & 7) << 4)

    def _write16(self, addrs, values):  # 16-bit elements at byte addresses
        bits = np.asarray(values).view(np.uint16).ravel()
        a = self._swizzled(np.asarray(addrs).ravel())
        self.smem[a] = (bits & 0xFF).astype(np.uint8)
        self.smem[a + 1] = (bits >> 8).astype(np.uint8)

    def _read16(self, addrs, dtype):
        a = self._swizzled(np.asarray(addrs))
        bits = self.smem[a].astype(np.uint16) | (self.smem[a + 1].astype(np.uint16) << 8)
        return bits.view(dtype)

    def run(self):
        for bz, by, bx in np.ndindex(*self.grid[::-1]):
            self.smem = np.zeros(_SMEM_BASE + self.smem_bytes + 64, np.uint8)
            self.block = (bx, by, bz)
            self.inflight = None  # the shared buffers the MMA in flight reads
            self.groups, self.pending = [], set()  # committed wgmma groups, the next
            env = dict(zip(self.func.regions[0].blocks[0].arguments, self.args))
            self._block(self.func.regions[0].blocks[0], env)

    def _block(self, block, env):
        for op in block.operations:
            op = op.operation
            if op.name in ("scf.yield", "gpu.return"):
                return [env[v] for v in op.operands]
            self._op(op, env)
        return []

    def _op(self, op, env):
        name = op.name
        val = lambda v: env[v]  # noqa: E731
        ops = [env.get(v) for v in op.operands]
        res = None
        if name == "arith.constant":
            attr = op.attributes["value"]
            if isinstance(attr, ir.DenseElementsAttr):
                res = np.asarray(attr.get_splat_value().value, np.float32)
            elif isinstance(attr, ir.BoolAttr):
                res = attr.value
            elif isinstance(attr, ir.FloatAttr):
                res = np.float32(attr.value)
            else:
                res = ir.IntegerAttr(attr).value
        elif name in ("arith.andi", "arith.ori", "arith.xori", "arith.shrui"):
            logical = str(op.results[0].type) == "i1"
            f = {"arith.andi": (np.logical_and, np.bitwise_and),
                 "arith.ori": (np.logical_or, np.bitwise_or),
                 "arith.xori": (np.logical_xor, np.bitwise_xor),
                 "arith.shrui": (None, np.right_shift)}[name][0 if logical else 1]
            res = f(*[np.asarray(x, bool if logical else np.int64) for x in ops])
        elif name in _INT_OPS:
            res = _INT_OPS[name](*ops)
        elif name == "arith.index_cast":
            res = ops[0]
        elif name == "arith.cmpi":
            pred = ir.IntegerAttr(op.attributes["predicate"]).value
            res = {0: np.equal, 1: np.not_equal, 6: np.less, 8: np.greater}[pred](*ops)
        elif name == "arith.select":
            res = np.where(ops[0], ops[1], ops[2])
        elif name in ("arith.truncf", "arith.mulf", "arith.addf", "math.tanh"):
            out_t = ir.VectorType(op.results[0].type).element_type
            f = {"arith.truncf": lambda x: x, "arith.mulf": np.multiply,
                 "arith.addf": np.add, "math.tanh": np.tanh}[name]
            r = np.asarray(f(*[np.asarray(x, np.float32) for x in ops]), np.float32)
            res = r.astype(_DTYPES[str(out_t)]) if name == "arith.truncf" else r
        elif name == "gpu.thread_id":
            res = np.arange(self.threads)
        elif name == "gpu.block_id":
            res = self.block["xyz".index(str(op.attributes["dimension"])[-2])]
        elif name == "gpu.barrier" or name == "nvgpu.tma.prefetch.descriptor":
            pass
        elif name == "gpu.dynamic_shared_memory":
            res = ("smem", 0)
        elif name == "memref.extract_aligned_pointer_as_index":
            assert ops[0] == ("smem", 0)
            res = _SMEM_BASE
        elif name == "memref.view":  # (a warpgroup's rows: the shift differs by warpgroup)
            t = ir.MemRefType(op.results[0].type)
            res = ("view", _SMEM_BASE + np.asarray(ops[1]), tuple(t.shape), [t.shape[1], 1])
        elif name == "memref.reinterpret_cast":
            t = ir.MemRefType(op.results[0].type)
            strides = [int(s) for s in re.findall(r"\d+", str(t.layout).split("[")[1])]
            res = ("view", ops[0][1], tuple(t.shape), strides)
        elif name == "memref.memory_space_cast":
            res = ops[0]
        elif name == "builtin.unrealized_conversion_cast":
            res = ops[0]
        elif name == "nvgpu.mbarrier.create":
            n = int(re.search(r"num_barriers = (\d+)", str(op.results[0].type)).group(1))
            res = {"count": [0] * n, "arrivals": [0] * n, "pending": [0] * n,
                   "phases": [0] * n}
        elif name == "nvgpu.mbarrier.init":
            v = op.opview
            for _ in range(self._active(env[v.predicate])):
                b, i = val(v.barriers), _uniform(val(v.mbarId))
                b["count"][i] = b["arrivals"][i] = _uniform(val(v.count))
        elif name == "nvgpu.mbarrier.arrive.expect_tx":
            v = op.opview
            for _ in range(self._active(env[v.predicate])):
                b, i = val(v.barriers), _uniform(val(v.mbarId))
                b["arrivals"][i] -= 1
                b["pending"][i] += _uniform(val(v.txcount))
                _complete(b, i)
        elif name == "nvgpu.tma.async.load":
            v = op.opview
            for _ in range(self._active(env[v.predicate])):
                self._tma(val(v.dst), val(v.tensorMapDescriptor),
                          [_uniform(val(c)) for c in v.coordinates], val(v.barriers),
                          _uniform(val(v.mbarId)))
        elif name == "nvgpu.mbarrier.try_wait.parity":
            v = op.opview
            b, i = val(v.barriers), _uniform(val(v.mbarId))
            parity = int(_uniform(val(v.phaseParity)))
            assert b["phases"][i] % 2 != parity, f"deadlock: waiting on mbarrier {i}"
        elif name == "nvgpu.warpgroup.mma.init.accumulator":  # one matrix per warpgroup
            rows, cols = map(int, re.search(r"vector<(\d+)x(\d+)x", str(op.results[0].type))
                             .groups())
            res = [np.zeros((rows, cols), np.float32) for _ in range(self.threads // 128)]
        elif name == "nvgpu.warpgroup.generate.descriptor":  # per warpgroup
            view = ops[0]
            bases = [_uniform(np.broadcast_to(view[1], (self.threads,))[g:g + 128])
                     for g in range(0, self.threads, 128)]
            assert all(b % 1024 == 0 for b in bases), \
                "a swizzled tile must start on a 1 KiB boundary"
            res = (bases, view[2])
        elif name == "nvgpu.warpgroup.mma":
            (a_bases, (rows, _)), (b_bases, (_, cols)), accs = ops
            res, self.inflight = [], set()
            for g, acc in enumerate(accs):
                m, k = np.indices((rows, 64))
                a = self._read16(a_bases[g] + m * 128 + k * 2, self.dtype).astype(np.float32)
                k, n = np.indices((64, cols))
                b = self._read16(b_bases[g] + (n // 64) * 8192 + k * 128 + (n % 64) * 2,
                                 self.dtype).astype(np.float32)
                self.inflight |= {(a_bases[g], rows * 128), (b_bases[g], cols * 128)}
                res.append(acc + a @ b)
        elif name == "nvvm.wgmma.fence.aligned":
            self.pending = set()
        elif name == "nvvm.wgmma.mma_async":
            self._wgmma(op, ops, env)
            return
        elif name == "nvvm.wgmma.commit.group.sync.aligned":
            self.groups.append(self.pending)
        elif name == "nvvm.wgmma.wait.group.sync.aligned":
            keep = ir.IntegerAttr(op.attributes["group"]).value
            self.groups = self.groups[len(self.groups) - keep:] if keep else []
            self.inflight = set().union(*self.groups) if self.groups else None
        elif name == "llvm.extractvalue":  # a warpgroup's m64 half of its accumulators
            (h,) = list(ir.DenseI64ArrayAttr(op.attributes["position"]))
            res = [acc[64 * h:64 * (h + 1)] for acc in ops[0]]
        elif name == "llvm.insertvalue":
            (h,) = list(ir.DenseI64ArrayAttr(op.attributes["position"]))
            v = op.opview
            res = [np.concatenate([acc[:64 * h], part, acc[64 * (h + 1):]])
                   for part, acc in zip(env[v.value], env[v.container])]
        elif name == "nvgpu.warpgroup.mma.store":
            accs, view = ops
            assert self.inflight is None, "accumulators stored while an MMA is in flight"
            for g, acc in enumerate(accs):  # rows by the warps' index in the block
                r, c = np.indices(acc.shape)
                addr = _uniform(view[1]) + ((r + 64 * g) * view[3][0] + c) * 4
                self._write32(addr, acc)
        elif name == "vector.load":
            view, r, c = ops
            addr = _uniform(view[1]) + (np.asarray(r) * view[3][0] + np.asarray(c))[:, None] \
                * 4 + np.arange(4) * 4
            res = self._read32(addr)
        elif name == "vector.store":
            value, dest, r, c = ops
            for t in range(self.threads):
                dest[np.asarray(r)[t], np.asarray(c)[t]:np.asarray(c)[t] + 4] = value[t]
        elif name == "scf.for":
            self._for(op, env)
            return
        else:
            raise AssertionError(f"the simulator does not know {name}")
        if op.results:
            env[op.results[0]] = res

    def _write32(self, addr, values):
        a = np.asarray(addr).ravel()
        data = np.asarray(values, np.float32).ravel().view(np.uint8).reshape(-1, 4)
        for i in range(4):
            self.smem[a + i] = data[:, i]

    def _read32(self, addr):
        a = np.asarray(addr)
        raw = np.stack([self.smem[a + i] for i in range(4)], axis=-1)
        return raw.copy().view(np.float32)[..., 0]

    def _wgmma(self, op, ops, env) -> None:
        """wgmma.mma_async m64nNk16, per warpgroup: the descriptors decoded as the PTX ISA
        lays out 128-byte swizzled operands, K-major (8-row groups `stride` apart, rows
        128 bytes apart, 16 reduced elements along a row) or MN-major (64-wide blocks
        `leading` apart, 8-row groups of the reduced dimension `stride` apart)."""
        text = str(op)
        n = int(re.search(r"n = (\d+)", text).group(1))
        a_layout, b_layout = re.findall(r"<(row|col)>\]", text)
        v = op.opview
        descs_a, descs_b, accs = env[v.descriptorA], env[v.descriptorB], env[v.inouts]
        res = []
        for g, acc in enumerate(accs):
            da = _uniform(np.broadcast_to(descs_a, (self.threads,))[128 * g:128 * (g + 1)])
            db = _uniform(np.broadcast_to(descs_b, (self.threads,))[128 * g:128 * (g + 1)])
            a = self._operand(da, 64, k_major=a_layout == "row")  # (64, 16)
            b = self._operand(db, n, k_major=b_layout == "col").T  # (16, n)
            res.append(acc + a @ b)
        env[op.results[0]] = res

    def _operand(self, desc: int, extent: int, k_major: bool) -> np.ndarray:
        """An MMA operand, `extent` x 16 (rows or columns by the 16 reduced elements)."""
        assert desc >> 62 == 1, "not the 128-byte swizzle"
        start = (desc & 0x3FFF) << 4
        lead, stride = ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4
        r, kk = np.indices((extent, 16))
        if k_major:
            assert (start & ~127) % 1024 == 0, "a swizzled tile must start on a 1 KiB boundary"
            addr = start + (r // 8) * stride + (r % 8) * 128 + kk * 2
        else:
            assert start % 1024 == 0, "a swizzled tile must start on a 1 KiB boundary"
            addr = start + (r // 64) * lead + (kk // 8) * stride + (kk % 8) * 128 + (r % 64) * 2
        low, high = int(addr.min()) & ~127, int(addr.max()) | 127  # the 128-byte rows read
        self.pending |= {(low, high + 1 - low)}
        return self._read16(addr, self.dtype).astype(np.float32)

    def _active(self, pred) -> int:
        return int(np.count_nonzero(np.broadcast_to(np.asarray(pred), (self.threads,))))

    def _tma(self, dst, tmap, coords, bars, slot):
        array, (rows, cols) = tmap
        at = _uniform(dst[1])
        assert dst[2] == (rows, cols) and at % 1024 == 0, (dst, rows, cols)
        for base, size in self.inflight or ():
            assert at + rows * cols * 2 <= base or base + size <= at, \
                "a copy into buffers an MMA reads"
        x, y = coords  # innermost first: column, row
        box = np.zeros((rows, cols), array.dtype)
        part = array[y:y + rows, x:x + cols]
        box[:part.shape[0], :part.shape[1]] = part
        r, c = np.indices((rows, cols))
        self._write16(at + r * (cols * 2) + c * 2, box)
        self.dtype = array.dtype
        bars["pending"][slot] -= rows * cols * 2
        _complete(bars, slot)

    def _for(self, op, env):
        v = op.opview
        lo, hi, st = (_uniform(env[x]) for x in (v.lowerBound, v.upperBound, v.step))
        carried = [env[x] for x in v.initArgs]
        body = op.regions[0].blocks[0]
        for i in range(lo, hi, st):
            local = dict(env)
            local[body.arguments[0]] = i
            for arg, value in zip(list(body.arguments)[1:], carried):
                local[arg] = value
            carried = self._block(body, local)
        for r, value in zip(op.results, carried):
            env[r] = value


_INT_OPS = {
    "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b, "arith.remui": lambda a, b: a % b,
    "arith.divui": lambda a, b: a // b,
}
_DTYPES = {"f32": np.float32}


def _uniform(x):
    a = np.asarray(x)
    assert (a == a.ravel()[0]).all(), "a value the kernel needs uniform differs by thread"
    return a.ravel()[0].item()


def _complete(bars, slot) -> None:
    if bars["arrivals"][slot] == 0 and bars["pending"][slot] == 0:
        bars["phases"][slot] += 1
        bars["arrivals"][slot] = bars["count"][slot]


def _simulate(text: str, a: np.ndarray, b: np.ndarray, out_dtype,
              out_shape: tuple[int, int]) -> np.ndarray:
    import ml_dtypes

    _DTYPES["bf16"] = ml_dtypes.bfloat16
    _DTYPES["f16"] = np.float16
    out_rows, out_cols = out_shape
    module = _lowered(text, stage="kernels", chip="sm_90a", wgmma=True)
    from mlir_autodiff.transforms.ad_support import walk_ops
    (func,) = [o for o in walk_ops(module.operation) if o.name == "gpu.func"]
    (launch,) = [o for o in walk_ops(module.operation) if o.name == "gpu.launch_func"]
    grid, threads = ([ir.IntegerAttr(v.owner.attributes["value"]).value for v in vs]
                     for vs in (launch.operands[1:4], launch.operands[4:5]))
    size = int(re.search(r"dynamic_shared_memory_size %c(\d+)_i32", str(launch)).group(1))
    # each kernel argument: a tensor map of the host function's first or second
    # argument (traced back through the casts to its encoding), or the output
    host_args = list(launch.parent.regions[0].blocks[0].arguments) if \
        launch.parent.name == "func.func" else \
        list(launch.parent.parent.regions[0].blocks[0].arguments)
    # (batched operands are 2-D views of their stacked matrices)
    c = np.zeros((out_rows, out_cols), out_dtype)
    a2, b2 = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    args = []
    for v in launch.opview.kernelOperands:
        o = v.owner.operation if isinstance(v.owner, ir.OpView) else v.owner
        while isinstance(o, ir.Operation) and o.name in ("builtin.unrealized_conversion_cast",
                                                         "memref.cast",
                                                         "memref.collapse_shape"):
            v = o.operands[0]
            o = v.owner.operation if isinstance(v.owner, ir.OpView) else v.owner
        if isinstance(o, ir.Operation) and o.name == "nvgpu.tma.create.descriptor":
            source = o.operands[0].owner.operation.operands[0]  # the memref.cast's
            if source not in host_args:  # through the batch's 2-D view
                source = source.owner.operation.operands[0]
            rows, cols = map(int, re.search(r"memref<(\d+)x(\d+)x", str(o.results[0].type))
                             .groups())
            args.append(((a2, b2)[host_args.index(source)], (rows, cols)))
        else:
            args.append(c)
    _Sim(func, grid, threads[0], size, args).run()
    return c


_KI = "(i, j, k) -> (k, i)"
#: layout -> (maps, A's shape, B's shape for m, k, n; a @ b from them)
_LAYOUTS = {
    "nn": ((_IK, _KJ, _IJ), lambda m, k, n: ((m, k), (k, n)), lambda a, b: a @ b),
    "nt": ((_IK, _JK, _IJ), lambda m, k, n: ((m, k), (n, k)), lambda a, b: a @ b.T),
    "tn": ((_KI, _KJ, _IJ), lambda m, k, n: ((k, m), (k, n)), lambda a, b: a.T @ b),
    "tt": ((_KI, _JK, _IJ), lambda m, k, n: ((k, m), (n, k)), lambda a, b: a.T @ b.T),
}


@pytest.mark.parametrize("layout,stages,tile_n", [
    ("nn", 2, 128), ("nn", 3, 128), ("nn", 4, 128), ("nn", 2, 256), ("nn", 3, 256),
    ("nn own", 3, 128), ("nn own", 3, 256), ("nt", 3, 128), ("nt", 2, 256),
    ("tn", 3, 128), ("tn", 2, 256), ("tt", 3, 128), ("tt", 3, 256)])
def test_kernel_block_by_block_computes_the_matmul(layout, stages, tile_n, monkeypatch) -> None:
    """The kernel interpreted block by block (see `_Sim`) on small integers (exact in
    bf16 and f32), each operand row-major or transposed (what reverse mode makes of a
    matmul: the MMA reads A MN-major, B K-major): 2 x 3 (or 2 x 2 of 128 x 256: two
    warpgroups) output tiles, 7 steps of 64 (the mbarrier phases wrap around the stages
    twice or more), bf16 and f32 results; every element is the product."""
    import ml_dtypes

    monkeypatch.setattr(warpgroup_tiles, "STAGES", stages)
    monkeypatch.setattr(warpgroup_tiles, "TILE_N", tile_n)
    if layout == "nn own":  # row-major operands through the descriptors written here
        monkeypatch.setattr(warpgroup_tiles, "OWN_DESCRIPTORS", True)
        layout = "nn"
    rng = np.random.default_rng(stages)
    m, k, n = 256, 448, 384 if tile_n == 128 else 512
    maps, shapes, product = _LAYOUTS[layout]
    ashape, bshape = shapes(m, k, n)
    a = rng.integers(-3, 4, ashape).astype(ml_dtypes.bfloat16)
    b = rng.integers(-3, 4, bshape).astype(ml_dtypes.bfloat16)
    want = product(a.astype(np.float32), b.astype(np.float32))
    got = _simulate(_matmul(layout, ashape, bshape, (m, n), maps=maps, out="f32"), a, b,
                    np.float32, (m, n))
    np.testing.assert_array_equal(got, want)
    if layout == "nn":
        got = _simulate(_matmul(layout, ashape, bshape, (m, n), maps=maps), a, b,
                        ml_dtypes.bfloat16, (m, n))
        np.testing.assert_array_equal(got, want.astype(ml_dtypes.bfloat16))


@pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
def test_batched_kernel_block_by_block(layout) -> None:
    """A batch of 3 (each block one matrix's tile: the operands are 2-D views of their
    stacked matrices, the grid's third dimension the batch), interpreted block by block:
    every element of every matrix is exact."""
    import ml_dtypes

    rng = np.random.default_rng(1)
    bt, m, k, n = 3, 128, 256, 256
    a = rng.integers(-3, 4, (bt, k, m) if layout[0] == "t" else (bt, m, k))
    b = rng.integers(-3, 4, (bt, n, k) if layout[1] == "t" else (bt, k, n))
    a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    want = (af.transpose(0, 2, 1) if layout[0] == "t" else af) @ \
        (bf.transpose(0, 2, 1) if layout[1] == "t" else bf)
    got = _simulate(_batched(layout, bt, m, k, n), a, b, np.float32, (bt * m, n))
    np.testing.assert_array_equal(got.reshape(bt, m, n), want)


@needs_ptxas
@pytest.mark.skipif(CC is None, reason="no C compiler `cc`")
def test_gpu_check_exports_sm90a_rows_with_warpgroup_tiles(tmp_path) -> None:
    """`gpu_check.py --prepare --chip sm_90a` turns the warpgroup tiles on: its bf16
    contraction row's artifact encodes tensor maps when it runs (here on a fake driver);
    the warpgroup variant rows are prepared for sm_90a only (elsewhere they would be
    the mma.sync tile again)."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "gpu_check.py")
    folder = tmp_path / "check"
    proc = subprocess.run([sys.executable, script, "--prepare", str(folder), "--chip", "sm_90a",
                           "--only", "bf16 contraction nt"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((folder / "rows.json").read_text())
    assert meta["chip"] == "sm_90a" and [r["key"] for r in meta["rows"]] == [
        "bf16 contraction nt 2048x256 x 1024x256"]
    driver = build_fake_driver(tmp_path / "fake", CC)
    log = tmp_path / "driver.log"
    env = dict(os.environ, AUTODIFF_CUDA_DRIVER=str(driver), FAKE_CUDA_LOG=str(log))
    proc = subprocess.run([sys.executable, script, "--run", str(folder), "--no-peers",
                           "--in-process"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 1, proc.stderr  # wrong: the fake computes nothing
    maps = [x for x in log.read_text().splitlines() if x.startswith("cuTensorMapEncodeTiled")]
    assert maps and all("box=64,128" in x and "swizzle=3" in x for x in maps), maps[:2]
    proc = subprocess.run([sys.executable, script, "--prepare", str(tmp_path / "sm90"),
                           "--only", "bf16 matmul wgmma"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "sm90" / "rows.json").read_text())["rows"] == []
