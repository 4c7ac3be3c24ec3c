"""Suite-wide settings."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

# A CPU schedule that fails to apply leaves the module on the naive loops
# (correct, slow, and silent: the transform script stops at the failing op,
# so every op of the module loses its schedule). The suite raises instead.
os.environ["AUTODIFF_STRICT_SCHEDULES"] = "1"
# The library verifies a pipeline's result once; the suite verifies after every pass,
# so a pass that breaks the IR is named by the verifier.
os.environ["AUTODIFF_VERIFY_EACH"] = "1"


# jit's persistent compilation cache goes to a directory of this test session (shared
# by the xdist workers, which inherit the variable from the controller's configure),
# never to the user's home; it is removed when the session ends.
_SESSION_CACHE = "AUTODIFF_TEST_SESSION_CACHE_DIR"


def pytest_configure(config) -> None:  # noqa: ANN001
    path = os.environ.get(_SESSION_CACHE)
    if not path:
        path = tempfile.mkdtemp(prefix="mlir-autodiff-test-cache-")
        os.environ[_SESSION_CACHE] = path
        config._autodiff_session_cache = path
    os.environ["AUTODIFF_CACHE_DIR"] = path
    # The suite compiles in memory (each miss would also build a cache entry in the
    # background: twice the compile work on the CI's two cores). The cache's own tests
    # (test_compile_cache.py, test_export.py) turn it on.
    os.environ.setdefault("AUTODIFF_CACHE", "0")


def pytest_unconfigure(config) -> None:  # noqa: ANN001
    path = getattr(config, "_autodiff_session_cache", None)
    if path:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _private_cache_when_patching(request: pytest.FixtureRequest) -> None:
    """A test that monkeypatches (a pass, a runtime lookup, ...) compiles with what it
    patched: it gets an empty compilation cache of its own, not the session's entries,
    which were compiled by the unpatched code under the same keys."""
    if "monkeypatch" in request.fixturenames:
        mp = request.getfixturevalue("monkeypatch")
        tmp = request.getfixturevalue("tmp_path_factory").mktemp("compile-cache")
        mp.setenv("AUTODIFF_CACHE_DIR", str(tmp))


@pytest.fixture
def llvm_o0(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compile at LLVM -O0 (AUTODIFF_OPT_LEVEL=0) for tests that check values, not the
    generated code or its speed: the MLIR pipeline (AD passes, schedules, lowering) is
    the same at every level, and LLVM's optimizer is most of the compile time of loop
    algorithms and large training steps. The ports, examples and execution tests keep
    the default level, so optimized code is still checked on real programs.
    Use it with `pytestmark = pytest.mark.usefixtures("llvm_o0")` or per test."""
    monkeypatch.setenv("AUTODIFF_OPT_LEVEL", "0")
