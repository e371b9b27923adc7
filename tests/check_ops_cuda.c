/* check_ops_cuda.c — every CUDA op against the CPU reference (kernels/..._cpu.c) on random data,
 * in f32, bf16 and f16; the CPU computes in f32 on the same (rounded) inputs. Outputs are poisoned
 * with NaN first, so an element the GPU never wrote fails. Exits 77 (automake: SKIP) when there is
 * no CUDA GPU; CUDA is touched only inside the tests and a forked probe, never in main(). */
#include "config.h"

#include "kernels/conv_fused_rank.h"
#include "kernels/optim_cpu.h"
#include "tests/ops_cuda_testutil.h"
#include "tests/suite_main.h"

/* ---- element-wise and data movement ---- */

START_TEST(test_casts)
{
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    size_t n = 1003; /* not a multiple of the vector width: the tail path too */
    float *src = malloc(n * sizeof *src);
    keep(src);
    for (size_t i = 0; i < n; i++) src[i] = 3 * rnd(); /* not rounded: the cast must round */
    float *dsrc = up_raw(src, n * 4), *ref = hvec(n, 0, 0);
    for (size_t i = 0; i < n; i++) ref[i] = to_dt(src[i]);
    void *low = dalloc(n * gpu.elem);
    GPU_OK(gpu.from_f32(&gpu, dsrc, n, low));
    EXACT(down(low, n), ref, n, "from_f32 (round to nearest even)");
    float *acc = hvec(n, 1, 0), *dacc = up_raw(acc, n * 4);
    GPU_OK(gpu.to_f32(&gpu, low, n, dacc, 1));
    float *got = down_raw(dacc, n * 4);
    for (size_t i = 0; i < n; i++) ref[i] = acc[i] + to_dt(src[i]);
    EXACT(got, ref, n, "to_f32 accumulate");
    GPU_OK(gpu.to_f32(&gpu, (char *)low + gpu.elem, n - 1, dacc, 0)); /* unaligned source */
    got = down_raw(dacc, n * 4);
    for (size_t i = 0; i + 1 < n; i++) ref[i] = to_dt(src[i + 1]);
    EXACT(got, ref, n - 1, "to_f32 unaligned");
    GPU_OK(gpu.fill_zero(&gpu, low, n * gpu.elem));
    float *z = down(low, n);
    for (size_t i = 0; i < n; i++) ck_assert(z[i] == 0);
  }
}
END_TEST

START_TEST(test_relu)
{
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    for (int off = 0; off < 2; off++) { /* off = 1: unaligned, element by element */
      size_t n = 4099 - off;
      float *x = hvec(n + 1, 1, 0), *dy = hvec(n + 1, 1, 0);
      float *ry = hvec(n, 0, 0), *rdx = hvec(n, 0, 0);
      CPU_OK(cpu.relu_fwd(&cpu, x + off, n, ry));
      CPU_OK(cpu.relu_bwd(&cpu, dy + off, ry, n, rdx));
      size_t es = gpu.elem;
      char *dx_ = up(x, n + 1), *ddy = up(dy, n + 1);
      void *y = dalloc(n * es), *dx = dalloc(n * es);
      GPU_OK(gpu.relu_fwd(&gpu, dx_ + off * es, n, y));
      GPU_OK(gpu.relu_bwd(&gpu, ddy + off * es, y, n, dx));
      EXACT(down(y, n), ry, n, "relu forward");
      EXACT(down(dx, n), rdx, n, "relu backward");
    }
  }
}
END_TEST

START_TEST(test_maxpool)
{
  const int shapes[][4] = {{2, 6, 10, 16}, {3, 4, 6, 5}}; /* n, h, w, C: vector and scalar */
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    for (int s = 0; s < 2; s++) {
      int n = shapes[s][0], h = shapes[s][1], w = shapes[s][2], C = shapes[s][3];
      size_t ni = (size_t)n * h * w * C, no = ni / 4;
      float *x = hvec(ni, 1, 0), *dy = hvec(no, 1, 0), *ry = hvec(no, 0, 0);
      float *rdx = hvec(ni, 0, 0), *base = hvec(ni, 1, 0), *racc = hvec(ni, 0, 0);
      uint8_t *rarg = malloc(no);
      keep(rarg);
      CPU_OK(cpu.maxpool_fwd(&cpu, x, n, h, w, C, ry, rarg));
      CPU_OK(cpu.maxpool_bwd(&cpu, dy, rarg, n, h, w, C, rdx, 0));
      memcpy(racc, base, ni * sizeof *racc);
      CPU_OK(cpu.maxpool_bwd(&cpu, dy, rarg, n, h, w, C, racc, 1));
      for (size_t i = 0; i < ni; i++) racc[i] = to_dt(racc[i]);
      void *dx_ = up(x, ni), *y = dalloc(no * gpu.elem), *ddy = up(dy, no);
      uint8_t *arg = dalloc(no);
      void *dx = dalloc(ni * gpu.elem), *dacc = up(base, ni);
      GPU_OK(gpu.maxpool_fwd(&gpu, dx_, n, h, w, C, y, arg));
      GPU_OK(gpu.maxpool_bwd(&gpu, ddy, arg, n, h, w, C, dx, 0));
      GPU_OK(gpu.maxpool_bwd(&gpu, ddy, arg, n, h, w, C, dacc, 1));
      EXACT(down(y, no), ry, no, "max-pool forward");
      uint8_t *garg = down_raw(arg, no);
      EXACT_INT(garg, rarg, no, "max-pool argmax");
      EXACT(down(dx, ni), rdx, ni, "max-pool backward");
      EXACT(down(dacc, ni), racc, ni, "max-pool backward (accumulate)");
    }
  }
}
END_TEST

/* The apply with the pool fused: bit for bit the apply (packed, or into rows 2C apart with the
 * other channels untouched) followed by the max-pool of its output, on the GPU; the ReLU's zeros
 * make ties, which go to the first as in the pool. Odd sizes and narrow rows are refused. */
START_TEST(test_bn_apply_pool)
{
  const int shapes[][4] = {{2, 6, 10, 16}, {3, 4, 6, 5}}; /* n, h, w, C: vector and scalar */
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    for (int s = 0; s < 2; s++) {
      int n = shapes[s][0], h = shapes[s][1], w = shapes[s][2], C = shapes[s][3];
      size_t P = (size_t)n * h * w, no = P / 4 * C, e = gpu.elem;
      void *gx = up(hvec(P * C, 1, 0.2f), P * C), *gg = up(hvec(C, 0.5f, 1), C);
      void *gb = up(hvec(C, 0.3f, 0), C), *gpk = dalloc(P * C * e), *gp2 = dalloc(no * e);
      double *gst = dalloc((2 * C + 1) * 8), *gsv = dalloc((2 * C + 1) * 8);
      uint8_t *ga2 = dalloc(no);
      GPU_OK(gpu.bn_stats_finalize(&gpu, gx, P, C, 1e-5, 0.1, NULL, NULL, gst, gsv));
      GPU_OK(gpu.bn_apply(&gpu, gx, P, C, gsv, gg, gb, 1, gpk));
      GPU_OK(gpu.maxpool_fwd(&gpu, gpk, n, h, w, C, gp2, ga2));
      unsigned char *yref = down_raw(gpk, P * C * e), *pref = down_raw(gp2, no * e);
      unsigned char *aref = down_raw(ga2, no);
      int zeros = 0;
      float *yf = down(gpk, P * C);
      for (size_t i = 0; i < P * C; i++) zeros += yf[i] == 0;
      ck_assert_msg(zeros > 0, "no ReLU zeros: the ties are not exercised");
      for (int k = 0; k < 2; k++) {
        size_t ldy = k ? 2 * (size_t)C : (size_t)C;
        void *gy = up(hvec(P * ldy, 1, 0), P * ldy), *gp = dalloc(no * e);
        uint8_t *ga = dalloc(no);
        unsigned char *y0 = down_raw(gy, P * ldy * e);
        GPU_OK(gpu.bn_apply_pool(&gpu, gx, n, h, w, C, gsv, gg, gb, 1, gy, ldy, gp, ga));
        unsigned char *y1 = down_raw(gy, P * ldy * e);
        for (size_t p = 0; p < P; p++) {
          ck_assert_msg(memcmp(y1 + p * ldy * e, yref + p * C * e, C * e) == 0,
                        "%s apply with the pool, rows %zu apart: row %zu differs from the apply",
                        gpu.name, ldy, p);
          ck_assert_msg(memcmp(y1 + (p * ldy + C) * e, y0 + (p * ldy + C) * e, (ldy - C) * e) == 0,
                        "%s apply with the pool wrote past its channels (row %zu)", gpu.name, p);
        }
        ck_assert_msg(memcmp(down_raw(gp, no * e), pref, no * e) == 0,
                      "%s apply with the pool: pooled values differ from the max-pool's", gpu.name);
        ck_assert_msg(memcmp(down_raw(ga, no), aref, no) == 0,
                      "%s apply with the pool: winners differ from the max-pool's", gpu.name);
      }
      ck_assert_int_ne(gpu.bn_apply_pool(&gpu, gx, n, h - 1, w, C, gsv, gg, gb, 1, gpk, C, gp2,
                                         ga2), 0);
      ck_assert_int_ne(gpu.bn_apply_pool(&gpu, gx, n, h, w, C, gsv, gg, gb, 1, gpk, C - 1, gp2,
                                         ga2), 0);
    }
  }
}
END_TEST

START_TEST(test_concat)
{
  const int cs[][2] = {{32, 16}, {8, 5}, {3, 13}};
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    for (int s = 0; s < 3; s++) {
      int ca = cs[s][0], cb = cs[s][1];
      size_t P = 77;
      float *a = hvec(P * ca, 1, 0), *b = hvec(P * cb, 1, 0), *ry = hvec(P * (ca + cb), 0, 0);
      float *dy = hvec(P * (ca + cb), 1, 0), *base = hvec(P * ca, 1, 0);
      float *rda = hvec(P * ca, 0, 0), *rdb = hvec(P * cb, 0, 0);
      CPU_OK(cpu.concat_fwd(&cpu, a, ca, b, cb, P, ry));
      memcpy(rda, base, P * ca * sizeof *rda);
      CPU_OK(cpu.concat_bwd(&cpu, dy, ca, cb, P, rda, 1, rdb));
      for (size_t i = 0; i < P * ca; i++) rda[i] = to_dt(rda[i]);
      void *ga = up(a, P * ca), *gb = up(b, P * cb), *gy = dalloc(P * (ca + cb) * gpu.elem);
      void *gdy = up(dy, P * (ca + cb)), *gda = up(base, P * ca), *gdb = dalloc(P * cb * gpu.elem);
      GPU_OK(gpu.concat_fwd(&gpu, ga, ca, gb, cb, P, gy));
      GPU_OK(gpu.concat_bwd(&gpu, gdy, ca, cb, P, gda, 1, gdb));
      EXACT(down(gy, P * (ca + cb)), ry, P * (ca + cb), "concat");
      EXACT(down(gda, P * ca), rda, P * ca, "concat backward (a, accumulate)");
      EXACT(down(gdb, P * cb), rdb, P * cb, "concat backward (b)");
      CPU_OK(cpu.concat_bwd(&cpu, dy, ca, cb, P, rda, 0, rdb));
      GPU_OK(gpu.concat_bwd(&gpu, gdy, ca, cb, P, gda, 0, gdb));
      EXACT(down(gda, P * ca), rda, P * ca, "concat backward (a)");
      /* without a: b's part only, the first ca channels as they were */
      float *z = hvec(P * (ca + cb), 1, 0), *rz = hvec(P * (ca + cb), 0, 0);
      memcpy(rz, z, P * (ca + cb) * sizeof *rz);
      CPU_OK(cpu.concat_fwd(&cpu, NULL, ca, b, cb, P, rz));
      for (size_t p = 0; p < P; p++)
        for (int c = 0; c < ca + cb; c++)
          ck_assert(rz[p * (ca + cb) + c] ==
                    (c < ca ? z[p * (ca + cb) + c] : ry[p * (ca + cb) + c]));
      void *gz = up(z, P * (ca + cb));
      GPU_OK(gpu.concat_fwd(&gpu, NULL, ca, gb, cb, P, gz));
      EXACT(down(gz, P * (ca + cb)), rz, P * (ca + cb), "concat of b's part only");
    }
  }
}
END_TEST

/* The split with b's part in the up-convolution's gathered order (ops.h concat_bwd_gathered)
 * against the CPU's (itself checked against concat_bwd and a gather of the test's own in
 * check_ops): a move, so the same bits; packs of 16 bytes where both parts allow, single
 * elements elsewhere; da written and added. */
START_TEST(test_concat_gathered)
{
  const int cs[][5] = {{2, 6, 10, 32, 16}, {1, 4, 14, 8, 5}, {3, 2, 2, 3, 13}, {2, 8, 2, 64, 64}};
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    for (int k = 0; k < 4; k++) {
      const int n = cs[k][0], H = cs[k][1], W = cs[k][2], ca = cs[k][3], cb = cs[k][4];
      const size_t P = (size_t)n * H * W;
      char what[96];
      snprintf(what, sizeof what, "gathered split, %d images of %dx%d, %d + %d channels", n, H,
               W, ca, cb);
      float *dy = hvec(P * (ca + cb), 1, 0), *base = hvec(P * ca, 1, 0);
      float *rda = hvec(P * ca, 0, 0), *rz = hvec(P * cb, 0, 0);
      void *gdy = up(dy, P * (ca + cb));
      for (int acc = 0; acc < 2; acc++) {
        memcpy(rda, base, P * ca * sizeof *rda);
        CPU_OK(cpu.concat_bwd_gathered(&cpu, dy, ca, cb, n, H, W, rda, acc, rz));
        for (size_t i = 0; i < P * ca; i++) rda[i] = to_dt(rda[i]);
        void *gda = up(base, P * ca), *gz = dalloc(P * cb * gpu.elem);
        GPU_OK(gpu.concat_bwd_gathered(&gpu, gdy, ca, cb, n, H, W, gda, acc, gz));
        EXACT(down(gz, P * cb), rz, P * cb, what);
        EXACT(down(gda, P * ca), rda, P * ca,
              acc ? "its first part (accumulate)" : "its first part");
      }
    }
    /* a side that is not even: refused, nothing launched */
    void *g = dalloc(64 * gpu.elem);
    ck_assert_int_ne(gpu.concat_bwd_gathered(&gpu, g, 2, 2, 1, 3, 4, g, 0, g), 0);
    ck_assert_ptr_nonnull(strstr(gpu.last_error(&gpu), "even"));
  }
}
END_TEST

/* The ReLU's mask recomputed from x (ops_relu_t without y, what the model runs) against the mask
 * of the GPU's own forward output y: the same bits in dx, dgamma, dbeta (and the BN sums). rows:
 * pixels per sample (BN: all of them, n = 1). */
static void same_with_recomputed_mask(int group, size_t rows, int C, int n, int G, void *gdy,
                                      void *gy, void *gx, double *gsaved, void *gg, void *gb)
{
  size_t cnt = rows * (size_t)n * C;
  ops_relu_t keep = {.y = gy}, again = {.gamma = gg, .beta = gb};
  const ops_relu_t *masks[2] = {&keep, &again};
  void *dx[2], *dg[2], *db[2];
  double *sums[2];
  for (int k = 0; k < 2; k++) {
    dx[k] = dalloc(cnt * gpu.elem), dg[k] = dalloc(C * gpu.elem), db[k] = dalloc(C * gpu.elem);
    sums[k] = dalloc(2 * (size_t)C * 8);
    if (group) {
      GPU_OK(gpu.gn_bwd(&gpu, gdy, masks[k], gx, n, rows, C, G, gsaved, gg, dx[k], dg[k], db[k],
                        0));
    } else {
      GPU_OK(gpu.bn_bwd_reduce(&gpu, gdy, masks[k], gx, rows, C, gsaved, sums[k], dg[k], db[k], 0));
      GPU_OK(gpu.bn_bwd_apply(&gpu, gdy, masks[k], gx, rows, C, gsaved, sums[k], gg, dx[k]));
    }
  }
  ck_assert_msg(memcmp(down_raw(dx[0], cnt * gpu.elem), down_raw(dx[1], cnt * gpu.elem),
                       cnt * gpu.elem) == 0,
                "%s %s: dx differs with the recomputed ReLU mask", gpu.name, group ? "GN" : "BN");
  ck_assert(memcmp(down_raw(dg[0], C * gpu.elem), down_raw(dg[1], C * gpu.elem), C * gpu.elem) == 0);
  ck_assert(memcmp(down_raw(db[0], C * gpu.elem), down_raw(db[1], C * gpu.elem), C * gpu.elem) == 0);
  if (!group)
    ck_assert(memcmp(down_raw(sums[0], 2 * (size_t)C * 8), down_raw(sums[1], 2 * (size_t)C * 8),
                     2 * (size_t)C * 8) == 0);
  ops_relu_t bad = {.gamma = gg};
  ck_assert_int_ne(group ? gpu.gn_bwd(&gpu, gdy, &bad, gx, n, rows, C, G, gsaved, gg, dx[0], dg[0],
                                      db[0], 0)
                         : gpu.bn_bwd_apply(&gpu, gdy, &bad, gx, rows, C, gsaved, sums[0], gg,
                                            dx[0]),
                   0);
}

/* ---- BatchNorm: each GPU op is fed the CPU's inputs, so every op is checked on its own ---- */

static void bn_case(size_t P, int C, float offset)
{
  size_t n = P * C;
  /* activations with a mean far from 0 (offset) test the variance's accuracy */
  float *x = hvec(n, 2, offset), *gamma = hvec(C, 0.5f, 1), *beta = hvec(C, 0.5f, 0);
  float *dy = hvec(n, 1, 0), *y = hvec(n, 0, 0), *dx = hvec(n, 0, 0);
  float *dg = hvec(C, 0, 0), *db = hvec(C, 0, 0), *rm = hvec(C, 0.1f, 0), *rv = hvec(C, 0.1f, 1);
  double *stats = calloc(2 * C + 1, 8), *saved = calloc(2 * C + 1, 8), *sums = calloc(2 * C, 8);
  keep(stats), keep(saved), keep(sums);
  float *rm0 = hvec(C, 0, 0), *rv0 = hvec(C, 0, 0);
  memcpy(rm0, rm, C * 4), memcpy(rv0, rv, C * 4);
  CPU_OK(cpu.bn_stats(&cpu, x, P, C, stats));
  CPU_OK(cpu.bn_finalize(&cpu, stats, C, 1e-5, 0.1, rm, rv, saved));
  CPU_OK(cpu.bn_apply(&cpu, x, P, C, saved, gamma, beta, 1, y));
  for (size_t i = 0; i < n; i++) y[i] = to_dt(y[i]); /* the mask the GPU will see */
  ops_relu_t cmask = {.y = y};
  CPU_OK(cpu.bn_bwd_reduce(&cpu, dy, &cmask, x, P, C, saved, sums, dg, db, 0));
  CPU_OK(cpu.bn_bwd_apply(&cpu, dy, &cmask, x, P, C, saved, sums, gamma, dx));

  void *gx = up(x, n), *gg = up(gamma, C), *gb = up(beta, C), *gdy = up(dy, n);
  void *gy = dalloc(n * gpu.elem), *gdx = dalloc(n * gpu.elem);
  ops_relu_t gmask = {.y = up(y, n)};
  void *gdg = dalloc(C * gpu.elem), *gdb = dalloc(C * gpu.elem);
  double *gstats = dalloc((2 * C + 1) * 8), *gsums = dalloc(2 * C * 8);
  double *gsaved = up_raw(saved, (2 * C + 1) * 8), *gsaved2 = dalloc((2 * C + 1) * 8);
  float *grm = up_raw(rm0, C * 4), *grv = up_raw(rv0, C * 4);
  GPU_OK(gpu.bn_stats(&gpu, gx, P, C, gstats));
  double *hs = down_raw(gstats, (2 * C + 1) * 8);
  /* f32 over at most 32 rows per thread, f64 beyond */
  ck_assert_msg(rel_err64(hs, stats, 2 * C + 1) < 1e-6, "%s BN statistics: relative error %g",
                gpu.name, rel_err64(hs, stats, 2 * C + 1));
  GPU_OK(gpu.bn_finalize(&gpu, gstats, C, 1e-5, 0.1, grm, grv, gsaved2));
  double *hsv = down_raw(gsaved2, (2 * C + 1) * 8);
  ck_assert_msg(rel_err64(hsv, saved, 2 * C + 1) < 1e-5, "%s BN finalize: relative error %g",
                gpu.name, rel_err64(hsv, saved, 2 * C + 1));
  CLOSE((float *)down_raw(grm, C * 4), rm, C, 1e-6, "BN running mean");
  CLOSE((float *)down_raw(grv, C * 4), rv, C, 1e-6, "BN running var");
  /* statistics and finalisation fused (no SyncBN): the CPU reference composes the two; on the
   * GPU the fused pass gives the separate passes' bits */
  {
    double *fstats = dalloc((2 * C + 1) * 8), *fsaved = dalloc((2 * C + 1) * 8);
    float *frm = up_raw(rm0, C * 4), *frv = up_raw(rv0, C * 4);
    GPU_OK(gpu.bn_stats_finalize(&gpu, gx, P, C, 1e-5, 0.1, frm, frv, fstats, fsaved));
    double *fs = down_raw(fstats, (2 * C + 1) * 8), *fsv = down_raw(fsaved, (2 * C + 1) * 8);
    ck_assert_msg(memcmp(fs, hs, (2 * C + 1) * 8) == 0, "%s fused BN statistics differ", gpu.name);
    ck_assert_msg(memcmp(fsv, hsv, (2 * C + 1) * 8) == 0, "%s fused BN saved differ", gpu.name);
    ck_assert(memcmp(down_raw(frm, C * 4), down_raw(grm, C * 4), C * 4) == 0);
    ck_assert(memcmp(down_raw(frv, C * 4), down_raw(grv, C * 4), C * 4) == 0);
    float *crm = hvec(C, 0, 0), *crv = hvec(C, 0, 0);
    memcpy(crm, rm0, C * 4), memcpy(crv, rv0, C * 4);
    double *cst = calloc(2 * C + 1, 8), *csv = calloc(2 * C + 1, 8);
    keep(cst), keep(csv);
    CPU_OK(cpu.bn_stats_finalize(&cpu, x, P, C, 1e-5, 0.1, crm, crv, cst, csv));
    ck_assert(memcmp(cst, stats, (2 * C + 1) * 8) == 0 && memcmp(csv, saved, (2 * C + 1) * 8) == 0);
    ck_assert(memcmp(crm, rm, C * 4) == 0 && memcmp(crv, rv, C * 4) == 0);
    ck_assert_msg(rel_err64(fsv, saved, 2 * C + 1) < 1e-5, "%s fused BN: relative error %g",
                  gpu.name, rel_err64(fsv, saved, 2 * C + 1));
  }
  GPU_OK(gpu.bn_apply(&gpu, gx, P, C, gsaved, gg, gb, 1, gy));
  CLOSE(down(gy, n), y, n, tol_elem() * 4, "BN apply + ReLU");
  same_with_recomputed_mask(0, P, C, 1, 1, gdy, gy, gx, gsaved, gg, gb);
  GPU_OK(gpu.bn_bwd_reduce(&gpu, gdy, &gmask, gx, P, C, gsaved, gsums, gdg, gdb, 0));
  double *hsum = down_raw(gsums, 2 * C * 8);
  ck_assert_msg(rel_err64(hsum, sums, 2 * C) < 1e-5, "%s BN backward sums: relative error %g",
                gpu.name, rel_err64(hsum, sums, 2 * C));
  CLOSE(down(gdg, C), dg, C, tol_elem() + 1e-5, "BN dgamma");
  CLOSE(down(gdb, C), db, C, tol_elem() + 1e-5, "BN dbeta");
  GPU_OK(gpu.bn_bwd_reduce(&gpu, gdy, &gmask, gx, P, C, gsaved, gsums, gdg, gdb, 1));
  for (int c = 0; c < C; c++) dg[c] *= 2, db[c] *= 2;
  CLOSE(down(gdg, C), dg, C, 2 * tol_elem() + 1e-5, "BN dgamma (accumulate)");
  double *gsums_cpu = up_raw(sums, 2 * C * 8);
  GPU_OK(gpu.bn_bwd_apply(&gpu, gdy, &gmask, gx, P, C, gsaved, gsums_cpu, gg, gdx));
  CLOSE(down(gdx, n), dx, n, tol_elem() * 8 + 1e-5, "BN backward dx");
  /* without the fused ReLU */
  CPU_OK(cpu.bn_apply(&cpu, x, P, C, saved, gamma, beta, 0, y));
  GPU_OK(gpu.bn_apply(&gpu, gx, P, C, gsaved, gg, gb, 0, gy));
  CLOSE(down(gy, n), y, n, tol_elem() * 4, "BN apply");
  /* into a wider tensor (a concat's first part): the packed apply's bits in the first C
   * channels of each row, the rest untouched; rows 2C apart (vector path) and C + 1 (element
   * path) */
  for (int k = 0; k < 2; k++) {
    size_t ldy = k ? (size_t)C + 1 : 2 * (size_t)C, e = gpu.elem;
    void *gw = up(hvec(P * ldy, 1, 0), P * ldy);
    unsigned char *w0 = down_raw(gw, P * ldy * e), *yp = down_raw(gy, n * e);
    GPU_OK(gpu.bn_apply_ld(&gpu, gx, P, C, gsaved, gg, gb, 0, gw, ldy));
    unsigned char *w1 = down_raw(gw, P * ldy * e);
    for (size_t p = 0; p < P; p++) {
      ck_assert_msg(memcmp(w1 + p * ldy * e, yp + p * C * e, C * e) == 0,
                    "%s BN apply into rows %zu apart: row %zu differs from the packed apply",
                    gpu.name, ldy, p);
      ck_assert_msg(memcmp(w1 + (p * ldy + C) * e, w0 + (p * ldy + C) * e, (ldy - C) * e) == 0,
                    "%s BN apply into rows %zu apart wrote past its channels (row %zu)",
                    gpu.name, ldy, p);
    }
  }
  ck_assert_int_ne(gpu.bn_apply_ld(&gpu, gx, P, C, gsaved, gg, gb, 0, gy, (size_t)C - 1), 0);
  CPU_OK(cpu.bn_bwd_apply(&cpu, dy, NULL, x, P, C, saved, sums, gamma, dx));
  GPU_OK(gpu.bn_bwd_apply(&gpu, gdy, NULL, gx, P, C, gsaved, gsums_cpu, gg, gdx));
  CLOSE(down(gdx, n), dx, n, tol_elem() * 8 + 1e-5, "BN backward dx (no mask)");
  /* eval mode */
  CPU_OK(cpu.bn_saved_from_running(&cpu, rm, rv, C, 1e-5, saved));
  float *grm2 = up_raw(rm, C * 4), *grv2 = up_raw(rv, C * 4);
  GPU_OK(gpu.bn_saved_from_running(&gpu, grm2, grv2, C, 1e-5, gsaved2));
  hsv = down_raw(gsaved2, (2 * C + 1) * 8);
  ck_assert(rel_err64(hsv, saved, 2 * C + 1) < 1e-12);
}

/* ops.h conv1x1_fwd_bn / conv1x1_bwd_filter_bn: the 1x1 head of K classes reading the BatchNorm
 * apply + ReLU of x, that output never stored. The same bits as bn_apply into a tensor followed by
 * the head's conv_fwd and conv_bwd_filter (the few-output kernels; the weight gradient written and
 * added); the CPU's within the convolutions' tolerance; a layer planned on cuDNN, and a 3x3 one,
 * refused. */
static void head_bn_case(int n, int h, int w, int C, int K)
{
  size_t P = (size_t)n * h * w, nx = P * C, e = gpu.elem;
  float *x = hvec(nx, 2, 0.5f), *gamma = hvec(C, 0.5f, 1), *beta = hvec(C, 0.5f, 0);
  float *wt = hvec((size_t)K * C, 0.5f, 0), *b = hvec(K, 0.5f, 0), *dy = hvec(P * K, 1, 0);
  float *y = hvec(P * K, 0, 0), *dw = hvec((size_t)K * C, 0, 0), *db = hvec(K, 0, 0);
  double *stats = calloc(2 * C + 1, 8), *saved = calloc(2 * C + 1, 8);
  keep(stats), keep(saved);
  CPU_OK(cpu.bn_stats(&cpu, x, P, C, stats));
  CPU_OK(cpu.bn_finalize(&cpu, stats, C, 1e-5, 0.1, NULL, NULL, saved));
  ops_conv_t cc = {.kind = OPS_CONV1X1, .h = h, .w = w, .cin = C, .cout = K, .max_n = n}, gc = cc;
  size_t cws = 0, gws = 0;
  CPU_OK(cpu.conv_plan(&cpu, &cc, &cws));
  GPU_OK(gpu.conv_plan(&gpu, &gc, &gws));
  ck_assert_int_eq(gpu.conv1x1_bn_ok(&gpu, &gc), 1);
  float *ws = malloc(cws + 16);
  keep(ws);
  CPU_OK(cpu.conv1x1_fwd_bn(&cpu, &cc, n, x, saved, gamma, beta, wt, b, y, ws));
  CPU_OK(cpu.conv1x1_bwd_filter_bn(&cpu, &cc, n, x, saved, gamma, beta, dy, dw, db, 0, ws));
  void *gx = up(x, nx), *gg = up(gamma, C), *gbe = up(beta, C), *gw = up(wt, (size_t)K * C);
  void *gb = up(b, K), *gdy = up(dy, P * K), *gwsp = dalloc(gws + 16);
  double *gsaved = up_raw(saved, (2 * C + 1) * 8);
  /* the stored path: the apply into a tensor, then the head's ops */
  void *ga = dalloc(nx * e), *y1 = dalloc(P * K * e), *y2 = dalloc(P * K * e);
  void *dw1 = dalloc((size_t)K * C * e), *db1 = dalloc(K * e);
  void *dw2 = dalloc((size_t)K * C * e), *db2 = dalloc(K * e);
  GPU_OK(gpu.bn_apply(&gpu, gx, P, C, gsaved, gg, gbe, 1, ga));
  GPU_OK(gpu.conv_fwd(&gpu, &gc, n, ga, gw, gb, y1, gwsp));
  GPU_OK(gpu.conv1x1_fwd_bn(&gpu, &gc, n, gx, gsaved, gg, gbe, gw, gb, y2, gwsp));
  char what[96];
  snprintf(what, sizeof what, "%d images of %dx%d, %d channels into a head of %d", n, h, w, C, K);
  ck_assert_msg(memcmp(down_raw(y1, P * K * e), down_raw(y2, P * K * e), P * K * e) == 0,
                "%s %s: the logits differ from the stored path's", gpu.name, what);
  CLOSE(down(y2, P * K), y, P * K, tol_conv(), "head on a BatchNorm: logits");
  for (int acc = 0; acc < 2; acc++) {
    GPU_OK(gpu.conv_bwd_filter(&gpu, &gc, n, ga, gdy, dw1, db1, acc, gwsp));
    GPU_OK(gpu.conv1x1_bwd_filter_bn(&gpu, &gc, n, gx, gsaved, gg, gbe, gdy, dw2, db2, acc,
                                     gwsp));
    ck_assert_msg(memcmp(down_raw(dw1, (size_t)K * C * e), down_raw(dw2, (size_t)K * C * e),
                         (size_t)K * C * e) == 0 &&
                      memcmp(down_raw(db1, K * e), down_raw(db2, K * e), K * e) == 0,
                  "%s %s: the weight gradient differs from the stored path's (acc %d)", gpu.name,
                  what, acc);
    /* against the CPU's once written (added, it holds twice that) */
    if (acc == 0)
      CLOSE(down(dw2, (size_t)K * C), dw, (size_t)K * C, tol_conv() * 2,
            "head on a BatchNorm: dw");
  }
  /* the norm's terms are required: never the plain convolution of x */
  ck_assert_int_ne(gpu.conv1x1_fwd_bn(&gpu, &gc, n, gx, NULL, gg, gbe, gw, gb, y2, gwsp), 0);
  ck_assert_ptr_nonnull(strstr(gpu.last_error(&gpu), "gamma and beta"));
  ck_assert_int_ne(gpu.conv1x1_bwd_filter_bn(&gpu, &gc, n, gx, gsaved, NULL, gbe, gdy, dw2, db2, 0,
                                             gwsp),
                   0);
  ck_assert_ptr_nonnull(strstr(gpu.last_error(&gpu), "gamma and beta"));
  gpu.conv_plan_free(&gpu, &gc);
  cpu.conv_plan_free(&cpu, &cc);
  /* a head planned on cuDNN (no prologue there), and a 3x3 convolution: refused */
  setenv("SHMDDP_CONV1X1", "cudnn", 1);
  GPU_OK(gpu.conv_plan(&gpu, &gc, &gws));
  unsetenv("SHMDDP_CONV1X1");
  ck_assert_int_eq(gpu.conv1x1_bn_ok(&gpu, &gc), 0);
  ck_assert_int_ne(gpu.conv1x1_fwd_bn(&gpu, &gc, n, gx, gsaved, gg, gbe, gw, gb, y2, gwsp), 0);
  ck_assert_ptr_nonnull(strstr(gpu.last_error(&gpu), "conv1x1_bn_ok"));
  gpu.conv_plan_free(&gpu, &gc);
  ops_conv_t c3 = {.kind = OPS_CONV3X3, .h = h, .w = w, .cin = C, .cout = K, .max_n = n};
  GPU_OK(gpu.conv_plan(&gpu, &c3, &gws));
  ck_assert_int_eq(gpu.conv1x1_bn_ok(&gpu, &c3), 0);
  gpu.conv_plan_free(&gpu, &c3);
}

/* ops.h bn_bwd_reduce_1x1 / bn_bwd_apply_1x1: the BatchNorm backward with dy formed where it is
 * read from a 1x1 head of K classes (its output gradient g and weights w), the ReLU mask from
 * gamma and beta. The same bits as the head's conv_bwd_data (the few-output kernels) stored and
 * then bn_bwd_reduce and bn_bwd_apply on it; the CPU's results within the rounding (the GPU
 * rounds dy to its dtype, as the stored path does); K past OPS_BN_1X1_MOST_K and a mask from y
 * refused. */
static void bn_head_case(size_t P, int C, int K)
{
  size_t n = P * C, e = gpu.elem;
  float *x = hvec(n, 2, 0.5f), *gamma = hvec(C, 0.5f, 1), *beta = hvec(C, 0.5f, 0);
  float *g = hvec(P * K, 1, 0), *w = hvec((size_t)K * C, 0.5f, 0);
  float *dx = hvec(n, 0, 0), *dg = hvec(C, 0, 0), *db = hvec(C, 0, 0);
  double *stats = calloc(2 * C + 1, 8), *saved = calloc(2 * C + 1, 8), *sums = calloc(2 * C, 8);
  keep(stats), keep(saved), keep(sums);
  CPU_OK(cpu.bn_stats(&cpu, x, P, C, stats));
  CPU_OK(cpu.bn_finalize(&cpu, stats, C, 1e-5, 0.1, NULL, NULL, saved));
  ops_relu_t cm = {.y = NULL, .gamma = gamma, .beta = beta};
  CPU_OK(cpu.bn_bwd_reduce_1x1(&cpu, g, w, K, &cm, x, P, C, saved, sums, dg, db, 0));
  CPU_OK(cpu.bn_bwd_apply_1x1(&cpu, g, w, K, &cm, x, P, C, saved, sums, gamma, dx));

  void *gx = up(x, n), *gg = up(gamma, C), *gb = up(beta, C), *gh = up(g, P * K);
  void *gw = up(w, (size_t)K * C);
  double *gsaved = up_raw(saved, (2 * C + 1) * 8);
  ops_relu_t gm = {.y = NULL, .gamma = gg, .beta = gb};
  /* the stored path: the head's input gradient, then the plain ops */
  ops_conv_t hc = {.kind = OPS_CONV1X1, .h = 1, .w = (int)P, .cin = C, .cout = K, .max_n = 1};
  size_t ws = 0;
  GPU_OK(gpu.conv_plan(&gpu, &hc, &ws));
  void *gws = dalloc(ws + 16), *gdy = dalloc(n * e);
  GPU_OK(gpu.conv_bwd_data(&gpu, &hc, 1, gh, gw, gdy, gws));
  double *s1 = dalloc(2 * C * 8), *s2 = dalloc(2 * C * 8);
  void *dg1 = dalloc(C * e), *db1 = dalloc(C * e), *dx1 = dalloc(n * e);
  void *dg2 = dalloc(C * e), *db2 = dalloc(C * e), *dx2 = dalloc(n * e);
  GPU_OK(gpu.bn_bwd_reduce(&gpu, gdy, &gm, gx, P, C, gsaved, s1, dg1, db1, 0));
  GPU_OK(gpu.bn_bwd_apply(&gpu, gdy, &gm, gx, P, C, gsaved, s1, gg, dx1));
  GPU_OK(gpu.bn_bwd_reduce_1x1(&gpu, gh, gw, K, &gm, gx, P, C, gsaved, s2, dg2, db2, 0));
  GPU_OK(gpu.bn_bwd_apply_1x1(&gpu, gh, gw, K, &gm, gx, P, C, gsaved, s2, gg, dx2));
  char what[96];
  snprintf(what, sizeof what, "%zu x %d through a head of %d", P, C, K);
  ck_assert_msg(memcmp(down_raw(s1, 2 * C * 8), down_raw(s2, 2 * C * 8), 2 * C * 8) == 0,
                "%s %s: the sums differ from the stored path's", gpu.name, what);
  ck_assert_msg(memcmp(down_raw(dg1, C * e), down_raw(dg2, C * e), C * e) == 0 &&
                    memcmp(down_raw(db1, C * e), down_raw(db2, C * e), C * e) == 0,
                "%s %s: dgamma or dbeta differ from the stored path's", gpu.name, what);
  ck_assert_msg(memcmp(down_raw(dx1, n * e), down_raw(dx2, n * e), n * e) == 0,
                "%s %s: dx differs from the stored path's", gpu.name, what);
  double *hs = down_raw(s2, 2 * C * 8);
  ck_assert_msg(rel_err64(hs, sums, 2 * C) < 2 * tol_elem(),
                "%s %s: backward sums against the CPU's: relative error %g", gpu.name, what,
                rel_err64(hs, sums, 2 * C));
  CLOSE(down(dx2, n), dx, n, tol_elem() * 8 + 1e-5, "BN backward dx through a head");
  /* refused: more classes than the kernels hold, a mask from y */
  ck_assert_int_ne(gpu.bn_bwd_reduce_1x1(&gpu, gh, gw, OPS_BN_1X1_MOST_K + 1, &gm, gx, P, C,
                                         gsaved, s2, dg2, db2, 0),
                   0);
  ops_relu_t ym = {.y = gx, .gamma = gg, .beta = gb};
  ck_assert_int_ne(gpu.bn_bwd_apply_1x1(&gpu, gh, gw, K, &ym, gx, P, C, gsaved, s2, gg, dx2), 0);
  /* and without the head's output gradient (never the forward statistics read as sums) */
  ck_assert_int_ne(gpu.bn_bwd_reduce_1x1(&gpu, NULL, gw, K, &gm, gx, P, C, gsaved, s2, dg2, db2,
                                         0),
                   0);
  ck_assert_ptr_nonnull(strstr(gpu.last_error(&gpu), "1x1 head"));
  ck_assert_int_ne(gpu.bn_bwd_apply_1x1(&gpu, NULL, gw, K, &gm, gx, P, C, gsaved, s2, gg, dx2), 0);
  ck_assert_ptr_nonnull(strstr(gpu.last_error(&gpu), "1x1 head"));
  gpu.conv_plan_free(&gpu, &hc);
}

/* ops.h head_train_1x1: the head's forward, its loss and its backward down to the BatchNorm's
 * reduce as one op. Against the four ops on the GPU: the logits and their gradient bit for bit,
 * the weight gradient, the sums, dgamma/dbeta and the loss within rounding (another order of
 * the same terms); against the CPU's within the tolerances of those ops' cases; reruns bit for
 * bit, written and added; a head the few-output kernels do not take, and no norm terms,
 * refused. */
static void head_train_case(int n, int h, int w, int C, int K)
{
  size_t P = (size_t)n * h * w, nx = P * C, e = gpu.elem;
  const int ignore = 255;
  float *x = hvec(nx, 2, 0.5f), *gamma = hvec(C, 0.5f, 1), *beta = hvec(C, 0.5f, 0);
  float *wt = hvec((size_t)K * C, 0.5f, 0), *b = hvec(K, 0.5f, 0);
  int32_t *lab = malloc(P * 4);
  keep(lab);
  for (size_t p = 0; p < P; p++)
    lab[p] = p % 7 == 3 ? ignore : (int32_t)((p * 2654435761u >> 7) % (unsigned)K);
  double *stats = calloc(2 * C + 1, 8), *saved = calloc(2 * C + 1, 8), *rsums = calloc(2 * C, 8);
  keep(stats), keep(saved), keep(rsums);
  CPU_OK(cpu.bn_stats(&cpu, x, P, C, stats));
  CPU_OK(cpu.bn_finalize(&cpu, stats, C, 1e-5, 0.1, NULL, NULL, saved));
  ops_conv_t cc = {.kind = OPS_CONV1X1, .h = h, .w = w, .cin = C, .cout = K, .max_n = n}, gc = cc;
  size_t cws = 0, gws = 0;
  CPU_OK(cpu.conv_plan(&cpu, &cc, &cws));
  GPU_OK(gpu.conv_plan(&gpu, &gc, &gws));
  float *ws = malloc(cws + 16);
  keep(ws);
  /* the CPU's (its four ops) */
  float *ry = hvec(P * K, 0, 0), *rg = hvec(P * K, 0, 0), *rdw = hvec((size_t)K * C, 0, 0);
  float *rdb = hvec(K, 0, 0), *rdg = hvec(C, 0, 0), *rdbe = hvec(C, 0, 0);
  double rout[2];
  CPU_OK(cpu.head_train_1x1(&cpu, &cc, n, x, saved, gamma, beta, wt, b, lab, ignore, 512, 0, ry,
                            rg, rout, rdw, rdb, rsums, rdg, rdbe, 0, ws));
  void *gx = up(x, nx), *gg = up(gamma, C), *gbe = up(beta, C), *gw = up(wt, (size_t)K * C);
  void *gb = up(b, K), *gwsp = dalloc(gws + 16);
  int32_t *glab = up_raw(lab, P * 4);
  double *gsaved = up_raw(saved, (2 * C + 1) * 8);
  /* the GPU's four ops (run 0) and the one op (runs 1 and 2) */
  void *y[3], *g[3], *dw[3], *db[3], *dg[3], *dbe[3];
  double *sums[3], *out[3];
  for (int r = 0; r < 3; r++) {
    y[r] = dalloc(P * K * e), g[r] = dalloc(P * K * e), dw[r] = dalloc((size_t)K * C * e);
    db[r] = dalloc(K * e), dg[r] = dalloc(C * e), dbe[r] = dalloc(C * e);
    sums[r] = dalloc(2 * C * 8), out[r] = dalloc(16);
  }
  ops_relu_t gm = {.y = NULL, .gamma = gg, .beta = gbe};
  GPU_OK(gpu.conv1x1_fwd_bn(&gpu, &gc, n, gx, gsaved, gg, gbe, gw, gb, y[0], gwsp));
  GPU_OK(gpu.softmax_ce_async(&gpu, y[0], glab, P, K, ignore, 512, 0, g[0], NULL, out[0]));
  GPU_OK(gpu.conv1x1_bwd_filter_bn(&gpu, &gc, n, gx, gsaved, gg, gbe, g[0], dw[0], db[0], 0,
                                   gwsp));
  GPU_OK(gpu.bn_bwd_reduce_1x1(&gpu, g[0], gw, K, &gm, gx, P, C, gsaved, sums[0], dg[0], dbe[0],
                               0));
  for (int r = 1; r < 3; r++)
    GPU_OK(gpu.head_train_1x1(&gpu, &gc, n, gx, gsaved, gg, gbe, gw, gb, glab, ignore, 512, 0,
                              y[r], g[r], out[r], dw[r], db[r], sums[r], dg[r], dbe[r], 0, gwsp));
  GPU_OK(gpu.labels_check(&gpu));
  char what[96];
  snprintf(what, sizeof what, "%d images of %dx%d, %d channels into a head of %d", n, h, w, C, K);
  ck_assert_msg(memcmp(down_raw(y[0], P * K * e), down_raw(y[1], P * K * e), P * K * e) == 0 &&
                    memcmp(down_raw(g[0], P * K * e), down_raw(g[1], P * K * e), P * K * e) == 0,
                "%s %s: the logits or their gradient differ from the four ops'", gpu.name, what);
  /* reruns: every output the same bits */
  const struct {
    void **v;
    size_t bytes;
  } outs[] = {{y, P * K * e}, {g, P * K * e}, {dw, (size_t)K * C * e}, {db, K * e},
              {dg, C * e},    {dbe, C * e},   {(void **)sums, 2 * C * 8}, {(void **)out, 16}};
  for (size_t i = 0; i < sizeof outs / sizeof *outs; i++)
    ck_assert_msg(memcmp(down_raw(outs[i].v[1], outs[i].bytes), down_raw(outs[i].v[2],
                                                                         outs[i].bytes),
                         outs[i].bytes) == 0,
                  "%s %s: output %zu differs between two runs", gpu.name, what, i);
  /* the sums: the four ops' within rounding, and the CPU's */
  double *o0 = down_raw(out[0], 16), *o1 = down_raw(out[1], 16);
  ck_assert_msg(o1[1] == o0[1] && fabs(o1[0] - o0[0]) <= 1e-10 * fabs(o0[0]),
                "%s %s: loss %.17g over %g pixels, the four ops' %.17g over %g", gpu.name, what,
                o1[0], o1[1], o0[0], o0[1]);
  /* the CPU's loss is of its own logits, which in 16-bit types differ from the GPU's in the last
   * bit where the sums round differently (the logits' tolerance below), so its loss is held to
   * that tolerance; against the GPU's four ops, above, it is the same loss to 1e-10 */
  ck_assert_msg(o1[1] == rout[1] && fabs(o1[0] - rout[0]) <= tol_conv() * fabs(rout[0]),
                "%s %s: loss %.9g, the CPU's %.9g", gpu.name, what, o1[0], rout[0]);
  CLOSE(down(dw[1], (size_t)K * C), down(dw[0], (size_t)K * C), (size_t)K * C, tol_conv(),
        "the head's training pass: dw against the four ops'");
  CLOSE(down(db[1], K), down(db[0], K), K, tol_conv(), "the head's training pass: db");
  ck_assert_msg(rel_err64(down_raw(sums[1], 2 * C * 8), down_raw(sums[0], 2 * C * 8), 2 * C) <
                    1e-5,
                "%s %s: the BatchNorm's sums against the four ops'", gpu.name, what);
  CLOSE(down(dg[1], C), down(dg[0], C), C, tol_conv(), "the head's training pass: dgamma");
  CLOSE(down(dbe[1], C), down(dbe[0], C), C, tol_conv(), "the head's training pass: dbeta");
  CLOSE(down(y[1], P * K), ry, P * K, tol_conv(), "the head's training pass: logits (CPU)");
  CLOSE(down(g[1], P * K), rg, P * K, tol_conv(), "the head's training pass: g (CPU)");
  CLOSE(down(dw[1], (size_t)K * C), rdw, (size_t)K * C, tol_conv() * 2,
        "the head's training pass: dw (CPU)");
  ck_assert_msg(rel_err64(down_raw(sums[1], 2 * C * 8), rsums, 2 * C) < 4 * tol_conv(),
                "%s %s: the BatchNorm's sums against the CPU's: relative error %g", gpu.name, what,
                rel_err64(down_raw(sums[1], 2 * C * 8), rsums, 2 * C));
  /* added to: run 2's outputs again, so the gradients hold about twice run 0's */
  GPU_OK(gpu.head_train_1x1(&gpu, &gc, n, gx, gsaved, gg, gbe, gw, gb, glab, ignore, 512, 0, y[2],
                            g[2], out[2], dw[2], db[2], sums[2], dg[2], dbe[2], 1, gwsp));
  float *twice = down(dw[0], (size_t)K * C);
  for (size_t i = 0; i < (size_t)K * C; i++) twice[i] *= 2;
  CLOSE(down(dw[2], (size_t)K * C), twice, (size_t)K * C, tol_conv() * 2,
        "the head's training pass: dw added to");
  float *twice_g = down(dg[0], C);
  for (int c = 0; c < C; c++) twice_g[c] *= 2;
  CLOSE(down(dg[2], C), twice_g, C, tol_conv() * 2, "the head's training pass: dgamma added to");
  /* refused: no norm terms */
  ck_assert_int_ne(gpu.head_train_1x1(&gpu, &gc, n, gx, NULL, gg, gbe, gw, gb, glab, ignore, 512,
                                      0, y[1], g[1], out[1], dw[1], db[1], sums[1], dg[1], dbe[1],
                                      0, gwsp),
                   0);
  ck_assert_ptr_nonnull(strstr(gpu.last_error(&gpu), "gamma and beta"));
  gpu.conv_plan_free(&gpu, &gc);
}

START_TEST(test_batchnorm)
{
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    bn_case(2 * 9 * 11, 64, 0.5f);   /* vector path */
    bn_case(3 * 7 * 5, 5, -1);       /* scalar path */
    bn_case(4 * 64 * 64, 32, 3);     /* many row splits, mean >> spread */
    bn_case(2 * 4 * 4, 1024, 0.25f); /* wide: several channel tiles */
    head_bn_case(2, 9, 11, 64, 4);   /* the U-Net's head: 4 classes, vector path */
    head_bn_case(3, 7, 5, 5, 3);     /* scalar path (5 channels), 3 classes */
    head_bn_case(4, 64, 64, 32, 8);  /* the most classes, many blocks */
    head_bn_case(1, 4, 4, 256, 1);   /* one class, the widest input */
    bn_head_case(2 * 9 * 11, 64, 4); /* the U-Net's head: 4 classes, vector path */
    bn_head_case(3 * 7 * 5, 5, 3);   /* scalar path, 3 classes */
    bn_head_case(4 * 64 * 64, 32, 8); /* the most classes, many row splits */
    bn_head_case(2 * 4 * 4, 256, 1); /* one class, wide */
  }
}
END_TEST

START_TEST(test_head_train)
{
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    head_train_case(2, 9, 11, 64, 4);   /* the U-Net's head: 4 classes, one pass */
    head_train_case(4, 64, 64, 64, 4);  /* many blocks, partial sums over them */
    head_train_case(3, 7, 5, 5, 3);     /* 5 channels: the four ops */
    head_train_case(4, 32, 32, 32, 8);  /* the most classes */
    head_train_case(1, 4, 4, 256, 1);   /* one class (its values one at a time), the widest */
    head_train_case(2, 16, 16, 24, 6);  /* 6 of 8 classes, 24 channels (lanes past the chunks) */
    head_train_case(2, 12, 10, 24, 4);  /* 4 classes split over a pixel's lanes, one of them
                                           past the chunks (bf16: 4 lanes; f32: 8) */
    head_train_case(2, 8, 8, 8, 4);     /* 4 classes on a pixel's one or two lanes: not split */
  }
}
END_TEST

static void gn_case(int n, size_t hw, int C, int G)
{
  size_t cnt = (size_t)n * hw * C;
  float *x = hvec(cnt, 2, 0.5f), *gamma = hvec(C, 0.5f, 1), *beta = hvec(C, 0.5f, 0);
  float *dy = hvec(cnt, 1, 0), *y = hvec(cnt, 0, 0), *dx = hvec(cnt, 0, 0);
  float *dg = hvec(C, 0, 0), *db = hvec(C, 0, 0);
  double *saved = calloc(2 * (size_t)n * G, 8);
  keep(saved);
  CPU_OK(cpu.gn_fwd(&cpu, x, n, hw, C, G, 1e-5, gamma, beta, 1, y, saved));
  for (size_t i = 0; i < cnt; i++) y[i] = to_dt(y[i]);
  ops_relu_t cmask = {.y = y};
  CPU_OK(cpu.gn_bwd(&cpu, dy, &cmask, x, n, hw, C, G, saved, gamma, dx, dg, db, 0));
  void *gx = up(x, cnt), *gg = up(gamma, C), *gb = up(beta, C), *gdy = up(dy, cnt);
  void *gy = dalloc(cnt * gpu.elem), *gdx = dalloc(cnt * gpu.elem);
  ops_relu_t gmask = {.y = up(y, cnt)};
  void *gdg = dalloc(C * gpu.elem), *gdb = dalloc(C * gpu.elem);
  double *gsaved = dalloc(2 * (size_t)n * G * 8);
  GPU_OK(gpu.gn_fwd(&gpu, gx, n, hw, C, G, 1e-5, gg, gb, 1, gy, gsaved));
  double *hs = down_raw(gsaved, 2 * (size_t)n * G * 8);
  ck_assert_msg(rel_err64(hs, saved, 2 * (size_t)n * G) < 1e-5, "%s GN statistics: %g",
                gpu.name, rel_err64(hs, saved, 2 * (size_t)n * G));
  CLOSE(down(gy, cnt), y, cnt, tol_elem() * 4, "GN forward + ReLU");
  double *gsaved_cpu = up_raw(saved, 2 * (size_t)n * G * 8);
  GPU_OK(gpu.gn_bwd(&gpu, gdy, &gmask, gx, n, hw, C, G, gsaved_cpu, gg, gdx, gdg, gdb, 0));
  same_with_recomputed_mask(1, hw, C, n, G, gdy, gy, gx, gsaved, gg, gb);
  CLOSE(down(gdx, cnt), dx, cnt, tol_elem() * 8 + 1e-5, "GN backward dx");
  CLOSE(down(gdg, C), dg, C, tol_elem() + 1e-5, "GN dgamma");
  CLOSE(down(gdb, C), db, C, tol_elem() + 1e-5, "GN dbeta");
}

START_TEST(test_groupnorm)
{
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    gn_case(3, 7 * 9, 32, 8);
    gn_case(2, 5 * 5, 12, 3);
    gn_case(2, 32 * 32, 64, 32);
    char err[64];
    ck_assert_int_ne(gpu.gn_fwd(&gpu, err, 1, 1, 12, 5, 1e-5, err, err, 0, err, NULL), 0);
    ck_assert_ptr_nonnull(strstr(gpu.last_error(&gpu), "groups"));
  }
}
END_TEST

/* ---- loss ---- */

START_TEST(test_softmax_ce)
{
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    const size_t P = 3001;
    const int K = 4, ignore = 255;
    float *z = hvec(P * K, 3, 0), *rd = hvec(P * K, 0, 0);
    int32_t *lab = malloc(P * 4), *rpred = malloc(P * 4);
    keep(lab), keep(rpred);
    for (size_t p = 0; p < P; p++) lab[p] = p % 7 == 3 ? ignore : (int32_t)((rnd() + 1) * 2);
    double rloss, gloss;
    long rcount, gcount;
    void *gz = up(z, P * K), *gd = dalloc(P * K * gpu.elem);
    int32_t *glab = up_raw(lab, P * 4), *gpred = dalloc(P * 4);
    for (int variant = 0; variant < 2; variant++) {
      double norm = variant ? 12345.0 : 0; /* the batch's own count, or a given one */
      /* scale 512 keeps f16 gradients out of its subnormals, as loss scaling does */
      CPU_OK(cpu.softmax_ce(&cpu, z, lab, P, K, ignore, 512, norm, rd, rpred, &rloss, &rcount));
      GPU_OK(gpu.softmax_ce(&gpu, gz, glab, P, K, ignore, 512, norm, gd, gpred, &gloss, &gcount));
      ck_assert_int_eq(gcount, rcount);
      ck_assert_msg(fabs(gloss - rloss) <= 1e-5 * fabs(rloss), "%s loss %.9g, expected %.9g",
                    gpu.name, gloss, rloss);
      CLOSE(down(gd, P * K), rd, P * K, tol_elem() + 1e-6, "softmax CE gradient");
      int32_t *hp = down_raw(gpred, P * 4);
      EXACT_INT(hp, rpred, P, "argmax");
    }
    /* the async variant leaves (loss, count) on the device */
    double *gout = dalloc(16);
    GPU_OK(ops_cuda_softmax_ce_async(&gpu, gz, glab, P, K, ignore, 1, 0, NULL, NULL, gout));
    GPU_OK(ops_cuda_check_labels(&gpu));
    double *hout = down_raw(gout, 16);
    ck_assert(fabs(hout[0] - rloss) <= 1e-5 * fabs(rloss) && hout[1] == (double)rcount);
    /* a label out of range is an error that names it, and the next call is clean again */
    lab[1234] = 7;
    glab = up_raw(lab, P * 4);
    ck_assert_int_ne(gpu.softmax_ce(&gpu, gz, glab, P, K, ignore, 1, 0, gd, NULL, &gloss,
                                    &gcount), 0);
    ck_assert_msg(strstr(gpu.last_error(&gpu), "label 7 at pixel 1234"), "%s",
                  gpu.last_error(&gpu));
    lab[1234] = 0;
    glab = up_raw(lab, P * 4);
    GPU_OK(gpu.softmax_ce(&gpu, gz, glab, P, K, ignore, 1, 0, gd, NULL, &gloss, &gcount));
  }
}
END_TEST

/* ---- convolutions ---- */

/* woff: the weights and their gradient start woff elements into their buffers (the model's
 * flat 16-bit parameters are only 8-byte aligned). */
static void conv_case_at(ops_conv_kind_t kind, int h, int w, int cin, int cout, int max_n, int n,
                         int woff)
{
  ops_conv_t cc = {.kind = kind, .h = h, .w = w, .cin = cin, .cout = cout, .max_n = max_n}, gc = cc;
  int k = kind == OPS_CONV3X3 ? 9 : kind == OPS_CONV1X1 ? 1 : 4;
  int up2 = kind == OPS_CONVT2X2 ? 4 : 1;
  size_t P = (size_t)n * h * w, nx = P * cin, ny = P * up2 * cout, nw = (size_t)k * cin * cout;
  float scale = 1.0f / sqrtf((float)(k * cin));
  float *x = hvec(nx, 1, 0), *wt = hvec(nw, scale, 0), *b = hvec(cout, 0.5f, 0);
  float *dy = hvec(ny, 1, 0), *y = hvec(ny, 0, 0), *dx = hvec(nx, 0, 0);
  float *dw = hvec(nw, 0, 0), *db = hvec(cout, 0, 0);
  size_t cws = 0, gws = 0;
  CPU_OK(cpu.conv_plan(&cpu, &cc, &cws));
  GPU_OK(gpu.conv_plan(&gpu, &gc, &gws));
  float *ws = malloc(cws + 16);
  keep(ws);
  CPU_OK(cpu.conv_fwd(&cpu, &cc, n, x, wt, b, y, ws));
  CPU_OK(cpu.conv_bwd_filter(&cpu, &cc, n, x, dy, dw, db, 0, ws));
  CPU_OK(cpu.conv_bwd_data(&cpu, &cc, n, dy, wt, dx, ws));
  float *wt2 = hvec(nw + woff, 0, 0);
  memcpy(wt2 + woff, wt, nw * sizeof *wt);
  void *gx = up(x, nx), *gb = up(b, cout), *gdy = up(dy, ny);
  void *gw = (char *)up(wt2, nw + woff) + woff * gpu.elem;
  void *gy = dalloc(ny * gpu.elem), *gdx = dalloc(nx * gpu.elem);
  void *gdw = (char *)dalloc((nw + woff) * gpu.elem) + woff * gpu.elem;
  void *gdb = dalloc(cout * gpu.elem), *gwsp = dalloc(gws);
  char what[96];
  snprintf(what, sizeof what, "conv kind %d %dx%d %d->%d n=%d/%d, weights at +%d", (int)kind, h,
           w, cin, cout, n, max_n, woff);
  GPU_OK(gpu.conv_fwd(&gpu, &gc, n, gx, gw, gb, gy, gwsp));
  CLOSE(down(gy, ny), y, ny, tol_conv(), what);
  GPU_OK(gpu.conv_bwd_filter(&gpu, &gc, n, gx, gdy, gdw, gdb, 0, gwsp));
  CLOSE(down(gdw, nw), dw, nw, tol_conv(), "conv dw");
  if (kind != OPS_CONV3X3) CLOSE(down(gdb, cout), db, cout, tol_elem() + 1e-5, "conv db");
  GPU_OK(gpu.conv_bwd_filter(&gpu, &gc, n, gx, gdy, gdw, gdb, 1, gwsp)); /* accumulate */
  for (size_t i = 0; i < nw; i++) dw[i] *= 2;
  CLOSE(down(gdw, nw), dw, nw, tol_conv() * 2, "conv dw (accumulate)");
  GPU_OK(gpu.conv_bwd_data(&gpu, &gc, n, gdy, gw, gdx, gwsp));
  CLOSE(down(gdx, nx), dx, nx, tol_conv(), "conv dx");
  gpu.conv_plan_free(&gpu, &gc);
  cpu.conv_plan_free(&cpu, &cc);
  ck_assert_ptr_null(gc.plan);
}

static void conv_case(ops_conv_kind_t kind, int h, int w, int cin, int cout, int max_n, int n)
{
  conv_case_at(kind, h, w, cin, cout, max_n, n, 0);
}

START_TEST(test_conv)
{
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    conv_case(OPS_CONV3X3, 8, 8, 16, 32, 3, 3);
    conv_case(OPS_CONV3X3, 8, 8, 16, 32, 3, 2); /* smaller batch than planned */
    conv_case(OPS_CONV3X3, 10, 6, 3, 16, 2, 2); /* the RGB input layer (cuDNN, padded) */
    conv_case(OPS_CONV3X3, 10, 6, 3, 16, 2, 2);
    conv_case(OPS_CONV3X3, 16, 16, 3, 64, 2, 2); /* at its width, many blocks */
    conv_case(OPS_CONV3X3, 33, 17, 3, 48, 3, 2); /* 16-bit: own kernels, tiles across rows and
                                                    images, a partial last tile */
    conv_case(OPS_CONV3X3, 9, 11, 2, 32, 2, 1);  /* two inputs, a smaller batch */
    conv_case(OPS_CONV3X3, 1, 5, 1, 16, 1, 1);   /* one row: every tap off the image's edge */
    conv_case(OPS_CONV3X3, 6, 6, 1, 8, 2, 2);    /* one input channel */
    conv_case(OPS_CONV3X3, 7, 5, 4, 24, 3, 1);   /* four, odd sizes, a smaller batch */
    conv_case(OPS_CONV1X1, 8, 8, 16, 4, 2, 2);  /* the head */
    conv_case(OPS_CONV1X1, 16, 16, 64, 4, 2, 2); /* at its width: own kernels, many blocks */
    conv_case(OPS_CONV1X1, 5, 7, 12, 3, 2, 1);   /* off the vector width, odd outputs */
    conv_case(OPS_CONV1X1, 4, 4, 16, 8, 2, 2);   /* the most outputs the own kernels take */
    conv_case(OPS_CONV1X1, 9, 13, 256, 8, 2, 2); /* the most inputs: a lane owns several chunks */
    conv_case(OPS_CONV1X1, 7, 9, 200, 5, 3, 3);  /* chunks that fill no power of two of lanes */
    conv_case(OPS_CONV1X1, 33, 31, 64, 4, 6, 5); /* the head's width, a pixel count off every
                                                    warp and unroll multiple, many blocks */
    conv_case(OPS_CONV1X1, 3, 3, 2, 6, 1, 1);    /* more outputs than lanes per pixel */
    conv_case(OPS_CONV1X1, 4, 4, 16, 12, 2, 2);  /* more: cuBLAS */
    conv_case_at(OPS_CONV1X1, 8, 8, 16, 4, 2, 2, 2); /* misaligned weights, own kernels */
    setenv("SHMDDP_CONV1X1", "gemm", 1);
    conv_case(OPS_CONV1X1, 16, 16, 64, 4, 2, 2);
    unsetenv("SHMDDP_CONV1X1");
    conv_case(OPS_CONVT2X2, 4, 4, 32, 16, 2, 2);
    conv_case(OPS_CONVT2X2, 4, 6, 32, 16, 3, 1);
    /* the alternatives behind the environment switches */
    setenv("SHMDDP_CONV1X1", "cudnn", 1);
    conv_case(OPS_CONV1X1, 8, 8, 16, 4, 2, 2);
    unsetenv("SHMDDP_CONV1X1");
    setenv("SHMDDP_CONV_PAD", "0", 1);
    setenv("SHMDDP_CONV_SEARCH", "heuristic", 1);
    conv_case(OPS_CONV3X3, 10, 6, 3, 16, 2, 2);
    conv_case(OPS_CONV1X1, 8, 8, 16, 4, 3, 3);
    unsetenv("SHMDDP_CONV_PAD");
    unsetenv("SHMDDP_CONV_SEARCH");
    conv_case_at(OPS_CONV3X3, 8, 8, 16, 32, 2, 2, 2); /* misaligned weights */
    conv_case_at(OPS_CONVT2X2, 4, 4, 32, 16, 2, 2, 2);
    conv_case_at(OPS_CONV3X3, 10, 6, 3, 16, 2, 2, 2);
    setenv("SHMDDP_CONV1X1", "cudnn", 1);
    conv_case_at(OPS_CONV1X1, 8, 8, 16, 4, 2, 2, 2);
    unsetenv("SHMDDP_CONV1X1");
    conv_case_at(OPS_CONVT2X2, 4, 4, 32, 16, 2, 2, 2);
    conv_case(OPS_CONVT2X2, 4, 4, 32, 16, 2, 2);
    conv_case(OPS_CONVT2X2, 4, 6, 32, 16, 3, 1);
    conv_case(OPS_CONVT2X2, 3, 5, 12, 6, 2, 2); /* channels off the vector width */
    ops_conv_t c = {.kind = OPS_CONV3X3, .h = 4, .w = 4, .cin = 8, .cout = 8, .max_n = 2};
    ck_assert_int_ne(gpu.conv_fwd(&gpu, &c, 1, NULL, NULL, NULL, NULL, NULL), 0);
    ck_assert_ptr_nonnull(strstr(gpu.last_error(&gpu), "conv_plan"));
    if (dt == OPS_F32) {
      /* TF32 off: the few-channel layer on cuDNN's padded plain-f32 path instead of the TF32
       * kernels (conv_rgb_tf32_cuda.cu), which the cases above ran */
      setenv("SHMDDP_TF32", "0", 1);
      use_dtype(d);
      conv_case(OPS_CONV3X3, 10, 6, 3, 16, 2, 2);
      conv_case(OPS_CONV3X3, 16, 16, 3, 64, 2, 2);
      unsetenv("SHMDDP_TF32");
      use_dtype(d);
    }
  }
}
END_TEST

/* ---- the input layer's forward with its BatchNorm statistics ---- */

/* ops.h conv_fwd_fused for the input layer as a first block (few channels in; the few-channel
 * kernel, conv_rgb_cuda.cu), bf16. Where the fused ops run and the width is one it takes (16,
 * 32, 64): rank 2, the output the plain forward's bit for bit (the same tiles and arithmetic),
 * the statistics the f64 sums of that output within the f32 partial sums' rounding (at most 32
 * terms: 1e-5 of the magnitudes), the count the pixels', a rerun the same bits. Elsewhere rank 0
 * and the op refused. */
static void rgb_stats_case(int h, int w, int cin, int cout, int max_n, int n, int dev_ok)
{
  ops_conv_t c = {.kind = OPS_CONV3X3, .h = h, .w = w, .cin = cin, .cout = cout, .max_n = max_n};
  size_t ws = 0, fws = 0;
  GPU_OK(gpu.conv_plan(&gpu, &c, &ws));
  const int takes = dev_ok && (cout == 16 || cout == 32 || cout == 64);
  const int rank = gpu.conv_fused ? gpu.conv_fused(&gpu, &c, OPS_FUSE_STATS, &fws) : 0;
  char what[96];
  snprintf(what, sizeof what, "%dx%d %d -> %d, %d of %d images", h, w, cin, cout, n, max_n);
  ck_assert_msg(rank == 2 * takes, "%s: conv_fused ranks %d", what, rank);
  const size_t P = (size_t)n * h * w, nx = P * cin + 1, ny = P * cout + 1, nw = 9 * cin * cout;
  const size_t sb = (2 * (size_t)cout + 1) * sizeof(double);
  float *x = hvec(nx, 1, 0), *wt = hvec(nw, 1.0f / sqrtf(9.0f * cin), 0);
  void *gx = up(x, nx), *gw = up(wt, nw), *gy = dalloc(ny * gpu.elem);
  void *gy2 = dalloc(ny * gpu.elem), *gyp = dalloc(ny * gpu.elem);
  void *gws = dalloc((ws > fws ? ws : fws) + 16);
  double *gst = dalloc(sb), *gst2 = dalloc(sb);
  if (!takes) {
    if (gpu.conv_fwd_fused)
      ck_assert_msg(gpu.conv_fwd_fused(&gpu, &c, n, gx, NULL, gw, gy, gst, gws) != 0,
                    "%s: the fused forward ran where conv_fused said 0", what);
    gpu.conv_plan_free(&gpu, &c);
    return;
  }
  GPU_OK(gpu.conv_fwd(&gpu, &c, n, gx, gw, NULL, gyp, gws));
  GPU_OK(gpu.conv_fwd_fused(&gpu, &c, n, gx, NULL, gw, gy, gst, gws));
  GPU_OK(gpu.conv_fwd_fused(&gpu, &c, n, gx, NULL, gw, gy2, gst2, gws));
  float *y = down(gy, ny); /* ny: one element past the output, still poisoned */
  EXACT(y, down(gyp, ny), P * cout, what);
  EXACT(down(gy2, ny), y, P * cout, "its rerun's output");
  ck_assert_msg(isnan(y[P * cout]), "%s: written past the output", what);
  const double *st = down_raw(gst, sb), *st2 = down_raw(gst2, sb);
  ck_assert_msg(memcmp(st, st2, sb) == 0, "%s: a rerun gave other statistics", what);
  ck_assert_msg(st[2 * cout] == (double)P, "%s: count %g", what, st[2 * cout]);
  for (int ch = 0; ch < cout; ch++) {
    double s1 = 0, s2 = 0, a1 = 0;
    for (size_t p = 0; p < P; p++) {
      const double v = y[p * cout + ch];
      s1 += v, s2 += v * v, a1 += fabs(v);
    }
    ck_assert_msg(fabs(st[ch] - s1) <= 1e-5 * a1 + 1e-12 &&
                      fabs(st[cout + ch] - s2) <= 1e-5 * s2 + 1e-12,
                  "%s, channel %d: sums %.9g %.9g, of the output %.9g %.9g", what, ch, st[ch],
                  st[cout + ch], s1, s2);
  }
  gpu.conv_plan_free(&gpu, &c);
}

/* The fused ops are bf16's: in f16, conv_fused ranks an 8 x 8 cin -> cout layer 0 for use. */
static void not_in_f16(int cin, int cout, ops_fuse_use_t use)
{
  use_dtype(2);
  ops_conv_t c = {.kind = OPS_CONV3X3, .h = 8, .w = 8, .cin = cin, .cout = cout, .max_n = 2};
  size_t ws = 0, fws = 0;
  GPU_OK(gpu.conv_plan(&gpu, &c, &ws));
  ck_assert_int_eq(gpu.conv_fused ? gpu.conv_fused(&gpu, &c, use, &fws) : 0, 0);
  gpu.conv_plan_free(&gpu, &c);
}

START_TEST(test_rgb_stats)
{
  use_dtype(1);
  ck_assert_int_eq(dt, OPS_BF16);
  int major = 0, minor = 0;
  const int dev_ok = fused_sm90_device(&major, &minor);
  rgb_stats_case(16, 16, 3, 64, 2, 2, dev_ok);  /* many blocks, whole tiles */
  rgb_stats_case(33, 17, 3, 64, 3, 2, dev_ok);  /* tiles across rows and images, a partial last */
  rgb_stats_case(320, 320, 3, 64, 6, 6, dev_ok); /* 38400 groups of 16 pixels: 16 a warp need
                                                     more blocks than one wave holds (132 x 2) */
  rgb_stats_case(9, 11, 2, 32, 2, 1, dev_ok);   /* two inputs, 32 outputs, a smaller batch */
  rgb_stats_case(1, 5, 1, 16, 1, 1, dev_ok);    /* one row, one input, 16 outputs */
  rgb_stats_case(8, 8, 3, 64, 2, 0, dev_ok);    /* no images: zero sums, count 0 */
  rgb_stats_case(10, 6, 3, 48, 2, 2, dev_ok);   /* a width it does not take: refused */
  not_in_f16(3, 64, OPS_FUSE_STATS);
}
END_TEST

/* ---- the plain input gradient on the fused kernels ---- */

/* ops.h conv_bwd_data_fused with no mask and no sums (x, coef, saved, sums NULL), the use
 * OPS_FUSE_DGRAD, bf16. Where the fused ops run: conv_fused ranks the shape as the table does
 * (kernels/conv_fused_rank.h), the gradient is the CPU reference's (f32 table on the same inputs)
 * and cuDNN's conv_bwd_data within bf16 rounding, a rerun gives the same bits and nothing past
 * the gradient is written. 64 -> 64 and 128 -> 64 take the COUT_M kernel (128 -> 64 in
 * output-channel halves), the others the wide kernel. Elsewhere rank 0 and the op refused. */
static void plain_dgrad_case(int h, int w, int cin, int cout, int max_n, int n, int dev_ok)
{
  ops_conv_t cc = {.kind = OPS_CONV3X3, .h = h, .w = w, .cin = cin, .cout = cout, .max_n = max_n};
  ops_conv_t gc = cc;
  size_t cws = 0, ws = 0, fws = 0;
  CPU_OK(cpu.conv_plan(&cpu, &cc, &cws));
  GPU_OK(gpu.conv_plan(&gpu, &gc, &ws));
  const int rank = gpu.conv_fused ? gpu.conv_fused(&gpu, &gc, OPS_FUSE_DGRAD, &fws) : 0;
  const int want = dev_ok ? conv_fused_rank(OPS_FUSE_DGRAD, cin, cout, h, w) : 0;
  char what[96];
  snprintf(what, sizeof what, "plain dgrad %dx%d %d -> %d, %d of %d images", h, w, cin, cout, n,
           max_n);
  ck_assert_msg(rank == want, "%s: conv_fused ranks %d, the table %d", what, rank, want);
  const size_t P = (size_t)n * h * w, nx = P * cin + 1, ny = P * cout, nw = 9 * (size_t)cin * cout;
  float *dy = hvec(ny, 1, 0), *wt = hvec(nw, 1.0f / sqrtf(9.0f * cout), 0);
  float *dx = hvec(nx, 0, 0);
  void *gdy = up(dy, ny), *gw = up(wt, nw), *gdx = dalloc(nx * gpu.elem);
  void *gdx2 = dalloc(nx * gpu.elem), *glib = dalloc(nx * gpu.elem);
  void *gws = dalloc((ws > fws ? ws : fws) + 16);
  if (!rank) {
    if (gpu.conv_bwd_data_fused)
      ck_assert_msg(gpu.conv_bwd_data_fused(&gpu, &gc, n, gdy, gw, NULL, NULL, NULL, gdx, NULL,
                                            gws) != 0,
                    "%s: the fused input gradient ran where conv_fused said 0", what);
    gpu.conv_plan_free(&gpu, &gc);
    cpu.conv_plan_free(&cpu, &cc);
    return;
  }
  float *cws_buf = malloc(cws + 16);
  keep(cws_buf);
  CPU_OK(cpu.conv_bwd_data(&cpu, &cc, n, dy, wt, dx, cws_buf));
  GPU_OK(gpu.conv_bwd_data(&gpu, &gc, n, gdy, gw, glib, gws));
  GPU_OK(gpu.conv_bwd_data_fused(&gpu, &gc, n, gdy, gw, NULL, NULL, NULL, gdx, NULL, gws));
  GPU_OK(gpu.conv_bwd_data_fused(&gpu, &gc, n, gdy, gw, NULL, NULL, NULL, gdx2, NULL, gws));
  float *g = down(gdx, nx); /* nx: one element past the gradient, still poisoned */
  CLOSE(g, dx, P * cin, tol_conv(), what);
  CLOSE(g, down(glib, nx), P * cin, tol_conv(), "against cuDNN's conv_bwd_data");
  EXACT(down(gdx2, nx), g, P * cin, "its rerun's gradient");
  ck_assert_msg(isnan(g[P * cin]), "%s: written past the gradient", what);
  gpu.conv_plan_free(&gpu, &gc);
  cpu.conv_plan_free(&cpu, &cc);
}

START_TEST(test_plain_dgrad)
{
  use_dtype(1);
  ck_assert_int_eq(dt, OPS_BF16);
  int major = 0, minor = 0;
  const int dev_ok = fused_sm90_device(&major, &minor);
  plain_dgrad_case(16, 16, 128, 64, 2, 2, dev_ok);  /* COUT_M in halves: dec0.conv1's shape */
  plain_dgrad_case(9, 70, 128, 64, 3, 2, dev_ok);   /* tiles across rows, a partial last */
  plain_dgrad_case(8, 8, 64, 64, 2, 1, dev_ok);     /* COUT_M, one of two images */
  plain_dgrad_case(16, 16, 64, 128, 2, 2, dev_ok);  /* the wide kernel: enc1.conv1's shape */
  plain_dgrad_case(8, 8, 192, 128, 2, 2, dev_ok);   /* the wide kernel, three 64-channel groups */
  plain_dgrad_case(8, 8, 128, 64, 2, 0, dev_ok);    /* no images */
  plain_dgrad_case(8, 8, 48, 64, 2, 2, dev_ok);     /* a width it does not take: refused */
  not_in_f16(128, 64, OPS_FUSE_DGRAD);
}
END_TEST

/* The transposed convolution through cuBLAS (conv_up_gemm_cuda.cu): each batching of the
 * GEMMs (per output row, per pixel column), each weight-gradient method (f32 partials per
 * pixel column, dy gathered), the input gradient on GEMMs (layers bound by arithmetic) and on
 * cuDNN, the bias in cuBLASLt's epilogue (or a pass where cuBLASLt has no kernel for the
 * alignment), against the CPU backend. */
START_TEST(test_conv_up)
{
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    /* the U-Net's deepest up-convolution (1024 -> 512 over 16x16), planned for its batch of 6:
     * input gradient on GEMMs, weight gradient by the gather; one image and the full batch */
    conv_case(OPS_CONVT2X2, 16, 16, 1024, 512, 6, 1);
    conv_case(OPS_CONVT2X2, 8, 8, 512, 256, 8, 8);
    /* the shallowest's channels (128 -> 64) over 128 columns: batched per output row, weight
     * gradient by partials per column (n * h above 2 cin) */
    conv_case(OPS_CONVT2X2, 32, 128, 64, 32, 5, 5);
    /* few, odd columns: batched per pixel column, partials; a smaller batch than planned */
    conv_case(OPS_CONVT2X2, 40, 5, 8, 6, 3, 3);
    conv_case(OPS_CONVT2X2, 40, 5, 8, 6, 3, 2);
    /* widths off every vector width, one or two channels, one row */
    conv_case(OPS_CONVT2X2, 3, 7, 5, 3, 2, 2);
    conv_case(OPS_CONVT2X2, 5, 3, 2, 1, 2, 1);
    conv_case(OPS_CONVT2X2, 1, 9, 3, 2, 1, 1);
    conv_case(OPS_CONVT2X2, 2, 13, 12, 6, 1, 1);
    /* every batch from 1 to 8 of one plan */
    for (int n = 1; n <= 8; n++) conv_case(OPS_CONVT2X2, 6, 10, 24, 16, 8, n);
    /* weights and their gradient at odd offsets: cuBLASLt told their alignment */
    conv_case_at(OPS_CONVT2X2, 6, 10, 24, 16, 2, 2, 1);
    conv_case_at(OPS_CONVT2X2, 16, 16, 256, 128, 2, 2, 2);
    /* at the model's offset (4 elements: 8 bytes in 16-bit types): the deepest layer (weights
     * copied for forward and input gradient, the gathered gradient through f32) and the
     * shallowest's channels (partials) */
    conv_case_at(OPS_CONVT2X2, 16, 16, 1024, 512, 6, 1, 4);
    conv_case_at(OPS_CONVT2X2, 32, 128, 64, 32, 5, 5, 4);
  }
}
END_TEST

/* The up-convolution's backward from dy gathered (ops.h conv_bwd_filter_gathered,
 * conv_bwd_data_gathered; conv_up_gemm_cuda.cu: one GEMM each) against the CPU backend's plain
 * ops on the NHWC dy and against the GPU's own plain path on it (method (a) or (b) for the
 * weights, two GEMMs or cuDNN for the input gradient: the same products summed in another
 * order, so within the convolutions' tolerance); weights and their gradient woff elements into
 * their buffers (4: the model's 8 bytes off in 16-bit types, the weights copied and the
 * gradient through f32). Outputs start as NaN: an element never written fails. */
static void conv_up_gathered_case(int h, int w, int cin, int cout, int max_n, int n, int woff)
{
  ops_conv_t cc = {.kind = OPS_CONVT2X2, .h = h, .w = w, .cin = cin, .cout = cout,
                   .max_n = max_n}, gc = cc;
  const size_t P = (size_t)n * h * w, nx = P * cin, ny = 4 * P * cout;
  const size_t nw = (size_t)4 * cin * cout;
  float *x = hvec(nx, 1, 0), *wt = hvec(nw, 1.0f / sqrtf(4.0f * cin), 0), *dy = hvec(ny, 1, 0);
  float *dx = hvec(nx, 0, 0), *dw = hvec(nw, 0, 0), *db = hvec(cout, 0, 0), *z = hvec(ny, 0, 0);
  /* the gather, written from ops.h's definition */
  for (size_t p = 0; p < P; p++) {
    size_t img = p / ((size_t)h * w), t = p / w % h, s = p % w;
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++)
        memcpy(z + ((p * 2 + i) * 2 + j) * cout,
               dy + ((img * 2 * h + 2 * t + i) * 2 * w + 2 * s + j) * cout, cout * sizeof *z);
  }
  size_t cws = 0, gws = 0;
  CPU_OK(cpu.conv_plan(&cpu, &cc, &cws));
  GPU_OK(gpu.conv_plan(&gpu, &gc, &gws));
  char what[112];
  snprintf(what, sizeof what, "gathered up-conv %dx%d %d->%d n=%d/%d, weights at +%d", h, w, cin,
           cout, n, max_n, woff);
#ifndef HAVE_CUBLAS
  /* cuDNN alone reads no gathered order: the layer says so and the entries refuse it */
  ck_assert_int_eq(gpu.conv_gathered(&gpu, &gc), 0);
  ck_assert_int_ne(gpu.conv_bwd_data_gathered(&gpu, &gc, n, NULL, NULL, NULL, NULL), 0);
  gpu.conv_plan_free(&gpu, &gc);
  return;
#endif
  ck_assert_msg(gpu.conv_gathered(&gpu, &gc) == 1, "%s: conv_gathered says 0", what);
  float *ws = malloc(cws + 16);
  keep(ws);
  CPU_OK(cpu.conv_bwd_filter(&cpu, &cc, n, x, dy, dw, db, 0, ws));
  CPU_OK(cpu.conv_bwd_data(&cpu, &cc, n, dy, wt, dx, ws));
  float *wt2 = hvec(nw + woff, 0, 0);
  memcpy(wt2 + woff, wt, nw * sizeof *wt);
  void *gx = up(x, nx), *gdy = up(dy, ny), *gz = up(z, ny);
  void *gw = (char *)up(wt2, nw + woff) + woff * gpu.elem;
  void *gdw = (char *)dalloc((nw + woff) * gpu.elem) + woff * gpu.elem;
  void *gdwp = (char *)dalloc((nw + woff) * gpu.elem) + woff * gpu.elem;
  void *gdb = dalloc(cout * gpu.elem), *gdbp = dalloc(cout * gpu.elem);
  void *gdx = dalloc(nx * gpu.elem), *gdxp = dalloc(nx * gpu.elem), *gwsp = dalloc(gws);
  GPU_OK(gpu.conv_bwd_filter_gathered(&gpu, &gc, n, gx, gz, gdw, gdb, 0, gwsp));
  float *gdw_h = down(gdw, nw), *gdb_h = down(gdb, cout);
  CLOSE(gdw_h, dw, nw, tol_conv(), what);
  CLOSE(gdb_h, db, cout, tol_elem() + 1e-5, "gathered up-conv db");
  GPU_OK(gpu.conv_bwd_filter(&gpu, &gc, n, gx, gdy, gdwp, gdbp, 0, gwsp));
  CLOSE(gdw_h, down(gdwp, nw), nw, tol_conv(), "gathered up-conv dw against the GPU's plain");
  CLOSE(gdb_h, down(gdbp, cout), cout, tol_elem() + 1e-5,
        "gathered up-conv db against the GPU's plain");
  GPU_OK(gpu.conv_bwd_filter_gathered(&gpu, &gc, n, gx, gz, gdw, gdb, 1, gwsp)); /* accumulate */
  for (size_t i = 0; i < nw; i++) dw[i] *= 2;
  for (int i = 0; i < cout; i++) db[i] *= 2;
  CLOSE(down(gdw, nw), dw, nw, tol_conv() * 2, "gathered up-conv dw (accumulate)");
  CLOSE(down(gdb, cout), db, cout, 2 * tol_elem() + 1e-5, "gathered up-conv db (accumulate)");
  GPU_OK(gpu.conv_bwd_data_gathered(&gpu, &gc, n, gz, gw, gdx, gwsp));
  float *gdx_h = down(gdx, nx);
  CLOSE(gdx_h, dx, nx, tol_conv(), "gathered up-conv dx");
  GPU_OK(gpu.conv_bwd_data(&gpu, &gc, n, gdy, gw, gdxp, gwsp));
  CLOSE(gdx_h, down(gdxp, nx), nx, tol_conv(), "gathered up-conv dx against the GPU's plain");
  /* the weights were read, not written, and nothing before the gradient's start was touched */
  EXACT(down((char *)gw - woff * gpu.elem, nw + woff), wt2, nw + woff, "weights after");
  if (woff) ck_assert(isnan(down((char *)gdw - woff * gpu.elem, 1)[0]));
  gpu.conv_plan_free(&gpu, &gc);
  cpu.conv_plan_free(&cpu, &cc);
}

START_TEST(test_conv_up_gathered)
{
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    /* the deepest up-convolution at the trainer's batch and one image; the next one */
    conv_up_gathered_case(16, 16, 1024, 512, 6, 1, 0);
    conv_up_gathered_case(8, 8, 512, 256, 8, 8, 0);
    /* the shallowest's channels over 128 columns (the NHWC path's partials) */
    conv_up_gathered_case(32, 128, 64, 32, 5, 5, 0);
    /* few, odd columns; widths off every vector width, one or two channels, one row */
    conv_up_gathered_case(40, 5, 8, 6, 3, 2, 0);
    conv_up_gathered_case(3, 7, 5, 3, 2, 2, 0);
    conv_up_gathered_case(5, 3, 2, 1, 2, 1, 0);
    conv_up_gathered_case(1, 9, 3, 2, 1, 1, 0);
    conv_up_gathered_case(4, 4, 8, 8, 2, 0, 0); /* no images: dw and db zero */
    /* weights and gradient off alignment: odd, and the model's 4 elements */
    conv_up_gathered_case(6, 10, 24, 16, 2, 2, 1);
    conv_up_gathered_case(16, 16, 1024, 512, 6, 1, 4);
    conv_up_gathered_case(32, 128, 64, 32, 5, 5, 4);
    /* other kinds have no gathered order: 0, and refused */
    ops_conv_t c = {.kind = OPS_CONV3X3, .h = 4, .w = 4, .cin = 8, .cout = 8, .max_n = 2};
    size_t ws = 0;
    GPU_OK(gpu.conv_plan(&gpu, &c, &ws));
    ck_assert_int_eq(gpu.conv_gathered(&gpu, &c), 0);
    ck_assert_int_ne(gpu.conv_bwd_filter_gathered(&gpu, &c, 1, NULL, NULL, NULL, NULL, 0, NULL),
                     0);
    ck_assert_ptr_nonnull(strstr(gpu.last_error(&gpu), "gathered"));
    gpu.conv_plan_free(&gpu, &c);
  }
}
END_TEST

/* The model's flat parameter buffer puts the 16-bit weights and gradients 8 bytes off 16-byte
 * alignment (every tensor follows the head's 4 + 64 * 4 elements at 4 classes). The GEMMs then
 * take aligned copies in the workspace, as cuDNN's path does, never the pointers themselves
 * (cuBLAS's slower kernels for them cost the trainer more than the GEMMs won). No device
 * memory is touched: only the addresses are looked at. */
START_TEST(test_conv_up_route)
{
#ifdef HAVE_CUBLAS
  const uintptr_t base = (uintptr_t)1 << 20; /* a 256-byte aligned address, as cudaMalloc's */
  for (int d = 0; d < NDT; d++) {
    use_dtype(d);
    const void *at0 = (const void *)base, *at4 = (const void *)(base + 4 * gpu.elem);
    const int off = 4 * gpu.elem % 16 != 0; /* 16-bit: 8 bytes off; f32: aligned */
    /* the deepest up-convolution at the trainer's batch: the weight gradient by the gather */
    ops_conv_t deep = {.kind = OPS_CONVT2X2, .h = 16, .w = 16, .cin = 1024, .cout = 512,
                       .max_n = 6};
    /* the shallowest: by partials, which write dw through their own pass */
    ops_conv_t top = {.kind = OPS_CONVT2X2, .h = 128, .w = 128, .cin = 128, .cout = 64,
                      .max_n = 6};
    size_t ws = 0;
    GPU_OK(gpu.conv_plan(&gpu, &deep, &ws));
    GPU_OK(gpu.conv_plan(&gpu, &top, &ws));
    ck_assert_uint_eq(ops_cuda_conv_up_route(&gpu, &deep, 6, at0, at0), 0);
    ck_assert_uint_eq(ops_cuda_conv_up_route(&gpu, &deep, 6, at4, at4),
                      off ? OPS_CUDA_UP_STAGE_WEIGHTS | OPS_CUDA_UP_STAGE_WGRAD : 0);
    ck_assert_uint_eq(ops_cuda_conv_up_route(&gpu, &deep, 6, at0, at4),
                      off ? OPS_CUDA_UP_STAGE_WGRAD : 0);
    ck_assert_uint_eq(ops_cuda_conv_up_route(&gpu, &top, 6, at0, at0), 0);
    ck_assert_uint_eq(ops_cuda_conv_up_route(&gpu, &top, 6, at4, at4),
                      off ? OPS_CUDA_UP_STAGE_WEIGHTS : 0);
    gpu.conv_plan_free(&gpu, &deep);
    gpu.conv_plan_free(&gpu, &top);
  }
#endif
}
END_TEST

/* ---- optimizers and the non-finite check (f32 buffers; the table's dtype is not used) ---- */

START_TEST(test_optim)
{
  char err[256];
  dt = OPS_F32;
  const size_t n = 100003;
  for (int kind = 0; kind < 3; kind++) { /* SGD momentum, SGD Nesterov, AdamW */
    float *p = hvec(n, 1, 0), *g = hvec(n, 1, 0), *m = hvec(n, 0.1f, 0), *v = hvec(n, 0.1f, 0.2f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float *dp = up_raw(p, n * 4), *dg = up_raw(g, n * 4), *dm = up_raw(m, n * 4);
    float *dv = up_raw(v, n * 4);
    void *low = dalloc(n * 2);
    if (kind < 2) {
      optim_cpu_sgd(p, g, m, n, 0.05, 1e-4, 0.9, kind, 0.5);
      ck_assert_msg(ops_cuda_sgd(dp, dg, OPS_F32, dm, n, 0.05, 1e-4, 0.9, kind, 0.5, low,
                                 OPS_BF16, NULL, err, sizeof err) == 0, "%s", err);
    } else {
      optim_cpu_adamw(p, g, m, v, n, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.19, 0.002, 0.5);
      ck_assert_msg(ops_cuda_adamw(dp, dg, OPS_F32, dm, dv, n, 1e-3, 0.9, 0.999, 1e-8, 0.01,
                                   0.19, 0.002, 0.5, low, OPS_F16, NULL, err, sizeof err) == 0,
                    "%s", err);
      CLOSE((float *)down_raw(dv, n * 4), v, n, 1e-6, "AdamW v");
    }
    float *hp = down_raw(dp, n * 4);
    CLOSE(hp, p, n, 1e-6, kind < 2 ? "SGD parameters" : "AdamW parameters");
    CLOSE((float *)down_raw(dm, n * 4), m, n, 1e-6, "optimizer moment");
    uint16_t *hl = down_raw(low, n * 2);
    for (size_t i = 0; i < n; i++)
      ck_assert_int_eq(hl[i], kind < 2 ? f32_to_bf16(hp[i]) : f32_to_f16(hp[i]));
    free_all();
  }
  /* plain SGD (no momentum buffer), misaligned: the element-by-element path */
  float *p = hvec(n, 1, 0), *g = hvec(n, 1, 0);
  float *dp = up_raw(p, n * 4), *dg = up_raw(g, n * 4);
  optim_cpu_sgd(p + 1, g + 1, NULL, n - 1, 0.1, 0, 0, 0, 1);
  ck_assert(ops_cuda_sgd(dp + 1, dg + 1, OPS_F32, NULL, n - 1, 0.1, 0, 0, 0, 1, NULL, OPS_F32,
                         NULL, err, sizeof err) == 0);
  CLOSE((float *)down_raw(dp, n * 4) + 1, p + 1, n - 1, 1e-6, "plain SGD");
  free_all();
}
END_TEST

/* One update from 16-bit gradients, and the same update from their f32 widening (exact): the
 * same bits in the parameters, the moments and the 16-bit copy. at: first element (1: the
 * gradients 2 bytes off the vector alignment, the element-by-element path). */
static void optim_16bit_case(int kind, ops_dtype_t gdt, size_t at)
{
  char err[256];
  const size_t n = 100003, k = n - at;
  float *p = hvec(n, 1, 0), *g = hvec(n, 1, 0), *m = hvec(n, 0.1f, 0), *v = hvec(n, 0.1f, 0.2f);
  for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
  uint16_t *g16 = malloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    g16[i] = gdt == OPS_BF16 ? f32_to_bf16(g[i]) : f32_to_f16(g[i]);
    g[i] = gdt == OPS_BF16 ? bf16_to_f32(g16[i]) : f16_to_f32(g16[i]);
  }
  float *d[2][3];
  void *low[2];
  for (int r = 0; r < 2; r++) { /* r 0: f32 gradients, 1: the 16-bit ones */
    d[r][0] = up_raw(p, n * 4), d[r][1] = up_raw(m, n * 4), d[r][2] = up_raw(v, n * 4);
    low[r] = dalloc(n * 2);
    const void *dg = r ? (const void *)((uint16_t *)up_raw(g16, n * 2) + at)
                       : (const void *)((float *)up_raw(g, n * 4) + at);
    ops_dtype_t t = r ? gdt : OPS_F32;
    int rc = kind < 2 ? ops_cuda_sgd(d[r][0] + at, dg, t, d[r][1] + at, k, 0.05, 1e-4, 0.9, kind,
                                     0.5, (uint16_t *)low[r] + at, OPS_BF16, NULL, err, sizeof err)
                      : ops_cuda_adamw(d[r][0] + at, dg, t, d[r][1] + at, d[r][2] + at, k, 1e-3,
                                       0.9, 0.999, 1e-8, 0.01, 0.19, 0.002, 0.5,
                                       (uint16_t *)low[r] + at, OPS_BF16, NULL, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
  }
  if (kind < 2) optim_cpu_sgd(p + at, g + at, m + at, k, 0.05, 1e-4, 0.9, kind, 0.5);
  else
    optim_cpu_adamw(p + at, g + at, m + at, v + at, k, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.19, 0.002,
                    0.5);
  float *hp = down_raw(d[1][0], n * 4);
  CLOSE(hp + at, p + at, k, 1e-6, "parameters from 16-bit gradients against the CPU reference");
  for (int b = 0; b < 3; b++)
    ck_assert_msg(memcmp((float *)down_raw(d[0][b], n * 4) + at,
                         (float *)down_raw(d[1][b], n * 4) + at, k * 4) == 0,
                  "kind %d, %s gradients at %zu: buffer %d differs from the f32-gradient update",
                  kind, gdt == OPS_BF16 ? "bf16" : "f16", at, b);
  ck_assert(memcmp((uint16_t *)down_raw(low[0], n * 2) + at,
                   (uint16_t *)down_raw(low[1], n * 2) + at, k * 2) == 0);
  free(g16);
  free_all();
}

START_TEST(test_optim_16bit_grads)
{
  dt = OPS_F32;
  for (int kind = 0; kind < 3; kind++) {
    optim_16bit_case(kind, OPS_BF16, 0);
    optim_16bit_case(kind, OPS_F16, 0);
    optim_16bit_case(kind, OPS_BF16, 1);
  }
  char err[256];
  float *p = dalloc(64 * 4);
  ck_assert_int_ne(ops_cuda_sgd(p, p, OPS_F64, NULL, 64, 0.1, 0, 0, 0, 1, NULL, OPS_F32, NULL, err,
                                sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "bf16 or f16 gradients"));
  free_all();
}
END_TEST

START_TEST(test_nonfinite)
{
  char err[256];
  dt = OPS_F32;
  const size_t n = 50001;
  float *g = hvec(n, 1e3f, 0);
  int found = -1, *flag = dalloc(sizeof(int));
  float *dg = up_raw(g, n * 4);
  ck_assert_msg(ops_cuda_nonfinite(dg, n, NULL, &found, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(found, 0);
  const size_t where[] = {0, 12345, n - 1};
  const float bad[] = {INFINITY, NAN, -INFINITY};
  for (int i = 0; i < 3; i++) {
    float *d2 = up_raw(g, n * 4), v = bad[i];
    cudaMemcpy(d2 + where[i], &v, 4, cudaMemcpyHostToDevice);
    ck_assert(ops_cuda_nonfinite(d2, n, NULL, &found, err, sizeof err) == 0);
    ck_assert_msg(found == 1, "non-finite value at %zu not found", where[i]);
    cudaMemset(flag, 0, sizeof(int));
    ck_assert(ops_cuda_nonfinite_async(d2 + 1, n - 1, flag, NULL, err, sizeof err) == 0);
    int h = -1;
    cudaMemcpy(&h, flag, sizeof h, cudaMemcpyDeviceToHost);
    ck_assert_int_eq(h, where[i] != 0);
  }
}
END_TEST

START_TEST(test_init_errors)
{
  ops_t o;
  char err[256] = "";
  ck_assert_int_ne(ops_cuda_init(&o, OPS_F64, 0, NULL, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "f64"));
  ck_assert_int_ne(ops_cuda_init(&o, OPS_F32, 999, NULL, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "does not exist"));
  ck_assert_int_eq(ops_cuda_init(&o, OPS_BF16, 0, NULL, err, sizeof err), 0);
  ck_assert_str_eq(o.name, "cuda-bf16");
  ck_assert_ptr_nonnull(ops_cuda_stream(&o));
  ck_assert(ops_cuda_scratch_bytes(&o) > 0);
  o.destroy(&o);
}
END_TEST

static Suite *make_ops_cuda_suite(const suite_env_t *env)
{
  Suite *s = suite_create("ops_cuda");
  TCase *tc = SUITE_CASE(s, "elementwise", test_casts, test_relu, test_maxpool, test_bn_apply_pool,
                          test_concat, test_concat_gathered);
  tcase_add_checked_fixture(tc, NULL, teardown);
  tc = SUITE_CASE(s, "normalisation", test_batchnorm, test_groupnorm);
  tcase_add_checked_fixture(tc, NULL, teardown);
  tc = SUITE_CASE(s, "loss", test_softmax_ce);
  tcase_add_checked_fixture(tc, NULL, teardown);
  tc = SUITE_CASE(s, "head_train", test_head_train);
  tcase_add_checked_fixture(tc, NULL, teardown);
  tc = SUITE_CASE(s, "conv", test_conv);
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 120); /* the convolution search times every algorithm */
  tc = SUITE_CASE(s, "conv_rgb_stats", test_rgb_stats);
  tcase_add_checked_fixture(tc, NULL, teardown);
  tc = SUITE_CASE(s, "conv_plain_dgrad", test_plain_dgrad);
  tcase_add_checked_fixture(tc, NULL, teardown);
  tc = SUITE_CASE(s, "conv_up", test_conv_up);
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 300); /* bounds a hang; the CPU reference takes seconds */
  tc = SUITE_CASE(s, "conv_up_gathered", test_conv_up_gathered);
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 300); /* bounds a hang; the CPU reference takes seconds */
  tc = SUITE_CASE(s, "conv_up_route", test_conv_up_route);
  tcase_add_checked_fixture(tc, NULL, teardown);
  tc = SUITE_CASE(s, "optimizer", test_optim, test_optim_16bit_grads, test_nonfinite,
                  test_init_errors);
  tcase_add_checked_fixture(tc, NULL, teardown);
  return s;
}

/* Probes for a GPU in a child process, so this process never initialises CUDA before the tests
 * fork. Returns the device count (0 on any error) and writes the reason when there is none. */

SUITE_MAIN("check_ops_cuda", make_ops_cuda_suite, 1)
