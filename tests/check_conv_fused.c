/* check_conv_fused.c — the CPU reference of the fused forward convolution
 * (kernels/conv_fused_cpu.h: BatchNorm apply + ReLU prologue, 3x3 convolution, bf16 rounding,
 * BatchNorm statistics) against an f64 computation from the definition, on small cf_shapes with
 * borders everywhere, with and without the prologue; its bf16 rounding; its argument checks.
 * Also the CUDA engine's table of the layers it fuses (kernels/conv_fused_rank.h). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_fused_cpu.h"
#include "kernels/conv_fused_rank.h"
#include "tests/conv_fused_testutil.h"
#include "tests/suite_main.h"

/* One shape, with the prologue (variant 0) or plain (1). */
static void check_shape(const cf_shape_t *s, int variant)
{
  const int with_pro = variant == 0;
  cf_data_t d;
  cf_make(&d, s->n, s->h, s->w, s->cin, s->cout);
  size_t P = (size_t)s->n * s->h * s->w, out = P * s->cout;
  float *y = malloc(out * sizeof *y), *yo = malloc(out * sizeof *yo);
  double *mag = malloc(out * sizeof *mag);
  double *st = malloc((2 * (size_t)s->cout + 1) * sizeof *st);
  double *sto = malloc((2 * (size_t)s->cout + 1) * sizeof *sto);
  size_t clamped = 0;
  char err[256];
  conv_fused_ref_t a = {.n = s->n, .h = s->h, .w = s->w, .cin = s->cin, .cout = s->cout,
                        .x = d.x, .weight = d.weight, .scale = with_pro ? d.scale : NULL,
                        .shift = with_pro ? d.shift : NULL, .y = y, .stats = st};
  ck_assert_msg(conv_fused_ref(&a, err, sizeof err) == 0, "%s", err);
  cf_oracle(&d, with_pro, yo, mag, sto, &clamped);
  if (with_pro) /* the ReLU is exercised, and not everywhere */
    ck_assert_msg(clamped > P * s->cin / 20 && clamped < P * s->cin / 2,
                  "%zu of %zu activations clamped", clamped, P * s->cin);
  cf_cmp_t c = cf_compare(y, yo, mag, out);
  const char *what = with_pro ? "with the prologue" : "plain";
  ck_assert_msg(c.nan == 0 && c.bad == 0,
                "%dx%dx%d %d->%d %s: %zu of %zu outputs off the f64 result (worst %.2f of its "
                "bound at %zu: %g vs %g), %zu NaN", s->n, s->h, s->w, s->cin, s->cout, what,
                c.bad, out, c.worst, c.worst_at, y[c.worst_at], yo[c.worst_at], c.nan);
  /* a bf16 rounding falls the other way only where the f32 sum sits at a rounding boundary */
  ck_assert_msg(c.exact * 100 >= out * 95, "%s: only %zu of %zu outputs bit-equal", what,
                c.exact, out);
  ck_assert_msg(c.rel_l2 < 2e-3, "%s: relative L2 error %g", what, c.rel_l2);
  ck_assert_msg(cf_stats_bad(st, sto, y, yo, P, s->cout, 1e-12) == 0,
                "%s: statistics off the f64 sums of the outputs", what);
  ck_assert(st[2 * s->cout] == (double)P);
  free(y);
  free(yo);
  free(mag);
  free(st);
  free(sto);
  cf_free(&d);
}

START_TEST(fused_matches_f64)
{
  cf_each_shape(check_shape, 2);
}
END_TEST

/* Without statistics the output is the same. */
START_TEST(stats_optional)
{
  cf_data_t d;
  cf_make(&d, 1, 4, 5, 8, 8);
  float y1[160], y2[160];
  double st[17];
  char err[256];
  conv_fused_ref_t a = {.n = 1, .h = 4, .w = 5, .cin = 8, .cout = 8, .x = d.x,
                        .weight = d.weight, .scale = d.scale, .shift = d.shift, .y = y1,
                        .stats = st};
  ck_assert_msg(conv_fused_ref(&a, err, sizeof err) == 0, "%s", err);
  a.y = y2;
  a.stats = NULL;
  ck_assert_msg(conv_fused_ref(&a, err, sizeof err) == 0, "%s", err);
  ck_assert(memcmp(y1, y2, sizeof y1) == 0);
  cf_free(&d);
}
END_TEST

static float bits_f32(unsigned u)
{
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

START_TEST(rounding_to_bf16)
{
  /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even one, 1; 1 + 3 * 2^-8 to 1 + 2^-6 */
  ck_assert(conv_fused_round_bf16(1.0f + 0x1p-8f) == 1.0f);
  ck_assert(conv_fused_round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
  ck_assert(conv_fused_round_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
  ck_assert(conv_fused_round_bf16(-1.0f - 0x1p-8f - 0x1p-20f) == -1.0f - 0x1p-7f);
  ck_assert(conv_fused_round_bf16(bits_f32(0x7f7fffffu)) == INFINITY); /* past the largest */
  ck_assert(isnan(conv_fused_round_bf16(NAN)));
  ck_assert(conv_fused_round_bf16(0.5f) == 0.5f);
}
END_TEST

START_TEST(bad_arguments)
{
  float x[64] = {1}, w[9 * 64] = {1}, y[64], s[8] = {1};
  char err[256] = "";
  conv_fused_ref_t a = {.n = 1, .h = 2, .w = 2, .cin = 0, .cout = 4, .x = x, .weight = w, .y = y};
  ck_assert_int_eq(conv_fused_ref(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "shape"), "%s", err);
  a.cin = 4;
  a.scale = s; /* without shift */
  ck_assert_int_eq(conv_fused_ref(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "scale and shift"), "%s", err);
  a.scale = NULL;
  a.y = NULL;
  ck_assert_int_eq(conv_fused_ref(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "required"), "%s", err);
}
END_TEST

/* The engine's table (kernels/conv_fused_rank.h): which layers auto hands to the fused kernels
 * (2), which only SHMDDP_CONV_ENGINE=fused does (1), which have none (0). The reference U-Net's
 * layers at its sizes (64..1024 wide, 256 x 256 halving per level), then the edges. */
START_TEST(engine_rank_table)
{
  /* the pairs (second convolutions, b -> b): 64 and 128 measured faster */
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 64, 64, 256, 256), 2);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 128, 128, 128, 128), 2);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 256, 256, 64, 64), 1);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 512, 512, 32, 32), 1);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 1024, 1024, 16, 16), 1);
  /* the first blocks: the encoder's a -> 2a, the decoder's 2b -> b after the concat */
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_STATS, 64, 128, 128, 128), 2);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_STATS, 128, 64, 256, 256), 2);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_STATS, 128, 256, 64, 64), 1);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_STATS, 512, 1024, 16, 16), 1);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_STATS, 1024, 512, 32, 32), 1);
  /* the plain input gradients: dec0.conv1's 128 -> 64, enc1.conv1's 64 -> 128 and the 256 -> 256
   * second convolutions' (not fused as pairs) measured faster, the deeper first blocks' not; at smaller images not shown faster; none for the
   * input layer (it has no input gradient) */
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_DGRAD, 128, 64, 256, 256), 2);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_DGRAD, 64, 128, 128, 128), 2);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_DGRAD, 256, 128, 128, 128), 1);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_DGRAD, 256, 256, 64, 64), 2);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_DGRAD, 256, 256, 32, 32), 1);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_DGRAD, 512, 256, 64, 64), 1);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_DGRAD, 1024, 512, 32, 32), 1);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_DGRAD, 128, 64, 128, 128), 1);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_DGRAD, 3, 64, 256, 256), 0);
  /* a use is its own entry: 128 -> 128 measured as a pair, not as a first block */
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_STATS, 128, 128, 128, 128), 1);
  /* below the measured image size the kernels were not shown faster; above, they are taken;
   * 64 -> 64 at every size */
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 128, 128, 64, 128), 1);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 128, 128, 128, 256), 2);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_STATS, 128, 64, 128, 256), 1);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 64, 64, 16, 16), 2);
  /* the input layer's forward with its statistics (few channels in): taken by auto; as a pair's
   * second convolution none, nor for other widths */
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_STATS, 3, 64, 256, 256), 2);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_STATS, 1, 16, 5, 7), 2);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 3, 64, 256, 256), 0);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_STATS, 3, 48, 256, 256), 0);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_STATS, 4, 64, 256, 256), 0);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_STATS, 3, 64, 0, 256), 0);
  /* no kernels: widths not a multiple of 64 or past 1024, no pixels */
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 96, 96, 64, 64), 0);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 64, 32, 64, 64), 0);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 2048, 2048, 8, 8), 0);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 1024, 1088, 8, 8), 0);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 0, 64, 8, 8), 0);
  ck_assert_int_eq(conv_fused_rank(OPS_FUSE_PAIR, 64, 64, 0, 8), 0);
}
END_TEST

static Suite *make_conv_fused_suite(const suite_env_t *env)
{
  Suite *s = suite_create("conv_fused");
  SUITE_CASE(s, "reference", fused_matches_f64, stats_optional, rounding_to_bf16,
             bad_arguments);
  SUITE_CASE(s, "engine_rank", engine_rank_table);
  return s;
}

SUITE_MAIN("check_conv_fused", make_conv_fused_suite, SUITE_CPU_ONLY)
