/* conv_engine.h — SHMDDP_CONV_ENGINE: which blocks run their 3x3 convolution on the fused ops
 * (ops.h conv_fused): a pair's second convolution with the first's BatchNorm + ReLU as its
 * prologue, a first one with its own statistics only; SHMDDP_UPCONV_GATHERED: which
 * up-convolutions take their gradient in their GEMMs' order (ops.h concat_bwd_gathered);
 * SHMDDP_WGRAD_STREAM: from which level the weight gradients run on a second stream; and
 * SHMDDP_HEAD_FUSED. The model decides by these calls when it is built, and dev/ops_cuda_bench
 * by the same ones, so its step is the trainer's. */
#ifndef SRC_MODEL_CONV_ENGINE_H
#define SRC_MODEL_CONV_ENGINE_H

#include <stddef.h>

#include "kernels/ops.h"

#define MODEL_CONV_SHAPES_MAX 16

/* A layer shape for a use: cin -> cout channels, a pair's second convolution or a first block's
 * (ops.h ops_fuse_use_t). */
typedef struct {
  ops_fuse_use_t use;
  int cin, cout;
} model_conv_shape_t;

typedef struct {
  const char *setting; /* "auto", "library" or "fused" (auto when unset) */
  int fuse_rank;       /* the least ops.h conv_fused rank that runs fused (3: none does) */
  int nshapes;         /* SHMDDP_CONV_FUSE_SHAPES: shapes auto takes too where kernels exist */
  model_conv_shape_t shapes[MODEL_CONV_SHAPES_MAX];
} model_conv_engine_t;

/* SHMDDP_CONV_ENGINE and SHMDDP_CONV_FUSE_SHAPES into *e: 0, or -1 with a message naming the
 * variable and what it takes. auto: where the backend ranks its fused kernels faster (rank 2),
 * and on the shapes SHMDDP_CONV_FUSE_SHAPES lists wherever it has them (rank 1: to measure a
 * shape in the step before it enters the backend's table); fused: wherever it has them (rank
 * 1); library: nowhere. The shapes are refused with fused or library. */
int model_conv_engine_read(model_conv_engine_t *e, char *err, size_t errlen);

/* Whether the convolution c of a BatchNorm block runs fused on o under e, for the use (a
 * pair's second convolution, or a first block's statistics; ops.h ops_fuse_use_t): 1 (with
 * *ws_bytes the workspace the fused ops need), 0 (the table lacks a fused entry, or ranks c
 * below e's), or -1 when the table's conv_fused failed (its message in o->last_error). */
int model_conv_engine_fuses(const model_conv_engine_t *e, const ops_t *o, const ops_conv_t *c,
                            ops_fuse_use_t use, size_t *ws_bytes);

/* SHMDDP_UPCONV_GATHERED for a model computing in dt into *on: 1 when its up-convolutions take
 * their gradient gathered wherever the backend can (model_upconv_gathered), else 0; 0, or -1
 * with a message naming the variable. auto (unset): in 16-bit types (bf16, fp16) only: on an
 * H100 the gathered route made the bf16 step faster and the fp32 one slower
 * (bench/results/ab_pdl_upgather_1xh100.txt; in fp32 the plain route's input gradient runs
 * cuDNN's kernel where bytes bound the layer), and the CPU backend's types (f32, f64) give the
 * same bits either way. 1: in every type; 0: never. */
int model_upconv_gathered_read(ops_dtype_t dt, int *on, char *err, size_t errlen);

/* SHMDDP_WGRAD_STREAM (shm/env.c) for a model of `levels` levels into *side_from: the level
 * from which backward computes the convolutions' weight gradients on a second stream, beside
 * the input gradients (levels: none); 0, or -1 with a message naming the variable. auto: from
 * level 1 where on_gpu, else none (on the host there is no second stream: the schedule would
 * only keep tensors alive longer). Always none where staged: 16-bit weight gradients folded
 * into f32 one layer at a time through one staging buffer, which two layers in flight would
 * share. */
int model_wgrad_stream_read(int levels, int on_gpu, int staged, int *side_from, char *err,
                            size_t errlen);

/* SHMDDP_HEAD_FUSED (shm/env.c): which halves of the head's fusion with the BatchNorm before it
 * are asked for (*fwd: the head on the norm's apply, its output never stored; *bwd: the head's
 * input gradient formed inside the norm's backward; *train: both, and a training step's head,
 * loss and head backward down to the norm's reduce as one op); where they take effect the
 * backend has the ops (kernels/ops.h conv1x1_*_bn, bn_bwd_*_1x1, head_train_1x1). */
int model_head_fused_read(int *fwd, int *bwd, int *train, char *err, size_t errlen);

/* Whether the planned head (a 1x1 convolution) on o reads its BatchNorm's apply directly under
 * fwd (from model_head_fused_read): o has the conv1x1_*_bn entries and says yes for it. */
int model_head_on_norm(const ops_t *o, const ops_conv_t *head, int fwd);

/* Whether backward forms the planned head's input gradient inside the BatchNorm backward before
 * it under bwd (from model_head_fused_read): o has the bn_bwd_*_1x1 entries, and the head runs
 * where they give its conv_bwd_data's bits (conv1x1_bn_ok says 1: on CUDA the few-output
 * kernels, not a head planned on cuDNN or cuBLAS). */
int model_head_dy_in_norm(const ops_t *o, const ops_conv_t *head, int bwd);

/* Whether a training step runs the planned head's training pass as one op under train (from
 * model_head_fused_read): both halves hold for the head (on_norm, dy_in_norm: what
 * model_head_on_norm and model_head_dy_in_norm said for it) and o has head_train_1x1. */
int model_head_train_usable(const ops_t *o, int on_norm, int dy_in_norm, int train);

/* Whether the planned up-convolution c on o takes its gradient gathered under on (from
 * model_upconv_gathered_read): o has the gathered entries and says yes for c. */
int model_upconv_gathered(const ops_t *o, const ops_conv_t *c, int on);

#endif
