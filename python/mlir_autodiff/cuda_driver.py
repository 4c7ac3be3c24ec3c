"""The CUDA driver as ctypes sees it: is there a device, and which chip is it?

`cuda_device()` loads `libcuda.so.1`, initialises it and describes device 0,
or raises `NoCudaDevice` ("no CUDA device: <reason>") without ever crashing
the process. Only the standard library: the GPU runtime (gpu.py) and exported
GPU artifacts (aot.py, which must run without MLIR) both ask here.
"""

from __future__ import annotations

import ctypes
import dataclasses
import re

DRIVER_LIBRARY = "libcuda.so.1"
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class NoCudaDevice(RuntimeError):
    """No usable CUDA driver or device; the message is `no CUDA device: <reason>`."""

    def __init__(self, reason: str):
        super().__init__(f"no CUDA device: {reason}")
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class CudaDevice:
    """Device 0 as the driver reports it."""

    name: str
    compute_capability: tuple[int, int]
    count: int

    @property
    def chip(self) -> str:
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"


def _cuda_error(lib: ctypes.CDLL, code: int) -> str:
    name = ctypes.c_char_p()
    try:
        if lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
            return f"{name.value.decode()} ({code})"
    except AttributeError:  # pragma: no cover - every driver has cuGetErrorName
        pass
    return f"CUDA error {code}"


def cuda_device(driver: str = DRIVER_LIBRARY) -> CudaDevice:
    """Query the CUDA driver for device 0; raise NoCudaDevice if there is none.

    `driver` is the driver library to load (the default is what the MLIR CUDA
    runtime links against).
    """
    try:
        lib = ctypes.CDLL(driver)
    except OSError as err:
        raise NoCudaDevice(f"cannot load the CUDA driver {driver} ({err})") from None
    try:
        rc = lib.cuInit(0)
        if rc != 0:
            raise NoCudaDevice(f"cuInit failed: {_cuda_error(lib, rc)}")
        count = ctypes.c_int(0)
        rc = lib.cuDeviceGetCount(ctypes.byref(count))
        if rc != 0:
            raise NoCudaDevice(f"cuDeviceGetCount failed: {_cuda_error(lib, rc)}")
        if count.value == 0:
            raise NoCudaDevice("the CUDA driver reports no devices")
        dev = ctypes.c_int(0)
        rc = lib.cuDeviceGet(ctypes.byref(dev), 0)
        if rc != 0:
            raise NoCudaDevice(f"cuDeviceGet(0) failed: {_cuda_error(lib, rc)}")
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        lib.cuDeviceGetAttribute(ctypes.byref(major),
                                 _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        lib.cuDeviceGetAttribute(ctypes.byref(minor),
                                 _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        buf = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(buf, 256, dev)
    except AttributeError as err:
        raise NoCudaDevice(f"{driver} is not a CUDA driver ({err})") from None
    return CudaDevice(buf.value.decode(errors="replace"), (major.value, minor.value), count.value)


def _chip_runs_on(chip: str, device: CudaDevice) -> bool:
    """A cubin for sm_XY runs on devices with major X and minor >= Y."""
    m = re.fullmatch(r"sm_(\d+?)(\d)[af]?", chip)
    if m is None:
        return False
    major, minor = int(m.group(1)), int(m.group(2))
    dmajor, dminor = device.compute_capability
    if chip[-1] in "af":  # architecture-specific code runs on exactly that SM
        return (dmajor, dminor) == (major, minor)
    return dmajor == major and dminor >= minor
