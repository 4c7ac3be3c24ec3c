"""LLVM's command-line options for CPU code (transforms/llvm_options.py): set once per
process in the LLVM the ExecutionEngine runs, passed to llc by native builds, named
by the compilation cache's key, and never set by a process that lowered to the GPU
first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mlir_autodiff import compile_cache, native_build
from mlir_autodiff.transforms import llvm_options

#: In a fresh process: the object code the ExecutionEngine makes of a 96^3 matmul
#: (loops whose addressing loop strength reduction rewrites), and the product.
OBJECT_SCRIPT = textwrap.dedent("""
    import hashlib, json, os, tempfile
    import numpy as np
    from mlir.execution_engine import ExecutionEngine
    from mlir_autodiff import numpy as anp
    from mlir_autodiff import lower
    from mlir_autodiff.runtime import CompiledModule
    from mlir_autodiff.transforms import llvm_options

    a = np.arange(96 * 96, dtype=np.float32).reshape(96, 96) % 7
    compiled = CompiledModule(lower(lambda x, y: x @ y, a, a).as_text("autodiff"))
    product = compiled["main"](a, a)
    with compiled.context:
        engine = ExecutionEngine(compiled.module, opt_level=3, enable_object_dump=True)
        engine.initialize()
        engine.raw_lookup("_mlir_ciface_main")
        path = os.path.join(tempfile.mkdtemp(), "main.o")
        engine.dump_to_object_file(path)
    print(json.dumps({"options": list(llvm_options._set),
                      "object": hashlib.sha256(open(path, "rb").read()).hexdigest(),
                      "product": hashlib.sha256(product.tobytes()).hexdigest()}))
""")


def _object(options: str | None) -> dict:
    env = dict(os.environ, AUTODIFF_CACHE="0")
    env.pop(llvm_options.ENV, None)
    if options is not None:
        env[llvm_options.ENV] = options
    proc = subprocess.run([sys.executable, "-c", OBJECT_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_options_reach_the_llvm_of_this_process() -> None:
    default, again, none = _object(None), _object(None), _object("")
    unscheduled = _object("-enable-misched=false")  # another schedule: other bytes
    assert default["options"] == list(llvm_options.DEFAULT_OPTIONS) == ["-disable-lsr"]
    assert none["options"] == [] and unscheduled["options"] == ["-enable-misched=false"]
    # the same options make the same code; another option makes other code ...
    assert default["object"] == again["object"]
    assert unscheduled["object"] != none["object"]
    # ... that computes the same product, to the bit, with or without LSR
    assert default["product"] == none["product"] == unscheduled["product"]


def test_a_process_that_lowers_to_the_gpu_first_keeps_llvms_defaults(monkeypatch) -> None:
    monkeypatch.delenv(llvm_options.ENV, raising=False)
    parsed = []
    monkeypatch.setattr(llvm_options, "_parse", lambda options: parsed.append(options) or True)
    monkeypatch.setattr(llvm_options, "_set", None)
    llvm_options.note_gpu_codegen()
    assert llvm_options.configure_for_cpu() == () and llvm_options.cpu_options() == ()
    assert parsed == []
    # CPU first: the options are set once, and a later GPU lowering changes nothing
    monkeypatch.setattr(llvm_options, "_set", None)
    assert llvm_options.configure_for_cpu() == llvm_options.DEFAULT_OPTIONS
    llvm_options.note_gpu_codegen()
    assert llvm_options.configure_for_cpu() == llvm_options.DEFAULT_OPTIONS
    assert parsed == [llvm_options.DEFAULT_OPTIONS]


def test_the_cache_key_names_the_options(monkeypatch, tmp_path) -> None:
    cache = compile_cache.Cache(str(tmp_path))
    keys = []
    for options in (None, "", "-disable-lsr", "-disable-lsr -lsr-complexity-limit=100"):
        monkeypatch.setattr(llvm_options, "_set", None)
        if options is None:
            monkeypatch.delenv(llvm_options.ENV, raising=False)
        else:
            monkeypatch.setenv(llvm_options.ENV, options)
        keys.append(cache.key("module {}", device="cpu", threads=1, donated=()))
    assert keys[0] == keys[2]  # the default is -disable-lsr
    assert len({keys[0], keys[1], keys[3]}) == 3


@pytest.mark.skipif(native_build.missing_tool() is not None, reason="no C compiler here")
def test_native_builds_give_opt_and_llc_the_options(monkeypatch, tmp_path) -> None:
    import mlir_autodiff as ad

    commands = []
    run = native_build._run
    monkeypatch.setattr(native_build, "_run",
                        lambda cmd, what: (commands.append(cmd), run(cmd, what))[1])
    monkeypatch.setattr(llvm_options, "_set", ("-disable-lsr",))
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    ad.export(lambda v: v * 2.0, x, path=tmp_path / "a")
    for tool in ("opt", "llc"):
        ran = [c for c in commands if os.path.basename(c[0]) == tool]
        assert len(ran) == 1 and "-disable-lsr" in ran[0]
    np.testing.assert_array_equal(ad.aot.load(tmp_path / "a")(x), x * 2.0)
