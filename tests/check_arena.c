/* check_arena.c — the memory ledger: current and peak bytes per category through allocations,
 * frees and charges, the total's peak, failure messages, and that destroy frees every block. */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "src/device/arena.h"
#include "src/obs/run_summary.h"
#include "tests/suite_main.h"

/* A backend allocator that counts live blocks and can be told to fail. */
typedef struct {
  int live;
  size_t limit;
} counting_t;

static void *count_alloc(void *ctx, size_t bytes)
{
  counting_t *c = ctx;
  if (bytes > c->limit) return NULL;
  c->live++;
  return malloc(bytes);
}

static void count_free(void *ctx, void *p)
{
  counting_t *c = ctx;
  c->live--;
  free(p);
}

START_TEST(ledger_current_and_peak)
{
  char err[128];
  arena_t *a;
  ck_assert_int_eq(arena_create(&a, NULL, "cpu0", err, sizeof err), 0);
  void *p1 = arena_alloc(a, 1000, ARENA_PARAMS, "w");
  void *p2 = arena_alloc(a, 3000, ARENA_ACTIVATIONS, "act1");
  void *p3 = arena_calloc(a, 500, ARENA_ACTIVATIONS, "act2");
  ck_assert_ptr_nonnull(p1);
  ck_assert_ptr_nonnull(p2);
  ck_assert_ptr_nonnull(p3);
  for (int i = 0; i < 500; i++) ck_assert_int_eq(((unsigned char *)p3)[i], 0);
  ck_assert_uint_eq(((uintptr_t)p2) % 64, 0);
  ck_assert_uint_eq(arena_current(a, ARENA_ACTIVATIONS), 3500);
  ck_assert_uint_eq(arena_total_current(a), 4500);
  arena_free(a, p2);
  ck_assert_uint_eq(arena_current(a, ARENA_ACTIVATIONS), 500);
  ck_assert_uint_eq(arena_peak(a, ARENA_ACTIVATIONS), 3500);
  void *p4 = arena_alloc(a, 2000, ARENA_GRADS, "g");
  /* total peak is the peak of the sum (4500 before the free), not the sum of peaks (6500) */
  ck_assert_uint_eq(arena_total_current(a), 3500);
  ck_assert_uint_eq(arena_total_peak(a), 4500);
  arena_charge(a, ARENA_COMM, 10000);
  ck_assert_uint_eq(arena_total_peak(a), 13500);
  arena_release(a, ARENA_COMM, 10000);
  ck_assert_uint_eq(arena_current(a, ARENA_COMM), 0);
  ck_assert_uint_eq(arena_peak(a, ARENA_COMM), 10000);
  arena_reset_peaks(a);
  ck_assert_uint_eq(arena_peak(a, ARENA_COMM), 0);
  ck_assert_uint_eq(arena_peak(a, ARENA_ACTIVATIONS), 500);
  ck_assert_uint_eq(arena_total_peak(a), 3500);
  arena_free(a, NULL);
  int on_stack;
  arena_free(a, &on_stack); /* not ours: ignored */
  ck_assert_uint_eq(arena_total_current(a), 3500);
  char json[1024];
  ck_assert_int_eq(run_summary_ledger_json(a, json, sizeof json), 0);
  ck_assert_ptr_nonnull(strstr(json, "\"device\":\"cpu0\""));
  ck_assert_ptr_nonnull(strstr(json, "\"gradients\":2000"));
  ck_assert_ptr_nonnull(strstr(json, "\"parameters\":1000"));
  char tiny[16];
  ck_assert_int_ne(run_summary_ledger_json(a, tiny, sizeof tiny), 0); /* truncation reported */
  ck_assert_uint_eq(strlen(tiny), sizeof tiny - 1);
  FILE *f = tmpfile();
  arena_print(a, f);
  ck_assert(ftell(f) > 0);
  fclose(f);
  arena_free(a, p4);
  arena_free(a, p1);
  arena_free(a, p3);
  ck_assert_uint_eq(arena_total_current(a), 0);
  arena_destroy(a);
}
END_TEST

START_TEST(failure_and_destroy)
{
  char err[128];
  counting_t c = {0, 1 << 20};
  arena_allocator_t al = {.alloc = count_alloc, .free = count_free, .ctx = &c, .device = -1};
  arena_t *a;
  ck_assert_int_eq(arena_create(&a, &al, "dev", err, sizeof err), 0);
  for (int i = 0; i < 100; i++) ck_assert_ptr_nonnull(arena_alloc(a, 100 + i, i % ARENA_NUM_CATEGORIES, "t"));
  ck_assert_int_eq(c.live, 100);
  ck_assert_ptr_null(arena_alloc(a, 2 << 20, ARENA_WORKSPACE, "im2col"));
  const char *msg = arena_last_error(a);
  ck_assert_ptr_nonnull(strstr(msg, "im2col"));
  ck_assert_ptr_nonnull(strstr(msg, "workspace"));
  ck_assert_uint_eq(arena_current(a, ARENA_WORKSPACE), 100 + 4 + 100 + 12 + 100 + 20 + 100 + 28 +
                    100 + 36 + 100 + 44 + 100 + 52 + 100 + 60 + 100 + 68 + 100 + 76 + 100 + 84 +
                    100 + 92);
  arena_destroy(a);
  ck_assert_int_eq(c.live, 0);
  ck_assert_str_eq(arena_category_name(ARENA_DP_GATHER), "dp_gather");
}
END_TEST

static Suite *make_arena_suite(const suite_env_t *env)
{
  Suite *s = suite_create("arena");
  SUITE_CASE(s, "ledger", ledger_current_and_peak, failure_and_destroy);
  return s;
}

SUITE_MAIN("check_arena", make_arena_suite, SUITE_CPU_ONLY)
