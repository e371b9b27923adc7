/* gemm_cpu_tmpl.h — body of gemm_cpu.c for one element type: define T, SFX (name suffix) and
 * VL (elements per 32-byte vector) before including. */
#define GCAT_(a, b) a##_##b
#define GCAT(a, b) GCAT_(a, b)
#define GV GCAT(gemm_vec, SFX)
#define MR 6
#define NR (2 * VL)
#define KC 256
#define MC 120
#define NC 1536

typedef T GV __attribute__((vector_size(VL * sizeof(T))));

/* Packs op(A)[i0:i0+mc, k0:k0+kc] into MR-row slivers, k-major, zero-padded to MR rows. */
static inline __attribute__((always_inline)) void GCAT(pack_a, SFX)(
    int ta, const T *A, int lda, int i0, int k0, int mc, int kc, T *dst)
{
  for (int i = 0; i < mc; i += MR) {
    int mr = mc - i < MR ? mc - i : MR;
    for (int k = 0; k < kc; k++) {
      for (int r = 0; r < mr; r++) {
        size_t row = (size_t)(i0 + i + r), col = (size_t)(k0 + k);
        dst[r] = ta ? A[col * lda + row] : A[row * lda + col];
      }
      for (int r = mr; r < MR; r++) dst[r] = 0;
      dst += MR;
    }
  }
}

/* Packs op(B)[k0:k0+kc, j0:j0+nc] into NR-column slivers, k-major, zero-padded to NR. */
static inline __attribute__((always_inline)) void GCAT(pack_b, SFX)(
    int tb, const T *B, int ldb, int k0, int j0, int kc, int nc, T *dst)
{
  for (int j = 0; j < nc; j += NR) {
    int nr = nc - j < NR ? nc - j : NR;
    for (int k = 0; k < kc; k++) {
      size_t row = (size_t)(k0 + k);
      if (!tb && nr == NR) {
        memcpy(dst, B + row * ldb + j0 + j, NR * sizeof(T));
      } else {
        for (int c = 0; c < nr; c++) {
          size_t col = (size_t)(j0 + j + c);
          dst[c] = tb ? B[col * ldb + row] : B[row * ldb + col];
        }
        for (int c = nr; c < NR; c++) dst[c] = 0;
      }
      dst += NR;
    }
  }
}

/* C[0:mr, 0:nr] = alpha * a·b + (first ? beta * C : C), accumulators in registers. */
static inline __attribute__((always_inline)) void GCAT(micro, SFX)(
    int kc, const T *restrict a, const T *restrict b, T *restrict c, int ldc, int mr, int nr,
    T alpha, T beta, int first)
{
  /* Twelve named accumulators (MR = 6 rows x 2 vectors) so they stay in registers. */
  GV c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
  GV c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
  for (int k = 0; k < kc; k++) {
    GV b0, b1;
    memcpy(&b0, b + (size_t)k * NR, sizeof b0);
    memcpy(&b1, b + (size_t)k * NR + VL, sizeof b1);
    const T *ak = a + (size_t)k * MR;
    GV a0 = (GV){0} + ak[0], a1 = (GV){0} + ak[1], a2 = (GV){0} + ak[2];
    c00 += a0 * b0; c01 += a0 * b1;
    c10 += a1 * b0; c11 += a1 * b1;
    c20 += a2 * b0; c21 += a2 * b1;
    GV a3 = (GV){0} + ak[3], a4 = (GV){0} + ak[4], a5 = (GV){0} + ak[5];
    c30 += a3 * b0; c31 += a3 * b1;
    c40 += a4 * b0; c41 += a4 * b1;
    c50 += a5 * b0; c51 += a5 * b1;
  }
  GV acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  T out[MR][NR];
  memcpy(out, acc, sizeof out);
  for (int i = 0; i < mr; i++) {
    T *ci = c + (size_t)i * ldc;
    if (!first)
      for (int j = 0; j < nr; j++) ci[j] += alpha * out[i][j];
    else if (beta == 0)
      for (int j = 0; j < nr; j++) ci[j] = alpha * out[i][j];
    else
      for (int j = 0; j < nr; j++) ci[j] = beta * ci[j] + alpha * out[i][j];
  }
}

GEMM_CLONES
void GCAT(gemm_cpu, SFX)(int ta, int tb, int M, int N, int K, T alpha, const T *A, int lda,
                         const T *B, int ldb, T beta, T *C, int ldc)
{
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
    return;
  }
  T *pb = pack_space(sizeof(T) * ((size_t)KC * (NC + NR) + (size_t)(MC + MR) * KC));
  if (!pb) { /* out of memory for 1.5 MB of packing space: fall back to the plain loop */
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        T s = 0;
        for (int k = 0; k < K; k++)
          s += (ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
               (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
        T *cij = &C[(size_t)i * ldc + j];
        *cij = alpha * s + (beta == 0 ? 0 : beta * *cij);
      }
    return;
  }
  T *pa = pb + (size_t)KC * (NC + NR);
  for (int j0 = 0; j0 < N; j0 += NC) {
    int nc = N - j0 < NC ? N - j0 : NC;
    for (int k0 = 0; k0 < K; k0 += KC) {
      int kc = K - k0 < KC ? K - k0 : KC;
      GCAT(pack_b, SFX)(tb, B, ldb, k0, j0, kc, nc, pb);
      for (int i0 = 0; i0 < M; i0 += MC) {
        int mc = M - i0 < MC ? M - i0 : MC;
        GCAT(pack_a, SFX)(ta, A, lda, i0, k0, mc, kc, pa);
        for (int j = 0; j < nc; j += NR) {
          int nr = nc - j < NR ? nc - j : NR;
          for (int i = 0; i < mc; i += MR) {
            int mr = mc - i < MR ? mc - i : MR;
            GCAT(micro, SFX)(kc, pa + (size_t)i * kc, pb + (size_t)j * kc,
                             C + (size_t)(i0 + i) * ldc + j0 + j, ldc, mr, nr, alpha, beta,
                             k0 == 0);
          }
        }
      }
    }
  }
}

#undef GCAT_
#undef GCAT
#undef GV
#undef MR
#undef NR
#undef KC
#undef MC
#undef NC
