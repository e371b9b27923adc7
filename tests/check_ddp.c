/* check_ddp.c — data parallelism is exact: N ranks with b samples each end with the weights of
 * one rank trained on the N*b samples (GroupNorm: per-sample statistics; BatchNorm with SyncBN:
 * statistics over the global batch, running statistics included), every rank holds the same
 * bits, and gradient accumulation over K micro-batches equals one K-times batch. CPU ranks here;
 * the same test runs on GPUs when there are any (it skips that part otherwise). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "src/device/arena.h"
#include "src/parallel/ddp.h"
#include "src/model/model.h"
#include "src/model/optim.h"
#include "tests/parallel_fixture.h"
#include "tests/testutil.h"

enum { N_MAX = 4, B = 2, HW = PF_HW, STEPS = 4, MAX_PARAMS = 40000, MAX_BUF = 512 };

typedef struct {
  int world, norm, sync_bn, accum, device; /* device: 0 CPU, 1 CUDA */
} ddp_case_t;

typedef struct {
  float params[N_MAX][MAX_PARAMS];
  float buffers[N_MAX][MAX_BUF];
  size_t nparams, nbuffers;
  int failed[N_MAX];
  char msg[N_MAX][512];
} result_t;

static result_t *res;

static void config(const ddp_case_t *c, model_config_t *mc, int local_batch)
{
  pf_model_config(mc, c->norm, c->device, local_batch);
}

/* Train STEPS steps on samples [first, first + count) of every step, in micro-batches of
 * count / accum, with the DDP engine on comm (NULL: alone). Final weights into out. */
static int train(const ddp_case_t *c, shmddp_comm_t *comm, int first, int count, float *out_p,
                 float *out_b, char *err, size_t errlen)
{
  int micro_n = count / c->accum;
  model_config_t mc;
  config(c, &mc, micro_n);
  mc.cuda_device = comm ? shmddp_comm_device(comm) : 0;
  model_t *m = NULL;
  ddp_t *d = NULL;
  optim_t *o = NULL;
  float *x = malloc(sizeof(float) * (size_t)micro_n * HW * HW * 3);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)micro_n * HW * HW);
  void *xd = x, *yd = y;
  int rc = model_create(&m, &mc, err, errlen);
  if (rc == 0 && c->device) {
#ifdef HAVE_CUDNN
    rc = cudaMalloc(&xd, sizeof(float) * (size_t)micro_n * HW * HW * 3) != cudaSuccess ||
         cudaMalloc(&yd, sizeof(int32_t) * (size_t)micro_n * HW * HW) != cudaSuccess;
#endif
  }
  ddp_config_t dc = {1, c->sync_bn, m ? model_stream(m) : NULL};
  if (rc == 0) rc = ddp_create(&d, comm, m, &dc, err, errlen);
  if (rc == 0) rc = ddp_sync_initial(d, err, errlen);
  optim_config_t oc;
  optim_config_default(&oc, OPTIM_SGD);
  oc.lr = 0.05;
  oc.momentum = 0.9;
  if (rc == 0) rc = optim_create(&o, &oc, model_num_params(m), model_arena(m), err, errlen);
  for (int t = 0; rc == 0 && t < STEPS; t++) {
    for (int k = 0; rc == 0 && k < c->accum; k++) {
      for (int s = 0; s < micro_n; s++)
        pf_sample(t, first + k * micro_n + s, x + (size_t)s * HW * HW * 3, y + (size_t)s * HW * HW);
      rc = pf_copy(c->device, xd, x, sizeof(float) * (size_t)micro_n * HW * HW * 3, 1) ||
           pf_copy(c->device, yd, y, sizeof(int32_t) * (size_t)micro_n * HW * HW, 1);
      int last = k == c->accum - 1;
      const model_hooks_t *h = ddp_step_hooks(d, last, c->sync_bn);
      float loss;
      if (rc == 0) rc = model_train_step(m, xd, yd, micro_n, 1.0f, k > 0, h, &loss, err, errlen);
      if (rc == 0 && last) rc = ddp_finish_step(d, err, errlen);
    }
    if (rc == 0)
      rc = optim_step(o, model_params(m), model_grads(m), optim_lr_at(&oc, t), 1.0 / c->accum,
                      model_stream(m), err, errlen);
  }
  if (rc == 0) {
    rc = pf_copy(c->device, out_p, model_params(m), model_num_params(m) * sizeof(float), 0);
    if (rc == 0 && model_num_buffers(m))
      rc = pf_copy(c->device, out_b, model_buffers(m), model_num_buffers(m) * sizeof(float), 0);
    res->nparams = model_num_params(m);
    res->nbuffers = model_num_buffers(m);
    if (rc) snprintf(err, errlen, "copying the weights back failed");
  }
  if (o) optim_destroy(o);
  if (d) ddp_destroy(d);
  if (m) model_destroy(m);
  free(x);
  free(y);
#ifdef HAVE_CUDNN
  if (c->device) {
    cudaFree(xd);
    cudaFree(yd);
  }
#endif
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
 * initialised in the process that forks the ranks). */
static void reference(const ddp_case_t *c, float *params, float *buffers)
{
  ddp_case_t one = *c;
  one.world = 1;
  pid_t pid = fork();
  if (pid == 0) {
    int rc = train(&one, NULL, 0, B * c->accum * c->world, res->params[N_MAX - 1],
                   res->buffers[N_MAX - 1], res->msg[N_MAX - 1], sizeof res->msg[N_MAX - 1]);
    _exit(rc ? 1 : 0);
  }
  int ws;
  waitpid(pid, &ws, 0);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "reference failed: %s", res->msg[N_MAX - 1]);
  memcpy(params, res->params[N_MAX - 1], res->nparams * sizeof(float));
  memcpy(buffers, res->buffers[N_MAX - 1], res->nbuffers * sizeof(float));
}

/* Returns the largest weight difference from the reference (relative to the largest weight). */
static double run_case_diff(const ddp_case_t *c, double tol, int expect_equal);

static void run_case(const ddp_case_t *c, double tol) { run_case_diff(c, tol, 1); }

static double run_case_diff(const ddp_case_t *c, double tol, int expect_equal)
{
  if (c->device) {
#ifndef HAVE_CUDNN
    printf("SKIP: CUDA model not built\n");
    return 0;
#else
    if (!pf_have_gpus(1)) {
      printf("SKIP: no GPU for the CUDA variant\n");
      return 0;
    }
#endif
  }
  res = test_shared_alloc(sizeof *res);
  float *ref_p = malloc(MAX_PARAMS * sizeof(float)), *ref_b = malloc(MAX_BUF * sizeof(float));
  reference(c, ref_p, ref_b);
  ck_assert_uint_le(res->nparams, MAX_PARAMS);
  shmddp_launch_config_t cfg = {0};
  cfg.nproc = c->world;
  cfg.timeout_s = 60;
  cfg.quiet = 1;
  cfg.use_gpus = c->device && pf_have_gpus(c->world);
  shmddp_launch_result_t lr;
  ck_assert_int_eq(shmddp_launch(&cfg, rank_fn, (void *)c, &lr), SHMDDP_OK);
  for (int r = 0; r < c->world; r++) ck_assert_msg(!res->failed[r], "rank %d: %s", r, res->msg[r]);
  ck_assert_int_eq(lr.exit_code, 0);
  /* every rank the same bits */
  for (int r = 1; r < c->world; r++)
    ck_assert_msg(memcmp(res->params[r], res->params[0], res->nparams * sizeof(float)) == 0,
                  "rank %d's weights differ from rank 0's", r);
  /* and the single-rank run's weights, to floating-point tolerance */
  double worst = 0, scale = 0;
  size_t at = 0;
  for (size_t i = 0; i < res->nparams; i++) {
    double dd = fabs((double)res->params[0][i] - ref_p[i]);
    if (dd > worst) { worst = dd; at = i; }
    if (fabs(ref_p[i]) > scale) scale = fabs(ref_p[i]);
  }
  double rel = worst / (scale > 1 ? scale : 1);
  printf("%s world %d %s%s accum %d: weights after %d steps differ from one rank's by %.2e "
         "(relative)\n", c->device ? "cuda" : "cpu", c->world, c->norm ? "GroupNorm" : "BatchNorm",
         c->norm ? "" : (c->sync_bn ? "+SyncBN" : " (local)"), c->accum, STEPS, rel);
  if (!expect_equal) {
    free(ref_p);
    free(ref_b);
    munmap(res, sizeof *res);
    return rel;
  }
  ck_assert_msg(rel <= tol, "weights differ by %g at %zu (%g vs %g)", worst, at,
                res->params[0][at], ref_p[at]);
  for (size_t i = 0; i < res->nbuffers; i++)
    ck_assert_msg(fabs(res->buffers[0][i] - ref_b[i]) <= tol * (1 + fabs(ref_b[i])) * 10,
                  "running statistic %zu: %g vs %g", i, res->buffers[0][i], ref_b[i]);
  free(ref_p);
  free(ref_b);
  munmap(res, sizeof *res);
  return rel;
}

START_TEST(groupnorm_n_ranks_equal_one_big_batch)
{
  for (int n = 2; n <= 3; n++) run_case(&(ddp_case_t){n, 1, 0, 1, 0}, 2e-5);
}
END_TEST

START_TEST(syncbn_n_ranks_equal_one_big_batch)
{
  for (int n = 2; n <= 4; n += 2) run_case(&(ddp_case_t){n, 0, 1, 1, 0}, 2e-5);
}
END_TEST

/* The tests above can fail: local BatchNorm statistics (no SyncBN) do change the result. */
START_TEST(local_batchnorm_differs)
{
  double rel = run_case_diff(&(ddp_case_t){2, 0, 0, 1, 0}, 2e-5, 0);
  ck_assert_msg(rel > 1e-4, "local BN matched the global batch (difference %g)", rel);
}
END_TEST

START_TEST(accumulation_equals_the_larger_batch)
{
  run_case(&(ddp_case_t){2, 1, 0, 2, 0}, 2e-5);
}
END_TEST

START_TEST(gpu_syncbn_n_ranks_equal_one_big_batch)
{
  run_case(&(ddp_case_t){2, 0, 1, 1, 1}, 2e-3);
  run_case(&(ddp_case_t){2, 1, 0, 1, 1}, 2e-3);
}
END_TEST

/* Ranks that built different models are refused at start, on every rank, with a message. */
static int rank_mismatch(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  ddp_case_t c = {2, 1, 0, 1, 0};
  model_config_t mc;
  config(&c, &mc, B);
  if (r == 1) mc.widths[2] = 32; /* a different model on rank 1 */
  model_t *m = NULL;
  ddp_t *d = NULL;
  ddp_config_t dc = {1, 0, NULL};
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

static Suite *ddp_suite(void)
{
  Suite *s = suite_create("ddp");
  TCase *tc = tcase_create("equivalence");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, groupnorm_n_ranks_equal_one_big_batch);
  tcase_add_test(tc, syncbn_n_ranks_equal_one_big_batch);
  tcase_add_test(tc, accumulation_equals_the_larger_batch);
  tcase_add_test(tc, local_batchnorm_differs);
  tcase_add_test(tc, mismatched_models_are_refused);
  tcase_add_test(tc, gpu_syncbn_n_ranks_equal_one_big_batch);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(ddp_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
