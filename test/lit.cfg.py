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


def find_tool(name):
    for d in (bindir,):
        cand = os.path.join(d, name)
        if os.path.exists(cand):
            return cand
    found = shutil.which(name)
    if found is None:
        lit_config.fatal(f"cannot find '{name}': install the package (see README)")
    return found


import mlir  # noqa: E402  (the installed upstream bindings)

mlir_bin = os.path.join(os.path.dirname(mlir.__file__), "bin")
root = os.path.abspath(os.path.join(config.test_source_root, ".."))

config.substitutions.append(("%PYTHON", python))
config.substitutions.append(("%autodiff_root", root))
config.substitutions.append(("%irdl", os.path.join(root, "dialects", "autodiff.irdl.mlir")))
config.substitutions.append(("%mlir_opt", os.path.join(mlir_bin, "mlir-opt")))
for tool in ("autodiff-opt", "autodiff-run"):
    config.substitutions.append((f"{tool}", find_tool(tool)))
config.substitutions.append(("filecheck", find_tool("filecheck")))
config.substitutions.append(("not ", f"{python} {os.path.join(root, 'test', 'not.py')} "))

try:
    import jax  # noqa: F401

    config.available_features.add("jax")
except ImportError:
    pass
if shutil.which("ptxas"):
    config.available_features.add("ptxas")
