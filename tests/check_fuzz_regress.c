/* check_fuzz_regress.c — replays the inputs kept from the CLI, PNG, segment-header, resumed-log
 * and tools/compare fuzzers (tests/fuzz/regress_cli, regress_png, regress_segment, regress_log,
 * regress_compare: seeds and every crash that was fixed) through the same code the harnesses run; files named ok-* must
 * also be accepted, proving the harness reaches the code behind the validation. Runs in CI, and
 * under --enable-sanitizers. (The checkpoint fuzzer's inputs: check_checkpoint; the report's
 * files: tests/report_fuzz.sh.) */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/cli_input.h"
#include "tests/fuzz/compare_input.h"
#include "tests/fuzz/log_input.h"
#include "tests/fuzz/png_input.h"
#include "tests/fuzz/segment_input.h"
#include "tests/suite_main.h"

typedef int (*replay_fn)(const uint8_t *data, size_t size, void *ctx);

/* Runs fn on every file of tests/fuzz/regress_<target>; returns the number of files. */
static int replay_dir(const char *target, replay_fn fn, void *ctx)
{
  char dir[1024];
  const char *srcdir = getenv("srcdir") ? getenv("srcdir") : ".";
  snprintf(dir, sizeof dir, "%s/tests/fuzz/regress_%s", srcdir, target);
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot open %s", dir);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int rc = fn(buf, len, ctx);
    if (strncmp(e->d_name, "ok-", 3) == 0)
      ck_assert_msg(rc == 0, "%s/%s: expected to be accepted, got status %d", target, e->d_name, rc);
    n++;
  }
  closedir(d);
  return n;
}

static int replay_cli(const uint8_t *data, size_t size, void *ctx)
{
  int rc = cli_fuzz_run(data, size, ctx);
  return rc == 1 ? 0 : rc; /* --help printed counts as accepted */
}

START_TEST(cli_inputs)
{
  FILE *devnull = fopen("/dev/null", "w");
  ck_assert_ptr_nonnull(devnull);
  ck_assert_int_ge(replay_dir("cli", replay_cli, devnull), 4);
  fclose(devnull);
}
END_TEST

static int replay_segment(const uint8_t *data, size_t size, void *ctx)
{
  int rc = segment_fuzz_run(data, size);
  ck_assert_int_ge(rc, 0);
  return rc;
}

START_TEST(segment_inputs)
{
  ck_assert_int_ge(replay_dir("segment", replay_segment, NULL), 8);
  /* A segment made now is accepted: the ok-* files are of this layout version, and the harness
   * reaches the regions behind the header checks. */
  static uint8_t seed[8 + sizeof(shm_header_t)];
  size_t n = segment_fuzz_make_seed(seed, sizeof seed, 3, 64 << 10);
  ck_assert_uint_gt(n, 0);
  ck_assert_int_eq(segment_fuzz_run(seed, n), 0);
  seed[0] ^= 1; /* one byte off the size: refused */
  ck_assert_int_eq(segment_fuzz_run(seed, n), 1);
}
END_TEST

/* The targets whose inputs are files: each replays in a folder of its own, removed after. */
typedef int (*dir_input_fn)(const uint8_t *data, size_t size, const char *dir);
typedef struct {
  dir_input_fn fn;
  const char *dir;
} dir_replay_t;

static int replay_in(const uint8_t *data, size_t size, void *ctx)
{
  const dir_replay_t *r = ctx;
  return r->fn(data, size, r->dir);
}

static void replay_in_folder(const char *target, dir_input_fn fn)
{
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/check_fuzz_%s-XXXXXX", target);
  ck_assert_ptr_nonnull(mkdtemp(dir));
  dir_replay_t r = {.fn = fn, .dir = dir};
  int n = replay_dir(target, replay_in, &r);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
  ck_assert_int_ge(n, 4);
}

START_TEST(png_inputs) { replay_in_folder("png", png_fuzz_run); }
END_TEST

START_TEST(log_inputs) { replay_in_folder("log", log_fuzz_run); }
END_TEST

START_TEST(compare_inputs) { replay_in_folder("compare", compare_fuzz_run); }
END_TEST

static Suite *fuzz_regress_suite(const suite_env_t *env)
{
  Suite *s = suite_create("fuzz_regress");
  SUITE_CASE(s, "replay", cli_inputs, png_inputs, segment_inputs, log_inputs, compare_inputs);
  return s;
}

SUITE_MAIN("check_fuzz_regress", fuzz_regress_suite, SUITE_CPU_ONLY)
