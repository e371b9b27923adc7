/* elem_cpu.c — CPU reference element-wise and data-movement ops: ReLU, 2x2 max-pool (with the
 * winner's index kept for backward), channel concat, and the f32 <-> compute-dtype casts. */
#include "config.h"

#include <string.h>

#include "kernels/ops_cpu.h"

#define CPU_TMPL "kernels/elem_cpu_tmpl.h"
#include "kernels/cpu_tmpl.h"
