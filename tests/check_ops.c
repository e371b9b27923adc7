/* check_ops.c — the CPU backend's ops: every gradient against central finite differences in
 * f64 on small random shapes, the f32 GEMM and convolutions against f64 references, and
 * BatchNorm split across two simulated ranks (the SyncBN hook) against the whole batch. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_cpu.h"
#include "kernels/ops.h"
#include "src/model/layers.h"
#include "tests/suite_main.h"

static ops_t o64, o32;

static void setup(void)
{
  char err[256];
  ck_assert_msg(ops_cpu_init(&o64, OPS_F64, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(ops_cpu_init(&o32, OPS_F32, err, sizeof err) == 0, "%s", err);
}

/* Deterministic non-zero test data in [-1, 1) (plus offset), from a simple LCG. */
static unsigned long long lcg = 12345;
static double rnd(void)
{
  lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(lcg >> 11) / 9007199254740992.0 * 2 - 1;
}
static double *rvec(size_t n, double scale, double offset)
{
  double *v = malloc((n ? n : 1) * sizeof *v);
  for (size_t i = 0; i < n; i++) v[i] = offset + scale * rnd();
  return v;
}

static double dot(const double *a, const double *b, size_t n)
{
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* The op under test as a scalar function: L = Σ wout · f(inputs). */
typedef double (*scalar_fn)(void *ctx);

/* Compares analytic gradient g (of L w.r.t. v[0..n)) with central differences. */
static void fd_check(scalar_fn f, void *ctx, double *v, size_t n, const double *g,
                     const char *what)
{
  const double h = 1e-6;
  for (size_t i = 0; i < n; i++) {
    double v0 = v[i];
    v[i] = v0 + h;
    double lp = f(ctx);
    v[i] = v0 - h;
    double lm = f(ctx);
    v[i] = v0;
    double fd = (lp - lm) / (2 * h);
    double tol = 1e-6 + 1e-5 * fabs(fd);
    ck_assert_msg(fabs(fd - g[i]) <= tol, "%s[%zu]: analytic %.10g, finite difference %.10g",
                  what, i, g[i], fd);
  }
}

/* ---- convolutions ---- */

typedef struct {
  ops_conv_t c;
  int n;
  double *x, *w, *b, *y, *wout, *ws;
  size_t nx, nw, nb, ny;
} conv_case_t;

static double conv_loss(void *p)
{
  conv_case_t *t = p;
  ck_assert_int_eq(o64.conv_fwd(&o64, &t->c, t->n, t->x, t->w, t->b, t->y, t->ws), 0);
  return dot(t->y, t->wout, t->ny);
}

static void conv_case(ops_conv_kind_t kind, int n, int h, int w, int cin, int cout)
{
  conv_case_t t = {.c = {.kind = kind, .h = h, .w = w, .cin = cin, .cout = cout, .max_n = n},
                   .n = n};
  size_t ws = 0;
  ck_assert_int_eq(o64.conv_plan(&o64, &t.c, &ws), 0);
  t.ws = malloc(ws + 8);
  size_t P = (size_t)n * h * w;
  t.nx = P * cin;
  t.nw = (size_t)cin * cout * (kind == OPS_CONV3X3 ? 9 : kind == OPS_CONVT2X2 ? 4 : 1);
  t.nb = kind == OPS_CONV3X3 ? 0 : (size_t)cout;
  t.ny = (kind == OPS_CONVT2X2 ? 4 * P : P) * cout;
  t.x = rvec(t.nx, 1, 0.1);
  t.w = rvec(t.nw, 0.5, 0);
  t.b = rvec(t.nb, 0.5, 0);
  t.y = rvec(t.ny, 0, 0);
  t.wout = rvec(t.ny, 1, 0);
  double *dx = rvec(t.nx, 0, 0), *dw = rvec(t.nw, 0, 0), *db = rvec(t.nb, 0, 0);
  ck_assert_int_eq(o64.conv_bwd_filter(&o64, &t.c, n, t.x, t.wout, dw, t.nb ? db : NULL, 0,
                                       t.ws), 0);
  ck_assert_int_eq(o64.conv_bwd_data(&o64, &t.c, n, t.wout, t.w, dx, t.ws), 0);
  fd_check(conv_loss, &t, t.x, t.nx, dx, "dx");
  fd_check(conv_loss, &t, t.w, t.nw, dw, "dw");
  if (t.nb) fd_check(conv_loss, &t, t.b, t.nb, db, "db");
  /* acc = 1 adds to what is there */
  double *dw2 = malloc(t.nw * sizeof *dw2), *db2 = malloc((t.nb + 1) * sizeof *db2);
  memcpy(dw2, dw, t.nw * sizeof *dw2);
  if (t.nb) memcpy(db2, db, t.nb * sizeof *db2);
  ck_assert_int_eq(o64.conv_bwd_filter(&o64, &t.c, n, t.x, t.wout, dw2, t.nb ? db2 : NULL, 1,
                                       t.ws), 0);
  for (size_t i = 0; i < t.nw; i++) ck_assert_double_eq_tol(dw2[i], 2 * dw[i], 1e-12);
  for (size_t i = 0; i < t.nb; i++) ck_assert_double_eq_tol(db2[i], 2 * db[i], 1e-12);
  free(dw2), free(db2), free(dx), free(dw), free(db);
  free(t.x), free(t.w), free(t.b), free(t.y), free(t.wout), free(t.ws);
}

START_TEST(conv3x3_grad) { conv_case(OPS_CONV3X3, 2, 5, 4, 3, 4); }
END_TEST
START_TEST(conv1x1_grad) { conv_case(OPS_CONV1X1, 2, 3, 5, 4, 3); }
END_TEST
START_TEST(convt2x2_grad) { conv_case(OPS_CONVT2X2, 2, 3, 2, 3, 4); }
END_TEST

/* The f32 convolutions (the blocked GEMM with several K blocks and ragged edges, and im2col in
 * more than one chunk) against the f64 ones. */
START_TEST(conv_f32_matches_f64)
{
  ops_conv_kind_t kinds[3] = {OPS_CONV3X3, OPS_CONV1X1, OPS_CONVT2X2};
  for (int k = 0; k < 3; k++) {
    ops_conv_t c = {.kind = kinds[k], .h = 12, .w = 10, .cin = 40, .cout = 19, .max_n = 3};
    size_t ws = 0;
    ck_assert_int_eq(o64.conv_plan(&o64, &c, &ws), 0);
    size_t ws32 = 0;
    ck_assert_int_eq(o32.conv_plan(&o32, &c, &ws32), 0);
    size_t P = 3 * 12 * 10, nx = P * 40, nw = 40 * 19 * (k == 0 ? 9 : k == 2 ? 4 : 1);
    size_t ny = (k == 2 ? 4 : 1) * P * 19;
    double *x = rvec(nx, 1, 0), *w = rvec(nw, 0.3, 0), *b = rvec(19, 1, 0), *y = rvec(ny, 0, 0);
    float *xf = malloc(nx * 4), *wf = malloc(nw * 4), *bf = malloc(19 * 4), *yf = malloc(ny * 4);
    for (size_t i = 0; i < nx; i++) xf[i] = (float)x[i], x[i] = xf[i];
    for (size_t i = 0; i < nw; i++) wf[i] = (float)w[i], w[i] = wf[i];
    for (size_t i = 0; i < 19; i++) bf[i] = (float)b[i], b[i] = bf[i];
    void *w64 = malloc(ws + 8), *w32 = malloc(ws32 + 8);
    ck_assert_int_eq(o64.conv_fwd(&o64, &c, 3, x, w, b, y, w64), 0);
    ck_assert_int_eq(o32.conv_fwd(&o32, &c, 3, xf, wf, bf, yf, w32), 0);
    for (size_t i = 0; i < ny; i++)
      ck_assert_msg(fabs(yf[i] - y[i]) <= 1e-4 * (1 + fabs(y[i])), "kind %d y[%zu] %g vs %g",
                    k, i, yf[i], y[i]);
    free(x), free(w), free(b), free(y), free(xf), free(wf), free(bf), free(yf);
    free(w64), free(w32);
  }
}
END_TEST

START_TEST(gemm_f32_all_transposes)
{
  int shapes[][3] = {{7, 1600, 300}, {131, 17, 513}, {1, 1, 1}, {250, 40, 3}};
  for (int s = 0; s < 4; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        int lda = ta ? M : K, ldb = tb ? K : N;
        float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
        float *C = malloc(sizeof(float) * M * N);
        for (int i = 0; i < M * K; i++) A[i] = (float)rnd();
        for (int i = 0; i < K * N; i++) B[i] = (float)rnd();
        for (int i = 0; i < M * N; i++) C[i] = (float)rnd();
        float *C0 = malloc(sizeof(float) * M * N);
        memcpy(C0, C, sizeof(float) * M * N);
        gemm_cpu_f32(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, 0.5f, C, N);
        for (int i = 0; i < M; i++)
          for (int j = 0; j < N; j++) {
            double r = 0;
            for (int k = 0; k < K; k++)
              r += (double)(ta ? A[k * lda + i] : A[i * lda + k]) *
                   (tb ? B[j * ldb + k] : B[k * ldb + j]);
            r = 0.75 * r + 0.5 * C0[i * N + j];
            ck_assert_msg(fabs(C[i * N + j] - r) <= 1e-5 * sqrt((double)K) * 4,
                          "M%d N%d K%d ta%d tb%d: C[%d,%d] %g vs %g", M, N, K, ta, tb, i, j,
                          C[i * N + j], r);
          }
        free(A), free(B), free(C), free(C0);
      }
}
END_TEST

/* ---- normalisation ---- */

typedef struct {
  int n, hw, C, G, relu, group;
  double *x, *gamma, *beta, *y, *wout, *stats, *saved;
  size_t nx;
} norm_case_t;

static double norm_loss(void *p)
{
  norm_case_t *t = p;
  size_t P = (size_t)t->n * t->hw;
  if (t->group) {
    ck_assert_int_eq(o64.gn_fwd(&o64, t->x, t->n, t->hw, t->C, t->G, 1e-5, t->gamma, t->beta,
                                t->relu, t->y, t->saved), 0);
  } else {
    ck_assert_int_eq(o64.bn_stats(&o64, t->x, P, t->C, t->stats), 0);
    ck_assert_int_eq(o64.bn_finalize(&o64, t->stats, t->C, 1e-5, 0.1, NULL, NULL, t->saved), 0);
    ck_assert_int_eq(o64.bn_apply(&o64, t->x, P, t->C, t->saved, t->gamma, t->beta, t->relu,
                                  t->y), 0);
  }
  return dot(t->y, t->wout, t->nx);
}

/* relu: 0 none, 1 the ReLU's mask from the kept output y, 2 recomputed from x (ops_relu_t
 * without y), which must give the same gradients bit for bit. */
static void norm_bwd_run(norm_case_t *t, int relu, double *dx, double *dg, double *db)
{
  size_t P = (size_t)t->n * t->hw;
  ops_relu_t keep = {.y = t->y}, again = {.gamma = t->gamma, .beta = t->beta};
  const ops_relu_t *mask = relu == 1 ? &keep : relu == 2 ? &again : NULL;
  double *d = malloc(t->nx * sizeof *d);
  memcpy(d, t->wout, t->nx * sizeof *d);
  if (t->group) {
    ck_assert_int_eq(o64.gn_bwd(&o64, d, mask, t->x, t->n, t->hw, t->C, t->G, t->saved, t->gamma,
                                dx, dg, db, 0), 0);
  } else {
    double sums[16];
    ck_assert_int_eq(o64.bn_bwd_reduce(&o64, d, mask, t->x, P, t->C, t->saved, sums, dg, db, 0),
                     0);
    /* in place, as the model runs it */
    ck_assert_int_eq(o64.bn_bwd_apply(&o64, d, mask, t->x, P, t->C, t->saved, sums, t->gamma, d),
                     0);
    memcpy(dx, d, t->nx * sizeof *d);
  }
  free(d);
}

static void norm_case(int group, int relu, double offset)
{
  norm_case_t t = {.n = 3, .hw = 5, .C = 4, .G = group ? 2 : 1, .relu = relu, .group = group};
  size_t P = (size_t)t.n * t.hw;
  t.nx = P * t.C;
  t.x = rvec(t.nx, 1, offset);
  t.gamma = rvec(t.C, 0.5, 1);
  t.beta = rvec(t.C, 0.5, 0.2);
  t.y = rvec(t.nx, 0, 0);
  t.wout = rvec(t.nx, 1, 0);
  t.stats = rvec(2 * t.C + 1, 0, 0);
  t.saved = rvec(2 * t.C + 2 * t.n * t.G + 1, 0, 0);
  double *dx = rvec(t.nx, 0, 0), *dg = rvec(t.C, 0, 0), *db = rvec(t.C, 0, 0);
  norm_loss(&t);
  norm_bwd_run(&t, relu, dx, dg, db);
  if (relu) {
    /* the recomputed mask: the same numbers as the kept output's, and it does mask something */
    double *dx2 = rvec(t.nx, 0, 0), *dg2 = rvec(t.C, 0, 0), *db2 = rvec(t.C, 0, 0);
    norm_bwd_run(&t, 2, dx2, dg2, db2);
    ck_assert_mem_eq(dx2, dx, t.nx * sizeof *dx);
    ck_assert_mem_eq(dg2, dg, t.C * sizeof *dg);
    ck_assert_mem_eq(db2, db, t.C * sizeof *db);
    size_t off = 0;
    for (size_t i = 0; i < t.nx; i++) off += t.y[i] == 0;
    ck_assert_msg(off > 0 && off < t.nx, "the case clips %zu of %zu values", off, t.nx);
    free(dx2), free(dg2), free(db2);
  }
  fd_check(norm_loss, &t, t.x, t.nx, dx, "dx");
  fd_check(norm_loss, &t, t.gamma, t.C, dg, "dgamma");
  fd_check(norm_loss, &t, t.beta, t.C, db, "dbeta");
  free(dx), free(dg), free(db);
  free(t.x), free(t.gamma), free(t.beta), free(t.y), free(t.wout), free(t.stats), free(t.saved);
}

START_TEST(bn_grad) { norm_case(0, 0, 0.3); }
END_TEST
START_TEST(bn_relu_grad) { norm_case(0, 1, 0.1); }
END_TEST
START_TEST(gn_grad) { norm_case(1, 0, -0.2); }
END_TEST
START_TEST(gn_relu_grad) { norm_case(1, 1, 0.1); }
END_TEST

/* A mean 10^4 times the spread: the statistics must still give unit variance. */
START_TEST(bn_large_mean)
{
  enum { P = 64, C = 3 };
  float x[P * C], y[P * C], g[C] = {1, 1, 1}, b[C] = {0, 0, 0};
  for (int i = 0; i < P * C; i++) x[i] = (float)(1e4 + rnd());
  double stats[2 * C + 1], saved[2 * C + 1];
  ck_assert_int_eq(o32.bn_stats(&o32, x, P, C, stats), 0);
  ck_assert_int_eq(o32.bn_finalize(&o32, stats, C, 0, 0.1, NULL, NULL, saved), 0);
  /* the one-call form gives the same statistics, saved values and running statistics */
  double stats2[2 * C + 1], saved2[2 * C + 1];
  float rm[2][C] = {{1, 2, 3}, {1, 2, 3}}, rv[2][C] = {{4, 5, 6}, {4, 5, 6}};
  ck_assert_int_eq(o32.bn_finalize(&o32, stats, C, 0, 0.1, rm[0], rv[0], saved), 0);
  ck_assert_int_eq(o32.bn_stats_finalize(&o32, x, P, C, 0, 0.1, rm[1], rv[1], stats2, saved2), 0);
  ck_assert(memcmp(stats, stats2, sizeof stats) == 0 && memcmp(saved, saved2, sizeof saved) == 0);
  ck_assert(memcmp(rm[0], rm[1], sizeof rm[0]) == 0 && memcmp(rv[0], rv[1], sizeof rv[0]) == 0);
  ck_assert(rm[0][0] != 1); /* the running statistics moved */
  ck_assert_int_eq(o32.bn_apply(&o32, x, P, C, saved, g, b, 0, y), 0);
  for (int c = 0; c < C; c++) {
    double m = 0, v = 0;
    for (int p = 0; p < P; p++) m += x[p * C + c];
    m /= P;
    for (int p = 0; p < P; p++) v += (x[p * C + c] - m) * (x[p * C + c] - m);
    v /= P;
    ck_assert_double_eq_tol(saved[c], m, 1e-9 * 1e4);
    ck_assert_double_eq_tol(1 / (saved[C + c] * saved[C + c]), v, 1e-6 * v);
    double s2 = 0;
    for (int p = 0; p < P; p++) s2 += (double)y[p * C + c] * y[p * C + c];
    ck_assert_double_eq_tol(s2 / P, 1.0, 1e-3);
  }
  /* into rows 2C + 1 apart (a wider tensor): the same values, the other channels untouched;
   * rows closer than C are refused */
  enum { LD = 2 * C + 1 };
  float w[P * LD];
  for (int i = 0; i < P * LD; i++) w[i] = (float)(7 + i);
  ck_assert_int_eq(o32.bn_apply_ld(&o32, x, P, C, saved, g, b, 1, w, LD), 0);
  ck_assert_int_eq(o32.bn_apply(&o32, x, P, C, saved, g, b, 1, y), 0);
  for (int p = 0; p < P; p++)
    for (int c = 0; c < LD; c++)
      ck_assert(w[p * LD + c] == (c < C ? y[p * C + c] : (float)(7 + p * LD + c)));
  ck_assert_int_ne(o32.bn_apply_ld(&o32, x, P, C, saved, g, b, 1, w, C - 1), 0);
  /* the apply with the 2x2 max-pool (here 4 x 16 pixels, rows LD apart): the apply's values,
   * and each pooled value the largest of its window (the first of equals) with its index */
  enum { PH = 4, PW = 16 };
  float pooled[P / 4 * C], w2[P * LD];
  uint8_t arg[P / 4 * C];
  for (int i = 0; i < P * LD; i++) w2[i] = (float)(7 + i);
  ck_assert_int_eq(o32.bn_apply_pool(&o32, x, 1, PH, PW, C, saved, g, b, 1, w2, LD, pooled, arg),
                   0);
  ck_assert(memcmp(w, w2, sizeof w) == 0);
  for (int oy = 0; oy < PH / 2; oy++)
    for (int ox = 0; ox < PW / 2; ox++)
      for (int c = 0; c < C; c++) {
        int q = (oy * (PW / 2) + ox) * C + c, best = -1;
        for (int j = 0; j < 4; j++) {
          float v = y[((2 * oy + j / 2) * PW + 2 * ox + j % 2) * C + c];
          if (best < 0 || v > y[((2 * oy + best / 2) * PW + 2 * ox + best % 2) * C + c]) best = j;
        }
        ck_assert_int_eq(arg[q], best);
        ck_assert(pooled[q] == y[((2 * oy + best / 2) * PW + 2 * ox + best % 2) * C + c]);
      }
  ck_assert_int_ne(o32.bn_apply_pool(&o32, x, 1, PH + 1, PW, C, saved, g, b, 1, w2, LD, pooled,
                                     arg), 0);
  ck_assert_int_ne(o32.bn_apply_pool(&o32, x, 1, PH, PW, C, saved, g, b, 1, w2, C - 1, pooled,
                                     arg), 0);
  /* and a concat of b's part only leaves the first part as it was */
  float z[P * LD], bb[P * (C + 1)];
  memcpy(z, w, sizeof z);
  for (int i = 0; i < P * (C + 1); i++) bb[i] = (float)(-3 - i);
  ck_assert_int_eq(o32.concat_fwd(&o32, NULL, C, bb, C + 1, P, w), 0);
  for (int p = 0; p < P; p++)
    for (int c = 0; c < LD; c++)
      ck_assert(w[p * LD + c] == (c < C ? z[p * LD + c] : bb[p * (C + 1) + c - C]));
}
END_TEST

/* ---- SyncBN: two simulated ranks ---- */

typedef struct {
  const double *peer_fwd, *peer_bwd;
  int calls;
} peer_hook_t;

/* Sums the peer's statistics into buf, like an all-reduce over two ranks would. */
static int peer_sync(void *ctx, void *buf, size_t count, shmddp_dtype_t dtype, void *stream)
{
  peer_hook_t *h = ctx;
  ck_assert_int_eq(dtype, SHMDDP_F64);
  const double *peer = (count % 2) ? h->peer_fwd : h->peer_bwd;
  for (size_t i = 0; i < count; i++) ((double *)buf)[i] += peer[i];
  h->calls++;
  return 0;
}

typedef struct {
  layer_param_t params[2];
  double wp[2 * 8], wg[2 * 8];
  float grads[2 * 8];
  float running[2 * 8];
  double stats[2 * 8 + 1], saved[2 * 8 + 1];
  layer_norm_t l;
  layer_ctx_t c;
  char err[256];
} bn_rank_t;

static void bn_rank_init(bn_rank_t *r, int C, const double *gamma, const double *beta)
{
  memset(r, 0, sizeof *r);
  r->params[0] = (layer_param_t){.name = "bn.weight", .offset = C, .count = C};
  r->params[1] = (layer_param_t){.name = "bn.bias", .offset = 0, .count = C};
  memcpy(r->wp + C, gamma, C * sizeof(double));
  memcpy(r->wp, beta, C * sizeof(double));
  for (int c = 0; c < C; c++) r->running[c] = 0.5f, r->running[C + c] = 2.0f;
  r->l = (layer_norm_t){.kind = MODEL_NORM_BATCH, .C = C, .G = 1, .gamma_id = 0, .beta_id = 1,
                        .running = r->running, .stats = r->stats, .saved = r->saved};
  r->c = (layer_ctx_t){.ops = &o64, .params = r->params, .wparams = r->wp, .wgrads = r->wg,
                       .grads = r->grads, .separate = 1, .train = 1, .err = r->err,
                       .errlen = sizeof r->err};
}

/* Rows [0, na) of x (pixels x C) on rank A and [na, P) on rank B equal the whole batch. */
static void syncbn_split(int P, int na)
{
  enum { C = 5 };
  double *x = rvec((size_t)P * C, 1.5, 0.4), *dy = rvec((size_t)P * C, 1, 0);
  double gamma[C], beta[C];
  for (int c = 0; c < C; c++) gamma[c] = 1 + 0.3 * rnd(), beta[c] = 0.2 * rnd();
  /* the whole batch on one rank, no hook */
  bn_rank_t *w = calloc(1, sizeof *w), *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
  bn_rank_init(w, C, gamma, beta);
  double *yw = rvec((size_t)P * C, 0, 0), *dw = malloc((size_t)P * C * sizeof *dw);
  ck_assert_msg(layer_norm_fwd(&w->c, &w->l, P, 1, x, yw) == 0, "%s", w->err);
  memcpy(dw, dy, (size_t)P * C * sizeof *dw);
  ck_assert_msg(layer_norm_bwd(&w->c, &w->l, P, 1, dw, x, yw) == 0, "%s", w->err);

  /* two ranks: local statistics exchanged through the hook */
  int nb = P - na;
  const double *xa = x, *xb = x + (size_t)na * C;
  bn_rank_init(a, C, gamma, beta);
  bn_rank_init(b, C, gamma, beta);
  double fa[2 * C + 1], fb[2 * C + 1], sa[2 * C], sb[2 * C];
  ck_assert_int_eq(o64.bn_stats(&o64, xa, na, C, fa), 0);
  ck_assert_int_eq(o64.bn_stats(&o64, xb, nb, C, fb), 0);
  peer_hook_t ha = {.peer_fwd = fb, .peer_bwd = sb}, hb = {.peer_fwd = fa, .peer_bwd = sa};
  model_hooks_t hka = {.ctx = &ha, .sync_stats = peer_sync};
  model_hooks_t hkb = {.ctx = &hb, .sync_stats = peer_sync};
  a->c.hooks = &hka;
  b->c.hooks = &hkb;
  double *y2 = rvec((size_t)P * C, 0, 0), *d2 = malloc((size_t)P * C * sizeof *d2);
  ck_assert_msg(layer_norm_fwd(&a->c, &a->l, na, 1, xa, y2) == 0, "%s", a->err);
  ck_assert_msg(layer_norm_fwd(&b->c, &b->l, nb, 1, xb, y2 + (size_t)na * C) == 0, "%s", b->err);
  /* each rank's local backward sums, computed with the (now global) saved statistics */
  double g1[C], g2[C];
  ops_relu_t ra = {.y = y2}, rb = {.y = y2 + (size_t)na * C};
  ck_assert_int_eq(o64.bn_bwd_reduce(&o64, dy, &ra, xa, na, C, a->saved, sa, g1, g2, 0), 0);
  ck_assert_int_eq(o64.bn_bwd_reduce(&o64, dy + (size_t)na * C, &rb, xb, nb, C, b->saved, sb, g1,
                                     g2, 0), 0);
  memcpy(d2, dy, (size_t)P * C * sizeof *d2);
  ck_assert_msg(layer_norm_bwd(&a->c, &a->l, na, 1, d2, xa, y2) == 0, "%s", a->err);
  ck_assert_msg(layer_norm_bwd(&b->c, &b->l, nb, 1, d2 + (size_t)na * C, xb,
                               y2 + (size_t)na * C) == 0, "%s", b->err);
  ck_assert_int_eq(ha.calls, 2);
  ck_assert_int_eq(hb.calls, 2);

  for (size_t i = 0; i < (size_t)P * C; i++) {
    ck_assert_msg(fabs(y2[i] - yw[i]) < 1e-12, "y[%zu] %g vs %g", i, y2[i], yw[i]);
    ck_assert_msg(fabs(d2[i] - dw[i]) < 1e-12, "dx[%zu] %g vs %g", i, d2[i], dw[i]);
  }
  for (int i = 0; i < 2 * C; i++) {
    /* weight/bias gradients: the ranks' local parts add up to the whole batch's */
    ck_assert_msg(fabs(a->wg[i] + b->wg[i] - w->wg[i]) < 1e-12, "param grad %d", i);
    ck_assert_msg(fabs(a->grads[i] + b->grads[i] - w->grads[i]) < 1e-5, "f32 grad %d", i);
    ck_assert_float_eq(a->running[i], w->running[i]);
    ck_assert_float_eq(b->running[i], w->running[i]);
  }
  /* the running statistics moved (momentum 0.1 toward the batch's) */
  ck_assert(fabs(w->running[0] - 0.5f) > 1e-4);
  free(x), free(dy), free(w), free(a), free(b), free(yw), free(dw), free(y2), free(d2);
}

START_TEST(syncbn_equal_halves) { syncbn_split(12, 6); }
END_TEST
START_TEST(syncbn_unequal_halves) { syncbn_split(11, 3); }
END_TEST
START_TEST(syncbn_empty_half) { syncbn_split(9, 0); }
END_TEST

/* Eval mode normalises with the running statistics. */
START_TEST(bn_eval_uses_running)
{
  enum { P = 4, C = 2 };
  double x[P * C], y[P * C], g[C] = {1.5, 0.5}, b[C] = {0.1, -0.2}, saved[2 * C + 1];
  float rm[C] = {0.3f, -1.0f}, rv[C] = {2.0f, 0.25f};
  for (int i = 0; i < P * C; i++) x[i] = rnd();
  ck_assert_int_eq(o64.bn_saved_from_running(&o64, rm, rv, C, 1e-5, saved), 0);
  ck_assert_int_eq(o64.bn_apply(&o64, x, P, C, saved, g, b, 0, y), 0);
  for (int p = 0; p < P; p++)
    for (int c = 0; c < C; c++)
      ck_assert_double_eq_tol(y[p * C + c],
                              g[c] * (x[p * C + c] - rm[c]) / sqrt(rv[c] + 1e-5) + b[c], 1e-12);
}
END_TEST

/* ---- ReLU, max-pool, concat, loss ---- */

typedef struct {
  int kind; /* 0 relu, 1 maxpool, 2 concat */
  double *x, *x2, *y, *wout;
  uint8_t *arg;
  size_t nx, ny;
} elem_case_t;

static double elem_loss(void *p)
{
  elem_case_t *t = p;
  if (t->kind == 0) ck_assert_int_eq(o64.relu_fwd(&o64, t->x, t->nx, t->y), 0);
  if (t->kind == 1) ck_assert_int_eq(o64.maxpool_fwd(&o64, t->x, 2, 4, 6, 3, t->y, t->arg), 0);
  if (t->kind == 2) ck_assert_int_eq(o64.concat_fwd(&o64, t->x, 3, t->x2, 2, 10, t->y), 0);
  return dot(t->y, t->wout, t->ny);
}

START_TEST(relu_grad)
{
  elem_case_t t = {.kind = 0, .nx = 40, .ny = 40};
  t.x = rvec(40, 1, 0.05), t.y = rvec(40, 0, 0), t.wout = rvec(40, 1, 0);
  double dx[40];
  elem_loss(&t);
  ck_assert_int_eq(o64.relu_bwd(&o64, t.wout, t.y, 40, dx), 0);
  fd_check(elem_loss, &t, t.x, 40, dx, "relu dx");
  free(t.x), free(t.y), free(t.wout);
}
END_TEST

START_TEST(maxpool_grad)
{
  elem_case_t t = {.kind = 1, .nx = 2 * 4 * 6 * 3, .ny = 2 * 2 * 3 * 3};
  t.x = rvec(t.nx, 1, 0), t.y = rvec(t.ny, 0, 0), t.wout = rvec(t.ny, 1, 0);
  t.arg = malloc(t.ny);
  double *dx = rvec(t.nx, 0, 0);
  elem_loss(&t);
  ck_assert_int_eq(o64.maxpool_bwd(&o64, t.wout, t.arg, 2, 4, 6, 3, dx, 0), 0);
  fd_check(elem_loss, &t, t.x, t.nx, dx, "maxpool dx");
  /* acc adds */
  double *dx2 = rvec(t.nx, 1, 0), *dx2c = malloc(t.nx * sizeof *dx2c);
  memcpy(dx2c, dx2, t.nx * sizeof *dx2c);
  ck_assert_int_eq(o64.maxpool_bwd(&o64, t.wout, t.arg, 2, 4, 6, 3, dx2, 1), 0);
  for (size_t i = 0; i < t.nx; i++) ck_assert_double_eq_tol(dx2[i], dx2c[i] + dx[i], 1e-12);
  free(t.x), free(t.y), free(t.wout), free(t.arg), free(dx), free(dx2), free(dx2c);
}
END_TEST

START_TEST(concat_grad)
{
  elem_case_t t = {.kind = 2, .nx = 30, .ny = 50};
  t.x = rvec(30, 1, 0), t.x2 = rvec(20, 1, 0), t.y = rvec(50, 0, 0), t.wout = rvec(50, 1, 0);
  double da[30], db[20];
  ck_assert_int_eq(o64.concat_bwd(&o64, t.wout, 3, 2, 10, da, 0, db), 0);
  fd_check(elem_loss, &t, t.x, 30, da, "concat da");
  fd_check(elem_loss, &t, t.x2, 20, db, "concat db");
  free(t.x), free(t.x2), free(t.y), free(t.wout);
}
END_TEST

/* ---- the up-convolution's gradient in the gathered order (ops.h concat_bwd_gathered) ---- */

/* The test's own gather, from ops.h's definition: for each input pixel p = (image * h + t) * w
 * + s of an output of n images of (2h, 2w) pixels and C channels, z[((p * 2 + i) * 2 + j) * C
 * + c] = d[image][2t + i][2s + j][c]; elements of e bytes. */
static void host_gather(const void *dv, int n, int h, int w, int C, size_t e, void *zv)
{
  const char *d = dv;
  char *z = zv;
  for (int img = 0; img < n; img++)
    for (int t = 0; t < h; t++)
      for (int s = 0; s < w; s++)
        for (int i = 0; i < 2; i++)
          for (int j = 0; j < 2; j++) {
            size_t p = ((size_t)img * h + t) * w + s;
            size_t from = (((size_t)img * 2 * h + 2 * t + i) * 2 * w + 2 * s + j) * C;
            memcpy(z + ((p * 2 + i) * 2 + j) * C * e, d + from * e, (size_t)C * e);
          }
}

/* v (n doubles) in o's dtype (f32 rounds), in a new buffer; poison: the same size of 0xff bytes
 * (NaN in either dtype), for outputs. */
static void *typed(const ops_t *o, const double *v, size_t n)
{
  void *t = malloc((n ? n : 1) * o->elem);
  for (size_t i = 0; i < n; i++) {
    if (o->dtype == OPS_F32) ((float *)t)[i] = (float)v[i];
    else ((double *)t)[i] = v[i];
  }
  return t;
}
static void *poison(const ops_t *o, size_t n)
{
  void *t = malloc((n ? n : 1) * o->elem);
  memset(t, 0xff, (n ? n : 1) * o->elem);
  return t;
}
static double at(const ops_t *o, const void *t, size_t i)
{
  return o->dtype == OPS_F32 ? (double)((const float *)t)[i] : ((const double *)t)[i];
}

/* The split into the gathered order against concat_bwd followed by the test's own gather: the
 * same bits (a move), da as concat_bwd's (written and added). */
static void split_case(const ops_t *o, int n, int H, int W, int ca, int cb)
{
  size_t P = (size_t)n * H * W, e = o->elem;
  double *v = rvec(P * (ca + cb), 1, 0), *base = rvec(P * ca, 1, 0);
  void *dy = typed(o, v, P * (ca + cb)), *da0 = typed(o, base, P * ca);
  void *da_ref = typed(o, base, P * ca), *db_ref = poison(o, P * cb), *z_ref = poison(o, P * cb);
  void *da = typed(o, base, P * ca), *z = poison(o, P * cb);
  char what[96];
  snprintf(what, sizeof what, "%s: %d images of %dx%d, %d + %d channels", o->name, n, H, W, ca,
           cb);
  for (int acc = 0; acc < 2; acc++) {
    memcpy(da_ref, da0, P * ca * e), memcpy(da, da0, P * ca * e);
    memset(z, 0xff, P * cb * e);
    ck_assert_int_eq(o->concat_bwd(o, dy, ca, cb, P, da_ref, acc, db_ref), 0);
    host_gather(db_ref, n, H / 2, W / 2, cb, e, z_ref);
    ck_assert_msg(o->concat_bwd_gathered(o, dy, ca, cb, n, H, W, da, acc, z) == 0, "%s: %s", what,
                  o->last_error(o));
    ck_assert_msg(memcmp(z, z_ref, P * cb * e) == 0, "%s: the gathered part differs (acc %d)",
                  what, acc);
    ck_assert_msg(memcmp(da, da_ref, P * ca * e) == 0, "%s: the first part differs (acc %d)",
                  what, acc);
  }
  free(v), free(base), free(dy), free(da0), free(da_ref), free(db_ref), free(z_ref), free(da);
  free(z);
}

START_TEST(concat_split_gathered)
{
  const ops_t *os[2] = {&o64, &o32};
  for (int k = 0; k < 2; k++) {
    split_case(os[k], 2, 6, 10, 3, 5);  /* widths off every power of two */
    split_case(os[k], 1, 2, 2, 1, 1);   /* one input pixel, one channel each */
    split_case(os[k], 3, 4, 14, 8, 16); /* several images: rows never pair across them */
    split_case(os[k], 2, 10, 2, 4, 3);  /* one input column */
    split_case(os[k], 0, 4, 4, 2, 2);   /* no images: nothing to do, no error */
    /* a side that is not even has no gathered order: refused with a message */
    double v[64] = {0}, a[32], b[32];
    ck_assert_int_ne(os[k]->concat_bwd_gathered(os[k], v, 2, 2, 1, 3, 4, a, 0, b), 0);
    ck_assert_ptr_nonnull(strstr(os[k]->last_error(os[k]), "even"));
    ck_assert_int_ne(os[k]->concat_bwd_gathered(os[k], v, 2, 2, 1, 4, 5, a, 0, b), 0);
  }
}
END_TEST

/* The transposed convolution's backward from dy gathered against the plain ops from dy (the
 * same bits: ops.h says the CPU's are), with and without accumulating, and against the test's
 * own sums in f64 from the definitions (the plain ops are checked by finite differences in
 * convt2x2_grad): dw[ci][i][j][co] = Σ_p x[p][ci] dy(p, i, j)[co], db[co] = Σ dy[.][co],
 * dx[p][ci] = Σ_{i, j, co} w[ci][i][j][co] dy(p, i, j)[co], dy(p, i, j) the output pixel
 * (2t + i, 2s + j) of input pixel p = (image, t, s). */
typedef struct {
  double *dw, *dw_mag, *db, *db_mag, *dx, *dx_mag;
} convt_def_t;

static convt_def_t convt_by_definition(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                                       const void *wt, const void *dy)
{
  const int h = c->h, w = c->w, cin = c->cin, cout = c->cout;
  const size_t P = (size_t)n * h * w, nw = (size_t)4 * cin * cout;
  convt_def_t d = {calloc(nw, 8), calloc(nw, 8), calloc(cout, 8), calloc(cout, 8),
                   calloc(P * cin + 1, 8), calloc(P * cin + 1, 8)};
  for (size_t p = 0; p < P; p++) {
    size_t img = p / ((size_t)h * w), t = p / w % h, s = p % w;
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++)
        for (int co = 0; co < cout; co++) {
          const double g = at(o, dy, ((img * 2 * h + 2 * t + i) * 2 * w + 2 * s + j) * cout + co);
          d.db[co] += g, d.db_mag[co] += fabs(g);
          for (int ci = 0; ci < cin; ci++) {
            const size_t k = (((size_t)ci * 2 + i) * 2 + j) * cout + co;
            const double tw = at(o, x, p * cin + ci) * g, tx = at(o, wt, k) * g;
            d.dw[k] += tw, d.dw_mag[k] += fabs(tw);
            d.dx[p * cin + ci] += tx, d.dx_mag[p * cin + ci] += fabs(tx);
          }
        }
  }
  return d;
}

static void convt_def_free(convt_def_t *d)
{
  free(d->dw), free(d->dw_mag), free(d->db), free(d->db_mag), free(d->dx), free(d->dx_mag);
}

/* got[i] against base[i] (when not NULL) + ref[i] within tol of the terms' magnitudes. */
static void near_def(const ops_t *o, const void *got, const double *base, const double *ref,
                     const double *mag, size_t count, const char *what, const char *name)
{
  const double tol = o->dtype == OPS_F32 ? 2e-6 : 1e-13;
  for (size_t k = 0; k < count; k++) {
    double want = (base ? base[k] : 0) + ref[k];
    ck_assert_msg(fabs(at(o, got, k) - want) <= tol * (1 + mag[k] + (base ? fabs(base[k]) : 0)),
                  "%s: %s[%zu] %.12g, by its definition %.12g", what, name, k, at(o, got, k),
                  want);
  }
}

static void convt_gathered_case(const ops_t *o, int n, int max_n, int h, int w, int cin, int cout)
{
  ops_conv_t c = {.kind = OPS_CONVT2X2, .h = h, .w = w, .cin = cin, .cout = cout,
                  .max_n = max_n};
  size_t wsb = 0, e = o->elem;
  ck_assert_int_eq(o->conv_plan(o, &c, &wsb), 0);
  ck_assert_int_eq(o->conv_gathered(o, &c), 1);
  const size_t P = (size_t)n * h * w, nx = P * cin, ny = 4 * P * cout, nw = (size_t)4 * cin * cout;
  double *xv = rvec(nx, 1, 0.1), *wv = rvec(nw, 0.5, 0), *dyv = rvec(ny, 1, 0);
  double *gb = rvec(nw, 1, 0), *bb = rvec(cout, 1, 0);
  void *x = typed(o, xv, nx), *wt = typed(o, wv, nw), *dy = typed(o, dyv, ny), *z = poison(o, ny);
  /* the accumulators' starting values as the dtype holds them */
  void *gbt = typed(o, gb, nw), *bbt = typed(o, bb, cout);
  for (size_t k = 0; k < nw; k++) gb[k] = at(o, gbt, k);
  for (int k = 0; k < cout; k++) bb[k] = at(o, bbt, k);
  void *ws = malloc(wsb + 8);
  host_gather(dy, n, h, w, cout, e, z);
  convt_def_t d = convt_by_definition(o, &c, n, x, wt, dy);
  char what[96];
  snprintf(what, sizeof what, "%s: %d of %d images of %dx%d, %d -> %d", o->name, n, max_n, h, w,
           cin, cout);
  for (int acc = 0; acc < 2; acc++) {
    void *dw_p = acc ? typed(o, gb, nw) : poison(o, nw);
    void *db_p = acc ? typed(o, bb, cout) : poison(o, cout);
    void *dw_g = acc ? typed(o, gb, nw) : poison(o, nw);
    void *db_g = acc ? typed(o, bb, cout) : poison(o, cout);
    ck_assert_int_eq(o->conv_bwd_filter(o, &c, n, x, dy, dw_p, db_p, acc, ws), 0);
    ck_assert_msg(o->conv_bwd_filter_gathered(o, &c, n, x, z, dw_g, db_g, acc, ws) == 0,
                  "%s: %s", what, o->last_error(o));
    ck_assert_msg(memcmp(dw_g, dw_p, nw * e) == 0, "%s: dw differs from the plain op's (acc %d)",
                  what, acc);
    ck_assert_msg(memcmp(db_g, db_p, cout * e) == 0,
                  "%s: db differs from the plain op's (acc %d)", what, acc);
    near_def(o, dw_g, acc ? gb : NULL, d.dw, d.dw_mag, nw, what, "dw");
    near_def(o, db_g, acc ? bb : NULL, d.db, d.db_mag, cout, what, "db");
    free(dw_p), free(db_p), free(dw_g), free(db_g);
  }
  void *dx_p = poison(o, nx), *dx_g = poison(o, nx);
  ck_assert_int_eq(o->conv_bwd_data(o, &c, n, dy, wt, dx_p, ws), 0);
  ck_assert_msg(o->conv_bwd_data_gathered(o, &c, n, z, wt, dx_g, ws) == 0, "%s: %s", what,
                o->last_error(o));
  ck_assert_msg(memcmp(dx_g, dx_p, nx * e) == 0, "%s: dx differs from the plain op's", what);
  near_def(o, dx_g, NULL, d.dx, d.dx_mag, nx, what, "dx");
  convt_def_free(&d);
  free(dx_p), free(dx_g), free(gbt), free(bbt);
  free(xv), free(wv), free(dyv), free(gb), free(bb), free(x), free(wt), free(dy), free(z);
  free(ws);
  o->conv_plan_free(o, &c);
}

START_TEST(convt_gathered_backward)
{
  const ops_t *os[2] = {&o64, &o32};
  for (int k = 0; k < 2; k++) {
    const ops_t *o = os[k];
    convt_gathered_case(o, 2, 2, 3, 5, 7, 3);  /* odd sides and channels */
    convt_gathered_case(o, 1, 1, 1, 1, 2, 1);  /* one pixel, one output channel */
    convt_gathered_case(o, 2, 3, 5, 3, 13, 6); /* a smaller batch than planned */
    convt_gathered_case(o, 2, 2, 50, 50, 5, 64); /* 5000 pixels: the GEMMs in two chunks */
    convt_gathered_case(o, 0, 2, 4, 4, 3, 2);  /* no images: zero gradients, dx untouched */
    /* only a transposed convolution has the order: the others say 0 and are refused */
    ops_conv_t c3 = {.kind = OPS_CONV3X3, .h = 4, .w = 4, .cin = 2, .cout = 2, .max_n = 1};
    ops_conv_t c1 = {.kind = OPS_CONV1X1, .h = 4, .w = 4, .cin = 2, .cout = 2, .max_n = 1};
    size_t wsb = 0;
    ck_assert_int_eq(o->conv_plan(o, &c3, &wsb), 0);
    ck_assert_int_eq(o->conv_plan(o, &c1, &wsb), 0);
    ck_assert_int_eq(o->conv_gathered(o, &c3), 0);
    ck_assert_int_eq(o->conv_gathered(o, &c1), 0);
    double buf[512] = {0};
    ck_assert_int_ne(o->conv_bwd_filter_gathered(o, &c3, 1, buf, buf, buf, NULL, 0, buf), 0);
    ck_assert_ptr_nonnull(strstr(o->last_error(o), "transposed"));
    ck_assert_int_ne(o->conv_bwd_data_gathered(o, &c1, 1, buf, buf, buf, buf), 0);
    ck_assert_ptr_nonnull(strstr(o->last_error(o), "transposed"));
  }
}
END_TEST

/* The 1x1 head on a BatchNorm's apply + ReLU (conv1x1_fwd_bn, conv1x1_bwd_filter_bn) against
 * the definition in f64 (the norm from mean and invstd as bn_apply takes them), in both types:
 * the logits, and the head's weight and bias gradients written and added; refusals. */
START_TEST(head_on_batchnorm)
{
  enum { N = 2, H = 3, W = 5, C = 6, K = 3, P = N * H * W };
  const ops_t *os[2] = {&o64, &o32};
  double *xv = rvec(P * C, 2, 0.2), *wv = rvec(K * C, 0.5, 0), *bv = rvec(K, 1, 0);
  double *gv = rvec(C, 0.5, 1), *betav = rvec(C, 0.5, 0), *dyv = rvec(P * K, 1, 0);
  double saved[2 * C + 1];
  for (int c = 0; c < C; c++) saved[c] = 0.1 * c - 0.2, saved[C + c] = 0.5 + 0.25 * c;
  saved[2 * C] = P;
  for (int k = 0; k < 2; k++) {
    const ops_t *o = os[k];
    ops_conv_t c = {.kind = OPS_CONV1X1, .h = H, .w = W, .cin = C, .cout = K, .max_n = N};
    size_t wsb = 0;
    ck_assert_int_eq(o->conv_plan(o, &c, &wsb), 0);
    ck_assert_int_eq(o->conv1x1_bn_ok(o, &c), 1);
    void *x = typed(o, xv, P * C), *w = typed(o, wv, K * C), *b = typed(o, bv, K);
    void *g = typed(o, gv, C), *beta = typed(o, betav, C), *dy = typed(o, dyv, P * K);
    void *y = poison(o, P * K), *dw = poison(o, K * C), *db = poison(o, K), *ws = malloc(wsb + 8);
    /* a = relu(gamma (x - mean) invstd + beta) as the dtype holds its inputs */
    double a[P * C], ref_y[P * K], ref_dw[K * C] = {0}, ref_db[K] = {0};
    for (int p = 0; p < P; p++)
      for (int ch = 0; ch < C; ch++) {
        double t = at(o, g, ch) * (at(o, x, p * C + ch) - saved[ch]) * saved[C + ch] +
                   at(o, beta, ch);
        a[p * C + ch] = t > 0 ? t : 0;
      }
    for (int p = 0; p < P; p++)
      for (int q = 0; q < K; q++) {
        double s = at(o, b, q);
        for (int ch = 0; ch < C; ch++) s += a[p * C + ch] * at(o, w, q * C + ch);
        ref_y[p * K + q] = s;
        ref_db[q] += at(o, dy, p * K + q);
        for (int ch = 0; ch < C; ch++) ref_dw[q * C + ch] += at(o, dy, p * K + q) * a[p * C + ch];
      }
    const double tol = o->dtype == OPS_F32 ? 1e-5 : 1e-12;
    ck_assert_msg(o->conv1x1_fwd_bn(o, &c, N, x, saved, g, beta, w, b, y, ws) == 0, "%s",
                  o->last_error(o));
    for (int i = 0; i < P * K; i++)
      ck_assert_msg(fabs(at(o, y, i) - ref_y[i]) <= tol * (1 + fabs(ref_y[i])),
                    "%s: logit %d %.12g, by its definition %.12g", o->name, i, at(o, y, i),
                    ref_y[i]);
    for (int acc = 0; acc < 2; acc++) {
      ck_assert_msg(o->conv1x1_bwd_filter_bn(o, &c, N, x, saved, g, beta, dy, dw, db, acc, ws) == 0,
                    "%s", o->last_error(o));
      for (int i = 0; i < K * C; i++)
        ck_assert_msg(fabs(at(o, dw, i) - (1 + acc) * ref_dw[i]) <= tol * (1 + fabs(ref_dw[i])),
                      "%s: dw %d %.12g, by its definition %.12g (acc %d)", o->name, i,
                      at(o, dw, i), (1 + acc) * ref_dw[i], acc);
      for (int q = 0; q < K; q++)
        ck_assert_msg(fabs(at(o, db, q) - (1 + acc) * ref_db[q]) <= tol * (1 + fabs(ref_db[q])),
                      "%s: db %d (acc %d)", o->name, q, acc);
    }
    /* a 3x3 convolution, or a 1x1 one with more outputs than OPS_BN_1X1_MOST_K: refused */
    ops_conv_t c3 = {.kind = OPS_CONV3X3, .h = H, .w = W, .cin = C, .cout = K, .max_n = N};
    ops_conv_t wide = {.kind = OPS_CONV1X1, .h = H, .w = W, .cin = C,
                       .cout = OPS_BN_1X1_MOST_K + 1, .max_n = N};
    ck_assert_int_eq(o->conv_plan(o, &c3, &wsb), 0);
    ck_assert_int_eq(o->conv_plan(o, &wide, &wsb), 0);
    ck_assert_int_eq(o->conv1x1_bn_ok(o, &c3), 0);
    ck_assert_int_eq(o->conv1x1_bn_ok(o, &wide), 0);
    ck_assert_int_ne(o->conv1x1_fwd_bn(o, &c3, N, x, saved, g, beta, w, NULL, y, ws), 0);
    ck_assert_ptr_nonnull(strstr(o->last_error(o), "1x1"));
    ck_assert_int_ne(o->conv1x1_bwd_filter_bn(o, &wide, N, x, saved, g, beta, dy, dw, db, 0, ws),
                     0);
    ck_assert_ptr_nonnull(strstr(o->last_error(o), "1x1"));
    /* the norm's saved statistics, gamma and beta are required: never the plain convolution */
    ck_assert_int_ne(o->conv1x1_fwd_bn(o, &c, N, x, NULL, g, beta, w, b, y, ws), 0);
    ck_assert_ptr_nonnull(strstr(o->last_error(o), "gamma and beta"));
    ck_assert_int_ne(o->conv1x1_bwd_filter_bn(o, &c, N, x, saved, g, NULL, dy, dw, db, 0, ws), 0);
    ck_assert_ptr_nonnull(strstr(o->last_error(o), "gamma and beta"));
    /* the BatchNorm backward through the head: its output gradient, weights and 1 to
     * OPS_BN_1X1_MOST_K classes are required */
    ops_relu_t rm = {.y = NULL, .gamma = g, .beta = beta};
    double sums[2 * C];
    void *dgm = poison(o, C), *dbt = poison(o, C), *dx = poison(o, P * C);
    ck_assert_int_ne(o->bn_bwd_reduce_1x1(o, NULL, w, K, &rm, x, P, C, saved, sums, dgm, dbt, 0),
                     0);
    ck_assert_ptr_nonnull(strstr(o->last_error(o), "1x1 head"));
    ck_assert_int_ne(o->bn_bwd_apply_1x1(o, dy, NULL, K, &rm, x, P, C, saved, sums, g, dx), 0);
    ck_assert_ptr_nonnull(strstr(o->last_error(o), "1x1 head"));
    ck_assert_int_ne(o->bn_bwd_reduce_1x1(o, dy, w, 0, &rm, x, P, C, saved, sums, dgm, dbt, 0), 0);
    ck_assert_int_ne(
        o->bn_bwd_apply_1x1(o, dy, w, OPS_BN_1X1_MOST_K + 1, &rm, x, P, C, saved, sums, g, dx), 0);
    ck_assert_ptr_nonnull(strstr(o->last_error(o), "classes"));
    free(dgm), free(dbt), free(dx);
    free(x), free(w), free(b), free(g), free(beta), free(dy), free(y), free(dw), free(db);
    free(ws);
  }
  free(xv), free(wv), free(bv), free(gv), free(betav), free(dyv);
}
END_TEST

/* ops.h head_train_1x1 on the CPU: its four ops in their order, the same bits (the logits, their
 * gradient and loss, the head's weight gradient, the BatchNorm's sums, dgamma and dbeta), written
 * and added; a head the op does not take refused. */
START_TEST(head_train_is_its_ops)
{
  enum { N = 2, H = 3, W = 5, C = 6, K = 3, P = N * H * W, IGNORE = 255 };
  const ops_t *os[2] = {&o64, &o32};
  double *xv = rvec(P * C, 2, 0.2), *wv = rvec(K * C, 0.5, 0), *bv = rvec(K, 1, 0);
  double *gv = rvec(C, 0.5, 1), *betav = rvec(C, 0.5, 0);
  int32_t lab[P];
  for (int p = 0; p < P; p++) lab[p] = p % 5 == 2 ? IGNORE : p % K;
  double saved[2 * C + 1];
  for (int c = 0; c < C; c++) saved[c] = 0.1 * c - 0.2, saved[C + c] = 0.5 + 0.25 * c;
  saved[2 * C] = P;
  for (int k = 0; k < 2; k++) {
    const ops_t *o = os[k];
    const size_t e = o->elem;
    ops_conv_t c = {.kind = OPS_CONV1X1, .h = H, .w = W, .cin = C, .cout = K, .max_n = N};
    size_t wsb = 0;
    ck_assert_int_eq(o->conv_plan(o, &c, &wsb), 0);
    void *x = typed(o, xv, P * C), *w = typed(o, wv, K * C), *b = typed(o, bv, K);
    void *g = typed(o, gv, C), *beta = typed(o, betav, C), *ws = malloc(wsb + 8);
    void *y[2], *d[2], *dw[2], *db[2], *dgm[2], *dbt[2];
    double sums[2][2 * C], out[2][2];
    for (int r = 0; r < 2; r++) {
      y[r] = poison(o, P * K), d[r] = poison(o, P * K), dw[r] = poison(o, K * C);
      db[r] = poison(o, K), dgm[r] = poison(o, C), dbt[r] = poison(o, C);
    }
    ops_relu_t rm = {.y = NULL, .gamma = g, .beta = beta};
    for (int acc = 0; acc < 2; acc++) {
      /* r = 0: the four ops; r = 1: the one op */
      ck_assert_int_eq(o->conv1x1_fwd_bn(o, &c, N, x, saved, g, beta, w, b, y[0], ws), 0);
      ck_assert_int_eq(o->softmax_ce_async(o, y[0], lab, P, K, IGNORE, 8, 0, d[0], NULL, out[0]),
                       0);
      ck_assert_int_eq(
          o->conv1x1_bwd_filter_bn(o, &c, N, x, saved, g, beta, d[0], dw[0], db[0], acc, ws), 0);
      ck_assert_int_eq(o->bn_bwd_reduce_1x1(o, d[0], w, K, &rm, x, P, C, saved, sums[0], dgm[0],
                                            dbt[0], acc),
                       0);
      ck_assert_msg(o->head_train_1x1(o, &c, N, x, saved, g, beta, w, b, lab, IGNORE, 8, 0, y[1],
                                      d[1], out[1], dw[1], db[1], sums[1], dgm[1], dbt[1], acc,
                                      ws) == 0,
                    "%s", o->last_error(o));
      ck_assert(memcmp(y[0], y[1], P * K * e) == 0 && memcmp(d[0], d[1], P * K * e) == 0);
      ck_assert(memcmp(dw[0], dw[1], K * C * e) == 0 && memcmp(db[0], db[1], K * e) == 0);
      ck_assert(memcmp(dgm[0], dgm[1], C * e) == 0 && memcmp(dbt[0], dbt[1], C * e) == 0);
      ck_assert(memcmp(sums[0], sums[1], sizeof sums[0]) == 0);
      ck_assert(memcmp(out[0], out[1], sizeof out[0]) == 0 && out[1][1] == P - P / 5);
    }
    /* a 3x3 convolution: refused by its first op, nothing done */
    ops_conv_t c3 = {.kind = OPS_CONV3X3, .h = H, .w = W, .cin = C, .cout = K, .max_n = N};
    ck_assert_int_eq(o->conv_plan(o, &c3, &wsb), 0);
    ck_assert_int_ne(o->head_train_1x1(o, &c3, N, x, saved, g, beta, w, b, lab, IGNORE, 8, 0,
                                       y[1], d[1], out[1], dw[1], db[1], sums[1], dgm[1], dbt[1],
                                       0, ws),
                     0);
    ck_assert_ptr_nonnull(strstr(o->last_error(o), "1x1"));
    for (int r = 0; r < 2; r++) free(y[r]), free(d[r]), free(dw[r]), free(db[r]), free(dgm[r]),
                                free(dbt[r]);
    free(x), free(w), free(b), free(g), free(beta), free(ws);
  }
  free(xv), free(wv), free(bv), free(gv), free(betav);
}
END_TEST

typedef struct {
  double *z;
  int32_t *lab;
  size_t P;
  int K;
} ce_case_t;

static double ce_loss(void *p)
{
  ce_case_t *t = p;
  double sum;
  long cnt;
  ck_assert_int_eq(o64.softmax_ce(&o64, t->z, t->lab, t->P, t->K, 7, 1, 0, NULL, NULL, &sum,
                                  &cnt), 0);
  return sum / cnt;
}

START_TEST(softmax_ce_grad)
{
  ce_case_t t = {.P = 12, .K = 4};
  t.z = rvec(t.P * t.K, 3, 0);
  t.lab = malloc(t.P * sizeof *t.lab);
  for (size_t p = 0; p < t.P; p++) t.lab[p] = p % 5 == 2 ? 7 : (int32_t)(p % 4);
  double *d = rvec(t.P * t.K, 0, 0), sum;
  long cnt;
  int32_t pred[12];
  ck_assert_int_eq(o64.softmax_ce(&o64, t.z, t.lab, t.P, t.K, 7, 1, 0, d, pred, &sum, &cnt), 0);
  ck_assert_int_eq(cnt, 10); /* pixels 2 and 7 are ignored */
  /* loss against a direct f64 evaluation */
  double ref = 0;
  for (size_t p = 0; p < t.P; p++) {
    if (t.lab[p] == 7) continue;
    double se = 0;
    for (int k = 0; k < t.K; k++) se += exp(t.z[p * t.K + k]);
    ref += log(se) - t.z[p * t.K + t.lab[p]];
    int best = 0;
    for (int k = 1; k < t.K; k++)
      if (t.z[p * t.K + k] > t.z[p * t.K + best]) best = k;
    ck_assert_int_eq(pred[p], best);
  }
  ck_assert_double_eq_tol(sum, ref, 1e-12);
  fd_check(ce_loss, &t, t.z, t.P * t.K, d, "dlogits");
  for (int k = 0; k < t.K; k++) ck_assert(d[2 * t.K + k] == 0);
  /* a label outside [0, K) that is not the ignore index is an error naming it */
  t.lab[3] = 9;
  ck_assert_int_ne(o64.softmax_ce(&o64, t.z, t.lab, t.P, t.K, 7, 1, 0, d, NULL, &sum, &cnt), 0);
  ck_assert_ptr_nonnull(strstr(o64.last_error(&o64), "label 9"));
  free(t.z), free(t.lab), free(d);
}
END_TEST

START_TEST(casts_round_trip)
{
  float src[5] = {1.5f, -2.25f, 3e-8f, 1e20f, -0.0f}, back[5] = {1, 1, 1, 1, 1};
  double dst[5];
  ck_assert_int_eq(o64.from_f32(&o64, src, 5, dst), 0);
  ck_assert_int_eq(o64.to_f32(&o64, dst, 5, back, 1), 0);
  for (int i = 0; i < 5; i++) ck_assert_float_eq(back[i], 1 + src[i]);
  char err[128];
  ops_t o;
  ck_assert_int_ne(ops_cpu_init(&o, OPS_BF16, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "fp32"));
}
END_TEST

static Suite *make_ops_suite(const suite_env_t *env)
{
  Suite *s = suite_create("ops");
  TCase *tc = SUITE_CASE(s, "gradients", conv3x3_grad, conv1x1_grad, convt2x2_grad, bn_grad,
                         bn_relu_grad, gn_grad, gn_relu_grad, relu_grad, maxpool_grad, concat_grad,
                         softmax_ce_grad);
  tcase_add_checked_fixture(tc, setup, NULL);
  tc = SUITE_CASE(s, "references", gemm_f32_all_transposes, conv_f32_matches_f64, bn_large_mean,
                  bn_eval_uses_running, head_on_batchnorm, head_train_is_its_ops,
                  casts_round_trip);
  tcase_add_checked_fixture(tc, setup, NULL);
  tc = SUITE_CASE(s, "syncbn", syncbn_equal_halves, syncbn_unequal_halves, syncbn_empty_half);
  tcase_add_checked_fixture(tc, setup, NULL);
  tc = SUITE_CASE(s, "gathered", concat_split_gathered, convt_gathered_backward);
  tcase_add_checked_fixture(tc, setup, NULL);
  return s;
}

SUITE_MAIN("check_ops", make_ops_suite, SUITE_CPU_ONLY)
