/* head_train_cuda.cu — ops.h head_train_1x1 on the GPU: the U-Net's head (a 1x1 convolution to
 * a few classes, reading the last block's BatchNorm apply + ReLU), its softmax cross-entropy and
 * its backward down to that BatchNorm's reduce, in one pass over the head's input x. Apart,
 * those are four passes over x (conv1x1_fwd_bn, softmax_ce over the logits,
 * conv1x1_bwd_filter_bn, bn_bwd_reduce_1x1), each one bound by latency rather than by the bytes
 * it moves (bench/results/ncu_small_kernels_1xh100.txt). Everything a pixel needs is its own:
 * the loss's gradient divisor (the label count) is counted first (opc_loss_count) and the sums
 * are reduced after (opc_loss_final, opc_skinny_wgrad_final, opc_bn_bwd_final).
 *
 * Per pixel, on the L lanes that hold its channels (V = 16 bytes of them a lane, as the head's
 * few-output kernels in conv_skinny_cuda.cu lay them out):
 *   h = bn_apply(x) with ReLU                      the bits of norm_cuda.cu affine_kernel
 *   z = Σ_c h w + b, rounded to the dtype          sk_fwd's sums and butterfly, its bits
 *   g = softmax_ce's gradient of z                 loss_cuda.cu softmax_ce_kernel's arithmetic
 *   dw += g h, db += g                             (f32 a lane, as sk_wgrad_part)
 *   dy = Σ_k g w, rounded; masked where t <= 0     head_dy's bits (norm_cuda.cu)
 *   Σdy, Σdy·(x - mean) per channel                f32 over 32 pixels a lane, then f64 (the
 *                                                  second times invstd: Σdy·x̂)
 * so the logits and g are the separate ops' bits, and the sums those ops' values in another
 * fixed order. What bounds it is instruction issue (bench/results/ab_head_train_1xh100.txt: with
 * the lanes' weights and norm terms in registers, 184 a thread, 8 warps a multiprocessor issued
 * an instruction every 2.7 cycles a scheduler), so: the lanes' constants sit in shared memory
 * and registers are held to HT_MIN_BLOCKS blocks a multiprocessor; the class count is a
 * template parameter where it is the padded one (no guard on each product); the butterfly's
 * levels are predicated steps, not a loop; where a pixel has at least as many lanes as the
 * U-Net's 4 classes, its lanes split them (SPLIT): the butterfly's last levels leave each lane
 * one class's logit, and the softmax runs once a class instead of every class on every lane
 * (bench/results/ab_head_train_lean_1xh100.txt measures each step). The input arrives by
 * cp.async into a ring of HT_STAGES iterations a thread, HT_STAGES - 1 of them in flight while
 * one is computed. The grid: one wave of the blocks that fit, each a fixed range of pixels, so
 * the partials and their order depend only on the pixel count and the GPU. */
#include "config.h"

#include "kernels/ops_cuda.cuh"

#define HT_MIN_BLOCKS 8 /* blocks a multiprocessor the registers are held to: 16 warps (bf16, 4
                           classes split: 128 registers, no spills; 6 blocks: 145) */
#define HT_THREADS 64   /* a block; its slots: HT_THREADS / L pixels at a time */
#define HT_UNROLL 1    /* pixels a thread takes an iteration */
#define HT_STAGES 5    /* iterations whose pixels are in flight (cp.async into shared memory): the
                          one computed and the HT_STAGES - 1 after it */
#define HT_CHUNK 32    /* iterations summed in f32 before the f64 sums: 32 pixels a lane */
#define HT_MAX_V 8     /* channels a lane: 16 bytes of bf16 */

struct ht_args {
  const void *x, *gamma, *beta, *w, *b;
  const double *saved;
  const int32_t *labels;
  int ignore;
  double scale, norm_count;
  const unsigned long long *counted; /* [1]: the labels counted (opc_loss_count) */
  void *logits, *g;
  float *wpart;      /* nb x K x (cin + 1) */
  double *bnpart;    /* nb x 2 cin */
  double *losspart;  /* nb */
  size_t P, per;
  int cin, K, L, vout;
};

template <typename T, int V, int KC, bool FULL, bool SPLIT>
__global__ void __launch_bounds__(HT_THREADS, HT_MIN_BLOCKS) ht_pass(ht_args a)
{
  /* The block's reductions: per thread its channels' f64 sums ([j][thread]: consecutive
   * threads, consecutive words), later the warps' wgrad rows and loss sums. */
  __shared__ double dsum[2 * V][HT_THREADS];
  __shared__ float wred[HT_THREADS / 32][HT_MAX_V * 32 + 1];
  __shared__ double lred[HT_THREADS / 32];
  /* The ring of the pixels in flight: each thread copies its own 16 bytes and label of an
   * iteration into its own slots and reads only those, so no barrier orders them (the copy
   * group's wait makes a thread's own copies visible to it). */
  __shared__ __align__(16) opc_pack<T, V> xs[HT_STAGES][HT_UNROLL][HT_THREADS];
  __shared__ int32_t xl[HT_STAGES][HT_UNROLL][HT_THREADS];
  const T *x = (const T *)a.x;
  /* FULL: K = KC (the U-Net's 4 classes), so every guard on k < K is known true here */
  const int cin = a.cin, K = FULL ? KC : a.K, L = a.L, nc = cin / V;
  const int tid = threadIdx.x, l = tid & (L - 1), warp = tid >> 5;
  const int slots = HT_THREADS / L;
  const bool lane_on = l < nc; /* lanes past the pixel's chunks hold zeros */
  /* The lanes' constants (the head's weights; the norm's mean, gamma invstd and beta) in shared
   * memory, read where they are used: in registers (a lane's 8 channels x 7 terms) they held
   * the pass to 4 blocks a multiprocessor. Laid out so that a warp's 16-byte read of one
   * channel j is one wavefront (a pixel's lanes on consecutive addresses, the warp's pixels on
   * the same ones): the weights [j][lane][k], the norm's terms [term][j / 4][lane][j % 4]. */
  __shared__ __align__(16) float cw[V][32][KC];
  __shared__ __align__(16) float cn[3][V / 4][32][4];
  for (int i = tid; i < 32 * V; i += HT_THREADS) {
    const int ln = i / V, j = i % V, c = ln * V + j;
    const bool on = ln < nc;
    cn[0][j / 4][ln][j % 4] = on ? (float)a.saved[c] : 0.f;
    cn[1][j / 4][ln][j % 4] =
        on ? (float)((double)opc_ld(((const T *)a.gamma)[c]) * a.saved[cin + c]) : 0.f;
    cn[2][j / 4][ln][j % 4] = on ? opc_ld(((const T *)a.beta)[c]) : 0.f;
#pragma unroll
    for (int k = 0; k < KC; k++)
      cw[j][ln][k] = on && k < K ? opc_ld(((const T *)a.w)[(size_t)k * cin + c]) : 0.f;
  }
  float rbias[KC];
#pragma unroll
  for (int k = 0; k < KC; k++) rbias[k] = a.b && k < K ? opc_ld(((const T *)a.b)[k]) : 0.f;
  /* SPLIT: the bias of the lane's class */
  const float cbias = a.b && (l & (KC - 1)) < K ? opc_ld(((const T *)a.b)[l & (KC - 1)]) : 0.f;
  __syncthreads(); /* the constants are in */
  /* the lane's term t of its V channels; its weights of channel j */
  auto ld_terms = [&](int t, float(&v)[V]) {
#pragma unroll
    for (int q = 0; q < V / 4; q++) {
      const float4 f = *reinterpret_cast<const float4 *>(&cn[t][q][l][0]);
      v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
    }
  };
  auto ld_w = [&](int j, float(&v)[KC]) {
#pragma unroll
    for (int q = 0; q < KC / 4; q++) {
      const float4 f = *reinterpret_cast<const float4 *>(&cw[j][l][4 * q]);
      v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
    }
  };
  const double norm = a.norm_count > 0 ? a.norm_count : (double)a.counted[1];
  const float coef = norm > 0 ? (float)(a.scale / norm) : 0.f;
#pragma unroll
  for (int j = 0; j < 2 * V; j++) dsum[j][tid] = 0;
  float aw[KC][V], ab[KC];
#pragma unroll
  for (int k = 0; k < KC; k++) {
    ab[k] = 0.f;
#pragma unroll
    for (int j = 0; j < V; j++) aw[k][j] = 0.f;
  }
  double loss = 0;
  const size_t p0 = (size_t)blockIdx.x * a.per, p1 = p0 + a.per < a.P ? p0 + a.per : a.P;
  const size_t wslot0 = (size_t)(tid & ~31) / L; /* the warp's first slot */
  const int wslot = (tid & 31) / L;              /* the thread's slot in its warp */
  /* The iterations depend on the warp's first pixel only: whole warps shuffle together. */
  const size_t base0 = p0 + wslot0, step = (size_t)HT_UNROLL * slots;
  const size_t nit = base0 < p1 ? (p1 - base0 + step - 1) / step : 0;
  /* iteration q's pixels into stage q % HT_STAGES (zeros and no label past the range), one copy
   * group an iteration, empty past the last */
  auto issue = [&](size_t q) {
    const int s = (int)(q % HT_STAGES);
#pragma unroll
    for (int u = 0; u < HT_UNROLL; u++) {
      const size_t p = base0 + q * step + wslot + (size_t)u * slots;
      const bool in = q < nit && p < p1;
      opc_copy16((uint32_t)__cvta_generic_to_shared(&xs[s][u][tid]),
                 in && lane_on ? (const void *)(x + p * cin + (size_t)l * V) : a.x,
                 in && lane_on ? 16 : 0);
      if (in && a.labels)
        opc_copy4((uint32_t)__cvta_generic_to_shared(&xl[s][u][tid]), a.labels + p);
    }
    opc_copy_commit();
  };
#pragma unroll
  for (int q = 0; q < HT_STAGES - 1; q++) issue((size_t)q);
  float sa[V], sb[V];
#pragma unroll
  for (int j = 0; j < V; j++) sa[j] = sb[j] = 0.f;
#pragma unroll 1
  for (size_t it = 0; it < nit; it++) {
    const size_t base = base0 + it * step;
    opc_copy_wait<HT_STAGES - 2>(); /* iteration it's group is in */
    const int s = (int)(it % HT_STAGES);
    opc_pack<T, V> v[HT_UNROLL];
    int32_t lab[HT_UNROLL];
#pragma unroll
    for (int u = 0; u < HT_UNROLL; u++) {
      const bool in = base + wslot + (size_t)u * slots < p1;
      v[u] = xs[s][u][tid];
      lab[u] = in && a.labels ? xl[s][u][tid] : a.ignore;
    }
    /* the stage iteration it - 1 read (its values used before this point) takes the next one */
    issue(it + HT_STAGES - 1);
    {
#pragma unroll
      for (int u = 0; u < HT_UNROLL; u++) {
        const size_t p = base + wslot + (size_t)u * slots;
        const bool in = p < p1;
        /* the prologue: h, and where the ReLU passes (t > 0) */
        /* h kept rounded to T (its exact value, half the registers in 16-bit types) and the ReLU's
         * pass as one bit a channel: registers for more warps a multiprocessor */
        opc_pack<T, V> hp;
        float xm[V];
        unsigned onm = 0;
        float rm[V], ra[V], rb[V];
        ld_terms(0, rm);
        ld_terms(1, ra);
        ld_terms(2, rb);
#pragma unroll
        for (int j = 0; j < V; j++) {
          xm[j] = opc_ld(v[u].v[j]) - rm[j];
          const float t = fmaf(xm[j], ra[j], rb[j]);
          onm |= (t > 0.f ? 1u : 0u) << j;
          hp.v[j] = opc_st<T>(t > 0.f ? t : 0.f);
        }
        /* the logits: the lane's share, then the pixel's lanes by a fixed butterfly */
        float z[KC];
#pragma unroll
        for (int k = 0; k < KC; k++) z[k] = 0.f;
        if (lane_on)
#pragma unroll
          for (int j = 0; j < V; j++) {
            float wj[KC];
            ld_w(j, wj);
#pragma unroll
            for (int k = 0; k < KC; k++)
              if (k < K) z[k] += opc_ld(hp.v[j]) * wj[k];
          }
        const int32_t lb = lab[u];
        const bool use = in && a.labels && lb != a.ignore && lb >= 0 && lb < K;
        float gv[KC];
        if (SPLIT) {
          /* The pixel's lanes split the classes: the butterfly's last log2(KC) levels halve the
           * classes a lane keeps (it sends its partner the half the partner keeps), so lane l
           * ends with class l % KC's logit, the same bits as the full butterfly's (each level
           * adds the same two values); the softmax is then one class a lane, its terms gathered
           * by shuffles in class order (the same sums, the same bits), not every class on every
           * lane. */
#pragma unroll
          for (int lv = 0; lv < 5; lv++)
            if ((16 >> lv) < L && (16 >> lv) >= KC)
#pragma unroll
              for (int k = 0; k < KC; k++) z[k] += __shfl_xor_sync(0xffffffffu, z[k], 16 >> lv);
#pragma unroll
          for (int lv = 0; lv < 3; lv++) { /* h = KC / 2 .. 1: z[0 .. 2h) the classes kept */
            const int h = (KC / 2) >> lv;
            const bool up = l & h;
#pragma unroll
            for (int k = 0; k < KC / 2; k++)
              if (k < h) {
                const float keep = up ? z[h + k] : z[k], send = up ? z[k] : z[h + k];
                z[k] = keep + __shfl_xor_sync(0xffffffffu, send, h);
              }
          }
          const int cl = l & (KC - 1); /* the lane's class */
          const T zs1 = opc_st<T>(z[0] + cbias);
          const float zc = opc_ld(zs1); /* the stored logit, as softmax_ce reads it */
          float zmax = zc;               /* max is exact: any order gives the same value */
#pragma unroll
          for (int lv = 0; (1 << lv) < KC; lv++)
            zmax = fmaxf(zmax, __shfl_xor_sync(0xffffffffu, zmax, 1 << lv));
          const float e = expf(zc - zmax);
          float se = 0.f;
#pragma unroll
          for (int k = 0; k < KC; k++) se += __shfl_sync(0xffffffffu, e, k, L);
          const float lse = zmax + logf(se);
          const float zl = __shfl_sync(0xffffffffu, zc, use ? lb : 0, L);
          if (use && l == 0) loss += (double)lse - (double)zl;
          const T gs1 =
              opc_st<T>(use ? coef * (expf(zc - lse) - (cl == lb ? 1.f : 0.f)) : 0.f);
          if (in && l < KC) {
            ((T *)a.logits)[p * KC + cl] = zs1;
            ((T *)a.g)[p * KC + cl] = gs1;
          }
          const float gc = opc_ld(gs1);
#pragma unroll
          for (int k = 0; k < KC; k++) gv[k] = __shfl_sync(0xffffffffu, gc, k, L);
        } else {
#pragma unroll
          for (int k = 0; k < KC; k++) {
            if (k >= K) break;
            /* offsets L / 2 .. 1 in that order, each level a predicated step (no loop on L) */
#pragma unroll
            for (int lv = 0; lv < 5; lv++)
              if ((16 >> lv) < L) z[k] += __shfl_xor_sync(0xffffffffu, z[k], 16 >> lv);
          }
          opc_pack<T, KC> zs;
#pragma unroll
          for (int k = 0; k < KC; k++) {
            zs.v[k] = opc_st<T>(z[k] + rbias[k]);
            z[k] = opc_ld(zs.v[k]); /* the stored logit, as softmax_ce reads it */
          }
          /* the loss and its gradient, softmax_ce_kernel's arithmetic */
          float zmax = z[0], zl = 0.f;
#pragma unroll
          for (int k = 1; k < KC; k++)
            if (k < K && z[k] > zmax) zmax = z[k];
          float se = 0.f;
#pragma unroll
          for (int k = 0; k < KC; k++)
            if (k < K) se += expf(z[k] - zmax);
          const float lse = zmax + logf(se);
#pragma unroll
          for (int k = 0; k < KC; k++)
            if (k == lb) zl = z[k];
          if (use && l == 0) loss += (double)lse - (double)zl;
          opc_pack<T, KC> gs;
#pragma unroll
          for (int k = 0; k < KC; k++) {
            gs.v[k] = opc_st<T>(k < K && use ? coef * (expf(z[k] - lse) - (k == lb ? 1.f : 0.f))
                                             : 0.f);
            gv[k] = opc_ld(gs.v[k]);
          }
          if (in && l == 0) {
            if (a.vout) {
              opc_store<T, KC>((T *)a.logits + p * KC, zs);
              opc_store<T, KC>((T *)a.g + p * KC, gs);
            } else {
#pragma unroll
              for (int k = 0; k < KC; k++)
                if (k < K) {
                  ((T *)a.logits)[p * K + k] = zs.v[k];
                  ((T *)a.g)[p * K + k] = gs.v[k];
                }
            }
          }
        }
        if (!lane_on) continue;
        /* the head's weight gradient on h, and the BatchNorm's reduce on dy = g w */
#pragma unroll
        for (int k = 0; k < KC; k++) {
          if (k >= K) break;
          ab[k] += gv[k];
#pragma unroll
          for (int j = 0; j < V; j++) aw[k][j] += gv[k] * opc_ld(hp.v[j]);
        }
#pragma unroll
        for (int j = 0; j < V; j++) {
          float s = 0.f, wj[KC];
          ld_w(j, wj);
#pragma unroll
          for (int k = 0; k < KC; k++)
            if (k < K) s += gv[k] * wj[k];
          const float gr = in && (onm >> j & 1u) ? opc_ld(opc_st<T>(s)) : 0.f;
          sa[j] += gr;
          sb[j] = fmaf(gr, xm[j], sb[j]); /* x̂ = xm invstd: invstd applied in f64 below */
        }
      }
    }
    if ((it + 1) % HT_CHUNK == 0 || it + 1 == nit) { /* a chunk's f32 sums into f64 */
#pragma unroll
      for (int j = 0; j < V; j++) {
        dsum[j][tid] += sa[j];
        dsum[V + j][tid] += lane_on ? (double)sb[j] * a.saved[cin + l * V + j] : 0.0;
        sa[j] = sb[j] = 0.f;
      }
    }
  }
  opc_copy_wait<0>(); /* the empty groups past the end, before the block leaves */
  float *wpart = a.wpart + (size_t)blockIdx.x * K * (cin + 1);
  double *bnpart = a.bnpart + (size_t)blockIdx.x * 2 * cin;
  /* the weight gradient: a warp's slots (lanes L apart hold the same channels) by a butterfly,
   * then the warps in order, one row k at a time (sk_wgrad_part's reduction) */
  const int nw = HT_THREADS / 32;
#pragma unroll
  for (int k = 0; k < KC; k++) {
    if (k >= K) break;
    for (int off = L; off < 32; off <<= 1) {
      ab[k] += __shfl_xor_sync(0xffffffffu, ab[k], off);
#pragma unroll
      for (int j = 0; j < V; j++) aw[k][j] += __shfl_xor_sync(0xffffffffu, aw[k][j], off);
    }
    if ((tid & 31) < L && lane_on) {
#pragma unroll
      for (int j = 0; j < V; j++) wred[warp][l * V + j] = aw[k][j];
    }
    if ((tid & 31) == 0) wred[warp][cin] = ab[k];
    __syncthreads();
    for (int t = tid; t <= cin; t += HT_THREADS) {
      float s = 0.f;
      for (int q = 0; q < nw; q++) s += wred[q][t];
      wpart[(size_t)k * (cin + 1) + t] = s;
    }
    __syncthreads();
  }
  __syncthreads(); /* every thread's dsum written */
  /* the BatchNorm's sums: channel c's are in the threads of lane c / V, slot after slot, at
   * row c % V (Σdy) and V + c % V (Σdy·x̂); added in slot order */
  for (int t = tid; t < 2 * cin; t += HT_THREADS) {
    const int c = t < cin ? t : t - cin, lane = c / V, row = (t < cin ? 0 : V) + c % V;
    double s = 0;
    for (int q = 0; q < slots; q++) s += dsum[row][q * L + lane];
    bnpart[t] = s;
  }
  /* the loss: the warps' lanes by a fixed tree, then the warps in order */
  for (int d = 16; d > 0; d /= 2) loss += __shfl_down_sync(0xffffffffu, loss, d);
  if ((tid & 31) == 0) lred[warp] = loss;
  __syncthreads();
  if (tid == 0) {
    double s = 0;
    for (int q = 0; q < nw; q++) s += lred[q];
    a.losspart[blockIdx.x] = s;
  }
}

/* Blocks of ht_pass<T, V, KC, FULL, SPLIT> that fit a multiprocessor, asked once (a thread-safe
 * static). */
template <typename T, int V, int KC, bool FULL, bool SPLIT>
static int ht_fit()
{
  static const int fit =
      opc_fit_blocks_of((const void *)ht_pass<T, V, KC, FULL, SPLIT>, HT_THREADS);
  return fit;
}

/* The pass for KC classes (FULL: exactly KC) on L lanes a pixel, its blocks a multiprocessor:
 * the classes split over the lanes where they are the U-Net's 4 and a pixel has 4 lanes or
 * more. */
template <typename T, int V>
static void ht_pick(int KC, bool full, int L, void (**k)(ht_args), int *fit)
{
  if (KC == 4 && full && L >= 4)
    *k = ht_pass<T, V, 4, true, true>, *fit = ht_fit<T, V, 4, true, true>();
  else if (KC == 4 && full)
    *k = ht_pass<T, V, 4, true, false>, *fit = ht_fit<T, V, 4, true, false>();
  else if (KC == 4) *k = ht_pass<T, V, 4, false, false>, *fit = ht_fit<T, V, 4, false, false>();
  else if (full) *k = ht_pass<T, V, 8, true, false>, *fit = ht_fit<T, V, 8, true, false>();
  else *k = ht_pass<T, V, 8, false, false>, *fit = ht_fit<T, V, 8, false, false>();
}

template <typename T>
static int head_train_t(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                        const double *saved, const void *gamma, const void *beta, const void *w,
                        const void *b, const int32_t *labels, int ignore_index, double scale,
                        double norm_count, void *logits, void *g, double *dev_out, void *dw,
                        void *db, double *sums, void *dgamma, void *dbeta, int acc, void *ws)
{
  constexpr int V = 16 / sizeof(T);
  const size_t P = (size_t)n * c->h * c->w;
  const int cin = c->cin, K = c->cout;
  const int nc = cin % V ? 0 : cin / V;
  const bool aligned = (uintptr_t)x % 16 == 0;
  /* The pass takes the vector layout with every chunk of a pixel on its own lane; anything else
   * runs the four ops. */
  if (!nc || nc > 32 || !aligned || K > 8 || P == 0 || !logits || !g)
    return ops_head_train_by_ops(o, c, n, x, saved, gamma, beta, w, b, labels, ignore_index,
                                 scale, norm_count, logits, g, dev_out, dw, db, sums, dgamma,
                                 dbeta, acc, ws);
  opc_ctx_t *ctx = opc_ctx(o);
  const int KC = K <= 4 ? 4 : 8, L = opc_pixel_lanes(nc);
  void (*pass)(ht_args) = NULL;
  int fit = 0;
  ht_pick<T, V>(KC, K == KC, L, &pass, &fit);
  /* one wave; at least 64 pixels a block; within the loss's slots, the workspace's partials
   * (opc_skinny_ws: 8 blocks a multiprocessor) and the reduction scratch */
  size_t nb = (size_t)fit * ctx->sm_count, most = (P + 63) / 64;
  if (nb > most) nb = most;
  if (nb > OPC_SLOT_DOUBLES - 2) nb = OPC_SLOT_DOUBLES - 2;
  while (nb > 1 && nb * K * (cin + 1) * sizeof(float) > opc_skinny_ws(o, c)) nb--;
  while (nb > 1 && nb * 2 * (size_t)cin > OPC_SCRATCH_DOUBLES) nb--;
  if (nb < 1) nb = 1;
  ht_args a = {};
  a.x = x, a.gamma = gamma, a.beta = beta, a.w = w, a.b = b, a.saved = saved, a.labels = labels;
  a.ignore = ignore_index, a.scale = scale, a.norm_count = norm_count, a.counted = ctx->bad;
  a.logits = logits, a.g = g, a.wpart = (float *)ws, a.bnpart = ctx->scratch;
  a.losspart = ctx->slots + 2, a.P = P, a.per = (P + nb - 1) / nb, a.cin = cin, a.K = K, a.L = L;
  a.vout = K == KC && (uintptr_t)logits % (KC * sizeof(T)) == 0 &&
           (uintptr_t)g % (KC * sizeof(T)) == 0;
  if (opc_loss_count(o, labels, P, K, ignore_index)) return -1;
  pass<<<(unsigned)nb, HT_THREADS, 0, ctx->stream>>>(a);
  OPC_LAUNCHED(o, "the head's training pass");
  if (opc_loss_final(o, (int)nb, dev_out) ||
      opc_skinny_wgrad_final(o, c, (int)nb, ws, dw, db, acc) ||
      opc_bn_bwd_final(o, (int)nb, cin, sums, dgamma, dbeta, acc))
    return -1;
  return 0;
}

int opc_head_train_1x1(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                       const double *saved, const void *gamma, const void *beta, const void *w,
                       const void *b, const int32_t *labels, int ignore_index, double scale,
                       double norm_count, void *logits, void *g, double *dev_out, void *dw,
                       void *db, double *sums, void *dgamma, void *dbeta, int acc, void *ws)
{
  if (!opc_conv1x1_bn_ok(o, c))
    return opc_fail(o, "the head's training pass: a 1x1 convolution of at most %d outputs "
                    "planned on the few-output kernels (conv1x1_bn_ok says 0)",
                    OPS_BN_1X1_MOST_K);
  if (!saved || !gamma || !beta)
    return opc_fail(o, "the head's training pass: the BatchNorm's saved terms, gamma and beta");
  OPC_DISPATCH(o, head_train_t, o, c, n, x, saved, gamma, beta, w, b, labels, ignore_index,
               scale, norm_count, logits, g, dev_out, dw, db, sums, dgamma, dbeta, acc, ws);
}
