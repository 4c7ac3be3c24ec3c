/*
 * Self-contained CUDA runtime for artifacts exported by mlir-autodiff.
 *
 * The host code produced by `--autodiff-lower-to-gpu` (MLIR's gpu-to-llvm
 * lowering plus the gpu.binary offloading translation) calls a small set of
 * `mgpu*` entry points.  This file implements them on top of the CUDA driver
 * API, which is loaded with dlopen on first use, so an exported shared object
 * needs neither the CUDA toolkit nor any MLIR/LLVM library at run time.
 *
 * Design points:
 *  - Lazy, thread-safe initialisation (pthread_once) on the first mgpu* call.
 *    The driver comes from $AUTODIFF_CUDA_DRIVER, else "libcuda.so.1".  Device
 *    0's primary context is retained (mgpuSetDefaultDevice before the first
 *    call picks another ordinal) and made current on every calling thread.
 *  - No abort, no printing: the first failure is recorded as a message that
 *    autodiff_cuda_error() returns; afterwards every entry point is a no-op
 *    that returns NULL where it returns anything.
 *  - The lowered code creates a stream, allocates, copies, launches, frees and
 *    destroys the stream on every call.  Streams and events therefore come
 *    from small pools, and device memory comes from the device's default
 *    stream-ordered memory pool with an unlimited release threshold, so that
 *    freed memory stays cached in the driver (plain cuMemAlloc/cuMemFree when
 *    the driver or device lacks memory pools).
 *  - AUTODIFF_CUDA_PROFILE=1 brackets every launch with timing events;
 *    autodiff_cuda_kernel_ms() sums them.  Unset, it costs one branch.
 *  - AUTODIFF_CUDA_CACHE=0 turns the pools and the cached allocator off
 *    (a stream, event and allocation per request, as upstream MLIR's
 *    wrappers do): for debugging and for measuring what the caching saves.
 *
 * Only mgpu* and autodiff_cuda_* symbols are exported; everything else is
 * static.  Build: cc -std=c11 -O2 -fPIC -shared cuda_runtime.c -ldl -lpthread
 */

#define _GNU_SOURCE 1

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------ */
/* The few driver API types and constants used here (no cuda.h needed).    */
/* ------------------------------------------------------------------------ */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmemPoolHandle_st *CUmemoryPool;

enum {
  CUDA_SUCCESS = 0,
  CU_STREAM_NON_BLOCKING = 0x1,
  CU_EVENT_DEFAULT = 0x0,
  CU_EVENT_DISABLE_TIMING = 0x2,
  CU_MEM_ATTACH_GLOBAL = 0x1,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  CU_JIT_OPTIMIZATION_LEVEL = 7,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
  CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
  CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
};

/* Layouts of CUlaunchAttribute / CUlaunchConfig (CUDA 12 driver ABI). */
typedef struct {
  int id;
  char pad[4];
  union {
    char raw[64];
    struct {
      unsigned int x, y, z;
    } clusterDim;
  } value;
} LaunchAttribute;

typedef struct {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  LaunchAttribute *attrs;
  unsigned int numAttrs;
} LaunchConfig;

/* ------------------------------------------------------------------------ */
/* Driver entry points, resolved with dlsym.                                */
/* ------------------------------------------------------------------------ */

#define DRIVER_FUNCTIONS(X)                                                    \
  X(cuInit, "cuInit", (unsigned int))                                          \
  X(cuDeviceGet, "cuDeviceGet", (CUdevice *, int))                             \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *, int, CUdevice))      \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                      \
    (CUcontext *, CUdevice))                                                   \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", (CUcontext *))                         \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                           \
  X(cuCtxSynchronize, "cuCtxSynchronize", (void))                              \
  X(cuGetErrorName, "cuGetErrorName", (CUresult, const char **))               \
  X(cuModuleLoadData, "cuModuleLoadData", (CUmodule *, const void *))          \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx",                                  \
    (CUmodule *, const void *, unsigned int, int *, void **))                  \
  X(cuModuleUnload, "cuModuleUnload", (CUmodule))                              \
  X(cuModuleGetFunction, "cuModuleGetFunction",                                \
    (CUfunction *, CUmodule, const char *))                                    \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", (CUfunction, int, int))          \
  X(cuLaunchKernel, "cuLaunchKernel",                                          \
    (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,       \
     unsigned int, unsigned int, unsigned int, CUstream, void **, void **))    \
  X(cuLaunchKernelEx, "cuLaunchKernelEx",                                      \
    (const LaunchConfig *, CUfunction, void **, void **))                      \
  X(cuStreamCreate, "cuStreamCreate", (CUstream *, unsigned int))              \
  X(cuStreamDestroy, "cuStreamDestroy_v2", (CUstream))                         \
  X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream))                    \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", (CUstream, CUevent, unsigned int)) \
  X(cuEventCreate, "cuEventCreate", (CUevent *, unsigned int))                 \
  X(cuEventDestroy, "cuEventDestroy_v2", (CUevent))                            \
  X(cuEventRecord, "cuEventRecord", (CUevent, CUstream))                       \
  X(cuEventSynchronize, "cuEventSynchronize", (CUevent))                       \
  X(cuEventElapsedTime, "cuEventElapsedTime", (float *, CUevent, CUevent))     \
  X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                      \
  X(cuMemFree, "cuMemFree_v2", (CUdeviceptr))                                  \
  X(cuMemAllocManaged, "cuMemAllocManaged",                                    \
    (CUdeviceptr *, size_t, unsigned int))                                     \
  X(cuMemAllocAsync, "cuMemAllocAsync", (CUdeviceptr *, size_t, CUstream))     \
  X(cuMemFreeAsync, "cuMemFreeAsync", (CUdeviceptr, CUstream))                 \
  X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool",                    \
    (CUmemoryPool *, CUdevice))                                                \
  X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute",                            \
    (CUmemoryPool, int, void *))                                               \
  X(cuMemcpyAsync, "cuMemcpyAsync",                                            \
    (CUdeviceptr, CUdeviceptr, size_t, CUstream))                              \
  X(cuMemsetD32Async, "cuMemsetD32Async",                                      \
    (CUdeviceptr, unsigned int, size_t, CUstream))                             \
  X(cuMemsetD16Async, "cuMemsetD16Async",                                      \
    (CUdeviceptr, unsigned short, size_t, CUstream))                           \
  X(cuMemHostRegister, "cuMemHostRegister_v2", (void *, size_t, unsigned int)) \
  X(cuMemHostUnregister, "cuMemHostUnregister", (void *))                      \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", (CUdeviceptr, const void *, size_t))      \
  X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled",                          \
    (void *, int, uint32_t, void *, const uint64_t *, const uint64_t *,        \
     const uint32_t *, const uint32_t *, int, int, int, int))

#define DECLARE_POINTER(field, symbol, params) CUresult(*field) params;
static struct {
  DRIVER_FUNCTIONS(DECLARE_POINTER)
} drv;
#undef DECLARE_POINTER

/* ------------------------------------------------------------------------ */
/* Error state.                                                             */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t g_error_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_error[1024];
static atomic_int g_failed;

static void set_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static void set_error(const char *fmt, ...) {
  pthread_mutex_lock(&g_error_lock);
  if (!atomic_load(&g_failed)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
    atomic_store(&g_failed, 1);
  }
  pthread_mutex_unlock(&g_error_lock);
}

/* Records a failed driver call; returns nonzero when `result` is an error. */
static int failed(CUresult result, const char *what) {
  if (result == CUDA_SUCCESS)
    return 0;
  const char *name = NULL;
  if (drv.cuGetErrorName == NULL || drv.cuGetErrorName(result, &name) != 0 ||
      name == NULL)
    name = "CUDA_ERROR_UNKNOWN";
  set_error("%s failed: %s (%d)", what, name, result);
  return 1;
}

/* A driver function the current operation needs but the driver lacks. */
static int missing(void *fn, const char *symbol) {
  if (fn != NULL)
    return 0;
  set_error("the CUDA driver does not provide %s", symbol);
  return 1;
}
#define NEED(field, symbol) missing((void *)drv.field, symbol)

/* ------------------------------------------------------------------------ */
/* Initialisation.                                                          */
/* ------------------------------------------------------------------------ */

static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
static int g_ready;          /* set once, inside init, on success */
static char g_init_error[1024];
static int g_device_ordinal; /* chosen by mgpuSetDefaultDevice before init */
static CUdevice g_device;
static CUcontext g_context;
static int g_async_alloc;    /* stream-ordered allocator available */
static int g_profile;        /* AUTODIFF_CUDA_PROFILE=1 */
static int g_no_cache;       /* AUTODIFF_CUDA_CACHE=0 */

static void init_failed(void) {
  pthread_mutex_lock(&g_error_lock);
  snprintf(g_init_error, sizeof g_init_error, "%s", g_error);
  pthread_mutex_unlock(&g_error_lock);
}

static void init_driver(void) {
  const char *env = getenv("AUTODIFF_CUDA_DRIVER");
  const char *path = (env != NULL && env[0] != '\0') ? env : "libcuda.so.1";
  const char *profile = getenv("AUTODIFF_CUDA_PROFILE");
  g_profile = profile != NULL && profile[0] != '\0' && strcmp(profile, "0");
  const char *cache = getenv("AUTODIFF_CUDA_CACHE");
  g_no_cache = cache != NULL && strcmp(cache, "0") == 0;

  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char *why = dlerror();
    set_error("cannot load the CUDA driver %s: %s", path,
              why != NULL ? why : "unknown error");
    init_failed();
    return;
  }
#define RESOLVE(field, symbol, params)                                         \
  *(void **)(&drv.field) = dlsym(lib, symbol);
  DRIVER_FUNCTIONS(RESOLVE)
#undef RESOLVE

  if (NEED(cuInit, "cuInit") || NEED(cuDeviceGet, "cuDeviceGet") ||
      NEED(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") ||
      NEED(cuCtxGetCurrent, "cuCtxGetCurrent") ||
      NEED(cuCtxSetCurrent, "cuCtxSetCurrent") ||
      failed(drv.cuInit(0), "cuInit") ||
      failed(drv.cuDeviceGet(&g_device, g_device_ordinal), "cuDeviceGet") ||
      failed(drv.cuDevicePrimaryCtxRetain(&g_context, g_device),
             "cuDevicePrimaryCtxRetain") ||
      failed(drv.cuCtxSetCurrent(g_context), "cuCtxSetCurrent")) {
    init_failed();
    return;
  }

  /* Stream-ordered allocations from the default pool, kept cached. */
  int pools = 0;
  CUmemoryPool pool = NULL;
  uint64_t threshold = UINT64_MAX;
  g_async_alloc =
      !g_no_cache && drv.cuMemAllocAsync != NULL && drv.cuMemFreeAsync != NULL &&
      drv.cuDeviceGetDefaultMemPool != NULL &&
      drv.cuMemPoolSetAttribute != NULL && drv.cuDeviceGetAttribute != NULL &&
      drv.cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                               g_device) == CUDA_SUCCESS &&
      pools != 0 &&
      drv.cuDeviceGetDefaultMemPool(&pool, g_device) == CUDA_SUCCESS &&
      drv.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                &threshold) == CUDA_SUCCESS;
  g_ready = 1;
}

/* Makes the runtime usable on this thread; returns 0 when calls must be
 * skipped (earlier error, or the driver could not be initialised). */
static int ready(void) {
  if (atomic_load_explicit(&g_failed, memory_order_acquire))
    return 0;
  pthread_once(&g_init_once, init_driver);
  if (!g_ready) {
    set_error("%s", g_init_error); /* after autodiff_cuda_clear_error */
    return 0;
  }
  CUcontext current = NULL;
  if (drv.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current != g_context) {
    if (failed(drv.cuCtxSetCurrent(g_context), "cuCtxSetCurrent"))
      return 0;
  }
  return 1;
}

/* ------------------------------------------------------------------------ */
/* Pools of reusable handles (streams and events).                          */
/* ------------------------------------------------------------------------ */

#define POOL_CAPACITY 64

typedef struct {
  pthread_mutex_t lock;
  int count;
  void *items[POOL_CAPACITY];
} HandlePool;

static HandlePool g_streams = {PTHREAD_MUTEX_INITIALIZER, 0, {0}};
static HandlePool g_events = {PTHREAD_MUTEX_INITIALIZER, 0, {0}};

static void *pool_take(HandlePool *pool) {
  void *item = NULL;
  if (g_no_cache)
    return NULL;
  pthread_mutex_lock(&pool->lock);
  if (pool->count > 0)
    item = pool->items[--pool->count];
  pthread_mutex_unlock(&pool->lock);
  return item;
}

/* Returns 1 when the pool kept the handle. */
static int pool_give(HandlePool *pool, void *item) {
  int kept = 0;
  if (g_no_cache)
    return 0;
  pthread_mutex_lock(&pool->lock);
  if (pool->count < POOL_CAPACITY) {
    pool->items[pool->count++] = item;
    kept = 1;
  }
  pthread_mutex_unlock(&pool->lock);
  return kept;
}

/* ------------------------------------------------------------------------ */
/* Counters and profiling.                                                  */
/* ------------------------------------------------------------------------ */

static atomic_llong g_launches;

typedef struct {
  CUevent start, stop;
} TimedLaunch;

static pthread_mutex_t g_profile_lock = PTHREAD_MUTEX_INITIALIZER;
static TimedLaunch *g_timed;
static size_t g_timed_count, g_timed_capacity;
static double g_kernel_ms;
/* Each timed launch's milliseconds since load/reset, in launch order. */
static double *g_each_ms;
static size_t g_each_count, g_each_capacity;

static void profile_keep(double ms) {
  if (g_each_count == g_each_capacity) {
    size_t capacity = g_each_capacity ? 2 * g_each_capacity : 256;
    double *grown = realloc(g_each_ms, capacity * sizeof *grown);
    if (grown == NULL)
      return; /* the total still counts it */
    g_each_ms = grown;
    g_each_capacity = capacity;
  }
  g_each_ms[g_each_count++] = ms;
}

static void profile_launch_begin(CUstream stream, TimedLaunch *t) {
  t->start = t->stop = NULL;
  if (NEED(cuEventElapsedTime, "cuEventElapsedTime") ||
      failed(drv.cuEventCreate(&t->start, CU_EVENT_DEFAULT), "cuEventCreate") ||
      failed(drv.cuEventCreate(&t->stop, CU_EVENT_DEFAULT), "cuEventCreate") ||
      failed(drv.cuEventRecord(t->start, stream), "cuEventRecord"))
    return;
}

static void profile_launch_end(CUstream stream, TimedLaunch *t) {
  if (t->stop == NULL || failed(drv.cuEventRecord(t->stop, stream),
                                "cuEventRecord"))
    return;
  pthread_mutex_lock(&g_profile_lock);
  if (g_timed_count == g_timed_capacity) {
    size_t capacity = g_timed_capacity ? 2 * g_timed_capacity : 64;
    TimedLaunch *grown = realloc(g_timed, capacity * sizeof *grown);
    if (grown == NULL) {
      pthread_mutex_unlock(&g_profile_lock);
      set_error("out of host memory while profiling kernel launches");
      return;
    }
    g_timed = grown;
    g_timed_capacity = capacity;
  }
  g_timed[g_timed_count++] = *t;
  pthread_mutex_unlock(&g_profile_lock);
}

/* Folds the recorded launches into g_kernel_ms; caller holds the lock. */
static void profile_collect(int keep_time) {
  for (size_t i = 0; i < g_timed_count; ++i) {
    TimedLaunch *t = &g_timed[i];
    float ms = 0.0f;
    if (keep_time && !failed(drv.cuEventSynchronize(t->stop),
                             "cuEventSynchronize") &&
        !failed(drv.cuEventElapsedTime(&ms, t->start, t->stop),
                "cuEventElapsedTime")) {
      g_kernel_ms += ms;
      profile_keep(ms);
    }
    if (drv.cuEventDestroy != NULL) {
      drv.cuEventDestroy(t->start);
      drv.cuEventDestroy(t->stop);
    }
  }
  g_timed_count = 0;
}

/* ------------------------------------------------------------------------ */
/* Modules and kernels.                                                     */
/* ------------------------------------------------------------------------ */

EXPORT void *mgpuModuleLoad(void *data, size_t gpuBlobSize) {
  (void)gpuBlobSize; /* cubin and fatbin images carry their own size */
  CUmodule module = NULL;
  if (!ready() || NEED(cuModuleLoadData, "cuModuleLoadData") ||
      failed(drv.cuModuleLoadData(&module, data), "cuModuleLoadData"))
    return NULL;
  return module;
}

EXPORT void *mgpuModuleLoadJIT(void *data, int optLevel) {
  CUmodule module = NULL;
  if (!ready() || NEED(cuModuleLoadDataEx, "cuModuleLoadDataEx"))
    return NULL;
  char log[1024];
  log[0] = '\0';
  int options[] = {CU_JIT_OPTIMIZATION_LEVEL, CU_JIT_ERROR_LOG_BUFFER,
                   CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {(void *)(intptr_t)optLevel, (void *)log,
                    (void *)(uintptr_t)sizeof log};
  CUresult result = drv.cuModuleLoadDataEx(&module, data, 3, options, values);
  if (result != CUDA_SUCCESS) {
    log[sizeof log - 1] = '\0';
    char what[1100];
    snprintf(what, sizeof what, "cuModuleLoadDataEx%s%s",
             log[0] ? " (JIT log: " : "", log[0] ? log : "");
    if (log[0])
      strncat(what, ")", sizeof what - strlen(what) - 1);
    failed(result, what);
    return NULL;
  }
  return module;
}

EXPORT void mgpuModuleUnload(void *module) {
  if (module == NULL || !ready() || NEED(cuModuleUnload, "cuModuleUnload"))
    return;
  failed(drv.cuModuleUnload((CUmodule)module), "cuModuleUnload");
}

EXPORT void *mgpuModuleGetFunction(void *module, const char *name) {
  CUfunction function = NULL;
  if (module == NULL || !ready() ||
      NEED(cuModuleGetFunction, "cuModuleGetFunction"))
    return NULL;
  CUresult result = drv.cuModuleGetFunction(&function, (CUmodule)module, name);
  if (result != CUDA_SUCCESS) {
    char what[300];
    snprintf(what, sizeof what, "cuModuleGetFunction(\"%.200s\")",
             name != NULL ? name : "");
    failed(result, what);
    return NULL;
  }
  return function;
}

/* Kernels asking for more than 48 KiB of dynamic shared memory must opt in. */
static int prepare_shared_memory(CUfunction function, int32_t smem) {
  if (smem <= 48 * 1024)
    return 1;
  int limit = 0;
  if (NEED(cuDeviceGetAttribute, "cuDeviceGetAttribute") ||
      NEED(cuFuncSetAttribute, "cuFuncSetAttribute") ||
      failed(drv.cuDeviceGetAttribute(
                 &limit, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                 g_device),
             "cuDeviceGetAttribute"))
    return 0;
  if (smem > limit) {
    set_error("kernel asks for %d bytes of dynamic shared memory; the device "
              "allows %d",
              (int)smem, limit);
    return 0;
  }
  return !failed(drv.cuFuncSetAttribute(
                     function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                     smem),
                 "cuFuncSetAttribute");
}

static int launch_dims_ok(intptr_t gx, intptr_t gy, intptr_t gz, intptr_t bx,
                          intptr_t by, intptr_t bz) {
  intptr_t dims[6] = {gx, gy, gz, bx, by, bz};
  for (int i = 0; i < 6; ++i) {
    if (dims[i] <= 0 || (uintptr_t)dims[i] > UINT32_MAX) {
      set_error("kernel launch with invalid grid/block size %lld",
                (long long)dims[i]);
      return 0;
    }
  }
  return 1;
}

EXPORT void mgpuLaunchKernel(void *function, intptr_t gridX, intptr_t gridY,
                             intptr_t gridZ, intptr_t blockX, intptr_t blockY,
                             intptr_t blockZ, int32_t smem, void *stream,
                             void **params, void **extra, size_t paramsCount) {
  (void)paramsCount;
  if (function == NULL || !ready() || NEED(cuLaunchKernel, "cuLaunchKernel") ||
      !launch_dims_ok(gridX, gridY, gridZ, blockX, blockY, blockZ) ||
      !prepare_shared_memory((CUfunction)function, smem))
    return;
  TimedLaunch timed;
  if (g_profile)
    profile_launch_begin((CUstream)stream, &timed);
  if (failed(drv.cuLaunchKernel((CUfunction)function, (unsigned)gridX,
                                (unsigned)gridY, (unsigned)gridZ,
                                (unsigned)blockX, (unsigned)blockY,
                                (unsigned)blockZ, (unsigned)smem,
                                (CUstream)stream, params, extra),
             "cuLaunchKernel"))
    return;
  atomic_fetch_add_explicit(&g_launches, 1, memory_order_relaxed);
  if (g_profile)
    profile_launch_end((CUstream)stream, &timed);
}

EXPORT void mgpuLaunchClusterKernel(void *function, intptr_t clusterX,
                                    intptr_t clusterY, intptr_t clusterZ,
                                    intptr_t gridX, intptr_t gridY,
                                    intptr_t gridZ, intptr_t blockX,
                                    intptr_t blockY, intptr_t blockZ,
                                    int32_t smem, void *stream, void **params,
                                    void **extra, size_t paramsCount) {
  (void)paramsCount;
  if (function == NULL || !ready() ||
      NEED(cuLaunchKernelEx, "cuLaunchKernelEx") ||
      NEED(cuFuncSetAttribute, "cuFuncSetAttribute") ||
      !launch_dims_ok(gridX, gridY, gridZ, blockX, blockY, blockZ) ||
      !launch_dims_ok(clusterX, clusterY, clusterZ, 1, 1, 1) ||
      !prepare_shared_memory((CUfunction)function, smem))
    return;
  CUfunction f = (CUfunction)function;
  /* Allow cluster sizes beyond the portable limit of 8 where supported. */
  if (clusterX * clusterY * clusterZ > 8 &&
      failed(drv.cuFuncSetAttribute(
                 f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
             "cuFuncSetAttribute"))
    return;
  LaunchAttribute attribute;
  memset(&attribute, 0, sizeof attribute);
  attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attribute.value.clusterDim.x = (unsigned)clusterX;
  attribute.value.clusterDim.y = (unsigned)clusterY;
  attribute.value.clusterDim.z = (unsigned)clusterZ;
  LaunchConfig config;
  memset(&config, 0, sizeof config);
  config.gridDimX = (unsigned)gridX;
  config.gridDimY = (unsigned)gridY;
  config.gridDimZ = (unsigned)gridZ;
  config.blockDimX = (unsigned)blockX;
  config.blockDimY = (unsigned)blockY;
  config.blockDimZ = (unsigned)blockZ;
  config.sharedMemBytes = (unsigned)smem;
  config.hStream = (CUstream)stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  TimedLaunch timed;
  if (g_profile)
    profile_launch_begin((CUstream)stream, &timed);
  if (failed(drv.cuLaunchKernelEx(&config, f, params, extra),
             "cuLaunchKernelEx"))
    return;
  atomic_fetch_add_explicit(&g_launches, 1, memory_order_relaxed);
  if (g_profile)
    profile_launch_end((CUstream)stream, &timed);
}

/* ------------------------------------------------------------------------ */
/* Streams and events.                                                      */
/* ------------------------------------------------------------------------ */

EXPORT void *mgpuStreamCreate(void) {
  if (!ready())
    return NULL;
  void *stream = pool_take(&g_streams);
  if (stream != NULL)
    return stream;
  CUstream created = NULL;
  if (NEED(cuStreamCreate, "cuStreamCreate") ||
      failed(drv.cuStreamCreate(&created, CU_STREAM_NON_BLOCKING),
             "cuStreamCreate"))
    return NULL;
  return created;
}

/* The stream goes back to the pool; work still queued on it stays ordered
 * before whatever its next user enqueues. */
EXPORT void mgpuStreamDestroy(void *stream) {
  if (stream == NULL || !ready() || pool_give(&g_streams, stream))
    return;
  if (!NEED(cuStreamDestroy, "cuStreamDestroy_v2"))
    failed(drv.cuStreamDestroy((CUstream)stream), "cuStreamDestroy_v2");
}

EXPORT void mgpuStreamSynchronize(void *stream) {
  if (!ready() || NEED(cuStreamSynchronize, "cuStreamSynchronize"))
    return;
  failed(drv.cuStreamSynchronize((CUstream)stream), "cuStreamSynchronize");
}

EXPORT void mgpuStreamWaitEvent(void *stream, void *event) {
  if (event == NULL || !ready() || NEED(cuStreamWaitEvent, "cuStreamWaitEvent"))
    return;
  failed(drv.cuStreamWaitEvent((CUstream)stream, (CUevent)event, 0),
         "cuStreamWaitEvent");
}

EXPORT void *mgpuEventCreate(void) {
  if (!ready())
    return NULL;
  void *event = pool_take(&g_events);
  if (event != NULL)
    return event;
  CUevent created = NULL;
  if (NEED(cuEventCreate, "cuEventCreate") ||
      failed(drv.cuEventCreate(&created, CU_EVENT_DISABLE_TIMING),
             "cuEventCreate"))
    return NULL;
  return created;
}

/* A pooled event may be re-recorded by its next user: cuEventRecord and
 * cuStreamWaitEvent capture the state at call time, as after a fresh create. */
EXPORT void mgpuEventDestroy(void *event) {
  if (event == NULL || !ready() || pool_give(&g_events, event))
    return;
  if (!NEED(cuEventDestroy, "cuEventDestroy_v2"))
    failed(drv.cuEventDestroy((CUevent)event), "cuEventDestroy_v2");
}

EXPORT void mgpuEventSynchronize(void *event) {
  if (event == NULL || !ready() ||
      NEED(cuEventSynchronize, "cuEventSynchronize"))
    return;
  failed(drv.cuEventSynchronize((CUevent)event), "cuEventSynchronize");
}

EXPORT void mgpuEventRecord(void *event, void *stream) {
  if (event == NULL || !ready() || NEED(cuEventRecord, "cuEventRecord"))
    return;
  failed(drv.cuEventRecord((CUevent)event, (CUstream)stream), "cuEventRecord");
}

/* ------------------------------------------------------------------------ */
/* Memory.                                                                  */
/* ------------------------------------------------------------------------ */

/* Managed (host-shared) allocations are freed with cuMemFree, not through
 * the stream-ordered pool, so they are remembered here. */
typedef struct ManagedBlock {
  CUdeviceptr ptr;
  struct ManagedBlock *next;
} ManagedBlock;

static pthread_mutex_t g_managed_lock = PTHREAD_MUTEX_INITIALIZER;
static ManagedBlock *g_managed;
static atomic_int g_managed_count;

static int take_managed(CUdeviceptr ptr) {
  if (atomic_load_explicit(&g_managed_count, memory_order_relaxed) == 0)
    return 0;
  int found = 0;
  pthread_mutex_lock(&g_managed_lock);
  for (ManagedBlock **link = &g_managed; *link != NULL;
       link = &(*link)->next) {
    if ((*link)->ptr == ptr) {
      ManagedBlock *block = *link;
      *link = block->next;
      free(block);
      atomic_fetch_sub(&g_managed_count, 1);
      found = 1;
      break;
    }
  }
  pthread_mutex_unlock(&g_managed_lock);
  return found;
}

EXPORT void *mgpuMemAlloc(uint64_t sizeBytes, void *stream,
                          uint8_t isHostShared) {
  if (!ready())
    return NULL;
  if (sizeBytes == 0)
    sizeBytes = 1; /* the driver rejects empty allocations */
  CUdeviceptr ptr = 0;
  if (isHostShared) {
    ManagedBlock *block = malloc(sizeof *block);
    if (block == NULL) {
      set_error("out of host memory in mgpuMemAlloc");
      return NULL;
    }
    if (NEED(cuMemAllocManaged, "cuMemAllocManaged") ||
        failed(drv.cuMemAllocManaged(&ptr, (size_t)sizeBytes,
                                     CU_MEM_ATTACH_GLOBAL),
               "cuMemAllocManaged")) {
      free(block);
      return NULL;
    }
    block->ptr = ptr;
    pthread_mutex_lock(&g_managed_lock);
    block->next = g_managed;
    g_managed = block;
    atomic_fetch_add(&g_managed_count, 1);
    pthread_mutex_unlock(&g_managed_lock);
    return (void *)(uintptr_t)ptr;
  }
  if (g_async_alloc) {
    if (failed(drv.cuMemAllocAsync(&ptr, (size_t)sizeBytes, (CUstream)stream),
               "cuMemAllocAsync"))
      return NULL;
    /* Without a stream the allocation must be usable on any stream at once,
     * as with cuMemAlloc. */
    if (stream == NULL &&
        (NEED(cuStreamSynchronize, "cuStreamSynchronize") ||
         failed(drv.cuStreamSynchronize(NULL), "cuStreamSynchronize")))
      return NULL;
    return (void *)(uintptr_t)ptr;
  }
  if (NEED(cuMemAlloc, "cuMemAlloc_v2") ||
      failed(drv.cuMemAlloc(&ptr, (size_t)sizeBytes), "cuMemAlloc_v2"))
    return NULL;
  return (void *)(uintptr_t)ptr;
}

EXPORT void mgpuMemFree(void *ptr, void *stream) {
  if (ptr == NULL || !ready())
    return;
  CUdeviceptr dptr = (CUdeviceptr)(uintptr_t)ptr;
  if (take_managed(dptr) || !g_async_alloc) {
    if (!NEED(cuMemFree, "cuMemFree_v2"))
      failed(drv.cuMemFree(dptr), "cuMemFree_v2");
    return;
  }
  /* Without a stream, behave like cuMemFree: wait for all work first. */
  if (stream == NULL &&
      (NEED(cuCtxSynchronize, "cuCtxSynchronize") ||
       failed(drv.cuCtxSynchronize(), "cuCtxSynchronize")))
    return;
  failed(drv.cuMemFreeAsync(dptr, (CUstream)stream), "cuMemFreeAsync");
}

/* Unified addressing: the driver infers the direction of the copy. */
EXPORT void mgpuMemcpy(void *dst, void *src, size_t sizeBytes, void *stream) {
  if (sizeBytes == 0 || !ready() || NEED(cuMemcpyAsync, "cuMemcpyAsync"))
    return;
  failed(drv.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst,
                           (CUdeviceptr)(uintptr_t)src, sizeBytes,
                           (CUstream)stream),
         "cuMemcpyAsync");
}

/* `count` is a number of 32-bit (resp. 16-bit) elements. */
EXPORT void mgpuMemset32(void *dst, unsigned int value, size_t count,
                         void *stream) {
  if (count == 0 || !ready() || NEED(cuMemsetD32Async, "cuMemsetD32Async"))
    return;
  failed(drv.cuMemsetD32Async((CUdeviceptr)(uintptr_t)dst, value, count,
                              (CUstream)stream),
         "cuMemsetD32Async");
}

EXPORT void mgpuMemset16(void *dst, unsigned short value, size_t count,
                         void *stream) {
  if (count == 0 || !ready() || NEED(cuMemsetD16Async, "cuMemsetD16Async"))
    return;
  failed(drv.cuMemsetD16Async((CUdeviceptr)(uintptr_t)dst, value, count,
                              (CUstream)stream),
         "cuMemsetD16Async");
}

EXPORT void mgpuMemHostRegister(void *ptr, uint64_t sizeBytes) {
  if (ptr == NULL || sizeBytes == 0 || !ready() ||
      NEED(cuMemHostRegister, "cuMemHostRegister_v2"))
    return;
  failed(drv.cuMemHostRegister(ptr, (size_t)sizeBytes, 0),
         "cuMemHostRegister_v2");
}

EXPORT void mgpuMemHostUnregister(void *ptr) {
  if (ptr == NULL || !ready() ||
      NEED(cuMemHostUnregister, "cuMemHostUnregister"))
    return;
  failed(drv.cuMemHostUnregister(ptr), "cuMemHostUnregister");
}

/* A ranked memref descriptor: allocated and aligned pointers, offset, then
 * `rank` sizes followed by `rank` strides (all 64-bit). */
typedef struct {
  char *allocated;
  char *aligned;
  int64_t offset;
  int64_t sizesAndStrides[];
} MemRefDescriptor;

EXPORT void mgpuMemHostRegisterMemRef(int64_t rank, void *descriptor,
                                      int64_t elementSizeBytes) {
  if (descriptor == NULL || rank < 0)
    return;
  const MemRefDescriptor *desc = descriptor;
  const int64_t *sizes = desc->sizesAndStrides;
  const int64_t *strides = sizes + rank;
  int64_t expected = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != expected) {
      set_error("mgpuMemHostRegisterMemRef: only densely packed memrefs can "
                "be registered (dimension %lld has stride %lld, expected %lld)",
                (long long)i, (long long)strides[i], (long long)expected);
      return;
    }
    expected *= sizes[i];
  }
  mgpuMemHostRegister(desc->aligned + desc->offset * elementSizeBytes,
                      (uint64_t)(expected * elementSizeBytes));
}

EXPORT void mgpuMemHostUnregisterMemRef(int64_t rank, void *descriptor,
                                        int64_t elementSizeBytes) {
  (void)rank;
  if (descriptor == NULL)
    return;
  const MemRefDescriptor *desc = descriptor;
  mgpuMemHostUnregister(desc->aligned + desc->offset * elementSizeBytes);
}

/* The context is created once, for one device: the ordinal can be chosen
 * before the first other mgpu* call, not changed afterwards. */
EXPORT void mgpuSetDefaultDevice(int32_t device) {
  if (atomic_load(&g_failed))
    return;
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&lock);
  int started = g_ready || g_init_error[0] != '\0';
  if (!started)
    g_device_ordinal = device;
  pthread_mutex_unlock(&lock);
  if (started && device != g_device_ordinal)
    set_error("mgpuSetDefaultDevice(%d): the CUDA context already lives on "
              "device %d",
              (int)device, g_device_ordinal);
}

/* ------------------------------------------------------------------------ */
/* Queries for the Python side.                                             */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* Tensor maps (TMA descriptors).                                           */
/* ------------------------------------------------------------------------ */

/* The lowered `nvgpu.tma.create.descriptor` calls this with a ranked memref
 * descriptor {allocated, aligned, offset, sizes[rank], strides[rank]} (row
 * major, innermost last), the CUtensorMapDataType and the layout enums, and
 * the box in the memref's dimension order; the driver wants every list
 * innermost first.  Kernels read the map from device memory: each distinct
 * map is copied there once and kept (MAP_SLOTS of them; a full table is
 * reused round robin after the device is idle). */
#define MAP_BYTES 128
#define MAP_SLOTS 64

static pthread_mutex_t g_map_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  unsigned char bytes[MAP_BYTES];
  CUdeviceptr device;
} g_maps[MAP_SLOTS];
static int g_map_count, g_map_next;

EXPORT void *mgpuTensorMapEncodeTiledMemref(int64_t rank, void *descriptor,
                                            int64_t dataType, int64_t interleave,
                                            int64_t swizzle, int64_t l2Promotion,
                                            int64_t oobFill, int64_t *box) {
  static const int elementBytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  if (!ready())
    return NULL;
  if (rank < 1 || rank > 5 || dataType < 0 || dataType > 12) {
    set_error("mgpuTensorMapEncodeTiledMemref: rank %lld, data type %lld not "
              "supported", (long long)rank, (long long)dataType);
    return NULL;
  }
  if (NEED(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled") ||
      NEED(cuMemcpyHtoD, "cuMemcpyHtoD_v2") || NEED(cuMemAlloc, "cuMemAlloc_v2"))
    return NULL;
  const int64_t *fields = (const int64_t *)((char *)descriptor + 2 * sizeof(void *));
  const int64_t offset = fields[0], *sizes = fields + 1, *strides = fields + 1 + rank;
  const int bytes = elementBytes[dataType];
  char *aligned = *(char **)((char *)descriptor + sizeof(void *));
  uint64_t dims[5] = {1, 1, 1, 1, 1}, steps[5] = {0, 0, 0, 0, 0};
  uint32_t boxDims[5] = {1, 1, 1, 1, 1}, elementStrides[5] = {1, 1, 1, 1, 1};
  for (int64_t i = 0; i < rank; ++i) {
    dims[i] = (uint64_t)sizes[rank - 1 - i];
    boxDims[i] = (uint32_t)box[rank - 1 - i];
    if (i + 1 < rank)
      steps[i] = (uint64_t)(strides[rank - 2 - i] * bytes);
  }
  _Alignas(64) unsigned char map[MAP_BYTES];
  memset(map, 0, sizeof map);
  if (failed(drv.cuTensorMapEncodeTiled(map, (int)dataType, (uint32_t)rank,
                                        aligned + offset * bytes, dims, steps,
                                        boxDims, elementStrides, (int)interleave,
                                        (int)swizzle, (int)l2Promotion,
                                        (int)oobFill),
             "cuTensorMapEncodeTiled"))
    return NULL;
  CUdeviceptr device = 0;
  pthread_mutex_lock(&g_map_lock);
  for (int i = 0; i < g_map_count; ++i) {
    if (memcmp(g_maps[i].bytes, map, MAP_BYTES) == 0) {
      device = g_maps[i].device;
      break;
    }
  }
  if (device == 0) {
    int slot;
    if (g_map_count < MAP_SLOTS) {
      slot = g_map_count;
      if (failed(drv.cuMemAlloc(&g_maps[slot].device, MAP_BYTES), "cuMemAlloc_v2"))
        goto done;
      ++g_map_count;
    } else {
      /* a kernel still running may read the map this slot holds */
      slot = g_map_next;
      g_map_next = (g_map_next + 1) % MAP_SLOTS;
      if (NEED(cuCtxSynchronize, "cuCtxSynchronize") ||
          failed(drv.cuCtxSynchronize(), "cuCtxSynchronize"))
        goto done;
    }
    memcpy(g_maps[slot].bytes, map, MAP_BYTES);
    if (!failed(drv.cuMemcpyHtoD(g_maps[slot].device, map, MAP_BYTES),
                "cuMemcpyHtoD_v2"))
      device = g_maps[slot].device;
    else
      memset(g_maps[slot].bytes, 0, MAP_BYTES); /* never matches an encoded map */
  }
done:
  pthread_mutex_unlock(&g_map_lock);
  return (void *)(uintptr_t)device;
}

EXPORT const char *autodiff_cuda_error(void) {
  return atomic_load_explicit(&g_failed, memory_order_acquire) ? g_error
                                                               : NULL;
}

EXPORT void autodiff_cuda_clear_error(void) {
  pthread_mutex_lock(&g_error_lock);
  g_error[0] = '\0';
  atomic_store(&g_failed, 0);
  pthread_mutex_unlock(&g_error_lock);
}

EXPORT long long autodiff_cuda_launch_count(void) {
  return atomic_load_explicit(&g_launches, memory_order_relaxed);
}

EXPORT void autodiff_cuda_reset_counters(void) {
  atomic_store(&g_launches, 0);
  pthread_mutex_lock(&g_profile_lock);
  if (g_ready)
    profile_collect(0);
  g_kernel_ms = 0.0;
  g_each_count = 0;
  pthread_mutex_unlock(&g_profile_lock);
}

/* Total time of the kernels launched since load/reset, in milliseconds
 * (waits for them).  0 unless AUTODIFF_CUDA_PROFILE=1. */
EXPORT double autodiff_cuda_kernel_ms(void) {
  pthread_mutex_lock(&g_profile_lock);
  if (g_timed_count > 0 && ready())
    profile_collect(1);
  double total = g_kernel_ms;
  pthread_mutex_unlock(&g_profile_lock);
  return total;
}

/* Copies the milliseconds of each launch timed since load/reset (launch order,
 * at most n) into out; returns how many there are.  Waits for the kernels. */
EXPORT long long autodiff_cuda_launch_ms(double *out, long long n) {
  pthread_mutex_lock(&g_profile_lock);
  if (g_timed_count > 0 && ready())
    profile_collect(1);
  long long count = (long long)g_each_count;
  for (long long i = 0; i < count && i < n; ++i)
    out[i] = g_each_ms[i];
  pthread_mutex_unlock(&g_profile_lock);
  return count;
}
