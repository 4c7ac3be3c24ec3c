"""Real AD benchmark problems (ADBench, GradBench): loaders and objectives.

Objectives are written once against a numpy-like module `xp` (numpy,
`mlir_autodiff.numpy` or `jax.numpy`), so the same source is the reference,
the traced program and the JAX oracle.
"""

from pathlib import Path

#: The ADBench input files that ship with the repository (benchmarks/data/adbench;
#: origin, license and published reference values in benchmarks/data/README.md).
DATA = Path(__file__).resolve().parents[1] / "data" / "adbench"


def data_file(relative: str) -> Path:
    """The shipped ADBench input `relative` to benchmarks/data/adbench (e.g.
    "gmm/test.txt"); a missing file is an error, never a reason to skip."""
    path = DATA / relative
    if not path.is_file():
        raise FileNotFoundError(f"ADBench input {relative} is missing from {DATA} "
                                "(it ships with the repository: benchmarks/data/README.md)")
    return path
