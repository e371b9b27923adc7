/* nvml_dl.c — the five NVML entry points the trainer uses, resolved with dlsym. The types are
 * declared here as NVML's ABI defines them (a device is an opaque pointer, results are ints), so
 * no NVML header is needed at build time. NVML keeps a reference count per nvmlInit, so each
 * handle pairs its own init with a shutdown. */
#include "config.h"

#include "src/obs/nvml_dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "src/check.h"

typedef int nvml_return_t; /* NVML_SUCCESS = 0 */
typedef void *nvml_device_t;
typedef struct {
  unsigned int gpu, memory;
} nvml_utilization_t;
typedef struct {
  unsigned long long total, free, used;
} nvml_memory_t;

struct nvml_dl {
  void *lib;
  nvml_device_t dev;
  nvml_return_t (*init)(void);
  nvml_return_t (*shutdown)(void);
  nvml_return_t (*by_bus_id)(const char *, nvml_device_t *);
  nvml_return_t (*utilization)(nvml_device_t, nvml_utilization_t *);
  nvml_return_t (*memory)(nvml_device_t, nvml_memory_t *);
  const char *(*error_string)(nvml_return_t);
};

static void *sym(nvml_dl_t *n, const char *name, const char *alt)
{
  void *p = dlsym(n->lib, name);
  return p || !alt ? p : dlsym(n->lib, alt);
}

int nvml_open(nvml_dl_t **out, const char *lib, const char *pci_bus_id, char *err, size_t errlen)
{
  *out = NULL;
  if (!lib) lib = "libnvidia-ml.so.1";
  nvml_dl_t *n = calloc(1, sizeof *n);
  if (!n) {
    return check_fail(err, errlen, "out of memory");
  }
  if (!(n->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL))) {
    snprintf(err, errlen, "NVML not available (%s): GPU utilisation is not reported", dlerror());
    free(n);
    return -1;
  }
  *(void **)&n->init = sym(n, "nvmlInit_v2", "nvmlInit");
  *(void **)&n->shutdown = sym(n, "nvmlShutdown", NULL);
  *(void **)&n->by_bus_id = sym(n, "nvmlDeviceGetHandleByPciBusId_v2",
                                "nvmlDeviceGetHandleByPciBusId");
  *(void **)&n->utilization = sym(n, "nvmlDeviceGetUtilizationRates", NULL);
  *(void **)&n->memory = sym(n, "nvmlDeviceGetMemoryInfo", NULL);
  *(void **)&n->error_string = sym(n, "nvmlErrorString", NULL);
  nvml_return_t r = -1;
  if (!n->init || !n->shutdown || !n->by_bus_id || !n->utilization || !n->memory) {
    snprintf(err, errlen, "%s lacks the NVML functions needed", lib);
  } else if ((r = n->init()) != 0) {
    snprintf(err, errlen, "nvmlInit failed (%s)", n->error_string ? n->error_string(r) : "?");
  } else if ((r = n->by_bus_id(pci_bus_id ? pci_bus_id : "", &n->dev)) != 0) {
    snprintf(err, errlen, "NVML does not know the GPU at %s (%s)",
             pci_bus_id ? pci_bus_id : "(no bus id)", n->error_string ? n->error_string(r) : "?");
    n->shutdown();
    r = -1;
  }
  if (r != 0) {
    dlclose(n->lib);
    free(n);
    return -1;
  }
  *out = n;
  return 0;
}

void nvml_close(nvml_dl_t *n)
{
  if (!n) return;
  n->shutdown();
  dlclose(n->lib);
  free(n);
}

int nvml_sample(nvml_dl_t *n, nvml_sample_t *s)
{
  nvml_utilization_t u;
  nvml_memory_t m;
  if (n->utilization(n->dev, &u) != 0 || n->memory(n->dev, &m) != 0) return -1;
  s->gpu_util = u.gpu;
  s->mem_util = u.memory;
  s->used_mib = (double)m.used / 1048576.0;
  s->total_mib = (double)m.total / 1048576.0;
  return 0;
}
