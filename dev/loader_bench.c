/* loader_bench.c — how many images a second the data loader (src/data/loader.h) delivers on this
 * host, for the synthetic dataset the benchmarks train on (bench/lib.sh REF_FLAGS: 256 x 256
 * samples, 4 classes, 1200 of them), at several thread counts, with nothing consuming but this
 * program taking each batch and handing it back. That is the most images a second a training
 * step can be fed here: a trainer whose step needs more waits for its batches (its summary's
 * "data wait" row). Run it on the machine the trainer's rates come from, alone, and beside
 * whatever else runs there.
 *   dev/loader_bench [-w THREADS,...] [-n BATCHES] [-b BATCH] [-s SIZE] [-c CLASSES]
 * defaults: -w 1,2,4,8,16 -n 200 -b 6 -s 256 -c 4. Prints the CPUs this process may run on
 * (its affinity), one sample drawn and augmented on this thread alone, then per thread count
 * the batches, seconds and images a second. */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/data/augment.h"
#include "src/data/data.h"
#include "src/data/loader.h"

#define MAX_COUNTS 16
#define TRAIN_SIZE 1200 /* REF_FLAGS' --train-size */

static double now_s(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int parse_int(const char *s, int lo, int hi, const char *what, int *out)
{
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "loader_bench: %s must be a number from %d to %d, not '%s'\n", what, lo, hi,
            s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* "1,2,8" into counts (at most MAX_COUNTS of 1..256); the number of them, or -1. */
static int parse_counts(const char *s, int *counts)
{
  char buf[256];
  if (strlen(s) >= sizeof buf) {
    fprintf(stderr, "loader_bench: -w: too long a list\n");
    return -1;
  }
  strcpy(buf, s);
  int n = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (n == MAX_COUNTS) {
      fprintf(stderr, "loader_bench: -w: at most %d thread counts\n", MAX_COUNTS);
      return -1;
    }
    if (parse_int(t, 1, 256, "-w's thread count", &counts[n]) != 0) return -1;
    n++;
  }
  if (n == 0) fprintf(stderr, "loader_bench: -w: no thread count given\n");
  return n ? n : -1;
}

/* Images a second over `batches` batches of `batch` samples taken in order from a loader of
 * `workers` threads (the trainer's depth: workers + 1 batches ahead); -1 on an error. */
static double rate(const data_set_t *ds, const augment_config_t *aug, int workers, int batch,
                   int batches, double *secs)
{
  char err[256];
  loader_config_t cfg = {.data = ds, .augment = *aug, .batch_size = batch, .workers = workers};
  loader_t *l = NULL;
  if (loader_create(&l, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "loader_bench: %s\n", err);
    return -1;
  }
  size_t n = (size_t)batches * batch;
  size_t *idx = malloc(n * sizeof *idx);
  if (!idx) {
    loader_destroy(l);
    fprintf(stderr, "loader_bench: out of memory\n");
    return -1;
  }
  for (size_t i = 0; i < n; i++) idx[i] = i % ds->size;
  double t0 = now_s(), r = -1;
  if (loader_start(l, 0, idx, NULL, n, 1, err, sizeof err) != 0) {
    fprintf(stderr, "loader_bench: %s\n", err);
    goto out;
  }
  long got = 0;
  for (;;) {
    const loader_batch_t *b = NULL;
    int k = loader_next(l, &b, err, sizeof err);
    if (k < 0) {
      fprintf(stderr, "loader_bench: %s\n", err);
      goto out;
    }
    if (k == 0) break;
    got += b->n;
    loader_release(l, b);
  }
  *secs = now_s() - t0;
  r = (double)got / *secs;
out:
  free(idx);
  loader_destroy(l);
  return r;
}

int main(int argc, char **argv)
{
  int counts[MAX_COUNTS] = {1, 2, 4, 8, 16}, ncounts = 5;
  int batches = 200, batch = 6, size = 256, classes = 4, opt;
  while ((opt = getopt(argc, argv, "w:n:b:s:c:h")) != -1) {
    int bad = 0;
    switch (opt) {
    case 'w': bad = (ncounts = parse_counts(optarg, counts)) < 0; break;
    case 'n': bad = parse_int(optarg, 1, 1000000, "-n (batches)", &batches); break;
    case 'b': bad = parse_int(optarg, 1, 4096, "-b (batch size)", &batch); break;
    case 's': bad = parse_int(optarg, 8, 8192, "-s (image size)", &size); break;
    case 'c': bad = parse_int(optarg, 2, DATA_SYNTH_MAX_CLASSES, "-c (classes)", &classes); break;
    default:
      fprintf(stderr, "usage: %s [-w THREADS,...] [-n BATCHES] [-b BATCH] [-s SIZE] [-c CLASSES]\n",
              argv[0]);
      return opt == 'h' ? 0 : 2;
    }
    if (bad) return 2;
  }
  if (optind < argc) {
    fprintf(stderr, "loader_bench: unexpected argument '%s' (see -h)\n", argv[optind]);
    return 2;
  }
  char err[256];
  data_set_t *ds = NULL;
  data_synth_config_t sc = {.seed = 1, .size = TRAIN_SIZE, .classes = classes,
                            .image_size = size, .split = DATA_SPLIT_TRAIN};
  if (data_open_synthetic(&ds, &sc, err, sizeof err) != 0) {
    fprintf(stderr, "loader_bench: %s\n", err);
    return 1;
  }
  augment_config_t aug = {.crop = size, .random = 1, .seed = 1, .classes = classes,
                          .ignore_label = DATA_IGNORE_LABEL};
  cpu_set_t set;
  int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
  printf("loader_bench: synthetic %dx%d, %d classes, batch %d, %d batches a run; %d CPUs may run "
         "this process (%ld online)\n",
         size, size, classes, batch, batches, cpus, sysconf(_SC_NPROCESSORS_ONLN));
  /* one sample on this thread: what a loader thread does per image */
  size_t px = (size_t)size * size;
  uint8_t *rgb = malloc(3 * px), *mask = malloc(px);
  float *x = malloc(3 * px * sizeof *x);
  int32_t *y = malloc(px * sizeof *y);
  int rc = 1;
  if (!rgb || !mask || !x || !y) {
    fprintf(stderr, "loader_bench: out of memory\n");
    goto out;
  }
  const int reps = 50;
  double draw = 0, t0 = now_s();
  for (int i = 0; i < reps; i++) {
    int w, h;
    double s = now_s();
    if (data_get(ds, (size_t)i, rgb, mask, &w, &h, err, sizeof err) != 0) {
      fprintf(stderr, "loader_bench: %s\n", err);
      goto out;
    }
    draw += now_s() - s;
    augment_sample(&aug, 0, (size_t)i, rgb, mask, w, h, x, y);
  }
  double all = now_s() - t0;
  printf("one sample on one thread: %.3f ms (drawn %.3f, cropped and normalised %.3f)\n",
         1e3 * all / reps, 1e3 * draw / reps, 1e3 * (all - draw) / reps);
  printf("%8s %8s %9s %12s\n", "threads", "batches", "seconds", "images/s");
  for (int i = 0; i < ncounts; i++) {
    double secs = 0, r = rate(ds, &aug, counts[i], batch, batches, &secs);
    if (r < 0) goto out;
    printf("%8d %8d %9.3f %12.1f\n", counts[i], batches, secs, r);
    fflush(stdout);
  }
  rc = 0;
out:
  free(rgb);
  free(mask);
  free(x);
  free(y);
  data_destroy(ds);
  return rc;
}
