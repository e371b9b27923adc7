/* half.h — IEEE binary16, bfloat16 and the two 8-bit floats <-> f32 conversions on the host,
 * round to nearest even. Used by the host collectives (the small floats reduce in f32) and the
 * CPU reference of the casts and of the GPU reductions. */
#ifndef COLLECTIVES_REDUCE_HALF_H
#define COLLECTIVES_REDUCE_HALF_H

#include <stdint.h>
#include <string.h>

/* The 8-bit float conversions below also serve the GPU reductions (reduce_cuda.h). */
#ifdef __CUDACC__
#define HALF_HD __host__ __device__
#else
#define HALF_HD
#endif

static inline HALF_HD uint32_t half_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline HALF_HD float half_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float bf16_to_f32(uint16_t h) { return half_bits_f32((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f)
{
  uint32_t u = half_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h)
{
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return half_bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return half_bits_f32(sign);
    /* subnormal: man * 2^-24 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return half_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t f32_to_f16(float f)
{
  uint32_t u = half_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* rounds to >= 65520: inf */
  if (a < 0x38800000u) {                                    /* below 2^-14: subnormal or 0 */
    /* Add 0.5 (2^-1) so the hardware's round-to-nearest-even aligns the mantissa for us. */
    float v = half_bits_f32(a) + 0.5f;
    return (uint16_t)(sign | (uint16_t)(half_f32_bits(v) - 0x3f000000u));
  }
  uint32_t mant_odd = (a >> 13) & 1u;
  a += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round to nearest even */
  return (uint16_t)(sign | (uint16_t)(a >> 13));
}

/* The 8-bit floats (OCP FP8): e4m3 (bias 7, no infinity: 0x7f/0xff are NaN, 448 the largest
 * value) and e5m2 (bias 15, IEEE-like: 0x7c is infinity). f32 -> fp8 rounds to nearest even and
 * does not saturate: a value that rounds beyond the largest finite one becomes NaN (e4m3) or
 * infinity (e5m2); NaN stays NaN. */
static inline HALF_HD float f8_to_f32(uint8_t b, int mbits, int bias, int has_inf)
{
  uint32_t sign = (uint32_t)(b & 0x80u) << 24;
  uint32_t ebits = 7u - (uint32_t)mbits, exp = (b >> mbits) & ((1u << ebits) - 1u);
  uint32_t man = b & ((1u << mbits) - 1u);
  if (exp == (1u << ebits) - 1u && (has_inf || man == (1u << mbits) - 1u)) {
    if (has_inf && man == 0) return half_bits_f32(sign | 0x7f800000u);
    return half_bits_f32(sign | 0x7fc00000u);
  }
  if (exp == 0) { /* subnormal: man * 2^(1 - bias - mbits) */
    float v = (float)man * half_bits_f32((uint32_t)(127 + 1 - bias - mbits) << 23);
    return sign ? -v : v;
  }
  return half_bits_f32(sign | (exp + 127u - (uint32_t)bias) << 23 | man << (23 - mbits));
}

static inline HALF_HD uint8_t f32_to_f8(float f, int mbits, int bias, int has_inf)
{
  uint32_t u = half_f32_bits(f), a = u & 0x7fffffffu;
  uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  uint8_t nan = has_inf ? (uint8_t)(0x7cu | 1u << (mbits - 1)) : 0x7fu;
  uint8_t inf = has_inf ? 0x7cu : 0x7fu; /* e4m3 has no infinity: NaN */
  uint32_t maxcode = has_inf ? 0x7bu : 0x7eu;
  if (a > 0x7f800000u) return (uint8_t)(sign | nan);
  if (a >= 0x7f800000u) return (uint8_t)(sign | inf);
  int emin = 1 - bias;
  if ((int)(a >> 23) - 127 < emin) {
    /* Subnormal (or rounds up to the smallest normal): a multiple of 2^(emin - mbits). The
     * product is exact; adding and subtracting 2^23 rounds it to an integer, to nearest even. */
    float v = half_bits_f32(a) * half_bits_f32((uint32_t)(127 + mbits - emin) << 23);
    uint32_t k = (uint32_t)((v + 8388608.0f) - 8388608.0f);
    return (uint8_t)(sign | k);
  }
  int shift = 23 - mbits;
  uint32_t r = (a + (1u << (shift - 1)) - 1u + ((a >> shift) & 1u)) >> shift;
  r -= (uint32_t)(127 - bias) << mbits; /* rebias */
  if (r > maxcode) return (uint8_t)(sign | inf);
  return (uint8_t)(sign | r);
}

static inline float f8e4m3_to_f32(uint8_t b) { return f8_to_f32(b, 3, 7, 0); }
static inline float f8e5m2_to_f32(uint8_t b) { return f8_to_f32(b, 2, 15, 1); }
static inline uint8_t f32_to_f8e4m3(float f) { return f32_to_f8(f, 3, 7, 0); }
static inline uint8_t f32_to_f8e5m2(float f) { return f32_to_f8(f, 2, 15, 1); }

#endif
