/* ops_cuda.cuh — what the CUDA ops files share: the backend context, error reporting, element
 * conversions, 16-byte packs and the "channel tile" launch geometry used by every per-channel
 * kernel (BN/GN statistics, apply and backward, bias gradients). Internal to kernels/. */
#ifndef KERNELS_OPS_CUDA_CUH
#define KERNELS_OPS_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "kernels/ops_cuda.h"

/* Reduction partials: nz * splits * 2C doubles; 4 MiB leaves >= 64 row splits for C = 1024. */
#define OPC_SCRATCH_DOUBLES (512u * 1024u)
/* Result slots: [0] loss sum, [1] count, [2..) per-block loss partials. */
#define OPC_SLOT_DOUBLES 4096u
#define OPC_THREADS 256

typedef struct {
  int device;
  cudaStream_t stream;
  int own_stream;
  cudnnHandle_t dnn;
  int sm_count;
  double *scratch;             /* OPC_SCRATCH_DOUBLES: reduction partials */
  double *slots;               /* OPC_SLOT_DOUBLES: loss sum and count, partials */
  unsigned long long *bad;     /* [0]: (pixel << 32 | label) of the first label out of range
                                  (ULLONG_MAX: none), [1]: softmax_ce's pixel count */
  double *host;                /* pinned, 2 doubles + 2 u64: softmax_ce's read-back */
  void *blas, *blas_ws;        /* cuBLAS handle and workspace (GEMM convolutions), lazily */
  void *blaslt;                /* cuBLASLt handle (transposed convolutions), lazily */
  int deterministic;           /* conv algorithms: cuDNN heuristics, deterministic ones only */
  int sm90;                    /* Hopper's fused convolutions load here: 1 yes, -1 no, 0 not
                                  asked yet (conv_fused_cuda.cu) */
  int tf32;                    /* f32 convolutions and GEMMs on TF32 tensor cores (SHMDDP_TF32,
                                  read once when the table is made) */
  char err[384];
} opc_ctx_t;

static inline opc_ctx_t *opc_ctx(const ops_t *o) { return (opc_ctx_t *)o->ctx; }

/* Records a message for o->last_error; returns -1 for `return opc_fail(...)`. */
int opc_fail(const ops_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *opc_dtype_name(ops_dtype_t d);

#define OPC_CUDA(o, call)                                                                      \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess)                                                                     \
      return opc_fail((o), "%s failed: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__,   \
                      __LINE__);                                                               \
  } while (0)

/* After a launch: configuration errors show up at once, faults at the next synchronising call. */
#define OPC_LAUNCHED(o, what)                                                                  \
  do {                                                                                         \
    cudaError_t e_ = cudaGetLastError();                                                       \
    if (e_ != cudaSuccess)                                                                     \
      return opc_fail((o), "launching %s failed: %s (%s:%d)", (what), cudaGetErrorString(e_),  \
                      __FILE__, __LINE__);                                                     \
  } while (0)

#define OPC_DNN(o, call)                                                                       \
  do {                                                                                         \
    cudnnStatus_t s_ = (call);                                                                 \
    if (s_ != CUDNN_STATUS_SUCCESS)                                                            \
      return opc_fail((o), "%s failed: %s (%s:%d)", #call, cudnnGetErrorString(s_), __FILE__,  \
                      __LINE__);                                                               \
  } while (0)

/* Calls the template FN<T>(args...) for the table's dtype. */
#define OPC_DISPATCH(o, FN, ...)                                                               \
  switch ((o)->dtype) {                                                                        \
  case OPS_F32: return FN<float>(__VA_ARGS__);                                                 \
  case OPS_BF16: return FN<__nv_bfloat16>(__VA_ARGS__);                                        \
  case OPS_F16: return FN<__half>(__VA_ARGS__);                                                \
  default: return opc_fail((o), "the CUDA backend has no %s ops", opc_dtype_name((o)->dtype));  \
  }

/* Element <-> f32 (all arithmetic is f32 or f64; storage is the table's dtype). */
static __device__ __forceinline__ float opc_ld(float v) { return v; }
static __device__ __forceinline__ float opc_ld(__nv_bfloat16 v)
{
  return __uint_as_float((unsigned)__bfloat16_as_ushort(v) << 16); /* exact, one shift */
}
static __device__ __forceinline__ float opc_ld(__half v) { return __half2float(v); }
template <typename T> static __device__ __forceinline__ T opc_st(float v);
template <> __device__ __forceinline__ float opc_st<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 opc_st<__nv_bfloat16>(float v)
{
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half opc_st<__half>(float v) { return __float2half_rn(v); }

/* Global to shared memory without the registers (cp.async, sm_80 on): 16 bytes, zeros where
 * bytes is 0 (src is then not read but must be a valid address), or 4 bytes; the copies a thread
 * issued complete in groups (commit, then wait until at most N of its groups are in flight,
 * which also makes the completed ones' bytes visible to it). */
static __device__ __forceinline__ void opc_copy16(uint32_t dst, const void *src, int bytes)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}
static __device__ __forceinline__ void opc_copy4(uint32_t dst, const void *src)
{
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
static __device__ __forceinline__ void opc_copy_commit()
{
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> static __device__ __forceinline__ void opc_copy_wait()
{
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* N consecutive elements moved as one access (16 bytes for the full vector width). */
template <typename T, int N> struct alignas(sizeof(T) * N) opc_pack {
  T v[N];
};
template <typename T, int N> static __device__ __forceinline__ opc_pack<T, N> opc_load(const T *p)
{
  return *reinterpret_cast<const opc_pack<T, N> *>(p);
}
template <typename T, int N> static __device__ __forceinline__ void opc_store(T *p,
                                                                           opc_pack<T, N> v)
{
  *reinterpret_cast<opc_pack<T, N> *>(p) = v;
}

/* The full vector width for T if every pointer is 16-byte aligned and C is a multiple of it;
 * else 1. Pointers may be NULL (not used). */
static inline int opc_vec_width(size_t elem, size_t C, const void *a, const void *b = 0,
                                const void *c = 0, const void *d = 0)
{
  size_t n = 16 / elem;
  if (C % n) return 1;
  uintptr_t m = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d;
  return (m % 16) ? 1 : (int)n;
}

/* Channel tiles: a block of OPC_THREADS threads covers gb channel groups (of N channels) by r
 * rows; thread t owns group t % gb and starts at row t / gb, striding by r * gridDim.y rows, so
 * its channels (and their per-channel coefficients) stay fixed while it walks the rows and a
 * block reads whole rows, coalesced. grid.x tiles the channels, grid.y splits the rows, grid.z
 * is the sample (GroupNorm; 1 otherwise). */
typedef struct {
  int N, G, gb, r;
  dim3 grid, block;
} opc_geo_t;

/* rows: rows per z; target_rows_per_thread bounds the row splits from below (reductions keep
 * a thread busy for many rows to amortise their block reduction); max_splits from scratch;
 * gb_most bounds the channel groups a block takes (the rest of its threads take more rows). */
opc_geo_t opc_geometry(const ops_t *o, size_t rows, int C, int N, int nz,
                       int target_rows_per_thread, size_t max_splits, int blocks_per_sm = 4,
                       int gb_most = OPC_THREADS);

/* Element passes: >= 4 rows per thread (more blocks than a reduction would take). */
#define OPC_PASS_GEO(o, rows, C, N, nz) opc_geometry((o), (rows), (C), (N), (nz), 4, (size_t)-1)

/* Blocks of OPC_THREADS threads of `kernel` that fit on one multiprocessor at once (>= 1). A
 * grid of exactly that many per multiprocessor runs in one wave: 4 asked for where 3 fit ran
 * 1.33 waves, the last a third full. */
static inline int opc_fit_blocks_of(const void *kernel, int threads)
{
  int b = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, threads, 0) != cudaSuccess) {
    cudaGetLastError();
    b = 0;
  }
  return b < 1 ? 1 : b;
}
static inline int opc_fit_blocks(const void *kernel)
{
  return opc_fit_blocks_of(kernel, OPC_THREADS);
}

/* Lanes of a warp a pixel's nc chunks spread over: the power of two >= nc, at most 32 (the
 * few-output 1x1 kernels' layout, conv_skinny_cuda.cu, and the head's training pass). */
static inline int opc_pixel_lanes(int nc)
{
  int L = 1;
  while (L < nc && L < 32) L *= 2;
  return L;
}

/* Blocks for a grid-stride pass over n items: up to 8 per multiprocessor. */
static inline unsigned opc_blocks(const ops_t *o, size_t n)
{
  size_t b = (n + OPC_THREADS - 1) / OPC_THREADS, most = (size_t)opc_ctx(o)->sm_count * 8;
  return (unsigned)(b < 1 ? 1 : b > most ? most : b);
}

/* Sum of the 2 * ncol doubles per thread over the block's rows (shared memory, fixed order):
 * a[k] (k < ncol) and b[k] for the thread's channels; written to out1/out2 (the block's slice
 * of the partials) by the threads of row 0. Every thread of the block must call it. */
template <int N>
static __device__ void opc_block_colsum(const double *a, const double *b, int gb, int r, int gi,
                                        int row, int valid, double *out1, double *out2)
{
  __shared__ double sh[OPC_THREADS * N * 2 > 4096 ? 4096 : OPC_THREADS * N * 2];
  /* sh[row][col], col in [0, 2 * gb * N): a's columns then b's. */
  const int cols = 2 * gb * N;
  for (int k = 0; k < N; k++) {
    sh[row * cols + gi * N + k] = a[k];
    sh[row * cols + gb * N + gi * N + k] = b[k];
  }
  __syncthreads();
  for (int col = threadIdx.x; col < cols; col += blockDim.x) {
    double s = 0;
    for (int i = 0; i < r; i++) s += sh[i * cols + col];
    sh[col] = s; /* row 0 is only read again by the thread that owns this column */
  }
  __syncthreads();
  if (row == 0 && valid)
    for (int k = 0; k < N; k++) {
      out1[k] = sh[gi * N + k];
      out2[k] = sh[gb * N + gi * N + k];
    }
  __syncthreads();
}

/* Internal entry points (one table slot each), defined in the ops' .cu files. */
int opc_conv_plan(const ops_t *o, ops_conv_t *c, size_t *ws_bytes);
/* The fused convolutions' entries and their per-channel steps (conv_fused_cuda.cu). */
void opc_set_fused(ops_t *o);
void opc_conv_plan_free(const ops_t *o, ops_conv_t *c);
int opc_conv_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                 const void *b, void *y, void *ws);
int opc_conv_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                        const void *dy, void *dw, void *db, int acc, void *ws);
int opc_conv_bwd_data(const ops_t *o, const ops_conv_t *c, int n, const void *dy, const void *w,
                      void *dx, void *ws);
/* ops.h's entries for the transposed convolution's gradient gathered (conv_cuda.cu): a layer on
 * the cuBLAS GEMMs takes it. */
int opc_conv_gathered(const ops_t *o, const ops_conv_t *c);
int opc_conv_bwd_filter_gathered(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                                 const void *dy, void *dw, void *db, int acc, void *ws);
int opc_conv_bwd_data_gathered(const ops_t *o, const ops_conv_t *c, int n, const void *dy,
                               const void *w, void *dx, void *ws);
/* The table's cuBLAS handle (a cublasHandle_t, made on first use; conv_gemm_cuda.cu) and, in
 * builds with cuBLASLt, its cuBLASLt handle with the workspace both share. */
int opc_blas(const ops_t *o, void **handle);
int opc_blaslt(const ops_t *o, void **handle, void **ws, size_t *ws_bytes);
/* The 2x2 transposed convolution as cuBLAS GEMMs (conv_up_gemm_cuda.cu): opc_upc_plan sets *u
 * (NULL: cuDNN does the layer) and the workspace it needs; the input gradient from NHWC dy goes
 * through it only where opc_upc_bwd_data_enabled says so (else cuDNN's), from gathered dy
 * always. */
typedef struct opc_upc opc_upc_t;
int opc_upc_plan(const ops_t *o, const ops_conv_t *c, opc_upc_t **u, size_t *ws_bytes);
void opc_upc_free(opc_upc_t *u);
int opc_upc_bwd_data_enabled(const opc_upc_t *u);
int opc_upc_fwd(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n, const void *x,
                const void *w, const void *b, void *y, void *ws);
int opc_upc_bwd_filter(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n, const void *x,
                       const void *dy, void *dw, void *db, int acc, void *ws);
int opc_upc_bwd_data(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n, const void *dy,
                     const void *w, void *dx, void *ws);
/* The same two from dy gathered (ops.h): one GEMM each, no gather pass, no partials. */
int opc_upc_bwd_filter_gathered(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n,
                                const void *x, const void *z, void *dw, void *db, int acc,
                                void *ws);
int opc_upc_bwd_data_gathered(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n,
                              const void *z, const void *w, void *dx, void *ws);
/* ops_cuda_conv_up_route's answer for a layer on the GEMMs. */
unsigned opc_upc_route(const ops_t *o, const ops_conv_t *c, int n, const void *w, const void *dw);
/* 1x1 convolutions as cuBLAS GEMMs (conv_gemm_cuda.cu), unless SHMDDP_CONV1X1=cudnn; they need
 * no workspace. */
int opc_gemm_conv_enabled(const ops_t *o, ops_conv_kind_t kind);
void opc_gemm_free(opc_ctx_t *x);
int opc_gemm_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                 const void *b, void *y, void *ws);
int opc_gemm_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                        const void *dy, void *dw, void *db, int acc, void *ws);
int opc_gemm_bwd_data(const ops_t *o, const ops_conv_t *c, int n, const void *dy, const void *w,
                      void *dx, void *ws);
/* 1x1 convolutions with few outputs (cout <= 8, cin <= 256; the U-Net's head) as own kernels
 * (conv_skinny_cuda.cu), unless SHMDDP_CONV1X1=cudnn|gemm; ws as opc_skinny_ws says. */
int opc_skinny_enabled(const ops_t *o, const ops_conv_t *c);
size_t opc_skinny_ws(const ops_t *o, const ops_conv_t *c);
int opc_skinny_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                   const void *b, void *y);
int opc_skinny_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                          const void *dy, void *dw, void *db, int acc, void *ws);
/* The same forward and weight gradient reading x through a BatchNorm apply + ReLU (ops.h
 * conv1x1_*_bn): the unfused path's bits. */
int opc_skinny_fwd_bn(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                      const double *saved, const void *gamma, const void *beta, const void *w,
                      const void *b, void *y);
int opc_skinny_bwd_filter_bn(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                             const double *saved, const void *gamma, const void *beta,
                             const void *dy, void *dw, void *db, int acc, void *ws);
/* ops.h conv1x1_bn_ok and the two entries (conv_cuda.cu): a layer planned on the kernels above */
int opc_conv1x1_bn_ok(const ops_t *o, const ops_conv_t *c);
int opc_conv1x1_fwd_bn(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                       const double *saved, const void *gamma, const void *beta, const void *w,
                       const void *b, void *y, void *ws);
int opc_conv1x1_bwd_filter_bn(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                              const double *saved, const void *gamma, const void *beta,
                              const void *dy, void *dw, void *db, int acc, void *ws);
int opc_skinny_bwd_data(const ops_t *o, const ops_conv_t *c, int n, const void *dy,
                        const void *w, void *dx);
/* 3x3 convolutions of few input channels (cin <= 3, cout a multiple of 16 up to 64; the RGB
 * layer) in 16-bit types, and in f32 where TF32 is allowed: forward and weight gradient on own
 * tensor-core kernels (conv_rgb_cuda.cu; f32 conv_rgb_tf32_cuda.cu), unless SHMDDP_CONV_PAD=0;
 * they need opc_rgb_ws bytes of workspace and
 * 16-byte aligned outputs (forward) or output gradients (weight gradient): opc_rgb_usable. */
int opc_rgb_enabled(const ops_t *o, const ops_conv_t *c);
size_t opc_rgb_ws(const ops_t *o, const ops_conv_t *c);
int opc_rgb_usable(const void *y_or_dy);
int opc_rgb_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                void *y);
int opc_rgb_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                       const void *dy, void *dw, int acc, void *ws);
/* The forward with the output's BatchNorm statistics (stats[0 .. 2 cout): Σ y, Σ y² of the
 * rounded outputs, f64; stats[2 cout] the pixel count; NULL: the forward alone), for layers
 * opc_rgb_stats_covered takes (opc_rgb_enabled and cout 16, 32 or 64): opc_rgb_stats_ws bytes
 * of workspace (8-byte aligned), a 16-byte aligned y. The fused engine's first block. */
int opc_rgb_stats_covered(const ops_t *o, const ops_conv_t *c);
size_t opc_rgb_stats_ws(const ops_t *o, const ops_conv_t *c);
int opc_rgb_fwd_stats(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                      void *y, double *stats, void *ws);
/* dst[p][0..cd) from src[p][0..cs) over P rows: channels past cs are zero (padding), channels
 * past cd dropped (unpadding); added to dst when acc. */
int opc_repack_channels(const ops_t *o, const void *src, int cs, void *dst, int cd, size_t P,
                        int acc);
/* db (+)= Σ_p dy[p][c] over P pixels (conv bias gradients). */
int opc_channel_sum(const ops_t *o, const void *dy, size_t P, int C, void *db, int acc);
/* y[p][c] += b[c] (conv biases). */
int opc_bias_add(const ops_t *o, void *y, size_t P, int C, const void *b);

int opc_bn_stats(const ops_t *o, const void *x, size_t P, int C, double *stats);
int opc_bn_stats_finalize(const ops_t *o, const void *x, size_t P, int C, double eps,
                          double momentum, float *running_mean, float *running_var,
                          double *stats, double *saved);
int opc_bn_finalize(const ops_t *o, const double *stats, int C, double eps, double momentum,
                    float *running_mean, float *running_var, double *saved);
int opc_bn_saved_from_running(const ops_t *o, const float *running_mean,
                              const float *running_var, int C, double eps, double *saved);
int opc_bn_apply(const ops_t *o, const void *x, size_t P, int C, const double *saved,
                 const void *gamma, const void *beta, int relu, void *y);
int opc_bn_apply_ld(const ops_t *o, const void *x, size_t P, int C, const double *saved,
                    const void *gamma, const void *beta, int relu, void *y, size_t ldy);
int opc_bn_apply_pool(const ops_t *o, const void *x, int n, int h, int w, int C,
                      const double *saved, const void *gamma, const void *beta, int relu, void *y,
                      size_t ldy, void *pooled, uint8_t *arg);
int opc_bn_bwd_reduce(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x,
                      size_t P, int C, const double *saved, double *sums, void *dgamma,
                      void *dbeta, int acc);
int opc_bn_bwd_apply(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x, size_t P,
                     int C, const double *saved, const double *sums, const void *gamma,
                     void *dx);
int opc_bn_bwd_reduce_1x1(const ops_t *o, const void *g, const void *w, int K,
                          const ops_relu_t *relu, const void *x, size_t P, int C,
                          const double *saved, double *sums, void *dgamma, void *dbeta, int acc);
int opc_bn_bwd_apply_1x1(const ops_t *o, const void *g, const void *w, int K,
                         const ops_relu_t *relu, const void *x, size_t P, int C,
                         const double *saved, const double *sums, const void *gamma, void *dx);
int opc_gn_fwd(const ops_t *o, const void *x, int n, size_t hw, int C, int G, double eps,
               const void *gamma, const void *beta, int relu, void *y, double *saved);
int opc_gn_bwd(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x, int n,
               size_t hw, int C, int G, const double *saved, const void *gamma, void *dx,
               void *dgamma, void *dbeta, int acc);

int opc_relu_fwd(const ops_t *o, const void *x, size_t count, void *y);
int opc_relu_bwd(const ops_t *o, const void *dy, const void *y, size_t count, void *dx);
int opc_maxpool_fwd(const ops_t *o, const void *x, int n, int h, int w, int C, void *y,
                    uint8_t *arg);
int opc_maxpool_bwd(const ops_t *o, const void *dy, const uint8_t *arg, int n, int h, int w,
                    int C, void *dx, int acc);
int opc_concat_fwd(const ops_t *o, const void *a, int ca, const void *b, int cb, size_t P,
                   void *y);
int opc_concat_bwd(const ops_t *o, const void *dy, int ca, int cb, size_t P, void *da, int acc_a,
                   void *db);
int opc_concat_bwd_gathered(const ops_t *o, const void *dy, int ca, int cb, int n, int H, int W,
                            void *da, int acc_a, void *db);
int opc_from_f32(const ops_t *o, const float *src, size_t count, void *dst);
int opc_to_f32(const ops_t *o, const void *src, size_t count, float *dst, int acc);

/* The loss's two passes around its per-pixel pass (loss_cuda.cu), for a kernel that makes the
 * per-pixel terms itself (head_train_cuda.cu): opc_loss_count counts the labels into the context's
 * bad[1] (the gradient's divisor) and records the first label out of range in bad[0]; after
 * nblocks partial loss sums at slots[2 ...], opc_loss_final writes (Σ, count) to dev_out. */
int opc_loss_count(const ops_t *o, const int32_t *labels, size_t P, int K, int ignore_index);
int opc_loss_final(const ops_t *o, int nblocks, double *dev_out);
/* The backward reduce's final sums from partials in the scratch (norm_cuda.cu: launch_stats's
 * layout for one sample, splits x 2C f64): sums, dgamma, dbeta as bn_bwd_reduce writes them. */
int opc_bn_bwd_final(const ops_t *o, int splits, int C, double *sums, void *dgamma, void *dbeta,
                     int acc);
/* The head's weight gradient from nblocks partials in ws, sk_wgrad_part's layout
 * (conv_skinny_cuda.cu): nblocks x cout x (cin + 1) f32, the last of each row the bias's. */
int opc_skinny_wgrad_final(const ops_t *o, const ops_conv_t *c, int nblocks, const void *ws,
                           void *dw, void *db, int acc);
/* ops.h head_train_1x1 (head_train_cuda.cu) */
int opc_head_train_1x1(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                       const double *saved, const void *gamma, const void *beta, const void *w,
                       const void *b, const int32_t *labels, int ignore_index, double scale,
                       double norm_count, void *logits, void *g, double *dev_out, void *dw,
                       void *db, double *sums, void *dgamma, void *dbeta, int acc, void *ws);
int opc_softmax_ce(const ops_t *o, const void *logits, const int32_t *labels, size_t P, int K,
                   int ignore_index, double scale, double norm_count, void *dlogits,
                   int32_t *pred, double *loss_sum, long *count);

#endif
