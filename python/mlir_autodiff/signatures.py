"""What numpy may pass to a compiled function, read from its MLIR signature.

`ArgSpec` is one parameter or result (dtype, shape with dynamic dims, the MLIR
type); `signature_of` / `function_signatures` give the specs of a module's
public functions (`uncallable_functions` says why numpy cannot call the
others). `check_args` checks and converts arguments against the specs before
any native code runs (see runtime.py for the rules); `from_python` converts
Python scalars and nested lists when that loses nothing. `mark_args_read_only`
and `donated_arguments` read and set the `bufferization.writable` attributes
of public functions' tensor parameters (read-only unless donated).
"""

from __future__ import annotations

from mlir import ir

from mlir_autodiff.argspec import (  # noqa: F401  (re-exported: the runtime's names)
    ArgSpec,
    check_args,
    from_python,
    np_dtype,
)


def _is_public_definition(op: ir.OpView) -> bool:
    if op.operation.name != "func.func" or len(op.regions[0].blocks) == 0:
        return False
    if "sym_visibility" in op.attributes:
        return ir.StringAttr(op.attributes["sym_visibility"]).value == "public"
    return True


def signature_of(op: ir.OpView) -> tuple[list[ArgSpec], list[ArgSpec]] | str:
    """The (parameter, result) specs of a func.func, or why numpy cannot call it."""
    ftype = op.attributes["function_type"].value
    params, results = [], []
    for kind, types, out in (("argument", ftype.inputs, params),
                             ("result", ftype.results, results)):
        for i, t in enumerate(types):
            try:
                out.append(ArgSpec.of(t))
            except TypeError as err:
                return f"{kind} {i}: {err}"
    return params, results


def _callable_signature(op: ir.OpView) -> tuple[list[ArgSpec], list[ArgSpec]] | str:
    sig = signature_of(op)
    if isinstance(sig, str):
        return sig
    for i, r in enumerate(sig[1]):
        if not r.is_static:
            return (f"result {i} has the dynamic type {r.mlir_type}; results must have "
                    "static shapes (the caller allocates them)")
    return sig


def symbol_name(op: ir.OpView) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def function_signatures(module: ir.Module) -> dict[str, tuple[list[ArgSpec], list[ArgSpec]]]:
    """Public functions callable from numpy: name -> (parameter specs, result specs)."""
    sigs = {}
    for op in module.body.operations:
        if _is_public_definition(op):
            sig = _callable_signature(op)
            if not isinstance(sig, str):
                sigs[symbol_name(op)] = sig
    return sigs


def uncallable_functions(module: ir.Module) -> dict[str, str]:
    """Public functions numpy cannot call: name -> reason."""
    out = {}
    for op in module.body.operations:
        if _is_public_definition(op):
            sig = _callable_signature(op)
            if isinstance(sig, str):
                out[symbol_name(op)] = sig
    return out


def mark_args_read_only(module: ir.Module) -> None:
    """Mark tensor parameters of public functions `bufferization.writable = false`.

    One-shot bufferization otherwise treats function arguments as writable
    and may update a caller's numpy array in place (e.g. `tensor.insert`
    into an argument).
    """
    false = ir.BoolAttr.get(False)
    for op in module.body.operations:
        if not _is_public_definition(op):
            continue
        ftype = op.attributes["function_type"].value
        if not any(isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType))
                   for t in ftype.inputs):
            continue
        old = op.attributes.get("arg_attrs")
        new = []
        for i, t in enumerate(ftype.inputs):
            entries: dict[str, ir.Attribute] = {}
            if old is not None:
                d = ir.DictAttr(old[i])
                for k in range(len(d)):
                    entries[d[k].name] = d[k].attr
            if isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType)):
                entries.setdefault("bufferization.writable", false)
            new.append(ir.DictAttr.get(entries))
        op.attributes["arg_attrs"] = ir.ArrayAttr.get(new)


def donated_arguments(module: ir.Module) -> dict[str, list[int]]:
    """Public function name -> its tensor parameters marked `bufferization.writable = true`.

    The caller donates those arrays: the compiled code may overwrite them.
    """
    out = {}
    for op in module.body.operations:
        if not _is_public_definition(op) or "arg_attrs" not in op.attributes:
            continue
        donated = []
        for i, attrs in enumerate(op.attributes["arg_attrs"]):
            d = ir.DictAttr(attrs)
            if "bufferization.writable" in d and ir.BoolAttr(d["bufferization.writable"]).value:
                donated.append(i)
        if donated:
            out[symbol_name(op)] = donated
    return out
