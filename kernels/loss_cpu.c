/* loss_cpu.c — CPU reference per-pixel softmax cross-entropy: loss sum, counted pixels, the
 * gradient of the mean loss and the argmax prediction in one pass over the logits. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/ops_cpu.h"

#define CPU_TMPL "kernels/loss_cpu_tmpl.h"
#include "kernels/cpu_tmpl.h"
