/* check_reduce.c — the host reductions and half-precision conversions against independent f64
 * references. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/reduce/half.h"
#include "collectives/reduce/reduce_cpu.h"
#include "tools/coll_check.h"
#include "tests/failures.h"
#include "tests/suite_main.h"

/* Round x to a binary float with `mant` explicit mantissa bits, minimum normal exponent emin
 * and overflow threshold max_finite, using rint (round to nearest even) on a scaled value:
 * an implementation independent of the bit tricks in half.h. */
static double ref_round(double x, int mant, int emin, double max_finite)
{
  if (isnan(x)) return x;
  double a = fabs(x);
  if (a == 0) return x;
  int e;
  frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
  e -= 1;       /* a = 1.x * 2^e */
  if (e < emin) e = emin;
  double ulp = ldexp(1.0, e - mant);
  double r = rint(a / ulp) * ulp;
  double overflow = max_finite + ldexp(1.0, (int)floor(log2(max_finite)) - mant) / 2;
  if (r > max_finite || a >= overflow) r = INFINITY;
  return copysign(r, x);
}

static double ref_f16(double x) { return ref_round(x, 10, -14, 65504.0); }
static double ref_bf16(double x) { return ref_round(x, 7, -126, 3.3895313892515355e38); }

static float random_float(unsigned *seed)
{
  /* random bits over a wide exponent range, including subnormals of the half formats */
  int e = (int)(rand_r(seed) % 60) - 30;
  double m = (double)rand_r(seed) / RAND_MAX;
  double v = ldexp(1.0 + m, e);
  return (float)(rand_r(seed) & 1 ? -v : v);
}

START_TEST(f16_roundtrip_every_value)
{
  for (uint32_t h = 0; h < 65536; h++) {
    float f = f16_to_f32((uint16_t)h);
    if (isnan(f)) {
      ck_assert(((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff));
      ck_assert(isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ck_assert_msg(f32_to_f16(f) == h, "f16 0x%04x -> %g -> 0x%04x", h, f, f32_to_f16(f));
    ck_assert(f == ref_f16(f));
  }
}
END_TEST

START_TEST(f16_rounding_matches_reference)
{
  unsigned seed = 12345;
  for (int i = 0; i < 200000; i++) {
    float x = random_float(&seed);
    double want = ref_f16(x);
    double got = f16_to_f32(f32_to_f16(x));
    ck_assert_msg(got == want || (isinf(got) && isinf(want) && signbit(got) == signbit(want)),
                  "f16(%a) = %a, reference %a", x, got, want);
  }
  /* ties round to even, and the overflow boundary */
  ck_assert(f16_to_f32(f32_to_f16(2049.0f)) == 2048.0f);
  ck_assert(f16_to_f32(f32_to_f16(2051.0f)) == 2052.0f);
  ck_assert(f16_to_f32(f32_to_f16(65519.0f)) == 65504.0f);
  ck_assert(isinf(f16_to_f32(f32_to_f16(65520.0f))));
  ck_assert(f16_to_f32(f32_to_f16(5.9604644775390625e-8f)) == 5.9604644775390625e-8f);
}
END_TEST

START_TEST(bf16_rounding_matches_reference)
{
  unsigned seed = 777;
  for (int i = 0; i < 200000; i++) {
    float x = random_float(&seed);
    double want = ref_bf16(x);
    double got = bf16_to_f32(f32_to_bf16(x));
    ck_assert_msg(got == want, "bf16(%a) = %a, reference %a", x, got, want);
  }
  ck_assert(isnan(bf16_to_f32(f32_to_bf16(NAN))));
  ck_assert(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f)) == 1.0f);         /* tie to even (down) */
  ck_assert(bf16_to_f32(f32_to_bf16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f); /* tie up */
}
END_TEST

/* The 8-bit floats: every code decodes to a value that encodes back to it; random floats round
 * as the reference does (to nearest even, subnormals included); values beyond the largest
 * finite one (after rounding) become NaN for e4m3, which has no infinity, and infinity for
 * e5m2. */
static void check_f8(const char *name, float (*dec)(uint8_t), uint8_t (*enc)(float), int mant,
                     int emin, double max, int has_inf)
{
  for (unsigned b = 0; b < 256; b++) {
    float f = dec((uint8_t)b);
    if (isnan(f)) {
      ck_assert_msg(isnan(dec(enc(f))), "%s 0x%02x: NaN does not stay NaN", name, b);
      continue;
    }
    ck_assert_msg(enc(f) == b, "%s 0x%02x -> %g -> 0x%02x", name, b, f, enc(f));
    ck_assert_msg(isinf(f) || f == ref_round(f, mant, emin, max), "%s 0x%02x is off the grid", name, b);
  }
  unsigned seed = 4242;
  for (int i = 0; i < 200000; i++) {
    float x = random_float(&seed) / 64;
    double want = ref_round(x, mant, emin, max);
    if (isinf(want) && !has_inf) want = NAN;
    double got = dec(enc(x));
    ck_assert_msg(got == want || (isnan(got) && isnan(want)) ||
                      (isinf(got) && isinf(want) && signbit(got) == signbit(want)),
                  "%s(%a) = %a, reference %a", name, x, got, want);
  }
}

START_TEST(f8_rounding_matches_reference)
{
  check_f8("e4m3", f8e4m3_to_f32, f32_to_f8e4m3, 3, -6, 448.0, 0);
  check_f8("e5m2", f8e5m2_to_f32, f32_to_f8e5m2, 2, -14, 57344.0, 1);
  ck_assert_uint_eq(f32_to_f8e4m3(464.0f), 0x7e); /* the tie at the top rounds to even: 448 */
  ck_assert_uint_eq(f32_to_f8e4m3(465.0f), 0x7f); /* beyond: NaN */
  ck_assert_uint_eq(f32_to_f8e4m3(-INFINITY), 0xff);
  ck_assert_uint_eq(f32_to_f8e5m2(61440.0f), 0x7c); /* the tie at the top rounds to even: inf */
  ck_assert_uint_eq(f32_to_f8e5m2(61439.0f), 0x7b);
  ck_assert_uint_eq(f32_to_f8e5m2(-INFINITY), 0xfc);
  ck_assert(isnan(f8e5m2_to_f32(f32_to_f8e5m2(NAN))));
}
END_TEST

/* The buffer conversions (DDP's bf16 gradients on the wire) round as the reference does, widen
 * exactly, and refuse pairs of types they do not convert. */
START_TEST(convert_buffers)
{
  enum { N = 4099 }; /* not a multiple of anything a loop might unroll by */
  float *x = malloc(N * sizeof *x), *back = malloc(N * sizeof *back);
  uint16_t *h = malloc(N * sizeof *h);
  unsigned seed = 4242;
  for (int i = 0; i < N; i++) x[i] = random_float(&seed);
  x[0] = NAN, x[1] = INFINITY, x[2] = -0.0f, x[3] = 0x1.fffffep127f; /* the last rounds to inf */
  for (int dt = 0; dt < 2; dt++) {
    shmddp_dtype_t t = dt ? SHMDDP_F16 : SHMDDP_BF16;
    ck_assert_int_eq(reduce_cpu_convert(h, t, x, SHMDDP_F32, N), 0);
    ck_assert_int_eq(reduce_cpu_convert(back, SHMDDP_F32, h, t, N), 0);
    ck_assert(isnan(back[0]) && back[1] == INFINITY && back[2] == 0 && signbit(back[2]));
    ck_assert(isinf(back[3]));
    for (int i = 4; i < N; i++) {
      double want = dt ? ref_f16(x[i]) : ref_bf16(x[i]);
      ck_assert_msg(back[i] == want || (isnan(want) && isnan(back[i])), "%s(%a) = %a, want %a",
                    dt ? "f16" : "bf16", x[i], back[i], want);
    }
  }
  ck_assert_int_eq(reduce_cpu_convert(back, SHMDDP_F32, x, SHMDDP_F32, N), 0); /* a copy */
  ck_assert(memcmp(back, x, N * sizeof *x) == 0);
  ck_assert_int_ne(reduce_cpu_convert(h, SHMDDP_BF16, h, SHMDDP_F16, N), 0);
  ck_assert_int_ne(reduce_cpu_convert(back, SHMDDP_F32, x, SHMDDP_F64, N), 0);
  free(x), free(back), free(h);
}
END_TEST

/* reduce_cpu_multi over nsrc sources equals the f64 reference for every dtype and op (every
 * failing combination is listed). */
START_TEST(multi_matches_reference)
{
  enum { N = 3001, MAXR = 8 };
  case_failures_t fails;
  cf_init(&fails);
  for (int dt = 0; dt < SHMDDP_NUM_DTYPES; dt++) {
    for (int op = 0; op < SHMDDP_NUM_OPS; op++) {
      for (int nsrc = 1; nsrc <= MAXR; nsrc += 3) {
        size_t ds = shmddp_dtype_size(dt);
        void *src[MAXR];
        for (int r = 0; r < nsrc; r++) {
          src[r] = malloc(N * ds);
          coll_fill(src[r], N, 0, r, 5, dt, op);
        }
        void *dst = malloc(N * ds);
        reduce_cpu_multi(dst, (const void *const *)src, nsrc, N, dt, op, nsrc);
        size_t first_bad = 0;
        size_t bad = coll_count_errors(dst, N, 0, nsrc, 5, dt, op, &first_bad);
        CF_CHECK(&fails, bad == 0, "%s %s over %d: %zu wrong, first at %zu (got %g want %g)",
                 shmddp_dtype_name(dt), shmddp_op_name(op), nsrc, bad, first_bad,
                 bad ? coll_load(dst, first_bad, dt) : 0.0,
                 bad ? coll_expected(nsrc, first_bad, 5, dt, op) : 0.0);
        free(dst);
        for (int r = 0; r < nsrc; r++) free(src[r]);
      }
    }
  }
  CF_ASSERT_NONE(&fails, "reduce_cpu_multi against the f64 reference");
}
END_TEST

/* A ring-style load/combine/finish chain in the same order gives the same bits as multi. */
START_TEST(chain_equals_multi)
{
  enum { N = 2500, R = 5 };
  case_failures_t fails;
  cf_init(&fails);
  for (int dt = 0; dt < SHMDDP_NUM_DTYPES; dt++) {
    for (int op = 0; op < SHMDDP_NUM_OPS; op++) {
      size_t ds = shmddp_dtype_size(dt), as = reduce_acc_size(dt);
      void *src[R];
      for (int r = 0; r < R; r++) {
        src[r] = malloc(N * ds);
        coll_fill(src[r], N, 0, r, 9, dt, op);
      }
      unsigned char *acc = malloc(N * as), *a = malloc(N * ds), *b = malloc(N * ds);
      reduce_cpu_load(acc, src[0], N, dt);
      for (int r = 1; r < R - 1; r++) reduce_cpu_combine(acc, acc, src[r], N, dt, op);
      reduce_cpu_finish(a, acc, src[R - 1], N, dt, op, R);
      reduce_cpu_multi(b, (const void *const *)src, R, N, dt, op, R);
      CF_CHECK(&fails, memcmp(a, b, N * ds) == 0, "%s %s: chain differs from multi",
               shmddp_dtype_name(dt), shmddp_op_name(op));
      free(acc); free(a); free(b);
      for (int r = 0; r < R; r++) free(src[r]);
    }
  }
  CF_ASSERT_NONE(&fails, "load/combine/finish chain against multi");
}
END_TEST

START_TEST(nan_propagates_through_min_max)
{
  float x[3] = {1.0f, NAN, -2.0f}, y[3] = {NAN, 3.0f, 5.0f}, out[3];
  const void *srcs[2] = {x, y};
  reduce_cpu_multi(out, srcs, 2, 3, SHMDDP_F32, SHMDDP_MAX, 2);
  ck_assert(isnan(out[0]) && isnan(out[1]) && out[2] == 5.0f);
  reduce_cpu_multi(out, srcs, 2, 3, SHMDDP_F32, SHMDDP_MIN, 2);
  ck_assert(isnan(out[0]) && isnan(out[1]) && out[2] == -2.0f);
}
END_TEST

START_TEST(integer_sum_wraps_and_avg_truncates)
{
  int32_t a[2] = {INT32_MAX, -7}, b[2] = {1, 0}, out[2];
  const void *srcs[2] = {a, b};
  reduce_cpu_multi(out, srcs, 2, 2, SHMDDP_I32, SHMDDP_SUM, 2);
  ck_assert_int_eq(out[0], INT32_MIN);
  reduce_cpu_multi(out, srcs, 2, 2, SHMDDP_I32, SHMDDP_AVG, 2);
  ck_assert_int_eq(out[1], -3); /* -7 / 2 truncates toward zero */
}
END_TEST

static Suite *reduce_suite(const suite_env_t *env)
{
  Suite *s = suite_create("reduce");
  SUITE_CASE(s, "half", f16_roundtrip_every_value, f16_rounding_matches_reference,
             bf16_rounding_matches_reference, f8_rounding_matches_reference, convert_buffers);
  SUITE_CASE(s, "reduce", multi_matches_reference, chain_equals_multi,
             nan_propagates_through_min_max, integer_sum_wraps_and_avg_truncates);
  return s;
}

SUITE_MAIN("check_reduce", reduce_suite, SUITE_CPU_ONLY)
