/* check_dp.c — DataParallel is DDP with local BatchNorm by another data flow: N devices driven
 * by one process end with the weights (and device 0 with the running statistics) of N DDP
 * ranks without SyncBN on the same data, gradient accumulation included; and device 0's ledger
 * holds what only DataParallel needs (gathered logits, the whole batch, gradient staging, the
 * optimizer) while the others hold none of it; and the two trainers (`train --mode dp` and
 * `--mode ddp --sync-bn off`) end with the same losses. CPU devices, and GPUs where there are 2
 * (DataParallel drives GPUs 0 and 1 from one process); with fewer the GPU cases are not
 * registered and the log says so (tests/suite_main.h). Every run happens in a child process: CUDA
 * must not be initialised in a process that forks ranks later. A table's test runs every case and
 * fails once, naming every case that failed (tests/failures.h). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#ifdef HAVE_CUDNN
#include <cuda_runtime_api.h>
#endif

#include "src/device/arena.h"
#include "src/parallel/ddp.h"
#include "src/parallel/dp.h"
#include "src/app/job_open.h"
#include "src/train/loop_dp.h"
#include "src/model/model.h"
#include "src/model/optim.h"
#include "src/train/loop_ddp.h"
#include "src/app/options.h"
#include "tests/failures.h"
#include "tests/parallel_fixture.h"
#include "tests/testutil.h"
#include "tests/suite_main.h"

enum { N_MAX = 4, B = 2, HW = PF_HW, STEPS = 4, MAX_PARAMS = 40000, MAX_BUF = 512 };

typedef enum { BATCH_NORM = 0, GROUP_NORM = 1 } norm_kind_t;
typedef enum { ON_CPU = 0, ON_GPU = 1 } device_kind_t;

typedef struct {
  int world;            /* devices (DataParallel) and ranks (DDP) */
  norm_kind_t norm;     /* BatchNorm is local on both sides (no SyncBN) */
  int accum;            /* micro-batches per step */
  device_kind_t device;
  double tol;           /* largest weight difference, relative */
} dp_case_t;

typedef struct {
  float params[N_MAX + 1][MAX_PARAMS]; /* [r]: DDP rank r; [N_MAX]: DataParallel device 0 */
  float buffers[N_MAX + 1][MAX_BUF];
  size_t nparams, nbuffers; /* nparams: elements of the flat buffers (model_flat_size) */
  size_t ledger[N_MAX][ARENA_NUM_CATEGORIES]; /* DataParallel, per device, after the run */
  int failed[N_MAX + 1];
  char msg[N_MAX + 1][512];
} result_t;

static result_t *res;

static void config(const dp_case_t *c, model_config_t *mc, int local_batch)
{
  pf_model_config(mc, c->norm, c->device, local_batch);
}

static int copy_dev(const dp_case_t *c, void *dst, const void *src, size_t bytes, int to_dev)
{
  return pf_copy(c->device, dst, src, bytes, to_dev);
}

static void optim_cfg(optim_config_t *oc)
{
  optim_config_default(oc, OPTIM_SGD);
  oc->lr = 0.05;
  oc->momentum = 0.9;
}

/* ---- DDP: rank r trains on samples [r*B*accum, (r+1)*B*accum) of every step, in micro-batches
 * of B; local BatchNorm (no SyncBN). ---- */
static int ddp_rank_fn(shmddp_comm_t *comm, void *arg)
{
  const dp_case_t *c = arg;
  int r = shmddp_comm_rank(comm);
  char *err = res->msg[r];
  size_t errlen = sizeof res->msg[r];
  model_config_t mc;
  config(c, &mc, B);
  if (c->device == ON_GPU && (mc.cuda_device = pf_cuda_device(shmddp_comm_device(comm), err, errlen)) < 0) {
    res->failed[r] = 1;
    return 1;
  }
  model_t *m = NULL;
  ddp_t *d = NULL;
  optim_t *o = NULL;
  float x[B * HW * HW * 3];
  int32_t y[B * HW * HW];
  void *xd = x, *yd = y;
  int rc = model_create(&m, &mc, err, errlen);
#ifdef HAVE_CUDNN
  if (rc == 0 && c->device)
    rc = cudaMalloc(&xd, sizeof x) != cudaSuccess || cudaMalloc(&yd, sizeof y) != cudaSuccess;
#endif
  ddp_config_t dc = {.bucket_mb = 1, .sync_bn = 0, .cuda_stream = m ? model_stream(m) : NULL};
  if (rc == 0) rc = ddp_create(&d, comm, m, &dc, err, errlen);
  if (rc == 0) rc = ddp_sync_initial(d, err, errlen);
  optim_config_t oc;
  optim_cfg(&oc);
  if (rc == 0) rc = optim_create(&o, &oc, model_flat_size(m), model_arena(m), err, errlen);
  for (int t = 0; rc == 0 && t < STEPS; t++) {
    for (int k = 0; rc == 0 && k < c->accum; k++) {
      for (int s = 0; s < B; s++)
        pf_sample(t, r * B * c->accum + k * B + s, x + s * HW * HW * 3, y + s * HW * HW);
      rc = copy_dev(c, xd, x, sizeof x, 1) || copy_dev(c, yd, y, sizeof y, 1);
      ddp_batch_t b = {.x = xd, .y = yd, .n = B, .loss_scale = 1.0f, .accumulate = k > 0,
                       .last = k == c->accum - 1};
      float loss;
      if (rc == 0) rc = ddp_step(d, &b, err, errlen);
      if (rc == 0) rc = model_step_loss(m, &loss, err, errlen);
    }
    if (rc == 0)
      rc = optim_step(o, model_params(m), model_grads(m), optim_lr_at(&oc, t), 1.0 / c->accum,
                      model_stream(m), err, errlen);
  }
  if (rc == 0) {
    res->nparams = model_flat_size(m);
    res->nbuffers = model_num_buffers(m);
    rc = copy_dev(c, res->params[r], model_params(m), res->nparams * sizeof(float), 0) ||
         copy_dev(c, res->buffers[r], model_buffers(m), res->nbuffers * sizeof(float), 0);
  }
  if (o) optim_destroy(o);
  if (d) ddp_destroy(d);
  if (m) model_destroy(m);
#ifdef HAVE_CUDNN
  if (c->device) {
    cudaFree(xd);
    cudaFree(yd);
  }
#endif
  res->failed[r] = rc != 0;
  return rc ? 1 : 0;
}

/* ---- DataParallel: one process, `world` devices; micro-batch k of step t is the
 * concatenation of every rank's micro-batch k, so chunk r is rank r's data. ---- */
static int dp_run(const dp_case_t *c, char *err, size_t errlen)
{
  dp_config_t cfg;
  config(c, &cfg.model, B);
  cfg.ndev = c->world;
  dp_t *d = NULL;
  optim_t *o = NULL;
  int n = c->world * B;
  float *x = malloc(sizeof(float) * (size_t)n * HW * HW * 3);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)n * HW * HW);
  int rc = !x || !y;
  if (rc == 0) rc = dp_create(&d, &cfg, err, errlen);
  model_t *m0 = rc == 0 ? dp_model(d, 0) : NULL;
  optim_config_t oc;
  optim_cfg(&oc);
  if (rc == 0) rc = optim_create(&o, &oc, model_flat_size(m0), model_arena(m0), err, errlen);
  for (int t = 0; rc == 0 && t < STEPS; t++) {
    for (int k = 0; rc == 0 && k < c->accum; k++) {
      for (int r = 0; r < c->world; r++)
        for (int s = 0; s < B; s++)
          pf_sample(t, r * B * c->accum + k * B + s, x + (size_t)(r * B + s) * HW * HW * 3,
                 y + (size_t)(r * B + s) * HW * HW);
      double loss = 0;
      rc = dp_train_step(d, x, y, n, 1.0f, k > 0, err, errlen);
      if (rc == 0) rc = dp_finish_step(d, &loss, err, errlen);
      if (rc == 0 && !(loss > 0 && isfinite(loss))) {
        snprintf(err, errlen, "step %d: loss %g", t, loss);
        rc = -1;
      }
    }
    if (rc == 0) rc = dp_update(d, o, optim_lr_at(&oc, t), 1.0 / c->accum, err, errlen);
  }
  if (rc == 0) {
    res->nparams = model_flat_size(m0);
    res->nbuffers = model_num_buffers(m0);
    rc = copy_dev(c, res->params[N_MAX], model_params(m0), res->nparams * sizeof(float), 0) ||
         copy_dev(c, res->buffers[N_MAX], model_buffers(m0), res->nbuffers * sizeof(float), 0);
    for (int i = 0; i < c->world; i++)
      for (int k = 0; k < ARENA_NUM_CATEGORIES; k++)
        res->ledger[i][k] = arena_current(model_arena(dp_model(d, i)), (arena_category_t)k);
    if (rc) snprintf(err, errlen, "copying the weights back failed");
  }
  if (o) optim_destroy(o);
  dp_destroy(d);
  free(x);
  free(y);
  return rc;
}

/* DataParallel in a child process: 0, or -1 (the reason is in res->msg[N_MAX]). */
static int dp_in_child(const dp_case_t *c)
{
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) _exit(dp_run(c, res->msg[N_MAX], sizeof res->msg[N_MAX]) ? 1 : 0);
  int ws = 0;
  return pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : -1;
}

static const char *case_name(const dp_case_t *c, char *buf, size_t len)
{
  snprintf(buf, len, "%s %d devices %s accum %d", c->device == ON_GPU ? "cuda" : "cpu", c->world,
           c->norm == GROUP_NORM ? "GroupNorm" : "BatchNorm (local)", c->accum);
  return buf;
}

/* Runs both on case c; every failed check goes into fails. Returns 0 when both runs finished
 * (res holds their results; the caller unmaps it), -1 when one did not. */
static int dp_vs_ddp(const dp_case_t *c, case_failures_t *fails)
{
  char name[128];
  case_name(c, name, sizeof name);
  res = test_shared_alloc(sizeof *res);
  shmddp_launch_config_t lc = {.nproc = c->world, .timeout_s = 60, .quiet = 1,
                               .use_gpus = c->device == ON_GPU};
  shmddp_launch_result_t lr;
  shmddp_status_t st = shmddp_launch(&lc, ddp_rank_fn, (void *)c, &lr);
  int ok = st == SHMDDP_OK;
  CF_CHECK(fails, ok, "%s: launch failed: %s", name, lr.message);
  for (int r = 0; ok && r < c->world; r++) {
    CF_CHECK(fails, !res->failed[r], "%s: DDP rank %d: %s", name, r, res->msg[r]);
    ok = !res->failed[r];
  }
  if (ok) CF_CHECK(fails, lr.exit_code == 0, "%s: DDP exit code %d: %s", name, lr.exit_code, lr.message);
  ok = ok && lr.exit_code == 0;
  if (ok) CF_CHECK(fails, res->nparams <= MAX_PARAMS, "%s: %zu parameters", name, res->nparams);
  ok = ok && res->nparams <= MAX_PARAMS;
  if (ok) {
    ok = dp_in_child(c) == 0;
    CF_CHECK(fails, ok, "%s: DataParallel run failed: %s", name, res->msg[N_MAX]);
  }
  if (!ok) return -1;
  double worst = 0, scale = 0;
  size_t at = 0;
  for (size_t i = 0; i < res->nparams; i++) {
    double dd = fabs((double)res->params[N_MAX][i] - res->params[0][i]);
    if (dd > worst) {
      worst = dd;
      at = i;
    }
    if (fabs(res->params[0][i]) > scale) scale = fabs(res->params[0][i]);
  }
  double rel = worst / (scale > 1 ? scale : 1);
  printf("%s: DataParallel's weights after %d steps differ from DDP's by %.2e (relative)\n", name,
         STEPS, rel);
  CF_CHECK(fails, rel <= c->tol, "%s: weights differ by %.3g (relative; tolerance %g) at %zu (DP %g "
           "vs DDP %g)", name, rel, c->tol, at, res->params[N_MAX][at], res->params[0][at]);
  /* Device 0's running statistics are rank 0's: both saw chunk 0 only. */
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < res->nbuffers; i++)
    if (!(fabs(res->buffers[N_MAX][i] - res->buffers[0][i]) <=
          10 * c->tol * (1 + fabs(res->buffers[0][i]))) && !bad++)
      first = i;
  CF_CHECK(fails, bad == 0, "%s: %zu running statistics differ, first %zu: DP %g vs DDP rank 0 %g",
           name, bad, first, bad ? res->buffers[N_MAX][first] : 0.0,
           bad ? res->buffers[0][first] : 0.0);
  /* ... and not rank 1's (local statistics do differ, so the comparison above means something) */
  if (c->norm == BATCH_NORM && c->world > 1) {
    double diff = 0;
    for (size_t i = 0; i < res->nbuffers; i++)
      diff += fabs(res->buffers[1][i] - res->buffers[0][i]);
    CF_CHECK(fails, diff > 1e-4, "%s: ranks 0 and 1 have the same running statistics", name);
  }
  return 0;
}

/* Runs every case of a table; fails once, naming every case that failed. */
static void run_table(const dp_case_t *cases, size_t n, const char *what)
{
  case_failures_t fails;
  cf_init(&fails);
  for (size_t i = 0; i < n; i++) {
    dp_vs_ddp(&cases[i], &fails);
    munmap(res, sizeof *res);
  }
  CF_ASSERT_NONE(&fails, what);
}

static const dp_case_t cpu_cases[] = {
  {.world = 2, .norm = BATCH_NORM, .accum = 1, .device = ON_CPU, .tol = 2e-5},
  {.world = 3, .norm = BATCH_NORM, .accum = 1, .device = ON_CPU, .tol = 2e-5},
  {.world = 2, .norm = GROUP_NORM, .accum = 1, .device = ON_CPU, .tol = 2e-5},
  /* gradient accumulation over 2 micro-batches on both sides */
  {.world = 2, .norm = BATCH_NORM, .accum = 2, .device = ON_CPU, .tol = 2e-5},
};

/* TF32 convolutions: looser than on the CPU. */
static const dp_case_t gpu_cases[] = {
  {.world = 2, .norm = BATCH_NORM, .accum = 1, .device = ON_GPU, .tol = 2e-3},
  {.world = 2, .norm = GROUP_NORM, .accum = 2, .device = ON_GPU, .tol = 2e-3},
};

START_TEST(cpu_dp_equals_ddp)
{
  run_table(cpu_cases, sizeof cpu_cases / sizeof cpu_cases[0], "cpu DataParallel against DDP");
}
END_TEST

/* Device 0 holds the whole batch and its labels, the gathered logits and their gradients and
 * one gradient staging copy per other device (DP gather), and the optimizer state; the others
 * hold none of these. Sizes from the shapes, not from the code under test. */
START_TEST(ledger_shows_device0_extras)
{
  const dp_case_t c = {.world = 3, .norm = BATCH_NORM, .accum = 1, .device = ON_CPU, .tol = 2e-5};
  case_failures_t fails;
  cf_init(&fails);
  int ran = dp_vs_ddp(&c, &fails) == 0;
  CF_ASSERT_NONE(&fails, "DataParallel against DDP, 3 devices");
  ck_assert(ran);
  size_t images = (size_t)c.world * B, px = HW * HW, np = res->nparams;
  size_t gather = images * px * 3 * 4 + images * px * 4 + 2 * images * px * PF_CLASSES * 4 +
                  (size_t)(c.world - 1) * np * 4;
  ck_assert_uint_eq(res->ledger[0][ARENA_DP_GATHER], gather);
  ck_assert_uint_eq(res->ledger[0][ARENA_OPTIM], np * 4); /* SGD momentum */
  for (int i = 1; i < c.world; i++) {
    ck_assert_uint_eq(res->ledger[i][ARENA_DP_GATHER], 0);
    ck_assert_uint_eq(res->ledger[i][ARENA_OPTIM], 0);
    /* the same model on every device */
    ck_assert_uint_eq(res->ledger[i][ARENA_PARAMS], res->ledger[0][ARENA_PARAMS]);
    ck_assert_uint_eq(res->ledger[i][ARENA_GRADS], res->ledger[0][ARENA_GRADS]);
  }
  for (int i = 0; i < c.world; i++) ck_assert_uint_eq(res->ledger[i][ARENA_COMM], 0);
  munmap(res, sizeof *res);
}
END_TEST

/* ---- the trainers: `train --mode dp` and `train --mode ddp --sync-bn off` on the same job ---- */

static void open_job(train_job_t *job, const char *mode, const char *out)
{
  const char *argv[] = {"train", "--device", "cpu", "--nproc", "2", "--mode", mode,
                        "--widths", "tiny", "--image-size", "32", "--batch-size", "3",
                        "--train-size", "40", "--val-size", "8", "--epochs", "2", "--steps", "8",
                        "--workers", "1", "--out", out, NULL};
  int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
  const char *ddp_extra[] = {"--sync-bn", "off"};
  char *args[40];
  int n = 0;
  for (int i = 0; i < argc; i++) args[n++] = (char *)argv[i];
  if (strcmp(mode, "ddp") == 0)
    for (int i = 0; i < 2; i++) args[n++] = (char *)ddp_extra[i];
  args[n] = NULL;
  train_machine_t m = {.visible_gpus = 0, .cuda_built = 0, .online_cpus = 2};
  train_config_t cfg;
  char err[1024];
  ck_assert_msg(train_config_parse(&cfg, n, args, &m, stderr, err, sizeof err) == 0, "parse: %s",
                err);
  ck_assert_msg(train_job_open(job, &cfg, err, sizeof err) == 0, "job: %s", err);
  job->out = fopen("/dev/null", "w");
  job->quiet = 1;
}

static double summary_number(const char *dir, const char *file, const char *key)
{
  char p[512], buf[1 << 14], pat[64];
  snprintf(p, sizeof p, "%s/%s", dir, file);
  FILE *f = fopen(p, "r");
  ck_assert_msg(f != NULL, "%s was not written", p);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *at = strstr(buf, pat);
  ck_assert_msg(at != NULL, "no %s in %s", key, p);
  return strtod(at + strlen(pat), NULL);
}

START_TEST(dp_trainer_equals_ddp_trainer)
{
  char ddp_out[] = "/tmp/check_dp_ddp_XXXXXX", dp_out[] = "/tmp/check_dp_dp_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(ddp_out));
  ck_assert_ptr_nonnull(mkdtemp(dp_out));
  train_job_t job;
  open_job(&job, "ddp", ddp_out);
  shmddp_launch_config_t lc = {0};
  lc.nproc = 2;
  lc.timeout_s = 60;
  lc.quiet = 1;
  shmddp_launch_result_t lr;
  ck_assert_int_eq(shmddp_launch(&lc, train_rank, &job, &lr), SHMDDP_OK);
  ck_assert_msg(lr.exit_code == 0, "DDP training failed: %s", lr.message);
  fclose(job.out);
  train_job_close(&job);
  open_job(&job, "dp", dp_out);
  pid_t pid = fork();
  if (pid == 0) {
    train_result_t r;
    char err[1024];
    int rc = dp_train_run(&job, &r, err, sizeof err);
    if (rc) fprintf(stderr, "dp_train_run: %s\n", err);
    _exit(rc ? 1 : 0);
  }
  int ws;
  waitpid(pid, &ws, 0);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "DataParallel training failed");
  fclose(job.out);
  train_job_close(&job);
  /* Same images in the same chunks, local BatchNorm on both sides: the same run. */
  const char *keys[] = {"train_loss", "initial_loss", "val_loss", "val_miou"};
  for (int k = 0; k < 4; k++) {
    double a = summary_number(ddp_out, "summary.json", keys[k]);
    double b = summary_number(dp_out, "summary.json", keys[k]);
    printf("trainer %s: ddp %.7f dp %.7f\n", keys[k], a, b);
    ck_assert_msg(fabs(a - b) <= 1e-5 * (1 + fabs(a)), "%s: DDP %g, DP %g", keys[k], a, b);
  }
  ck_assert_int_eq((int)summary_number(dp_out, "dp_devices.json", "devices"), 2);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", ddp_out, dp_out);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(gpu_dp_equals_ddp)
{
  run_table(gpu_cases, sizeof gpu_cases / sizeof gpu_cases[0], "cuda DataParallel against DDP");
}
END_TEST

static Suite *dp_suite(const suite_env_t *env)
{
  Suite *s = suite_create("dp");
  TCase *tc = SUITE_CASE(s, "equivalence", cpu_dp_equals_ddp, ledger_shows_device0_extras,
                         dp_trainer_equals_ddp_trainer);
  tcase_set_timeout(tc, 600); /* bounds a hang only */
  if (suite_gpu_cases(env, 2, SUITE_BUILT_CUDNN, "gpu_dp_equals_ddp")) {
    tc = SUITE_CASE(s, "gpu", gpu_dp_equals_ddp);
    tcase_set_timeout(tc, 600);
  }
  return s;
}

SUITE_MAIN("check_dp", dp_suite, SUITE_SOME_GPU)
