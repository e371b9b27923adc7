/* cuda_device.h — device-side waiting for the CUDA transport's kernels: system-scope
 * acquire/release flag accesses, and a spin that also watches the group's abort word and a
 * deadline, so a kernel whose peer died or never came gives up instead of hanging the GPU.
 *
 * Give-up protocol: the first thread that gives up CASes its code into err_dev (device memory,
 * sticky for the rest of the communicator's life) and stores it into err_host (mapped host memory)
 * for the host to report. Every spin polls err_dev every few microseconds, so the other threads
 * and blocks of the kernel (and every later kernel of the communicator) stop soon. The abort word
 * lives in host memory, so it is read only every ~100 us, by one lane per warp. CUDA only. */
#ifndef COLL_CUDA_DEVICE_H
#define COLL_CUDA_DEVICE_H

#include "collectives/cuda/cuda_internal.h"

static __device__ __forceinline__ unsigned long long cd_now_ns(void)
{
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __device__ __forceinline__ uint64_t cd_ld_acquire(const uint64_t *p)
{
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

static __device__ __forceinline__ void cd_st_release(uint64_t *p, uint64_t v)
{
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

static __device__ __forceinline__ bool cd_gave_up(const cuda_kctl_t &k)
{
  return *(volatile uint32_t *)k.err_dev != 0;
}

static __device__ __noinline__ void cd_give_up(const cuda_kctl_t &k, uint32_t code)
{
  if (atomicCAS(k.err_dev, 0u, code) == 0u) {
    *k.err_host = code;
    __threadfence_system();
  }
}

/* Between polls of the flag: every ~2 us check the sticky word (one hot line: not every round),
 * and every ~100 us the abort word and the deadline — the abort word is in host memory, and a
 * kernel may have tens of thousands of threads spinning, so only the lowest active lane of each
 * warp reads it (a read storm over PCIe slows everything, the peers' NVLink writes included).
 * Returns false once the kernel must give up. */
struct cd_spin {
  unsigned long long start, last, last_abort;
  __device__ cd_spin() : start(0), last(0), last_abort(0) {}
  __device__ __forceinline__ bool keep_going(const cuda_kctl_t &k)
  {
    unsigned long long now = cd_now_ns();
    if (start == 0) start = last = last_abort = now;
    if (now - last < 2000) return true;
    last = now;
    if (cd_gave_up(k)) return false;
    if (now - last_abort < 100000) return true;
    last_abort = now;
    unsigned lane = threadIdx.x & 31;
    if ((__activemask() & ((1u << lane) - 1)) == 0 && k.abort_word && *k.abort_word != 0) {
      cd_give_up(k, CUDA_GAVE_UP_ABORT);
      return false;
    }
    if (now - start > k.timeout_ns) {
      cd_give_up(k, CUDA_GAVE_UP_TIMEOUT);
      return false;
    }
    return true;
  }
};

/* Wait until *flag >= want (flags are monotonic). false: gave up. */
static __device__ __forceinline__ bool cd_wait_ge(const uint64_t *flag, uint64_t want,
                                                  const cuda_kctl_t &k)
{
  cd_spin sp;
  for (;;) {
#pragma unroll 1
    for (int i = 0; i < 32; i++)
      if (cd_ld_acquire(flag) >= want) return true;
    if (!sp.keep_going(k)) return false;
  }
}

#endif
