/* half.h — IEEE binary16 and bfloat16 <-> f32 conversions on the host, round to nearest even.
 * Used by the host collectives (f16/bf16 reduce in f32) and the CPU reference of the casts. */
#ifndef COLLECTIVES_REDUCE_HALF_H
#define COLLECTIVES_REDUCE_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t half_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float half_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

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

#endif
