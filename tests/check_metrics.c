/* check_metrics.c — mIoU and pixel accuracy against hand-computed values and against an
 * independent per-class count over the pixels; merging across "ranks" equals counting all. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "src/data/data_rng.h"
#include "src/train/metrics.h"
#include "tests/suite_main.h"

#define TOL 1e-12

START_TEST(test_hand_built)
{
  /* 2 classes: labels 0 0 1 1, predictions 0 1 1 1.
   * Class 0: tp 1, fp 0, fn 1 -> 1/2. Class 1: tp 2, fp 1, fn 0 -> 2/3. */
  int32_t y[] = {0, 0, 1, 1}, p[] = {0, 1, 1, 1};
  metrics_t m;
  ck_assert_int_eq(metrics_init(&m, 2), 0);
  metrics_add(&m, y, p, 4);
  ck_assert_double_eq_tol(metrics_iou(&m, 0), 0.5, TOL);
  ck_assert_double_eq_tol(metrics_iou(&m, 1), 2.0 / 3.0, TOL);
  ck_assert_double_eq_tol(metrics_miou(&m), (0.5 + 2.0 / 3.0) / 2, TOL);
  ck_assert_double_eq_tol(metrics_pixel_accuracy(&m), 0.75, TOL);
  ck_assert_double_eq(metrics_pixels(&m), 4);
  metrics_free(&m);
}
END_TEST

START_TEST(test_ignore_and_absent_classes)
{
  /* 4 classes; pixels labelled 255 are ignored whatever their prediction, so class 3 (only
   * predicted on an ignored pixel) appears nowhere and is left out of the mean. Counted pixels:
   * 0, 1, 2, 3, 6. Class 0: tp 3 -> 1. Class 1: tp 1, fn 1 (pixel 3) -> 1/2.
   * Class 2: never true, predicted once (its fp is class 1's fn): absent from the labels, so
   * absent (NaN), not 0 and not 1, and left out of the mean. Accuracy 4/5. */
  int32_t y[] = {0, 0, 1, 1, 255, 255, 0}, p[] = {0, 0, 1, 2, 3, 1, 0};
  metrics_t m;
  ck_assert_int_eq(metrics_init(&m, 4), 0);
  metrics_add(&m, y, p, 7);
  ck_assert_double_eq(metrics_pixels(&m), 5);
  ck_assert_double_eq_tol(metrics_iou(&m, 0), 1.0, TOL);
  ck_assert_double_eq_tol(metrics_iou(&m, 1), 0.5, TOL);
  ck_assert(isnan(metrics_iou(&m, 2)));
  ck_assert(isnan(metrics_iou(&m, 3)));
  ck_assert_int_eq(metrics_present(&m, 1), 1);
  ck_assert_int_eq(metrics_present(&m, 2), 0);
  ck_assert_int_eq(metrics_present_count(&m), 2);
  ck_assert_double_eq_tol(metrics_miou(&m), (1.0 + 0.5) / 2, TOL);
  ck_assert_double_eq_tol(metrics_pixel_accuracy(&m), 4.0 / 5.0, TOL);
  /* Nothing counted: both metrics 0, not NaN. */
  metrics_reset(&m);
  ck_assert_double_eq(metrics_miou(&m), 0);
  ck_assert_double_eq(metrics_pixel_accuracy(&m), 0);
  metrics_free(&m);
}
END_TEST

/* Independent reference: per class, count tp, fp, fn by looking at each pixel. */
static void reference(const int32_t *y, const int32_t *p, size_t n, int k, double *miou,
                      double *acc)
{
  double sum = 0, correct = 0, total = 0;
  int present = 0;
  for (int c = 0; c < k; c++) {
    double tp = 0, fp = 0, fn = 0;
    for (size_t i = 0; i < n; i++) {
      if (y[i] < 0 || y[i] >= k) continue;
      if (y[i] == c && p[i] == c) tp++;
      else if (y[i] == c) fn++;
      else if (p[i] == c) fp++;
    }
    if (tp + fn > 0) { /* the class is in the labels */
      sum += tp / (tp + fp + fn);
      present++;
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (y[i] < 0 || y[i] >= k) continue;
    total++;
    correct += y[i] == p[i];
  }
  *miou = present ? sum / present : 0;
  *acc = total ? correct / total : 0;
}

START_TEST(test_random_against_reference)
{
  const int k = 5;
  const size_t n = 20000;
  int32_t *y = malloc(n * sizeof *y), *p = malloc(n * sizeof *p);
  data_rng_t r = data_rng_key(7, (uint64_t)_i, 0, 0);
  for (size_t i = 0; i < n; i++) {
    y[i] = data_rng_uniform(&r) < 0.05 ? 255 : (int32_t)data_rng_below(&r, k);
    /* Predictions right about 70 % of the time, biased towards class 1 otherwise. */
    double u = data_rng_uniform(&r);
    p[i] = u < 0.7 && y[i] != 255 ? y[i] : u < 0.85 ? 1 : (int32_t)data_rng_below(&r, k);
  }
  double ref_miou, ref_acc;
  reference(y, p, n, k, &ref_miou, &ref_acc);
  metrics_t whole, a, b;
  ck_assert_int_eq(metrics_init(&whole, k), 0);
  ck_assert_int_eq(metrics_init(&a, k), 0);
  ck_assert_int_eq(metrics_init(&b, k), 0);
  metrics_add(&whole, y, p, n);
  ck_assert_double_eq_tol(metrics_miou(&whole), ref_miou, 1e-12);
  ck_assert_double_eq_tol(metrics_pixel_accuracy(&whole), ref_acc, 1e-12);
  /* Two "ranks" with unequal shares: summing their counts equals counting everything. */
  size_t cut = n / 3;
  metrics_add(&a, y, p, cut);
  metrics_add(&b, y + cut, p + cut, n - cut);
  metrics_merge(&a, &b);
  for (size_t i = 0; i < metrics_count_len(&a); i++)
    ck_assert_double_eq(a.counts[i], whole.counts[i]);
  ck_assert_double_eq_tol(metrics_miou(&a), ref_miou, 1e-12);
  /* ... which is not the mean of the per-rank ratios (the reason counts are what is summed). */
  metrics_t c;
  ck_assert_int_eq(metrics_init(&c, k), 0);
  metrics_add(&c, y, p, cut);
  double mean_of_ratios = (metrics_miou(&c) + metrics_miou(&b)) / 2;
  ck_assert(fabs(mean_of_ratios - ref_miou) > 1e-9);
  metrics_free(&whole);
  metrics_free(&a);
  metrics_free(&b);
  metrics_free(&c);
  free(y);
  free(p);
}
END_TEST

static Suite *metrics_suite(const suite_env_t *env)
{
  Suite *s = suite_create("metrics");
  TCase *tc = SUITE_CASE(s, "confusion", test_hand_built, test_ignore_and_absent_classes);
  tcase_add_loop_test(tc, test_random_against_reference, 0, 4);
  return s;
}

SUITE_MAIN("check_metrics", metrics_suite, SUITE_CPU_ONLY)
