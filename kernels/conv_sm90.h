/* conv_sm90.h — a 3x3 convolution (stride 1, pad 1) and its two backward passes for Hopper GPUs
 * (sm_90a: wgmma and the tensor copy engine). The forward has the previous layer's BatchNorm
 * apply + ReLU fused into its input and this layer's BatchNorm statistics fused into its
 * output: in one pass over x,
 *
 *   a = bf16(max(0, x * scale[ci] + shift[ci]))    (or a = x without scale/shift)
 *   y = bf16(conv3x3(a, weight))                   (f32 accumulation)
 *   stats[co] = Σ y, stats[C + co] = Σ y², stats[2C] = n*h*w   (f64; ops.h bn_stats's layout)
 *
 * where y is the rounded output, as bn_stats sees it. bf16 NHWC tensors; weights
 * [cout][3][3][cin] as ops.h lays them out; any n, h, w. Channels: 64 -> 64 (the U-Net's
 * full-resolution layers, kernels/conv_sm90_cuda.cu) and the wider layers, cin and cout any
 * multiples of 64 up to CONV_SM90_MAX_CHANNELS (kernels/conv_sm90_wide_cuda.cu: N tiles of 128
 * output channels where cout is a multiple of 128, else 64; weights streamed from L2). The
 * statistics are summed in a fixed order (no atomics): reruns on the same GPU model give the
 * same bits. kernels/conv_fused_cpu.h is its CPU reference.
 *
 * Built only where configure's CUDA architectures include 90 (HAVE_CONV_SM90): the object is
 * compiled for sm_90a alone. The CUDA backend runs them as its fused convolutions (ops.h
 * conv_fwd_fused and its neighbours, kernels/conv_fused_cuda.cu). */
#ifndef KERNELS_CONV_SM90_H
#define KERNELS_CONV_SM90_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The channel counts of the first kernel (64 -> 64, kernels/conv_sm90_cuda.cu); which shapes
 * the trainer runs on these kernels: kernels/conv_fused_rank.c. */
#define CONV_SM90_CIN 64
#define CONV_SM90_COUT 64
/* The wider layers: cin and cout multiples of 64 up to this (forward and dgrad). */
#define CONV_SM90_MAX_CHANNELS 1024

/* The GEMM layout of the 64 -> 64 kernel (the `layout` field below; the wider layers have one):
 *   CONV_SM90_LAYOUT_PIXELS_M  M = the tile's pixels: A read by ldmatrix from the input halo
 *                              each k-step, B = the weights through descriptors;
 *   CONV_SM90_LAYOUT_COUT_M    M = the output channels: A = the weights, held in registers for
 *                              the whole kernel, B = the halo's pixels through descriptors, so
 *                              a k-step reads half the shared-memory bytes;
 *   0                          CONV_SM90_LAYOUT_DEFAULT.
 * Both add each output's k-steps in the same order and are checked against the same
 * references; the statistics' f32 partials are grouped differently (each within the bound).
 * COUT_M also covers 64 -> 128 on the first kernel: the forward (prologue and statistics as
 * above) and the plain dgrad of 128 -> 64 (dy 64 channels, g 128; no mask, no sums), each block
 * computing one half of the 128 output channels with that half's weights in registers (blocks
 * [0, B) the first half, [B, 2B) the second, B = half the multiprocessors), both halves reading
 * the same 64-channel input. Other layouts at those shapes go to the wide kernel. */
#define CONV_SM90_LAYOUT_PIXELS_M 1
#define CONV_SM90_LAYOUT_COUT_M 2
#define CONV_SM90_LAYOUT_DEFAULT CONV_SM90_LAYOUT_PIXELS_M

typedef struct {
  int n, h, w, cin, cout;
  const void *x;              /* bf16 (n, h, w, cin), 16-byte aligned */
  const void *weight;         /* bf16 [cout][3][3][cin], 16-byte aligned */
  const float *scale, *shift; /* f32 [cin] each: the prologue; both NULL: none (a = x) */
  void *y;                    /* bf16 (n, h, w, cout), 16-byte aligned; must not overlap x */
  double *stats;              /* f64 [2 cout + 1], or NULL: no statistics */
  void *ws;                   /* conv_sm90_ws_bytes_shape() bytes (with stats; else may be
                               * NULL) */
  void *stream;               /* cudaStream_t; NULL: the legacy default stream */
  int layout;                 /* CONV_SM90_LAYOUT_*, 0: the default (64 -> 64 only) */
} conv_sm90_fwd_t;

/* The input gradient of that convolution (dgrad), with the previous layer's ReLU mask and its
 * BatchNorm backward sums fused in, as kernels/conv_fused_bwd_cpu.h's conv_dgrad_ref defines
 * them: in one pass over dy,
 *
 *   g = bf16(conv_transpose3x3(dy, weight)) * [x * scale + shift > 0]   (f32 accumulation)
 *   sums[ci] = Σ g,  sums[cin + ci] = Σ g (x - mean[ci]) invstd[ci]     (f64)
 *
 * where mean, invstd are saved[ci], saved[cin + ci] (ops.h bn_finalize's layout). The mask
 * reads x at each output pixel; the sums are summed as Σ g and Σ g x (f32 partials of at most
 * 32 exact products, folded in f64 in a fixed order) and finished as (Σ g x - mean Σ g) invstd.
 * Same shapes and channel counts as the forward (64 -> 64 and the wider layers). */
typedef struct {
  int n, h, w, cin, cout;     /* the forward convolution's shape */
  const void *dy;             /* bf16 (n, h, w, cout), 16-byte aligned */
  const void *weight;         /* bf16 [cout][3][3][cin]: the forward's, 16-byte aligned */
  const void *x;              /* bf16 (n, h, w, cin): the forward's input before its prologue;
                               * needed by the mask and the sums, else may be NULL */
  const float *scale, *shift; /* f32 [cin] each: the mask; both NULL: none */
  const double *saved;        /* f64 [2 cin]: mean, invstd; with sums, else NULL */
  void *g;                    /* bf16 (n, h, w, cin), 16-byte aligned; must not overlap dy, x */
  double *sums;               /* f64 [2 cin], or NULL */
  void *ws;                   /* conv_sm90_ws_bytes_shape() bytes: always (flipped weights) */
  void *stream;               /* cudaStream_t; NULL: the legacy default stream */
  int layout;                 /* CONV_SM90_LAYOUT_*, 0: the default (64 -> 64 only) */
} conv_sm90_dgrad_t;

/* The weight gradient of the forward above (wgrad), its prologue recomputed from x, as
 * kernels/conv_fused_bwd_cpu.h's conv_wgrad_ref defines it:
 *
 *   dweight[co][ky][kx][ci] = Σ_p dy[p][co] a[p + (ky - 1, kx - 1)][ci]   (0 outside the image)
 *   a = bf16(max(0, x * scale + shift))   (or a = x without scale/shift)
 *
 * summed in f32 in a fixed order over row tiles (64 pixels of a row, columns [64 s, 64 s + 64)
 * cut at the image's edge), numbered down column strips: tile t = (img * tiles_x + s) * h + y,
 * tiles_x = ceil(w / 64). Block b sums tiles [b T, min((b + 1) T, tiles)), T =
 * tiles_per_block, into one partial left in the workspace ([blocks][cout][3][3][cin] f32, from
 * its start), then the partials are added in block order (conv_wgrad_ref_reduce's order).
 * Where w is 64 the tiles are in raster order and block b is conv_wgrad_ref's block of
 * 64 * tiles_per_block pixels.
 *
 * The wider layers (cin, cout multiples of 64 up to CONV_SM90_MAX_CHANNELS other than 64 -> 64,
 * kernels/conv_sm90_wgrad_wide_cuda.cu) split K the same way: the row tiles, numbered as above,
 * except that on images 16 or 32 pixels wide a tile is 64 / w whole rows (tile t = img * th + ty
 * holds rows [ty 64 / w, (ty + 1) 64 / w), th = ceil(h w / 64); kernels/conv_sm90_tile.h),
 * are cut into `splits` ranges of tiles_per_split (conv_sm90_wgrad_plan_shape), each summed into
 * its own partial dW ([splits][cout][3][3][cin] f32 in the workspace, by (cout / 64) (cin / 64)
 * blocks of 64 x 64 channels each), then the partials are added in split order
 * (conv_wgrad_ref_reduce's order); with one split its partial is written to dweight directly
 * and the workspace is left as it was. For 64 -> 64 the splits are the blocks above. */
typedef struct {
  int n, h, w, cin, cout;     /* the forward convolution's shape */
  const void *x;              /* bf16 (n, h, w, cin): the forward's input before its prologue */
  const void *dy;             /* bf16 (n, h, w, cout) */
  const float *scale, *shift; /* f32 [cin] each: the prologue; both NULL: a = x */
  float *dweight;             /* f32 [cout][3][3][cin], 16-byte aligned */
  void *ws;                   /* conv_sm90_wgrad_ws_bytes_shape() bytes: the partials */
  void *stream;               /* cudaStream_t; NULL: the legacy default stream */
} conv_sm90_wgrad_t;

/* The blocks wgrad sums on `device` for a batch of n h x w, and the row tiles (above) in each
 * (the last block may have fewer), 64 -> 64. 0, or -1 for a bad device or shape. */
int conv_sm90_wgrad_plan(int device, int n, int h, int w, int *blocks, int *tiles_per_block);

/* Device bytes of workspace conv_sm90_wgrad needs on `device` for that batch, 64 -> 64 (0: bad
 * shape). */
size_t conv_sm90_wgrad_ws_bytes(int device, int n, int h, int w);

/* The same for cin -> cout channels: the partials (K splits) wgrad sums and the row tiles in
 * each (the last may have fewer); conv_sm90_wgrad_plan's for 64 -> 64. 0, or -1 for a bad
 * device or a shape not covered. */
int conv_sm90_wgrad_plan_shape(int device, int n, int h, int w, int cin, int cout, int *splits,
                               int *tiles_per_split);

/* Device bytes of workspace for cin -> cout: splits x 9 cin cout f32 (at most 64 MiB for the
 * wider layers); conv_sm90_wgrad_ws_bytes for 64 -> 64; 0 for a bad device or a shape not
 * covered. */
size_t conv_sm90_wgrad_ws_bytes_shape(int device, int n, int h, int w, int cin, int cout);

/* Queues wgrad on a->stream, as conv_sm90_fwd (64 -> 64 on the first kernel, the wider layers
 * on the wide one). */
int conv_sm90_wgrad(const conv_sm90_wgrad_t *a, char *err, size_t errlen);

/* 0 when device (a CUDA ordinal) can run the forward and dgrad kernels, 64 -> 64 and the wider
 * ones (compute capability 9.0, enough shared memory, the sm_90a images load); else -1 with
 * the reason in err. */
int conv_sm90_check(int device, char *err, size_t errlen);

/* The same for the weight gradient's kernels, 64 -> 64 and the wider ones (conv_sm90_check
 * first). */
int conv_sm90_wgrad_check(int device, char *err, size_t errlen);

/* Device bytes of workspace conv_sm90_fwd and conv_sm90_dgrad need on `device` for 64 -> 64
 * channels (per-block statistics partials, dgrad's flipped weights). */
size_t conv_sm90_ws_bytes(int device);

/* The same for cin -> cout channels (either pass): per-block f64 partials of 2 max(cin, cout)
 * sums, then dgrad's flipped weights (9 cin cout bf16); conv_sm90_ws_bytes(device) for
 * 64 -> 64; 0 for a shape not covered or a bad device. */
size_t conv_sm90_ws_bytes_shape(int device, int cin, int cout);

/* Queues the convolution on a->stream (the current device's): 64 -> 64 on the first kernel,
 * other covered shapes on the wide one. Returns 0, or -1 with a message in err before
 * anything is queued when the arguments are not ones it covers. */
int conv_sm90_fwd(const conv_sm90_fwd_t *a, char *err, size_t errlen);

/* Queues dgrad on a->stream, as conv_sm90_fwd. */
int conv_sm90_dgrad(const conv_sm90_dgrad_t *a, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
