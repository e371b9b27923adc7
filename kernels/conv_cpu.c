/* conv_cpu.c — CPU reference convolutions (3x3 pad 1, 1x1 with bias, transposed 2x2 stride 2
 * with bias) in NHWC as GEMMs: 3x3 through im2col in chunks of pixels, so the workspace stays
 * a few MiB whatever the batch; 1x1 directly on the NHWC matrix; transposed 2x2 as one GEMM
 * to a [pixels x 4*cout] block that is scattered to (gathered from) the 2x larger image. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_cpu.h"
#include "kernels/ops_cpu.h"

/* Elements of im2col (or convT) workspace we aim for per chunk: 1 Mi = 4 MiB in f32. */
#define CONV_CHUNK_ELEMS ((size_t)1 << 20)

static size_t conv_row_elems(const ops_conv_t *c)
{
  switch (c->kind) {
  case OPS_CONV3X3: return (size_t)9 * c->cin;
  case OPS_CONVT2X2: return (size_t)4 * c->cout;
  default: return 0;
  }
}

/* Pixels per chunk: deterministic in the shape, so conv_plan's workspace covers every call. */
static size_t conv_chunk(const ops_conv_t *c, size_t P)
{
  size_t row = conv_row_elems(c);
  if (row == 0) return P;
  size_t chunk = CONV_CHUNK_ELEMS / row;
  if (chunk < 64) chunk = 64;
  return chunk < P ? chunk : P;
}

#define CPU_TMPL "kernels/conv_cpu_tmpl.h"
#include "kernels/cpu_tmpl.h"
