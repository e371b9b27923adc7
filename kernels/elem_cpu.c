/* elem_cpu.c — CPU reference element-wise and data-movement ops: ReLU, 2x2 max-pool (with the
 * winner's index kept for backward), channel concat, and the f32 <-> compute-dtype casts. */
#include "config.h"

#include <string.h>

#include "kernels/ops_cpu.h"

#define T float
#define SFX f32
#include "kernels/elem_cpu_tmpl.h"
#undef T
#undef SFX

#define T double
#define SFX f64
#include "kernels/elem_cpu_tmpl.h"
#undef T
#undef SFX
