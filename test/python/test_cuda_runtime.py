"""The C runtime behind exported GPU artifacts (csrc/cuda_runtime.c).

No GPU is needed: every test builds the runtime and a fake CUDA driver
(``libcuda.so.1`` written below) that logs each driver call, hands out host
memory for device allocations and copies with memcpy.  Each scenario runs in
its own Python process because the runtime reads AUTODIFF_CUDA_DRIVER and
loads the driver once per process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_cuda import build_fake_driver

import mlir_autodiff

RUNTIME_SOURCE = Path(mlir_autodiff.__file__).parent / "csrc" / "cuda_runtime.c"
CC = shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler `cc`")



# Prelude of every scenario script: loads the runtime through ctypes with the
# argument types of the LLVM declarations that gpu-to-llvm emits.
PRELUDE = """
import ctypes, os, sys
P, I64, I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
rt = ctypes.CDLL(sys.argv[1])
sig = {
    "mgpuModuleLoad": (P, [P, I64]),
    "mgpuModuleLoadJIT": (P, [P, I32]),
    "mgpuModuleUnload": (None, [P]),
    "mgpuModuleGetFunction": (P, [P, ctypes.c_char_p]),
    "mgpuLaunchKernel": (None, [P] + [I64] * 6 + [I32, P, P, P, I64]),
    "mgpuLaunchClusterKernel": (None, [P] + [I64] * 9 + [I32, P, P, P, I64]),
    "mgpuStreamCreate": (P, []),
    "mgpuStreamDestroy": (None, [P]),
    "mgpuStreamSynchronize": (None, [P]),
    "mgpuStreamWaitEvent": (None, [P, P]),
    "mgpuEventCreate": (P, []),
    "mgpuEventDestroy": (None, [P]),
    "mgpuEventRecord": (None, [P, P]),
    "mgpuEventSynchronize": (None, [P]),
    "mgpuMemAlloc": (P, [I64, P, ctypes.c_int8]),
    "mgpuMemFree": (None, [P, P]),
    "mgpuMemcpy": (None, [P, P, I64, P]),
    "mgpuMemset32": (None, [P, I32, I64, P]),
    "mgpuMemset16": (None, [P, ctypes.c_int16, I64, P]),
    "mgpuMemHostRegisterMemRef": (None, [I64, P, I64]),
    "mgpuMemHostUnregisterMemRef": (None, [I64, P, I64]),
    "mgpuSetDefaultDevice": (None, [I32]),
    "mgpuTensorMapEncodeTiledMemref": (P, [I64, P, I64, I64, I64, I64, I64, P]),
    "autodiff_cuda_error": (ctypes.c_char_p, []),
    "autodiff_cuda_clear_error": (None, []),
    "autodiff_cuda_launch_count": (ctypes.c_longlong, []),
    "autodiff_cuda_reset_counters": (None, []),
    "autodiff_cuda_kernel_ms": (ctypes.c_double, []),
    "autodiff_cuda_launch_ms": (ctypes.c_longlong, [ctypes.POINTER(ctypes.c_double),
                                                    ctypes.c_longlong]),
}
for name, (res, args) in sig.items():
    getattr(rt, name).restype = res
    getattr(rt, name).argtypes = args

def err():
    e = rt.autodiff_cuda_error()
    return None if e is None else e.decode()

def log(msg):
    with open(os.environ["FAKE_CUDA_LOG"], "a") as f:
        f.write("# " + msg + "\\n")

IMAGE = ctypes.create_string_buffer(b"FATBIN")
"""


def _compile(tmp: Path, source: Path, out: Path, *flags: str) -> None:
    cmd = [
        CC,
        "-std=c11",
        "-O2",
        "-fPIC",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-shared",
        *flags,
        str(source),
        "-o",
        str(out),
        "-ldl",
        "-lpthread",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cudart")
    runtime = tmp / "libautodiff_cuda.so"
    _compile(tmp, RUNTIME_SOURCE, runtime)
    drivers = {name: build_fake_driver(tmp / name, CC, *flags)
               for name, flags in {"pools": (), "nopools": ("-DFAKE_NO_POOLS",)}.items()}
    return runtime, drivers


def _run(built, tmp_path, body, driver="pools", env=None):
    """Runs PRELUDE + body in a fresh process; returns (stdout, driver log)."""
    runtime, drivers = built
    script = tmp_path / "scenario.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    log = tmp_path / "driver.log"
    if log.exists():
        log.unlink()
    full_env = dict(os.environ)
    full_env.pop("AUTODIFF_CUDA_PROFILE", None)
    full_env.update(FAKE_CUDA_LOG=str(log), AUTODIFF_CUDA_DRIVER=str(drivers[driver]))
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, str(script), str(runtime)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = log.read_text().splitlines() if log.exists() else []
    return proc.stdout, lines


INIT_POOLS = [
    "cuInit 0",
    "cuDeviceGet 0",
    "cuDevicePrimaryCtxRetain 0 -> ctx1",
    "cuCtxSetCurrent ctx1",
    "cuDeviceGetAttribute 115",
    "cuDeviceGetDefaultMemPool 0 -> pool2",
    f"cuMemPoolSetAttribute pool2 4 {2**64 - 1}",
]

# What one call of a lowered function does (see the host code that
# --autodiff-lower-to-gpu produces): a stream per call, device buffers,
# copies in, launch, copy out, free, sync, destroy.
ONE_CALL = """
def call(fn, data):
    n = len(data)
    host = (ctypes.c_float * n)(*data)
    out = (ctypes.c_float * n)()
    s = rt.mgpuStreamCreate()
    d = rt.mgpuMemAlloc(4 * n, s, 0)
    rt.mgpuMemcpy(d, ctypes.addressof(host), 4 * n, s)
    ptr, cnt = ctypes.c_void_p(d), ctypes.c_int(n)
    params = (ctypes.c_void_p * 2)(ctypes.addressof(ptr), ctypes.addressof(cnt))
    rt.mgpuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, s, params, None, 2)
    rt.mgpuMemcpy(ctypes.addressof(out), d, 4 * n, s)
    rt.mgpuMemFree(d, s)
    rt.mgpuStreamSynchronize(s)
    rt.mgpuStreamDestroy(s)
    return list(out)
"""


def test_round_trip_sequence(built, tmp_path):
    out, lines = _run(
        built,
        tmp_path,
        ONE_CALL
        + """
mod = rt.mgpuModuleLoad(IMAGE, 6)
fn = rt.mgpuModuleGetFunction(mod, b"f_kernel")
print(call(fn, [1.0, 2.0, 3.5]))
rt.mgpuModuleUnload(mod)
print(err(), rt.autodiff_cuda_launch_count())
""",
        env={"FAKE_KERNEL_DOUBLES": "1"},
    )
    assert out.splitlines() == ["[2.0, 4.0, 7.0]", "None 1"]
    assert lines == INIT_POOLS + [
        "cuModuleLoadData FATBIN",
        "cuModuleGetFunction mod3 f_kernel",
        "cuStreamCreate flags=1 -> stream5",
        "cuMemAllocAsync 12 stream5",
        "cuMemcpyAsync 12 stream5",
        "cuLaunchKernel grid=4,1,1 block=256,1,1 smem=0 stream5",
        "cuMemcpyAsync 12 stream5",
        "cuMemFreeAsync stream5",
        "cuStreamSynchronize stream5",
        "cuModuleUnload mod3",
    ]


def test_streams_and_memory_are_cached(built, tmp_path):
    """The second call reuses the pooled stream (no cuStreamCreate, no
    cuStreamDestroy) and the driver's memory pool (no cuMemAlloc_v2)."""
    out, lines = _run(
        built,
        tmp_path,
        ONE_CALL
        + """
mod = rt.mgpuModuleLoad(IMAGE, 6)
fn = rt.mgpuModuleGetFunction(mod, b"f_kernel")
log("first")
call(fn, [1.0])
log("second")
call(fn, [1.0])
log("two at once")
a = rt.mgpuStreamCreate(); b = rt.mgpuStreamCreate()
print(a != b)
rt.mgpuStreamDestroy(a); rt.mgpuStreamDestroy(b)
rt.mgpuStreamDestroy(rt.mgpuStreamCreate())
print(rt.autodiff_cuda_launch_count(), err())
rt.autodiff_cuda_reset_counters()
print(rt.autodiff_cuda_launch_count())
""",
    )
    assert out.splitlines() == ["True", "2 None", "0"]
    second = lines[lines.index("# second") + 1 : lines.index("# two at once")]
    assert second == [
        "cuMemAllocAsync 4 stream5",
        "cuMemcpyAsync 4 stream5",
        "cuLaunchKernel grid=4,1,1 block=256,1,1 smem=0 stream5",
        "cuMemcpyAsync 4 stream5",
        "cuMemFreeAsync stream5",
        "cuStreamSynchronize stream5",
    ]
    # two live streams need one new stream; both return to the pool
    assert lines[lines.index("# two at once") + 1 :] == ["cuStreamCreate flags=1 -> stream6"]
    assert not any("cuStreamDestroy" in x or "cuMemAlloc_v2" in x for x in lines)


def test_without_memory_pools_falls_back_to_cuMemAlloc(built, tmp_path):
    out, lines = _run(
        built,
        tmp_path,
        ONE_CALL
        + """
mod = rt.mgpuModuleLoad(IMAGE, 6)
fn = rt.mgpuModuleGetFunction(mod, b"k")
print(call(fn, [5.0, 6.0]), err())
""",
        driver="nopools",
        env={"FAKE_KERNEL_DOUBLES": "1"},
    )
    assert out.splitlines() == ["[10.0, 12.0] None"]
    assert lines[:4] == INIT_POOLS[:4]
    body = lines[lines.index("cuStreamCreate flags=1 -> stream4") :]
    assert body == [
        "cuStreamCreate flags=1 -> stream4",
        "cuMemAlloc_v2 8",
        "cuMemcpyAsync 8 stream4",
        "cuLaunchKernel grid=4,1,1 block=256,1,1 smem=0 stream4",
        "cuMemcpyAsync 8 stream4",
        "cuMemFree_v2",
        "cuStreamSynchronize stream4",
    ]


def test_events_memset_host_shared_and_registration(built, tmp_path):
    out, lines = _run(
        built,
        tmp_path,
        """
s = rt.mgpuStreamCreate()
log("events")
e = rt.mgpuEventCreate()
rt.mgpuEventRecord(e, s)
t = rt.mgpuStreamCreate()
rt.mgpuStreamWaitEvent(t, e)
rt.mgpuEventSynchronize(e)
rt.mgpuEventDestroy(e)
e2 = rt.mgpuEventCreate()
print(e2 == e)
log("memset")
d = rt.mgpuMemAlloc(8, t, 0)
rt.mgpuMemset32(d, 0x01020304, 2, t)
print(list((ctypes.c_uint32 * 2).from_address(d)))
rt.mgpuMemset16(d, 7, 4, t)
print(list((ctypes.c_uint16 * 4).from_address(d)))
log("host shared")
m = rt.mgpuMemAlloc(16, None, 1)
rt.mgpuMemFree(m, t)
log("sync free")
rt.mgpuMemFree(d, None)
log("register")
class Desc(ctypes.Structure):
    _fields_ = [("alloc", P), ("aligned", P), ("offset", I64),
                ("sizes", I64 * 2), ("strides", I64 * 2)]
buf = (ctypes.c_float * 12)()
desc = Desc(ctypes.addressof(buf), ctypes.addressof(buf), 0, (3, 4), (4, 1))
rt.mgpuMemHostRegisterMemRef(2, ctypes.byref(desc), 4)
rt.mgpuMemHostUnregisterMemRef(2, ctypes.byref(desc), 4)
print(err())
log("strided")
desc.strides[1] = 2
rt.mgpuMemHostRegisterMemRef(2, ctypes.byref(desc), 4)
print(err())
""",
    )
    assert out.splitlines() == [
        "True",
        "[16909060, 16909060]",
        "[7, 7, 7, 7]",
        "None",
        "mgpuMemHostRegisterMemRef: only densely packed memrefs can be "
        "registered (dimension 1 has stride 2, expected 1)",
    ]

    def section(name):
        start = lines.index("# " + name) + 1
        rest = lines[start:]
        end = next((i for i, x in enumerate(rest) if x.startswith("# ")), len(rest))
        return rest[:end]

    assert section("events") == [
        "cuEventCreate flags=2 -> event4",
        "cuEventRecord event4 stream3",
        "cuStreamCreate flags=1 -> stream5",
        "cuStreamWaitEvent stream5 event4",
        "cuEventSynchronize event4",
    ]
    assert section("memset") == [
        "cuMemAllocAsync 8 stream5",
        "cuMemsetD32Async 16909060 2 stream5",
        "cuMemsetD16Async 7 4 stream5",
    ]
    assert section("host shared") == ["cuMemAllocManaged 16 flags=1", "cuMemFree_v2"]
    assert section("sync free") == ["cuCtxSynchronize", "cuMemFreeAsync stream0"]
    assert section("register") == ["cuMemHostRegister_v2 48 0", "cuMemHostUnregister"]
    assert section("strided") == []


def test_module_load_failure_is_recorded_and_later_calls_are_noops(built, tmp_path):
    out, lines = _run(
        built,
        tmp_path,
        """
mod = rt.mgpuModuleLoad(IMAGE, 6)
print(mod, err())
log("after")
fn = rt.mgpuModuleGetFunction(mod, b"k")
s = rt.mgpuStreamCreate()
d = rt.mgpuMemAlloc(64, s, 0)
rt.mgpuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, None, None, 0)
rt.mgpuMemcpy(d, d, 64, s)
rt.mgpuMemFree(d, s)
rt.mgpuStreamSynchronize(s)
rt.mgpuStreamDestroy(s)
rt.mgpuModuleUnload(mod)
print(fn, s, d, rt.autodiff_cuda_launch_count(), err())
rt.autodiff_cuda_clear_error()
print(err())
log("cleared")
print(rt.mgpuStreamCreate() is not None, err())
""",
        env={"FAKE_CUDA_FAIL": "cuModuleLoadData:209"},
    )
    msg = "cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU (209)"
    assert out.splitlines() == [f"None {msg}", f"None None None 0 {msg}", "None", "True None"]
    after = lines[lines.index("# after") + 1 : lines.index("# cleared")]
    assert after == []
    assert lines[lines.index("# cleared") + 1 :] == ["cuStreamCreate flags=1 -> stream3"]


def test_jit_failure_includes_the_jit_log(built, tmp_path):
    out, lines = _run(
        built,
        tmp_path,
        """
ptx = ctypes.create_string_buffer(b"PTX")
print(rt.mgpuModuleLoadJIT(ptx, 2), err())
""",
        env={"FAKE_CUDA_FAIL": "cuModuleLoadDataEx:218"},
    )
    assert out.strip() == (
        "None cuModuleLoadDataEx (JIT log: ptxas fatal: bad ptx) failed: CUDA_ERROR_FAKE (218)"
    )
    assert lines[-1] == "cuModuleLoadDataEx PTX nopts=3 opt0=7 val0=2"


def test_init_failure_is_recorded_and_sticks(built, tmp_path):
    out, lines = _run(
        built,
        tmp_path,
        """
print(rt.mgpuStreamCreate(), err())
rt.autodiff_cuda_clear_error()
print(rt.mgpuMemAlloc(4, None, 0), err())
""",
        env={"FAKE_CUDA_FAIL": "cuInit:100"},
    )
    msg = "cuInit failed: CUDA_ERROR_FAKE (100)"
    assert out.splitlines() == [f"None {msg}", f"None {msg}"]
    assert lines == ["cuInit 0"]


def test_missing_driver(built, tmp_path):
    out, lines = _run(
        built,
        tmp_path,
        """
mod = rt.mgpuModuleLoad(IMAGE, 6)
rt.mgpuModuleUnload(mod)
rt.mgpuStreamDestroy(rt.mgpuStreamCreate())
print(mod, err())
""",
        env={"AUTODIFF_CUDA_DRIVER": str(tmp_path / "nowhere" / "libcuda.so.1")},
    )
    assert out.startswith("None cannot load the CUDA driver ")
    assert str(tmp_path / "nowhere" / "libcuda.so.1") + ": " in out
    assert lines == []


def test_default_device_and_cluster_launch(built, tmp_path):
    out, lines = _run(
        built,
        tmp_path,
        """
rt.mgpuSetDefaultDevice(1)
mod = rt.mgpuModuleLoad(IMAGE, 6)
fn = rt.mgpuModuleGetFunction(mod, b"k")
s = rt.mgpuStreamCreate()
log("big smem")
rt.mgpuLaunchKernel(fn, 2, 3, 4, 32, 2, 1, 100000, s, None, None, 0)
print(rt.autodiff_cuda_launch_count(), err())
rt.mgpuSetDefaultDevice(1)
print(err())
rt.mgpuSetDefaultDevice(0)
print(err())
""",
        driver="pools",
    )
    assert out.splitlines() == [
        "1 None",
        "None",
        "mgpuSetDefaultDevice(0): the CUDA context already lives on device 1",
    ]
    assert lines[1] == "cuDeviceGet 1"
    assert lines[lines.index("# big smem") + 1 :] == [
        "cuDeviceGetAttribute 97",
        "cuFuncSetAttribute 8 100000",
        "cuLaunchKernel grid=2,3,4 block=32,2,1 smem=100000 stream5",
    ]


def test_profile_sums_kernel_times(built, tmp_path):
    body = (
        ONE_CALL
        + """
mod = rt.mgpuModuleLoad(IMAGE, 6)
fn = rt.mgpuModuleGetFunction(mod, b"k")
call(fn, [1.0]); call(fn, [1.0])
print(rt.autodiff_cuda_kernel_ms(), err())
each = (ctypes.c_double * 4)()
print(rt.autodiff_cuda_launch_ms(each, 4), list(each[:2]))
rt.autodiff_cuda_reset_counters()
print(rt.autodiff_cuda_kernel_ms(), rt.autodiff_cuda_launch_ms(each, 4))
"""
    )
    out, lines = _run(built, tmp_path, body, env={"AUTODIFF_CUDA_PROFILE": "1"})
    assert out.splitlines() == ["3.0 None", "2 [1.5, 1.5]", "0.0 0"]
    assert sum("cuEventElapsedTime" in x for x in lines) == 2
    out, lines = _run(built, tmp_path, body)
    assert out.splitlines() == ["0.0 None", "0 [0.0, 0.0]", "0.0 0"]
    assert not any("cuEvent" in x for x in lines)


def test_exports_only_runtime_symbols(built):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm")
    runtime, _ = built
    proc = subprocess.run(
        [nm, "-D", "--defined-only", str(runtime)], capture_output=True, text=True, check=True
    )
    names = {
        line.split()[-1]
        for line in proc.stdout.splitlines()
        if line.split() and line.split()[-2] in "TDBRVW"
    }
    names = {n for n in names if not n.startswith("_")}
    assert names and all(n.startswith(("mgpu", "autodiff_cuda_")) for n in names), sorted(names)
    assert {
        "mgpuModuleLoad",
        "mgpuLaunchKernel",
        "mgpuMemAlloc",
        "mgpuMemset16",
        "mgpuEventRecord",
        "mgpuSetDefaultDevice",
        "autodiff_cuda_error",
    } <= names


# -- the runtime linked with real host code from --autodiff-lower-to-gpu ----------------------

E2E_FUNCTION = """
func.func @f(%x: tensor<1024xf32>, %y: tensor<1024xf32>) -> tensor<1024xf32> {
  %e = tensor.empty() : tensor<1024xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i)->(i)>, affine_map<(i)->(i)>,
                                        affine_map<(i)->(i)>],
                       iterator_types = ["parallel"]}
      ins(%x, %y : tensor<1024xf32>, tensor<1024xf32>) outs(%e : tensor<1024xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %t = math.tanh %a : f32
    %m = arith.mulf %t, %b : f32
    linalg.yield %m : f32
  } -> tensor<1024xf32>
  return %r : tensor<1024xf32>
}
"""

E2E_CALL = """
class Desc(ctypes.Structure):
    _fields_ = [("alloc", P), ("aligned", P), ("offset", I64),
                ("sizes", I64 * 1), ("strides", I64 * 1)]
bufs = [(ctypes.c_float * 1024)() for _ in range(3)]
descs = [Desc(ctypes.addressof(b), ctypes.addressof(b), 0, (1024,), (1,))
         for b in bufs]
log("loaded " + str(err()))
fn = rt._mlir_ciface_f
fn.restype = None
fn.argtypes = [P] * 3
fn(*[ctypes.addressof(d) for d in descs])
print(err(), rt.autodiff_cuda_launch_count())
"""


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
def test_links_with_lowered_host_code(built, tmp_path):
    """Host code from --autodiff-lower-to-gpu, compiled to an object and linked
    with the runtime into one shared object: every mgpu* symbol resolves, the
    global constructors load the kernels at dlopen time, a call runs the
    expected driver sequence on one pooled stream."""
    from mlir import ir

    from mlir_autodiff import dialects
    from mlir_autodiff.gpu import lower_to_gpu

    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(E2E_FUNCTION)
        lower_to_gpu(module, chip="sm_80")
        text = str(module)
    translate = Path(ir.__file__).parent / "bin" / "mlir-translate"
    llc = shutil.which("llc", path=str(Path(sys.executable).parent)) or str(
        Path(__import__("llvm").__file__).parent / "bin" / "llc"
    )
    ll = subprocess.run(
        [str(translate), "--mlir-to-llvmir"],
        input=text,
        text=True,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    obj = tmp_path / "host.o"
    subprocess.run(
        [llc, "-O2", "-filetype=obj", "-relocation-model=pic", "-o", str(obj)],
        input=ll,
        text=True,
        check=True,
        timeout=60,
    )
    linked = tmp_path / "libf.so"
    proc = subprocess.run(
        [
            CC,
            "-std=c11",
            "-O2",
            "-fPIC",
            "-shared",
            "-Wl,--no-undefined",
            str(obj),
            str(RUNTIME_SOURCE),
            "-o",
            str(linked),
            "-ldl",
            "-lpthread",
            "-lm",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    _, drivers = built
    out, lines = _run((linked, drivers), tmp_path, E2E_CALL)
    assert out.split() == ["None", "1"]
    loaded = lines.index("# loaded None")
    assert lines[: len(INIT_POOLS)] == INIT_POOLS
    assert [x.split()[0] for x in lines[len(INIT_POOLS) : loaded]] == ["cuModuleLoadData"]
    # a fatbin (magic 0xba55ed50) or cubin (ELF) image went to the driver
    assert lines[len(INIT_POOLS)] in (
        "cuModuleLoadData bytes=50ed55ba",
        "cuModuleLoadData bytes=7f454c46",
    )
    calls = [x.split()[0] for x in lines[loaded + 1 :]]
    assert calls.count("cuStreamCreate") == 1
    assert calls.count("cuLaunchKernel") == 1
    assert calls.count("cuMemAllocAsync") == calls.count("cuMemFreeAsync") >= 2
    assert "cuStreamDestroy_v2" not in calls and "cuMemAlloc_v2" not in calls
    # the global destructors unload the module at exit
    assert calls[-2:] == ["cuStreamSynchronize", "cuModuleUnload"]


def test_cache_off_creates_and_destroys_per_request(built, tmp_path):
    out, lines = _run(
        built,
        tmp_path,
        ONE_CALL
        + """
mod = rt.mgpuModuleLoad(IMAGE, 6)
fn = rt.mgpuModuleGetFunction(mod, b"k")
call(fn, [1.0])
log("second")
call(fn, [1.0])
print(err())
""",
        env={"AUTODIFF_CUDA_CACHE": "0"},
    )
    assert out.split() == ["None"]
    assert lines[:4] == INIT_POOLS[:4] and "cuDeviceGetDefaultMemPool" not in str(lines)
    assert lines[lines.index("# second") + 1 :] == [
        "cuStreamCreate flags=1 -> stream5",
        "cuMemAlloc_v2 4",
        "cuMemcpyAsync 4 stream5",
        "cuLaunchKernel grid=4,1,1 block=256,1,1 smem=0 stream5",
        "cuMemcpyAsync 4 stream5",
        "cuMemFree_v2",
        "cuStreamSynchronize stream5",
        "cuStreamDestroy_v2 stream5",
    ]


def test_tensor_maps_from_memref_descriptors(built, tmp_path):
    """mgpuTensorMapEncodeTiledMemref (the lowered `nvgpu.tma.create.descriptor`) reads a
    ranked memref descriptor: the address is aligned + offset elements, dims, byte
    strides and the box go to the driver innermost first; each distinct map is copied
    to the device once (the same map again: the same pointer, no copy), and once 64
    are kept a new one takes the oldest slot after the device is idle."""
    out, lines = _run(built, tmp_path, """
class Desc(ctypes.Structure):
    _fields_ = [("alloc", P), ("aligned", P), ("offset", I64),
                ("sizes", I64 * 3), ("strides", I64 * 3)]
buf = ctypes.create_string_buffer(1 << 16)
base = ctypes.addressof(buf)
os.environ["FAKE_TMA_BASE"] = str(base)
def encode(box, offset=3, sizes=(4, 96, 40)):
    d = Desc(base, base, offset, sizes, (96 * 40, 40, 1))
    b = (I64 * 3)(*box)
    # bf16 (9), no interleave, 128-byte swizzle (3), 128-byte L2 promotion (2), NaN fill (1)
    return rt.mgpuTensorMapEncodeTiledMemref(3, ctypes.addressof(d), 9, 0, 3, 2, 1, b)
first = encode((2, 64, 32))
log("again")
again = encode((2, 64, 32))
other = encode((1, 64, 32))
log("fill")
maps = [encode((1, 64, 32), offset=o) for o in range(10, 72)]
log("full")
late = encode((1, 64, 32), offset=100)
print(err(), first == again, first != other, len(set(maps + [first, other])), late == first)
""")
    assert out.split() == ["None", "True", "True", "64", "True"]
    encode = ("cuTensorMapEncodeTiled type=9 rank=3 addr=6 dims=40,96,4 strides=80,7680 "
              "box=32,64,2 elementstrides=1,1,1 interleave=0 swizzle=3 l2=2 oob=1")
    assert encode in lines
    start = lines.index(encode)
    assert lines[start + 1:start + 3] == ["cuMemAlloc_v2 128", "cuMemcpyHtoD_v2 128"]
    again = lines[lines.index("# again") + 1:lines.index("# fill")]
    assert again[0] == encode and again.count("cuMemcpyHtoD_v2 128") == 1  # only `other`
    full = lines[lines.index("# full") + 1:]
    assert [x.split()[0] for x in full] == ["cuTensorMapEncodeTiled", "cuCtxSynchronize",
                                            "cuMemcpyHtoD_v2"]
