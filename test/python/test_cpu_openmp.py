"""The OpenMP runtime for threads > 1 (transforms/cpu/openmp.py): found when installed, a
clear error when it is not.
"""

from __future__ import annotations

import os
import platform
import sys

import numpy as np
import pytest
from cpu_cases import (
    mlp,
    strict_schedules,  # noqa: F401  (autouse)
)

import mlir_autodiff as ad
from mlir_autodiff.errors import CompilationError
from mlir_autodiff.transforms.cpu import openmp
from mlir_autodiff.transforms.cpu.openmp import openmp_runtime_library

RNG = np.random.default_rng(11)

@pytest.mark.skipif(not (sys.platform == "linux" and platform.machine() == "x86_64"),
                    reason="the intel-openmp dependency is declared for Linux x86-64 only")
def test_the_openmp_dependency_is_found() -> None:
    """On Linux x86-64 the package depends on intel-openmp, so threads > 1 always
    works there (and the threaded tests below run instead of skipping)."""
    path = openmp_runtime_library()
    assert path is not None and os.path.exists(path)


def test_threads_need_the_openmp_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an OpenMP runtime, threads=2 is a compile error that says what is missing."""
    monkeypatch.setattr(openmp, "openmp_runtime_library", lambda: None)
    params = (RNG.standard_normal((256, 256)).astype(np.float32),
              RNG.standard_normal((256, 64)).astype(np.float32))
    x = RNG.standard_normal((256, 256)).astype(np.float32)
    with pytest.raises(CompilationError, match="OpenMP runtime"):
        ad.jit(mlp, threads=2)(params, x)
