"""The pass base class and the name -> pass registry.

A pass is a small frozen dataclass: its options are fields (with defaults and
a `metadata={"help": ...}` line), its flag a class attribute `name`. Passes
register themselves with `@register`; the registry imports each pass module
lazily by name, so listing or parsing a pipeline does not import every rule.

A pass either transforms the module in Python (`run`) or expands into a
pipeline of other passes (`expand`), e.g. `autodiff-lower-to-cpu` becomes a
sequence of upstream passes and a few Python steps.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence
from typing import Any, ClassVar, Union

from mlir import ir

#: pass flag -> module (under mlir_autodiff.transforms) that defines it: every
#: project pass, so that its flag works in a fresh process (`register` refuses
#: a project pass missing here; test_passes.py runs every listed flag).
_PASS_MODULES: dict[str, str] = {
    "autodiff-jvp": "jvp",
    "autodiff-vjp": "vjp",
    "autodiff-vmap": "vmap",
    "autodiff-functionalize-rng": "functionalize_rng",
    "autodiff-lower-rng": "lower_rng",
    "autodiff-lower-to-cpu": "cpu.pipeline",
    "autodiff-split-large-functions": "cpu.split",
    "autodiff-outline-repeated-loops": "cpu.repeats",
    "autodiff-shard-to-mpi": "shard_to_mpi",
    "autodiff-lower-to-cpu-mpi": "shard_to_mpi",
    "autodiff-unshare-empty-tensors": "bufferize",
    "autodiff-fuse-row-groups": "cpu.row_groups",
    "autodiff-lower-to-gpu": "gpu.pipeline",
    "autodiff-verify": "verify",
}

_REGISTRY: dict[str, type[Pass]] = {}


#: One element of an expanded pipeline: an upstream textual pipeline element
#: (e.g. "canonicalize" or "func.func(cse)") or a Python pass instance.
PipelineElement = Union[str, "Pass"]


@dataclasses.dataclass(frozen=True)
class Pass:
    """Base class of every project pass."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def run(self, module: ir.Operation) -> None:
        """Transform `module` (a builtin.module) in place.

        Report errors with `diagnostics.fail(op, msg)` and raise its result.
        """
        raise NotImplementedError

    def expand(self) -> Sequence[PipelineElement] | None:
        """Return the pipeline this pass stands for, or None to `run` it."""
        return None

    # -- options -------------------------------------------------------------

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if not f.name.startswith("_")]

    @classmethod
    def from_options(cls, options: dict[str, str]) -> Pass:
        """Build the pass from `{key=value}` strings; raises ValueError on a bad option."""
        fields = {f.name.replace("_", "-"): f for f in cls.options()}
        kwargs: dict[str, Any] = {}
        for key, raw in options.items():
            field = fields.get(key) or fields.get(key.replace("_", "-"))
            if field is None:
                known = ", ".join(sorted(fields)) or "none"
                raise ValueError(
                    f"pass '{cls.name}' has no option '{key}' (options: {known})"
                )
            kwargs[field.name] = _convert_option(cls.name, key, raw, field)
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as err:
            raise ValueError(f"pass '{cls.name}': {err}") from None

    def pipeline_text(self) -> str:
        """The pass as it would be written in a textual pipeline."""
        opts = []
        for f in self.options():
            value = getattr(self, f.name)
            if value != f.default:
                if isinstance(value, bool):
                    value = "true" if value else "false"
                elif isinstance(value, (list, tuple)):
                    value = ",".join(str(v) for v in value)
                opts.append(f"{f.name.replace('_', '-')}={value}")
        return self.name + ("{" + " ".join(opts) + "}" if opts else "")


def _convert_option(pass_name: str, key: str, raw: str, field: dataclasses.Field) -> Any:
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    choices = field.metadata.get("choices")
    try:
        if kind == "bool":
            low = raw.strip().lower()
            if low in ("", "1", "true", "on", "yes"):
                return True
            if low in ("0", "false", "off", "no"):
                return False
            raise ValueError
        if kind == "int":
            return int(raw, 0)
        if kind == "float":
            return float(raw)
        if kind.startswith("tuple"):
            return tuple(int(x) for x in raw.split(",") if x.strip())
        value = raw
    except ValueError:
        raise ValueError(
            f"pass '{pass_name}': option '{key}' expects a {kind}, got '{raw}'"
        ) from None
    if choices and value not in choices:
        raise ValueError(
            f"pass '{pass_name}': option '{key}' must be one of {', '.join(choices)}; got '{raw}'"
        )
    return value


def register(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make `cls` available by its `name`.

    A pass of this package must be declared in `_PASS_MODULES` with the module
    that defines it: `lookup` imports pass modules by that table, so an
    undeclared pass would be listed once its module happened to be imported
    and unknown otherwise. (Passes defined elsewhere, e.g. by a test, register
    as they are.)
    """
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no pass name")
    if cls.__module__.startswith(f"{__package__}."):
        declared = _PASS_MODULES.get(cls.name)
        if declared is None or f"{__package__}.{declared}" != cls.__module__:
            where = cls.__module__.removeprefix(f"{__package__}.")
            raise TypeError(
                f"pass '{cls.name}' ({cls.__qualname__} in {cls.__module__}) is not declared "
                f"in passes._PASS_MODULES as defined by '{where}'"
            )
    _REGISTRY[cls.name] = cls
    return cls


def lookup(name: str) -> type[Pass] | None:
    if name not in _REGISTRY and name in _PASS_MODULES:
        try:
            importlib.import_module(f"{__package__}.{_PASS_MODULES[name]}")
        except ModuleNotFoundError as err:
            if err.name and err.name.endswith(_PASS_MODULES[name]):
                return None  # declared but not implemented yet
            raise
    return _REGISTRY.get(name)


def all_passes() -> dict[str, type[Pass]]:
    for name in _PASS_MODULES:
        lookup(name)
    return dict(sorted(_REGISTRY.items()))


