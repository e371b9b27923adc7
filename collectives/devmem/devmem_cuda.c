/* devmem_cuda.c — devmem.h's driver table over the CUDA driver API (entry points looked up once
 * through the runtime, so the library needs no link to libcuda) and legacy CUDA IPC, plus the
 * zero-copy allocator behind ncclMemAlloc. Every call's result is checked; error codes of the
 * runtime are told apart from the driver's by DEVMEM_RT. */
#include "config.h"

#include "collectives/devmem/devmem_cuda.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define DEVMEM_RT 0x40000000 /* or'ed into a runtime (cudaError_t) code */

typedef struct {
  CUresult (*get_attrs)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
  CUresult (*retain)(CUmemGenericAllocationHandle *, void *);
  CUresult (*export_fd)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                        unsigned long long);
  CUresult (*import_fd)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*addr_free)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long);
  CUresult (*addr_range)(CUdeviceptr *, size_t *, CUdeviceptr);
  CUresult (*error_name)(CUresult, const char **);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*device_attr)(int *, CUdevice_attribute, CUdevice);
} cu_fns_t;

static cu_fns_t cu;
static int cu_ok;
static char cu_why[160];
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void load_driver(void)
{
  struct {
    const char *name;
    void **slot;
  } want[] = {
    {"cuPointerGetAttributes", (void **)&cu.get_attrs},
    {"cuMemRetainAllocationHandle", (void **)&cu.retain},
    {"cuMemExportToShareableHandle", (void **)&cu.export_fd},
    {"cuMemImportFromShareableHandle", (void **)&cu.import_fd},
    {"cuMemRelease", (void **)&cu.release},
    {"cuMemAddressReserve", (void **)&cu.reserve},
    {"cuMemAddressFree", (void **)&cu.addr_free},
    {"cuMemMap", (void **)&cu.map},
    {"cuMemUnmap", (void **)&cu.unmap},
    {"cuMemSetAccess", (void **)&cu.set_access},
    {"cuMemGetAllocationGranularity", (void **)&cu.granularity},
    {"cuMemCreate", (void **)&cu.create},
    {"cuMemGetAddressRange", (void **)&cu.addr_range},
    {"cuGetErrorName", (void **)&cu.error_name},
    {"cuDeviceGet", (void **)&cu.device_get},
    {"cuDeviceGetAttribute", (void **)&cu.device_attr},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    enum cudaDriverEntryPointQueryResult q;
    void *fn = NULL;
    if (cudaGetDriverEntryPointByVersion(want[i].name, &fn, 12000, cudaEnableDefault, &q) !=
            cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {
      (void)cudaGetLastError();
      snprintf(cu_why, sizeof cu_why, "the CUDA driver has no %s", want[i].name);
      return;
    }
    *want[i].slot = fn;
  }
  cu_ok = 1;
}

static int driver_loaded(char *err, size_t errlen)
{
  pthread_once(&cu_once, load_driver);
  if (!cu_ok) snprintf(err, errlen, "%s", cu_why);
  return cu_ok;
}

static int rt(cudaError_t e)
{
  if (e == cudaSuccess) return 0;
  (void)cudaGetLastError();
  return DEVMEM_RT | (int)e;
}

static const char *error_name(void *ctx, int err)
{
  if (err & DEVMEM_RT) return cudaGetErrorString((cudaError_t)(err & ~DEVMEM_RT));
  const char *s = NULL;
  if (cu.error_name && cu.error_name((CUresult)err, &s) == CUDA_SUCCESS && s) return s;
  return "unknown CUDA driver error";
}

/* Attributes of ptr; the newer ones (mapping, block id) may be unknown to an old driver, which
 * then answers only the first six. Booleans are read as any nonzero byte pattern. */
static int query(void *ctx, uintptr_t ptr, devmem_range_t *out)
{
  memset(out, 0, sizeof *out);
  unsigned long long type = 0, start = 0, size = 0, bufid = 0, legacy = 0, managed = 0;
  unsigned long long mapped = 0, handles = 0, mbase = 0, msize = 0, block = 0;
  CUpointer_attribute a[] = {
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID,
    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
    CU_POINTER_ATTRIBUTE_MAPPED, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
    CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
    CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID};
  void *d[] = {&type, &start, &size, &bufid, &legacy, &managed, &mapped, &handles, &mbase, &msize,
               &block};
  unsigned n = sizeof a / sizeof a[0];
  CUresult r = cu.get_attrs(n, a, d, (CUdeviceptr)ptr);
  if (r != CUDA_SUCCESS) {
    mapped = handles = mbase = msize = block = 0;
    r = cu.get_attrs(6, a, d, (CUdeviceptr)ptr);
  }
  if (r != CUDA_SUCCESS) return (int)r;
  if ((unsigned)type != CU_MEMORYTYPE_DEVICE || !start) return 0; /* NONE */
  out->base = (uintptr_t)start;
  out->size = (size_t)size;
  out->id = bufid;
  if (legacy && !managed) {
    out->kind = DEVMEM_LEGACY;
  } else if (!managed && mapped && mbase && msize && block &&
             (handles & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    out->kind = DEVMEM_VMM;
    out->base = (uintptr_t)mbase;
    out->size = (size_t)msize;
    out->id = block;
  } else {
    out->kind = DEVMEM_PRIVATE;
  }
  return 0;
}

static int legacy_export(void *ctx, uintptr_t base, unsigned char handle[DEVMEM_HANDLE_BYTES])
{
  cudaIpcMemHandle_t h;
  _Static_assert(sizeof h <= DEVMEM_HANDLE_BYTES, "IPC handle size");
  int e = rt(cudaIpcGetMemHandle(&h, (void *)base));
  if (e == 0) memcpy(handle, &h, sizeof h);
  return e;
}

static int legacy_open(void *ctx, const unsigned char handle[DEVMEM_HANDLE_BYTES], uintptr_t *base,
                       size_t *size)
{
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof h);
  void *p = NULL;
  int e = rt(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
  if (e != 0) return e;
  CUdeviceptr b = 0;
  size_t s = 0;
  CUresult r = cu.addr_range(&b, &s, (CUdeviceptr)(uintptr_t)p);
  if (r != CUDA_SUCCESS || b != (CUdeviceptr)(uintptr_t)p) {
    cudaIpcCloseMemHandle(p);
    (void)cudaGetLastError();
    return r != CUDA_SUCCESS ? (int)r : (int)CUDA_ERROR_INVALID_VALUE;
  }
  *base = (uintptr_t)p;
  *size = s;
  return 0;
}

static int legacy_close(void *ctx, uintptr_t base) { return rt(cudaIpcCloseMemHandle((void *)base)); }

static int vmm_export(void *ctx, uintptr_t chunk, int *fd)
{
  CUmemGenericAllocationHandle h = 0;
  CUresult r = cu.retain(&h, (void *)chunk);
  if (r != CUDA_SUCCESS) return (int)r;
  int f = -1;
  r = cu.export_fd(&f, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  cu.release(h); /* the reference retain took */
  if (r != CUDA_SUCCESS) return (int)r;
  *fd = f;
  return 0;
}

static int vmm_import(void *ctx, int fd, uint64_t *handle)
{
  CUmemGenericAllocationHandle h = 0;
  CUresult r = cu.import_fd(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r == CUDA_SUCCESS) *handle = (uint64_t)h;
  return (int)r;
}

static int vmm_release(void *ctx, uint64_t h) { return (int)cu.release((CUmemGenericAllocationHandle)h); }

static int va_reserve(void *ctx, size_t size, uintptr_t *va)
{
  CUdeviceptr p = 0;
  CUresult r = cu.reserve(&p, size, 0, 0, 0);
  if (r == CUDA_SUCCESS) *va = (uintptr_t)p;
  return (int)r;
}

static int va_free(void *ctx, uintptr_t va, size_t size) { return (int)cu.addr_free((CUdeviceptr)va, size); }

static int vmm_map(void *ctx, uintptr_t va, size_t size, uint64_t h)
{
  return (int)cu.map((CUdeviceptr)va, size, 0, (CUmemGenericAllocationHandle)h, 0);
}

static int vmm_unmap(void *ctx, uintptr_t va, size_t size) { return (int)cu.unmap((CUdeviceptr)va, size); }

static int set_access(void *ctx, uintptr_t va, size_t size)
{
  CUmemAccessDesc a;
  memset(&a, 0, sizeof a);
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = ((devmem_cuda_ctx_t *)ctx)->device;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return (int)cu.set_access((CUdeviceptr)va, size, &a, 1);
}

static int quiesce(void *ctx) { return rt(cudaDeviceSynchronize()); }

int devmem_cuda_driver(devmem_driver_t *drv, devmem_cuda_ctx_t *ctx, char *err, size_t errlen)
{
  if (!driver_loaded(err, errlen)) return -1;
  devmem_driver_t d = {ctx, query, legacy_export, legacy_open, legacy_close, vmm_export,
                       vmm_import, vmm_release, va_reserve, va_free, vmm_map, vmm_unmap,
                       set_access, quiesce, error_name};
  *drv = d;
  return 0;
}

static int fail(char *err, size_t len, const char *what, int code)
{
  snprintf(err, len, "%s: %s", what, error_name(NULL, code));
  return -1;
}

/* Let every GPU that can reach dev's memory read and write [va, va + size). */
static CUresult grant_access(CUdeviceptr va, size_t size, int dev)
{
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) (void)cudaGetLastError();
  CUmemAccessDesc a[SHMDDP_MAX_RANKS * 2];
  size_t k = 0;
  for (int g = 0; g < n && k < sizeof a / sizeof a[0]; g++) {
    int can = g == dev;
    if (!can && cudaDeviceCanAccessPeer(&can, g, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      can = 0;
    }
    if (!can) continue;
    memset(&a[k], 0, sizeof a[k]);
    a[k].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a[k].location.id = g;
    a[k].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    k++;
  }
  return cu.set_access(va, size, a, k);
}

int devmem_cuda_alloc(void **ptr, size_t bytes, char *err, size_t errlen)
{
  *ptr = NULL;
  int dev = 0, vmm = 0, fds = 0;
  int e = rt(cudaGetDevice(&dev));
  if (e != 0) return fail(err, errlen, "cudaGetDevice", e);
  CUdevice cd = 0;
  if (driver_loaded(err, errlen) && cu.device_get(&cd, dev) == CUDA_SUCCESS &&
      cu.device_attr(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cd) == CUDA_SUCCESS &&
      cu.device_attr(&fds, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, cd) != CUDA_SUCCESS)
    fds = 0;
  if (!vmm || !fds) {
    e = rt(cudaMalloc(ptr, bytes ? bytes : 1)); /* shared by legacy IPC instead */
    return e ? fail(err, errlen, "cudaMalloc", e) : 0;
  }
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t g = 0;
  CUresult r = cu.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r != CUDA_SUCCESS || g == 0) return fail(err, errlen, "cuMemGetAllocationGranularity", (int)r);
  size_t size = ((bytes ? bytes : 1) + g - 1) / g * g;
  if (size < bytes) return fail(err, errlen, "size", (int)CUDA_ERROR_INVALID_VALUE);
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  if ((r = cu.create(&h, size, &prop, 0)) != CUDA_SUCCESS) return fail(err, errlen, "cuMemCreate", (int)r);
  const char *what = "cuMemAddressReserve";
  r = cu.reserve(&va, size, g, 0, 0);
  if (r == CUDA_SUCCESS && (what = "cuMemMap", r = cu.map(va, size, 0, h, 0)) == CUDA_SUCCESS &&
      (what = "cuMemSetAccess", r = grant_access(va, size, dev)) != CUDA_SUCCESS)
    cu.unmap(va, size);
  if (r != CUDA_SUCCESS && va) cu.addr_free(va, size);
  cu.release(h); /* the mapping holds the memory from here on */
  if (r != CUDA_SUCCESS) return fail(err, errlen, what, (int)r);
  *ptr = (void *)(uintptr_t)va;
  return 0;
}

int devmem_cuda_free(void *ptr, char *err, size_t errlen)
{
  if (!ptr) return 0;
  devmem_range_t q;
  if (!driver_loaded(err, errlen)) return -1;
  int e = query(NULL, (uintptr_t)ptr, &q);
  if (e != 0) return fail(err, errlen, "cuPointerGetAttributes", e);
  if (q.kind == DEVMEM_LEGACY) {
    e = rt(cudaFree(ptr));
    return e ? fail(err, errlen, "cudaFree", e) : 0;
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult r = cu.addr_range(&base, &size, (CUdeviceptr)(uintptr_t)ptr);
  if (r != CUDA_SUCCESS || base != (CUdeviceptr)(uintptr_t)ptr) {
    snprintf(err, errlen, "%p was not returned by ncclMemAlloc", ptr);
    return -1;
  }
  /* Work queued on it must finish before the memory goes (cudaFree would wait too). */
  e = rt(cudaDeviceSynchronize());
  if (e != 0) return fail(err, errlen, "cudaDeviceSynchronize", e);
  if ((r = cu.unmap(base, size)) != CUDA_SUCCESS) return fail(err, errlen, "cuMemUnmap", (int)r);
  if ((r = cu.addr_free(base, size)) != CUDA_SUCCESS) return fail(err, errlen, "cuMemAddressFree", (int)r);
  return 0;
}
