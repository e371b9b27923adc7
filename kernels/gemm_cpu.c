/* gemm_cpu.c — a blocked GEMM (Goto-style packing of A and B panels, a register-blocked
 * micro-kernel written with GCC vector extensions), for f32 and f64 from one template.
 * We write our own instead of requiring a BLAS: the only CBLAS commonly installed is the
 * reference one, which is several times slower; on x86-64 the driver is also compiled for
 * AVX2+FMA and picked at run time, so one binary is fast on current CPUs and still runs on old. */
#include "config.h"

#include "kernels/gemm_cpu.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GEMM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GEMM_CLONES
#endif

/* Thread-local packing buffers, grown on demand and kept (loader threads never call GEMM). */
static _Thread_local void *pack_buf;
static _Thread_local size_t pack_cap;

static void *pack_space(size_t bytes)
{
  if (bytes > pack_cap) {
    free(pack_buf);
    pack_buf = NULL;
    pack_cap = 0;
    if (posix_memalign(&pack_buf, 64, bytes) != 0) return NULL;
    pack_cap = bytes;
  }
  return pack_buf;
}

#define T float
#define SFX f32
#define VL 8
#include "kernels/gemm_cpu_tmpl.h"
#undef T
#undef SFX
#undef VL

#define T double
#define SFX f64
#define VL 4
#include "kernels/gemm_cpu_tmpl.h"
#undef T
#undef SFX
#undef VL
