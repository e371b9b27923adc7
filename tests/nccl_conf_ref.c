/* nccl_conf_ref.c — the conformance harness's reference model: each dtype's encoding and
 * rounding (its own encoders, independent of the library's), the values every rank contributes,
 * and the f64 reference of a reduction over the ranks. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tests/nccl_conf.h"

/* ---- the reference model of the dtypes ---- */

typedef struct {
  int ebits, mbits, emin; /* exponent and mantissa bits, smallest normal exponent */
  double max;             /* largest finite value */
  int has_inf;            /* overflow gives infinity (else NaN: e4m3 has no infinity) */
} fmt_t;

static const fmt_t F16 = {5, 10, -14, 65504.0, 1};
static const fmt_t BF16 = {8, 7, -126, 3.3895313892515355e38, 1};
static const fmt_t E4M3 = {4, 3, -6, 448.0, 0};
static const fmt_t E5M2 = {5, 2, -14, 57344.0, 1};

static const fmt_t *small_float(ncclDataType_t t)
{
  switch (t) {
  case ncclFloat16: return &F16;
  case ncclBfloat16: return &BF16;
  case ncclFloat8e4m3: return &E4M3;
  case ncclFloat8e5m2: return &E5M2;
  default: return NULL;
  }
}

static int is_int(ncclDataType_t t) { return t <= ncclUint64; }
static int is_unsigned(ncclDataType_t t)
{
  return t == ncclUint8 || t == ncclUint32 || t == ncclUint64;
}

/* v rounded to nearest even with f's precision and range. */
static double round_fmt(double v, const fmt_t *f)
{
  if (isnan(v) || isinf(v) || v == 0) return v;
  int e;
  frexp(fabs(v), &e);
  int lead = e - 1 < f->emin ? f->emin : e - 1;
  double q = ldexp(1.0, lead - f->mbits);
  double r = nearbyint(v / q) * q; /* the default rounding mode: to nearest, ties to even */
  if (fabs(r) > f->max) return f->has_inf ? copysign(INFINITY, v) : NAN;
  return r;
}

static uint32_t encode_fmt(double v, const fmt_t *f)
{
  int bias = (1 << (f->ebits - 1)) - 1, emask = (1 << f->ebits) - 1;
  uint32_t sign = signbit(v) ? 1u << (f->ebits + f->mbits) : 0;
  double r = round_fmt(v, f);
  if (isnan(r)) /* e4m3: all ones; the others: a quiet NaN */
    return f->has_inf ? (uint32_t)emask << f->mbits | 1u << (f->mbits - 1)
                      : (uint32_t)((1 << (f->ebits + f->mbits)) - 1);
  if (isinf(r)) return sign | (uint32_t)emask << f->mbits;
  double a = fabs(r);
  if (a == 0) return sign;
  int e;
  frexp(a, &e);
  if (e - 1 < f->emin) /* subnormal */
    return sign | (uint32_t)(a / ldexp(1.0, f->emin - f->mbits));
  uint32_t man = (uint32_t)((ldexp(a, -(e - 1)) - 1.0) * (double)(1u << f->mbits));
  return sign | (uint32_t)(e - 1 + bias) << f->mbits | man;
}

static double decode_fmt(uint32_t bits, const fmt_t *f)
{
  int bias = (1 << (f->ebits - 1)) - 1, emask = (1 << f->ebits) - 1;
  int neg = (bits >> (f->ebits + f->mbits)) & 1;
  int ex = (int)(bits >> f->mbits) & emask;
  uint32_t man = bits & ((1u << f->mbits) - 1);
  double v;
  if (f->has_inf && ex == emask) v = man ? NAN : INFINITY;
  else if (!f->has_inf && ex == emask && man == (1u << f->mbits) - 1) v = NAN;
  else if (ex == 0) v = ldexp((double)man, f->emin - f->mbits);
  else v = ldexp(1.0 + (double)man / (double)(1u << f->mbits), ex - bias);
  return neg ? -v : v;
}

size_t conf_type_size(ncclDataType_t t)
{
  static const size_t s[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return (unsigned)t < ncclNumTypes ? s[t] : 0;
}

const char *conf_type_name(ncclDataType_t t)
{
  static const char *const n[ncclNumTypes] = {"i8", "u8", "i32", "u32", "i64", "u64", "f16",
                                             "f32", "f64", "bf16", "f8e4m3", "f8e5m2"};
  return (unsigned)t < ncclNumTypes ? n[t] : "?";
}

/* An integer value as its type holds it (wrapped to its width). */
static double wrap_int(double v, ncclDataType_t t)
{
  int64_t x = (int64_t)v;
  switch (t) {
  case ncclInt8: return (double)(int8_t)(uint8_t)x;
  case ncclUint8: return (double)(uint8_t)x;
  case ncclInt32: return (double)(int32_t)(uint32_t)x;
  case ncclUint32: return (double)(uint32_t)x;
  default: return (double)x; /* 64-bit: the values stay in the exact range of a double */
  }
}

static double round_type(double v, ncclDataType_t t)
{
  if (is_int(t)) return wrap_int(trunc(v), t);
  if (t == ncclFloat32) return (float)v;
  if (t == ncclFloat64) return v;
  return round_fmt(v, small_float(t));
}

void conf_encode(void *dst, size_t k, double v, ncclDataType_t t)
{
  unsigned char *p = (unsigned char *)dst + k * conf_type_size(t);
  const fmt_t *f = small_float(t);
  if (f) {
    uint32_t b = encode_fmt(v, f);
    if (conf_type_size(t) == 1) p[0] = (unsigned char)b;
    else memcpy(p, &(uint16_t){(uint16_t)b}, 2);
    return;
  }
  double w = round_type(v, t);
  switch (t) {
  case ncclInt8: *(int8_t *)p = (int8_t)w; break;
  case ncclUint8: *(uint8_t *)p = (uint8_t)w; break;
  case ncclInt32: memcpy(p, &(int32_t){(int32_t)w}, 4); break;
  case ncclUint32: memcpy(p, &(uint32_t){(uint32_t)w}, 4); break;
  case ncclInt64: memcpy(p, &(int64_t){(int64_t)w}, 8); break;
  case ncclUint64: memcpy(p, &(uint64_t){(uint64_t)w}, 8); break;
  case ncclFloat32: memcpy(p, &(float){(float)w}, 4); break;
  case ncclFloat64: memcpy(p, &w, 8); break;
  default: break;
  }
}

double conf_decode(const void *src, size_t k, ncclDataType_t t)
{
  const unsigned char *p = (const unsigned char *)src + k * conf_type_size(t);
  const fmt_t *f = small_float(t);
  if (f) {
    uint16_t b = 0;
    if (conf_type_size(t) == 1) b = p[0];
    else memcpy(&b, p, 2);
    return decode_fmt(b, f);
  }
  union { int8_t i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64; float f;
          double d; } u;
  memcpy(&u, p, conf_type_size(t));
  switch (t) {
  case ncclInt8: return u.i8;
  case ncclUint8: return u.u8;
  case ncclInt32: return u.i32;
  case ncclUint32: return u.u32;
  case ncclInt64: return (double)u.i64;
  case ncclUint64: return (double)u.u64;
  case ncclFloat32: return u.f;
  default: return u.d;
  }
}

/* ---- what each rank contributes ---- */

/* Rank r's element i in call `call`: exact in t, and sums of 8 of them exact in the
 * accumulator. PROD stays near 1 so that products of 8 neither overflow nor vanish. */
double conf_value(int r, size_t i, int call, ncclDataType_t t, int op)
{
  uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)(r + 1) << 40) ^
               ((uint64_t)(call + 1) << 20);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 32;
  if (op == ncclProd) {
    static const double f[4] = {1.0, 2.0, -1.0, 0.5}, s[4] = {1, 2, -1, -2}, u[4] = {1, 2, 3, 1};
    return is_unsigned(t) ? u[h & 3] : is_int(t) ? s[h & 3] : f[h & 3];
  }
  switch (t) {
  case ncclInt8: return (double)((int64_t)(h % 31) - 15);
  case ncclUint8: return (double)(h % 31);
  case ncclUint32: case ncclUint64: return (double)(h % 2001);
  case ncclInt32: case ncclInt64: return (double)((int64_t)(h % 2001) - 1000);
  case ncclFloat8e4m3: return (double)((int64_t)(h % 33) - 16) / 4.0; /* 4 significant bits */
  case ncclFloat8e5m2: return (double)((int64_t)(h % 17) - 8) / 2.0;  /* 3 significant bits */
  default: return (double)((int64_t)(h % 128) - 64) / 8.0;            /* exact in bf16 */
  }
}

/* Each rank's own scalar for a pre-multiplied sum, host (0) or device (1) residence. */
double conf_scalar(int r, int device_scalar, ncclDataType_t t)
{
  if (is_int(t)) return r + 1 + device_scalar;
  return device_scalar ? (r % 3 + 2) * 0.25 : (r % 4 + 1) * 0.5;
}

/* The reference of reducing element i over n ranks. */
double conf_reference(int n, size_t i, int call, ncclDataType_t t, int op)
{
  int premul = op >= CONF_PREMUL_HOST;
  int base = premul ? ncclSum : op;
  double acc = 0;
  for (int r = 0; r < n; r++) {
    double x = conf_value(r, i, call, t, base);
    if (premul) x = round_type(x * conf_scalar(r, op == CONF_PREMUL_DEVICE, t), t);
    if (r == 0) acc = x;
    else if (base == ncclSum || base == ncclAvg) acc += x;
    else if (base == ncclProd) acc *= x;
    else if (base == ncclMax) acc = x > acc ? x : acc;
    else acc = x < acc ? x : acc;
  }
  if (base == ncclAvg) return is_int(t) ? trunc(wrap_int(acc, t) / n) : round_type(acc / n, t);
  return round_type(acc, t);
}

/* One unit in the last place of t at v (the AVG quotient is rounded twice). */
double conf_ulp(double v, ncclDataType_t t)
{
  if (is_int(t)) return 0;
  int mbits = t == ncclFloat32 ? 23 : t == ncclFloat64 ? 52 : small_float(t)->mbits;
  int emin = t == ncclFloat32 ? -126 : t == ncclFloat64 ? -1022 : small_float(t)->emin;
  int e;
  frexp(fabs(v), &e);
  return ldexp(1.0, (e - 1 < emin ? emin : e - 1) - mbits);
}
