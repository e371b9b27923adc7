/* dtype.c — the size of one element of each dtype: what every reduction, copy and argument check
 * of the collectives measures buffers with. It sits beside the reductions, at the bottom of the
 * library, so they need nothing from the layers above. */
#include "config.h"

#include "shmddp.h"

static const size_t dtype_sizes[SHMDDP_NUM_DTYPES] = {
  [SHMDDP_F32] = 4, [SHMDDP_F64] = 8, [SHMDDP_F16] = 2, [SHMDDP_BF16] = 2, [SHMDDP_I32] = 4,
  [SHMDDP_I64] = 8, [SHMDDP_I8] = 1, [SHMDDP_U8] = 1, [SHMDDP_U32] = 4, [SHMDDP_U64] = 8,
  [SHMDDP_F8E4M3] = 1, [SHMDDP_F8E5M2] = 1};

size_t shmddp_dtype_size(shmddp_dtype_t dtype)
{
  return ((int)dtype >= 0 && dtype < SHMDDP_NUM_DTYPES) ? dtype_sizes[dtype] : 0;
}
