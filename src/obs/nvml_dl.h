/* nvml_dl.h — GPU utilisation and memory from NVML, loaded at run time (dlopen of
 * libnvidia-ml.so.1), so the trainer neither links against the driver nor needs it: where the
 * library or the GPU is missing, nvml_open says so and callers leave the fields out. */
#ifndef SRC_OBS_NVML_DL_H
#define SRC_OBS_NVML_DL_H

#include <stddef.h>

typedef struct nvml_dl nvml_dl_t;

typedef struct {
  double gpu_util;  /* percent of the last sample period a kernel was running */
  double mem_util;  /* percent of that period device memory was read or written */
  double used_mib;  /* device memory in use by every process (contexts, caches included) */
  double total_mib;
} nvml_sample_t;

/* lib: the library to load (NULL: "libnvidia-ml.so.1"); pci_bus_id: the GPU, as
 * cudaDeviceGetPCIBusId writes it (CUDA ordinals and NVML indices can differ). Returns 0, or -1
 * with the reason in err (no library, no such GPU): not an error for the caller. */
int nvml_open(nvml_dl_t **out, const char *lib, const char *pci_bus_id, char *err, size_t errlen);
void nvml_close(nvml_dl_t *n); /* NULL is fine */
/* One sample (~10 us). Returns -1 when NVML fails (the GPU fell off the bus, ...). */
int nvml_sample(nvml_dl_t *n, nvml_sample_t *s);

#endif
