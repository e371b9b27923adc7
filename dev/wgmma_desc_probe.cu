/* wgmma_desc_probe.cu — what a wgmma shared-memory descriptor does with a matrix that starts
 * part-way into a 128-byte swizzle pattern (1024 bytes = 8 lines of 128 bytes), for the next
 * convolution designs: an A operand (m64 x k16, K-major, 128-byte swizzle) laid out the way the
 * copy engine writes it (16-byte chunk j of line L at chunk j ^ (L & 7), L from a 1024-byte
 * boundary) is read through a descriptor starting `shift` lines (0..7) in, with the base-offset
 * field 0 or (start >> 7) & 7; D = A B^T is compared with the exact integer result. shift 0 also
 * checks the accumulator layout the fused convolution assumes. A second probe reads B
 * MN-major (transposed: line k holds the 64 n-values of row k of B, as an NHWC tile holds the
 * channels of one pixel; the weight gradient's pixels-as-K operands are laid out so) starting
 * `shift` lines in, with two readings of the descriptor's two offsets (leading 16 / stride 1024
 * bytes, and the other way round). Built for sm_90a; dev/conv_sm90_bench prints the answers. */
#include "config.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dev/wgmma_desc_probe.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma_desc_probe.cu needs sm_90a: compile it with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace {

constexpr int LINES_A = 72, LINES_B = 64;

__device__ int a_val(int line, int c) { return (line * 7 + c * 3) % 11 - 5; }
__device__ int b_val(int n, int c) { return (n * 5 + c) % 7 - 3; }

__device__ uint32_t swz(int line, int c) /* byte offset of element c of line */
{
  return line * 128 + (((c >> 3) ^ (line & 7)) << 4) + (c & 7) * 2;
}

/* mn 0: A starts `shift` lines in (base offset per use_base), B K-major. mn 1: A at line 0,
 * B MN-major from line `shift` with (leading, stride) byte offsets (16, 1024) (use_base 0) or
 * (1024, 16) (use_base 1). */
template <int MN>
__global__ void __launch_bounds__(128) probe_kernel(int shift, int use_base, float *out)
{
  __shared__ __align__(1024) unsigned char a[LINES_A * 128];
  __shared__ __align__(1024) unsigned char b[LINES_B * 128];
  for (int i = threadIdx.x; i < LINES_A * 64; i += 128) {
    __nv_bfloat16 v = __float2bfloat16((float)a_val(i / 64, i % 64));
    memcpy(a + swz(i / 64, i % 64), &v, 2);
  }
  for (int i = threadIdx.x; i < LINES_B * 64; i += 128) {
    __nv_bfloat16 v = __float2bfloat16((float)b_val(i / 64, i % 64));
    memcpy(b + swz(i / 64, i % 64), &v, 2);
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const uint32_t sa = (uint32_t)__cvta_generic_to_shared(a) + (MN ? 0 : 128 * shift);
  const uint32_t sb = (uint32_t)__cvta_generic_to_shared(b) + (MN ? 128 * shift : 0);
  const uint64_t common = ((uint64_t)1 << 16) | ((uint64_t)64 << 32) | ((uint64_t)1 << 62);
  const uint64_t da = (uint64_t)((sa & 0x3FFFF) >> 4) | common |
                      (!MN && use_base ? (uint64_t)((sa >> 7) & 7) << 49 : 0);
  const uint64_t mn_offsets = use_base ? ((uint64_t)64 << 16) | ((uint64_t)1 << 32)
                                       : ((uint64_t)1 << 16) | ((uint64_t)64 << 32);
  const uint64_t db = (uint64_t)((sb & 0x3FFFF) >> 4) |
                      (MN ? mn_offsets | ((uint64_t)1 << 62) : common);
  float d[32];
  for (int i = 0; i < 32; i++) d[i] = 0.f;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %34, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, %35;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "n"(0), "n"(MN));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int i = 0; i < 32; i++) asm volatile("" : "+f"(d[i])::"memory");
  /* the accumulator layout the fused convolution assumes */
  const int w = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  for (int k = 0; k < 32; k++) {
    const int j = k >> 2, h = (k >> 1) & 1, e = k & 1;
    out[(16 * w + g + 8 * h) * 64 + 8 * j + 2 * t + e] = d[k];
  }
}

} // namespace

extern "C" int wgmma_desc_probe(int mn, int bad[2][8], char *err, size_t errlen)
{
  float *dout = NULL, h[64 * 64];
  cudaError_t e = cudaMalloc(&dout, sizeof h);
  for (int use_base = 0; use_base < 2 && e == cudaSuccess; use_base++)
    for (int shift = 0; shift < 8 && e == cudaSuccess; shift++) {
      if (mn)
        probe_kernel<1><<<1, 128>>>(shift, use_base, dout);
      else
        probe_kernel<0><<<1, 128>>>(shift, use_base, dout);
      if ((e = cudaGetLastError()) != cudaSuccess ||
          (e = cudaMemcpy(h, dout, sizeof h, cudaMemcpyDeviceToHost)) != cudaSuccess)
        break;
      int n_bad = 0;
      for (int m = 0; m < 64; m++)
        for (int n = 0; n < 64; n++) {
          int want = 0;
          for (int c = 0; c < 16; c++) { /* a_val(m + shift, c) b_val(n, c), or MN-major:
                                          * a_val(m, c) times the b buffer at line shift + c,
                                          * element n, which holds b_val(shift + c, n) */
            if (mn)
              want += ((m * 7 + c * 3) % 11 - 5) * (((shift + c) * 5 + n) % 7 - 3);
            else
              want += (((m + shift) * 7 + c * 3) % 11 - 5) * ((n * 5 + c) % 7 - 3);
          }
          n_bad += h[m * 64 + n] != (float)want;
        }
      bad[use_base][shift] = n_bad;
    }
  cudaFree(dout);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "descriptor probe: %s", cudaGetErrorString(e));
    return -1;
  }
  return 0;
}
