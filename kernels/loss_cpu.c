/* loss_cpu.c — CPU reference per-pixel softmax cross-entropy: loss sum, counted pixels, the
 * gradient of the mean loss and the argmax prediction in one pass over the logits. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/ops_cpu.h"

#define T float
#define SFX f32
#include "kernels/loss_cpu_tmpl.h"
#undef T
#undef SFX

#define T double
#define SFX f64
#include "kernels/loss_cpu_tmpl.h"
#undef T
#undef SFX
