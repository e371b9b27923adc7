/* check_checkpoint.c — checkpoint files: round trip, every kind of damage refused with a message,
 * and failed writes (disk full, unwritable directory) leave the previous checkpoint intact; the
 * run record (ckpt_run.h) round trip, a later version's read by its first fields, damage refused,
 * and its absence (an earlier checkpoint) read as no record. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/train/ckpt_file.h"
#include "src/train/ckpt_run.h"
#include "tests/fuzz/ckpt_input.h"
#include "tests/suite_main.h"

#include <dirent.h>

static char dir[64];
static char path[128];
static float weights[1000];
static double moments[77];
static int64_t counters[3] = {12, -5, 1LL << 40};

static void setup(void)
{
  snprintf(dir, sizeof dir, "/tmp/shmddp-ckpt-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/model.ckpt", dir);
  for (int i = 0; i < 1000; i++) weights[i] = (float)i * 0.25f - 3.0f;
  for (int i = 0; i < 77; i++) moments[i] = 1.0 / (i + 1);
}

static void teardown(void)
{
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static int write_good(const char *config)
{
  ckpt_tensor_t t[3] = {{.name = "params", .dtype = CKPT_F32, .count = 1000, .data = weights},
                        {.name = "optimizer.momentum", .dtype = CKPT_F64, .count = 77,
                         .data = moments},
                        {.name = "step", .dtype = CKPT_I64, .count = 3, .data = counters}};
  char err[256];
  int rc = ckpt_write(path, config, t, 3, err, sizeof err);
  ck_assert_msg(rc == 0, "%s", err);
  return rc;
}

static long file_size(const char *p)
{
  struct stat sb;
  return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

START_TEST(round_trip)
{
  write_good("widths=8,16\nseed=3\n");
  ckpt_t *c;
  char err[256];
  ck_assert_msg(ckpt_read(path, &c, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(ckpt_config(c), "widths=8,16\nseed=3\n");
  ck_assert_int_eq(ckpt_count(c), 3);
  float w[1000];
  ck_assert_int_eq(ckpt_get(c, "params", CKPT_F32, 1000, w, err, sizeof err), 0);
  ck_assert_int_eq(memcmp(w, weights, sizeof w), 0);
  int64_t k[3];
  ck_assert_int_eq(ckpt_get(c, "step", CKPT_I64, 3, k, err, sizeof err), 0);
  ck_assert(k[2] == (1LL << 40) && k[1] == -5);
  /* shape and name checks */
  ck_assert_int_ne(ckpt_get(c, "params", CKPT_F32, 999, w, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "same model configuration"));
  ck_assert_int_ne(ckpt_get(c, "missing", CKPT_F32, 1, w, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "'missing'"));
  ckpt_free(c);
}
END_TEST

/* Flip one byte anywhere: refused, never crashes, never accepted. */
START_TEST(corruption_is_refused)
{
  write_good("cfg");
  long size = file_size(path);
  ck_assert_int_gt(size, 0);
  FILE *f = fopen(path, "rb");
  unsigned char *orig = malloc((size_t)size);
  ck_assert_int_eq(fread(orig, 1, (size_t)size, f), size);
  fclose(f);
  char bad[160];
  snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
  int named_tensor = 0;
  for (long off = 0; off < size; off += 7) {
    orig[off] ^= 0x5a;
    f = fopen(bad, "wb");
    fwrite(orig, 1, (size_t)size, f);
    fclose(f);
    orig[off] ^= 0x5a;
    ckpt_t *c = NULL;
    char err[256] = "";
    ck_assert_msg(ckpt_read(bad, &c, err, sizeof err) != 0, "byte %ld flipped was accepted", off);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(err, "bad.ckpt"));
    named_tensor += strstr(err, "'params'") != NULL;
  }
  (void)named_tensor;
  free(orig);
}
END_TEST

START_TEST(truncation_is_refused)
{
  write_good("cfg");
  long size = file_size(path);
  for (long len = 0; len < size; len += 13) {
    ck_assert_int_eq(truncate(path, len), 0);
    ckpt_t *c = NULL;
    char err[256];
    ck_assert_msg(ckpt_read(path, &c, err, sizeof err) != 0, "cut at %ld accepted", len);
    write_good("cfg");
  }
  char err[256];
  ckpt_t *c;
  ck_assert_int_ne(ckpt_read("/nonexistent/x.ckpt", &c, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "No such file"));
}
END_TEST

/* A write that fails half-way (disk full) leaves the previous checkpoint and no temporary. */
static long budget;
static long limited_write(int fd, const void *buf, size_t len)
{
  if (budget <= 0) { errno = ENOSPC; return -1; }
  size_t n = len < (size_t)budget ? len : (size_t)budget;
  budget -= (long)n;
  return (long)write(fd, buf, n);
}

START_TEST(disk_full_keeps_previous)
{
  write_good("first");
  long size = file_size(path);
  for (long start = 0; start < size; start += 301) {
    budget = start;
    ckpt_set_write_fn(limited_write);
    char err[256];
    ckpt_tensor_t t = {.name = "params", .dtype = CKPT_F32, .count = 1000, .data = weights};
    int rc = ckpt_write(path, "second", &t, 1, err, sizeof err);
    ckpt_set_write_fn(NULL);
    if (rc == 0) continue; /* the budget sufficed for the smaller file */
    ck_assert_msg(strstr(err, "No space") && strstr(err, "unchanged"), "budget %ld: %s", start, err);
    ckpt_t *c;
    ck_assert_int_eq(ckpt_read(path, &c, err, sizeof err), 0);
    ck_assert_str_eq(ckpt_config(c), "first");
    ckpt_free(c);
  }
  char cmd[160];
  snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp", dir);
  FILE *p = popen(cmd, "r");
  int ntmp = -1;
  ck_assert_int_eq(fscanf(p, "%d", &ntmp), 1);
  pclose(p);
  ck_assert_int_eq(ntmp, 0);
}
END_TEST

START_TEST(unwritable_directory_is_reported)
{
  char err[256];
  ckpt_tensor_t t = {.name = "params", .dtype = CKPT_F32, .count = 10, .data = weights};
  /* A path through a regular file cannot be created, even by root. */
  write_good("x");
  char through[200];
  snprintf(through, sizeof through, "%s/sub.ckpt", path);
  ck_assert_int_ne(ckpt_write(through, "", &t, 1, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "writable"));
  const ckpt_tensor_t unnamed[] = {{.name = "", .dtype = CKPT_F32, .count = 1, .data = weights}};
  const ckpt_tensor_t twice[] = {{.name = "a", .dtype = CKPT_F32, .count = 1, .data = weights},
                                 {.name = "a", .dtype = CKPT_F32, .count = 1, .data = weights}};
  ck_assert_int_ne(ckpt_write(path, "", unnamed, 1, err, sizeof err), 0);
  ck_assert_int_ne(ckpt_write(path, "", twice, 2, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "twice"));
}
END_TEST

/* The run record: written, read back; a longer record (a later version appends fields) read by
 * the fields it shares; a short or inconsistent one refused; none at all is no record. */
START_TEST(run_record)
{
  ckpt_run_t run = {.classes = 3, .class_value = {100, 200, 2}}, back;
  char err[256];
  ck_assert_int_eq(ckpt_run_new_id(run.id, err, sizeof err), 0);
  ck_assert(ckpt_run_is_id(run.id));
  ck_assert(!ckpt_run_is_id("not-an-id"));
  uint8_t rec[CKPT_RUN_MAX_BYTES + 8];
  size_t n = ckpt_run_encode(&run, rec, sizeof rec);
  ck_assert_uint_eq(n, 18 + 3);
  ck_assert_int_eq(rec[0], CKPT_RUN_VERSION);
  struct {
    size_t count;
    uint8_t version;
    int ok;
  } cases[] = {{.count = n, .version = 1, .ok = 1},
               {.count = n + 5, .version = 2, .ok = 1}, /* a later version, longer */
               {.count = n - 1, .version = 1, .ok = 0}, /* a class value cut off */
               {.count = 10, .version = 1, .ok = 0},
               {.count = n, .version = 0, .ok = 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rec[0] = cases[i].version;
    ckpt_tensor_t t[2] = {{.name = "params", .dtype = CKPT_F32, .count = 1000, .data = weights},
                          {.name = CKPT_RUN_TENSOR, .dtype = CKPT_U8, .count = cases[i].count,
                           .data = rec}};
    ck_assert_int_eq(ckpt_write(path, "cfg", t, 2, err, sizeof err), 0);
    ckpt_t *c;
    ck_assert_int_eq(ckpt_read(path, &c, err, sizeof err), 0);
    int rc = ckpt_run_read(c, &back, err, sizeof err);
    ckpt_free(c);
    ck_assert_msg((rc == 0) == cases[i].ok, "case %zu: rc %d (%s)", i, rc, err);
    if (!cases[i].ok) {
      ck_assert_ptr_nonnull(strstr(err, "run record is damaged"));
      continue;
    }
    ck_assert_str_eq(back.id, run.id);
    ck_assert_int_eq(back.classes, 3);
    ck_assert_int_eq(memcmp(back.class_value, run.class_value, 3), 0);
  }
  write_good("cfg"); /* no record: an earlier version's checkpoint */
  ckpt_t *c;
  ck_assert_int_eq(ckpt_read(path, &c, err, sizeof err), 0);
  ck_assert_int_eq(ckpt_run_read(c, &back, err, sizeof err), 0);
  ckpt_free(c);
  ck_assert_str_eq(back.id, "");
  ck_assert_int_eq(back.classes, 0);
  ckpt_run_t bad = {.id = "xyz", .classes = 3};
  ck_assert_uint_eq(ckpt_run_encode(&bad, rec, sizeof rec), 0); /* nothing written for it */
}
END_TEST

/* Inputs the fuzzer kept (tests/fuzz/regress_checkpoint): each is accepted or refused with a
 * message, never a crash (this suite also runs under --enable-sanitizers). */
START_TEST(fuzz_regressions)
{
  char rdir[512];
  snprintf(rdir, sizeof rdir, "%s/tests/fuzz/regress_checkpoint", getenv("srcdir") ? getenv("srcdir") : ".");
  DIR *d = opendir(rdir);
  ck_assert_msg(d != NULL, "cannot open %s", rdir);
  struct dirent *e;
  int n = 0, accepted = 0;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char in[1024];
    snprintf(in, sizeof in, "%s/%s", rdir, e->d_name);
    FILE *f = fopen(in, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char raw[1 << 16];
    size_t len = fread(raw, 1, sizeof raw, f);
    fclose(f);
    size_t flen;
    unsigned char *file = ckpt_fuzz_file(raw, len, &flen);
    FILE *g = fopen(path, "wb");
    if (flen) fwrite(file, 1, flen, g);
    fclose(g);
    free(file);
    ckpt_t *c = NULL;
    char err[256] = "";
    if (ckpt_read(path, &c, err, sizeof err) == 0) {
      accepted++;
      ckpt_free(c);
    } else {
      ck_assert_msg(err[0] != 0, "%s refused without a message", e->d_name);
    }
    n++;
  }
  closedir(d);
  ck_assert_int_ge(n, 1);
  ck_assert_int_ge(accepted, 1); /* the valid seed */
}
END_TEST

static Suite *checkpoint_suite(const suite_env_t *env)
{
  Suite *s = suite_create("checkpoint");
  TCase *tc = SUITE_CASE(s, "format", round_trip, corruption_is_refused, truncation_is_refused,
                         disk_full_keeps_previous, unwritable_directory_is_reported,
                         fuzz_regressions, run_record);
  tcase_add_checked_fixture(tc, setup, teardown);
  return s;
}

SUITE_MAIN("check_checkpoint", checkpoint_suite, SUITE_CPU_ONLY)
