/* check_account.c — the step account's arithmetic (dev/step_account.h) against layers worked
 * out by hand: FLOPs and bytes of convolutions of each kind and pass, the BatchNorm, pooling,
 * concat, loss, cast and SGD passes; the reference U-Net's FLOPs per image against a closed form
 * (p·C² is the same at every level: 65536·64²); rows merged by (layer, pass); the roofline, the
 * totals and MFU; the fused engine's convolutions and BatchNorm steps, and the engine of each
 * row; the JSON and markdown forms. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev/step_account.h"
#include "tests/json_mini.h"
#include "tests/suite_main.h"

#define BF16 2
#define F32 4

static ops_conv_t conv(ops_conv_kind_t kind, int h, int w, int cin, int cout)
{
  return (ops_conv_t){.kind = kind, .h = h, .w = w, .cin = cin, .cout = cout, .max_n = 6};
}

START_TEST(conv3x3_by_hand)
{
  /* enc1.conv1 of the reference net: 6 x 128 x 128, 64 -> 128 channels.
   * FLOPs: 2 * 6*128*128 pixels * 64 * 128 * 9 taps = 14,495,514,624.
   * Elements: x 6,291,456; w 73,728; y 12,582,912 (no bias). */
  ops_conv_t c = conv(OPS_CONV3X3, 128, 128, 64, 128);
  acct_cost_t f = acct_conv(&c, ACCT_CONV_FWD, 6, BF16, BF16);
  ck_assert_double_eq(f.flops, 14495514624.0);
  ck_assert_double_eq(f.bytes, 37896192.0); /* (6291456 + 73728 + 12582912) * 2 */
  acct_cost_t d = acct_conv(&c, ACCT_CONV_BWD_DATA, 6, BF16, BF16);
  ck_assert_double_eq(d.flops, 14495514624.0);
  ck_assert_double_eq(d.bytes, 37896192.0); /* dy, w read, dx written: the same tensors */
  /* weights' gradient in f32: (x + dy) * 2 + dw 73,728 * 4 */
  acct_cost_t g = acct_conv(&c, ACCT_CONV_BWD_FILTER, 6, BF16, F32);
  ck_assert_double_eq(g.flops, 14495514624.0);
  ck_assert_double_eq(g.bytes, 37748736.0 + 294912.0);
  /* a batch of 1 is a sixth of the pixels */
  ck_assert_double_eq(acct_conv(&c, ACCT_CONV_FWD, 1, BF16, BF16).flops, 2415919104.0);
  /* not a convolution's pass: nothing */
  acct_cost_t z = acct_conv(&c, ACCT_BN_STATS, 6, BF16, BF16);
  ck_assert_double_eq(z.flops, 0);
  ck_assert_double_eq(z.bytes, 0);
}
END_TEST

START_TEST(convt_and_head_by_hand)
{
  /* dec0.up: 6 x 128 x 128 x 128 in -> 6 x 256 x 256 x 64 out, 2x2 stride 2, bias.
   * FLOPs: 2 * 98,304 input pixels * 128 * 64 * 4 = 6,442,450,944 (cuDNN's 6.4 GFLOP).
   * Elements: x 12,582,912; w 32,768; b 64; y 25,165,824. */
  ops_conv_t up = conv(OPS_CONVT2X2, 128, 128, 128, 64);
  acct_cost_t f = acct_conv(&up, ACCT_CONV_FWD, 6, BF16, BF16);
  ck_assert_double_eq(f.flops, 6442450944.0);
  ck_assert_double_eq(f.bytes, 75563136.0); /* 37,781,568 elements * 2 */
  acct_cost_t g = acct_conv(&up, ACCT_CONV_BWD_FILTER, 6, BF16, BF16);
  ck_assert_double_eq(g.bytes, (12582912.0 + 25165824.0 + 32768.0 + 64.0) * 2);
  /* head: 1x1, 64 -> 4, bias, 6 x 256 x 256: 2 * 393,216 * 64 * 4 = 201,326,592 */
  ops_conv_t head = conv(OPS_CONV1X1, 256, 256, 64, 4);
  acct_cost_t h = acct_conv(&head, ACCT_CONV_BWD_FILTER, 6, BF16, BF16);
  ck_assert_double_eq(h.flops, 201326592.0);
  /* x 25,165,824 + dy 1,572,864 elements, dw 256 + db 4 */
  ck_assert_double_eq(h.bytes, 53477376.0 + 520.0);
  acct_cost_t hd = acct_conv(&head, ACCT_CONV_BWD_DATA, 6, F32, F32);
  ck_assert_double_eq(hd.bytes, (1572864.0 + 256.0 + 25165824.0) * 4); /* no bias read */
}
END_TEST

START_TEST(fused_conv_by_hand)
{
  /* enc0.conv2 of the reference net on the fused engine: 6 x 256 x 256, 64 -> 64 channels.
   * FLOPs: 2 * 393,216 pixels * 64 * 64 * 9 = 28,991,029,248, as on the library.
   * Elements: x 25,165,824; w 36,864; y 25,165,824: 100,737,024 B in bf16 for each pass.
   * The fusion's vectors: coefficients 2 * 64 f32 = 512 B; statistics 129 f64 = 1,032 B;
   * saved 129 f64 = 1,032 B; backward sums 128 f64 = 1,024 B. */
  ops_conv_t c = conv(OPS_CONV3X3, 256, 256, 64, 64);
  acct_cost_t lib = acct_conv(&c, ACCT_CONV_FWD, 6, BF16, BF16);
  ck_assert_double_eq(lib.bytes, 100737024.0);
  acct_cost_t f = acct_conv_fused(&c, ACCT_CONV_FWD, 6, BF16, BF16);
  ck_assert_double_eq(f.flops, 28991029248.0);
  ck_assert_double_eq(f.bytes, 100737024.0 + 512 + 1032); /* coefficients in, statistics out */
  /* the input gradient reads x again for the ReLU mask (25,165,824 * 2 B), the coefficients
   * and the saved statistics, and writes the sums */
  acct_cost_t d = acct_conv_fused(&c, ACCT_CONV_BWD_DATA, 6, BF16, BF16);
  ck_assert_double_eq(d.flops, 28991029248.0);
  ck_assert_double_eq(d.bytes, 100737024.0 + 50331648.0 + 512 + 1032 + 1024);
  acct_cost_t g = acct_conv_fused(&c, ACCT_CONV_BWD_FILTER, 6, BF16, BF16);
  ck_assert_double_eq(g.flops, 28991029248.0);
  ck_assert_double_eq(g.bytes, 100737024.0 + 512); /* the prologue's coefficients */
  ck_assert_double_eq(acct_conv_fused(&c, ACCT_BN_STATS, 6, BF16, BF16).flops, 0);
  /* BatchNorm's per-channel steps at 64 channels:
   * finalize: statistics 129 f64 in, saved 129 f64 out, running 128 f32 in and out: 3,088 B;
   * coef: mean and invstd 128 f64, gamma and beta 128 bf16 in, 128 f32 out: 1,792 B;
   * params: sums 128 f64 in, dgamma and dbeta 128 bf16 (f32) out: 1,280 B (1,536 B). */
  ck_assert_double_eq(acct_bn_finalize(64).bytes, 3088.0);
  ck_assert_double_eq(acct_bn_coef(64, BF16).bytes, 1792.0);
  ck_assert_double_eq(acct_bn_params(64, BF16).bytes, 1280.0);
  ck_assert_double_eq(acct_bn_params(64, F32).bytes, 1536.0);
  ck_assert_double_eq(acct_bn_coef(64, BF16).flops, 0);
}
END_TEST

START_TEST(element_passes_by_hand)
{
  /* BatchNorm at level 0: 393,216 pixels x 64 channels = 25,165,824 elements, 50,331,648 B */
  const size_t P = 393216;
  const double t = 50331648.0;
  ck_assert_double_eq(acct_bn(ACCT_BN_STATS, P, 64, BF16).bytes, t);
  ck_assert_double_eq(acct_bn(ACCT_BN_APPLY, P, 64, BF16).bytes, 2 * t);
  ck_assert_double_eq(acct_bn(ACCT_BN_RECOMPUTE, P, 64, BF16).bytes, 2 * t);
  ck_assert_double_eq(acct_bn(ACCT_BN_BWD_REDUCE, P, 64, BF16).bytes, 2 * t);
  ck_assert_double_eq(acct_bn(ACCT_BN_BWD_APPLY, P, 64, BF16).bytes, 3 * t);
  ck_assert_double_eq(acct_bn(ACCT_BN_APPLY, P, 64, BF16).flops, 0);
  ck_assert_double_eq(acct_bn(ACCT_CONV_FWD, P, 64, BF16).bytes, 0);
  /* the same backward passes with dy formed from the 4-class head: its 3,145,728 B of logit
   * gradients read instead of dy, and 2 x 393,216 x 64 x 4 = 201,326,592 products */
  ck_assert_double_eq(acct_bn_head(ACCT_BN_BWD_REDUCE, P, 64, 4, BF16).bytes, t + 3145728.0);
  ck_assert_double_eq(acct_bn_head(ACCT_BN_BWD_APPLY, P, 64, 4, BF16).bytes, 2 * t + 3145728.0);
  ck_assert_double_eq(acct_bn_head(ACCT_BN_BWD_APPLY, P, 64, 4, BF16).flops, 201326592.0);
  ck_assert_double_eq(acct_bn_head(ACCT_BN_STATS, P, 64, 4, BF16).bytes, 0);
  /* max-pool 6 x 256 x 256 x 64 -> 98,304 pooled pixels: 6,291,456 pooled elements.
   * forward: 25,165,824 * 2 read + 6,291,456 * 2 written + 6,291,456 winner bytes */
  ck_assert_double_eq(acct_maxpool_fwd(6, 256, 256, 64, BF16).bytes, 69206016.0);
  /* backward adding into dx: dy 12,582,912 + winners 6,291,456 + dx read and written 100,663,296 */
  ck_assert_double_eq(acct_maxpool_bwd(6, 256, 256, 64, BF16, 1).bytes, 119537664.0);
  ck_assert_double_eq(acct_maxpool_bwd(6, 256, 256, 64, BF16, 0).bytes, 69206016.0);
  /* concat at level 0: 393,216 pixels, 64 + 64 channels */
  ck_assert_double_eq(acct_concat_fwd(P, 64, 64, 1, BF16).bytes, 4 * t);
  ck_assert_double_eq(acct_concat_fwd(P, 64, 64, 0, BF16).bytes, 2 * t);
  ck_assert_double_eq(acct_concat_bwd(P, 64, 64, 0, BF16).bytes, 4 * t);
  ck_assert_double_eq(acct_concat_bwd(P, 64, 64, 1, BF16).bytes, 5 * t);
  /* loss: 393,216 pixels x 4 classes, logits read and gradient written in bf16, int32 labels */
  ck_assert_double_eq(acct_loss(P, 4, BF16).bytes, 393216.0 * (8 + 8 + 4));
  /* the input cast: 1,179,648 floats read, bf16 written */
  ck_assert_double_eq(acct_cast(1179648, BF16).bytes, 1179648.0 * 6);
  /* SGD over 31,037,828 parameters: p, momentum read and written (16 B), bf16 gradient read and
   * bf16 working copy written (4 B) */
  ck_assert_double_eq(acct_sgd(31037828, BF16, BF16).bytes, 31037828.0 * 20);
  ck_assert_double_eq(acct_sgd(10, F32, 0).bytes, 200.0);
}
END_TEST

/* A convolution's three passes (the data gradient only when with_data) as rows of layer name. */
static void add_conv(acct_t *a, const char *name, const ops_conv_t *c, int with_data, int n,
                     size_t e)
{
  acct_pass_t passes[3] = {ACCT_CONV_FWD, ACCT_CONV_BWD_FILTER, ACCT_CONV_BWD_DATA};
  for (int k = 0; k < (with_data ? 3 : 2); k++)
    ck_assert_int_eq(acct_add(a, name, passes[k], acct_conv(c, passes[k], n, e, e)), 0);
}

/* The reference U-Net (64..1024, 3 -> 4 classes, 256 x 256) layer by layer from its shapes, as
 * the model builds it (src/model/unet_build.c); n images. */
static void reference_net(acct_t *a, int n, size_t e)
{
  const int widths[5] = {64, 128, 256, 512, 1024};
  char name[32];
  for (int l = 0; l < 5; l++) {
    int s = 256 >> l, cin = l ? widths[l - 1] : 3;
    ops_conv_t c1 = conv(OPS_CONV3X3, s, s, cin, widths[l]);
    ops_conv_t c2 = conv(OPS_CONV3X3, s, s, widths[l], widths[l]);
    snprintf(name, sizeof name, "enc%d.conv1", l);
    add_conv(a, name, &c1, l > 0, n, e); /* the input image needs no gradient */
    snprintf(name, sizeof name, "enc%d.conv2", l);
    add_conv(a, name, &c2, 1, n, e);
  }
  for (int l = 3; l >= 0; l--) {
    int s = 256 >> l;
    ops_conv_t up = conv(OPS_CONVT2X2, s / 2, s / 2, widths[l + 1], widths[l]);
    ops_conv_t c1 = conv(OPS_CONV3X3, s, s, 2 * widths[l], widths[l]);
    ops_conv_t c2 = conv(OPS_CONV3X3, s, s, widths[l], widths[l]);
    snprintf(name, sizeof name, "dec%d.up", l);
    add_conv(a, name, &up, 1, n, e);
    snprintf(name, sizeof name, "dec%d.conv1", l);
    add_conv(a, name, &c1, 1, n, e);
    snprintf(name, sizeof name, "dec%d.conv2", l);
    add_conv(a, name, &c2, 1, n, e);
  }
  ops_conv_t head = conv(OPS_CONV1X1, 256, 256, 64, 4);
  add_conv(a, "head", &head, 1, n, e);
}

START_TEST(reference_unet_flops)
{
  /* Per image, forward. p_l = 65536 / 4^l pixels and C_l = 64 * 2^l channels, so p_l * C_l^2 =
   * 268,435,456 at every level, and a 3x3 C -> C convolution is 2 * 9 * that = 4,831,838,208:
   *   enc0.conv1 (3 -> 64): 2 * 65536 * 3 * 64 * 9 = 226,492,416; enc0.conv2: 4,831,838,208
   *   enc1..4: conv1 (C/2 -> C) 2,415,919,104 + conv2 4,831,838,208, four times: 28,991,029,248
   *   dec0..3: conv1 (2C -> C) 9,663,676,416 + conv2 4,831,838,208, four times: 57,982,058,496
   *   up-convs: 2 * (p_l / 4) * 2C * C * 4 = 4 * 268,435,456, four times: 4,294,967,296
   *   head: 2 * 65536 * 64 * 4 = 33,554,432
   * forward 96,359,940,096; backward weights the same; backward data the same less the RGB
   * layer's (226,492,416): 288,853,327,872 per trained image (about 290 GFLOP). */
  acct_t a = {0};
  reference_net(&a, 6, BF16);
  ck_assert_double_eq(acct_total(&a, ACCT_CONV_FWD).flops, 6 * 96359940096.0);
  ck_assert_double_eq(acct_total(&a, ACCT_CONV_BWD_FILTER).flops, 6 * 96359940096.0);
  ck_assert_double_eq(acct_total(&a, ACCT_CONV_BWD_DATA).flops,
                      6 * (96359940096.0 - 226492416.0));
  acct_total_t all = acct_total(&a, ACCT_NPASS);
  ck_assert_double_eq(all.flops, 6 * 288853327872.0);
  ck_assert_int_eq(all.rows, 23 * 3 - 1);
  ck_assert_int_eq(all.ops, 23 * 3 - 1);
  acct_free(&a);
}
END_TEST

START_TEST(rows_merge_by_layer_and_pass)
{
  acct_t a = {0};
  ck_assert_int_eq(acct_add(&a, "dec0.up", ACCT_CONCAT, (acct_cost_t){0, 100}), 0);
  ck_assert_int_eq(acct_add(&a, "dec0.up", ACCT_CONV_FWD, (acct_cost_t){1e9, 10}), 0);
  ck_assert_int_eq(acct_add(&a, "dec0.up", ACCT_CONCAT, (acct_cost_t){0, 50}), 0);
  ck_assert_int_eq(acct_add(&a, "dec1.up", ACCT_CONCAT, (acct_cost_t){0, 7}), 0);
  ck_assert_int_eq(a.n, 3);
  ck_assert_str_eq(a.rows[0].layer, "dec0.up");
  ck_assert_int_eq(a.rows[0].pass, ACCT_CONCAT);
  ck_assert_int_eq(a.rows[0].ops, 2);
  ck_assert_double_eq(a.rows[0].bytes, 150);
  ck_assert(a.rows[0].ms < 0); /* not measured yet */
  ck_assert_str_eq(a.rows[2].layer, "dec1.up");
  acct_total_t t = acct_total(&a, ACCT_CONCAT);
  ck_assert_int_eq(t.rows, 2);
  ck_assert_int_eq(t.ops, 3);
  ck_assert_double_eq(t.bytes, 157);
  /* past the first allocation */
  char name[32];
  for (int i = 0; i < 200; i++) {
    snprintf(name, sizeof name, "layer%d", i);
    ck_assert_int_eq(acct_add(&a, name, ACCT_LOSS, (acct_cost_t){0, 1}), 0);
  }
  ck_assert_int_eq(a.n, 203);
  ck_assert_double_eq(acct_total(&a, ACCT_LOSS).bytes, 200);
  ck_assert_str_eq(acct_pass_name(ACCT_BN_APPLY), "bn apply+relu");
  ck_assert_int_eq(acct_pass_of("conv bwd filter"), ACCT_CONV_BWD_FILTER);
  ck_assert_int_eq(acct_pass_of("nothing"), -1);
  acct_free(&a);
  ck_assert_int_eq(a.n, 0);
}
END_TEST

START_TEST(rows_know_their_engine)
{
  acct_t a = {0};
  /* the fused pair of one level as ops_cuda_bench issues it: conv1 on the library with its
   * statistics and coefficients, conv2 fused with its statistics finalised apart */
  ck_assert_int_eq(acct_add(&a, "enc0.conv1", ACCT_CONV_FWD, (acct_cost_t){1e9, 10}), 0);
  ck_assert_int_eq(acct_add(&a, "enc0.conv1", ACCT_BN_STATS, (acct_cost_t){0, 20}), 0);
  ck_assert_int_eq(acct_add_on(&a, "enc0.conv1", ACCT_BN_STATS, ACCT_FUSED, acct_bn_coef(64, 2)),
                   0);
  ck_assert_int_eq(acct_add_on(&a, "enc0.conv2", ACCT_CONV_FWD, ACCT_FUSED,
                               (acct_cost_t){2e9, 30}), 0);
  ck_assert_int_eq(acct_add_on(&a, "enc0.conv2", ACCT_BN_STATS, ACCT_FUSED, acct_bn_finalize(64)),
                   0);
  ck_assert_int_eq(acct_add_on(&a, "enc0.conv2", ACCT_CONV_BWD_DATA, ACCT_FUSED,
                               (acct_cost_t){2e9, 40}), 0);
  ck_assert_int_eq(acct_add(&a, "enc1.conv2", ACCT_CONV_FWD, (acct_cost_t){2e9, 30}), 0);
  ck_assert_int_eq(a.n, 6);
  ck_assert_int_eq(a.rows[0].engine, ACCT_LIBRARY);
  /* a row that holds one fused step is the fused engine's, in whichever order they came */
  ck_assert_int_eq(a.rows[1].ops, 2);
  ck_assert_double_eq(a.rows[1].bytes, 20 + 1792);
  ck_assert_int_eq(a.rows[1].engine, ACCT_FUSED);
  ck_assert_int_eq(acct_add(&a, "enc0.conv2", ACCT_CONV_FWD, (acct_cost_t){0, 1}), 0);
  ck_assert_int_eq(a.rows[2].engine, ACCT_FUSED);
  ck_assert_int_eq(a.rows[5].engine, ACCT_LIBRARY);
  /* layers with a fused convolution, each once: enc0.conv1's fused BatchNorm step is no
   * convolution of its own */
  ck_assert_int_eq(acct_fused_layers(&a), 1);
  ck_assert_int_eq(acct_add_on(&a, "dec0.conv2", ACCT_CONV_BWD_FILTER, ACCT_FUSED,
                               (acct_cost_t){2e9, 30}), 0);
  ck_assert_int_eq(acct_fused_layers(&a), 2);
  ck_assert_str_eq(acct_engine_name(ACCT_FUSED), "fused");
  ck_assert_str_eq(acct_engine_name(ACCT_LIBRARY), "library");
  acct_free(&a);
}
END_TEST

/* Two rows at known ceilings: 100 TFLOP/s and 1 TB/s. */
static void small_account(acct_t *a, acct_report_t *r)
{
  memset(a, 0, sizeof *a);
  /* 2 GFLOP, 10 MB: 20 us of FLOPs, 10 us of bytes -> roofline 0.020 ms; measured 0.040 */
  ck_assert_int_eq(acct_add_on(a, "c1", ACCT_CONV_FWD, ACCT_FUSED, (acct_cost_t){2e9, 1e7}), 0);
  a->rows[0].ms = 0.040;
  /* 30 MB, no FLOPs: roofline 0.030 ms; measured 0.050 */
  ck_assert_int_eq(acct_add(a, "c1", ACCT_BN_STATS, (acct_cost_t){0, 3e7}), 0);
  a->rows[1].ms = 0.050;
  *r = (acct_report_t){.device = "a \"test\" GPU", .config = "two rows", .engine = "auto",
                       .step_ms = 0.1,
                       .images = 2, .ceiling = {1e14, 1e12}};
  for (int p = 0; p < ACCT_NPASS; p++) r->pass_ms[p] = -1;
  r->pass_ms[ACCT_BN_STATS] = 0.045; /* the pass's own ablation wins over its rows' sum */
}

START_TEST(roofline_and_mfu)
{
  acct_t a;
  acct_report_t r;
  small_account(&a, &r);
  ck_assert_double_eq_tol(acct_roofline_ms((acct_cost_t){2e9, 1e7}, &r.ceiling), 0.020, 1e-12);
  ck_assert_double_eq_tol(acct_roofline_ms((acct_cost_t){0, 3e7}, &r.ceiling), 0.030, 1e-12);
  ck_assert_double_eq(acct_roofline_ms((acct_cost_t){0, 0}, &r.ceiling), 0);
  /* 2 GFLOP in a 0.1 ms step = 20 TFLOP/s of a 100 TFLOP/s ceiling */
  ck_assert_double_eq_tol(acct_mfu(&a, &r), 0.20, 1e-12);
  acct_total_t t = acct_total(&a, ACCT_NPASS);
  ck_assert_double_eq_tol(t.ms, 0.090, 1e-12);
  ck_assert_double_eq(t.bytes, 4e7);
  r.step_ms = 0;
  ck_assert_double_eq(acct_mfu(&a, &r), 0);
  acct_free(&a);
}
END_TEST

static char *written(int json, const acct_t *a, const acct_report_t *r)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(json ? acct_write_json(f, a, r) : acct_write_markdown(f, a, r), 0);
  fclose(f);
  return buf;
}

START_TEST(json_form)
{
  acct_t a;
  acct_report_t r;
  small_account(&a, &r);
  char *text = written(1, &a, &r);
  jv_t v;
  ck_assert_msg(jv_parse(text, &v) == 0, "not JSON: %s", text);
  ck_assert_str_eq(jv_get(&v, "device")->str, "a \"test\" GPU");
  ck_assert_double_eq_tol(jv_get(&v, "mfu")->num, 0.20, 1e-9);
  ck_assert_double_eq_tol(jv_get(&v, "ceiling_tflops")->num, 100, 1e-9);
  ck_assert_double_eq_tol(jv_get(&v, "roofline_ms")->num, 0.050, 1e-9);
  const jv_t *passes = jv_get(&v, "passes"), *rows = jv_get(&v, "rows");
  ck_assert_int_eq(passes->t, J_ARR);
  ck_assert_uint_eq(passes->n, 2);
  ck_assert_str_eq(jv_get(&passes->items[0], "pass")->str, "conv fwd");
  ck_assert_double_eq_tol(jv_get(&passes->items[0], "ms")->num, 0.040, 1e-9); /* rows' sum */
  ck_assert_str_eq(jv_get(&passes->items[1], "pass")->str, "bn stats");
  ck_assert_double_eq_tol(jv_get(&passes->items[1], "ms")->num, 0.045, 1e-9); /* ablation */
  ck_assert_uint_eq(rows->n, 2);
  ck_assert_str_eq(jv_get(&rows->items[0], "engine")->str, "fused");
  ck_assert_str_eq(jv_get(&rows->items[1], "engine")->str, "library");
  ck_assert_str_eq(jv_get(&v, "engine")->str, "auto");
  ck_assert_double_eq(jv_get(&v, "fused_layers")->num, 1);
  ck_assert_double_eq_tol(jv_get(&rows->items[1], "mb")->num, 30, 1e-9);
  ck_assert_double_eq_tol(jv_get(&rows->items[1], "roofline_ms")->num, 0.030, 1e-9);
  jv_free(&v);
  free(text);
  a.rows[1].ms = -1; /* unmeasured: null */
  r.engine = NULL;    /* the setting not said: null */
  text = written(1, &a, &r);
  ck_assert_int_eq(jv_parse(text, &v), 0);
  ck_assert_int_eq(jv_get(&jv_get(&v, "rows")->items[1], "ms")->t, J_NULL);
  ck_assert_int_eq(jv_get(&v, "engine")->t, J_NULL);
  jv_free(&v);
  free(text);
  acct_free(&a);
}
END_TEST

START_TEST(markdown_form)
{
  acct_t a;
  acct_report_t r;
  small_account(&a, &r);
  char *text = written(0, &a, &r);
  /* the figures worked out above, as the tables print them */
  const char *want[] = {
      "| **MFU** (step FLOPs / step time / matrix ceiling) | **20.0 %** |",
      "| step, CUDA graph replayed | 0.100 ms = 20000.0 img/s |",
      "| FLOPs per step (convolutions) | 2.0 GFLOP (1.0 GFLOP per image) |",
      /* conv fwd: 2 GFLOP in 0.040 ms = 50 TFLOP/s, 10 MB -> 250 GB/s, roofline 0.020: 50 % */
      "| conv fwd | 1 | 2.0 | 10 | 0.040 | 40.0 | 50.0 | 250 | 0.020 | 50 % | 0.020 |",
      /* bn stats at its ablation 0.045: 30 MB -> 667 GB/s, roofline 0.030: 67 % */
      "| bn stats | 1 | 0.0 | 30 | 0.045 | 45.0 | 0.0 | 667 | 0.030 | 67 % | 0.015 |",
      "| c1 | bn stats | library | 0.050 | 0.030 | 0.020 | bytes |",
      "| c1 | conv fwd | fused | 0.040 | 0.020 | 0.020 | FLOPs |",
      /* the rows: 2 GFLOP in 0.040 ms, 50 TFLOP/s, 250 GB/s, roofline 0.020: 50 % */
      "| c1 | conv fwd | fused | 1 | 2.00 | 10.0 | 0.040 | 50.0 | 250 | 50 % |",
      "| c1 | bn stats | library | 1 | 0.00 | 30.0 | 0.050 | 0.0 | 600 | 60 % |",
      "Convolution engine: SHMDDP_CONV_ENGINE=auto, 1 layer fused.",
      "(85.0 % of the step;",
      "| convolutions | 0.040 | 40.0 | 0.020 | 0.020 |",
      "| BatchNorm passes | 0.045 | 45.0 | 0.030 | 0.015 |",
      "| in no pass alone (launch gaps; negative: overlap counted twice) | 0.015 | 15.0 | 0 | "
      "0.015 |"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    ck_assert_msg(strstr(text, want[i]), "no '%s' in:\n%s", want[i], text);
  free(text);
  acct_free(&a);
}
END_TEST

static Suite *make_account_suite(const suite_env_t *env)
{
  (void)env;
  Suite *s = suite_create("account");
  SUITE_CASE(s, "arithmetic", conv3x3_by_hand, convt_and_head_by_hand, fused_conv_by_hand,
             element_passes_by_hand, reference_unet_flops);
  SUITE_CASE(s, "report", rows_merge_by_layer_and_pass, rows_know_their_engine, roofline_and_mfu,
             json_form, markdown_form);
  return s;
}

SUITE_MAIN("check_account", make_account_suite, SUITE_CPU_ONLY)
