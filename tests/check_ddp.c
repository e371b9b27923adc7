/* check_ddp.c — data parallelism is exact: N ranks with b samples each end with the weights of
 * one rank trained on the N*b samples (GroupNorm: per-sample statistics; BatchNorm with SyncBN:
 * statistics over the global batch, running statistics included), every rank holds the same
 * bits, and gradient accumulation over K micro-batches equals one K-times batch. CPU ranks, and
 * the same cases on GPUs where there is one: rank r drives GPU r modulo the visible GPUs, so on
 * one GPU both ranks share it (the multi-process path of one GPU). Without a GPU the GPU cases
 * are not registered and the log says so (tests/suite_main.h).
 *
 * The cases are tables with named fields; a table's test runs every case and then fails once,
 * listing every case that failed (tests/failures.h). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "src/parallel/ddp.h"
#include "src/model/model.h"
#include "tests/failures.h"
#include "tests/parallel_fixture.h"
#include "tests/suite_main.h"
#include "tests/testutil.h"

enum { N_MAX = 4, B = 2, HW = PF_HW, STEPS = 4, MAX_PARAMS = 40000, MAX_BUF = 512 };
/* Gradients rounded to bf16 (relative 2^-9) move 4 SGD steps' weights by a few 1e-4 at most. */
#define BF16_TOL 2e-3

typedef enum { BATCH_NORM = 0, GROUP_NORM = 1 } norm_kind_t;
typedef enum { ON_CPU = 0, ON_GPU = 1 } device_kind_t;

typedef struct {
  int world;            /* ranks */
  norm_kind_t norm;
  int sync_bn;          /* BatchNorm statistics over the global batch */
  int accum;            /* micro-batches per step */
  device_kind_t device;
  double tol;           /* largest weight difference from one rank, relative */
  int bf16_wire;        /* --grad-comm bf16: gradients all-reduced in bf16 */
  double min_diff;      /* and at least this difference (bf16 on the wire must show) */
  int bf16_model;       /* GPU: the model computes in bf16 */
  int working_grads;    /* ... and keeps bf16 gradients, all-reduced where they are */
} ddp_case_t;

typedef struct {
  float params[N_MAX][MAX_PARAMS];
  float buffers[N_MAX][MAX_BUF];
  size_t nparams, nbuffers; /* nparams: elements of the flat buffers (model_flat_size) */
  int failed[N_MAX];
  char msg[N_MAX][512];
} result_t;

static result_t *res;

static void config(const ddp_case_t *c, model_config_t *mc, int local_batch)
{
  pf_model_config(mc, c->norm, c->device, local_batch);
  if (c->bf16_model) mc->precision = MODEL_BF16;
  mc->working_grads = c->working_grads;
}

/* Train STEPS steps on samples [first, first + count) of every step, in micro-batches of
 * count / accum, with the DDP engine on comm (NULL: alone). Final weights into out. */
static int train(const ddp_case_t *c, shmddp_comm_t *comm, int first, int count, float *out_p,
                 float *out_b, char *err, size_t errlen)
{
  int micro_n = count / c->accum;
  model_config_t mc;
  config(c, &mc, micro_n);
  if (c->device == ON_GPU) {
    mc.cuda_device = pf_cuda_device(comm ? shmddp_comm_device(comm) : 0, err, errlen);
    if (mc.cuda_device < 0) return -1;
  }
  model_t *m = NULL;
  ddp_t *d = NULL;
  int rc = model_create(&m, &mc, err, errlen);
  ddp_config_t dc = {.bucket_mb = 1, .sync_bn = c->sync_bn,
                     .grad_comm = c->bf16_wire ? SHMDDP_BF16 : SHMDDP_F32,
                     .cuda_stream = m ? model_stream(m) : NULL};
  if (rc == 0) rc = ddp_create(&d, comm, m, &dc, err, errlen);
  if (rc == 0) rc = ddp_sync_initial(d, err, errlen);
  if (rc == 0)
    rc = pf_ddp_train(m, d, c->device == ON_GPU, STEPS, first, micro_n, c->accum, c->sync_bn,
                      err, errlen);
  if (rc == 0) {
    rc = pf_copy(c->device, out_p, model_params(m), model_flat_size(m) * sizeof(float), 0);
    if (rc == 0 && model_num_buffers(m))
      rc = pf_copy(c->device, out_b, model_buffers(m), model_num_buffers(m) * sizeof(float), 0);
    res->nparams = model_flat_size(m);
    res->nbuffers = model_num_buffers(m);
    if (rc) snprintf(err, errlen, "copying the weights back failed");
  }
  if (d) ddp_destroy(d);
  if (m) model_destroy(m);
  return rc;
}

static int rank_fn(shmddp_comm_t *comm, void *arg)
{
  const ddp_case_t *c = arg;
  int r = shmddp_comm_rank(comm);
  int rc = train(c, comm, r * B * c->accum, B * c->accum, res->params[r], res->buffers[r],
                 res->msg[r], sizeof res->msg[r]);
  res->failed[r] = rc != 0;
  return rc ? 1 : 0;
}

/* The single-rank reference on the whole global batch, in a child process (CUDA must not be
 * initialised in the process that forks the ranks). 0, or -1 with the reason in why. */
static int reference(const ddp_case_t *c, float *params, float *buffers, char *why, size_t len)
{
  ddp_case_t one = *c;
  one.world = 1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int rc = train(&one, NULL, 0, B * c->accum * c->world, res->params[N_MAX - 1],
                   res->buffers[N_MAX - 1], res->msg[N_MAX - 1], sizeof res->msg[N_MAX - 1]);
    _exit(rc ? 1 : 0);
  }
  int ws = 0;
  if (pid < 0 || waitpid(pid, &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
    snprintf(why, len, "the one-rank reference failed: %s", res->msg[N_MAX - 1]);
    return -1;
  }
  memcpy(params, res->params[N_MAX - 1], res->nparams * sizeof(float));
  memcpy(buffers, res->buffers[N_MAX - 1], res->nbuffers * sizeof(float));
  return 0;
}

static const char *case_name(const ddp_case_t *c, char *buf, size_t len)
{
  snprintf(buf, len, "%s world %d %s%s accum %d%s", c->device == ON_GPU ? "cuda" : "cpu",
           c->world, c->norm == GROUP_NORM ? "GroupNorm" : "BatchNorm",
           c->norm == GROUP_NORM ? "" : (c->sync_bn ? "+SyncBN" : " (local)"), c->accum,
           c->bf16_wire ? " bf16 gradients" : "");
  return buf;
}

/* Trains case c on c->world ranks and alone on the whole batch. Every failed check goes into
 * fails; *rel gets the largest weight difference from the reference (relative to the largest
 * weight), or -1 when the runs did not finish. */
static void run_case(const ddp_case_t *c, case_failures_t *fails, double *rel)
{
  char name[128];
  case_name(c, name, sizeof name);
  *rel = -1;
  res = test_shared_alloc(sizeof *res);
  float *ref_p = malloc(MAX_PARAMS * sizeof(float)), *ref_b = malloc(MAX_BUF * sizeof(float));
  char why[700];
  int ok = reference(c, ref_p, ref_b, why, sizeof why) == 0;
  CF_CHECK(fails, ok, "%s: %s", name, why);
  if (ok) CF_CHECK(fails, res->nparams <= MAX_PARAMS, "%s: %zu parameters", name, res->nparams);
  shmddp_launch_config_t cfg = {.nproc = c->world, .timeout_s = 60, .quiet = 1,
                                .use_gpus = c->device == ON_GPU};
  shmddp_launch_result_t lr;
  if (ok && res->nparams <= MAX_PARAMS) {
    shmddp_status_t st = shmddp_launch(&cfg, rank_fn, (void *)c, &lr);
    CF_CHECK(fails, st == SHMDDP_OK, "%s: launch failed: %s", name, lr.message);
    ok = st == SHMDDP_OK;
    for (int r = 0; ok && r < c->world; r++) {
      CF_CHECK(fails, !res->failed[r], "%s: rank %d: %s", name, r, res->msg[r]);
      ok = !res->failed[r];
    }
    if (ok) CF_CHECK(fails, lr.exit_code == 0, "%s: exit code %d: %s", name, lr.exit_code, lr.message);
    ok = ok && lr.exit_code == 0;
  } else {
    ok = 0;
  }
  if (ok) {
    /* every rank the same bits */
    for (int r = 1; r < c->world; r++)
      CF_CHECK(fails, memcmp(res->params[r], res->params[0], res->nparams * sizeof(float)) == 0,
               "%s: rank %d's weights differ from rank 0's", name, r);
    /* and the single-rank run's weights, to floating-point tolerance */
    double worst = 0, scale = 0;
    size_t at = 0;
    for (size_t i = 0; i < res->nparams; i++) {
      double dd = fabs((double)res->params[0][i] - ref_p[i]);
      if (dd > worst) { worst = dd; at = i; }
      if (fabs(ref_p[i]) > scale) scale = fabs(ref_p[i]);
    }
    *rel = worst / (scale > 1 ? scale : 1);
    printf("%s: weights after %d steps differ from one rank's by %.2e (relative)\n", name, STEPS,
           *rel);
    if (c->tol > 0) {
      CF_CHECK(fails, *rel <= c->tol, "%s: weights differ by %.3g (relative; tolerance %g) at %zu: "
               "%g vs %g", name, *rel, c->tol, at, res->params[0][at], ref_p[at]);
      CF_CHECK(fails, *rel >= c->min_diff, "%s: weights differ by only %.3g (at least %g expected: "
               "were the gradients sent in bf16?)", name, *rel, c->min_diff);
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < res->nbuffers; i++)
        if (!(fabs(res->buffers[0][i] - ref_b[i]) <= c->tol * (1 + fabs(ref_b[i])) * 10) && !bad++)
          first = i;
      CF_CHECK(fails, bad == 0, "%s: %zu running statistics differ, first %zu: %g vs %g", name, bad,
               first, bad ? res->buffers[0][first] : 0.0, bad ? ref_b[first] : 0.0);
    }
  }
  free(ref_p);
  free(ref_b);
  munmap(res, sizeof *res);
}

/* Runs every case of a table; fails once, naming every case that failed. */
static void run_table(const ddp_case_t *cases, size_t n, const char *what)
{
  case_failures_t fails;
  cf_init(&fails);
  for (size_t i = 0; i < n; i++) {
    double rel;
    run_case(&cases[i], &fails, &rel);
  }
  CF_ASSERT_NONE(&fails, what);
}

static const ddp_case_t cpu_cases[] = {
  {.world = 2, .norm = GROUP_NORM, .accum = 1, .device = ON_CPU, .tol = 2e-5},
  {.world = 3, .norm = GROUP_NORM, .accum = 1, .device = ON_CPU, .tol = 2e-5},
  {.world = 2, .norm = BATCH_NORM, .sync_bn = 1, .accum = 1, .device = ON_CPU, .tol = 2e-5},
  {.world = 4, .norm = BATCH_NORM, .sync_bn = 1, .accum = 1, .device = ON_CPU, .tol = 2e-5},
  /* accumulation over 2 micro-batches equals the batch twice as large */
  {.world = 2, .norm = GROUP_NORM, .accum = 2, .device = ON_CPU, .tol = 2e-5},
  /* gradients all-reduced in bf16 (8 significant bits): the same weights to bf16's accuracy,
   * and measurably not f32's */
  {.world = 2, .norm = BATCH_NORM, .sync_bn = 1, .accum = 1, .device = ON_CPU, .tol = BF16_TOL,
   .bf16_wire = 1, .min_diff = 1e-5},
  {.world = 3, .norm = GROUP_NORM, .accum = 1, .device = ON_CPU, .tol = BF16_TOL, .bf16_wire = 1,
   .min_diff = 1e-5},
};

/* TF32 convolutions, and cuDNN's algorithms chosen per batch size: looser than on the CPU. */
static const ddp_case_t gpu_cases[] = {
  {.world = 2, .norm = BATCH_NORM, .sync_bn = 1, .accum = 1, .device = ON_GPU, .tol = 2e-3},
  {.world = 2, .norm = GROUP_NORM, .accum = 1, .device = ON_GPU, .tol = 2e-3},
  {.world = 2, .norm = BATCH_NORM, .sync_bn = 1, .accum = 1, .device = ON_GPU, .tol = BF16_TOL,
   .bf16_wire = 1},
  /* four ranks: on one GPU they all share it (the co-located collectives) */
  {.world = 4, .norm = GROUP_NORM, .accum = 1, .device = ON_GPU, .tol = 2e-3},
  {.world = 4, .norm = BATCH_NORM, .sync_bn = 1, .accum = 1, .device = ON_GPU, .tol = 2e-3},
};

/* Trains case c on c->world ranks; rank 0's weights into params. 0, or -1 with why. */
static int ranks_only(const ddp_case_t *c, float *params, char *why, size_t len)
{
  res = test_shared_alloc(sizeof *res);
  shmddp_launch_config_t cfg = {.nproc = c->world, .timeout_s = 60, .quiet = 1,
                                .use_gpus = c->device == ON_GPU};
  shmddp_launch_result_t lr;
  shmddp_status_t st = shmddp_launch(&cfg, rank_fn, (void *)c, &lr);
  int rc = st == SHMDDP_OK && lr.exit_code == 0 ? 0 : -1;
  for (int r = 0; r < c->world; r++)
    if (res->failed[r]) rc = -1, snprintf(why, len, "rank %d: %s", r, res->msg[r]);
  if (rc && !res->failed[0] && !res->failed[1]) snprintf(why, len, "launch: %s", lr.message);
  if (rc == 0) memcpy(params, res->params[0], res->nparams * sizeof(float));
  munmap(res, sizeof *res);
  return rc;
}

/* A bf16 model's own gradients all-reduced where they are (working_grads: no f32 copy, no wire
 * buffer, no conversions) give the weights of the f32-gradient path with --grad-comm bf16 bit
 * for bit: both average the same bf16 values. */
START_TEST(gpu_bf16_working_grads_same_bits)
{
  ddp_case_t c = {.world = 2, .norm = BATCH_NORM, .sync_bn = 1, .accum = 1, .device = ON_GPU,
                  .bf16_wire = 1, .bf16_model = 1};
  float *a = malloc(MAX_PARAMS * sizeof(float)), *b = malloc(MAX_PARAMS * sizeof(float));
  char why[700] = "";
  ck_assert_msg(ranks_only(&c, a, why, sizeof why) == 0, "f32 gradients: %s", why);
  size_t np = 0;
  {
    model_config_t mc;
    config(&c, &mc, B);
    np = model_config_flat_size(&mc);
  }
  c.working_grads = 1;
  ck_assert_msg(ranks_only(&c, b, why, sizeof why) == 0, "bf16 working gradients: %s", why);
  size_t diff = 0;
  for (size_t i = 0; i < np; i++) diff += memcmp(&a[i], &b[i], sizeof(float)) != 0;
  ck_assert_msg(diff == 0, "%zu of %zu weights differ between the two paths", diff, np);
  /* and f32 on the wire is refused for bf16 working gradients, with what to do */
  c.bf16_wire = 0;
  ck_assert_int_ne(ranks_only(&c, b, why, sizeof why), 0);
  ck_assert_msg(strstr(why, "--grad-comm bf16") != NULL, "%s", why);
  free(a), free(b);
}
END_TEST

START_TEST(cpu_n_ranks_equal_one_big_batch)
{
  run_table(cpu_cases, sizeof cpu_cases / sizeof cpu_cases[0], "cpu DDP against one rank");
}
END_TEST

/* The tests above can fail: local BatchNorm statistics (no SyncBN) do change the result. */
START_TEST(local_batchnorm_differs)
{
  const ddp_case_t c = {.world = 2, .norm = BATCH_NORM, .sync_bn = 0, .accum = 1,
                        .device = ON_CPU, .tol = 0 /* not compared */};
  case_failures_t fails;
  cf_init(&fails);
  double rel;
  run_case(&c, &fails, &rel);
  CF_ASSERT_NONE(&fails, "local BatchNorm");
  ck_assert_msg(rel > 1e-4, "local BN matched the global batch (difference %g)", rel);
}
END_TEST

START_TEST(gpu_n_ranks_equal_one_big_batch)
{
  run_table(gpu_cases, sizeof gpu_cases / sizeof gpu_cases[0], "cuda DDP against one rank");
}
END_TEST

/* Ranks that built different models are refused at start, on every rank, with a message. */
static int rank_mismatch(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  const ddp_case_t c = {.world = 2, .norm = GROUP_NORM, .accum = 1, .device = ON_CPU};
  model_config_t mc;
  config(&c, &mc, B);
  if (r == 1) mc.widths[2] = 32; /* a different model on rank 1 */
  model_t *m = NULL;
  ddp_t *d = NULL;
  ddp_config_t dc = {.bucket_mb = 1, .sync_bn = 0, .cuda_stream = NULL};
  int rc = model_create(&m, &mc, res->msg[r], sizeof res->msg[r]);
  if (rc == 0) rc = ddp_create(&d, comm, m, &dc, res->msg[r], sizeof res->msg[r]);
  if (rc == 0) rc = ddp_sync_initial(d, res->msg[r], sizeof res->msg[r]);
  res->failed[r] = rc != 0;
  if (d) ddp_destroy(d);
  if (m) model_destroy(m);
  return 0;
}

START_TEST(mismatched_models_are_refused)
{
  res = test_shared_alloc(sizeof *res);
  test_launch(2, 30, 0, rank_mismatch, NULL);
  for (int r = 0; r < 2; r++) {
    ck_assert_msg(res->failed[r], "rank %d accepted a different model", r);
    ck_assert_msg(strstr(res->msg[r], "rank 1 built a different model") != NULL, "rank %d: %s", r,
                  res->msg[r]);
  }
  munmap(res, sizeof *res);
}
END_TEST

static Suite *ddp_suite(const suite_env_t *env)
{
  Suite *s = suite_create("ddp");
  TCase *tc = SUITE_CASE(s, "equivalence", cpu_n_ranks_equal_one_big_batch, local_batchnorm_differs,
                         mismatched_models_are_refused);
  tcase_set_timeout(tc, 600); /* bounds a hang only */
  if (suite_gpu_cases(env, 1, SUITE_BUILT_CUDNN, "gpu_n_ranks_equal_one_big_batch")) {
    tc = SUITE_CASE(s, "gpu", gpu_n_ranks_equal_one_big_batch, gpu_bf16_working_grads_same_bits);
    tcase_set_timeout(tc, 600);
  }
  return s;
}

SUITE_MAIN("check_ddp", ddp_suite, SUITE_SOME_GPU)
