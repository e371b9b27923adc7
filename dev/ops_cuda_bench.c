/* ops_cuda_bench.c — where a U-Net training step's time goes on one GPU. Issues the reference
 * U-Net's forward, loss, backward and SGD update through the CUDA ops table in the order
 * src/model/unet.c does, on random data; times every op with CUDA events after warm-up (TFLOP/s
 * for convolutions, GB/s for the memory-bound ops), and the whole step with and without a CUDA
 * graph.
 * Then what each category costs inside the graph-replayed step: the step captured again without
 * that category's ops, replayed and timed (ablation; the ops-alone figures overstate short
 * kernels by their launch and ramp-up).
 *
 * Each ablation is timed against the full step replayed alternately with it (the median of the
 * pairs' differences), so the GPU's clock drifting over the run cancels out.
 *
 * With -A FILE (and -J FILE) it also writes the account of the step (dev/step_account.h): per
 * layer and pass the FLOPs and bytes from the shapes, the cost inside the graph of that layer's
 * operations of that pass (ablation again, one (layer, pass) at a time, -R pairs each, for at
 * most -T seconds: rows left then print unmeasured), and the roofline
 * against ceilings measured in the same run (a large matrix product on cuBLAS in the step's
 * dtype, a device-to-device copy), as markdown (and JSON for tools/report --account).
 *
 * The step follows src/model/unet.c's schedule, including which levels backward recomputes the
 * norm outputs, skips and concats at (-r: auto as the model's SHMDDP_RECOMPUTE=auto: the two
 * shallowest in 16-bit, none in f32; all, none, or a number of levels), and which block pairs
 * run their second convolution fused with the first's BatchNorm + ReLU: SHMDDP_CONV_ENGINE
 * (auto, library or fused), read and applied per layer by the model's own calls
 * (src/model/conv_engine.h). A fused pair runs the model's fused schedule: the first block's
 * statistics and coefficients (bn_coef) with no norm output, conv_fwd_fused with the second
 * block's statistics, their bn_finalize and apply; backward conv_bwd_filter_fused,
 * conv_bwd_data_fused (the first block's mask and sums), bn_bwd_params and bn_bwd_apply, nothing
 * recomputed. The fused convolutions are charged to their convolution's pass with the bytes they
 * move (step_account.h's acct_conv_fused), and every row of the account says its engine (fused or
 * library); the first line printed says the setting and which layers run fused.
 * The concat's backward writes each up-convolution's gradient in its GEMMs' order where the
 * model would (SHMDDP_UPCONV_GATHERED, kernels/ops.h concat_bwd_gathered), and that
 * convolution's backward reads it so; the first line says at how many levels.
 * The weight gradients of the levels SHMDDP_WGRAD_STREAM puts beside run on a second stream
 * with a workspace of their own, as the model runs them (auto: from level 1 in fp32 and bf16,
 * none in fp16); the first line says from which level. The per-op profile runs every op on
 * one stream (each op timed alone); the steps timed whole and the ablations run the model's
 * two streams.
 *
 * With -m it instead times the model itself (src/model/unet.c on the CUDA backend:
 * model_train_step plus optim_step, as the trainer calls them) and prints its memory ledger.
 *
 * With -P N it replays the graph-captured step N times between cudaProfilerStart and
 * cudaProfilerStop after the timings above and stops there: a profiler that records only that
 * range (nsys --capture-range=cudaProfilerApi, ncu --profile-from-start off) sees the step's
 * kernels as the graph runs them and nothing else (bench/graph_timeline_gpu.sh).
 *
 * -o N starts the parameters N elements into their flat buffers (default 0: every tensor
 * 16-byte aligned). -o 4 gives the model's alignment at 4 classes: its buffer starts with the
 * head's 4 + 64 * 4 elements, which puts every other 16-bit tensor 8 bytes off 16 bytes.
 *
 * usage: [SHMDDP_CONV_ENGINE=auto|library|fused] ops_cuda_bench [-p bf16|f16|f32] [-b batch]
 *                       [-s size] [-w 64,128,256,512,1024] [-k classes] [-n iters] [-W warmup]
 *                       [-t top-ops] [-r auto|all|none|N]
 *                       [-A account.md [-J account.json] [-R pairs] [-T seconds]] [-o N] [-m]
 *                       [-P replays] */
#include "config.h"

#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dev/cuda_harness.h"
#include "dev/step_account.h"
#include "kernels/ops.h"
#include "kernels/ops_cuda.h"
#include "shm/env.h"
#include "src/device/arena.h"
#include "src/model/conv_engine.h"
#include "src/model/model.h"
#include "src/model/optim.h"
#include "src/obs/outfile.h"

#define MAXL 8
#define MAXREC 1024

#define DIE(...) harness_die(1, __VA_ARGS__)

static ops_t O;
static model_conv_engine_t engine; /* SHMDDP_CONV_ENGINE, read as the model reads it */
static cudaStream_t S;
/* The table whose last error an op's failure reports (O, or the side table O2). */
static ops_t *err_ops = &O;
static size_t E; /* bytes per element */

/* ---- per-op timing: one event before each op in a profiled step ---- */

typedef struct {
  acct_pass_t pass;
  char name[64];
  double flops, bytes, ms;
} rec_t;

static rec_t recs[MAXREC];
static cudaEvent_t evs[MAXREC + 1], ends[MAXREC];
static int nrec, profiling, nprofiled;
static acct_t account;  /* filled by the step issued with accounting on */
static int accounting;
/* ablation: the ops of this pass (of this layer only, when skip_layer) are not issued */
static int skip_pass = -1;
static const char *skip_layer;

/* Closes the op in progress (profiling only). */
static void op_end(void)
{
  if (profiling && nrec > 0) CU(cudaEventRecord(ends[nrec - 1], S));
}

/* Whether the op is left out of this step (ablation). */
static int skipped(acct_pass_t pass, const char *name)
{
  return (int)pass == skip_pass && (!skip_layer || !strcmp(skip_layer, name));
}

static void op_begin(acct_pass_t pass, const char *name, acct_engine_t engine, acct_cost_t cost)
{
  if (accounting && acct_add_on(&account, name, pass, engine, cost) != 0) DIE("out of memory");
  if (!profiling) return;
  op_end();
  CU(cudaStreamSynchronize(S)); /* the next op starts on an idle GPU: no queue, no gap */
  if (nrec >= MAXREC) DIE("more than %d ops in a step", MAXREC);
  rec_t *r = &recs[nrec];
  r->pass = pass;
  snprintf(r->name, sizeof r->name, "%s", name);
  r->flops = cost.flops;
  r->bytes = cost.bytes;
  CU(cudaEventRecord(evs[nrec++], S));
}

/* An op of the library engine (OP) or of the fused one (OP_FUSED: step_account.h's
 * acct_engine_t), charged to (pass, name) with its cost. */
#define OP_ON(pass, name, engine, cost, call)                                                  \
  do {                                                                                         \
    if (skipped((pass), (name))) break;                                                        \
    op_begin((pass), (name), (engine), (cost));                                                \
    if ((call) != 0) DIE("%s (%s): %s", (name), #call, err_ops->last_error(err_ops));          \
  } while (0)
#define OP(pass, name, cost, call) OP_ON(pass, name, ACCT_LIBRARY, cost, call)
#define OP_FUSED(pass, name, cost, call) OP_ON(pass, name, ACCT_FUSED, cost, call)

/* ---- the weight gradients beside (SHMDDP_WGRAD_STREAM, read as the model reads it) ----
 * As src/model/unet.c's side_wgrad and side_join: at levels >= side_from a convolution's weight
 * gradient goes on the side table O2's stream once S has queued what comes before it, with a
 * workspace of its own, and S waits for it at the next convolution's backward and at the end of
 * backward. Not while profiling op by op: each op is then timed alone on S. */
static ops_t O2;
static cudaStream_t S2;
static cudaEvent_t side_fork_ev, side_join_ev;
static int side_from, side_pending;
static void *side_ws;

static int beside(int level) { return !profiling && level >= side_from; }

/* S waits for the weight gradient queued beside, if any. */
static void side_join(void)
{
  if (!side_pending) return;
  side_pending = 0;
  CU(cudaStreamWaitEvent(S, side_join_ev, 0));
}

/* The table (and through err_ops, the error report) a weight gradient at `level` runs on: O2
 * after S's work so far where it runs beside, else O. side_done closes it. */
static ops_t *wgrad_ops(int level)
{
  side_join();
  if (!beside(level)) return &O;
  CU(cudaEventRecord(side_fork_ev, S));
  CU(cudaStreamWaitEvent(S2, side_fork_ev, 0));
  return err_ops = &O2;
}

static void side_done(const ops_t *w)
{
  err_ops = &O;
  if (w != &O2) return;
  CU(cudaEventRecord(side_join_ev, S2));
  side_pending = 1;
}

static void *wgrad_ws(const ops_t *w);

/* ---- the network's tensors ---- */

typedef struct {
  ops_conv_t c;
  size_t w_off, b_off, nw; /* offsets into the flat parameter buffers */
  char name[32];
  int gathered; /* an up-convolution whose gradient the concat's split writes gathered (ops.h
                   concat_bwd_gathered), as the model's layer_conv_t.dy_gathered */
  int dgrad_fused; /* its plain input gradient on the fused kernels (OPS_FUSE_DGRAD), as the
                      model's layer_conv_t.dgrad_fused */
} conv_t;

typedef struct {
  conv_t conv;
  int C;
  size_t g_off;            /* gamma, then beta at g_off + C */
  double *stats, *saved;
  float *running;
  void *a, *r;
  /* The fused engine (src/model/conv_engine.h), as the model runs a block pair: the second
   * block's conv reads the first's conv output through the first's BatchNorm + ReLU (fused),
   * and the first makes only its statistics and coefficients, no norm output (feeds_fused).
   * A first block whose conv the engine takes makes its statistics in that conv (stats_fused). */
  int fused, feeds_fused, stats_fused;
  float *coef; /* feeds_fused: [scale | shift] of the norm, f32 */
} blk_t;

static struct {
  int L, N, H, W, K, widths[MAXL];
  blk_t enc1[MAXL], enc2[MAXL], dec1[MAXL], dec2[MAXL];
  conv_t up[MAXL], head;
  int head_fused; /* the head's input gradient formed inside the norm's backward (norm_bwd_head) */
  void *pooled[MAXL], *dskip[MAXL], *cat[MAXL];
  uint8_t *arg[MAXL];
  void *x, *logits, *g[3], *ws; /* g[2]: the concat's split, the up-convolution's part */
  float *x32, *p32, *g32, *mom;
  void *wp, *wg; /* working (dtype) parameters and gradients; = p32/g32 in f32 */
  int32_t *labels;
  double *loss;
  size_t nparams, ws_bytes;
  int head_fwd_fused; /* the head on the last block's norm apply, that output never made (ops.h
                         conv1x1_*_bn), as the model's head_fwd_fused */
  int head_train; /* the head, the loss and the head's backward down to the norm's reduce as one
                     op (ops.h head_train_1x1), as the model's head_train */
} N;

/* The workspace of the ops on table w: the side table's own (side_ws) or the main one's. */
static void *wgrad_ws(const ops_t *w) { return w == &O2 ? side_ws : N.ws; }

/* The block whose norm output the head reads. */
static blk_t *last_block(void) { return N.L > 1 ? &N.dec2[0] : &N.enc2[0]; }

static void *dev(size_t bytes)
{
  void *p = NULL;
  CU(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}

static unsigned long long lcg = 42;
static float rnd(void)
{
  lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((double)(lcg >> 11) / 9007199254740992.0 * 2 - 1);
}

/* Device f32 buffer of random values (never zeros: they can flatter a kernel). */
static float *dev_rand(size_t n, float scale, float offset)
{
  float *h = malloc(n * sizeof *h), *d = dev(n * sizeof *h);
  for (size_t i = 0; i < n; i++) h[i] = offset + scale * rnd();
  CU(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

static void *wp_at(size_t off) { return (char *)N.wp + off * E; }
static void *wg_at(size_t off) { return (char *)N.wg + off * E; }

static void conv_init(conv_t *cv, ops_conv_kind_t kind, int h, int w, int cin, int cout,
                      const char *name)
{
  int k = kind == OPS_CONV3X3 ? 9 : kind == OPS_CONV1X1 ? 1 : 4;
  cv->c = (ops_conv_t){kind, h, w, cin, cout, N.N, NULL};
  cv->nw = (size_t)k * cin * cout;
  cv->w_off = N.nparams;
  N.nparams += cv->nw;
  cv->b_off = N.nparams;
  if (kind != OPS_CONV3X3) N.nparams += cout;
  snprintf(cv->name, sizeof cv->name, "%s", name);
}

static void blk_init(blk_t *b, int h, int w, int cin, int cout, const char *name)
{
  conv_init(&b->conv, OPS_CONV3X3, h, w, cin, cout, name);
  b->C = cout;
  b->g_off = N.nparams;
  N.nparams += 2 * (size_t)cout;
}

static void blk_alloc(blk_t *b)
{
  size_t P = (size_t)N.N * b->conv.c.h * b->conv.c.w;
  b->a = dev(P * b->C * E);
  b->r = dev(P * b->C * E);
  b->stats = dev((2 * (size_t)b->C + 1) * sizeof(double));
  b->saved = dev((2 * (size_t)b->C + 1) * sizeof(double));
  b->running = dev_rand(2 * (size_t)b->C, 0.1f, 1);
}

static void plan(conv_t *cv)
{
  size_t ws = 0;
  if (O.conv_plan(&O, &cv->c, &ws) != 0) DIE("planning %s: %s", cv->name, O.last_error(&O));
  if (ws > N.ws_bytes) N.ws_bytes = ws;
}

/* SHMDDP_UPCONV_GATHERED, read as the model reads it (src/model/conv_engine.h) */
static int up_gathered;

/* Whether the up-convolution cv (planned) takes its gradient gathered: the model's choice. */
static void choose_gathered(conv_t *cv)
{
  cv->gathered = model_upconv_gathered(&O, &cv->c, up_gathered);
}

/* Whether b runs its conv fused: the model's choice (src/model/conv_engine.h), with the first
 * block's BatchNorm + ReLU as its prologue when b is the second of the pair (prev: the first),
 * with its own statistics only when b is a first block (prev NULL); the workspace grows to what
 * the fused ops take. */
static void choose_fused(blk_t *prev, blk_t *b)
{
  size_t ws = 0;
  int fuses = model_conv_engine_fuses(&engine, &O, &b->conv.c, prev ? OPS_FUSE_PAIR : OPS_FUSE_STATS,
                                      &ws);
  if (fuses < 0) DIE("planning %s fused: %s", b->conv.name, O.last_error(&O));
  if (!fuses) return;
  if (ws > N.ws_bytes) N.ws_bytes = ws;
  if (!prev) {
    b->stats_fused = 1;
    return;
  }
  b->fused = prev->feeds_fused = 1;
  prev->coef = dev(2 * (size_t)prev->C * sizeof(float));
}

/* Whether b's conv takes its plain input gradient on the fused kernels: the model's choice
 * (src/model/unet.c choose_dgrad), where b is not a fused pair's second. */
static void choose_dgrad(blk_t *b)
{
  size_t ws = 0;
  if (b->fused) return;
  int fuses = model_conv_engine_fuses(&engine, &O, &b->conv.c, OPS_FUSE_DGRAD, &ws);
  if (fuses < 0) DIE("planning %s's input gradient: %s", b->conv.name, O.last_error(&O));
  if (!fuses) return;
  if (ws > N.ws_bytes) N.ws_bytes = ws;
  b->conv.dgrad_fused = 1;
}

static void build(void)
{
  char name[32];
  for (int i = 0; i < N.L; i++) {
    int h = N.H >> i, w = N.W >> i, cin = i ? N.widths[i - 1] : 3;
    snprintf(name, sizeof name, "enc%d.conv1", i);
    blk_init(&N.enc1[i], h, w, cin, N.widths[i], name);
    snprintf(name, sizeof name, "enc%d.conv2", i);
    blk_init(&N.enc2[i], h, w, N.widths[i], N.widths[i], name);
  }
  for (int i = N.L - 2; i >= 0; i--) {
    int h = N.H >> i, w = N.W >> i;
    snprintf(name, sizeof name, "dec%d.up", i);
    conv_init(&N.up[i], OPS_CONVT2X2, h / 2, w / 2, N.widths[i + 1], N.widths[i], name);
    snprintf(name, sizeof name, "dec%d.conv1", i);
    blk_init(&N.dec1[i], h, w, 2 * N.widths[i], N.widths[i], name);
    snprintf(name, sizeof name, "dec%d.conv2", i);
    blk_init(&N.dec2[i], h, w, N.widths[i], N.widths[i], name);
  }
  conv_init(&N.head, OPS_CONV1X1, N.H, N.W, N.widths[0], N.K, "head");
  /* parameters: f32 master + momentum, working copies in the compute dtype */
  N.p32 = dev_rand(N.nparams, 0.05f, 0);
  N.g32 = dev(N.nparams * 4);
  N.mom = dev_rand(N.nparams, 0.01f, 0);
  if (O.dtype == OPS_F32) {
    N.wp = N.p32, N.wg = N.g32;
  } else {
    N.wp = dev(N.nparams * E), N.wg = dev(N.nparams * E);
    if (O.from_f32(&O, N.p32, N.nparams, N.wp)) DIE("cast: %s", O.last_error(&O));
  }
  size_t scratch = 0, P0 = (size_t)N.N * N.H * N.W;
  for (int i = 0; i < N.L; i++) {
    size_t P = P0 >> (2 * i);
    blk_alloc(&N.enc1[i]);
    blk_alloc(&N.enc2[i]);
    plan(&N.enc1[i].conv);
    plan(&N.enc2[i].conv);
    choose_fused(NULL, &N.enc1[i]);
    choose_fused(&N.enc1[i], &N.enc2[i]);
    choose_dgrad(&N.enc1[i]);
    choose_dgrad(&N.enc2[i]);
    if (i > 0) {
      N.pooled[i] = dev(P * N.widths[i - 1] * E);
      N.arg[i] = dev(P * N.widths[i - 1]);
    }
    if (i < N.L - 1) N.dskip[i] = dev(P * N.widths[i] * E);
    if (P * 2 * N.widths[i] > scratch) scratch = P * 2 * N.widths[i];
  }
  for (int i = N.L - 2; i >= 0; i--) {
    size_t P = P0 >> (2 * i);
    N.cat[i] = dev(P * 2 * N.widths[i] * E);
    blk_alloc(&N.dec1[i]);
    blk_alloc(&N.dec2[i]);
    plan(&N.up[i]);
    choose_gathered(&N.up[i]);
    plan(&N.dec1[i].conv);
    plan(&N.dec2[i].conv);
    choose_fused(NULL, &N.dec1[i]);
    choose_fused(&N.dec1[i], &N.dec2[i]);
    choose_dgrad(&N.dec1[i]);
    choose_dgrad(&N.dec2[i]);
  }
  plan(&N.head);
  if (P0 * N.K > scratch) scratch = P0 * N.K;
  N.g[0] = dev(scratch * E);
  N.g[1] = dev(scratch * E);
  N.g[2] = dev(scratch * E);
  N.logits = dev(P0 * N.K * E);
  N.ws = dev(N.ws_bytes);
  N.x32 = dev_rand(P0 * 3, 1, 0);
  N.x = O.dtype == OPS_F32 ? (void *)N.x32 : dev(P0 * 3 * E);
  int32_t *lab = malloc(P0 * sizeof *lab);
  for (size_t p = 0; p < P0; p++) lab[p] = (int32_t)((rnd() + 1) * 0.5f * N.K) % N.K;
  N.labels = dev(P0 * sizeof *lab);
  CU(cudaMemcpy(N.labels, lab, P0 * sizeof *lab, cudaMemcpyHostToDevice));
  free(lab);
  N.loss = dev(2 * sizeof(double));
}

/* ---- one training step, in src/model/unet.c's order ---- */

/* Levels below this one make their norm outputs, skips and concats again in backward; deeper
 * ones keep forward's (src/model/unet.c, recompute_policy). */
static int recompute_levels;
static int kept(int level) { return level >= recompute_levels; }

/* The trainer's one-rank bf16 step keeps the weight gradients in bf16 for the optimizer
 * (model_config_t.working_grads); fp16 (loss scaling) folds each layer's into f32. */
static int working_grads(void) { return O.dtype == OPS_BF16; }

static acct_cost_t conv_cost(const conv_t *cv, acct_pass_t pass, int n)
{
  return acct_conv(&cv->c, pass, n, E, E); /* weight gradients in the compute dtype first */
}

static void grads_done(size_t off, size_t count, const char *name)
{
  if (O.dtype != OPS_F32 && !working_grads())
    OP(ACCT_CAST_GRADS, name, acct_cast(count, E),
       O.to_f32(&O, wg_at(off), count, N.g32 + off, 0));
}

static void conv_fwd(conv_t *cv, int n, const void *x, void *y)
{
  const void *b = cv->c.kind == OPS_CONV3X3 ? NULL : wp_at(cv->b_off);
  OP(ACCT_CONV_FWD, cv->name, conv_cost(cv, ACCT_CONV_FWD, n),
     O.conv_fwd(&O, &cv->c, n, x, wp_at(cv->w_off), b, y, N.ws));
}

/* dy gathered where cv->gathered (the same bytes: the account's costs do not change); level:
 * the layer's (an up-convolution's: its input's), which says whether its weight gradient runs
 * beside */
static void conv_bwd(conv_t *cv, int level, int n, const void *x, const void *dy, void *dx)
{
  int bias = cv->c.kind != OPS_CONV3X3;
  ops_t *w = wgrad_ops(level);
  OP(ACCT_CONV_BWD_FILTER, cv->name, conv_cost(cv, ACCT_CONV_BWD_FILTER, n),
     (cv->gathered ? w->conv_bwd_filter_gathered : w->conv_bwd_filter)(
         w, &cv->c, n, x, dy, wg_at(cv->w_off), bias ? wg_at(cv->b_off) : NULL, 0,
         wgrad_ws(w)));
  side_done(w);
  /* weight and bias adjacent: one cast, as the model folds a layer's gradients */
  grads_done(cv->w_off, cv->nw + (bias ? (size_t)cv->c.cout : 0), cv->name);
  if (dx && cv->dgrad_fused)
    OP_FUSED(ACCT_CONV_BWD_DATA, cv->name, conv_cost(cv, ACCT_CONV_BWD_DATA, n),
             O.conv_bwd_data_fused(&O, &cv->c, n, dy, wp_at(cv->w_off), NULL, NULL, NULL, dx,
                                   NULL, N.ws));
  else if (dx)
    OP(ACCT_CONV_BWD_DATA, cv->name, conv_cost(cv, ACCT_CONV_BWD_DATA, n),
       (cv->gathered ? O.conv_bwd_data_gathered : O.conv_bwd_data)(
           &O, &cv->c, n, dy, wp_at(cv->w_off), dx, N.ws));
}

/* The norm+ReLU of b's conv output b->a; ready: its statistics came with the conv (the fused
 * engine), only their finalisation is left. down >= 1: the block's output is also max-pooled
 * into level down's input, in the same pass, and written into the first half of its level's
 * concat (the encoder's second blocks, as the model runs them: the skip where the decoder reads
 * it). */
static void block_norm_fwd(blk_t *b, int n, int down, int ready)
{
  size_t P = (size_t)n * b->conv.c.h * b->conv.c.w;
  if (ready)
    OP_FUSED(ACCT_BN_STATS, b->conv.name, acct_bn_finalize(b->C),
             O.bn_finalize(&O, b->stats, b->C, 1e-5, 0.1, b->running, b->running + b->C,
                           b->saved));
  else /* statistics and finalisation in one (the model without SyncBN) */
    OP(ACCT_BN_STATS, b->conv.name, acct_bn(ACCT_BN_STATS, P, b->C, E),
       O.bn_stats_finalize(&O, b->a, P, b->C, 1e-5, 0.1, b->running, b->running + b->C,
                           b->stats, b->saved));
  const void *g = wp_at(b->g_off), *beta = wp_at(b->g_off + b->C);
  if (N.head_fwd_fused && b == last_block()) return; /* the head applies it as it reads */
  if (b->feeds_fused) { /* the next conv applies this norm as it loads: coefficients only */
    OP_FUSED(ACCT_BN_STATS, b->conv.name, acct_bn_coef(b->C, E),
             O.bn_coef(&O, b->saved, g, beta, b->C, b->coef));
    return;
  }
  if (down) { /* the apply's bytes and the pooled tensor's and winners' */
    acct_cost_t c = acct_bn(ACCT_BN_APPLY, P, b->C, E);
    c.bytes += P / 4.0 * b->C * (E + 1);
    OP(ACCT_BN_APPLY, b->conv.name, c,
       O.bn_apply_pool(&O, b->a, n, b->conv.c.h, b->conv.c.w, b->C, b->saved, g, beta, 1,
                       N.cat[down - 1], 2 * (size_t)b->C, N.pooled[down], N.arg[down]));
    return;
  }
  OP(ACCT_BN_APPLY, b->conv.name, acct_bn(ACCT_BN_APPLY, P, b->C, E),
     O.bn_apply(&O, b->a, P, b->C, b->saved, g, beta, 1, b->r));
}

/* A block pair's forward, as src/model/unet.c's block_fwd and block_fwd_fused: each block's
 * conv then norm+ReLU, or with b2 fused, b1's statistics and coefficients only and b2's conv
 * from b1's conv output through them, with b2's statistics in the same pass. down: as
 * block_norm_fwd's, for b2. */
static void pair_fwd(blk_t *b1, blk_t *b2, int n, const void *in, int down)
{
  if (b1->stats_fused) /* no prologue; counted as the fused pass (its coefficients' 2 cin f32
                        * bytes included, which it does not read) */
    OP_FUSED(ACCT_CONV_FWD, b1->conv.name, acct_conv_fused(&b1->conv.c, ACCT_CONV_FWD, n, E, E),
             O.conv_fwd_fused(&O, &b1->conv.c, n, in, NULL, wp_at(b1->conv.w_off), b1->a,
                              b1->stats, N.ws));
  else
    conv_fwd(&b1->conv, n, in, b1->a);
  block_norm_fwd(b1, n, 0, b1->stats_fused);
  if (!b2->fused) {
    conv_fwd(&b2->conv, n, b1->r, b2->a);
    block_norm_fwd(b2, n, down, 0);
    return;
  }
  conv_t *cv = &b2->conv;
  OP_FUSED(ACCT_CONV_FWD, cv->name, acct_conv_fused(&cv->c, ACCT_CONV_FWD, n, E, E),
           O.conv_fwd_fused(&O, &cv->c, n, b1->a, b1->coef, wp_at(cv->w_off), b2->a, b2->stats,
                            N.ws));
  block_norm_fwd(b2, n, down, 1);
}

/* The model keeps only a block's conv output and makes its norm+ReLU output again where
 * backward needs it, at the levels it recomputes: one more elementwise pass. */
static void recompute(blk_t *b, int n, int level)
{
  if (kept(level)) return; /* forward's output is still there */
  size_t P = (size_t)n * b->conv.c.h * b->conv.c.w;
  OP(ACCT_BN_RECOMPUTE, b->conv.name, acct_bn(ACCT_BN_RECOMPUTE, P, b->C, E),
     O.bn_apply(&O, b->a, P, b->C, b->saved, wp_at(b->g_off), wp_at(b->g_off + b->C), 1, b->r));
}

/* The norm's backward in place on d. */
static void norm_bwd(blk_t *b, int n, void *d)
{
  size_t P = (size_t)n * b->conv.c.h * b->conv.c.w;
  /* the ReLU's mask recomputed from the BN input, as the model runs it (no read of r) */
  ops_relu_t mask = {.gamma = wp_at(b->g_off), .beta = wp_at(b->g_off + b->C)};
  OP(ACCT_BN_BWD_REDUCE, b->conv.name, acct_bn(ACCT_BN_BWD_REDUCE, P, b->C, E),
     O.bn_bwd_reduce(&O, d, &mask, b->a, P, b->C, b->saved, b->stats, wg_at(b->g_off),
                     wg_at(b->g_off + b->C), 0));
  OP(ACCT_BN_BWD_APPLY, b->conv.name, acct_bn(ACCT_BN_BWD_APPLY, P, b->C, E),
     O.bn_bwd_apply(&O, d, &mask, b->a, P, b->C, b->saved, b->stats, wp_at(b->g_off), d));
  grads_done(b->g_off, 2 * (size_t)b->C, b->conv.name);
}

/* The norm's backward where only the 1x1 head reads its output, as the model runs it by default
 * (SHMDDP_HEAD_FUSED, where the table has bn_bwd_*_1x1): dy formed from the head's output
 * gradient g and weights where the passes read it, dx into d; the head's input gradient is
 * never stored (the account's bytes: acct_bn_head). */
static void norm_bwd_head(blk_t *b, int n, const conv_t *head, const void *g, void *d)
{
  size_t P = (size_t)n * b->conv.c.h * b->conv.c.w;
  const int K = head->c.cout;
  ops_relu_t mask = {.gamma = wp_at(b->g_off), .beta = wp_at(b->g_off + b->C)};
  if (!N.head_train) /* else the head's training pass made the sums */
    OP(ACCT_BN_BWD_REDUCE, b->conv.name, acct_bn_head(ACCT_BN_BWD_REDUCE, P, b->C, K, E),
       O.bn_bwd_reduce_1x1(&O, g, wp_at(head->w_off), K, &mask, b->a, P, b->C, b->saved,
                           b->stats, wg_at(b->g_off), wg_at(b->g_off + b->C), 0));
  OP(ACCT_BN_BWD_APPLY, b->conv.name, acct_bn_head(ACCT_BN_BWD_APPLY, P, b->C, K, E),
     O.bn_bwd_apply_1x1(&O, g, wp_at(head->w_off), K, &mask, b->a, P, b->C, b->saved, b->stats,
                        wp_at(b->g_off), d));
  grads_done(b->g_off, 2 * (size_t)b->C, b->conv.name);
}

/* b2's conv backward run fused (src/model/unet.c's fused_bwd): the weight gradient with b1's
 * norm recomputed as the prologue, the input gradient dy -> d masked by b1's ReLU with b1's
 * BatchNorm sums in the same pass, then the rest of b1's BatchNorm backward (no ReLU left). */
static void fused_bwd(blk_t *b1, blk_t *b2, int level, int n, const void *dy, void *d)
{
  conv_t *cv = &b2->conv;
  size_t P = (size_t)n * cv->c.h * cv->c.w;
  ops_t *w = wgrad_ops(level);
  OP_FUSED(ACCT_CONV_BWD_FILTER, cv->name, acct_conv_fused(&cv->c, ACCT_CONV_BWD_FILTER, n, E, E),
           w->conv_bwd_filter_fused(w, &cv->c, n, b1->a, b1->coef, dy, wg_at(cv->w_off), 0,
                                    wgrad_ws(w)));
  side_done(w);
  grads_done(cv->w_off, cv->nw, cv->name);
  OP_FUSED(ACCT_CONV_BWD_DATA, cv->name, acct_conv_fused(&cv->c, ACCT_CONV_BWD_DATA, n, E, E),
           O.conv_bwd_data_fused(&O, &cv->c, n, dy, wp_at(cv->w_off), b1->a, b1->coef,
                                 b1->saved, d, b1->stats, N.ws));
  OP_FUSED(ACCT_BN_BWD_REDUCE, b1->conv.name, acct_bn_params(b1->C, E),
           O.bn_bwd_params(&O, b1->stats, b1->C, wg_at(b1->g_off), wg_at(b1->g_off + b1->C), 0));
  OP_FUSED(ACCT_BN_BWD_APPLY, b1->conv.name, acct_bn(ACCT_BN_BWD_APPLY, P, b1->C, E),
           O.bn_bwd_apply(&O, d, NULL, b1->a, P, b1->C, b1->saved, b1->stats, wp_at(b1->g_off),
                          d));
  grads_done(b1->g_off, 2 * (size_t)b1->C, b1->conv.name);
}

/* A block pair's backward down to the gradient w.r.t. b1's conv output, as the model runs it:
 * b2's norm on d in place, then b2's conv (fused, or from b1's norm output made again where the
 * level recomputes it) into mid, and b1's norm on mid. b1's conv is the caller's. */
static void pair_bwd(blk_t *b1, blk_t *b2, int n, int level, void *d, void *mid, int normed)
{
  if (!normed) norm_bwd(b2, n, d); /* normed: norm_bwd_head did it */
  if (b2->fused) {
    fused_bwd(b1, b2, level, n, d, mid);
    return;
  }
  recompute(b1, n, level);
  conv_bwd(&b2->conv, level, n, b1->r, d, mid);
  norm_bwd(b1, n, mid);
}

static void forward(int n)
{
  char name[32];
  size_t P0 = (size_t)n * N.H * N.W;
  if (O.dtype != OPS_F32)
    OP(ACCT_CAST_INPUT, "input", acct_cast(P0 * 3, E), O.from_f32(&O, N.x32, P0 * 3, N.x));
  const void *in = N.x;
  for (int i = 0; i < N.L; i++) {
    if (i > 0) in = N.pooled[i]; /* pooled by the level above's last apply */
    pair_fwd(&N.enc1[i], &N.enc2[i], n, in, i < N.L - 1 ? i + 1 : 0);
    in = N.enc2[i].r;
  }
  /* the encoder outputs (the skips) live until their concat: nothing recomputed in forward */
  for (int i = N.L - 2; i >= 0; i--) {
    size_t P = P0 >> (2 * i);
    conv_fwd(&N.up[i], n, in, N.g[0]);
    snprintf(name, sizeof name, "dec%d.concat", i);
    OP(ACCT_CONCAT, name, acct_concat_fwd(P, N.widths[i], N.widths[i], 0, E),
       O.concat_fwd(&O, NULL, N.widths[i], N.g[0], N.widths[i], P, N.cat[i]));
    pair_fwd(&N.dec1[i], &N.dec2[i], n, N.cat[i], 0);
    in = N.dec2[i].r;
  }
  if (N.head_train) { /* accounted as the loss (its bytes there are the loss's alone) */
    blk_t *b = last_block();
    OP(ACCT_LOSS, "loss", acct_loss(P0, N.K, E),
       O.head_train_1x1(&O, &N.head.c, n, b->a, b->saved, wp_at(b->g_off), wp_at(b->g_off + b->C),
                        wp_at(N.head.w_off), wp_at(N.head.b_off), N.labels, -1, 1, 0, N.logits,
                        N.g[0], N.loss, wg_at(N.head.w_off), wg_at(N.head.b_off), b->stats,
                        wg_at(b->g_off), wg_at(b->g_off + b->C), 0, N.ws));
    return;
  }
  if (N.head_fwd_fused) {
    blk_t *b = last_block();
    OP(ACCT_CONV_FWD, N.head.name, conv_cost(&N.head, ACCT_CONV_FWD, n),
       O.conv1x1_fwd_bn(&O, &N.head.c, n, b->a, b->saved, wp_at(b->g_off),
                        wp_at(b->g_off + b->C), wp_at(N.head.w_off), wp_at(N.head.b_off),
                        N.logits, N.ws));
  } else {
    conv_fwd(&N.head, n, in, N.logits);
  }
  OP(ACCT_LOSS, "loss", acct_loss(P0, N.K, E),
     ops_cuda_softmax_ce_async(&O, N.logits, N.labels, P0, N.K, -1, 1, 0, N.g[0], NULL,
                               N.loss));
}

/* The decoder's backward; returns which of N.g holds the gradient flowing into the encoder. */
static int decoder_bwd(int n)
{
  char name[32];
  size_t P0 = (size_t)n * N.H * N.W;
  int cur = 1;
  blk_t *last = last_block();
  if (N.head_train) { /* the weight gradient came with the loss */
    grads_done(N.head.w_off, N.head.nw + (size_t)N.head.c.cout, N.head.name);
  } else if (N.head_fwd_fused) { /* the weight gradient from the last block's conv output */
    conv_t *cv = &N.head;
    ops_t *w = wgrad_ops(0);
    OP(ACCT_CONV_BWD_FILTER, cv->name, conv_cost(cv, ACCT_CONV_BWD_FILTER, n),
       w->conv1x1_bwd_filter_bn(w, &cv->c, n, last->a, last->saved, wp_at(last->g_off),
                                wp_at(last->g_off + last->C), N.g[0], wg_at(cv->w_off),
                                wg_at(cv->b_off), 0, wgrad_ws(w)));
    side_done(w);
    grads_done(cv->w_off, cv->nw + (size_t)cv->c.cout, cv->name);
    if (!N.head_fused)
      OP(ACCT_CONV_BWD_DATA, cv->name, conv_cost(cv, ACCT_CONV_BWD_DATA, n),
         O.conv_bwd_data(&O, &cv->c, n, N.g[0], wp_at(cv->w_off), N.g[1], N.ws));
  } else {
    conv_bwd(&N.head, 0, n, last->r, N.g[0], N.head_fused ? NULL : N.g[1]);
  }
  if (N.head_fused) norm_bwd_head(last, n, &N.head, N.g[0], N.g[1]);
  int normed = N.head_fused; /* the first pair's b2 norm is done */
  for (int i = 0; i <= N.L - 2; i++) {
    size_t P = P0 >> (2 * i);
    pair_bwd(&N.dec1[i], &N.dec2[i], n, i, N.g[cur], N.g[!cur], normed);
    normed = 0;
    cur = !cur;
    snprintf(name, sizeof name, "dec%d.concat", i);
    if (!kept(i)) {
      /* the concat again: the skip recomputed straight into its first half, then the up-conv's
       * output copied into the second (the model keeps the up-conv output; here a buffer of its
       * size stands in, for the time of the pass) */
      blk_t *b = &N.enc2[i];
      OP(ACCT_BN_RECOMPUTE, b->conv.name, acct_bn(ACCT_BN_RECOMPUTE, P, b->C, E),
         O.bn_apply_ld(&O, b->a, P, b->C, b->saved, wp_at(b->g_off), wp_at(b->g_off + b->C), 1,
                       N.cat[i], 2 * (size_t)b->C));
      OP(ACCT_CONCAT, name, acct_concat_fwd(P, N.widths[i], N.widths[i], 0, E),
         O.concat_fwd(&O, NULL, N.widths[i], N.dskip[i], N.widths[i], P, N.cat[i]));
    }
    conv_bwd(&N.dec1[i].conv, i, n, N.cat[i], N.g[cur], N.g[!cur]);
    cur = !cur;
    /* the up-convolution's part gathered where its backward reads that order; into N.g[2],
     * since N.g[!cur] is the dy a weight gradient beside may still read (the model's plan
     * gives it a tensor of its own) */
    if (N.up[i].gathered)
      OP(ACCT_CONCAT, name, acct_concat_bwd(P, N.widths[i], N.widths[i], 0, E),
         O.concat_bwd_gathered(&O, N.g[cur], N.widths[i], N.widths[i], n, N.H >> i, N.W >> i,
                               N.dskip[i], 0, N.g[2]));
    else
      OP(ACCT_CONCAT, name, acct_concat_bwd(P, N.widths[i], N.widths[i], 0, E),
         O.concat_bwd(&O, N.g[cur], N.widths[i], N.widths[i], P, N.dskip[i], 0, N.g[2]));
    blk_t *below = i == N.L - 2 ? &N.enc2[N.L - 1] : &N.dec2[i + 1];
    recompute(below, n, i + 1);
    conv_bwd(&N.up[i], i + 1, n, below->r, N.g[2], N.g[!cur]);
    cur = !cur;
  }
  return cur;
}

static void encoder_bwd(int n, int cur, int normed)
{
  char name[32];
  for (int i = N.L - 1; i >= 0; i--) {
    void *d = N.g[cur];
    if (i < N.L - 1) {
      int C = N.widths[i], h = N.H >> i, w = N.W >> i;
      snprintf(name, sizeof name, "enc%d.pool", i);
      OP(ACCT_MAXPOOL, name, acct_maxpool_bwd(n, h, w, C, E, 1),
         O.maxpool_bwd(&O, N.g[cur], N.arg[i + 1], n, h, w, C, N.dskip[i], 1));
      d = N.dskip[i];
    }
    void *fb = d == N.g[0] ? N.g[1] : N.g[0];
    pair_bwd(&N.enc1[i], &N.enc2[i], n, i, d, fb, normed && i == N.L - 1);
    void *dx = i == 0 ? NULL : (fb == N.g[0] ? N.g[1] : N.g[0]);
    conv_bwd(&N.enc1[i].conv, i, n, i == 0 ? N.x : N.pooled[i], fb, dx);
    if (dx) cur = dx == N.g[0] ? 0 : 1;
  }
}

static void step(int n)
{
  forward(n);
  encoder_bwd(n, decoder_bwd(n), N.L == 1 && N.head_fused);
  side_join(); /* backward's end: nothing left beside */
  char err[256];
  size_t gE = working_grads() ? E : 4;
  if (skipped(ACCT_OPTIMIZER, "SGD momentum")) return;
  op_begin(ACCT_OPTIMIZER, "SGD momentum", ACCT_LIBRARY,
           acct_sgd(N.nparams, gE, O.dtype == OPS_F32 ? 0 : E));
  if (ops_cuda_sgd(N.p32, working_grads() ? N.wg : N.g32, working_grads() ? O.dtype : OPS_F32,
                   N.mom, N.nparams, 1e-6, 1e-4, 0.9, 0, 1, O.dtype == OPS_F32 ? NULL : N.wp,
                   O.dtype, S, err, sizeof err) != 0)
    DIE("SGD: %s", err);
}

/* ---- reporting ---- */

static int cmp_ms(const void *a, const void *b)
{
  double x = ((const rec_t *)a)->ms, y = ((const rec_t *)b)->ms;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void report(double step_ms, int top)
{
  double cms[ACCT_NPASS] = {0}, cfl[ACCT_NPASS] = {0}, cby[ACCT_NPASS] = {0};
  int ccount[ACCT_NPASS] = {0};
  double total = 0;
  for (int i = 0; i < nrec; i++) {
    int c = recs[i].pass;
    cms[c] += recs[i].ms, cfl[c] += recs[i].flops, cby[c] += recs[i].bytes, ccount[c]++;
    total += recs[i].ms;
  }
  printf("\nper category (one step, mean of %d profiled steps, each op timed alone on an idle "
         "GPU):\n%-16s %6s %9s %6s %9s %9s\n", nprofiled, "category", "ops", "ms", "%", "TFLOP/s",
         "GB/s");
  for (int c = 0; c < ACCT_NPASS; c++)
    if (ccount[c])
      printf("%-16s %6d %9.3f %5.1f%% %9.1f %9.0f\n", acct_pass_name((acct_pass_t)c), ccount[c],
             cms[c], 100 * cms[c] / total, cfl[c] ? cfl[c] / cms[c] / 1e9 : 0,
             cby[c] ? cby[c] / cms[c] / 1e6 : 0);
  printf("%-16s %6d %9.3f (sum of the ops alone; the step on the stream: %.3f ms)\n", "total",
         nrec, total, step_ms);
  qsort(recs, (size_t)nrec, sizeof *recs, cmp_ms);
  printf("\ntop %d ops:\n%-16s %-14s %9s %9s %9s\n", top, "category", "layer", "ms", "TFLOP/s",
         "GB/s");
  for (int i = 0; i < top && i < nrec; i++)
    printf("%-16s %-14s %9.3f %9.1f %9.0f\n", acct_pass_name(recs[i].pass), recs[i].name,
           recs[i].ms, recs[i].flops ? recs[i].flops / recs[i].ms / 1e9 : 0,
           recs[i].bytes ? recs[i].bytes / recs[i].ms / 1e6 : 0);
}

static double median(double *v, int n)
{
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1], v[j - 1] = t;
    }
  return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0;
}

/* Median step time over iters steps, each timed with events (launch overhead included). */
static double time_steps(int iters, cudaGraphExec_t g)
{
  cudaEvent_t a, b;
  CU(cudaEventCreate(&a));
  CU(cudaEventCreate(&b));
  double *t = malloc(iters * sizeof *t);
  for (int i = 0; i < iters; i++) {
    CU(cudaEventRecord(a, S));
    if (g) CU(cudaGraphLaunch(g, S));
    else step(N.N);
    CU(cudaEventRecord(b, S));
    CU(cudaEventSynchronize(b));
    float ms;
    CU(cudaEventElapsedTime(&ms, a, b));
    t[i] = ms;
  }
  double m = median(t, iters);
  free(t);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return m;
}

static double now_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The model as the trainer drives it: one model_train_step (which waits for its loss) and one
 * optim_step per step, host-timed. */
static int model_bench(ops_dtype_t dt, int iters, int warm)
{
  char err[512];
  model_config_t cfg;
  model_config_default(&cfg);
  cfg.levels = N.L;
  for (int i = 0; i < N.L; i++) cfg.widths[i] = N.widths[i];
  cfg.max_batch = N.N;
  cfg.height = N.H, cfg.width = N.W, cfg.classes = N.K;
  cfg.precision = dt == OPS_BF16 ? MODEL_BF16 : dt == OPS_F16 ? MODEL_FP16 : MODEL_FP32;
  cfg.device = MODEL_DEVICE_CUDA;
  model_t *m;
  double t0 = now_ms();
  if (model_create(&m, &cfg, err, sizeof err) != 0) DIE("model_create: %s", err);
  printf("model: %zu parameters, created (with the convolution search) in %.1f s\n",
         model_num_params(m), (now_ms() - t0) / 1e3);
  optim_config_t oc;
  optim_config_default(&oc, OPTIM_SGD);
  optim_t *opt;
  if (optim_create(&opt, &oc, model_flat_size(m), model_arena(m), err, sizeof err) != 0)
    DIE("optim_create: %s", err);
  size_t P = (size_t)N.N * N.H * N.W;
  float *x = dev_rand(P * 3, 1, 0);
  int32_t *lab = malloc(P * sizeof *lab), *y = dev(P * sizeof *lab);
  for (size_t p = 0; p < P; p++) lab[p] = (int32_t)((rnd() + 1) * 0.5f * N.K) % N.K;
  CU(cudaMemcpy(y, lab, P * sizeof *lab, cudaMemcpyHostToDevice));
  free(lab);
  float scale = dt == OPS_F16 ? 1024 : 1, loss = 0;
  double *t = malloc(iters * sizeof *t);
  for (int i = 0; i < warm + iters; i++) {
    if (i == warm) arena_reset_peaks(model_arena(m));
    double a = now_ms();
    if (model_train_step(m, x, y, N.N, scale, 0, NULL, &loss, err, sizeof err) != 0 ||
        optim_step(opt, model_params(m), model_grads(m), 1e-3, 1.0 / scale, NULL, err,
                   sizeof err) != 0)
      DIE("step %d: %s", i, err);
    CU(cudaDeviceSynchronize());
    if (i >= warm) t[i - warm] = now_ms() - a;
  }
  double ms = median(t, iters);
  printf("model step (model_train_step + optim_step, host-timed): %.3f ms median of %d = "
         "%.1f img/s, loss %.4f\n", ms, iters, N.N * 1000.0 / ms, loss);
  arena_print(model_arena(m), stdout);
  free(t);
  optim_destroy(opt);
  model_destroy(m);
  return isfinite(loss) ? 0 : 1;
}

/* ---- the step captured as a CUDA graph, and ablations inside it ---- */

/* The step captured (without what skip_pass/skip_layer leave out) and instantiated; NULL
 * when capture fails (only reported for the full step). */
static cudaGraphExec_t capture(cudaError_t *why)
{
  cudaGraph_t g;
  cudaGraphExec_t e = NULL;
  cudaError_t ge = cudaStreamBeginCapture(S, cudaStreamCaptureModeRelaxed);
  if (ge == cudaSuccess) {
    step(N.N);
    ge = cudaStreamEndCapture(S, &g);
    if (ge == cudaSuccess) {
      ge = cudaGraphInstantiate(&e, g, 0);
      cudaGraphDestroy(g);
    }
  }
  if (why) *why = ge;
  if (ge != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  for (int i = 0; i < 2; i++) CU(cudaGraphLaunch(e, S));
  return e;
}

/* What the ablated graph b saves against the full step a: `pairs` samples, each `reps` replays
 * of one then `reps` of the other (the order alternating), the median of the differences per
 * replay. *full_ms: the median of a's samples. */
static double ablation_ms(cudaGraphExec_t a, cudaGraphExec_t b, int pairs, int reps,
                          double *full_ms)
{
  cudaEvent_t ev[3];
  for (int i = 0; i < 3; i++) CU(cudaEventCreate(&ev[i]));
  double *d = malloc(2 * pairs * sizeof *d), *f = d + pairs;
  for (int s = 0; s < pairs; s++) {
    cudaGraphExec_t first = s % 2 ? b : a, second = s % 2 ? a : b;
    CU(cudaEventRecord(ev[0], S));
    for (int r = 0; r < reps; r++) CU(cudaGraphLaunch(first, S));
    CU(cudaEventRecord(ev[1], S));
    for (int r = 0; r < reps; r++) CU(cudaGraphLaunch(second, S));
    CU(cudaEventRecord(ev[2], S));
    CU(cudaEventSynchronize(ev[2]));
    float t1, t2;
    CU(cudaEventElapsedTime(&t1, ev[0], ev[1]));
    CU(cudaEventElapsedTime(&t2, ev[1], ev[2]));
    double ta = (s % 2 ? t2 : t1) / reps, tb = (s % 2 ? t1 : t2) / reps;
    d[s] = ta - tb;
    f[s] = ta;
  }
  double m = median(d, pairs);
  if (full_ms) *full_ms = median(f, pairs);
  free(d);
  for (int i = 0; i < 3; i++) cudaEventDestroy(ev[i]);
  return m;
}

/* The step without pass p (of one layer, or of every layer when layer is NULL): its cost. */
static double ablate(cudaGraphExec_t full, int p, const char *layer, int pairs, double *full_ms)
{
  skip_pass = p;
  skip_layer = layer;
  cudaGraphExec_t e = capture(NULL);
  skip_pass = -1;
  skip_layer = NULL;
  if (!e) DIE("capturing the step without %s of %s failed", acct_pass_name((acct_pass_t)p),
              layer ? layer : "every layer");
  double ms = ablation_ms(full, e, pairs, 4, full_ms);
  CU(cudaGraphExecDestroy(e));
  return ms;
}

/* Per category: what each costs inside the graph-replayed step. pass_ms[p] gets it (negative
 * for passes the step does not have); returns the full step's median over all the pairs. */
static double ablate_passes(cudaGraphExec_t exec, int iters, double pass_ms[ACCT_NPASS])
{
  int present[ACCT_NPASS] = {0};
  for (int i = 0; i < nrec; i++) present[recs[i].pass] = 1;
  double full[ACCT_NPASS], sum = 0, step_ms;
  int nf = 0;
  int pairs = iters / 4 > 5 ? iters / 4 : 5;
  printf("\nin the CUDA graph (step %.3f ms): the step without each category, %d pairs of 4 "
         "replays each\n%-16s %9s %9s %6s\n", time_steps(iters, exec), pairs, "category",
         "without", "costs ms", "%");
  for (int p = 0; p < ACCT_NPASS; p++) {
    pass_ms[p] = -1;
    if (!present[p]) continue;
    double f;
    pass_ms[p] = ablate(exec, p, NULL, pairs, &f);
    full[nf++] = f;
    printf("%-16s %9.3f %9.3f %5.1f%%\n", acct_pass_name((acct_pass_t)p), f - pass_ms[p],
           pass_ms[p], 100 * pass_ms[p] / f);
    sum += pass_ms[p];
  }
  step_ms = median(full, nf);
  printf("%-16s %9s %9.3f %5.1f%% (the rest: launch gaps and what no category removes alone; "
         "full step %.3f ms, median over the pairs)\n", "sum", "", sum, 100 * sum / step_ms,
         step_ms);
  return step_ms;
}

/* ---- ceilings: a large matrix product on cuBLAS, a device-to-device copy ---- */

static double gemm_ceiling(ops_dtype_t dt)
{
  const int n = 8192;
  const size_t count = (size_t)n * n;
  cudaDataType_t ty = dt == OPS_BF16 ? CUDA_R_16BF : dt == OPS_F16 ? CUDA_R_16F : CUDA_R_32F;
  cublasComputeType_t ct = dt == OPS_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  /* random operands (never zeros), cast to the dtype by the ops table */
  float *h = malloc(count * sizeof *h), *d32 = dev(count * sizeof *h);
  for (size_t i = 0; i < (1u << 20); i++) h[i] = rnd();
  for (size_t i = 1u << 20; i < count; i++) h[i] = h[(i * 2654435761u) & ((1u << 20) - 1)];
  CU(cudaMemcpy(d32, h, count * sizeof *h, cudaMemcpyHostToDevice));
  free(h);
  void *m[3];
  for (int k = 0; k < 3; k++) {
    m[k] = dev(count * E);
    if (O.from_f32(&O, d32, count, m[k])) DIE("cast: %s", O.last_error(&O));
  }
  CU(cudaFree(d32));
  cublasHandle_t hb;
  if (cublasCreate(&hb) != CUBLAS_STATUS_SUCCESS) DIE("cublasCreate failed");
  cublasSetStream(hb, S);
  const float one = 1, zero = 0;
  cudaEvent_t a, b;
  CU(cudaEventCreate(&a));
  CU(cudaEventCreate(&b));
  double t[5];
  for (int rep = -2; rep < 5; rep++) {
    CU(cudaEventRecord(a, S));
    if (cublasGemmEx(hb, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, m[0], ty, n, m[1], ty, n, &zero,
                     m[2], ty, n, ct, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      DIE("cublasGemmEx failed");
    CU(cudaEventRecord(b, S));
    CU(cudaEventSynchronize(b));
    float ms;
    CU(cudaEventElapsedTime(&ms, a, b));
    if (rep >= 0) t[rep] = ms;
  }
  cublasDestroy(hb);
  for (int k = 0; k < 3; k++) CU(cudaFree(m[k]));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return 2.0 * n * n * n / (median(t, 5) * 1e-3);
}

/* ---- the account: every (layer, pass) ablated, the ceilings, the files ---- */

/* The account written to path as the trainer writes its files (src/obs/outfile.h): a fresh
 * private file renamed into place, never through a link someone planted under the name; on a
 * failed write nothing is left behind. */
static void write_out(const char *path, int (*emit)(FILE *, const acct_t *, const acct_report_t *),
                      const acct_t *a, const acct_report_t *r)
{
  char tmp[4096];
  FILE *f = outfile_fopen_temp(path, tmp, sizeof tmp);
  if (!f) DIE("cannot create a file beside %s: %s", path, strerror(errno));
  if (emit(f, a, r) != 0) {
    fclose(f);
    unlink(tmp);
    DIE("writing %s failed", path);
  }
  if (outfile_commit(f, tmp, path, 1) != 0) DIE("writing %s failed: %s", path, strerror(errno));
}

/* The rows are ablated until cap_s seconds have gone (the rest print unmeasured). */
static void write_account(const char *md, const char *json, double pass_ms[ACCT_NPASS],
                          double step_ms, cudaGraphExec_t exec, int pairs, double cap_s,
                          const char *device, const char *config)
{
  acct_report_t r = {.device = device, .config = config, .engine = engine.setting,
                     .images = N.N};
  r.ceiling.flops = gemm_ceiling(O.dtype);
  char err[256];
  r.ceiling.bw = harness_copy_rate(S, err, sizeof err);
  if (r.ceiling.bw < 0) DIE("%s", err);
  printf("\nceilings: matrix product %.1f TFLOP/s, device-to-device copy %.0f GB/s (read + "
         "written)\n", r.ceiling.flops / 1e12, r.ceiling.bw / 1e9);
  double full[MAXREC], t0 = now_ms();
  int done = 0;
  for (; done < account.n && now_ms() - t0 < 1e3 * cap_s; done++) {
    acct_row_t *row = &account.rows[done];
    row->ms = ablate(exec, row->pass, row->layer, pairs, &full[done]);
  }
  r.step_ms = done ? median(full, done) : step_ms;
  printf("account: %d of %d (layer, pass) rows ablated in %.0f s (cap %.0f s), %d pairs each; "
         "full step %.3f ms (at the categories: %.3f)\n", done, account.n,
         (now_ms() - t0) / 1e3, cap_s, pairs, r.step_ms, step_ms);
  for (int p = 0; p < ACCT_NPASS; p++) r.pass_ms[p] = pass_ms[p];
  write_out(md, acct_write_markdown, &account, &r);
  printf("account: %s (MFU %.1f %%)\n", md, 100 * acct_mfu(&account, &r));
  if (json) {
    write_out(json, acct_write_json, &account, &r);
    printf("account: %s\n", json);
  }
}

/* Appends "<sep>n of pairs <label> (name, name)" for the n names to buf at at; the new end. */
static size_t append_fused(char *buf, size_t len, size_t at, const char *sep, const char *label,
                           const char *const *names, int n, int pairs)
{
  if (at < len)
    at += (size_t)snprintf(buf + at, len - at, "%s%d of %d %s", sep, n, pairs, label);
  for (int j = 0; j < n && at < len; j++)
    at += (size_t)snprintf(buf + at, len - at, "%s%s%s", j == 0 ? " (" : ", ", names[j],
                           j == n - 1 ? ")" : "");
  return at;
}

/* How many of the block pairs run a conv fused, and which: "2 of 9 second convolutions fused
 * (enc0.conv2, dec0.conv2), 0 of 9 first ones with their statistics, 1 of 17 plain input
 * gradients on the fused kernels (dec0.conv1)". */
static void fused_summary(char *buf, size_t len)
{
  const blk_t *second[2 * MAXL], *first[2 * MAXL];
  const char *nf[2 * MAXL], *ns[2 * MAXL], *nd[4 * MAXL];
  int pairs = 0, f = 0, st = 0, dg = 0;
  for (int i = 0; i < N.L; i++) first[pairs] = &N.enc1[i], second[pairs++] = &N.enc2[i];
  for (int i = N.L - 2; i >= 0; i--) first[pairs] = &N.dec1[i], second[pairs++] = &N.dec2[i];
  for (int k = 0; k < pairs; k++) {
    if (second[k]->fused) nf[f++] = second[k]->conv.name;
    if (first[k]->stats_fused) ns[st++] = first[k]->conv.name;
  }
  /* plain input gradients: the first blocks' but the input layer's (it has none), and the
   * unfused second ones' */
  for (int k = 0; k < pairs; k++) {
    if (first[k]->conv.dgrad_fused && first[k] != &N.enc1[0]) nd[dg++] = first[k]->conv.name;
    if (second[k]->conv.dgrad_fused) nd[dg++] = second[k]->conv.name;
  }
  size_t at = append_fused(buf, len, 0, "", "second convolutions fused", nf, f, pairs);
  at = append_fused(buf, len, at, ", ", "first ones with their statistics", ns, st, pairs);
  append_fused(buf, len, at, ", ", "plain input gradients on the fused kernels", nd, dg,
               2 * pairs - 1);
}

/* -r: auto (the model's SHMDDP_RECOMPUTE=auto), all, none or a number of levels. */
static int parse_recompute(const char *v, ops_dtype_t dt)
{
  if (!strcmp(v, "auto")) return dt == OPS_F32 ? 0 : (N.L < 2 ? N.L : 2);
  if (!strcmp(v, "all")) return N.L;
  if (!strcmp(v, "none")) return 0;
  char *end;
  long n = strtol(v, &end, 10);
  if (end == v || *end || n < 0 || n > N.L)
    DIE("-r %s: use auto, all, none or 0..%d", v, N.L);
  return (int)n;
}

int main(int argc, char **argv)
{
  const char *prec = "bf16", *widths = "64,128,256,512,1024", *recomp = "auto";
  const char *acct_md = NULL, *acct_json = NULL;
  int iters = 30, warm = 8, top = 25, opt, model = 0, pairs = 7, param_off = 0, replays = 0;
  double cap_s = 150; /* the account's row ablations */
  N.N = 6, N.H = N.W = 256, N.K = 4;
  while ((opt = getopt(argc, argv, "p:b:s:w:k:n:W:t:r:A:J:R:T:o:mP:")) != -1) {
    switch (opt) {
    case 'p': prec = optarg; break;
    case 'b': N.N = atoi(optarg); break;
    case 's': N.H = N.W = atoi(optarg); break;
    case 'w': widths = optarg; break;
    case 'k': N.K = atoi(optarg); break;
    case 'n': iters = atoi(optarg); break;
    case 'W': warm = atoi(optarg); break;
    case 't': top = atoi(optarg); break;
    case 'r': recomp = optarg; break;
    case 'A': acct_md = optarg; break;
    case 'J': acct_json = optarg; break;
    case 'R': pairs = atoi(optarg); break;
    case 'T': cap_s = atof(optarg); break;
    case 'o': param_off = atoi(optarg); break;
    case 'm': model = 1; break;
    case 'P': replays = atoi(optarg); break;
    default: DIE("usage: [SHMDDP_CONV_ENGINE=auto|library|fused] %s [-p bf16|f16|f32] "
                 "[-b batch] [-s size] [-w widths] [-k classes] "
                 "[-n iters] [-W warmup] [-t top] [-r auto|all|none|N] [-A account.md "
                 "[-J account.json] [-R pairs] [-T seconds]] [-o N] [-m] [-P replays]", argv[0]);
    }
  }
  for (const char *s = widths; *s && N.L < MAXL; N.L++) {
    N.widths[N.L] = atoi(s);
    s = strchr(s, ',');
    if (!s) { N.L++; break; }
    s++;
  }
  ops_dtype_t dt = !strcmp(prec, "f32") || !strcmp(prec, "fp32") ? OPS_F32
                   : !strcmp(prec, "f16") || !strcmp(prec, "fp16") ? OPS_F16 : OPS_BF16;
  if (param_off < 0 || param_off > 256) DIE("-o %d: use 0..256 elements", param_off);
  if (N.N < 1 || N.H % (1 << (N.L - 1)) || N.K < 2 || iters < 1 || pairs < 1)
    DIE("batch %d, size %d, %d levels, %d classes, %d iterations, %d pairs: invalid", N.N, N.H,
        N.L, N.K, iters, pairs);
  if (acct_json && !acct_md) DIE("-J needs -A (the account's markdown)");
  if (replays < 0 || replays > 1000) DIE("-P %d: use 1..1000 replays (0: none)", replays);
  recompute_levels = parse_recompute(recomp, dt);
  char err[512];
  if (model_conv_engine_read(&engine, err, sizeof err) != 0) DIE("%s", err);
  if (model_upconv_gathered_read(dt, &up_gathered, err, sizeof err) != 0) DIE("%s", err);
  int head_fwd = 1, head_bwd = 1, head_train = 1; /* SHMDDP_HEAD_FUSED as the model reads it */
  if (model_head_fused_read(&head_fwd, &head_bwd, &head_train, err, sizeof err) != 0)
    DIE("%s", err);
  CU(cudaSetDevice(0));
  if (model) return model_bench(dt, iters, warm);
  CU(cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking));
  if (ops_cuda_init(&O, dt, 0, S, err, sizeof err) != 0) DIE("%s", err);
  E = O.elem;
  /* as the model resolves SHMDDP_WGRAD_STREAM (src/model/unet.c side_policy): a GPU, staged
   * where 16-bit weight gradients are folded into f32 (fp16 here) */
  if (model_wgrad_stream_read(N.L, 1, dt != OPS_F32 && !working_grads(), &side_from, err,
                              sizeof err) != 0)
    DIE("%s", err);
  /* as the model resolves SHMDDP_HEAD_FUSED (src/model/unet.c) */
  N.head_fused = head_bwd && N.K <= OPS_BN_1X1_MOST_K && O.bn_bwd_reduce_1x1 &&
                 O.bn_bwd_apply_1x1;
  struct cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  size_t free0, total;
  CU(cudaMemGetInfo(&free0, &total));
  N.nparams = (size_t)param_off; /* the first tensor's offset; the ones before it unused */
  build();
  /* as the model resolves its head_fwd_fused (src/model/unet.c): the planned head */
  N.head_fwd_fused = model_head_on_norm(&O, &N.head.c, head_fwd);
  /* and its head_train: both halves, and gradients not staged one layer at a time */
  N.head_train = (dt == OPS_F32 || working_grads()) &&
                 model_head_train_usable(&O, N.head_fwd_fused, N.head_fused, head_train);
  if (side_from < N.L) { /* the side table, on the same plans (they live in each ops_conv_t) */
    CU(cudaStreamCreateWithFlags(&S2, cudaStreamNonBlocking));
    if (ops_cuda_init(&O2, dt, 0, S2, err, sizeof err) != 0) DIE("%s", err);
    CU(cudaEventCreateWithFlags(&side_fork_ev, cudaEventDisableTiming));
    CU(cudaEventCreateWithFlags(&side_join_ev, cudaEventDisableTiming));
    side_ws = dev(N.ws_bytes);
  }
  char beside_txt[64] = "none";
  if (side_from < N.L) snprintf(beside_txt, sizeof beside_txt, "from level %d", side_from);
  char config[1600], from[32] = "", fused[720];
  if (param_off) snprintf(from, sizeof from, " (from element %d)", param_off);
  fused_summary(fused, sizeof fused);
  int ngathered = 0;
  for (int i = 0; i < N.L - 1; i++) ngathered += N.up[i].gathered;
  snprintf(config, sizeof config, "U-Net %s, %s, batch %d, 3x%dx%d, %d classes, %zu parameters%s, "
           "SGD momentum; backward recomputes at %d of %d levels (-r %s); conv engine %s "
           "(SHMDDP_CONV_ENGINE): %s; up-convolution gradients gathered at %d of %d levels "
           "(SHMDDP_UPCONV_GATHERED); the head %s, its input gradient %s (SHMDDP_HEAD_FUSED); "
           "weight gradients beside the input gradients: %s (SHMDDP_WGRAD_STREAM)",
           widths, O.name, N.N, N.H, N.W, N.K, N.nparams - param_off, from, recompute_levels,
           N.L, recomp, engine.setting, fused, ngathered, N.L - 1,
           N.head_train       ? "on the BatchNorm's apply with the loss and its backward to the "
                                "norm's reduce in one pass (train)"
           : N.head_fwd_fused ? "on the BatchNorm's apply"
                              : "on its stored input",
           N.head_fused ? "formed inside the BatchNorm backward" : "stored", beside_txt);
  printf("ops_cuda_bench: %s, %s, conv workspace %.1f MiB\n", prop.name, config,
         N.ws_bytes / 1048576.0);
  for (int i = 0; i < warm; i++) step(N.N);
  CU(cudaStreamSynchronize(S));
  if (ops_cuda_check_labels(&O)) DIE("%s", O.last_error(&O));
  double ms = time_steps(iters, NULL);
  size_t free1;
  CU(cudaMemGetInfo(&free1, &total));
  printf("step (stream): %.3f ms median of %d = %.1f img/s; device memory in use %.0f MiB\n", ms,
         iters, N.N * 1000.0 / ms, (free0 - free1) / 1048576.0);
  /* the same step captured in a CUDA graph: launch overhead gone (not fatal if it fails) */
  cudaError_t ge;
  cudaGraphExec_t exec = capture(&ge);
  if (exec) {
    double gms = time_steps(iters, exec);
    printf("step (CUDA graph): %.3f ms median of %d = %.1f img/s\n", gms, iters,
           N.N * 1000.0 / gms);
  } else {
    printf("step (CUDA graph): capture failed: %s\n", cudaGetErrorString(ge));
  }
  if (replays) { /* the profiled range: the graph's replays alone */
    if (!exec) DIE("-P: no CUDA graph of the step to replay");
    CU(cudaStreamSynchronize(S));
    CU(cudaProfilerStart());
    for (int r = 0; r < replays; r++) CU(cudaGraphLaunch(exec, S));
    CU(cudaStreamSynchronize(S));
    CU(cudaProfilerStop());
    printf("profiled range: %d replays of the step's graph\n", replays);
    return 0;
  }
  /* Per-op profile: events around each op, with the stream drained before it, so an op's
   * time is its own kernels (and the launch gaps between them) on an idle GPU. (Events recorded
   * inside a CUDA graph cannot be timed: cudaEventElapsedTime says "invalid argument".) The
   * first profiled step also fills the account's rows. */
  for (int i = 0; i <= MAXREC; i++) CU(cudaEventCreate(&evs[i]));
  for (int i = 0; i < MAXREC; i++) CU(cudaEventCreate(&ends[i]));
  static double acc[MAXREC];
  int nsteps = 5, n0 = -1;
  for (int s = 0; s < nsteps; s++) {
    nrec = 0;
    profiling = 1;
    accounting = s == 0;
    step(N.N);
    op_end();
    profiling = accounting = 0;
    CU(cudaStreamSynchronize(S));
    if (n0 >= 0 && nrec != n0) DIE("steps issued %d and %d ops", n0, nrec);
    n0 = nrec;
    for (int i = 0; i < nrec; i++) {
      float t;
      CU(cudaEventElapsedTime(&t, evs[i], ends[i]));
      acc[i] += t;
    }
  }
  for (int i = 0; i < nrec; i++) recs[i].ms = acc[i] / nsteps;
  nprofiled = nsteps;
  /* the loss of the full step, before the ablation below leaves the buffers in any state */
  if (ops_cuda_check_labels(&O)) DIE("%s", O.last_error(&O));
  double loss[2];
  CU(cudaMemcpy(loss, N.loss, sizeof loss, cudaMemcpyDeviceToHost));
  /* Ablation in the CUDA graph: the step replayed without one category's ops; the difference
   * is what the category costs inside the real step (overlap, caches and launch gaps as they
   * are), which the ops-alone figures above overstate for short kernels. The skipped ops'
   * outputs keep the previous step's values: timings of these ops do not depend on values. */
  if (exec) {
    double pass_ms[ACCT_NPASS];
    double step_ms = ablate_passes(exec, iters, pass_ms);
    if (acct_md)
      write_account(acct_md, acct_json, pass_ms, step_ms, exec, pairs, cap_s, prop.name, config);
  } else if (acct_md) {
    DIE("no account without the CUDA graph of the step");
  }
  report(ms, top);
  printf("\nlast loss %.4f over %.0f pixels (finite: %s)\n", loss[0] / loss[1], loss[1],
         isfinite(loss[0]) ? "yes" : "NO");
  acct_free(&account);
  return isfinite(loss[0]) ? 0 : 1;
}
