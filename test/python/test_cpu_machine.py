"""The CPU description the schedules are derived from (transforms/cpu/machine.py) and the
derivation of their tiles (parameters.derive): emulated machines through the AUTODIFF_CPU_*
overrides and a fake /proc + /sys tree, the reference machine's measured values, the
compilation cache's key, `autodiff-opt --print-machine`, and code compiled for two emulated
machines (one small jit each, in a subprocess)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import textwrap
from contextlib import redirect_stdout

import numpy as np
import pytest

from mlir_autodiff import compile_cache
from mlir_autodiff.tools import autodiff_opt
from mlir_autodiff.transforms.cpu import machine as mach
from mlir_autodiff.transforms.cpu import parameters
from mlir_autodiff.transforms.cpu.parameters import MatmulSchedule, derive

MIN = 2 * 40 ** 3


def emulate(**fields: str) -> mach.Machine:
    """A machine given by overrides only (every field set: nothing of the host leaks in)."""
    env = {"AUTODIFF_CPU_VENDOR": "intel", "AUTODIFF_CPU_FAMILY": "6",
           "AUTODIFF_CPU_MODEL": "0x8f", "AUTODIFF_CPU_CORES": "8", "AUTODIFF_CPU_LOGICAL": "16",
           "AUTODIFF_CPU_L3": "32M"}
    env.update({mach.ENV[k]: v for k, v in fields.items()})
    return mach.read_machine(env=env)


#: The machine the constants were measured on (benchmarks/notes/cpu-schedules.md): a Xeon with
#: AVX-512, 48 KB L1d and 2 MB L2. Its derivation must give the values measured best there.
REFERENCE = dict(vector_bits="512", l1d=str(parameters.REFERENCE["l1d"]),
                 l2=str(parameters.REFERENCE["l2"]))


def test_the_reference_machine_derives_the_measured_constants():
    assert parameters.REFERENCE == {"l1d": 48 << 10, "l2": 2 << 20}
    p = derive(emulate(**REFERENCE))
    assert p.matmul == MatmulSchedule(mr=8, nr=32, cache=(128, 256, 128), min_flops=MIN,
                                      packed_k=1024, packed_n=128, mr_max=10)
    assert p.pack_min_flops == 2 * 448 ** 3
    assert (p.row_tile_bytes, p.row_max_bytes) == (4 << 10, 256 << 10)
    assert p.reduction.lanes == {32: 64, 64: 32}
    assert p.threads == 8


def test_the_host_uses_its_own_derivation():
    host = mach.host_machine()
    p = derive(host)
    assert parameters.matmul_schedule() == p.matmul
    assert parameters.PACK_MIN_FLOPS == p.pack_min_flops
    assert parameters.ROW_TILE_BYTES == p.row_tile_bytes
    assert parameters.ROW_MAX_BYTES == p.row_max_bytes
    assert parameters.REDUCTION == p.reduction
    for bits in (128, 256, 512):
        with parameters.target_vector_bits(bits):
            assert parameters.matmul_schedule() == derive(parameters.portable_machine(bits)).matmul


def test_portable_targets_keep_the_measured_tiles():
    """`ad.export`'s x86-64-v3 / -v4 targets: any CPU of that width, desktop caches."""
    with parameters.target_vector_bits(256):
        assert parameters.matmul_schedule() == MatmulSchedule(
            mr=4, nr=16, cache=(64, 256, 128), min_flops=MIN, packed_k=1024, packed_n=128)
    with parameters.target_vector_bits(512):
        assert parameters.matmul_schedule() == MatmulSchedule(
            mr=8, nr=32, cache=(128, 256, 128), min_flops=MIN, packed_k=1024, packed_n=128,
            mr_max=10)


@pytest.mark.skipif(
    (mach.host_machine().l1d, mach.host_machine().l2, mach.host_machine().vector_bits)
    != (parameters.REFERENCE["l1d"], parameters.REFERENCE["l2"], 512),
    reason="the host is not the reference machine")
def test_the_real_machine_derives_the_former_constants():
    """On the machine they were measured on, the values these parameters had as constants."""
    assert parameters.matmul_schedule() == MatmulSchedule(
        mr=8, nr=32, cache=(128, 256, 128), min_flops=MIN, packed_k=1024, packed_n=128,
        mr_max=10)
    assert parameters.PACK_MIN_FLOPS == 2 * 448 ** 3
    assert (parameters.ROW_TILE_BYTES, parameters.ROW_MAX_BYTES) == (4 << 10, 256 << 10)
    assert parameters.REDUCTION.lanes == {32: 64, 64: 32}


#: Run under an emulated machine: a packed matmul, an unpacked one with a K cache tile, and a
#: row softmax in one jit; prints the results' digests as JSON lists.
EMULATED = textwrap.dedent("""
    import json, sys
    import numpy as np
    import mlir_autodiff as ad
    from mlir_autodiff import numpy as anp
    from mlir_autodiff.transforms.cpu import parameters

    def f(a, b, c, d, x):
        e = anp.exp(x - anp.max(x, axis=1, keepdims=True))
        return a @ b, c @ d, e / anp.sum(e, axis=1, keepdims=True)

    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in
            [(384, 384), (384, 384), (96, 520), (520, 288), (64, 9000)]]
    out = ad.jit(f)(*args)
    print(json.dumps({"schedule": str(parameters.matmul_schedule()),
                      "pack": parameters.PACK_MIN_FLOPS,
                      "out": [np.asarray(o, np.float64).ravel()[::97].tolist() for o in out]}))
""")


@pytest.mark.parametrize("env", [
    {"AUTODIFF_CPU_VENDOR": "amd", "AUTODIFF_CPU_FAMILY": "0x19", "AUTODIFF_CPU_L1D": "32K",
     "AUTODIFF_CPU_L2": "1M"},
    {"AUTODIFF_CPU_VECTOR_BITS": "256", "AUTODIFF_CPU_L1D": "32K", "AUTODIFF_CPU_L2": "256K"},
], ids=["zen4", "avx2-256k-l2"])
def test_emulated_machines_compile_correct_code(env):
    """The tiles another machine derives (smaller K tiles, a 32-column packed N tile, rows
    too long to fuse) still compute the same values (against numpy in float64)."""
    proc = subprocess.run([sys.executable, "-c", EMULATED], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    m = mach.read_machine(env=env)
    assert got["schedule"] == str(derive(m).matmul) and got["pack"] == derive(m).pack_min_flops
    rng = np.random.default_rng(0)
    a, b, c, d, x = [rng.standard_normal(s).astype(np.float64) for s in
                     [(384, 384), (384, 384), (96, 520), (520, 288), (64, 9000)]]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    for want, have in zip([a @ b, c @ d, e / e.sum(axis=1, keepdims=True)], got["out"],
                          strict=True):
        np.testing.assert_allclose(have, want.ravel()[::97], rtol=2e-4, atol=2e-4)


def test_zen4_double_pumped_avx512_with_1mb_l2():
    m = emulate(vendor="amd", family="0x19", model="0x61", vector_bits="512", l1d="32K",
                l2="1M")
    assert m.double_pumped and m.fma_units == 1 and m.peak_flops_per_cycle == 32
    p = derive(m)
    # K tiles from the 32 KB L1: (8 + 32) x 64 x 4 B = 10 KB <= 16 KB; 8 x 512 x 4 B <= 24 KB.
    assert p.matmul == MatmulSchedule(mr=8, nr=32, cache=(128, 256, 64), min_flops=MIN,
                                      packed_k=512, packed_n=128, mr_max=10)
    assert p.pack_min_flops == 2 * 320 ** 3
    assert (p.row_tile_bytes, p.row_max_bytes) == (4 << 10, 128 << 10)


def test_zen5_full_width_avx512():
    m = emulate(vendor="amd", family="0x1a", model="0x44", vector_bits="512", l1d="48K",
                l2="1M")
    assert not m.double_pumped and m.fma_units == 2 and m.peak_flops_per_cycle == 64
    # the packed N tile measured best on Zen 5 (128 columns: a 512 KB panel in its 1 MB L2)
    assert derive(m).matmul == MatmulSchedule(mr=8, nr=32, cache=(128, 256, 128),
                                              min_flops=MIN, packed_k=1024, packed_n=128,
                                              mr_max=10)


def test_avx2_laptop_with_256kb_l2():
    m = emulate(vector_bits="256", l1d="32K", l2="256K", cores="4")
    assert not m.double_pumped
    p = derive(m)
    assert p.matmul == MatmulSchedule(mr=4, nr=16, cache=(64, 128, 128), min_flops=MIN,
                                      packed_k=1024, packed_n=32)
    assert p.pack_min_flops == 2 * 128 ** 3
    assert (p.row_tile_bytes, p.row_max_bytes) == (4 << 10, 32 << 10)
    assert p.reduction.lanes == {32: 32, 64: 16}
    assert p.threads == 4


def test_server_with_2mb_l2_and_avx512_matches_the_reference():
    server = emulate(vector_bits="512", l1d="48K", l2="2M", cores="56", l3="105M")
    assert derive(server).matmul == derive(emulate(**REFERENCE)).matmul
    assert derive(server).threads == 56


def test_a_bigger_l1_or_l2_never_shrinks_a_tile():
    small = derive(emulate(vector_bits="512", l1d="32K", l2="512K"))
    big = derive(emulate(vector_bits="512", l1d="64K", l2="4M"))
    for a, b in zip(small.matmul.cache, big.matmul.cache, strict=True):
        assert a <= b
    assert small.matmul.packed_k <= big.matmul.packed_k
    assert small.pack_min_flops <= big.pack_min_flops


def _fake_host(root, *, vendor, family, flags, caches, siblings=2, cores=2):
    (root / "proc").mkdir()
    (root / "proc" / "cpuinfo").write_text(
        f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: 97\n"
        f"siblings\t: {siblings}\ncpu cores\t: {cores}\nflags\t\t: {' '.join(flags)}\n\n"
        f"processor\t: 1\nvendor_id\t: {vendor}\n")
    base = root / "sys/devices/system/cpu/cpu0/cache"
    for i, (level, kind, size) in enumerate(caches):
        d = base / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")


def test_cpuinfo_and_sysfs_are_read(tmp_path):
    _fake_host(tmp_path, vendor="AuthenticAMD", family=25,
               flags=["fpu", "avx", "avx2", "fma", "avx512f", "avx512bw"],
               caches=[(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                       (3, "Unified", "32768K")], siblings=4, cores=2)
    m = mach.read_machine(env={}, root=str(tmp_path))
    assert (m.vendor, m.family, m.model) == ("amd", 25, 97)
    assert m.vector_bits == 512 and m.double_pumped and m.fma_units == 1
    assert (m.l1d, m.l2, m.l3) == (32 << 10, 1 << 20, 32 << 20)
    assert "avx512f" in m.features and "fpu" not in m.features
    assert m.logical >= m.cores >= 1
    assert mach.llvm_cpu_name(m) == "znver4"  # not the host's: mapped from the family


def test_missing_sysfs_falls_back_to_defaults_and_overrides_win(tmp_path):
    _fake_host(tmp_path, vendor="GenuineIntel", family=6, flags=["avx", "avx2", "fma"],
               caches=[])
    m = mach.read_machine(env={}, root=str(tmp_path))
    assert m.vector_bits == 256 and not m.double_pumped
    assert (m.l1d, m.l2, m.l3) == (32 << 10, 1 << 20, 32 << 20)
    m = mach.read_machine(env={"AUTODIFF_CPU_L2": "2048K", "AUTODIFF_CPU_FMA_UNITS": "1",
                               "AUTODIFF_CPU_NAME": "alderlake"}, root=str(tmp_path))
    assert m.l2 == 2 << 20 and m.fma_units == 1 and mach.llvm_cpu_name(m) == "alderlake"


@pytest.mark.parametrize("var, value, words", [
    ("AUTODIFF_CPU_L2", "lots", "size for the CPU's l2"),
    ("AUTODIFF_CPU_VECTOR_BITS", "384", "must be 128, 256 or 512"),
    ("AUTODIFF_CPU_CORES", "0", "positive integer"),
    ("AUTODIFF_CPU_DOUBLE_PUMPED", "maybe", "double_pumped"),
])
def test_a_malformed_override_names_the_variable(var, value, words):
    with pytest.raises(ValueError, match=var) as err:
        mach.read_machine(env={var: value})
    assert words in str(err.value)


def test_the_host_ignores_a_malformed_override_with_a_warning():
    env = {"AUTODIFF_CPU_L2": "lots", "AUTODIFF_CPU_CORES": "0", "AUTODIFF_CPU_L1D": "64K"}
    with pytest.warns(UserWarning) as caught:
        m = mach.read_machine(env=env, strict=False)
    assert sorted(str(w.message).rsplit("; ", 1)[1] for w in caught) == [
        "AUTODIFF_CPU_CORES is ignored", "AUTODIFF_CPU_L2 is ignored"]
    real = mach.read_machine(env={})
    assert (m.l1d, m.l2, m.cores) == (64 << 10, real.l2, real.cores)


def test_the_compilation_cache_key_changes_with_the_machine(tmp_path, monkeypatch):
    cache = compile_cache.Cache(str(tmp_path))

    def key() -> str:
        return cache.key("module {}", device="cpu", threads=1, donated=[])

    host = mach.host_machine()
    before = key()
    assert key() == before
    for change in ({"l2": host.l2 * 2}, {"l1d": host.l1d // 2}, {"l3": host.l3 * 2},
                   {"double_pumped": not host.double_pumped}, {"vector_bits": 256},
                   {"family": host.family + 1}, {"fma_units": host.fma_units + 1}):
        other = dataclasses.replace(host, **change)
        monkeypatch.setattr(compile_cache, "host_machine", lambda other=other: other)
        assert key() != before, change
    # the name only labels the model, and the core counts choose no tile (a process pinned
    # to one core keeps its entries): no new compilation for them
    for change in ({"name": "some-name"}, {"cores": host.cores + 1, "logical": 1}):
        same = dataclasses.replace(host, **change)
        monkeypatch.setattr(compile_cache, "host_machine", lambda same=same: same)
        assert key() == before, change


def test_print_machine(monkeypatch):
    out = io.StringIO()
    with redirect_stdout(out):
        assert autodiff_opt.main(["--print-machine"]) == 0
    text = out.getvalue()
    host = mach.host_machine()
    assert f"{host.vector_bits} bits" in text
    assert f"matmul cache tile (M, N, K): {derive(host).matmul.cache}" in text
    assert "--print-machine" in autodiff_opt.HELP
    assert os.environ.get("AUTODIFF_CPU_L2") is None or "L2" in text
