"""Every function of the differentiation test tables also compiles for the GPU.

The functions `test_ad_rules.py` checks numerically (each rule on scalars and
inside linalg.generic, the linalg/tensor/control-flow tables), after
`--autodiff-jvp,--autodiff-vjp` (forward, reverse and second-order wrappers),
and every case of `test_vmap.py` after `--autodiff-vmap`, go through `--autodiff-lower-to-gpu` to a fat binary, and ptxas really runs:
each binary must hold a cubin for the requested SM. One module per table (the
tables alternate between sm_90 and sm_80) keeps the ptxas calls few.
"""

from __future__ import annotations

import shutil

import pytest
from mlir import ir

from mlir_autodiff import dialects
from mlir_autodiff import gpu as adgpu
from mlir_autodiff.transforms.gpu.pipeline import LowerToGpu
from mlir_autodiff.transforms.pipeline import run_pipeline

pytest.importorskip("jax", reason="the rule tables use jax functions as their oracles")
import ad_check  # noqa: E402
import test_ad_rules as tables  # noqa: E402
import test_vmap  # noqa: E402
from vmap_cases import CASES as VMAP_CASES  # noqa: E402

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None,
                                 reason="ptxas (CUDA toolkit) is not on PATH")

TABLES = {
    "scalar_rules": [tables.scalar_fn(r, "f64") for r in tables.RULES],
    "generic_rules": [tables.generic_fn(r, "f64") for r in tables.RULES],
    "linalg": list(tables.LINALG),
    "tensor": list(tables.TENSOR),
    "control_flow": list(tables.CONTROL),
}


def vmap_module() -> str:
    """Every vmap case (`test_vmap.py`'s table) in one module, batched by --autodiff-vmap."""
    texts = []
    for c in VMAP_CASES:
        text = test_vmap.case_module(c)
        text = (text.replace("func.func @f(", f"func.func private @f_{c.id}(")
                .replace("fn = @f,", f"fn = @f_{c.id},")
                .replace("func.func @main(", f"func.func @main_{c.id}("))
        texts.append(text)
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse("\n".join(texts))
        run_pipeline(module, "autodiff-vmap")
        return str(module)


@needs_ptxas
@pytest.mark.parametrize("chip", ["sm_80", "sm_90"])
def test_batched_vmap_cases_reach_a_fatbin(chip: str) -> None:
    text = vmap_module()
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        run_pipeline(module, [LowerToGpu(chip=chip, format="fatbin")])
        objects = adgpu.gpu_objects(module)
        assert objects
        sm = int(chip[3:])
        for obj in objects:
            assert [s for s, _ in adgpu.fatbin_cubins(obj.data)] == [sm]
        assert "func.func" not in str(module)


#: Each table compiles for one chip, the chips alternating over the tables (every
#: table reaches a real cubin, both SMs are exercised; each compile costs 7-20 s).
TABLE_CHIPS = [(t, ("sm_90", "sm_80")[i % 2]) for i, t in enumerate(sorted(TABLES))]


@needs_ptxas
@pytest.mark.parametrize("table,chip", TABLE_CHIPS)
def test_differentiated_tables_reach_a_fatbin(table: str, chip: str) -> None:
    text = ad_check.build_module(TABLES[table])
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        run_pipeline(module, [LowerToGpu(chip=chip, format="fatbin")])
        objects = adgpu.gpu_objects(module)
        # Scalar functions have no parallel loops: they compile to host code only.
        assert objects or table == "scalar_rules", "no gpu.binary produced"
        sm = int(chip[3:])
        for obj in objects:
            cubins = adgpu.fatbin_cubins(obj.data)
            assert [s for s, _ in cubins] == [sm]
            for _, elf in cubins:
                assert elf[:4] == b"\x7fELF" and adgpu.cubin_arch(elf) == sm
        assert ("gpu.launch_func" in str(module)) == bool(objects)
        assert "func.func" not in str(module)  # everything reached the LLVM dialect
