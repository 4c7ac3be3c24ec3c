# lit configuration for mlir-autodiff. Works with plain `lit test/` from an
# environment where the package is installed (the README's test command).
import os
import shutil
import sys

import lit.formats
import lit.util

config.name = "mlir-autodiff"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["python", "Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(
    os.environ.get("AUTODIFF_LIT_OUT", os.path.join(config.test_source_root, "..", "build")),
    "lit",
)
config.environment["PYTHONUNBUFFERED"] = "1"
for var in ("HOME", "PATH", "AUTODIFF_TRACEBACK", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

python = sys.executable
bindir = os.path.dirname(python)
# Tools (autodiff-opt, autodiff-run, filecheck, FileCheck) are found on PATH;
# the interpreter's bin directory comes first so an uninstalled checkout
# never shadows the installed package.
config.environment["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])
for tool in ("autodiff-opt", "autodiff-run", "filecheck"):
    if not os.path.exists(os.path.join(bindir, tool)) and shutil.which(tool) is None:
        lit_config.fatal(f"cannot find '{tool}': install the package first (see README)")

import mlir.ir  # noqa: E402  (the installed upstream bindings; a namespace package)

mlir_bin = os.path.join(os.path.dirname(mlir.ir.__file__), "bin")
root = os.path.abspath(os.path.join(config.test_source_root, ".."))

config.substitutions.append(("%PYTHON", python))
config.substitutions.append(("%autodiff_root", root))
config.substitutions.append(("%irdl", os.path.join(root, "dialects", "autodiff.irdl.mlir")))
config.substitutions.append(("%mlir_opt", os.path.join(mlir_bin, "mlir-opt")))
# `%not CMD`: CMD must fail with an exit code, not a signal (lit's `not` accepts crashes).
config.substitutions.append(("%not", f"{python} {os.path.join(root, 'test', 'not.py')}"))

try:
    import jax  # noqa: F401

    config.available_features.add("jax")
except ImportError:
    pass
if shutil.which("ptxas"):
    config.available_features.add("ptxas")
