/* check_sampler.c — DistributedSampler semantics, with every rank of a world simulated here:
 * shards are disjoint and cover the dataset, padding is exactly what makes the shards even and
 * is flagged, drop_last drops only the uneven tail, and an epoch's order is the same on every
 * rank and different from the next epoch's. */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "src/data/sampler.h"
#include "tests/suite_main.h"

static const size_t sizes[] = {1, 2, 7, 8, 13, 64, 101, 1000};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* Every rank's shard of one epoch; counts[i] = how many times sample i was handed out as a
 * real (non-pad) sample, pads = number of padded positions. */
static void collect(size_t n, int world, int drop_last, uint64_t seed, long epoch, int shuffle,
                    int *counts, size_t *pads, size_t *total)
{
  memset(counts, 0, n * sizeof *counts);
  *pads = *total = 0;
  for (int r = 0; r < world; r++) {
    sampler_config_t c = {.dataset_size = n, .world = world, .rank = r, .shuffle = shuffle,
                          .drop_last = drop_last, .seed = seed};
    size_t per = sampler_per_rank(&c);
    size_t *idx = malloc((per + 1) * sizeof *idx);
    uint8_t *pad = malloc(per + 1);
    ck_assert_int_eq(sampler_epoch(&c, epoch, idx, pad), 0);
    for (size_t k = 0; k < per; k++) {
      ck_assert_uint_lt(idx[k], n);
      if (pad[k]) (*pads)++;
      else counts[idx[k]]++;
    }
    *total += per;
    free(idx);
    free(pad);
  }
}

START_TEST(test_pad_covers_disjoint)
{
  int world = _i;
  for (size_t s = 0; s < NSIZES; s++) {
    size_t n = sizes[s];
    int *counts = malloc(n * sizeof *counts);
    size_t pads, total;
    collect(n, world, 0, 42, 3, 1, counts, &pads, &total);
    /* Padding makes every shard ceil(n / world) long; exactly the extra positions are pads. */
    size_t per = (n + (size_t)world - 1) / (size_t)world;
    ck_assert_uint_eq(total, per * (size_t)world);
    ck_assert_uint_eq(pads, total - n);
    for (size_t i = 0; i < n; i++)
      ck_assert_msg(counts[i] == 1, "n=%zu world=%d: sample %zu given %d times", n, world, i,
                    counts[i]);
    free(counts);
  }
}
END_TEST

START_TEST(test_drop_last)
{
  int world = _i;
  for (size_t s = 0; s < NSIZES; s++) {
    size_t n = sizes[s];
    sampler_config_t c = {.dataset_size = n, .world = world, .rank = 0, .shuffle = 1,
                          .drop_last = 1, .seed = 42};
    char err[256];
    if (n < (size_t)world) {
      ck_assert_int_ne(sampler_validate(&c, err, sizeof err), 0);
      continue;
    }
    ck_assert_int_eq(sampler_validate(&c, err, sizeof err), 0);
    int *counts = malloc(n * sizeof *counts);
    size_t pads, total;
    collect(n, world, 1, 42, 0, 1, counts, &pads, &total);
    ck_assert_uint_eq(pads, 0);
    ck_assert_uint_eq(total, n / (size_t)world * (size_t)world);
    size_t seen = 0;
    for (size_t i = 0; i < n; i++) {
      ck_assert_int_le(counts[i], 1); /* disjoint */
      seen += (size_t)counts[i];
    }
    ck_assert_uint_eq(seen, total);
    free(counts);
  }
}
END_TEST

/* Rebuild the epoch's global order from the ranks' strided shards. */
static void global_order(size_t n, int world, uint64_t seed, long epoch, size_t *order)
{
  size_t per = (n + (size_t)world - 1) / (size_t)world;
  size_t *idx = malloc(per * sizeof *idx);
  for (int r = 0; r < world; r++) {
    sampler_config_t c = {.dataset_size = n, .world = world, .rank = r, .shuffle = 1,
                          .drop_last = 0, .seed = seed};
    ck_assert_int_eq(sampler_epoch(&c, epoch, idx, NULL), 0);
    for (size_t k = 0; k < per; k++) order[k * (size_t)world + (size_t)r] = idx[k];
  }
  free(idx);
}

START_TEST(test_epoch_shuffle)
{
  const size_t n = 101;
  size_t w1[101], w4[104], again[104], next[104];
  /* The order the shards come from is one permutation, the same whichever world cuts it (the
   * ranks agree on it without talking), identical when recomputed, new in the next epoch. */
  global_order(n, 1, 9, 5, w1);
  global_order(n, 4, 9, 5, w4);
  global_order(n, 4, 9, 5, again);
  global_order(n, 4, 9, 6, next);
  ck_assert_mem_eq(w1, w4, n * sizeof *w1);
  ck_assert_mem_eq(w4, again, sizeof w4);
  ck_assert(memcmp(w4, next, n * sizeof *w4) != 0);
  /* The padding repeats the start of the same order. */
  for (size_t p = n; p < 104; p++) ck_assert_uint_eq(w4[p], w4[p - n]);
  /* A permutation, and actually shuffled. */
  int seen[101] = {0};
  size_t fixed = 0;
  for (size_t i = 0; i < n; i++) {
    seen[w1[i]]++;
    fixed += w1[i] == i;
  }
  for (size_t i = 0; i < n; i++) ck_assert_int_eq(seen[i], 1);
  ck_assert_uint_lt(fixed, 10);
  /* Another seed, another order. */
  size_t other[101];
  global_order(n, 1, 10, 5, other);
  ck_assert(memcmp(w1, other, sizeof other) != 0);
}
END_TEST

START_TEST(test_no_shuffle_and_validate)
{
  /* Validation order: dataset order, strided, with the pad flagged. */
  sampler_config_t c = {.dataset_size = 5, .world = 2, .rank = 1, .shuffle = 0, .drop_last = 0,
                        .seed = 1};
  size_t idx[3];
  uint8_t pad[3];
  ck_assert_int_eq(sampler_per_rank(&c), 3);
  ck_assert_int_eq(sampler_epoch(&c, 7, idx, pad), 0);
  ck_assert_uint_eq(idx[0], 1);
  ck_assert_uint_eq(idx[1], 3);
  ck_assert_uint_eq(idx[2], 0); /* position 5 wraps to sample 0 */
  ck_assert(!pad[0] && !pad[1] && pad[2]);
  char err[256];
  sampler_config_t bad = {.dataset_size = 5, .world = 2, .rank = 2, .shuffle = 0, .drop_last = 0,
                          .seed = 1};
  ck_assert_int_ne(sampler_validate(&bad, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "rank 2"));
  sampler_config_t empty = {.dataset_size = 0, .world = 1, .rank = 0, .shuffle = 1, .drop_last = 0,
                            .seed = 1};
  ck_assert_int_ne(sampler_validate(&empty, err, sizeof err), 0);
  /* More ranks than samples with padding: every rank still gets one. */
  sampler_config_t few = {.dataset_size = 2, .world = 4, .rank = 3, .shuffle = 1, .drop_last = 0,
                          .seed = 1};
  ck_assert_int_eq(sampler_validate(&few, err, sizeof err), 0);
  ck_assert_uint_eq(sampler_per_rank(&few), 1);
}
END_TEST

static Suite *sampler_suite(const suite_env_t *env)
{
  Suite *s = suite_create("sampler");
  TCase *tc = tcase_create("shards");
  tcase_add_loop_test(tc, test_pad_covers_disjoint, 1, 9);
  tcase_add_loop_test(tc, test_drop_last, 1, 9);
  suite_add_tcase(s, tc);
  SUITE_CASE(s, "order", test_epoch_shuffle, test_no_shuffle_and_validate);
  return s;
}

SUITE_MAIN("check_sampler", sampler_suite, SUITE_CPU_ONLY)
