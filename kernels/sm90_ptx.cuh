/* sm90_ptx.cuh — the Hopper (sm_90a) instructions the convolutions of kernels/conv_sm90.h are
 * written with, as small inline wrappers: mbarriers, the tensor copy engine (TMA) loads and
 * stores, proxy fences, named barriers, shared-memory vector accesses, ldmatrix / stmatrix,
 * register hand-over between warpgroups (setmaxnreg), wgmma with A from registers, the
 * 128-byte-swizzle descriptor and address, and bf16 packing. Shared by the .cu files that
 * include it (namespace sm90); compiled for sm_90a only. */
#ifndef KERNELS_SM90_PTX_CUH
#define KERNELS_SM90_PTX_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>

namespace sm90 {


__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
  asm volatile("{\n\t.reg .pred p;\n"
               "WAIT:\n\t"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
               "@!p bra WAIT;\n}" ::"r"(bar),
               "r"(parity)
               : "memory");
}

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                            uint32_t bar)
{
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
               "l"(map), "r"(c0), "r"(c1), "r"(bar)
               : "memory");
}

__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                            int c2, int c3, uint32_t bar)
{
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
               "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
               : "memory");
}

__device__ __forceinline__ void tma_store_4d(const CUtensorMap *map, uint32_t src, int c0, int c1,
                                             int c2, int c3)
{
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group"
               " [%0, {%2, %3, %4, %5}], [%1];" ::"l"(map),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* The calling thread's tensor stores have read their shared memory (so it may be reused). */
__device__ __forceinline__ void tma_store_wait_read()
{
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

/* ... and have completed (before the block exits). */
__device__ __forceinline__ void tma_store_wait_all()
{
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* Ordinary shared-memory writes before this are ordered before later async-proxy accesses (the
 * copy engine's loads and stores, wgmma) of the same bytes. */
__device__ __forceinline__ void fence_proxy_async()
{
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void named_bar(int id, int threads)
{
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void ld_shared_v4(uint32_t addr, uint32_t (&v)[4])
{
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void st_shared_v4(uint32_t addr, const uint32_t (&v)[4])
{
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v[0]), "r"(v[1]),
               "r"(v[2]), "r"(v[3])
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&a)[4])
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4])
{
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

/* Hands registers between the warpgroups (all warps of one execute it): the loader and the
 * prologue (warpgroup 0) need few, the consumers' accumulators, fragments and sums many. */
template <int N> __device__ __forceinline__ void regs_dec()
{
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void regs_inc()
{
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit()
{
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait()
{
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* The instruction of wgmma_rs_at and wgmma_rs_at_set: operands 0-31 the accumulators, 32-35 A,
 * 36 B's base descriptor, 37 scale_d, 38 TRANS_B, 39 the offset added to the base. */
#define SM90_WGMMA_RS_AT                                                                           \
  "{\n\t.reg .pred p;\n\t.reg .b64 bd;\n\t"                                                        \
  "setp.ne.b32 p, %37, 0;\n\t"                                                                     \
  "add.s64 bd, %36, %39;\n\t"                                                                      \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "         \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                             \
  "{%32, %33, %34, %35}, bd, p, 1, 1, %38;\n}"

/* d (+)= a * b: m64n64k16, bf16 in, f32 accumulators; A from registers (the fragment of
 * ldmatrix_x4 above), B through a descriptor, K-major (TRANS_B 0) or MN-major (1), formed
 * inside the instruction's block as base + OFF (16-byte units, an immediate; the start field
 * must not overflow): a kernel that issues many wgmmas at different offsets from one base
 * keeps only the base live, not a descriptor per offset. scale_d 0: d = a * b. */
template <uint32_t OFF, int TRANS_B = 0>
__device__ __forceinline__ void wgmma_rs_at(float (&d)[32], const uint32_t (&a)[4], uint64_t base,
                                            int scale_d)
{
  asm volatile(SM90_WGMMA_RS_AT
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(base), "r"(scale_d), "n"(TRANS_B),
        "n"(OFF));
}

/* The same at the descriptor bdesc itself. */
template <int TRANS_B = 0>
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t bdesc,
                                         int scale_d)
{
  wgmma_rs_at<0, TRANS_B>(d, a, bdesc, scale_d);
}

/* wgmma_rs_at with d = a * b: d only written (its registers need no values before). */
template <uint32_t OFF, int TRANS_B = 0>
__device__ __forceinline__ void wgmma_rs_at_set(float (&d)[32], const uint32_t (&a)[4],
                                                uint64_t base)
{
  asm volatile(SM90_WGMMA_RS_AT
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
        "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
        "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]),
        "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]),
        "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(base), "r"(0), "n"(TRANS_B),
        "n"(OFF));
}

/* The same with N = 128 (64 accumulators a thread: column 8 j + 2 (lane & 3) + e of rows
 * lane / 4 (+ 8) in d[4 j + 2 h + e], m64n64k16's layout continued over j < 16). */
template <int TRANS_B = 0>
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t bdesc,
                                         int scale_d)
{
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %69, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
        "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "r"(scale_d), "n"(TRANS_B));
}

/* Keeps the compiler from moving reads of the accumulators above wgmma_wait. */
__device__ __forceinline__ void acc_fence(float (&d)[32])
{
#pragma unroll
  for (int i = 0; i < 32; i++) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void acc_fence(float (&d)[64])
{
#pragma unroll
  for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* A shared-memory matrix descriptor: 128-byte swizzle, 8 lines (1024 bytes) between
 * core-matrix groups along K (the stride byte offset), leading byte offset 16 (unused by a
 * K-major operand; for an MN-major one of 64 elements across, the value that reads it right, as
 * dev/wgmma_desc_probe.cu showed), base offset 0: the swizzle follows the address bits, so the
 * start may be any 16-byte-aligned address of a 1024-aligned swizzled buffer. */
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr)
{
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)1 << 62);
}

/* Byte offset of 16-byte chunk `chunk` of line `line` in a 1024-aligned swizzled buffer. */
__device__ __forceinline__ uint32_t swz(uint32_t line, uint32_t chunk)
{
  return line * 128u + ((chunk ^ (line & 7)) << 4);
}

/* ldmatrix .trans: the four 8x8 matrices transposed (lane l addresses row l & 7 of matrix
 * l >> 3, as ldmatrix_x4): an A fragment of rows that lie across the lines. */
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t (&a)[4])
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(addr)
               : "memory");
}

/* stmatrix .trans: the four 8x8 matrices stored transposed (lane l addresses memory row l & 7
 * of matrix l >> 3): a fragment whose rows are channels and columns pixels lands as pixel
 * lines. */
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, const uint32_t (&r)[4])
{
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
  __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi); /* .x (low half) = lo */
  return *reinterpret_cast<uint32_t *>(&b);
}

} // namespace sm90

#endif
