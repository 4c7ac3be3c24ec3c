"""Keep user symbols off the names the lowered code links against.

The CPU and GPU lowerings emit calls to library routines by their C names:
`convert-math-to-libm` calls `sinh`, `log1p`, `erf`...; the memref lowering
`malloc`, `free` and `memrefCopy`; `cf.assert` `puts` and `abort`; the
OpenMP lowering `__kmpc_*`; `convert-math-to-funcs` outlines
`__mlir_math_ipowi_*`; LLVM's code generator itself calls `memcpy`,
`memset`, `fmod`, `exp2`, `__extendhfsf2`... for its intrinsics; and the
ExecutionEngine and the C wrappers name their functions `_mlir_<f>` and
`_mlir_ciface_<f>`. A call resolves to a function of the module when the
module defines one of that name, so a user's function called `@sinh` was
called by every lowered `math.sinh` in it (itself included: an endless
recursion) and one called `@log1p` replaced libm's.

`RenameReservedSymbols` runs first in both lowerings and renames every
symbol the module *defines* (functions and globals with a body or an
initial value; declarations keep their names, they are meant to bind to
the library) whose name is reserved:

- names the C implementation reserves (`__x`, `_X`) and those of the
  MLIR runtime's own namespace (`_mlir...`), LLVM intrinsics (`llvm.`) and
  the OpenMP and GPU runtimes (`omp_`, `kmp_`, `ompt_`, `mgpu`);
- `LIBRARY_FUNCTIONS`: every C math library routine (with its `f`/`l`
  forms) and the C library routines the lowerings and LLVM's code
  generator call;
- `RUNTIME_FUNCTIONS`: the C functions of MLIR's runtime library;
- any other name the JIT could link lowered calls against: a symbol of the
  process's global scope (the C and math libraries, and what else is loaded
  globally). Symbols of libraries only other libraries call (the C++
  library, MLIR's and LLVM's own) cannot capture a call of lowered code.

The new name is `user$<name>` (made unique): `$` is in no C library
symbol, and it is a valid PTX and ELF name, so kernels outlined from the
function keep working. The module attribute `RENAMED_SYMBOLS` maps each
original name to its new one; `runtime.CompiledModule` looks functions up
through it, so callers still use the names they wrote.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools

from mlir import ir

from ..dialects.vocabulary import RENAMED_SYMBOLS
from .passes import Pass

#: Prefix of a renamed symbol.
PREFIX = "user$"

_MATH_DOUBLE = (
    # <math.h> (C23), the double forms; the float and long double forms add f / l.
    "acos asin atan atan2 cos sin tan acospi asinpi atanpi atan2pi cospi sinpi tanpi "
    "acosh asinh atanh cosh sinh tanh "
    "exp exp2 exp10 expm1 exp2m1 exp10m1 frexp ilogb ldexp llogb log log10 log1p log2 "
    "logp1 log2p1 log10p1 logb modf scalbn scalbln "
    "cbrt compoundn fabs hypot pow pown powr rootn rsqrt sqrt "
    "erf erfc lgamma tgamma "
    "ceil floor nearbyint rint lrint llrint round lround llround roundeven trunc "
    "fromfp ufromfp fromfpx ufromfpx "
    "fmod remainder remquo copysign nan nextafter nexttoward nextup nextdown canonicalize "
    "fdim fmax fmin fmaximum fminimum fmaximum_mag fminimum_mag fmaximum_num fminimum_num "
    "fmax_mag fmin_mag fma "
    # GNU and POSIX extensions LLVM's code generator or libm provide
    "sincos pow10 significand gamma lgamma_r drem finite isinf isnan scalb "
    "j0 j1 jn y0 y1 yn"
).split()

#: C library routines the lowerings or LLVM's code generator may call by name.
LIBRARY_FUNCTIONS: frozenset[str] = frozenset(
    [name + suffix for name in _MATH_DOUBLE for suffix in ("", "f", "l")]
    + (
        # memory: finalize-memref-to-llvm, bufferization, LLVM's memory intrinsics
        "malloc calloc realloc free aligned_alloc posix_memalign memalign valloc "
        "memcpy memmove memset memcmp bcmp bzero memset_pattern16 "
        # cf.assert, vector.print, stack protection, exits
        "puts printf fprintf putchar abort exit _exit atexit __cxa_atexit "
        # MLIR's runtime libraries (memref copies, printing, timing)
        "memrefCopy printMemrefF32 printMemrefF64 printMemrefI32 printMemrefI64 "
        "printMemrefI8 printMemrefC32 printMemrefC64 printMemrefInd printMemrefF16 "
        "printMemrefBF16 printF32 printF64 printF16 printBF16 printI64 printU64 "
        "printString printNewline printComma printOpen printClose printFlops "
        "rtclock nanoTime verifyMemRefF32 verifyMemRefF64 verifyMemRefI32 "
        "verifyMemRefI64 verifyMemRefC32 verifyMemRefC64 verifyMemRefInd"
    ).split()
)

#: Name prefixes reserved for the C implementation, LLVM and the runtimes.
RESERVED_PREFIXES = ("__", "_mlir", "llvm.", "omp_", "ompt_", "kmp_", "mgpu")


#: The C-named functions MLIR's runtime library (libmlir_c_runner_utils, which the
#: JIT loads when lowered code calls into it) exports, besides its `_mlir*` ones
#: (reserved by prefix). test_symbol_names.py checks this list against the library
#: of the pinned bindings, so a new export is never missed.
RUNTIME_FUNCTIONS: frozenset[str] = frozenset((
    "createSparseTensorWriter delSparseTensor delSparseTensorReader delSparseTensorWriter "
    "endLexInsert getSparseTensorReaderNSE getTensorFilename memrefCopy mlirAlignedAlloc "
    "mlirAlignedFree mlirAlloc mlirFree printClose printComma printF32 printF64 printFlops "
    "printI64 printNewline printOpen printString printU64 rtclock rtdrand rtrand rtsrand "
    "sparseDimSize sparseLvlSize"
).split())


@functools.lru_cache(maxsize=1)
def _process() -> ctypes.CDLL:
    return ctypes.CDLL(None)


@functools.lru_cache(maxsize=4096)
def in_process(name: str) -> bool:
    """Whether `name` resolves in the process's global symbols (the C and math
    libraries and what else is loaded globally): where the JIT links lowered calls."""
    if "\0" in name:
        return False
    try:
        _process()[name]
    except (AttributeError, ValueError):
        return False
    return True


def is_reserved(name: str) -> bool:
    """Whether a module-defined symbol `name` could capture calls meant for a library."""
    if name.startswith(RESERVED_PREFIXES):
        return True
    if len(name) > 1 and name[0] == "_" and name[1].isupper():
        return True
    return name in LIBRARY_FUNCTIONS or name in RUNTIME_FUNCTIONS or in_process(name)


_FUNCTIONS = ("func.func", "llvm.func")
_GLOBALS = ("memref.global", "llvm.mlir.global")


def _is_definition(op: ir.Operation) -> bool:
    if op.name in _FUNCTIONS:
        return len(op.regions[0].blocks) > 0
    if op.name == "memref.global":
        return "initial_value" in op.attributes
    if op.name == "llvm.mlir.global":
        return "value" in op.attributes or len(op.regions[0].blocks) > 0
    return False


def renamed_symbols(module: ir.Operation) -> dict[str, str]:
    """The RENAMED_SYMBOLS map of `module` (empty when nothing was renamed)."""
    if RENAMED_SYMBOLS not in module.attributes:
        return {}
    attr = ir.DictAttr(module.attributes[RENAMED_SYMBOLS])
    return {attr[i].name: ir.StringAttr(attr[i].attr).value for i in range(len(attr))}


@dataclasses.dataclass(frozen=True)
class RenameReservedSymbols(Pass):
    """Rename module-defined symbols whose names the lowered code may call (see above)."""

    name = "autodiff-rename-reserved-symbols"
    summary = "Rename user functions and globals named like C library or runtime symbols"

    def run(self, module: ir.Operation) -> None:
        ops = [op.operation for op in module.regions[0].blocks[0].operations]
        taken = {ir.StringAttr(op.attributes["sym_name"]).value
                 for op in ops if "sym_name" in op.attributes}
        renames = renamed_symbols(module)
        changed = False
        for op in ops:
            if op.name not in _FUNCTIONS + _GLOBALS or not _is_definition(op):
                continue
            old = ir.StringAttr(op.attributes["sym_name"]).value
            if not is_reserved(old):
                continue
            new, i = PREFIX + old, 0
            while new in taken:
                i += 1
                new = f"{PREFIX}{old}${i}"
            taken.add(new)
            ir.SymbolTable.replace_all_symbol_uses(old, new, module)
            op.attributes["sym_name"] = ir.StringAttr.get(new, module.context)
            # A name renamed before (the pass ran already) keeps its source name.
            source = next((k for k, v in renames.items() if v == old), old)
            renames[source] = new
            changed = True
        if changed:
            module.attributes[RENAMED_SYMBOLS] = ir.DictAttr.get(
                {k: ir.StringAttr.get(v, module.context) for k, v in renames.items()},
                module.context)
