/* norm_cuda.cu — per-channel kernels over NHWC tensors: BatchNorm (statistics, finalisation,
 * apply with the fused ReLU, backward reduce and apply), GroupNorm, conv bias add and bias
 * gradient. Sums are f32 over at most 32 rows per thread, f64 beyond, reduced in a fixed order
 * (block partials, then one pass over them), so results repeat bit for bit; element
 * arithmetic is f32 on wide loads.
 * BatchNorm and GroupNorm share every kernel: a channel's mean/invstd come from
 * saved[z * gs + c / cg], i.e. per channel (BN: gs = 0, cg = 1) or per sample and group. */
#include "config.h"

#include "kernels/ops_cuda.cuh"

/* ---- statistics: partials of (Σx, Σx²), or of (Σg, Σg·x̂) for backward ----
 * A thread loads 8 rows at a time (all loads in flight before the arithmetic, kept packed until
 * used), sums up to 32 rows in f32 and folds that into f64; blocks and splits are summed in
 * f64. So a Σ of f32 terms runs over at most 32 of them (relative error ~1e-7) and FP64 work
 * stays off the bandwidth-bound loop. 16-bit tensors move 8 bytes (4 channels) per access here,
 * f32 16. (4 rows at a time, the loaded values converted to f32 arrays at once, left too few
 * bytes in flight: see bench/results/ops_cuda_1xh200.txt, 9cebfc8, and ab_bn_inflight_1xh200.txt.
 * The rows, their order and the f32 chunks are the same, so the sums are the same bits.) */

#define RED_BATCH 8   /* rows loaded together (forward statistics) */
#define RED_CHUNK 4   /* batches per f32 partial: 32 rows */
#define BRED_BATCH 4  /* the same for backward (2-3 tensors: 8 rows needed 168 registers) */
#define BRED_CHUNK 8
#define RED_MIN_ROWS 16 /* rows per thread at least (the grid's row splits bound from above) */
/* Channel groups a reduction block takes at most: the rest of its 256 threads take more rows,
 * which the block adds before writing its f64 partial. With a block across all of a wide
 * layer's channels (256 groups at 1024 channels) each block wrote a partial of every channel,
 * and the partials were about half the input's bytes at the deep layers (96 splits x 2048
 * doubles for a 3 MB input); 16 groups a block write a sixteenth of that for the same blocks
 * and rows a thread. */
#define RED_MOST_GB 16

template <typename T, int N>
__global__ void __launch_bounds__(OPC_THREADS)
    stats_kernel(const T *x, size_t rows, int C, int gb, int r, double *part)
{
  const int gi = threadIdx.x % gb, row = threadIdx.x / gb, g = blockIdx.x * gb + gi;
  const int valid = g * N < C;
  double a[N], b[N];
  for (int k = 0; k < N; k++) a[k] = b[k] = 0;
  const T *xz = x + (size_t)blockIdx.z * rows * C + (size_t)g * N;
  const size_t step = (size_t)gridDim.y * r;
  size_t p = (size_t)blockIdx.y * r + row;
  while (valid && p < rows) {
    float fa[N], fb[N];
    for (int k = 0; k < N; k++) fa[k] = fb[k] = 0.f;
#pragma unroll 1
    for (int it = 0; it < RED_CHUNK && p < rows; it++, p += RED_BATCH * step) {
      opc_pack<T, N> v[RED_BATCH];
#pragma unroll
      for (int j = 0; j < RED_BATCH; j++)
        if (p + j * step < rows) v[j] = opc_load<T, N>(xz + (p + j * step) * C);
#pragma unroll
      for (int j = 0; j < RED_BATCH; j++)
#pragma unroll
        for (int k = 0; k < N; k++) {
          float f = p + j * step < rows ? opc_ld(v[j].v[k]) : 0.f;
          fa[k] += f;
          fb[k] = fmaf(f, f, fb[k]);
        }
    }
    for (int k = 0; k < N; k++) a[k] += fa[k], b[k] += fb[k];
  }
  double *out = part + ((size_t)blockIdx.z * gridDim.y + blockIdx.y) * 2 * C + (size_t)g * N;
  opc_block_colsum<N>(a, b, gb, r, gi, row, valid, out, out + C);
}

/* The fused ReLU in backward (ops_relu_t on the device): dy passes where y > 0, or, without y
 * and with gamma/beta, where the forward's affine of x is positive — computed as affine_kernel
 * computes it, fmaf(x - mean, (float)(gamma invstd), beta), so the decision is the forward's. */
template <typename T>
struct relu_mask {
  const T *y, *gamma, *beta;
};

template <typename T>
static relu_mask<T> mask_of(const ops_relu_t *r)
{
  relu_mask<T> m = {NULL, NULL, NULL};
  if (r && r->y) m.y = (const T *)r->y;
  else if (r) m.gamma = (const T *)r->gamma, m.beta = (const T *)r->beta;
  return m;
}

template <typename T>
static int mask_check(const ops_t *o, const ops_relu_t *r, const char *what)
{
  if (r && !r->y && (!r->gamma || !r->beta))
    return opc_fail(o, "%s backward: a ReLU mask without y needs gamma and beta", what);
  return 0;
}

/* Where a backward kernel's dy comes from: stored (g NULL), or formed where it is read as the
 * input gradient of a 1x1 convolution that reads this normalisation's output (the U-Net's head;
 * ops.h bn_bwd_*_1x1): g that convolution's output gradient (rows x K), w its [K][C] weights.
 * Formed as sk_bwd_data (conv_skinny_cuda.cu) forms that gradient: f32 products added in k
 * order from zero, rounded to T, so the results are the stored path's bit for bit. KC, a
 * template parameter (0: stored), is K rounded up to 4 or 8. The block's weights sit in shared
 * memory, KC floats a channel (head_smem), read where each row's dy is formed: held in
 * registers a thread, with a row's gradients loaded one by one, they took the bf16 backward
 * reduction from the stored kernel's 80 registers to 110 (2 blocks a multiprocessor instead of
 * 3), and it ran slower than the stored read it replaced. */
template <typename T>
struct dy_head {
  const T *g, *w;
  int K;
};

/* Shared-memory floats for the weights of a block of gb threads a row, N channels each. */
template <int N, int KC>
constexpr int head_smem_floats()
{
  return KC ? OPC_THREADS * N * KC : 4;
}

/* The block's channels' weights into shared memory, [channel - the block's first][k], zero for
 * k >= K and channels past C; every thread of the block takes part (a barrier ends it). */
template <typename T, int N, int KC>
static __device__ __forceinline__ void head_smem(const dy_head<T> &h, int C, int gb, float *hs)
{
  const int c0 = blockIdx.x * gb * N, n = gb * N * KC;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int c = c0 + i / KC, k = i % KC;
    hs[i] = k < h.K && c < C ? opc_ld(h.w[(size_t)k * C + c]) : 0.f;
  }
  __syncthreads();
}

/* A row's K output gradients as stored (zero past K), kept in T until used (a row in flight
 * holds KC / 2 registers in 16-bit types). PK: one access (the launch has checked that K = KC
 * and that g is aligned for it: head_packs), else one element at a time; a template parameter
 * because a run-time choice between the two cost the kernels 30 registers. */
template <typename T, int KC, bool PK>
static __device__ __forceinline__ opc_pack<T, KC> head_row(const dy_head<T> &h, size_t row)
{
  const T *gr = h.g + row * h.K;
  if constexpr (PK) {
    return opc_load<T, KC>(gr);
  } else {
    opc_pack<T, KC> v;
#pragma unroll
    for (int k = 0; k < KC; k++) v.v[k] = k < h.K ? gr[k] : opc_st<T>(0.f);
    return v;
  }
}

/* dy of a row's N channels from its gradients g and the thread's weights hw (head_smem's rows
 * for the thread's first channel: KC floats a channel, 16-byte aligned). */
template <typename T, int N, int KC>
static __device__ __forceinline__ opc_pack<T, N> head_dy(const opc_pack<T, KC> &g, int K,
                                                         const float *hw)
{
  opc_pack<T, N> v;
#pragma unroll
  for (int j = 0; j < N; j++) {
    float w[KC];
#pragma unroll
    for (int q = 0; q < KC / 4; q++) /* volatile: read at each use, never hoisted into registers */
      asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                   : "=f"(w[4 * q]), "=f"(w[4 * q + 1]), "=f"(w[4 * q + 2]), "=f"(w[4 * q + 3])
                   : "r"((unsigned)__cvta_generic_to_shared(hw + j * KC + 4 * q)));
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < KC; k++)
      if (k < K) s += opc_ld(g.v[k]) * w[k];
    v.v[j] = opc_st<T>(s);
  }
  return v;
}

/* g = dy masked by the fused ReLU; x̂ = (x - mean) * invstd of the thread's group. MK is the
 * mask's kind, fixed at compile time so no registers are held for the other kinds' operands
 * (MASK_NONE: dy as it is; MASK_Y: where y > 0; MASK_AFFINE: where the forward's affine > 0). */
enum { MASK_NONE = 0, MASK_Y = 1, MASK_AFFINE = 2 };

template <typename T, int N, int MK, int KC, bool PK>
__global__ void __launch_bounds__(OPC_THREADS)
    bwd_stats_kernel(const T *dy, relu_mask<T> mk, const T *x, size_t rows, int C, int gb, int r,
                     const double *mean, const double *inv, int gs, int cg, double *part,
                     dy_head<T> hd)
{
  constexpr int KK = KC ? KC : 4;
  __shared__ __align__(16) float hs[head_smem_floats<N, KC>()];
  const int gi = threadIdx.x % gb, row = threadIdx.x / gb, g = blockIdx.x * gb + gi;
  const int valid = g * N < C;
  const size_t z = blockIdx.z;
  const T *mask = mk.y;
  double a[N], b[N];
  float m[N], s[N], ma[N], mb[N];
  for (int k = 0; k < N; k++) {
    a[k] = b[k] = 0;
    int c = valid ? g * N + k : 0;
    m[k] = (float)mean[z * gs + c / cg];
    s[k] = (float)inv[z * gs + c / cg];
    ma[k] = MK == MASK_AFFINE ? (float)((double)opc_ld(mk.gamma[c]) * inv[z * gs + c / cg])
                              : 0.f;
    mb[k] = MK == MASK_AFFINE ? opc_ld(mk.beta[c]) : 0.f;
  }
  if constexpr (KC > 0) head_smem<T, N, KK>(hd, C, gb, hs);
  const float *hw = hs + gi * N * KK;
  const size_t off = z * rows * C + (size_t)g * N;
  const size_t step = (size_t)gridDim.y * r;
  size_t p = (size_t)blockIdx.y * r + row;
  while (valid && p < rows) {
    float fa[N], fb[N];
    for (int k = 0; k < N; k++) fa[k] = fb[k] = 0.f;
#pragma unroll 1
    for (int it = 0; it < BRED_CHUNK && p < rows; it++, p += BRED_BATCH * step) {
      opc_pack<T, N> d[KC ? 1 : BRED_BATCH], v[BRED_BATCH], y[MK == MASK_Y ? BRED_BATCH : 1];
      opc_pack<T, KK> gk[KC ? BRED_BATCH : 1];
#pragma unroll
      for (int j = 0; j < BRED_BATCH; j++) {
        size_t q = p + j * step;
        if (q < rows) {
          if constexpr (KC > 0) gk[j] = head_row<T, KK, PK>(hd, z * rows + q);
          else d[j] = opc_load<T, N>(dy + off + q * C);
          v[j] = opc_load<T, N>(x + off + q * C);
          if (MK == MASK_Y) y[MK == MASK_Y ? j : 0] = opc_load<T, N>(mask + off + q * C);
        }
      }
#pragma unroll
      for (int j = 0; j < BRED_BATCH; j++) {
        size_t q = p + j * step;
        opc_pack<T, N> dj; /* a formed dy only where its row exists (gk is not set past it) */
        if constexpr (KC > 0) dj = q < rows ? head_dy<T, N, KK>(gk[j], hd.K, hw) : opc_pack<T, N>{};
        else dj = d[j];
#pragma unroll
        for (int k = 0; k < N; k++) { /* rows past the end contribute g = 0 */
          float xm = q < rows ? opc_ld(v[j].v[k]) - m[k] : 0.f;
          int off = q >= rows ||
                    (MK == MASK_Y && !(opc_ld(y[MK == MASK_Y ? j : 0].v[k]) > 0.f)) ||
                    (MK == MASK_AFFINE && !(fmaf(xm, ma[k], mb[k]) > 0.f));
          float gr = off ? 0.f : opc_ld(dj.v[k]);
          fa[k] += gr;
          fb[k] = fmaf(gr, xm * s[k], fb[k]);
        }
      }
    }
    for (int k = 0; k < N; k++) a[k] += fa[k], b[k] += fb[k];
  }
  double *out = part + (z * gridDim.y + blockIdx.y) * 2 * C + (size_t)g * N;
  opc_block_colsum<N>(a, b, gb, r, gi, row, valid, out, out + C);
}

/* Blocks of kernel K that fit on a multiprocessor, asked once per kernel (a thread-safe local
 * static; every GPU of a process is taken to be of one architecture). */
template <auto K>
static int fit_blocks()
{
  static const int fit = opc_fit_blocks((const void *)K);
  return fit;
}

/* The backward statistics kernel for a mask kind, and its blocks per multiprocessor. */
template <typename T>
using bwd_stats_fn = void (*)(const T *, relu_mask<T>, const T *, size_t, int, int, int,
                              const double *, const double *, int, int, double *, dy_head<T>);

template <typename T, int N, int MK, int KC = 0, bool PK = false>
static void bwd_stats_take(bwd_stats_fn<T> *k, int *fit)
{
  *k = bwd_stats_kernel<T, N, MK, KC, PK>;
  *fit = fit_blocks<bwd_stats_kernel<T, N, MK, KC, PK>>();
}

/* The kernel for a mask kind, dy stored (kc 0) or formed from a head of up to kc = 4 or 8
 * classes (the ReLU mask recomputed from gamma and beta only: the model's case), its rows'
 * gradients loaded as one access where pk (head_packs; the vector kernels only). */
template <typename T, int N>
static void bwd_stats_pick(int mkind, int kc, bool pk, bwd_stats_fn<T> *k, int *fit)
{
  if constexpr (N > 1) {
    if (kc == 4 && pk) return bwd_stats_take<T, N, MASK_AFFINE, 4, true>(k, fit);
    if (kc == 8 && pk) return bwd_stats_take<T, N, MASK_AFFINE, 8, true>(k, fit);
  }
  if (kc == 4) bwd_stats_take<T, N, MASK_AFFINE, 4>(k, fit);
  else if (kc == 8) bwd_stats_take<T, N, MASK_AFFINE, 8>(k, fit);
  else if (mkind == MASK_Y) bwd_stats_take<T, N, MASK_Y>(k, fit);
  else if (mkind == MASK_AFFINE) bwd_stats_take<T, N, MASK_AFFINE>(k, fit);
  else bwd_stats_take<T, N, MASK_NONE>(k, fit);
}

/* KC for a head of K classes: 4 or 8, 0 without one (head_kc_check tells the range) */
static int head_kc(int K) { return K <= 0 ? 0 : K <= 4 ? 4 : 8; }

/* Whether the kernels may load a row of this head's gradients as one access: K = KC and g
 * aligned for it (the U-Net's 4 classes). The channels a thread takes (N) stay the stored
 * path's either way, so the sums keep its order and bits. */
template <typename T>
static bool head_packs(const dy_head<T> &hd)
{
  return hd.g && hd.K == head_kc(hd.K) && (uintptr_t)hd.g % (hd.K * sizeof(T)) == 0;
}

template <typename T>
static int head_check(const ops_t *o, const dy_head<T> &hd, relu_mask<T> mk, int C)
{
  if (!hd.g) return 0;
  if (hd.K < 1 || hd.K > OPS_BN_1X1_MOST_K || !hd.w)
    return opc_fail(o, "BatchNorm backward through a 1x1 head: %d classes (1 to %d, with its "
                    "weights)", hd.K, OPS_BN_1X1_MOST_K);
  if (mk.y || !mk.gamma || !mk.beta)
    return opc_fail(o, "BatchNorm backward through a 1x1 head takes the ReLU mask from gamma and "
                    "beta (no y)");
  return C > 0 ? 0 : opc_fail(o, "BatchNorm backward through a 1x1 head: %d channels", C);
}

/* Launches the statistics kernel for (x) or, with dy given, the backward one; returns the
 * number of row splits (the partials' layout) or -1. */
template <typename T>
static int launch_stats(const ops_t *o, const T *dy, relu_mask<T> mk, const T *x, size_t rows,
                        int C, int nz, const double *mean, const double *inv, int gs, int cg,
                        size_t reserve, dy_head<T> hd = dy_head<T>{NULL, NULL, 0})
{
  if (head_check<T>(o, hd, mk, C)) return -1;
  const bool bwd = dy || hd.g; /* the backward statistics (dy stored or formed) */
  opc_ctx_t *ctx = opc_ctx(o);
  const T *mask = mk.y;
  const int V = 4; /* launch_stats: 4 channels per access */
  int N = C % V || ((uintptr_t)x | (uintptr_t)dy | (uintptr_t)mask) % (V * sizeof(T)) ? 1 : V;
  size_t per_split = (size_t)nz * 2 * C;
  if (per_split + reserve > OPC_SCRATCH_DOUBLES)
    return opc_fail(o, "%d channels x %d samples exceed the reduction scratch", C, nz);
  /* The grid: one wave of the blocks that fit (bf16 on sm_90: 4 of the forward kernel at 64
   * registers, 3 of the backward one at 76-80; asking for more than fit ran 1.33 and 2 waves),
   * and at least RED_MIN_ROWS rows per thread, so the small deep layers (a few thousand rows)
   * still spread over the machine instead of 48-192 blocks each walking 32 rows in 4-8
   * dependent round trips. */
  typedef void (*fwd_k)(const T *, size_t, int, int, int, double *);
  fwd_k fk = N == V ? stats_kernel<T, V> : stats_kernel<T, 1>;
  const int mkind = mk.y ? MASK_Y : mk.gamma ? MASK_AFFINE : MASK_NONE;
  bwd_stats_fn<T> bk = NULL;
  int fit = 0;
  const int kc = hd.g ? head_kc(hd.K) : 0;
  if (!bwd) fit = N == V ? fit_blocks<stats_kernel<T, V>>() : fit_blocks<stats_kernel<T, 1>>();
  else if (N == V) bwd_stats_pick<T, V>(mkind, kc, head_packs<T>(hd), &bk, &fit);
  else bwd_stats_pick<T, 1>(mkind, kc, false, &bk, &fit);
  opc_geo_t g = opc_geometry(o, rows, C, N, nz, RED_MIN_ROWS,
                             (OPC_SCRATCH_DOUBLES - reserve) / per_split, fit, RED_MOST_GB);
  double *part = ctx->scratch;
  cudaStream_t st = ctx->stream;
  if (!bwd)
    fk<<<g.grid, g.block, 0, st>>>(x, rows, C, g.gb, g.r, part);
  else
    bk<<<g.grid, g.block, 0, st>>>(dy, mk, x, rows, C, g.gb, g.r, mean, inv, gs, cg, part, hd);
  OPC_LAUNCHED(o, bwd ? "normalisation backward statistics" : "normalisation statistics");
  return (int)g.grid.y;
}

/* Final sums, in two steps so no thread walks hundreds of partials alone:
 * split_sum_kernel: per (sample z, channel c), Σ over the splits of both partial sums; 16
 *   lanes per channel stride over the splits (8 loads in flight each), then add up in a fixed
 *   order. With tot NULL (BatchNorm, biases: one sample) it writes the results: s12 (f64, the
 *   count to s12[2C] unless negative) and t1/t2 (dtype T, added to when acc), each may be NULL;
 *   else the per-(z, c) totals to tot[z][2C] for group_final_kernel. */
#define SPLIT_LANES 16

/* BatchNorm's finalisation of one channel from its sums (s1 = Σx, s2 = Σx², n = count): saved
 * mean and invstd, running statistics moved by momentum. One function for bn_finalize_kernel and
 * the fused final sum, so both compute the same bits. */
struct bn_fin_t {
  double eps, momentum;
  float *rm, *rv;
  double *saved; /* NULL: no finalisation */
};

static __device__ __forceinline__ void bn_finalize_one(int c, int C, double n, double s1,
                                                       double s2, const bn_fin_t &f)
{
  /* Every operation rounded on its own (no multiply-add contracted): ptxas fuses plain ones
   * differently in different kernels, which gave the two callers different bits. The CPU's
   * finalisation rounds the same way. */
  double mean = 0, var = 0;
  if (n > 0) {
    mean = __ddiv_rn(s1, n);
    var = __dsub_rn(__ddiv_rn(s2, n), __dmul_rn(mean, mean));
    if (var < 0) var = 0;
  }
  f.saved[c] = mean;
  f.saved[C + c] = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(var, f.eps)));
  if (n > 0 && f.rm && f.rv) {
    /* PyTorch's running variance */
    double unbiased = n > 1 ? __ddiv_rn(__dmul_rn(var, n), __dsub_rn(n, 1.0)) : var;
    double keep = __dsub_rn(1.0, f.momentum);
    f.rm[c] = (float)__dadd_rn(__dmul_rn(keep, (double)f.rm[c]), __dmul_rn(f.momentum, mean));
    f.rv[c] = (float)__dadd_rn(__dmul_rn(keep, (double)f.rv[c]), __dmul_rn(f.momentum, unbiased));
  }
}

template <typename T>
__global__ void split_sum_kernel(const double *part, int splits, int C, double count, double *s12,
                                 T *t1, T *t2, int acc, double *tot, bn_fin_t fin)
{
  __shared__ double sh[2][SPLIT_LANES][33];
  const int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx, z = blockIdx.y;
  double u = 0, v = 0;
  if (c < C) {
    const double *p = part + (size_t)z * splits * 2 * C + c;
#pragma unroll 8
    for (int y = ty; y < splits; y += SPLIT_LANES) {
      u += p[(size_t)y * 2 * C];
      v += p[(size_t)y * 2 * C + C];
    }
  }
  sh[0][ty][tx] = u;
  sh[1][ty][tx] = v;
  __syncthreads();
  if (ty || c >= C) return;
  for (int i = 1; i < SPLIT_LANES; i++) u += sh[0][i][tx], v += sh[1][i][tx];
  if (tot) {
    tot[(size_t)z * 2 * C + c] = u;
    tot[(size_t)z * 2 * C + C + c] = v;
    return;
  }
  if (s12) {
    s12[c] = u;
    s12[C + c] = v;
    if (c == 0 && count >= 0) s12[2 * C] = count;
  }
  if (fin.saved) {
    if (c == 0) fin.saved[2 * C] = count;
    bn_finalize_one(c, C, count, u, v, fin);
  }
  if (t1) t1[c] = opc_st<T>((float)((acc ? (double)opc_ld(t1[c]) : 0.0) + u));
  if (t2) t2[c] = opc_st<T>((float)((acc ? (double)opc_ld(t2[c]) : 0.0) + v));
}

/* GroupNorm: per channel, t1/t2 (may be NULL) = Σ over samples of the totals (added to when
 * acc); per (sample, group), a12[z*G+g] = Σ_{c in g} w[c] * (tot1, tot2)[z][c] / m, the
 * backward's terms (w = gamma) — or, with w NULL, the group's mean and invstd for the forward. */
template <typename T>
__global__ void group_final_kernel(const double *tot, int nz, int C, T *t1, T *t2, int acc,
                                   int G, const T *w, double m, double eps, double *a12)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < C) {
    double u = 0, v = 0;
    for (int z = 0; z < nz; z++) {
      u += tot[(size_t)z * 2 * C + i];
      v += tot[(size_t)z * 2 * C + C + i];
    }
    if (t1) t1[i] = opc_st<T>((float)((acc ? (double)opc_ld(t1[i]) : 0.0) + u));
    if (t2) t2[i] = opc_st<T>((float)((acc ? (double)opc_ld(t2[i]) : 0.0) + v));
    return;
  }
  i -= C;
  if (i >= nz * G) return;
  const int z = i / G, grp = i % G, cg = C / G;
  double u = 0, v = 0;
  for (int c = grp * cg; c < (grp + 1) * cg; c++) {
    double wc = w ? (double)opc_ld(w[c]) : 1.0;
    u += wc * tot[(size_t)z * 2 * C + c];
    v += wc * tot[(size_t)z * 2 * C + C + c];
  }
  if (w) {
    a12[i] = u / m;
    a12[nz * G + i] = v / m;
  } else {
    double mean = u / m, var = v / m - mean * mean;
    a12[i] = mean;
    a12[nz * G + i] = 1.0 / sqrt((var < 0 ? 0 : var) + eps);
  }
}

/* Scratch after the partials: GroupNorm's totals (2 nz C) and backward terms (2 nz G). */
static double *tot_area(const ops_t *o, int nz, int C, int G)
{
  return opc_ctx(o)->scratch + OPC_SCRATCH_DOUBLES - 2 * (size_t)nz * G - 2 * (size_t)nz * C;
}

template <typename T>
static int reduce_final(const ops_t *o, int nz, int splits, int C, double count, double *s12,
                        T *t1, T *t2, int acc, int G, const T *w, double m, double eps,
                        double *a12, bn_fin_t fin = bn_fin_t{0, 0, NULL, NULL, NULL})
{
  cudaStream_t st = opc_ctx(o)->stream;
  double *tot = a12 ? tot_area(o, nz, C, G) : NULL; /* no a12: one sample (BN, biases) */
  split_sum_kernel<T><<<dim3((C + 31) / 32, a12 ? nz : 1), dim3(32, SPLIT_LANES), 0, st>>>(
      opc_ctx(o)->scratch, splits, C, count, s12, t1, t2, acc, tot, fin);
  OPC_LAUNCHED(o, "the statistics' final sum");
  if (!a12) return 0;
  int total = C + nz * G;
  group_final_kernel<T><<<(total + 127) / 128, 128, 0, st>>>(tot, nz, C, t1, t2, acc, G, w, m,
                                                            eps, a12);
  OPC_LAUNCHED(o, "GroupNorm statistics");
  return 0;
}

/* ---- element passes: y = (x - mean) * gamma * invstd + beta (+ ReLU), and backward ---- */

#define PASS_BATCH 4 /* rows whose loads a thread has in flight together */
#define BWD_BATCH 4  /* the same in the backward pass, at 4 channels per access (at 8 channels,
                        4 rows took 170 registers) */

template <typename T, int N>
__global__ void affine_kernel(const T *x, size_t rows, int C, int gb, int r, const double *mean,
                              const double *inv, int gs, int cg, const T *gamma, const T *beta,
                              int relu, T *y, size_t ldy)
{
  const int gi = threadIdx.x % gb, row = threadIdx.x / gb, g = blockIdx.x * gb + gi;
  if (g * N >= C) return;
  const size_t z = blockIdx.z;
  float m[N], a[N], b[N];
  for (int k = 0; k < N; k++) {
    int c = g * N + k;
    m[k] = (float)mean[z * gs + c / cg];
    a[k] = (float)((double)opc_ld(gamma[c]) * inv[z * gs + c / cg]);
    b[k] = opc_ld(beta[c]);
  }
  const size_t off = z * rows * C + (size_t)g * N, step = (size_t)gridDim.y * r;
  const size_t yoff = z * rows * ldy + (size_t)g * N;
  size_t p = (size_t)blockIdx.y * r + row;
  /* PASS_BATCH rows' loads in flight before their stores (the compiler may not hoist a load
   * above a store to a y that may alias x: one load in flight per thread left the pass far from
   * the copy rate, bench/results/ops_cuda_1xh200.txt, 9cebfc8), the
   * last rows one by one. Each element's arithmetic is unchanged: same bits. */
  while (p < rows) {
    const int nb = p + (PASS_BATCH - 1) * step < rows ? PASS_BATCH : 1;
    opc_pack<T, N> v[PASS_BATCH];
#pragma unroll
    for (int u = 0; u < PASS_BATCH; u++)
      if (u < nb) v[u] = opc_load<T, N>(x + off + (p + u * step) * C);
#pragma unroll
    for (int u = 0; u < PASS_BATCH; u++)
      if (u < nb) {
        opc_pack<T, N> out;
        for (int k = 0; k < N; k++) {
          float t = fmaf(opc_ld(v[u].v[k]) - m[k], a[k], b[k]);
          out.v[k] = opc_st<T>((relu && !(t > 0.f)) ? 0.f : t);
        }
        opc_store<T, N>(y + yoff + (p + u * step) * ldy, out);
      }
    p += nb * step;
  }
}

/* affine_kernel over n images of h x w (BatchNorm: one statistic per channel) and the 2x2
 * max-pool of its output: a thread takes one pooled pixel's 2x2 window (its 4 rows' loads in
 * flight together, as PASS_BATCH), writes the 4 outputs, and pools them as maxpool_fwd_kernel
 * pools what it reads back (strict >, ties to the first; the rounded values): the same bits in
 * y, pooled and arg as the apply followed by the pool, one read of x less. */
template <typename T, int N>
__global__ void affine_pool_kernel(const T *x, int h, int w, int C, size_t rows, int gb, int r,
                                   const double *mean, const double *inv, const T *gamma,
                                   const T *beta, int relu, T *y, size_t ldy, T *pooled,
                                   uint8_t *arg)
{
  const int gi = threadIdx.x % gb, row = threadIdx.x / gb, g = blockIdx.x * gb + gi;
  if (g * N >= C) return;
  float m[N], a[N], b[N];
  for (int k = 0; k < N; k++) {
    int c = g * N + k;
    m[k] = (float)mean[c];
    a[k] = (float)((double)opc_ld(gamma[c]) * inv[c]);
    b[k] = opc_ld(beta[c]);
  }
  const int ho = h / 2, wo = w / 2;
  for (size_t q = (size_t)blockIdx.y * r + row; q < rows; q += (size_t)gridDim.y * r) {
    const size_t s = q / ((size_t)ho * wo), oy = q / wo % ho, ox = q % wo;
    const size_t p00 = (s * h + 2 * oy) * w + 2 * ox; /* the window's first pixel */
    const size_t px[4] = {p00, p00 + 1, p00 + w, p00 + w + 1};
    opc_pack<T, N> v[4];
#pragma unroll
    for (int j = 0; j < 4; j++) v[j] = opc_load<T, N>(x + px[j] * C + (size_t)g * N);
    opc_pack<T, N> best;
    float bv[N];
    uint8_t bi[N];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      opc_pack<T, N> out;
      for (int k = 0; k < N; k++) {
        float t = fmaf(opc_ld(v[j].v[k]) - m[k], a[k], b[k]);
        out.v[k] = opc_st<T>((relu && !(t > 0.f)) ? 0.f : t);
        float o = opc_ld(out.v[k]);
        if (j == 0 || o > bv[k]) { /* strict >: ties go to the first */
          bv[k] = o;
          best.v[k] = out.v[k];
          bi[k] = (uint8_t)j;
        }
      }
      opc_store<T, N>(y + px[j] * ldy + (size_t)g * N, out);
    }
    opc_store<T, N>(pooled + q * C + (size_t)g * N, best);
    for (int k = 0; k < N; k++) arg[q * C + (size_t)g * N + k] = bi[k];
  }
}

/* dx = α g + β + γ (x - mean) per channel (and sample for GN):
 *   BN: α = gamma invstd, β = -α Σg/n, γ = -α invstd Σg·x̂/n  (sums over the batch, n = count)
 *   GN: α = gamma invstd, β = -invstd a1, γ = -invstd² a2     (a1, a2 per sample and group) */
template <typename T, int N, int MK, int KC, bool PK>
__global__ void bwd_apply_kernel(const T *dy, relu_mask<T> mk, const T *x, size_t rows, int C,
                                 int gb, int r, const double *mean, const double *inv, int gs,
                                 int cg, const T *gamma, const double *sums, const double *count,
                                 const double *a12, int nzg, T *dx, dy_head<T> hd)
{
  constexpr int KK = KC ? KC : 4;
  __shared__ __align__(16) float hs[head_smem_floats<N, KC>()];
  const int gi = threadIdx.x % gb, row = threadIdx.x / gb, g = blockIdx.x * gb + gi;
  if constexpr (KC > 0) head_smem<T, N, KK>(hd, C, gb, hs); /* before any thread leaves */
  if (g * N >= C) return;
  const float *hw = hs + gi * N * KK;
  const size_t z = blockIdx.z;
  const T *mask = mk.y;
  float m[N], al[N], be[N], ga[N], ma[N], mb[N];
  for (int k = 0; k < N; k++) {
    int c = g * N + k;
    size_t j = z * gs + c / cg;
    double s = inv[j], alpha = (double)opc_ld(gamma[c]) * s;
    m[k] = (float)mean[j];
    al[k] = (float)alpha;
    ma[k] = MK == MASK_AFFINE ? (float)((double)opc_ld(mk.gamma[c]) * s) : 0.f;
    mb[k] = MK == MASK_AFFINE ? opc_ld(mk.beta[c]) : 0.f;
    if (a12) {
      be[k] = (float)(-s * a12[j]);
      ga[k] = (float)(-s * s * a12[nzg + j]);
    } else {
      double n = *count; /* the forward's (possibly all-reduced) element count */
      be[k] = (float)(-alpha * sums[c] / n);
      ga[k] = (float)(-alpha * s * sums[C + c] / n);
    }
  }
  const size_t off = z * rows * C + (size_t)g * N, step = (size_t)gridDim.y * r;
  size_t p = (size_t)blockIdx.y * r + row;
  /* BWD_BATCH rows at a time, every load before the stores (see affine_kernel); the last
   * rows one by one */
  while (p < rows) {
    const int nb = p + (BWD_BATCH - 1) * step < rows ? BWD_BATCH : 1;
    opc_pack<T, N> d[KC ? 1 : BWD_BATCH], v[BWD_BATCH], y[MK == MASK_Y ? BWD_BATCH : 1];
    opc_pack<T, KK> gk[KC ? BWD_BATCH : 1];
#pragma unroll
    for (int u = 0; u < BWD_BATCH; u++)
      if (u < nb) {
        if constexpr (KC > 0) gk[u] = head_row<T, KK, PK>(hd, z * rows + p + u * step);
        else d[u] = opc_load<T, N>(dy + off + (p + u * step) * C);
        v[u] = opc_load<T, N>(x + off + (p + u * step) * C);
        if (MK == MASK_Y) y[MK == MASK_Y ? u : 0] = opc_load<T, N>(mask + off + (p + u * step) * C);
      }
#pragma unroll
    for (int u = 0; u < BWD_BATCH; u++)
      if (u < nb) {
        opc_pack<T, N> out, du;
        if constexpr (KC > 0) du = head_dy<T, N, KK>(gk[u], hd.K, hw);
        else du = d[u];
        for (int k = 0; k < N; k++) {
          float xm = opc_ld(v[u].v[k]) - m[k];
          int dead = (MK == MASK_Y && !(opc_ld(y[MK == MASK_Y ? u : 0].v[k]) > 0.f)) ||
                     (MK == MASK_AFFINE && !(fmaf(xm, ma[k], mb[k]) > 0.f));
          float gr = dead ? 0.f : opc_ld(du.v[k]);
          out.v[k] = opc_st<T>(fmaf(al[k], gr, fmaf(ga[k], xm, be[k])));
        }
        opc_store<T, N>(dx + off + (p + u * step) * C, out);
      }
    p += nb * step;
  }
}

template <typename T, int N>
__global__ void bias_add_kernel(T *y, size_t rows, int C, int gb, int r, const T *bias)
{
  const int gi = threadIdx.x % gb, row = threadIdx.x / gb, g = blockIdx.x * gb + gi;
  if (g * N >= C) return;
  float b[N];
  for (int k = 0; k < N; k++) b[k] = opc_ld(bias[g * N + k]);
  T *yg = y + (size_t)g * N;
#pragma unroll 4
  for (size_t p = (size_t)blockIdx.y * r + row; p < rows; p += (size_t)gridDim.y * r) {
    opc_pack<T, N> v = opc_load<T, N>(yg + p * C);
    for (int k = 0; k < N; k++) v.v[k] = opc_st<T>(opc_ld(v.v[k]) + b[k]);
    opc_store<T, N>(yg + p * C, v);
  }
}

/* y rows ldy elements apart (ldy = C: packed; BatchNorm only may pass more, nz = 1). */
template <typename T>
static int affine(const ops_t *o, const T *x, size_t rows, int C, int nz, const double *mean,
                  const double *inv, int gs, int cg, const T *gamma, const T *beta, int relu,
                  T *y, size_t ldy)
{
  const int V = 16 / sizeof(T);
  int N = opc_vec_width(sizeof(T), C, x, y);
  if (ldy % V) N = 1; /* a row of y must start on a vector boundary too */
  int fit = N == V ? fit_blocks<affine_kernel<T, V>>() : fit_blocks<affine_kernel<T, 1>>();
  opc_geo_t g = opc_geometry(o, rows, C, N, nz, PASS_BATCH, (size_t)-1, fit);
  cudaStream_t st = opc_ctx(o)->stream;
  if (N == V)
    affine_kernel<T, V><<<g.grid, g.block, 0, st>>>(x, rows, C, g.gb, g.r, mean, inv, gs, cg,
                                                    gamma, beta, relu, y, ldy);
  else
    affine_kernel<T, 1><<<g.grid, g.block, 0, st>>>(x, rows, C, g.gb, g.r, mean, inv, gs, cg,
                                                    gamma, beta, relu, y, ldy);
  OPC_LAUNCHED(o, "normalisation apply");
  return 0;
}

/* The kernel for the mask's kind (specialised like the backward statistics: no registers for
 * the other kinds' operands), on the geometry its register count allows. */
template <typename T, int N, int MK, int KC = 0, bool PK = false>
static void bwd_apply_as(const ops_t *o, const T *dy, relu_mask<T> mk, const T *x, size_t rows,
                         int C, int nz, const double *mean, const double *inv, int gs, int cg,
                         const T *gamma, const double *sums, const double *count,
                         const double *a12, int nzg, T *dx, dy_head<T> hd)
{
  opc_geo_t g = opc_geometry(o, rows, C, N, nz, PASS_BATCH, (size_t)-1,
                             fit_blocks<bwd_apply_kernel<T, N, MK, KC, PK>>());
  bwd_apply_kernel<T, N, MK, KC, PK><<<g.grid, g.block, 0, opc_ctx(o)->stream>>>(
      dy, mk, x, rows, C, g.gb, g.r, mean, inv, gs, cg, gamma, sums, count, a12, nzg, dx, hd);
}

template <typename T, int N>
static void bwd_apply_run(const ops_t *o, int mkind, const T *dy, relu_mask<T> mk, const T *x,
                          size_t rows, int C, int nz, const double *mean, const double *inv,
                          int gs, int cg, const T *gamma, const double *sums, const double *count,
                          const double *a12, int nzg, T *dx, dy_head<T> hd)
{
  const int kc = hd.g ? head_kc(hd.K) : 0; /* a head: the affine mask (head_check) */
  if constexpr (N > 1) {
    if (kc == 4 && head_packs<T>(hd))
      return bwd_apply_as<T, N, MASK_AFFINE, 4, true>(o, dy, mk, x, rows, C, nz, mean, inv, gs, cg,
                                                      gamma, sums, count, a12, nzg, dx, hd);
    if (kc == 8 && head_packs<T>(hd))
      return bwd_apply_as<T, N, MASK_AFFINE, 8, true>(o, dy, mk, x, rows, C, nz, mean, inv, gs, cg,
                                                      gamma, sums, count, a12, nzg, dx, hd);
  }
  if (kc == 4)
    bwd_apply_as<T, N, MASK_AFFINE, 4>(o, dy, mk, x, rows, C, nz, mean, inv, gs, cg, gamma, sums,
                                       count, a12, nzg, dx, hd);
  else if (kc == 8)
    bwd_apply_as<T, N, MASK_AFFINE, 8>(o, dy, mk, x, rows, C, nz, mean, inv, gs, cg, gamma, sums,
                                       count, a12, nzg, dx, hd);
  else if (mkind == MASK_Y)
    bwd_apply_as<T, N, MASK_Y>(o, dy, mk, x, rows, C, nz, mean, inv, gs, cg, gamma, sums, count,
                               a12, nzg, dx, hd);
  else if (mkind == MASK_AFFINE)
    bwd_apply_as<T, N, MASK_AFFINE>(o, dy, mk, x, rows, C, nz, mean, inv, gs, cg, gamma, sums,
                                    count, a12, nzg, dx, hd);
  else
    bwd_apply_as<T, N, MASK_NONE>(o, dy, mk, x, rows, C, nz, mean, inv, gs, cg, gamma, sums,
                                  count, a12, nzg, dx, hd);
}

template <typename T>
static int bwd_apply(const ops_t *o, const T *dy, relu_mask<T> mk, const T *x, size_t rows, int C,
                     int nz, const double *mean, const double *inv, int gs, int cg,
                     const T *gamma, const double *sums, const double *count,
                     const double *a12, int nzg, T *dx, dy_head<T> hd = dy_head<T>{NULL, NULL, 0})
{
  if (head_check<T>(o, hd, mk, C)) return -1;
  /* 4 channels per access (8 bytes of bf16): 16 bytes held 6 x 8 per-channel constants per
   * thread (86 registers, 2 blocks per SM); 4 channels leave room for 3 and more rows in flight */
  const int V = 4;
  const T *mask = mk.y;
  const uintptr_t addr = (uintptr_t)dy | (uintptr_t)mask | (uintptr_t)x | (uintptr_t)dx;
  int N = C % V || addr % (V * sizeof(T)) ? 1 : V;
  const int mkind = mk.y ? MASK_Y : mk.gamma ? MASK_AFFINE : MASK_NONE;
  if (N == V)
    bwd_apply_run<T, V>(o, mkind, dy, mk, x, rows, C, nz, mean, inv, gs, cg, gamma, sums, count,
                        a12, nzg, dx, hd);
  else
    bwd_apply_run<T, 1>(o, mkind, dy, mk, x, rows, C, nz, mean, inv, gs, cg, gamma, sums, count,
                        a12, nzg, dx, hd);
  OPC_LAUNCHED(o, "normalisation backward apply");
  return 0;
}

/* ---- BatchNorm ---- */

template <typename T>
static int bn_stats_t(const ops_t *o, const void *x, size_t P, int C, double *stats, bn_fin_t fin)
{
  int splits = launch_stats<T>(o, NULL, mask_of<T>(NULL), (const T *)x, P, C, 1, NULL, NULL, 0, 1, 0);
  if (splits < 0) return -1;
  return reduce_final<T>(o, 1, splits, C, (double)P, stats, NULL, NULL, 0, 0, NULL, 0, 0, NULL,
                         fin);
}

int opc_bn_stats(const ops_t *o, const void *x, size_t P, int C, double *stats)
{
  OPC_DISPATCH(o, bn_stats_t, o, x, P, C, stats, bn_fin_t{0, 0, NULL, NULL, NULL});
}

int opc_bn_stats_finalize(const ops_t *o, const void *x, size_t P, int C, double eps,
                          double momentum, float *running_mean, float *running_var,
                          double *stats, double *saved)
{
  OPC_DISPATCH(o, bn_stats_t, o, x, P, C, stats,
               bn_fin_t{eps, momentum, running_mean, running_var, saved});
}

__global__ void bn_finalize_kernel(const double *stats, int C, double eps, double momentum,
                                   float *rm, float *rv, double *saved)
{
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  double n = stats[2 * C];
  if (c == 0) saved[2 * C] = n;
  if (c >= C) return;
  bn_finalize_one(c, C, n, stats[c], stats[C + c], bn_fin_t{eps, momentum, rm, rv, saved});
}

int opc_bn_finalize(const ops_t *o, const double *stats, int C, double eps, double momentum,
                    float *running_mean, float *running_var, double *saved)
{
  bn_finalize_kernel<<<(C + 127) / 128, 128, 0, opc_ctx(o)->stream>>>(
      stats, C, eps, momentum, running_mean, running_var, saved);
  OPC_LAUNCHED(o, "BatchNorm finalize");
  return 0;
}

__global__ void bn_from_running_kernel(const float *rm, const float *rv, int C, double eps,
                                       double *saved)
{
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c == 0) saved[2 * C] = 0;
  if (c >= C) return;
  saved[c] = rm[c];
  saved[C + c] = 1.0 / sqrt((double)rv[c] + eps);
}

int opc_bn_saved_from_running(const ops_t *o, const float *running_mean,
                              const float *running_var, int C, double eps, double *saved)
{
  bn_from_running_kernel<<<(C + 127) / 128, 128, 0, opc_ctx(o)->stream>>>(
      running_mean, running_var, C, eps, saved);
  OPC_LAUNCHED(o, "BatchNorm eval statistics");
  return 0;
}

template <typename T>
static int bn_apply_t(const ops_t *o, const void *x, size_t P, int C, const double *saved,
                      const void *gamma, const void *beta, int relu, void *y, size_t ldy)
{
  if (ldy < (size_t)C)
    return opc_fail(o, "BatchNorm output rows %zu elements apart: fewer than its %d channels",
                    ldy, C);
  if (P == 0) return 0;
  return affine<T>(o, (const T *)x, P, C, 1, saved, saved + C, 0, 1, (const T *)gamma,
                   (const T *)beta, relu, (T *)y, ldy);
}

int opc_bn_apply(const ops_t *o, const void *x, size_t P, int C, const double *saved,
                 const void *gamma, const void *beta, int relu, void *y)
{
  OPC_DISPATCH(o, bn_apply_t, o, x, P, C, saved, gamma, beta, relu, y, (size_t)C);
}

int opc_bn_apply_ld(const ops_t *o, const void *x, size_t P, int C, const double *saved,
                    const void *gamma, const void *beta, int relu, void *y, size_t ldy)
{
  OPC_DISPATCH(o, bn_apply_t, o, x, P, C, saved, gamma, beta, relu, y, ldy);
}

template <typename T>
static int bn_apply_pool_t(const ops_t *o, const void *xv, int n, int h, int w, int C,
                           const double *saved, const void *gamma, const void *beta, int relu,
                           void *yv, size_t ldy, void *pooled, uint8_t *arg)
{
  if (n < 0 || h < 0 || w < 0 || h % 2 || w % 2)
    return opc_fail(o, "BatchNorm with a 2x2 max-pool over %d images of %dx%d: the size must be "
                    "even", n, h, w);
  if (ldy < (size_t)C)
    return opc_fail(o, "BatchNorm output rows %zu elements apart: fewer than its %d channels",
                    ldy, C);
  const size_t rows = (size_t)n * (h / 2) * (w / 2);
  if (rows == 0) return 0;
  const int V = 16 / sizeof(T);
  const T *x = (const T *)xv;
  T *y = (T *)yv;
  int N = opc_vec_width(sizeof(T), C, x, y, pooled);
  if (ldy % V) N = 1; /* a row of y must start on a vector boundary too */
  int fit = N == V ? fit_blocks<affine_pool_kernel<T, V>>() : fit_blocks<affine_pool_kernel<T, 1>>();
  opc_geo_t g = opc_geometry(o, rows, C, N, 1, 1, (size_t)-1, fit);
  cudaStream_t st = opc_ctx(o)->stream;
  if (N == V)
    affine_pool_kernel<T, V><<<g.grid, g.block, 0, st>>>(
        x, h, w, C, rows, g.gb, g.r, saved, saved + C, (const T *)gamma, (const T *)beta, relu, y,
        ldy, (T *)pooled, arg);
  else
    affine_pool_kernel<T, 1><<<g.grid, g.block, 0, st>>>(
        x, h, w, C, rows, g.gb, g.r, saved, saved + C, (const T *)gamma, (const T *)beta, relu, y,
        ldy, (T *)pooled, arg);
  OPC_LAUNCHED(o, "BatchNorm apply with the max-pool");
  return 0;
}

int opc_bn_apply_pool(const ops_t *o, const void *x, int n, int h, int w, int C,
                      const double *saved, const void *gamma, const void *beta, int relu, void *y,
                      size_t ldy, void *pooled, uint8_t *arg)
{
  OPC_DISPATCH(o, bn_apply_pool_t, o, x, n, h, w, C, saved, gamma, beta, relu, y, ldy, pooled,
               arg);
}

template <typename T>
static int bn_bwd_reduce_t(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x,
                           size_t P, int C, const double *saved, double *sums, void *dgamma,
                           void *dbeta, int acc)
{
  if (mask_check<T>(o, relu, "BatchNorm")) return -1;
  int splits = launch_stats<T>(o, (const T *)dy, mask_of<T>(relu), (const T *)x, P, C, 1, saved,
                               saved + C, 0, 1, 0);
  if (splits < 0) return -1;
  return reduce_final<T>(o, 1, splits, C, -1, sums, (T *)dbeta, (T *)dgamma, acc, 0, NULL, 0, 0,
                         NULL);
}

int opc_bn_bwd_reduce(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x,
                      size_t P, int C, const double *saved, double *sums, void *dgamma,
                      void *dbeta, int acc)
{
  OPC_DISPATCH(o, bn_bwd_reduce_t, o, dy, relu, x, P, C, saved, sums, dgamma, dbeta, acc);
}

template <typename T>
static int bn_bwd_apply_t(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x,
                          size_t P, int C, const double *saved, const double *sums,
                          const void *gamma, void *dx)
{
  if (mask_check<T>(o, relu, "BatchNorm")) return -1;
  /* A zero forward count (CPU: an error) gives non-finite dx here: checking it would need a
   * read-back, and the count is only zero when P is zero on every rank. */
  if (P == 0) return 0;
  return bwd_apply<T>(o, (const T *)dy, mask_of<T>(relu), (const T *)x, P, C, 1, saved,
                      saved + C, 0, 1, (const T *)gamma, sums, saved + 2 * C, NULL, 0, (T *)dx);
}

int opc_bn_bwd_apply(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x,
                     size_t P, int C, const double *saved, const double *sums, const void *gamma,
                     void *dx)
{
  OPC_DISPATCH(o, bn_bwd_apply_t, o, dy, relu, x, P, C, saved, sums, gamma, dx);
}

/* bn_bwd_reduce / bn_bwd_apply with dy formed from the 1x1 head (dy_head): the same kernels */
template <typename T>
static int bn_bwd_reduce_1x1_t(const ops_t *o, const void *g, const void *w, int K,
                               const ops_relu_t *relu, const void *x, size_t P, int C,
                               const double *saved, double *sums, void *dgamma, void *dbeta,
                               int acc)
{
  if (!g) return opc_fail(o, "BatchNorm backward through a 1x1 head: no output gradient (g)");
  if (mask_check<T>(o, relu, "BatchNorm")) return -1;
  const dy_head<T> hd = {(const T *)g, (const T *)w, K};
  int splits = launch_stats<T>(o, NULL, mask_of<T>(relu), (const T *)x, P, C, 1, saved,
                               saved + C, 0, 1, 0, hd);
  if (splits < 0) return -1;
  return reduce_final<T>(o, 1, splits, C, -1, sums, (T *)dbeta, (T *)dgamma, acc, 0, NULL, 0, 0,
                         NULL);
}

int opc_bn_bwd_reduce_1x1(const ops_t *o, const void *g, const void *w, int K,
                          const ops_relu_t *relu, const void *x, size_t P, int C,
                          const double *saved, double *sums, void *dgamma, void *dbeta, int acc)
{
  OPC_DISPATCH(o, bn_bwd_reduce_1x1_t, o, g, w, K, relu, x, P, C, saved, sums, dgamma, dbeta,
               acc);
}

/* The backward reduce's final sums from partials another kernel wrote to the scratch in
 * launch_stats's layout (one sample: splits x [Σdy | Σdy·x̂] over C channels, f64): sums and
 * dgamma/dbeta as bn_bwd_reduce_1x1 writes them (head_train_cuda.cu's pass). */
template <typename T>
static int bn_bwd_final_t(const ops_t *o, int splits, int C, double *sums, void *dgamma,
                          void *dbeta, int acc)
{
  return reduce_final<T>(o, 1, splits, C, -1, sums, (T *)dbeta, (T *)dgamma, acc, 0, NULL, 0, 0,
                         NULL);
}

int opc_bn_bwd_final(const ops_t *o, int splits, int C, double *sums, void *dgamma, void *dbeta,
                     int acc)
{
  if ((size_t)splits * 2 * C > OPC_SCRATCH_DOUBLES)
    return opc_fail(o, "%d partials of %d channels exceed the reduction scratch", splits, C);
  OPC_DISPATCH(o, bn_bwd_final_t, o, splits, C, sums, dgamma, dbeta, acc);
}

template <typename T>
static int bn_bwd_apply_1x1_t(const ops_t *o, const void *g, const void *w, int K,
                              const ops_relu_t *relu, const void *x, size_t P, int C,
                              const double *saved, const double *sums, const void *gamma,
                              void *dx)
{
  if (!g) return opc_fail(o, "BatchNorm backward through a 1x1 head: no output gradient (g)");
  if (mask_check<T>(o, relu, "BatchNorm")) return -1;
  if (P == 0) return 0;
  const dy_head<T> hd = {(const T *)g, (const T *)w, K};
  return bwd_apply<T>(o, NULL, mask_of<T>(relu), (const T *)x, P, C, 1, saved, saved + C, 0, 1,
                      (const T *)gamma, sums, saved + 2 * C, NULL, 0, (T *)dx, hd);
}

int opc_bn_bwd_apply_1x1(const ops_t *o, const void *g, const void *w, int K,
                         const ops_relu_t *relu, const void *x, size_t P, int C,
                         const double *saved, const double *sums, const void *gamma, void *dx)
{
  OPC_DISPATCH(o, bn_bwd_apply_1x1_t, o, g, w, K, relu, x, P, C, saved, sums, gamma, dx);
}

/* ---- GroupNorm: the same kernels with one statistic per (sample, group) ---- */

template <typename T>
static int gn_fwd_t(const ops_t *o, const void *x, int n, size_t hw, int C, int G, double eps,
                    const void *gamma, const void *beta, int relu, void *y, double *saved)
{
  if (n == 0) return 0;
  const int cg = C / G;
  int splits = launch_stats<T>(o, NULL, mask_of<T>(NULL), (const T *)x, hw, C, n, NULL, NULL, 0, 1,
                               2 * (size_t)n * (C + G));
  if (splits < 0) return -1;
  /* saved = [means (n*G)][invstds (n*G)]: the final pass writes it directly */
  if (reduce_final<T>(o, n, splits, C, -1, NULL, NULL, NULL, 0, G, NULL, (double)hw * cg, eps,
                      saved))
    return -1;
  return affine<T>(o, (const T *)x, hw, C, n, saved, saved + (size_t)n * G, G, cg,
                   (const T *)gamma, (const T *)beta, relu, (T *)y, (size_t)C);
}

int opc_gn_fwd(const ops_t *o, const void *x, int n, size_t hw, int C, int G, double eps,
               const void *gamma, const void *beta, int relu, void *y, double *saved)
{
  if (G <= 0 || C % G)
    return opc_fail(o, "GroupNorm: %d channels do not split into %d groups", C, G);
  OPC_DISPATCH(o, gn_fwd_t, o, x, n, hw, C, G, eps, gamma, beta, relu, y, saved);
}

template <typename T>
static int gn_bwd_t(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x, int n,
                    size_t hw, int C, int G, const double *saved, const void *gamma, void *dx,
                    void *dgamma, void *dbeta, int acc)
{
  if (mask_check<T>(o, relu, "GroupNorm")) return -1;
  const int cg = C / G;
  const size_t ng = (size_t)n * G;
  if (n == 0) {
    if (!acc) {
      OPC_CUDA(o, cudaMemsetAsync(dgamma, 0, sizeof(T) * C, opc_ctx(o)->stream));
      OPC_CUDA(o, cudaMemsetAsync(dbeta, 0, sizeof(T) * C, opc_ctx(o)->stream));
    }
    return 0;
  }
  if (2 * ng + 2 * (size_t)n * C >= OPC_SCRATCH_DOUBLES / 2)
    return opc_fail(o, "GroupNorm backward: %d samples x %d channels exceed the scratch", n, C);
  double *a12 = opc_ctx(o)->scratch + OPC_SCRATCH_DOUBLES - 2 * ng; /* after the totals */
  int splits = launch_stats<T>(o, (const T *)dy, mask_of<T>(relu), (const T *)x, hw, C, n, saved,
                               saved + ng, G, cg, 2 * ng + 2 * (size_t)n * C);
  if (splits < 0) return -1;
  if (reduce_final<T>(o, n, splits, C, -1, NULL, (T *)dbeta, (T *)dgamma, acc, G,
                      (const T *)gamma, (double)hw * cg, 0, a12))
    return -1;
  return bwd_apply<T>(o, (const T *)dy, mask_of<T>(relu), (const T *)x, hw, C, n, saved,
                      saved + ng, G, cg, (const T *)gamma, NULL, NULL, a12, (int)ng, (T *)dx);
}

int opc_gn_bwd(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x, int n,
               size_t hw, int C, int G, const double *saved, const void *gamma, void *dx,
               void *dgamma, void *dbeta, int acc)
{
  if (G <= 0 || C % G)
    return opc_fail(o, "GroupNorm: %d channels do not split into %d groups", C, G);
  OPC_DISPATCH(o, gn_bwd_t, o, dy, relu, x, n, hw, C, G, saved, gamma, dx, dgamma, dbeta, acc);
}

/* ---- convolution biases ---- */

template <typename T>
static int channel_sum_t(const ops_t *o, const void *dy, size_t P, int C, void *db, int acc)
{
  int splits = launch_stats<T>(o, NULL, mask_of<T>(NULL), (const T *)dy, P, C, 1, NULL, NULL, 0, 1, 0);
  if (splits < 0) return -1;
  return reduce_final<T>(o, 1, splits, C, -1, NULL, (T *)db, NULL, acc, 0, NULL, 0, 0, NULL);
}

int opc_channel_sum(const ops_t *o, const void *dy, size_t P, int C, void *db, int acc)
{
  OPC_DISPATCH(o, channel_sum_t, o, dy, P, C, db, acc);
}

template <typename T>
static int bias_add_t(const ops_t *o, void *yv, size_t P, int C, const void *bv)
{
  const int V = 16 / sizeof(T);
  T *y = (T *)yv;
  const T *b = (const T *)bv;
  if (P == 0) return 0;
  int N = opc_vec_width(sizeof(T), C, y);
  opc_geo_t g = OPC_PASS_GEO(o, P, C, N, 1);
  cudaStream_t st = opc_ctx(o)->stream;
  if (N == V) bias_add_kernel<T, V><<<g.grid, g.block, 0, st>>>(y, P, C, g.gb, g.r, b);
  else bias_add_kernel<T, 1><<<g.grid, g.block, 0, st>>>(y, P, C, g.gb, g.r, b);
  OPC_LAUNCHED(o, "bias add");
  return 0;
}

int opc_bias_add(const ops_t *o, void *y, size_t P, int C, const void *b)
{
  OPC_DISPATCH(o, bias_add_t, o, y, P, C, b);
}
