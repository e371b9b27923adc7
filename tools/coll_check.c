/* coll_check.c — deterministic inputs and f64 references for checking collectives. Inputs are
 * chosen so every dtype represents them exactly (multiples of 1/8 in [-8, 8]); references are
 * computed in f64 and rounded once to the dtype, so the only error a correct implementation can
 * show is its own accumulation and final rounding, which coll_tolerance bounds. */
#include "config.h"

#include "tools/coll_check.h"

#include <math.h>
#include <stdint.h>

#include "collectives/reduce/half.h"

static int is_int(shmddp_dtype_t dtype)
{
  return dtype == SHMDDP_I32 || dtype == SHMDDP_I64 || dtype == SHMDDP_I8 || dtype == SHMDDP_U8 ||
         dtype == SHMDDP_U32 || dtype == SHMDDP_U64;
}

static int is_unsigned(shmddp_dtype_t dtype)
{
  return dtype == SHMDDP_U8 || dtype == SHMDDP_U32 || dtype == SHMDDP_U64;
}

/* v as the integer type holds it: wrapped to its width (two's complement), as a double. */
static double int_wrap(double v, shmddp_dtype_t dtype)
{
  int64_t x = (int64_t)v;
  switch (dtype) {
  case SHMDDP_I8: return (double)(int8_t)(uint8_t)x;
  case SHMDDP_U8: return (double)(uint8_t)x;
  case SHMDDP_I32: return (double)(int32_t)(uint32_t)x;
  case SHMDDP_U32: return (double)(uint32_t)x;
  default: return (double)x; /* 64-bit: the patterns never leave the exact range of a double */
  }
}

double coll_pattern(int rank, size_t i, int iter, shmddp_dtype_t dtype, shmddp_op_t op)
{
  uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)(rank + 1) << 40) ^
               ((uint64_t)(iter + 1) << 20);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 32;
  if (op == SHMDDP_PROD) {
    /* 1, 2, -1, 0.5 ...: products of up to 8 stay exact in every dtype. */
    static const double v[4] = {1.0, 2.0, -1.0, 0.5};
    static const double vi[4] = {1.0, 2.0, -1.0, -2.0};
    static const double vu[4] = {1.0, 2.0, 3.0, 1.0}; /* 8-bit products wrap: modelled */
    if (is_unsigned(dtype)) return vu[h & 3];
    return is_int(dtype) ? vi[h & 3] : v[h & 3];
  }
  /* 8-bit floats: few significant bits (sums of 8 ranks are rounded once: modelled) */
  if (dtype == SHMDDP_F8E4M3) return (double)((int64_t)(h % 33) - 16) / 4.0;
  if (dtype == SHMDDP_F8E5M2) return (double)((int64_t)(h % 17) - 8) / 2.0;
  /* 8-bit: sums of 8 ranks stay in range for SUM (and wrap is modelled anyway) */
  if (dtype == SHMDDP_I8) return (double)((int64_t)(h % 31) - 15);
  if (dtype == SHMDDP_U8) return (double)(h % 31);
  if (is_unsigned(dtype)) return (double)(h % 2001);
  if (is_int(dtype)) return (double)((int64_t)(h % 2001) - 1000);
  /* multiples of 1/8 in [-8, 8): exact in bf16 (8 significant bits) */
  return (double)((int64_t)(h % 128) - 64) / 8.0;
}

void coll_fill(void *buf, size_t n, size_t first, int rank, int iter, shmddp_dtype_t dtype,
               shmddp_op_t op)
{
  for (size_t k = 0; k < n; k++) {
    double v = coll_pattern(rank, first + k, iter, dtype, op);
    switch (dtype) {
    case SHMDDP_F32: ((float *)buf)[k] = (float)v; break;
    case SHMDDP_F64: ((double *)buf)[k] = v; break;
    case SHMDDP_F16: ((uint16_t *)buf)[k] = f32_to_f16((float)v); break;
    case SHMDDP_BF16: ((uint16_t *)buf)[k] = f32_to_bf16((float)v); break;
    case SHMDDP_I32: ((int32_t *)buf)[k] = (int32_t)v; break;
    case SHMDDP_I64: ((int64_t *)buf)[k] = (int64_t)v; break;
    case SHMDDP_I8: ((int8_t *)buf)[k] = (int8_t)v; break;
    case SHMDDP_U8: ((uint8_t *)buf)[k] = (uint8_t)v; break;
    case SHMDDP_U32: ((uint32_t *)buf)[k] = (uint32_t)v; break;
    case SHMDDP_U64: ((uint64_t *)buf)[k] = (uint64_t)v; break;
    case SHMDDP_F8E4M3: ((uint8_t *)buf)[k] = f32_to_f8e4m3((float)v); break;
    case SHMDDP_F8E5M2: ((uint8_t *)buf)[k] = f32_to_f8e5m2((float)v); break;
    default: break;
    }
  }
}

double coll_load(const void *buf, size_t k, shmddp_dtype_t dtype)
{
  switch (dtype) {
  case SHMDDP_F32: return ((const float *)buf)[k];
  case SHMDDP_F64: return ((const double *)buf)[k];
  case SHMDDP_F16: return f16_to_f32(((const uint16_t *)buf)[k]);
  case SHMDDP_BF16: return bf16_to_f32(((const uint16_t *)buf)[k]);
  case SHMDDP_I32: return ((const int32_t *)buf)[k];
  case SHMDDP_I64: return (double)((const int64_t *)buf)[k];
  case SHMDDP_I8: return ((const int8_t *)buf)[k];
  case SHMDDP_U8: return ((const uint8_t *)buf)[k];
  case SHMDDP_U32: return ((const uint32_t *)buf)[k];
  case SHMDDP_U64: return (double)((const uint64_t *)buf)[k];
  case SHMDDP_F8E4M3: return f8e4m3_to_f32(((const uint8_t *)buf)[k]);
  case SHMDDP_F8E5M2: return f8e5m2_to_f32(((const uint8_t *)buf)[k]);
  default: return NAN;
  }
}

double coll_round(double v, shmddp_dtype_t dtype)
{
  switch (dtype) {
  case SHMDDP_F32: return (float)v;
  case SHMDDP_F16: return f16_to_f32(f32_to_f16((float)v));
  case SHMDDP_BF16: return bf16_to_f32(f32_to_bf16((float)v));
  case SHMDDP_F8E4M3: return f8e4m3_to_f32(f32_to_f8e4m3((float)v));
  case SHMDDP_F8E5M2: return f8e5m2_to_f32(f32_to_f8e5m2((float)v));
  default:
    return is_int(dtype) ? int_wrap(trunc(v), dtype) : v;
  }
}

double coll_expected(int nranks, size_t i, int iter, shmddp_dtype_t dtype, shmddp_op_t op)
{
  double acc = coll_pattern(0, i, iter, dtype, op);
  for (int r = 1; r < nranks; r++) {
    double x = coll_pattern(r, i, iter, dtype, op);
    switch (op) {
    case SHMDDP_SUM: case SHMDDP_AVG: acc = is_int(dtype) ? int_wrap(acc + x, dtype) : acc + x; break;
    case SHMDDP_PROD: acc = is_int(dtype) ? int_wrap(acc * x, dtype) : acc * x; break;
    case SHMDDP_MIN: acc = x < acc ? x : acc; break;
    case SHMDDP_MAX: acc = x > acc ? x : acc; break;
    default: break;
    }
  }
  if (op == SHMDDP_AVG) acc /= nranks;
  return coll_round(acc, dtype);
}

double coll_tolerance(shmddp_dtype_t dtype, int nranks, double want)
{
  double mag = fabs(want) + 8.0; /* inputs are at most 8 in magnitude */
  switch (dtype) {
  case SHMDDP_F32: return mag * 1e-6 * nranks;
  case SHMDDP_F64: return mag * 1e-14 * nranks;
  case SHMDDP_F16: return fabs(want) * 2e-3 + 1e-3; /* one f16 rounding of an f32 sum */
  case SHMDDP_BF16: return fabs(want) * 1.6e-2 + 1e-2;
  /* Sums of these inputs are exact in f32 and rounded once; an AVG quotient twice: one unit
   * in the last place (a quarter or an eighth of the value's binade). */
  case SHMDDP_F8E4M3: return fabs(want) * 0.125 + 1.0 / 512;
  case SHMDDP_F8E5M2: return fabs(want) * 0.25 + 1.0 / 65536;
  default: return 0; /* integers are exact (AVG truncates in both) */
  }
}

size_t coll_count_errors(const void *got, size_t n, size_t first, int nranks, int iter,
                         shmddp_dtype_t dtype, shmddp_op_t op, size_t *first_bad)
{
  size_t bad = 0;
  for (size_t k = 0; k < n; k++) {
    double want = coll_expected(nranks, first + k, iter, dtype, op);
    double g = coll_load(got, k, dtype);
    if (!(fabs(g - want) <= coll_tolerance(dtype, nranks, want))) {
      if (bad == 0 && first_bad) *first_bad = first + k;
      bad++;
    }
  }
  return bad;
}

static uint64_t fnv1a(const void *p, size_t n)
{
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

int coll_same_on_all_ranks(shmddp_comm_t *comm, const void *p, size_t n)
{
  int64_t h[2];
  h[0] = h[1] = (int64_t)fnv1a(p, n);
  shmddp_all_reduce(comm, &h[0], &h[0], 1, SHMDDP_I64, SHMDDP_MIN, SHMDDP_HOST);
  shmddp_all_reduce(comm, &h[1], &h[1], 1, SHMDDP_I64, SHMDDP_MAX, SHMDDP_HOST);
  return h[0] == h[1];
}
