"""Differential harness: every public function of `mlir_autodiff.numpy` / `.nn` / `.lax` / `.optim`
x every transform.

The case table lives in differential_cases.py. Each differentiable case runs
in float64 under {jit, grad, jvp, vjp, vmap, jacfwd, jacrev, hessian,
vmap_grad} and in float32 under {jit, grad, jvp, vjp, vmap}; a test is one
cell (case, dtype, transform), so a failure names exactly what is wrong.

Compilation is shared: one `ad.jit` per (case, dtype) returns every
transform's output at once; only when that compilation fails is each
transform compiled alone, so the failing cells are told apart from the
passing ones.

Oracles (expected values never come from our own output):
  * central finite differences in float64 of the numpy reference (jacobian;
    second differences for the Hessian), except exactly at a
    non-differentiable point (`nondiff` cases: ties, |x| at 0), where jax decides;
  * jax (x64) with the same-named function, when jax is importable;
  * the transpose identity <ct, jvp(t)> = <vjp(ct), t>;
  * vmap against a Python loop of the unbatched function (traced in the
    same module) and against numpy slice by slice;
  * jit against plain numpy (values and dtypes).
Grad of a non-scalar output contracts it with a fixed random array C:
grad(sum(f(x) * C)).

The table checks the transforms' rules, not LLVM's optimizer: its modules are
JIT-compiled at LLVM -O0 (AUTODIFF_OPT_LEVEL=0; the MLIR schedules are the same
at every level), which takes a third less compile time; the rest of the suite
(ports, examples, execution tests) runs at the default level (O2).
"""

from __future__ import annotations

import functools
import importlib
import re
import types
from typing import Any

import differential_cases as dc
import numpy as np
import pytest

import mlir_autodiff as ad
import mlir_autodiff.scipy.linalg as ascipy_linalg
from mlir_autodiff import lax, linalg_numpy, nn, optim
from mlir_autodiff import numpy as anp
from mlir_autodiff import scipy as ascipy
from mlir_autodiff.tracing import Tracer


@pytest.fixture(autouse=True)
def _llvm_o0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTODIFF_OPT_LEVEL", "0")

try:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import jax.scipy.special
    import jax.scipy.stats
except ImportError:  # pragma: no cover - jax is an optional oracle
    jax = None
    jnp = None

F64_TRANSFORMS = ("jit", "grad", "jvp", "vjp", "vmap", "jacfwd", "jacrev", "hessian",
                  "vmap_grad")
F32_TRANSFORMS = ("jit", "grad", "jvp", "vjp", "vmap")


def _transforms(case: dc.Case) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(dtype, transforms) of a case: composites run float32 under jit only (their
    derivatives in float32 are their primitives'), the loop algorithms not at all."""
    if case.no_f32:
        return (("float64", F64_TRANSFORMS),)
    if case.f32_jit_only:
        return (("float64", F64_TRANSFORMS), ("float32", ("jit",)))
    return (("float64", F64_TRANSFORMS), ("float32", F32_TRANSFORMS))
BATCH = 2

# --------------------------------------------------------------------------- known defects
# Cells that fail on the current code, each with its symptom. Keys match
# "case_id/dtype/transform" literally, except `*` (anything) and `{a,b}` (either). They are strict xfails: a fix makes the
# cell pass, the xfail fails, and the entry must be removed.
_REV = "{grad,vjp,jacrev,hessian,vmap_grad}"        # the cells that run reverse mode
_TIE = "{grad,jvp,vjp,jacfwd,jacrev,vmap_grad}"     # first derivatives (Hessian is 0)
_ALL = "{grad,jvp,vjp,jacfwd,jacrev,hessian,vmap_grad}"
KNOWN_DEFECTS: dict[str, str] = {
}

# --------------------------------------------------------------------------- API coverage
# Public names of the two modules that are not functions to test. Anything
# else public must have rows in the case table.
NON_FUNCTIONS: dict[str, dict[str, str]] = {
    "numpy": {
        "Any": "typing alias", "ArrayLike": "typing alias", "Callable": "typing alias",
        "Sequence": "typing alias", "annotations": "from __future__ import",
        "ConcretizationTypeError": "error class", "ShapeError": "error class",
        "UnexpectedTracerError": "error class", "UnsupportedError": "error class",
        "Tracer": "traced-array class (its methods have Tracer.* rows)",
        "dtype": "numpy dtype class", "bool_": "dtype", "float32": "dtype",
        "float16": "dtype", "bfloat16": "dtype (ml_dtypes' numpy type)",
        "float64": "dtype", "int8": "dtype", "int16": "dtype", "int32": "dtype",
        "int64": "dtype", "e": "constant", "pi": "constant", "inf": "constant",
        "nan": "constant", "newaxis": "constant (None)",
        **{n: "scalar-type class (numpy's own)" for n in (
            "bool", "generic", "number", "integer", "signedinteger", "unsignedinteger",
            "inexact", "floating", "complexfloating")},
        "ndarray": "array type for isinstance checks (numpy arrays and tracers)",
        **{n: "dtype query (numpy's own)" for n in ("issubdtype", "finfo", "iinfo")},
        "promote_types": "dtype query (returns a dtype)",
        "iscomplexobj": "dtype query (always False: no complex dtypes)",
        "canonical_dtype": "tracing helper imported for the implementation",
        "current_trace": "tracing helper imported for the implementation",
        "format_site": "tracing helper imported for the implementation",
        "is_float_dtype": "tracing helper imported for the implementation",
        "BFLOAT16": "tracing constant imported for the implementation",
    },
    "nn": {"Any": "typing alias", "ArrayLike": "typing alias",
           "annotations": "from __future__ import"},
    "lax": {},
    "optim": {n: "a NamedTuple class (the transformation pair or a state)" for n in (
        "GradientTransformation", "EmptyState", "ScaleByAdamState", "ScaleByRStdDevState",
        "ScaleByRmsState", "ScaleByRssState", "ScaleByScheduleState", "TraceState")},
    "scipy": {},
}

# Public functions checked by a focused test instead of the table, with the reason.
TESTED_ELSEWHERE: dict[str, str] = {
    **{f"nn.initializers.{n}": "a random draw from a key: its distribution (mean, variance, "
       "range) and determinism are checked in test_nn_scipy.py" for n in (
        "normal", "uniform", "truncated_normal", "variance_scaling", "glorot_normal",
        "glorot_uniform", "xavier_normal", "xavier_uniform", "he_normal", "he_uniform",
        "kaiming_normal", "kaiming_uniform", "lecun_normal", "lecun_uniform")},
    **{f"lax.{n}": f"scipy.special.{m}'s composite (its rows) behind lax's dtype check; "
       "test_lax_ops.py checks value and grad against jax in one compilation (a table "
       "row compiles for ~30 s)" for n, m in (("lgamma", "gammaln"), ("digamma", "digamma"),
                                               ("erf_inv", "erfinv"))},
}

# Public functions with no derivative to check; their V rows check the value.
NON_DIFFERENTIABLE: dict[str, str] = {
    **{f"numpy.{n}": "boolean result" for n in (
        "less", "less_equal", "greater", "greater_equal", "equal", "not_equal",
        "logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf",
        "isfinite", "all", "any")},
    **{f"numpy.{n}": "integer/bool operands only" for n in (
        "bitwise_and", "bitwise_or", "bitwise_xor", "invert")},
    "numpy.argmax": "integer result", "numpy.argmin": "integer result",
    **{f"lax.{n}": "boolean result" for n in ("eq", "ne", "lt", "le", "gt", "ge", "is_finite")},
    **{f"lax.{n}": "integer/bool operands only" for n in (
        "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left",
        "shift_right_logical", "shift_right_arithmetic", "reduce_and", "reduce_or",
        "reduce_xor")},
    "lax.argmax": "integer result", "lax.argmin": "integer result",
    "lax.iota": "constructor: no array input",
    "numpy.argsort": "integer result", "numpy.searchsorted": "integer result",
    **{f"numpy.{n}": "constructor: no array input" for n in (
        "zeros", "ones", "empty", "eye", "identity", "arange")},
    **{f"numpy.{n}": "static shape query" for n in ("shape", "ndim", "size")},
    "numpy.result_type": "returns a dtype",
    "numpy.array_equal": "boolean result", "numpy.array_equiv": "boolean result",
    "nn.one_hot": "integer labels in, a constant-valued array out",
    **{f"optim.{n}": "a schedule: a function of the integer step count" for n in (
        "constant_schedule", "exponential_decay", "cosine_decay_schedule", "linear_schedule",
        "piecewise_constant_schedule", "warmup_cosine_decay_schedule", "join_schedules")},
    **{f"nn.initializers.{n}": "a constant array from a shape" for n in (
        "zeros", "ones", "constant")},
}

MODULES = {"numpy": anp, "nn": nn, "lax": lax, "optim": optim, "scipy": ascipy}
#: Modules whose public functions are their `__all__` (they import many helpers).
BY_ALL = {"lax", "optim"}
#: Submodules enumerated by their `__all__` ("numpy.linalg.solve" is `anp.linalg.solve`).
SUBMODULES = {"numpy.linalg": linalg_numpy, "scipy.linalg": ascipy_linalg}


def _resolve(root: Any, dotted: str) -> Any:
    """root.a.b.c for dotted "a.b.c" (None where a part is missing)."""
    for part in dotted.split("."):
        root = getattr(root, part, None)
    return root


def public_functions(prefix: str) -> list[str]:
    """Every public name of the module, less submodules and the listed non-functions.

    `scipy` lists `special`'s functions and each `stats` distribution's; `nn` adds
    `nn.initializers`' names."""
    module = MODULES[prefix]
    out = []
    if prefix == "scipy":
        out = [f"scipy.special.{n}" for n in ascipy.special.__all__]
        for dist in ascipy.stats.__all__:
            out += [f"scipy.stats.{dist}.{n}" for n in getattr(ascipy.stats, dist).__all__]
        return sorted(out)
    if prefix == "nn":
        out = [f"nn.initializers.{n}" for n in nn.initializers.__all__]
    if prefix in BY_ALL:
        own = [n for n, v in vars(module).items() if not n.startswith("_")
               and isinstance(v, types.FunctionType) and v.__module__ == module.__name__]
        assert set(own) <= set(module.__all__), f"{prefix}: functions not in __all__"
        return sorted(f"{prefix}.{n}" for n in module.__all__ if n not in NON_FUNCTIONS[prefix])
    for name in dir(module):
        if name.startswith("_"):
            continue
        value = getattr(module, name)
        if isinstance(value, types.ModuleType) or name in NON_FUNCTIONS[prefix]:
            continue
        out.append(f"{prefix}.{name}")
    return sorted(out)


def test_every_public_function_has_rows() -> None:
    diff_funcs = {c.func for c in dc.DIFF}
    value_funcs = {c.func for c in dc.VALUE}
    enumerated = [f for prefix in MODULES for f in public_functions(prefix)]
    for prefix, sub in SUBMODULES.items():
        enumerated += [f"{prefix}.{n}" for n in sub.__all__]
    assert len(enumerated) > 100
    assert not [f for f in TESTED_ELSEWHERE if f not in enumerated]
    enumerated = [f for f in enumerated if f not in TESTED_ELSEWHERE]
    missing = [f for f in enumerated if f not in diff_funcs and f not in NON_DIFFERENTIABLE]
    assert not missing, f"public functions without a differentiable row: {missing}"
    no_value = [f for f in NON_DIFFERENTIABLE if f not in value_funcs]
    assert not no_value, f"non-differentiable functions without a value row: {no_value}"
    wrongly_listed = [f for f in NON_DIFFERENTIABLE if f in diff_funcs]
    assert not wrongly_listed, f"listed as non-differentiable but has D rows: {wrongly_listed}"
    rows = [c.func for c in dc.CASES]
    few = [f for f in enumerated if rows.count(f) < 2]
    assert not few, f"functions with fewer than two argument sets: {few}"
    # the table names only what exists, and the exclusions only what is not a function
    stale = sorted({f for f in rows if not f.startswith("Tracer.") and f not in enumerated})
    assert not stale, f"rows for names that are not public functions: {stale}"
    assert not [f for f in NON_DIFFERENTIABLE if f not in enumerated]
    for prefix, names in NON_FUNCTIONS.items():
        for name in names:
            value = getattr(MODULES[prefix], name)
            own = (isinstance(value, types.FunctionType)
                   and value.__module__ == MODULES[prefix].__name__)
            assert not own, f"{prefix}.{name} is a function of the module: give it rows"
    ids = [c.id for c in dc.CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"


def test_case_count() -> None:
    n_diff = len(dc.DIFF)
    n_value = len(dc.VALUE)
    cells = sum(len(t) for c in dc.DIFF for _, t in _transforms(c)) + sum(
        len(_value_dtypes(c)) for c in dc.VALUE)
    funcs = len({c.func for c in dc.CASES})
    print(f"\ndifferential API harness: {n_diff} differentiable op cases x "
          f"{len(F64_TRANSFORMS)} f64 + {len(F32_TRANSFORMS)} f32 transforms, {n_value} "
          f"value-only cases, {funcs} functions, {cells} cells")
    assert n_diff >= 300
    assert cells >= 300 * len(F32_TRANSFORMS)


# --------------------------------------------------------------------------- oracles

def _our_fn(case: dc.Case) -> Any:
    if case.module == "Tracer":
        return None
    return _resolve(MODULES[case.module], case.name)


def _np_fn(case: dc.Case) -> Any:
    if case.module == "Tracer":
        return None
    if case.module == "nn":
        return dc.NN_REF[case.name]
    if case.module == "lax":
        return dc.LAX_REF[case.name]
    if case.module == "optim":
        raise AssertionError(f"{case.id}: optim rows give their numpy reference (ref=)")
    if case.module == "scipy":
        import scipy.linalg
        import scipy.special
        import scipy.stats
        return _resolve(scipy, case.name)
    return _resolve(np, case.name)


def _jax_fn(case: dc.Case) -> Any:
    if jax is None or case.module in ("Tracer", "optim"):  # optim: no jax counterpart
        return None
    if case.module == "nn":
        return dc.JAX_NN_OVERRIDE.get(case.name) or getattr(jax.nn, case.name)
    if case.module == "lax":
        return getattr(jax.lax, case.name)
    if case.module == "scipy":
        importlib.import_module("jax.scipy.linalg")
        return _resolve(jax.scipy, case.jax_name or case.name)
    return _resolve(jnp, case.jax_name or case.name)


def _numpy_ref(case: dc.Case):
    if case.ref is not None:
        return case.ref
    f = _np_fn(case)
    return lambda *xs: case.call(f, *xs)


def _merge(case: dc.Case, fargs: Any, cargs: Any) -> list[Any]:
    fa, ca = iter(fargs), iter(cargs)
    return [next(fa) if m else next(ca) for m in case.diff_mask()]


class Prepared:
    """Inputs and oracles of one differentiable case (float64, computed once)."""

    def __init__(self, case: dc.Case) -> None:
        self.case = case
        mask = case.diff_mask()
        xs = case.draw(0)
        self.fargs = [x for x, m in zip(xs, mask) if m]
        self.cargs = [x for x, m in zip(xs, mask) if not m]
        self.ref = _numpy_ref(case)
        y = np.asarray(self.ref(*xs))
        assert y.dtype.kind == "f", f"{case.id}: a D row must have a float result"
        self.out_shape = y.shape
        self.value = y
        rng = np.random.default_rng([case.seed(), 1000])
        r32 = lambda shape: rng.standard_normal(shape).astype(np.float32).astype(np.float64)
        self.C = r32(self.out_shape)
        self.ct = r32(self.out_shape)
        self.tangents = [r32(x.shape) for x in self.fargs]
        slices = [case.draw(b) for b in range(BATCH)]
        self.bargs = [np.stack([s[i] for s in slices]) for i, m in enumerate(mask) if m]
        self.n = len(self.fargs)

    def f_of_fargs(self, fargs: list[np.ndarray]) -> np.ndarray:
        return np.asarray(self.ref(*_merge(self.case, fargs, self.cargs)), dtype=np.float64)

    @functools.cached_property
    def fd_jac(self) -> list[np.ndarray]:
        """d out / d farg_i, shaped out.shape + farg_i.shape (central differences)."""
        return self._fd_jac(self.fargs)

    def _fd_jac(self, fargs: list[np.ndarray], h: float = 1e-6) -> list[np.ndarray]:
        jacs = []
        for i, x in enumerate(fargs):
            J = np.zeros(self.out_shape + x.shape)
            for k in np.ndindex(*x.shape):
                xp, xm = x.copy(), x.copy()
                xp[k] += h
                xm[k] -= h
                fp = self.f_of_fargs(fargs[:i] + [xp] + fargs[i + 1:])
                fm = self.f_of_fargs(fargs[:i] + [xm] + fargs[i + 1:])
                J[(...,) + k] = (fp - fm) / (2 * h)
            jacs.append(J)
        return jacs

    def scal(self, fargs: list[np.ndarray]) -> float:
        return float(np.sum(self.f_of_fargs(fargs) * self.C))

    @functools.cached_property
    def fd_hess(self) -> list[list[np.ndarray]]:
        """Blocks d^2 sum(f * C) / d farg_i d farg_j by second central differences."""
        h = 2e-4
        flat = [x.ravel() for x in self.fargs]
        sizes = [v.size for v in flat]
        v0 = np.concatenate(flat) if flat else np.zeros(0)
        offs = np.cumsum([0] + sizes)

        def unflat(v: np.ndarray) -> list[np.ndarray]:
            return [v[offs[i]:offs[i + 1]].reshape(x.shape) for i, x in enumerate(self.fargs)]

        N = v0.size
        H = np.zeros((N, N))
        for a in range(N):
            for b in range(a, N):
                acc = 0.0
                for sa, sb, w in ((1, 1, 1), (1, -1, -1), (-1, 1, -1), (-1, -1, 1)):
                    v = v0.copy()
                    v[a] += sa * h
                    v[b] += sb * h
                    acc += w * self.scal(unflat(v))
                H[a, b] = H[b, a] = acc / (4 * h * h)
        return [[H[offs[i]:offs[i + 1], offs[j]:offs[j + 1]].reshape(
            self.fargs[i].shape + self.fargs[j].shape) for j in range(self.n)]
            for i in range(self.n)]

    @functools.cached_property
    def fd_slice_grads(self) -> list[list[np.ndarray]]:
        out = []
        for b in range(BATCH):
            jacs = self._fd_jac([np.array(x[b]) for x in self.bargs])
            out.append([np.tensordot(self.C, J, axes=self.C.ndim) for J in jacs])
        return out

    @functools.cached_property
    def jax(self) -> dict[str, Any] | None:
        if jax is None:
            return None
        jf = None if self.case.jref is not None else _jax_fn(self.case)
        if self.case.jref is not None:
            call = self.case.jref
        elif jf is not None or self.case.module == "Tracer":
            call = lambda *xs: self.case.call(jf, *xs)  # noqa: E731
        else:
            return None
        case, n = self.case, self.n
        allargs = tuple(range(n))
        # Where finite differences apply they already check the jacobian, the
        # Hessian and vmap(grad): jax adds the first-order transforms only
        # (one XLA compilation per case either way; this keeps it small).
        full = case.nondiff

        def oracle(fa: Any, ca: Any, ts: Any, ct: Any, C: Any, ba: Any) -> Any:
            g = lambda *f: call(*_merge(case, f, ca))  # noqa: E731
            scal = lambda *f: jnp.sum(g(*f) * C)  # noqa: E731
            out = {"jit": g(*fa), "grad": jax.grad(scal, argnums=allargs)(*fa),
                   "jvp": jax.jvp(g, tuple(fa), tuple(ts))[1],
                   "vjp": jax.vjp(g, *fa)[1](ct)}
            if full:
                out["jac"] = [jax.jacfwd(g, argnums=i)(*fa) for i in range(n)]
                out["hessian"] = jax.hessian(scal, argnums=allargs)(*fa)
                out["vmap_grad"] = jax.vmap(jax.grad(scal, argnums=allargs))(*ba)
            return out

        out = jax.jit(oracle)(tuple(self.fargs), tuple(self.cargs), tuple(self.tangents),
                              self.ct, self.C, tuple(self.bargs))
        return jax.tree_util.tree_map(np.asarray, out)


@functools.lru_cache(maxsize=None)
def prepared(case_id: str) -> Prepared:
    return Prepared(CASE_BY_ID[case_id])


# --------------------------------------------------------------------------- our side

def _traced_fns(case: dc.Case, C: np.ndarray, cargs: Any) -> tuple[Any, Any]:
    f = _our_fn(case)

    def g(*fa: Any) -> Any:
        return case.call(f, *_merge(case, fa, cargs))

    def scal(*fa: Any) -> Any:
        return anp.sum(g(*fa) * C)

    return g, scal


def _emit(case: dc.Case, n: int, transforms: tuple[str, ...], C: np.ndarray, fargs: Any,
          cargs: Any, ts: Any, ct: Any, bargs: Any) -> dict[str, Any]:
    g, scal = _traced_fns(case, C, cargs)
    alln = tuple(range(n))
    out: dict[str, Any] = {}
    for tr in transforms:
        if tr == "jit":
            out["jit"] = g(*fargs)
        elif tr == "grad":
            out["grad"] = ad.grad(scal, argnums=alln)(*fargs)
        elif tr == "jvp":
            out["jvp"] = ad.jvp(g, tuple(fargs), tuple(ts))
        elif tr == "vjp":
            y, fn = ad.vjp(g, *fargs)
            out["vjp"] = (y, fn(ct))
        elif tr == "vmap":
            loop = anp.stack([g(*[b[k] for b in bargs]) for k in range(BATCH)])
            out["vmap"] = (ad.vmap(g)(*bargs), loop)
        elif tr == "jacfwd":
            out["jacfwd"] = tuple(ad.jacfwd(g, argnums=i)(*fargs) for i in alln)
        elif tr == "jacrev":
            out["jacrev"] = tuple(ad.jacrev(g, argnums=i)(*fargs) for i in alln)
        elif tr == "hessian":
            out["hessian"] = tuple(tuple(
                ad.hessian(scal, argnums=i)(*fargs) if i == j
                else ad.jacfwd(ad.grad(scal, argnums=i), argnums=j)(*fargs)
                for j in alln) for i in alln)
        elif tr == "vmap_grad":
            gr = ad.grad(scal, argnums=alln)
            loop = tuple(anp.stack([gr(*[b[k] for b in bargs])[i] for k in range(BATCH)])
                         for i in alln)
            out["vmap_grad"] = (ad.vmap(gr)(*bargs), loop)
        else:
            raise ValueError(tr)
    return out


def _as_np(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _as_np(v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_as_np(v) for v in tree)
    return np.asarray(tree)


class Compiled:
    """Our inputs and outputs for one (case, dtype)."""

    def __init__(self, case: dc.Case, dtype: Any) -> None:
        self.case = case
        self.dtype = np.dtype(dtype)
        self.p = prepared(case.id)
        p = self.p
        cast = lambda x: x.astype(self.dtype)  # noqa: E731
        self.fargs = tuple(cast(x) for x in p.fargs)
        self.cargs = tuple(cast(x) if x.dtype.kind == "f" else x for x in p.cargs)
        self.ts = tuple(cast(t) for t in p.tangents)
        self.bargs = tuple(cast(b) for b in p.bargs)
        xs = _merge(case, self.fargs, self.cargs)
        self.ref_value = np.asarray(p.ref(*xs))
        self.out_dtype = self.ref_value.dtype
        self.C = p.C.astype(self.out_dtype)
        self.ct = p.ct.astype(self.out_dtype)
        self.results: dict[str, Any] = {}
        self.errors: dict[str, BaseException] = {}

    def inputs(self) -> tuple[Any, ...]:
        return (self.fargs, self.cargs, self.ts, self.ct, self.bargs)

    def emit(self, transforms: tuple[str, ...], fargs: Any, cargs: Any, ts: Any, ct: Any,
             bargs: Any) -> dict[str, Any]:
        return _emit(self.case, len(self.fargs), transforms, self.C, fargs, cargs, ts, ct, bargs)

    def get(self, transform: str) -> Any:
        if transform not in self.results and transform not in self.errors:
            try:
                self.results.update(_compile_and_run([(self, (transform,))])[0])
            except Exception as err:  # noqa: BLE001 - re-raised in the cell's test
                self.errors[transform] = err
        if transform in self.errors:
            raise self.errors[transform]
        return self.results[transform]


def _compile_and_run(parts: list[tuple[Compiled, tuple[str, ...]]]) -> list[dict[str, Any]]:
    """One `ad.jit` computing `transforms` of every (Compiled, transforms) part."""

    def allf(*per: Any) -> Any:
        return [c.emit(trs, *args) for (c, trs), args in zip(parts, per)]

    return _as_np(ad.jit(allf)(*[c.inputs() for c, _ in parts]))


@functools.lru_cache(maxsize=None)
def compiled(case_id: str) -> dict[str, Compiled]:
    """Both dtypes of a case come from one compilation of all their transforms
    (cells known to fail are left out of it); if that compilation fails, each
    cell compiles its transform alone, in `Compiled.get`."""
    case = CASE_BY_ID[case_id]
    runs = {"float64": Compiled(case, "float64"), "float32": Compiled(case, "float32")}
    parts = []
    for dt, transforms in _transforms(case):
        together = tuple(t for t in transforms if not _is_known(case, dt, t))
        if together:
            parts.append((runs[dt], together))
    try:
        for (c, _), res in zip(parts, _compile_and_run(parts)):
            c.results.update(res)
    except Exception:  # noqa: BLE001 - diagnosed per cell
        pass
    return runs


# --------------------------------------------------------------------------- checks

def _tols(dtype: np.dtype, case: dc.Case, kind: str) -> tuple[float, float]:
    """(rtol, atol relative to the oracle's scale) for comparing with an oracle of `kind`."""
    if dtype == np.float32:
        # float32 results against float64 oracles: a few roundings of 6e-8 each
        rtol = {"value": 1e-5, "loop": 1e-5}.get(kind, 5e-5)
        return rtol * case.tol, rtol * case.tol
    return {"value": (1e-10, 1e-12), "fd": (1e-6, 1e-6), "fd2": (1e-4, 1e-4),
            "jax": (1e-8, 1e-10), "loop": (1e-10, 1e-12)}[kind]


def close(actual: Any, expected: Any, dtype: np.dtype, case: dc.Case, kind: str,
          what: str) -> None:
    actual = np.asarray(actual)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, \
        f"{what}: shape {actual.shape}, expected {expected.shape}"
    rtol, atol = _tols(dtype, case, kind)
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=rtol,
                               atol=atol * scale, err_msg=f"{what} ({kind} oracle)")


def _fd_ok(case: dc.Case) -> bool:
    return not case.nondiff


def _check(case: dc.Case, dtype: str, transform: str) -> None:
    c = compiled(case.id)[dtype]
    p = c.p
    dt = c.dtype
    J = p.jax
    fd = _fd_ok(case)
    if not fd and J is None and transform in ("grad", "jacfwd", "jacrev", "hessian"):
        pytest.skip("a non-differentiable point: jax is the only oracle and is not installed")
    out = c.get(transform)

    if transform == "jit":
        assert out.dtype == c.out_dtype, f"dtype {out.dtype}, numpy gives {c.out_dtype}"
        close(out, c.ref_value, dt, case, "value", "value vs numpy")
        if J is not None:
            close(out, J["jit"], dt, case, "jax", "value vs jax")
    elif transform == "grad":
        for i, gi in enumerate(out):
            assert gi.dtype == c.fargs[i].dtype, f"grad {i} dtype {gi.dtype}"
            if fd:
                close(gi, np.tensordot(p.C, p.fd_jac[i], axes=p.C.ndim), dt, case, "fd",
                      f"grad wrt arg {i}")
            if J is not None:
                close(gi, J["grad"][i], dt, case, "jax", f"grad wrt arg {i}")
    elif transform == "jvp":
        y, ty = out
        close(y, c.ref_value, dt, case, "value", "jvp primal")
        if fd:
            exp = sum(np.tensordot(Ji, t, axes=t.ndim) for Ji, t in zip(p.fd_jac, p.tangents))
            close(ty, exp, dt, case, "fd", "jvp tangent")
        if J is not None:
            close(ty, J["jvp"], dt, case, "jax", "jvp tangent")
        _transpose_identity(c, jvp_out=ty)
    elif transform == "vjp":
        y, cts = out
        close(y, c.ref_value, dt, case, "value", "vjp primal")
        for i, gi in enumerate(cts):
            assert gi.dtype == c.fargs[i].dtype, f"vjp {i} dtype {gi.dtype}"
            if fd:
                close(gi, np.tensordot(p.ct, p.fd_jac[i], axes=p.ct.ndim), dt, case, "fd",
                      f"vjp wrt arg {i}")
            if J is not None:
                close(gi, J["vjp"][i], dt, case, "jax", f"vjp wrt arg {i}")
        _transpose_identity(c, vjp_out=cts)
    elif transform == "vmap":
        batched, loop = out
        close(batched, loop, dt, case, "loop", "vmap vs loop of f")
        expect = np.stack([np.asarray(p.ref(*_merge(case, [b[k] for b in c.bargs], c.cargs)))
                           for k in range(BATCH)])
        close(batched, expect, dt, case, "value", "vmap vs numpy per slice")
    elif transform in ("jacfwd", "jacrev"):
        for i, Ji in enumerate(out):
            if fd:
                close(Ji, p.fd_jac[i], dt, case, "fd", f"{transform} wrt arg {i}")
            if J is not None and "jac" in J:
                close(Ji, J["jac"][i], dt, case, "jax", f"{transform} wrt arg {i}")
    elif transform == "hessian":
        for i in range(p.n):
            for j in range(p.n):
                if fd:
                    close(out[i][j], p.fd_hess[i][j], dt, case, "fd2", f"hessian[{i}][{j}]")
                if J is not None and "hessian" in J:
                    close(out[i][j], J["hessian"][i][j], dt, case, "jax", f"hessian[{i}][{j}]")
    elif transform == "vmap_grad":
        batched, loop = out
        for i in range(p.n):
            close(batched[i], loop[i], dt, case, "loop", f"vmap(grad) wrt arg {i} vs loop")
            if fd:
                exp = np.stack([p.fd_slice_grads[k][i] for k in range(BATCH)])
                close(batched[i], exp, dt, case, "fd", f"vmap(grad) wrt arg {i}")
            if J is not None and "vmap_grad" in J:
                close(batched[i], J["vmap_grad"][i], dt, case, "jax",
                      f"vmap(grad) wrt arg {i}")
    else:
        raise ValueError(transform)


def _transpose_identity(c: Compiled, jvp_out: Any = None, vjp_out: Any = None) -> None:
    """<ct, jvp(t)> == <vjp(ct), t>, both sides ours (whichever cell runs it)."""
    try:
        if jvp_out is None:
            jvp_out = c.get("jvp")[1]
        if vjp_out is None:
            vjp_out = c.get("vjp")[1]
    except Exception:  # noqa: BLE001 - that transform's own cell reports it
        return
    lhs = float(np.sum(c.ct.astype(np.float64) * np.asarray(jvp_out, np.float64)))
    terms = [np.asarray(v, np.float64) * t.astype(np.float64) for v, t in zip(vjp_out, c.ts)]
    rhs = float(sum(np.sum(t) for t in terms))
    mag = float(np.sum(np.abs(c.ct * jvp_out))) + float(sum(np.sum(np.abs(t)) for t in terms))
    rtol = 1e-4 if c.dtype == np.float32 else 1e-10
    assert abs(lhs - rhs) <= rtol * max(mag, 1.0), \
        f"transpose identity: <ct, jvp(t)> = {lhs!r} but <vjp(ct), t> = {rhs!r}"


# --------------------------------------------------------------------------- parametrization

CASE_BY_ID = {c.id: c for c in dc.CASES}


def _is_known(case: dc.Case, dtype: Any, transform: str) -> bool:
    return _known_reason(case.id, np.dtype(dtype).name, transform) is not None


def _pattern(pattern: str) -> re.Pattern[str]:
    """A KNOWN_DEFECTS key: literal text where `*` matches anything and `{a,b}` either."""
    out = ""
    for part in re.split(r"(\*|\{[^}]*\})", pattern):
        if part == "*":
            out += ".*"
        elif part.startswith("{") and part.endswith("}"):
            out += "(?:" + "|".join(re.escape(a) for a in part[1:-1].split(",")) + ")"
        else:
            out += re.escape(part)
    return re.compile(out)


_KNOWN = [(_pattern(k), v) for k, v in KNOWN_DEFECTS.items()]


def _known_reason(case_id: str, dtype: str, transform: str) -> str | None:
    cell = f"{case_id}/{dtype}/{transform}"
    for pattern, reason in _KNOWN:
        if pattern.fullmatch(cell):
            return reason
    return None


def _cells() -> list[Any]:
    params = []
    for case in dc.DIFF:
        for dtype, transforms in _transforms(case):
            for tr in transforms:
                reason = _known_reason(case.id, dtype, tr)
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                params.append(pytest.param(case.id, dtype, tr, marks=marks,
                                           id=f"{case.id}-{dtype}-{tr}"))
    return params


@pytest.mark.parametrize("case_id,dtype,transform", _cells())
def test_cell(case_id: str, dtype: str, transform: str) -> None:
    _check(CASE_BY_ID[case_id], dtype, transform)


def _value_dtypes(case: dc.Case) -> list[str]:
    floats = any(isinstance(a, dc.A) or isinstance(a, dc.C) and isinstance(a.value, dc.A)
                 for a in case.args)
    return ["float64", "float32"] if floats else ["native"]


def _value_cells() -> list[Any]:
    params = []
    for case in dc.VALUE:
        for dtype in _value_dtypes(case):
            reason = _known_reason(case.id, dtype, "jit")
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(case.id, dtype, marks=marks, id=f"{case.id}-{dtype}-jit"))
    return params


@pytest.mark.parametrize("case_id,dtype", _value_cells())
def test_value_cell(case_id: str, dtype: str) -> None:
    case = CASE_BY_ID[case_id]
    xs = case.draw(0)
    if dtype != "native":
        xs = [x.astype(dtype) if x.dtype.kind == "f" else x for x in xs]
    f = _our_fn(case)
    captured: list[Any] = []

    def fn(*args: Any) -> Any:
        out = case.call(f, *args)
        if isinstance(out, (Tracer, np.ndarray, np.generic)):
            return out
        captured.append(out)  # a static Python value (shape, dtype name)
        return args[0]

    out = ad.jit(fn)(*xs)
    expected = _numpy_ref(case)(*xs)
    if captured:
        assert captured[0] == expected, f"{captured[0]!r}, numpy gives {expected!r}"
        return
    out = np.asarray(out)
    expected = np.asarray(expected)
    assert out.dtype == expected.dtype, f"dtype {out.dtype}, numpy gives {expected.dtype}"
    assert out.shape == expected.shape, f"shape {out.shape}, numpy gives {expected.shape}"
    if expected.dtype.kind == "f":
        rtol = 1e-6 if expected.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(out, expected, rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(out, expected)
