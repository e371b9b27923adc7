/* elem_cuda.cu — element-wise and data-movement ops on the GPU: ReLU, 2x2 max-pool (with the
 * winner's index for backward), channel concat/split, and the f32 <-> compute-dtype casts.
 * All are memory-bound: 16-byte accesses where alignment and channel counts allow, one pass. */
#include "config.h"

#include "kernels/ops_cuda.cuh"

/* ---- ReLU: a flat pass; the tail that does not fill a pack goes element by element ---- */

template <typename T, int N>
__global__ void relu_kernel(const T *x, const T *ref, size_t count, T *y)
{
  /* forward: y = x > 0 ? x : 0 (ref NULL); backward: dx = y_fwd > 0 ? dy : 0 (x = dy, ref = y) */
  const size_t nv = count / N, stride = (size_t)gridDim.x * blockDim.x;
  const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (size_t i = t; i < nv; i += stride) {
    opc_pack<T, N> v = opc_load<T, N>(x + i * N), r = ref ? opc_load<T, N>(ref + i * N) : v;
    for (int k = 0; k < N; k++)
      if (!(opc_ld(r.v[k]) > 0.f)) v.v[k] = opc_st<T>(0.f);
    opc_store<T, N>(y + i * N, v);
  }
  size_t i = nv * N + t;
  if (i < count) y[i] = (opc_ld((ref ? ref : x)[i]) > 0.f) ? x[i] : opc_st<T>(0.f);
}

template <typename T>
static int relu_t(const ops_t *o, const void *x, const void *ref, size_t count, void *y)
{
  const int V = 16 / sizeof(T);
  if (count == 0) return 0;
  int N = opc_vec_width(sizeof(T), V, x, ref, y);
  cudaStream_t st = opc_ctx(o)->stream;
  unsigned b = opc_blocks(o, count / N + 1);
  if (N == V)
    relu_kernel<T, V><<<b, OPC_THREADS, 0, st>>>((const T *)x, (const T *)ref, count, (T *)y);
  else
    relu_kernel<T, 1><<<b, OPC_THREADS, 0, st>>>((const T *)x, (const T *)ref, count, (T *)y);
  OPC_LAUNCHED(o, "ReLU");
  return 0;
}

int opc_relu_fwd(const ops_t *o, const void *x, size_t count, void *y)
{
  OPC_DISPATCH(o, relu_t, o, x, NULL, count, y);
}

int opc_relu_bwd(const ops_t *o, const void *dy, const void *y, size_t count, void *dx)
{
  OPC_DISPATCH(o, relu_t, o, dy, y, count, dx);
}

/* ---- 2x2 max-pool: one thread per output pixel and channel pack ---- */

template <typename T, int N>
__global__ void maxpool_fwd_kernel(const T *x, int h, int w, int C, size_t rows, int gb, int r,
                                   T *y, uint8_t *arg)
{
  const int gi = threadIdx.x % gb, row = threadIdx.x / gb, g = blockIdx.x * gb + gi;
  if (g * N >= C) return;
  const int ho = h / 2, wo = w / 2;
  for (size_t q = (size_t)blockIdx.y * r + row; q < rows; q += (size_t)gridDim.y * r) {
    size_t s = q / ((size_t)ho * wo);
    int oy = (int)(q / wo % ho), ox = (int)(q % wo);
    const T *x00 = x + (((s * h + 2 * oy) * w + 2 * ox) * C) + (size_t)g * N;
    opc_pack<T, N> v[4] = {opc_load<T, N>(x00), opc_load<T, N>(x00 + C),
                           opc_load<T, N>(x00 + (size_t)w * C),
                           opc_load<T, N>(x00 + (size_t)w * C + C)};
    opc_pack<T, N> best = v[0];
    uint8_t bi[N];
    for (int k = 0; k < N; k++) {
      float b = opc_ld(v[0].v[k]);
      bi[k] = 0;
      for (int j = 1; j < 4; j++) /* strict >: ties go to the first, as on the CPU */
        if (opc_ld(v[j].v[k]) > b) {
          b = opc_ld(v[j].v[k]);
          best.v[k] = v[j].v[k];
          bi[k] = (uint8_t)j;
        }
    }
    opc_store<T, N>(y + q * C + (size_t)g * N, best);
    for (int k = 0; k < N; k++) arg[q * C + (size_t)g * N + k] = bi[k];
  }
}

template <typename T, int N>
__global__ void maxpool_bwd_kernel(const T *dy, const uint8_t *arg, int h, int w, int C,
                                   size_t rows, int gb, int r, T *dx, int acc)
{
  const int gi = threadIdx.x % gb, row = threadIdx.x / gb, g = blockIdx.x * gb + gi;
  if (g * N >= C) return;
  const int ho = h / 2, wo = w / 2;
  for (size_t q = (size_t)blockIdx.y * r + row; q < rows; q += (size_t)gridDim.y * r) {
    size_t s = q / ((size_t)ho * wo);
    int oy = (int)(q / wo % ho), ox = (int)(q % wo);
    opc_pack<T, N> d = opc_load<T, N>(dy + q * C + (size_t)g * N), out[4];
    for (int k = 0; k < N; k++) {
      uint8_t a = arg[q * C + (size_t)g * N + k];
      for (int j = 0; j < 4; j++) out[j].v[k] = j == a ? d.v[k] : opc_st<T>(0.f);
    }
    /* every input pixel is written (the winner's gradient or zero): no clearing pass */
    T *d00 = dx + (((s * h + 2 * oy) * w + 2 * ox) * C) + (size_t)g * N;
    T *dst[4] = {d00, d00 + C, d00 + (size_t)w * C, d00 + (size_t)w * C + C};
    for (int j = 0; j < 4; j++) {
      if (acc) {
        opc_pack<T, N> old = opc_load<T, N>(dst[j]);
        for (int k = 0; k < N; k++) out[j].v[k] = opc_st<T>(opc_ld(old.v[k]) + opc_ld(out[j].v[k]));
      }
      opc_store<T, N>(dst[j], out[j]);
    }
  }
}

template <typename T>
static int maxpool_t(const ops_t *o, const void *x, const void *dy, int n, int h, int w, int C,
                     void *y, uint8_t *arg, const uint8_t *carg, void *dx, int acc)
{
  const int V = 16 / sizeof(T);
  if (h % 2 || w % 2)
    return opc_fail(o, "2x2 max-pool of a %dx%d image: the size must be even", h, w);
  size_t rows = (size_t)n * (h / 2) * (w / 2);
  if (rows == 0) return 0;
  int N = opc_vec_width(sizeof(T), C, x, dy, y, dx);
  opc_geo_t g = OPC_PASS_GEO(o, rows, C, N, 1);
  cudaStream_t st = opc_ctx(o)->stream;
  if (!dy) {
    if (N == V)
      maxpool_fwd_kernel<T, V><<<g.grid, g.block, 0, st>>>((const T *)x, h, w, C, rows, g.gb,
                                                           g.r, (T *)y, arg);
    else
      maxpool_fwd_kernel<T, 1><<<g.grid, g.block, 0, st>>>((const T *)x, h, w, C, rows, g.gb,
                                                           g.r, (T *)y, arg);
  } else if (N == V) {
    maxpool_bwd_kernel<T, V><<<g.grid, g.block, 0, st>>>((const T *)dy, carg, h, w, C, rows,
                                                         g.gb, g.r, (T *)dx, acc);
  } else {
    maxpool_bwd_kernel<T, 1><<<g.grid, g.block, 0, st>>>((const T *)dy, carg, h, w, C, rows,
                                                         g.gb, g.r, (T *)dx, acc);
  }
  OPC_LAUNCHED(o, dy ? "max-pool backward" : "max-pool");
  return 0;
}

int opc_maxpool_fwd(const ops_t *o, const void *x, int n, int h, int w, int C, void *y,
                    uint8_t *arg)
{
  OPC_DISPATCH(o, maxpool_t, o, x, NULL, n, h, w, C, y, arg, NULL, NULL, 0);
}

int opc_maxpool_bwd(const ops_t *o, const void *dy, const uint8_t *arg, int n, int h, int w,
                    int C, void *dx, int acc)
{
  OPC_DISPATCH(o, maxpool_t, o, NULL, dy, n, h, w, C, NULL, NULL, arg, dx, acc);
}

/* ---- concat along channels, and its backward split ---- */

/* Forward (fwd = 1): y[p] = [a[p], b[p]] (a NULL: b's part only). Backward: da (+)= dy[p][:ca],
 * db = dy[p][ca:], b's rows in NHWC order, or gathered (GATHERED, backward only; ops.h
 * concat_bwd_gathered): row p = R * W + col of dy (R = image * H + row, H even) sends its b part
 * to row ((R / 2 * (W / 2) + col / 2) * 2 + R % 2) * 2 + col % 2 of b.
 * N divides both ca and cb, so a pack never straddles the two parts. Row indices in I: 32 bits
 * where the rows fit. */
template <bool GATHERED, typename I>
static __device__ __forceinline__ I concat_b_row(I p, I W)
{
  if (!GATHERED) return p;
  const I R = p / W, col = p - R * W;
  return (((R >> 1) * (W >> 1) + (col >> 1)) * 2 + (R & 1)) * 2 + (col & 1);
}

template <typename T, int N, typename I, bool GATHERED>
__global__ void concat_kernel(int fwd, T *a, int ca, T *b, int cb, I rows, I W, int gb, int r,
                              T *y, int acc_a)
{
  const int gi = threadIdx.x % gb, row = threadIdx.x / gb, g = blockIdx.x * gb + gi;
  const int C = ca + cb, c0 = g * N;
  if (c0 >= C || (fwd && !a && c0 < ca)) return; /* forward without a: b's part only */
  for (I p = (I)blockIdx.y * r + row; p < rows; p += (I)gridDim.y * r) {
    T *part = c0 < ca ? a + (size_t)p * ca + c0
                      : b + (size_t)concat_b_row<GATHERED>(p, W) * cb + (c0 - ca);
    T *whole = y + (size_t)p * C + c0;
    if (fwd) {
      opc_store<T, N>(whole, opc_load<T, N>(part));
    } else {
      opc_pack<T, N> v = opc_load<T, N>(whole);
      if (acc_a && c0 < ca) {
        opc_pack<T, N> old = opc_load<T, N>(part);
        for (int k = 0; k < N; k++) v.v[k] = opc_st<T>(opc_ld(old.v[k]) + opc_ld(v.v[k]));
      }
      opc_store<T, N>(part, v);
    }
  }
}

template <typename T, int N, typename I, bool GATHERED>
static void concat_launch(const ops_t *o, const opc_geo_t &g, int fwd, void *a, int ca, void *b,
                          int cb, size_t P, int W, void *y, int acc_a)
{
  concat_kernel<T, N, I, GATHERED><<<g.grid, g.block, 0, opc_ctx(o)->stream>>>(
      fwd, (T *)a, ca, (T *)b, cb, (I)P, (I)W, g.gb, g.r, (T *)y, acc_a);
}

/* The pass over P rows of ca + cb channels: 16-byte packs where both parts and the pointers
 * allow, 32-bit row indices where the last row a thread steps past stays below 2^32. W: the
 * image width for the gathered order (GATHERED), unused otherwise. */
template <typename T, bool GATHERED>
static void concat_run(const ops_t *o, int fwd, void *a, int ca, void *b, int cb, size_t P, int W,
                       void *y, int acc_a)
{
  const int V = 16 / sizeof(T);
  int N = opc_vec_width(sizeof(T), ca, a, b, y);
  if (cb % V) N = 1;
  opc_geo_t g = OPC_PASS_GEO(o, P, ca + cb, N, 1);
  const int narrow = P + (size_t)g.grid.y * g.r < 0xffffffffu;
  if (N == V) {
    if (narrow) concat_launch<T, V, unsigned, GATHERED>(o, g, fwd, a, ca, b, cb, P, W, y, acc_a);
    else concat_launch<T, V, size_t, GATHERED>(o, g, fwd, a, ca, b, cb, P, W, y, acc_a);
  } else if (narrow) {
    concat_launch<T, 1, unsigned, GATHERED>(o, g, fwd, a, ca, b, cb, P, W, y, acc_a);
  } else {
    concat_launch<T, 1, size_t, GATHERED>(o, g, fwd, a, ca, b, cb, P, W, y, acc_a);
  }
}

template <typename T>
static int concat_t(const ops_t *o, int fwd, const void *a, int ca, const void *b, int cb,
                    size_t P, void *y, int acc_a)
{
  if (P == 0) return 0;
  concat_run<T, false>(o, fwd, (void *)a, ca, (void *)b, cb, P, 1, y, acc_a);
  OPC_LAUNCHED(o, fwd ? "concat" : "concat backward");
  return 0;
}

int opc_concat_fwd(const ops_t *o, const void *a, int ca, const void *b, int cb, size_t P,
                   void *y)
{
  OPC_DISPATCH(o, concat_t, o, 1, a, ca, b, cb, P, y, 0);
}

int opc_concat_bwd(const ops_t *o, const void *dy, int ca, int cb, size_t P, void *da, int acc_a,
                   void *db)
{
  OPC_DISPATCH(o, concat_t, o, 0, da, ca, db, cb, P, (void *)dy, acc_a);
}

template <typename T>
static int concat_split_gathered_t(const ops_t *o, const void *dy, int ca, int cb, int n, int H,
                                   int W, void *da, int acc_a, void *db)
{
  const size_t P = (size_t)n * H * W;
  if (P == 0) return 0;
  concat_run<T, true>(o, 0, da, ca, db, cb, P, W, (void *)dy, acc_a);
  OPC_LAUNCHED(o, "concat backward (gathered)");
  return 0;
}

int opc_concat_bwd_gathered(const ops_t *o, const void *dy, int ca, int cb, int n, int H, int W,
                            void *da, int acc_a, void *db)
{
  if (n < 0 || H < 0 || W < 0 || H % 2 || W % 2)
    return opc_fail(o, "concat backward into the gathered order: %d images of %dx%d pixels "
                    "(both sides must be even)", n, H, W);
  OPC_DISPATCH(o, concat_split_gathered_t, o, dy, ca, cb, n, H, W, da, acc_a, db);
}

/* ---- casts: 4 elements per thread (16 bytes of f32) ---- */

template <typename T, int N>
__global__ void cast_kernel(const float *f, const T *t, size_t count, T *to_t, float *to_f,
                            int acc)
{
  const size_t nv = count / N, stride = (size_t)gridDim.x * blockDim.x;
  const size_t t0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (size_t i = t0; i < nv; i += stride) {
    if (to_t) {
      opc_pack<float, N> v = opc_load<float, N>(f + i * N);
      opc_pack<T, N> out;
      for (int k = 0; k < N; k++) out.v[k] = opc_st<T>(v.v[k]);
      opc_store<T, N>(to_t + i * N, out);
    } else {
      opc_pack<T, N> v = opc_load<T, N>(t + i * N);
      opc_pack<float, N> out;
      if (acc) out = opc_load<float, N>(to_f + i * N);
      for (int k = 0; k < N; k++) out.v[k] = (acc ? out.v[k] : 0.f) + opc_ld(v.v[k]);
      opc_store<float, N>(to_f + i * N, out);
    }
  }
  size_t i = nv * N + t0;
  if (i < count) {
    if (to_t) to_t[i] = opc_st<T>(f[i]);
    else to_f[i] = (acc ? to_f[i] : 0.f) + opc_ld(t[i]);
  }
}

template <typename T>
static int cast_t(const ops_t *o, const float *f, const void *t, size_t count, void *to_t,
                  float *to_f, int acc)
{
  if (count == 0) return 0;
  uintptr_t m16 = (uintptr_t)f | (uintptr_t)to_f, mt = (uintptr_t)t | (uintptr_t)to_t;
  int vec = m16 % 16 == 0 && mt % (4 * sizeof(T)) == 0;
  cudaStream_t st = opc_ctx(o)->stream;
  unsigned b = opc_blocks(o, count / (vec ? 4 : 1) + 1);
  if (vec)
    cast_kernel<T, 4><<<b, OPC_THREADS, 0, st>>>(f, (const T *)t, count, (T *)to_t, to_f, acc);
  else
    cast_kernel<T, 1><<<b, OPC_THREADS, 0, st>>>(f, (const T *)t, count, (T *)to_t, to_f, acc);
  OPC_LAUNCHED(o, "cast");
  return 0;
}

int opc_from_f32(const ops_t *o, const float *src, size_t count, void *dst)
{
  OPC_DISPATCH(o, cast_t, o, src, NULL, count, dst, NULL, 0);
}

int opc_to_f32(const ops_t *o, const void *src, size_t count, float *dst, int acc)
{
  OPC_DISPATCH(o, cast_t, o, NULL, src, count, NULL, dst, acc);
}

/* ---- channel padding for convolutions whose channel count the fast kernels cannot take ---- */

template <typename T>
__global__ void repack_kernel(const T *src, int cs, T *dst, int cd, size_t P, int acc)
{
  const size_t total = P * cd, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    size_t p = i / cd;
    int c = (int)(i % cd);
    float v = c < cs ? opc_ld(src[p * cs + c]) : 0.f;
    dst[i] = opc_st<T>(acc ? opc_ld(dst[i]) + v : v);
  }
}

template <typename T>
static int repack_t(const ops_t *o, const void *src, int cs, void *dst, int cd, size_t P, int acc)
{
  if (P == 0) return 0;
  repack_kernel<T><<<opc_blocks(o, P * cd), OPC_THREADS, 0, opc_ctx(o)->stream>>>(
      (const T *)src, cs, (T *)dst, cd, P, acc);
  OPC_LAUNCHED(o, "channel repack");
  return 0;
}

int opc_repack_channels(const ops_t *o, const void *src, int cs, void *dst, int cd, size_t P,
                        int acc)
{
  OPC_DISPATCH(o, repack_t, o, src, cs, dst, cd, P, acc);
}
