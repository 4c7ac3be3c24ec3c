"""A fake CUDA driver (`libcuda.so.1`) for tests on machines without a GPU.

It implements the driver entry points our CUDA runtime (csrc/cuda_runtime.c)
and `cuda_driver.cuda_device` call, appends one line per call to the file
named by FAKE_CUDA_LOG, backs device memory with malloc and copies with
memcpy (so data round trips), and launches nothing (FAKE_KERNEL_DOUBLES=1:
the "kernel" doubles the float array of its first parameter).
FAKE_CUDA_FAIL=name:code makes `name` fail with `code`. Device 0 reports
compute capability 9.0.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

FAKE_DRIVER = r"""
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
static int next_handle = 1;

static void note(const char *fmt, ...) {
  const char *path = getenv("FAKE_CUDA_LOG");
  if (!path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

/* FAKE_CUDA_FAIL=name:code makes `name` fail with `code`. */
static CUresult outcome(const char *name) {
  const char *spec = getenv("FAKE_CUDA_FAIL");
  size_t n = strlen(name);
  if (spec && strncmp(spec, name, n) == 0 && spec[n] == ':')
    return atoi(spec + n + 1);
  return 0;
}
#define RETURN(name) return outcome(name)

static void *handle(void) { return (void *)(uintptr_t)(0x1000 * next_handle++); }
static int id(const void *h) { return (int)((uintptr_t)h / 0x1000); }

CUresult cuGetErrorName(CUresult e, const char **s) {
  *s = e == 209 ? "CUDA_ERROR_NO_BINARY_FOR_GPU"
     : e == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_FAKE";
  return 0;
}
CUresult cuInit(unsigned flags) { note("cuInit %u", flags); RETURN("cuInit"); }
CUresult cuDeviceGetCount(int *n) { *n = 1; note("cuDeviceGetCount"); RETURN("cuDeviceGetCount"); }
CUresult cuDeviceGetName(char *name, int len, int dev) {
  snprintf(name, (size_t)len, "Fake GPU %d", dev); RETURN("cuDeviceGetName");
}
CUresult cuDeviceGet(int *d, int ordinal) {
  *d = ordinal; note("cuDeviceGet %d", ordinal); RETURN("cuDeviceGet");
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  /* 75/76: compute capability 9.0 (an H100) */
  *v = attr == 115 ? 1 : attr == 97 ? 232448 : attr == 75 ? 9 : 0;
  note("cuDeviceGetAttribute %d", attr); (void)dev; RETURN("cuDeviceGetAttribute");
}
static void *current;
CUresult cuDevicePrimaryCtxRetain(void **c, int dev) {
  *c = handle(); note("cuDevicePrimaryCtxRetain %d -> ctx%d", dev, id(*c));
  RETURN("cuDevicePrimaryCtxRetain");
}
CUresult cuCtxGetCurrent(void **c) { *c = current; return 0; }
CUresult cuCtxSetCurrent(void *c) {
  current = c; note("cuCtxSetCurrent ctx%d", id(c)); RETURN("cuCtxSetCurrent");
}
CUresult cuCtxSynchronize(void) { note("cuCtxSynchronize"); RETURN("cuCtxSynchronize"); }
CUresult cuModuleLoadData(void **m, const void *image) {
  const unsigned char *b = image;
  int text = 1;
  for (int i = 0; i < 4; ++i) text = text && b[i] >= 32 && b[i] < 127;
  if (text) note("cuModuleLoadData %s", (const char *)image);
  else note("cuModuleLoadData bytes=%02x%02x%02x%02x", b[0], b[1], b[2], b[3]);
  CUresult r = outcome("cuModuleLoadData");
  if (!r) *m = handle();
  return r;
}
CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned n, int *opts, void **vals) {
  note("cuModuleLoadDataEx %s nopts=%u opt0=%d val0=%d", (const char *)image, n,
       opts[0], (int)(intptr_t)vals[0]);
  CUresult r = outcome("cuModuleLoadDataEx");
  if (r) strcpy((char *)vals[1], "ptxas fatal: bad ptx");
  else *m = handle();
  return r;
}
CUresult cuModuleUnload(void *m) { note("cuModuleUnload mod%d", id(m)); RETURN("cuModuleUnload"); }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
  *f = handle(); note("cuModuleGetFunction mod%d %s", id(m), name);
  RETURN("cuModuleGetFunction");
}
CUresult cuFuncSetAttribute(void *f, int attr, int value) {
  note("cuFuncSetAttribute %d %d", attr, value); (void)f; RETURN("cuFuncSetAttribute");
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, unsigned by, unsigned bz, unsigned smem,
                        void *s, void **params, void **extra) {
  note("cuLaunchKernel grid=%u,%u,%u block=%u,%u,%u smem=%u stream%d",
       gx, gy, gz, bx, by, bz, smem, id(s));
  /* the "kernel": doubles the float array passed as first parameter */
  if (params && getenv("FAKE_KERNEL_DOUBLES")) {
    float *x = *(float **)params[0];
    int n = *(int *)params[1];
    for (int i = 0; i < n; ++i) x[i] *= 2.0f;
  }
  (void)f; (void)extra; RETURN("cuLaunchKernel");
}
CUresult cuStreamCreate(void **s, unsigned flags) {
  *s = handle(); note("cuStreamCreate flags=%u -> stream%d", flags, id(*s));
  RETURN("cuStreamCreate");
}
CUresult cuStreamDestroy_v2(void *s) { note("cuStreamDestroy_v2 stream%d", id(s)); RETURN("cuStreamDestroy_v2"); }
CUresult cuStreamSynchronize(void *s) { note("cuStreamSynchronize stream%d", id(s)); RETURN("cuStreamSynchronize"); }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned flags) {
  note("cuStreamWaitEvent stream%d event%d", id(s), id(e)); (void)flags; RETURN("cuStreamWaitEvent");
}
CUresult cuEventCreate(void **e, unsigned flags) {
  *e = handle(); note("cuEventCreate flags=%u -> event%d", flags, id(*e)); RETURN("cuEventCreate");
}
CUresult cuEventDestroy_v2(void *e) { note("cuEventDestroy_v2 event%d", id(e)); RETURN("cuEventDestroy_v2"); }
CUresult cuEventRecord(void *e, void *s) { note("cuEventRecord event%d stream%d", id(e), id(s)); RETURN("cuEventRecord"); }
CUresult cuEventSynchronize(void *e) { note("cuEventSynchronize event%d", id(e)); RETURN("cuEventSynchronize"); }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
  *ms = 1.5f; note("cuEventElapsedTime event%d event%d", id(a), id(b)); RETURN("cuEventElapsedTime");
}
CUresult cuMemAlloc_v2(unsigned long long *p, size_t n) {
  *p = (uintptr_t)malloc(n); note("cuMemAlloc_v2 %zu", n); RETURN("cuMemAlloc_v2");
}
CUresult cuMemFree_v2(unsigned long long p) { free((void *)(uintptr_t)p); note("cuMemFree_v2"); RETURN("cuMemFree_v2"); }
CUresult cuMemAllocManaged(unsigned long long *p, size_t n, unsigned flags) {
  *p = (uintptr_t)malloc(n); note("cuMemAllocManaged %zu flags=%u", n, flags); RETURN("cuMemAllocManaged");
}
#ifndef FAKE_NO_POOLS
CUresult cuMemAllocAsync(unsigned long long *p, size_t n, void *s) {
  CUresult r = outcome("cuMemAllocAsync");
  if (!r) *p = (uintptr_t)malloc(n);
  note("cuMemAllocAsync %zu stream%d", n, id(s));
  return r;
}
CUresult cuMemFreeAsync(unsigned long long p, void *s) {
  free((void *)(uintptr_t)p); note("cuMemFreeAsync stream%d", id(s)); RETURN("cuMemFreeAsync");
}
CUresult cuDeviceGetDefaultMemPool(void **pool, int dev) {
  *pool = handle(); note("cuDeviceGetDefaultMemPool %d -> pool%d", dev, id(*pool));
  RETURN("cuDeviceGetDefaultMemPool");
}
CUresult cuMemPoolSetAttribute(void *pool, int attr, void *value) {
  note("cuMemPoolSetAttribute pool%d %d %llu", id(pool), attr,
       (unsigned long long)*(uint64_t *)value);
  RETURN("cuMemPoolSetAttribute");
}
#endif
CUresult cuMemcpyAsync(unsigned long long d, unsigned long long s, size_t n, void *st) {
  memcpy((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
  note("cuMemcpyAsync %zu stream%d", n, id(st)); RETURN("cuMemcpyAsync");
}
CUresult cuMemsetD32Async(unsigned long long d, unsigned v, size_t n, void *st) {
  for (size_t i = 0; i < n; ++i) ((unsigned *)(uintptr_t)d)[i] = v;
  note("cuMemsetD32Async %u %zu stream%d", v, n, id(st)); RETURN("cuMemsetD32Async");
}
CUresult cuMemsetD16Async(unsigned long long d, unsigned short v, size_t n, void *st) {
  for (size_t i = 0; i < n; ++i) ((unsigned short *)(uintptr_t)d)[i] = v;
  note("cuMemsetD16Async %u %zu stream%d", (unsigned)v, n, id(st)); RETURN("cuMemsetD16Async");
}
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
  note("cuMemHostRegister_v2 %zu %u", n, flags); (void)p; RETURN("cuMemHostRegister_v2");
}
CUresult cuMemHostUnregister(void *p) { note("cuMemHostUnregister"); (void)p; RETURN("cuMemHostUnregister"); }
CUresult cuMemcpyHtoD_v2(unsigned long long d, const void *s, size_t n) {
  memcpy((void *)(uintptr_t)d, s, n); note("cuMemcpyHtoD_v2 %zu", n); RETURN("cuMemcpyHtoD_v2");
}
/* Logs the map's fields innermost first (addresses relative to FAKE_TMA_BASE, a
 * decimal address, when set) and fills the 128 bytes with them. */
CUresult cuTensorMapEncodeTiled(void *map, int type, unsigned rank, void *addr,
                                const uint64_t *dims, const uint64_t *strides,
                                const uint32_t *box, const uint32_t *estrides,
                                int interleave, int swizzle, int l2, int oob) {
  char line[512];
  const char *base = getenv("FAKE_TMA_BASE");
  long long where = (long long)(uintptr_t)addr - (base ? atoll(base) : 0);
  int n = snprintf(line, sizeof line, "cuTensorMapEncodeTiled type=%d rank=%u addr=%lld "
                   "dims=", type, rank, where);
  for (unsigned i = 0; i < rank; ++i)
    n += snprintf(line + n, sizeof line - n, "%s%llu", i ? "," : "", (unsigned long long)dims[i]);
  n += snprintf(line + n, sizeof line - n, " strides=");
  for (unsigned i = 0; i + 1 < rank; ++i)
    n += snprintf(line + n, sizeof line - n, "%s%llu", i ? "," : "", (unsigned long long)strides[i]);
  n += snprintf(line + n, sizeof line - n, " box=");
  for (unsigned i = 0; i < rank; ++i)
    n += snprintf(line + n, sizeof line - n, "%s%u", i ? "," : "", box[i]);
  n += snprintf(line + n, sizeof line - n, " elementstrides=");
  for (unsigned i = 0; i < rank; ++i)
    n += snprintf(line + n, sizeof line - n, "%s%u", i ? "," : "", estrides[i]);
  snprintf(line + n, sizeof line - n, " interleave=%d swizzle=%d l2=%d oob=%d",
           interleave, swizzle, l2, oob);
  note("%s", line);
  memset(map, 0, 128);
  memcpy(map, line, strlen(line) < 128 ? strlen(line) : 128);
  RETURN("cuTensorMapEncodeTiled");
}
"""


def build_fake_driver(directory: Path, cc: str, *flags: str) -> Path:
    """Compile the fake driver as `directory/libcuda.so.1`; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / "fake_cuda.c"
    src.write_text(FAKE_DRIVER)
    out = directory / "libcuda.so.1"
    # test code: compiled without -Werror (unused parameters of the signatures it mimics)
    cmd = [cc, "-std=c11", "-O0", "-fPIC", "-shared", *flags, str(src), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out
