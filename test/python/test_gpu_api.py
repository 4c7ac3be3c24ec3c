"""`ad.jit(f, device="gpu")` and `autodiff-run --device gpu`: run on a device or say why not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mlir_autodiff as ad
import mlir_autodiff.numpy as anp
from mlir_autodiff.gpu import NoCudaDevice, cuda_device

try:
    DEVICE = cuda_device()
    NO_DEVICE = ""
except NoCudaDevice as err:
    DEVICE = None
    NO_DEVICE = str(err)

AUTODIFF_RUN = Path(sys.executable).with_name("autodiff-run")
PROGRAM = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = math.tanh %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


def f(x):
    return anp.tanh(x) * 2.0


@pytest.mark.skipif(DEVICE is not None, reason="a CUDA device is present")
def test_jit_on_gpu_without_a_device_is_one_clear_error():
    g = ad.jit(f, device="gpu")
    with pytest.raises(NoCudaDevice, match="^no CUDA device: "):
        g(np.ones(4, np.float32))


@pytest.mark.skipif(DEVICE is None, reason=NO_DEVICE or "no CUDA device")
def test_jit_on_gpu_matches_numpy():
    x = np.linspace(-2, 2, 4096, dtype=np.float32)
    np.testing.assert_allclose(ad.jit(f, device="gpu")(x), 2 * np.tanh(x), rtol=1e-6)
    grad = ad.jit(ad.grad(lambda x: anp.sum(f(x))), device="gpu")(x)
    np.testing.assert_allclose(grad, 2 * (1 - np.tanh(x) ** 2), rtol=1e-5)


def test_unknown_device_is_rejected():
    with pytest.raises(ValueError, match="device must be one of cpu, gpu"):
        ad.jit(f, device="tpu")


def test_autodiff_run_on_gpu(tmp_path):
    src = tmp_path / "tanh.mlir"
    src.write_text(PROGRAM)
    out = subprocess.run([str(AUTODIFF_RUN), str(src), "--device", "gpu",
                          "--arg", "[0, 1, 2, 3]:f32"], capture_output=True, text=True)
    assert out.returncode >= 0 and "Traceback" not in out.stderr
    if DEVICE is None:
        assert out.returncode == 1
        assert out.stderr.strip().startswith("autodiff-run: error: no CUDA device: ")
        assert len(out.stderr.strip().splitlines()) == 1
    else:
        assert out.returncode == 0, out.stderr
        assert "result[0]: tensor<4xf32> = [0, 0.761594, 0.964028, 0.995055]" in out.stdout
