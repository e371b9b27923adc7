/* conv_engine.c — SHMDDP_CONV_ENGINE and the per-layer choice it makes (conv_engine.h). */
#include "config.h"

#include "src/model/conv_engine.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shm/env.h"
#include "src/check.h"

/* auto: the rank the backend gives kernels measured faster than the plain ops (Hopper's, bf16,
 * the shapes of kernels/conv_fused_rank.c); fused: any rank it runs (1: on the CPU, composed of
 * the plain ops, which checks the fused schedule against the plain one). */
#define ENGINE_RANK_AUTO 2
#define ENGINE_RANK_FUSED 1
#define ENGINE_RANK_NONE 3

/* A whole number 1..65536 from s[0..len): the channels of a layer (shm_env_parse_whole's
 * digits). */
static int channels_of(const char *s, size_t len, int *out)
{
  char buf[8];
  uint64_t v = 0;
  if (len >= sizeof buf) return -1;
  memcpy(buf, s, len);
  buf[len] = '\0';
  if (shm_env_parse_whole(buf, 65536, &v) != 0 || v < 1) return -1;
  *out = (int)v;
  return 0;
}

/* One entry USE:CIN:COUT of s[0..len) into *sh. */
static int shape_of(const char *s, size_t len, model_conv_shape_t *sh)
{
  const char *c1 = memchr(s, ':', len);
  if (!c1) return -1;
  const char *c2 = memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - s));
  if (!c2) return -1;
  const size_t ulen = (size_t)(c1 - s);
  if (ulen == 4 && strncmp(s, "pair", 4) == 0)
    sh->use = OPS_FUSE_PAIR;
  else if (ulen == 5 && strncmp(s, "stats", 5) == 0)
    sh->use = OPS_FUSE_STATS;
  else if (ulen == 5 && strncmp(s, "dgrad", 5) == 0)
    sh->use = OPS_FUSE_DGRAD;
  else
    return -1;
  return channels_of(c1 + 1, (size_t)(c2 - c1 - 1), &sh->cin) ||
                 channels_of(c2 + 1, len - (size_t)(c2 + 1 - s), &sh->cout)
             ? -1
             : 0;
}

/* SHMDDP_CONV_FUSE_SHAPES (unset or empty: none): entries USE:CIN:COUT joined by commas, under
 * auto only. */
static int read_shapes(model_conv_engine_t *e, char *err, size_t errlen)
{
  e->nshapes = 0;
  const char *v = getenv("SHMDDP_CONV_FUSE_SHAPES");
  if (!v || !*v) return 0;
  if (strcmp(e->setting, "auto") != 0)
    return check_fail(err, errlen, "SHMDDP_CONV_FUSE_SHAPES adds shapes to SHMDDP_CONV_ENGINE="
                      "auto, not to %s: unset one of the two", e->setting);
  for (const char *s = v;;) {
    const char *end = strchr(s, ',');
    const size_t len = end ? (size_t)(end - s) : strlen(s);
    if (e->nshapes == MODEL_CONV_SHAPES_MAX)
      return check_fail(err, errlen, "SHMDDP_CONV_FUSE_SHAPES: more than %d shapes",
                        MODEL_CONV_SHAPES_MAX);
    if (shape_of(s, len, &e->shapes[e->nshapes]) != 0)
      return check_fail(err, errlen, "SHMDDP_CONV_FUSE_SHAPES: '%.*s' is not USE:CIN:COUT (USE "
                        "pair, stats or dgrad, CIN and COUT channels 1..65536; entries joined "
                        "by commas, e.g. stats:256:512,pair:256:256,dgrad:256:128)",
                        (int)(len > 64 ? 64 : len), s);
    e->nshapes++;
    if (!end) break;
    s = end + 1;
  }
  return 0;
}

/* Whether SHMDDP_CONV_FUSE_SHAPES lists c for the use. */
static int listed(const model_conv_engine_t *e, const ops_conv_t *c, ops_fuse_use_t use)
{
  for (int i = 0; i < e->nshapes; i++)
    if (e->shapes[i].use == use && e->shapes[i].cin == c->cin && e->shapes[i].cout == c->cout)
      return 1;
  return 0;
}

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
  return read_shapes(e, err, errlen);
}

int model_upconv_gathered_read(ops_dtype_t dt, int *on, char *err, size_t errlen)
{
  const char *v = NULL;
  if (shm_env_choice("SHMDDP_UPCONV_GATHERED", &v, err, errlen) < 0) return -1;
  if (!v || strcmp(v, "auto") == 0)
    *on = dt == OPS_BF16 || dt == OPS_F16;
  else if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)
    *on = v[0] == '1';
  else
    return check_fail(err, errlen, "SHMDDP_UPCONV_GATHERED=%s: use auto, 0 or 1", v);
  return 0;
}

/* auto's level: from level 1 it is faster in fp32 (ab_wgrad_stream_1xh200.txt) and in bf16
 * (ab_rednarrow32_wgrad_stream_pair256_1xh100.txt: +1.1 %, the bf16 ledger 1040 -> 1084 MiB
 * with the side stream's own convolution workspace, under the 1100 MiB it is held to); from
 * deeper levels it gains less. */
#define WGRAD_STREAM_AUTO_LEVEL 1

int model_wgrad_stream_read(int levels, int on_gpu, int staged, int *side_from, char *err,
                            size_t errlen)
{
  const char *v = NULL;
  *side_from = levels;
  if (shm_env_choice("SHMDDP_WGRAD_STREAM", &v, err, errlen) < 0) return -1;
  long n = levels;
  if (!v || strcmp(v, "auto") == 0) {
    if (on_gpu) n = WGRAD_STREAM_AUTO_LEVEL < levels ? WGRAD_STREAM_AUTO_LEVEL : levels;
  } else if (strcmp(v, "off") != 0) {
    char *end;
    n = strtol(v, &end, 10);
    if (end == v || *end || n < 0 || n > levels)
      return check_fail(err, errlen, "SHMDDP_WGRAD_STREAM=%s: use auto, off, or the level from "
                        "which weight gradients run beside (0 to %d; %d: none)", v, levels,
                        levels);
  }
  if (!staged) *side_from = (int)n;
  return 0;
}

int model_head_fused_read(int *fwd, int *bwd, int *train, char *err, size_t errlen)
{
  const char *v = NULL;
  if (shm_env_choice("SHMDDP_HEAD_FUSED", &v, err, errlen) < 0) return -1;
  *train = 0;
  if (!v || strcmp(v, "train") == 0) *fwd = *bwd = *train = 1;
  else if (strcmp(v, "1") == 0) *fwd = *bwd = 1;
  else if (strcmp(v, "0") == 0) *fwd = *bwd = 0;
  else if (strcmp(v, "forward") == 0) *fwd = 1, *bwd = 0;
  else if (strcmp(v, "backward") == 0) *fwd = 0, *bwd = 1;
  else
    return check_fail(err, errlen, "SHMDDP_HEAD_FUSED=%s: use train, 1, 0, forward or backward",
                      v);
  return 0;
}

int model_head_train_usable(const ops_t *o, int on_norm, int dy_in_norm, int train)
{
  return train && on_norm && dy_in_norm && o->head_train_1x1;
}

int model_head_on_norm(const ops_t *o, const ops_conv_t *head, int fwd)
{
  return fwd && o->conv1x1_bn_ok && o->conv1x1_fwd_bn && o->conv1x1_bwd_filter_bn &&
         o->conv1x1_bn_ok(o, head) == 1;
}

int model_head_dy_in_norm(const ops_t *o, const ops_conv_t *head, int bwd)
{
  return bwd && o->bn_bwd_reduce_1x1 && o->bn_bwd_apply_1x1 && o->conv1x1_bn_ok &&
         o->conv1x1_bn_ok(o, head) == 1; /* a 1x1 of at most OPS_BN_1X1_MOST_K outputs */
}

int model_upconv_gathered(const ops_t *o, const ops_conv_t *c, int on)
{
  return on && o->concat_bwd_gathered && o->conv_gathered && o->conv_bwd_filter_gathered &&
         o->conv_bwd_data_gathered && o->conv_gathered(o, c) == 1;
}

int model_conv_engine_fuses(const model_conv_engine_t *e, const ops_t *o, const ops_conv_t *c,
                            ops_fuse_use_t use, size_t *ws_bytes)
{
  *ws_bytes = 0;
  if (!o->conv_fused || !o->conv_fwd_fused) return 0;
  if (use == OPS_FUSE_PAIR && (!o->conv_bwd_data_fused || !o->conv_bwd_filter_fused ||
                               !o->bn_coef || !o->bn_bwd_params))
    return 0;
  if (use == OPS_FUSE_DGRAD && !o->conv_bwd_data_fused) return 0;
  size_t ws = 0;
  int rank = o->conv_fused(o, c, use, &ws);
  if (rank < 0) return -1;
  if (rank < e->fuse_rank && !(rank >= 1 && listed(e, c, use))) return 0;
  *ws_bytes = ws;
  return 1;
}
