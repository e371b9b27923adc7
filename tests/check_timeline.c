/* check_timeline.c — observability: the timeline module writes a well-formed Chrome trace with
 * the required fields and properly nested spans (host clock; CUDA events where a GPU exists),
 * a 2-rank CPU training run with --timeline writes one per rank on a shared clock and per-rank
 * memory in every log line, the run summary gathers and prints every rank, NVML's absence is
 * handled. JSON is checked with a strict parser (tests/json_mini.c), not by searching text. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmddp.h"
#include "src/device/arena.h"
#include "src/obs/json_out.h"
#include "src/obs/nvml_dl.h"
#include "src/obs/run_summary.h"
#include "src/obs/timeline.h"
#include "src/train/loop_ddp.h"
#include "tests/json_mini.h"
#include "tests/suite_main.h"
#include "tests/testutil.h"
#include "tests/train_run.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- JSON readers that fail the test ---- */

static void jdoc(const char *text, jv_t *v, const char *what)
{
  ck_assert_msg(jv_parse(text, v) == 0, "%s is not valid JSON", what);
}

#define jget jv_get
#define jfree jv_free

static double jnum(const jv_t *o, const char *key)
{
  const jv_t *v = jget(o, key);
  ck_assert_msg(v && v->t == J_NUM, "no number \"%s\"", key);
  return v->num;
}

static const char *jstr(const jv_t *o, const char *key)
{
  const jv_t *v = jget(o, key);
  ck_assert_msg(v && v->t == J_STR, "no string \"%s\"", key);
  return v->str;
}

static char *slurp(const char *path)
{
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  size_t got = fread(buf, 1, (size_t)n, f);
  buf[got] = 0;
  fclose(f);
  return buf;
}

/* ---- checks on a trace ---- */

typedef struct {
  const char *name;
  int pid, tid;
  double ts, dur, step;
  const jv_t *args;
} span_t;

/* Every event has the fields its phase needs; returns the "X" spans (caller frees). */
static span_t *trace_spans(const jv_t *doc, size_t *count, int pid)
{
  const jv_t *ev = jget(doc, "traceEvents");
  ck_assert_msg(ev && ev->t == J_ARR, "no traceEvents array");
  span_t *s = calloc(ev->n + 1, sizeof *s);
  size_t n = 0;
  int named = 0;
  for (size_t i = 0; i < ev->n; i++) {
    const jv_t *e = &ev->items[i];
    const char *ph = jstr(e, "ph"), *name = jstr(e, "name");
    ck_assert_int_eq((int)jnum(e, "pid"), pid);
    ck_assert(jnum(e, "tid") >= 0);
    ck_assert(jget(e, "args") && jget(e, "args")->t == J_OBJ);
    if (!strcmp(ph, "M")) {
      named += !strcmp(name, "process_name");
      continue;
    }
    ck_assert_str_eq(ph, "X");
    ck_assert(strlen(jstr(e, "cat")) > 0);
    span_t *x = &s[n++];
    x->name = name;
    x->pid = pid;
    x->tid = (int)jnum(e, "tid");
    x->ts = jnum(e, "ts");
    x->dur = jnum(e, "dur");
    x->args = jget(e, "args");
    x->step = jnum(x->args, "step");
    ck_assert_msg(x->dur >= 0 && isfinite(x->ts), "%s: ts %g dur %g", name, x->ts, x->dur);
  }
  ck_assert_int_eq(named, 1);
  *count = n;
  return s;
}

/* Spans on one row either nest or are disjoint (a viewer draws them as a stack); they are
 * written in time order. Slack: 1 ns of rounding in the %.3f microseconds. */
static void check_nesting(const span_t *s, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    if (i > 0) ck_assert_msg(s[i].ts >= s[i - 1].ts, "spans are not in time order");
    for (size_t j = i + 1; j < n; j++) {
      if (s[i].tid != s[j].tid || s[j].ts >= s[i].ts + s[i].dur - 1e-3) continue;
      ck_assert_msg(s[j].ts + s[j].dur <= s[i].ts + s[i].dur + 1e-3,
                    "%s (row %d, %.3f+%.3f) overlaps %s (%.3f+%.3f) without nesting",
                    s[j].name, s[j].tid, s[j].ts, s[j].dur, s[i].name, s[i].ts, s[i].dur);
    }
  }
}

static const span_t *find(const span_t *s, size_t n, const char *name, double step, int nth)
{
  for (size_t i = 0; i < n; i++)
    if (!strcmp(s[i].name, name) && s[i].step == step && nth-- == 0) return &s[i];
  return NULL;
}

static size_t count(const span_t *s, size_t n, const char *name, double step)
{
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += !strcmp(s[i].name, name) && s[i].step == step;
  return k;
}

static int inside(const span_t *in, const span_t *out)
{
  return in->ts >= out->ts - 1e-3 && in->ts + in->dur <= out->ts + out->dur + 1e-3;
}

/* ---- the module on the host clock ---- */

/* Opens the host timeline of rank `rank` of `world` (device "cpuRANK") for `steps` steps from
 * `first` in dir, made here from its mkdtemp template; path gets the file it will write. */
static void open_host(char *dir, char *path, size_t len, int rank, int world, long first,
                      long steps)
{
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, len, "%s/timeline-rank%d.json", dir, rank);
  char label[16], err[256];
  snprintf(label, sizeof label, "cpu%d", rank);
  timeline_config_t cfg = {.dir = dir, .rank = rank, .world = world, .device_label = label,
                           .cuda_device = -1, .stream = NULL, .first_step = first, .steps = steps};
  ck_assert_msg(timeline_open(&cfg, err, sizeof err) == 0, "%s", err);
}

START_TEST(test_off_is_a_no_op)
{
  char dir[] = "/tmp/check_timeline_XXXXXX", err[256], path[512];
  open_host(dir, path, sizeof path, 0, 1, 1, 0);
  for (long step = 1; step <= 3; step++) {
    ck_assert_int_eq(timeline_step(step, err, sizeof err), 0);
    ck_assert_int_eq(timeline_begin(TIMELINE_FORWARD, NULL), -1);
    ck_assert_int_eq(timeline_recording_, 0);
  }
  ck_assert_int_eq(timeline_close(err, sizeof err), 0);
  ck_assert_str_eq(timeline_path(), "");
  ck_assert_int_ne(access(path, F_OK), 0);
  test_rm_rf(dir);
}
END_TEST

/* One fake training step on the host clock, shaped like the trainer's. */
static void fake_step(long step)
{
  char err[256];
  ck_assert_int_eq(timeline_step(step, err, sizeof err), 0);
  int st = timeline_begin(TIMELINE_STEP, NULL);
  int w = timeline_begin(TIMELINE_DATA_WAIT, NULL);
  timeline_end(w, NULL);
  int f = timeline_begin(TIMELINE_FORWARD, NULL);
  for (int i = 0; i < 3; i++) {
    int bn = timeline_begin(TIMELINE_SYNCBN, NULL);
    timeline_args(bn, 24 * (i + 1), 0);
    timeline_end(bn, NULL);
  }
  timeline_end(f, NULL);
  int b = timeline_begin(TIMELINE_BACKWARD, NULL);
  for (int k = 0; k < 2; k++) {
    usleep(100);
    int ar = timeline_begin(TIMELINE_ALLREDUCE, NULL);
    timeline_args(ar, k, 4096.0 * (k + 1));
    timeline_end(ar, NULL);
  }
  timeline_end(b, NULL);
  int o = timeline_begin(TIMELINE_OPTIMIZER, NULL);
  timeline_end(o, NULL);
  timeline_end(st, NULL);
}

START_TEST(test_host_window)
{
  char dir[] = "/tmp/check_timeline_XXXXXX", err[256], path[512];
  open_host(dir, path, sizeof path, 3, 4, 2, 2);
  for (long step = 1; step <= 3; step++) fake_step(step);
  ck_assert_int_ne(access(path, F_OK), 0); /* the window is still open */
  fake_step(4);                             /* step 4 ends the window: the file is written */
  ck_assert_int_eq(access(path, F_OK), 0);
  ck_assert_str_eq(timeline_path(), path);
  ck_assert_int_eq(timeline_recording_, 0);
  fake_step(5);
  ck_assert_int_eq(timeline_close(err, sizeof err), 0);

  char *text = slurp(path);
  jv_t doc;
  jdoc(text, &doc, path);
  const jv_t *other = jget(&doc, "otherData");
  ck_assert_int_eq((int)jnum(other, "rank"), 3);
  ck_assert_int_eq((int)jnum(other, "first_step"), 2);
  ck_assert_int_eq((int)jnum(other, "last_step"), 3);
  ck_assert_int_eq((int)jnum(other, "dropped"), 0);
  ck_assert_str_eq(jstr(other, "clock"), "host monotonic");
  size_t n;
  span_t *s = trace_spans(&doc, &n, 3);
  ck_assert_int_eq((int)n, 2 * 10); /* steps 2 and 3 only, 10 spans each */
  check_nesting(s, n);
  for (int step = 2; step <= 3; step++) {
    const span_t *st = find(s, n, "step", step, 0), *f = find(s, n, "forward", step, 0);
    const span_t *b = find(s, n, "backward", step, 0), *o = find(s, n, "optimizer", step, 0);
    ck_assert(st && f && b && o && find(s, n, "data wait", step, 0));
    ck_assert(inside(f, st) && inside(b, st) && inside(o, st));
    ck_assert(f->ts + f->dur <= b->ts && b->ts + b->dur <= o->ts);
    ck_assert_int_eq((int)count(s, n, "syncbn", step), 3);
    for (int k = 0; k < 2; k++) {
      const span_t *ar = find(s, n, "allreduce", step, k);
      ck_assert(ar && inside(ar, b));
      ck_assert_int_eq((int)jnum(ar->args, "bucket"), k);
      ck_assert_int_eq((int)jnum(ar->args, "bytes"), 4096 * (k + 1));
      ck_assert(ar->dur >= 0);
    }
    ck_assert(inside(find(s, n, "syncbn", step, 0), f));
    ck_assert_int_eq((int)jnum(find(s, n, "syncbn", step, 2)->args, "count"), 72);
  }
  free(s);
  jfree(&doc);
  free(text);
  test_rm_rf(dir);
}
END_TEST

/* A run that ends inside the window still gets its file (at close); a span left open by a
 * failed step is dropped, not written with a made-up end. */
START_TEST(test_close_inside_window)
{
  char dir[] = "/tmp/check_timeline_XXXXXX", err[256], path[512];
  open_host(dir, path, sizeof path, 0, 1, 1, 100);
  fake_step(1);
  ck_assert_int_eq(timeline_step(2, err, sizeof err), 0);
  ck_assert(timeline_begin(TIMELINE_FORWARD, NULL) >= 0); /* never ended */
  ck_assert_int_eq(timeline_close(err, sizeof err), 0);
  char *text = slurp(path);
  ck_assert_ptr_nonnull(text);
  jv_t doc;
  jdoc(text, &doc, path);
  ck_assert_int_eq((int)jnum(jget(&doc, "otherData"), "dropped"), 1);
  size_t n;
  span_t *s = trace_spans(&doc, &n, 0);
  ck_assert_int_eq((int)n, 10);
  ck_assert_int_eq((int)count(s, n, "forward", 2), 0);
  free(s);
  jfree(&doc);
  free(text);
  test_rm_rf(dir);
}
END_TEST

/* ---- CUDA events (registered only where there is a GPU: tests/suite_main.h) ---- */

#ifdef HAVE_CUDA
START_TEST(test_cuda_events)
{
  char dir[] = "/tmp/check_timeline_XXXXXX", err[256], path[512];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/timeline-rank0.json", dir);
  cudaStream_t compute, comm;
  ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
  ck_assert_int_eq(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  ck_assert_int_eq(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking), cudaSuccess);
  size_t bytes = (size_t)256 << 20;
  void *buf;
  ck_assert_int_eq(cudaMalloc(&buf, bytes), cudaSuccess);
  timeline_config_t cfg = {.dir = dir, .rank = 0, .world = 1, .device_label = "cuda:0",
                           .cuda_device = 0, .stream = compute, .first_step = 1, .steps = 3};
  ck_assert_int_eq(timeline_open(&cfg, err, sizeof err), 0);
  for (long step = 1; step <= 4; step++) {
    ck_assert_int_eq(timeline_step(step, err, sizeof err), 0);
    int st = timeline_begin(TIMELINE_STEP, NULL);
    int f = timeline_begin(TIMELINE_FORWARD, compute);
    cudaMemsetAsync(buf, 1, bytes, compute);
    timeline_end(f, compute);
    int b = timeline_begin(TIMELINE_BACKWARD, compute);
    cudaMemsetAsync(buf, 2, bytes, compute);
    int ar = timeline_begin(TIMELINE_ALLREDUCE, comm);
    timeline_args(ar, 0, (double)bytes);
    cudaMemsetAsync(buf, 3, bytes / 2, comm);
    timeline_end(ar, comm);
    timeline_end(b, compute);
    timeline_end(st, NULL);
  }
  ck_assert_str_eq(timeline_path(), path); /* step 4 closed the window */
  ck_assert_int_eq(timeline_close(err, sizeof err), 0);
  cudaFree(buf);
  char *text = slurp(path);
  jv_t doc;
  jdoc(text, &doc, path);
  ck_assert_str_eq(jstr(jget(&doc, "otherData"), "clock"), "cuda events");
  size_t n;
  span_t *s = trace_spans(&doc, &n, 0);
  ck_assert_int_eq((int)n, 3 * 4);
  check_nesting(s, n);
  for (int step = 1; step <= 3; step++) {
    const span_t *f = find(s, n, "forward", step, 0), *b = find(s, n, "backward", step, 0);
    const span_t *ar = find(s, n, "allreduce", step, 0), *st = find(s, n, "step", step, 0);
    ck_assert(f && b && ar && st);
    ck_assert_int_eq(f->tid, 1);
    ck_assert_int_eq(ar->tid, 2);
    ck_assert_int_eq(st->tid, 0);
    ck_assert(f->dur > 0 && b->dur > 0 && ar->dur > 0); /* 128-256 MiB memsets take time */
    ck_assert(f->ts + f->dur <= b->ts + 1e-3);           /* stream order */
  }
  free(s);
  jfree(&doc);
  free(text);
  test_rm_rf(dir);
}
END_TEST
#endif

/* ---- run summary and NVML ---- */

START_TEST(test_nvml_absent)
{
  nvml_dl_t *n = (nvml_dl_t *)1;
  char err[256] = "";
  ck_assert_int_eq(nvml_open(&n, "libnvidia-ml-does-not-exist.so.1", "0000:00:00.0", err,
                             sizeof err), -1);
  ck_assert_ptr_null(n);
  ck_assert_ptr_nonnull(strstr(err, "NVML"));
  /* The real library (where the driver is installed) does not know a made-up bus id. */
  err[0] = 0;
  ck_assert_int_eq(nvml_open(&n, NULL, "00000000:FF:1F.7", err, sizeof err), -1);
  ck_assert_ptr_null(n);
  ck_assert(strlen(err) > 0);
  nvml_close(NULL);
}
END_TEST

START_TEST(test_summary_gathers_ranks)
{
  enum { WORLD = 3 };
  char err[256];
  arena_t *a[WORLD];
  run_summary_t *s[WORLD];
  for (int r = 0; r < WORLD; r++) {
    char label[16];
    snprintf(label, sizeof label, "cpu%d", r);
    ck_assert_int_eq(arena_create(&a[r], NULL, label, err, sizeof err), 0);
    ck_assert_ptr_nonnull(arena_alloc(a[r], (size_t)(r + 1) << 20, ARENA_PARAMS, "w"));
    ck_assert_ptr_nonnull(arena_alloc(a[r], (size_t)1 << 19, ARENA_ACTIVATIONS, "x"));
    ck_assert_int_eq(run_summary_create(&s[r], r, WORLD, a[r], err, sizeof err), 0);
  }
  size_t slots = run_summary_slots(s[0]);
  ck_assert_uint_eq(slots, WORLD * RUN_SUMMARY_PER_RANK);
  double sum[WORLD * RUN_SUMMARY_PER_RANK] = {0}, mine[WORLD * RUN_SUMMARY_PER_RANK];
  for (int r = 0; r < WORLD; r++) {
    for (size_t i = 0; i < slots; i++) mine[i] = 12345; /* fill must write every slot */
    run_summary_fill(s[r], mine);
    for (size_t i = 0; i < slots; i++) sum[i] += mine[i];
  }
  run_summary_step(s[0], 0, sum, 99, 50, 40, 0); /* warm-up: not averaged */
  run_summary_step(s[0], 1, sum, 10, 1, 2, 1);
  run_summary_step(s[0], 1, sum, 10, 1, 2, 1);
  char line[8192];
  snprintf(line, sizeof line, "{%s}", run_summary_step_json(s[0]));
  jv_t doc;
  jdoc(line, &doc, "the step fields");
  const jv_t *mem = jget(&doc, "memory_mib");
  ck_assert(mem && mem->t == J_ARR);
  ck_assert_int_eq((int)mem->n, WORLD);
  for (int r = 0; r < WORLD; r++) {
    ck_assert_double_eq_tol(jnum(&mem->items[r], "parameters"), r + 1, 1e-3);
    ck_assert_double_eq_tol(jnum(&mem->items[r], "activations"), 0.5, 1e-3);
    ck_assert_double_eq_tol(jnum(&mem->items[r], "total"), r + 1.5, 1e-3);
    ck_assert_double_eq_tol(jnum(&mem->items[r], "peak"), r + 1.5, 1e-3);
  }
  ck_assert_ptr_null(jget(&doc, "gpu_util")); /* no NVML on host arenas: left out */
  jfree(&doc);

  char *table = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&table, &len);
  train_result_t res = {0};
  res.steps = 3;
  res.world = WORLD;
  res.images_per_s = 123.4;
  run_summary_print(s[0], f, &res, "/tmp/out", "/tmp/out/timeline-rank0.json");
  fclose(f);
  /* The step split is the mean of the timed steps 2 and 3: compute = 10 - 1 - 2 - 1. */
  ck_assert_msg(strstr(table, "compute                            6.00    60.0"), "%s", table);
  ck_assert_ptr_nonnull(strstr(table, "exposed communication              2.00    20.0"));
  ck_assert_ptr_nonnull(strstr(table, "rank 2"));
  ck_assert_ptr_nonnull(strstr(table, "timeline-rank0.json"));
  /* the installed program, by its installed name */
  ck_assert_ptr_nonnull(strstr(table, "shmddp-report /tmp/out"));
  ck_assert_ptr_null(strstr(table, "NVML")); /* no rows for what was not measured */
  /* 1 ms of 10 waited for data: the summary names the loader */
  ck_assert_msg(strstr(table, "waiting for its batch 10.0 % of the time") &&
                    strstr(table, "--workers"),
                "%s", table);
  free(table);
  /* a step that never waits: no such line */
  run_summary_t *quiet = NULL;
  ck_assert_int_eq(run_summary_create(&quiet, 0, 1, a[0], err, sizeof err), 0);
  double one[RUN_SUMMARY_PER_RANK];
  run_summary_fill(quiet, one);
  run_summary_step(quiet, 1, one, 10, 0.4, 0, 0); /* 4 %: below the line's threshold */
  f = open_memstream(&table, &len);
  res.world = 1;
  run_summary_print(quiet, f, &res, NULL, NULL);
  fclose(f);
  ck_assert_msg(strstr(table, "data wait                          0.40     4.0"), "%s", table);
  ck_assert_msg(!strstr(table, "waiting for its batch"), "%s", table);
  free(table);
  run_summary_destroy(quiet);
  for (int r = 0; r < WORLD; r++) {
    run_summary_destroy(s[r]);
    arena_destroy(a[r]);
  }
}
END_TEST

/* ---- a 2-rank CPU training run ---- */

static void train(const char *out, const char *const *extra, int nextra)
{
  const char *base[] = {"train", "--device", "cpu", "--nproc", "2", "--out", out, "--classes",
                        "2", "--image-size", "32", "--widths", "8,16", "--train-size", "64",
                        "--val-size", "8", "--epochs", "1", "--batch-size", "4", "--workers",
                        "0", "--bucket-mb", "0.004", "--timing-warmup", "1"};
  char *argv[64];
  int argc = 0;
  for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) argv[argc++] = (char *)base[i];
  for (int i = 0; i < nextra; i++) argv[argc++] = (char *)extra[i];
  argv[argc] = NULL;
  test_train_run("check_timeline", 2, argc, argv);
}

START_TEST(test_ddp_cpu_run)
{
  char dir[] = "/tmp/check_timeline_XXXXXX", path[512];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  const char *extra[] = {"--timeline", "2"};
  train(dir, extra, 2);
  span_t *s[2];
  size_t n[2];
  jv_t doc[2];
  char *text[2];
  for (int r = 0; r < 2; r++) {
    snprintf(path, sizeof path, "%s/timeline-rank%d.json", dir, r);
    text[r] = slurp(path);
    ck_assert_msg(text[r] != NULL, "%s was not written", path);
    jdoc(text[r], &doc[r], path);
    ck_assert_int_eq((int)jnum(jget(&doc[r], "otherData"), "world"), 2);
    ck_assert_int_eq((int)jnum(jget(&doc[r], "otherData"), "dropped"), 0);
    s[r] = trace_spans(&doc[r], &n[r], r);
    check_nesting(s[r], n[r]);
  }
  /* After --timing-warmup 1: steps 2 and 3. */
  for (int step = 2; step <= 3; step++) {
    double bytes[2] = {0, 0};
    for (int r = 0; r < 2; r++) {
      const span_t *x = s[r];
      size_t k = n[r];
      const span_t *st = find(x, k, "step", step, 0), *f = find(x, k, "forward", step, 0);
      const span_t *b = find(x, k, "backward", step, 0), *o = find(x, k, "optimizer", step, 0);
      ck_assert_msg(st && f && b && o, "rank %d step %d lacks a phase", r, step);
      ck_assert_int_eq((int)count(x, k, "forward", step), 1);
      ck_assert(find(x, k, "data wait", step, 0) && find(x, k, "step agreement", step, 0));
      ck_assert(inside(f, st) && inside(b, st) && inside(o, st));
      ck_assert(f->ts + f->dur <= b->ts + 1e-3 && b->ts + b->dur <= o->ts + 1e-3);
      /* BatchNorm with SyncBN (the default): exchanges in forward and in backward. */
      ck_assert(count(x, k, "syncbn", step) >= 2);
      ck_assert(inside(find(x, k, "syncbn", step, 0), f));
      /* Tiny buckets: several all-reduces, inside backward on CPU ranks, in bucket order. */
      size_t nb = count(x, k, "allreduce", step);
      ck_assert_msg(nb >= 2, "only %zu buckets", nb);
      for (size_t i = 0; i < nb; i++) {
        const span_t *ar = find(x, k, "allreduce", step, (int)i);
        ck_assert_int_eq((int)jnum(ar->args, "bucket"), (int)i);
        bytes[r] += jnum(ar->args, "bytes");
        ck_assert(inside(ar, b) || inside(ar, find(x, k, "wait for gradients", step, 0)));
      }
    }
    ck_assert(bytes[0] > 0 && bytes[0] == bytes[1]);
    /* One clock for both ranks: a step's agreement cannot finish on one rank before the
     * other has started it, so the two ranks' step spans overlap. */
    const span_t *a0 = find(s[0], n[0], "step", step, 0), *a1 = find(s[1], n[1], "step", step, 0);
    ck_assert_msg(a0->ts < a1->ts + a1->dur && a1->ts < a0->ts + a0->dur,
                  "step %d: rank 0 [%.1f, +%.1f] and rank 1 [%.1f, +%.1f] do not overlap", step,
                  a0->ts, a0->dur, a1->ts, a1->dur);
  }
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq((int)count(s[r], n[r], "forward", 1), 0);
    ck_assert_int_eq((int)count(s[r], n[r], "forward", 4), 0);
    free(s[r]);
    jfree(&doc[r]);
    free(text[r]);
  }
  /* Every step line of the log parses and carries both ranks' ledgers. */
  snprintf(path, sizeof path, "%s/log.jsonl", dir);
  char *log = slurp(path), *save = NULL;
  int steps = 0;
  for (char *line = strtok_r(log, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    jv_t v;
    jdoc(line, &v, "a log line");
    if (!strcmp(jstr(&v, "type"), "step")) {
      steps++;
      const jv_t *mem = jget(&v, "memory_mib");
      ck_assert(mem && mem->t == J_ARR && mem->n == 2);
      for (int r = 0; r < 2; r++) {
        ck_assert(jnum(&mem->items[r], "parameters") > 0);
        ck_assert(jnum(&mem->items[r], "peak") >= jnum(&mem->items[r], "total"));
      }
      ck_assert_double_eq(jnum(&mem->items[0], "parameters"), jnum(&mem->items[1], "parameters"));
      ck_assert_ptr_null(jget(&v, "gpu_util")); /* CPU ranks: no NVML fields */
    }
    jfree(&v);
  }
  ck_assert_int_eq(steps, 64 / 2 / 4);
  free(log);
  test_rm_rf(dir);
}
END_TEST

START_TEST(test_ddp_cpu_run_off)
{
  char dir[] = "/tmp/check_timeline_XXXXXX", path[512];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  train(dir, NULL, 0);
  for (int r = 0; r < 2; r++) {
    snprintf(path, sizeof path, "%s/timeline-rank%d.json", dir, r);
    ck_assert_msg(access(path, F_OK) != 0, "%s written without --timeline", path);
  }
  test_rm_rf(dir);
}
END_TEST

/* JSON strings (json_out.h): escapes, well-formed UTF-8 kept, every other byte U+FFFD. */
START_TEST(test_json_strings)
{
  static const struct {
    const char *in, *out;
  } cases[] = {
      {"plain", "\"plain\""},
      {"q\"b\\n\nt\tc\x01\x1f\x7f", "\"q\\\"b\\\\n\\nt\\tc\\u0001\\u001f\\u007f\""},
      {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""}, /* é € 😀 */
      {"\xff\xfe", "\"\\ufffd\\ufffd\""},                        /* Latin-1 bytes */
      {"a\xc3", "\"a\\ufffd\""},                                /* cut at the end */
      {"\xe2\x82x", "\"\\ufffd\\ufffdx\""},                       /* cut in the middle */
      {"\xc0\xaf\xe0\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\""}, /* overlong '/' */
      {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""},                /* a UTF-16 surrogate */
      {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""},     /* above U+10FFFF */
      {"\x80", "\"\\ufffd\""},                                  /* a lone continuation byte */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char buf[256];
    size_t n = json_string_buf(buf, sizeof buf, cases[i].in);
    ck_assert_msg(strcmp(buf, cases[i].out) == 0 && n == strlen(cases[i].out), "case %zu: %s", i,
                  buf);
    char *mem = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&mem, &size);
    ck_assert_ptr_nonnull(f);
    json_string(f, cases[i].in);
    fclose(f);
    ck_assert_str_eq(mem, cases[i].out);
    free(mem);
  }
  char tiny[5];
  ck_assert_uint_eq(json_string_buf(tiny, sizeof tiny, "abcdef"), 8); /* cut, length reported */
  ck_assert_str_eq(tiny, "\"abc");
}
END_TEST

static Suite *timeline_suite(const suite_env_t *env)
{
  Suite *s = suite_create("timeline");
  SUITE_CASE(s, "module", test_off_is_a_no_op, test_host_window, test_close_inside_window);
#ifdef HAVE_CUDA
  if (suite_gpu_cases(env, 1, 1, "test_cuda_events")) SUITE_CASE(s, "cuda", test_cuda_events);
#else
  suite_gpu_cases(env, 1, 0, "test_cuda_events");
#endif
  SUITE_CASE(s, "summary", test_nvml_absent, test_summary_gathers_ranks, test_json_strings);
  SUITE_CASE(s, "training", test_ddp_cpu_run, test_ddp_cpu_run_off);
  return s;
}

SUITE_MAIN("check_timeline", timeline_suite, SUITE_SOME_GPU)
