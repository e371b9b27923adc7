/* conv_engine.c — SHMDDP_CONV_ENGINE and the per-layer choice it makes (conv_engine.h). */
#include "config.h"

#include "src/model/conv_engine.h"

#include <string.h>

#include "shm/env.h"
#include "src/check.h"

/* auto: the rank the backend gives kernels measured faster than the plain ops (Hopper's, bf16,
 * 64 -> 64; see bench/results/conv_sm90_1xh100.txt); fused: any rank it runs (1: on the CPU,
 * composed of the plain ops, which checks the fused schedule against the plain one). */
#define ENGINE_RANK_AUTO 2
#define ENGINE_RANK_FUSED 1
#define ENGINE_RANK_NONE 3

int model_conv_engine_read(model_conv_engine_t *e, char *err, size_t errlen)
{
  const char *v = NULL;
  if (shm_env_choice("SHMDDP_CONV_ENGINE", &v, err, errlen) < 0) return -1;
  if (!v || strcmp(v, "auto") == 0)
    *e = (model_conv_engine_t){.setting = "auto", .fuse_rank = ENGINE_RANK_AUTO};
  else if (strcmp(v, "fused") == 0)
    *e = (model_conv_engine_t){.setting = "fused", .fuse_rank = ENGINE_RANK_FUSED};
  else if (strcmp(v, "library") == 0)
    *e = (model_conv_engine_t){.setting = "library", .fuse_rank = ENGINE_RANK_NONE};
  else
    return check_fail(err, errlen, "SHMDDP_CONV_ENGINE=%s: use auto, library or fused", v);
  return 0;
}

int model_conv_engine_fuses(const model_conv_engine_t *e, const ops_t *o, const ops_conv_t *c,
                            ops_fuse_use_t use, size_t *ws_bytes)
{
  *ws_bytes = 0;
  if (!o->conv_fused || !o->conv_fwd_fused) return 0;
  if (use == OPS_FUSE_PAIR && (!o->conv_bwd_data_fused || !o->conv_bwd_filter_fused ||
                               !o->bn_coef || !o->bn_bwd_params))
    return 0;
  size_t ws = 0;
  int rank = o->conv_fused(o, c, use, &ws);
  if (rank < 0) return -1;
  if (rank < e->fuse_rank) return 0;
  *ws_bytes = ws;
  return 1;
}
