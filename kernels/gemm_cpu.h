/* gemm_cpu.h — dense matrix multiply on the host, the CPU backend's workhorse for every
 * convolution (im2col / direct NHWC GEMMs). Row-major: C = alpha * op(A) op(B) + beta * C,
 * op(A) M x K, op(B) K x N; ta/tb != 0 take A/B transposed. beta == 0 ignores C's contents. */
#ifndef KERNELS_GEMM_CPU_H
#define KERNELS_GEMM_CPU_H

void gemm_cpu_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);
void gemm_cpu_f64(int ta, int tb, int M, int N, int K, double alpha, const double *A, int lda,
                  const double *B, int ldb, double beta, double *C, int ldc);

#endif
