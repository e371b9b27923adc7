/* norm_cpu_tmpl.h — body of norm_cpu.c for one element type (define T and SFX first). */
#define NCAT_(a, b) a##_##b
#define NCAT(a, b) NCAT_(a, b)
#define FN(name) NCAT(name, SFX)

/* BatchNorm's per-channel affine as the forward applies it: y = x * ab[c] + ab[C + c]. The
 * backward's recomputed ReLU decision (ops_relu_t without y) uses the same numbers. */
static T *FN(bn_affine)(int C, const double *saved, const T *gamma, const T *beta)
{
  T *ab = malloc(sizeof(T) * 2 * (size_t)C);
  if (!ab) return NULL;
  for (int c = 0; c < C; c++) {
    double a = (double)gamma[c] * saved[C + c];
    ab[c] = (T)a;
    ab[C + c] = (T)((double)beta[c] - saved[c] * a);
  }
  return ab;
}

static inline T FN(bn_affine_at)(const T *x, const T *ab, int C, size_t i, int c)
{
  return x[i] * ab[c] + ab[C + c];
}

/* The upstream gradient at element i (channel c) with the fused ReLU applied (ops_relu_t):
 * from the kept output y, or from x and the forward's affine ab. */
static inline T FN(bn_masked)(const T *dy, const ops_relu_t *r, const T *x, const T *ab, int C,
                              size_t i, int c)
{
  if (!r) return dy[i];
  if (r->y) return ((const T *)r->y)[i] > 0 ? dy[i] : (T)0;
  return FN(bn_affine_at)(x, ab, C, i, c) > 0 ? dy[i] : (T)0;
}

/* GroupNorm's output before the ReLU, as the forward computes it. */
static inline T FN(gn_affine_at)(const T *x, size_t i, double mean, double inv, T gamma, T beta)
{
  return (T)(((double)x[i] - mean) * inv * (double)gamma + (double)beta);
}

/* The forward's affine for the recomputed decision, when one is needed: *ab NULL otherwise.
 * Returns -1 (message set) when out of memory. */
static int FN(bn_mask_affine)(const ops_relu_t *r, int C, const double *saved, T **ab)
{
  *ab = NULL;
  if (!r || r->y) return 0;
  if (!r->gamma || !r->beta)
    return ops_cpu_fail("BatchNorm backward: a ReLU mask without y needs gamma and beta");
  *ab = FN(bn_affine)(C, saved, r->gamma, r->beta);
  return *ab ? 0 : ops_cpu_fail("out of memory in BatchNorm backward (%d channels)", C);
}

int FN(cpu_bn_stats)(const ops_t *o, const void *xv, size_t P, int C, double *stats)
{
  const T *x = xv;
  memset(stats, 0, sizeof(double) * (2 * (size_t)C + 1));
  double *s1 = stats, *s2 = stats + C;
  for (size_t p = 0; p < P; p++, x += C)
    for (int c = 0; c < C; c++) {
      double v = x[c];
      s1[c] += v;
      s2[c] += v * v;
    }
  stats[2 * C] = (double)P;
  return 0;
}

int FN(cpu_bn_apply_ld)(const ops_t *o, const void *xv, size_t P, int C, const double *saved,
                        const void *gv, const void *bv, int relu, void *yv, size_t ldy)
{
  const T *x = xv, *gamma = gv, *beta = bv;
  T *y = yv;
  if (ldy < (size_t)C)
    return ops_cpu_fail("BatchNorm output rows %zu elements apart: fewer than its %d channels",
                        ldy, C);
  T *ab = FN(bn_affine)(C, saved, gamma, beta);
  if (!ab) return ops_cpu_fail("out of memory in BatchNorm (%d channels)", C);
  for (size_t p = 0; p < P; p++, x += C, y += ldy)
    for (int c = 0; c < C; c++) {
      T v = FN(bn_affine_at)(x, ab, C, (size_t)c, c);
      y[c] = (relu && !(v > 0)) ? (T)0 : v;
    }
  free(ab);
  return 0;
}

int FN(cpu_bn_apply)(const ops_t *o, const void *xv, size_t P, int C, const double *saved,
                     const void *gv, const void *bv, int relu, void *yv)
{
  return FN(cpu_bn_apply_ld)(o, xv, P, C, saved, gv, bv, relu, yv, (size_t)C);
}

int FN(cpu_bn_bwd_reduce)(const ops_t *o, const void *dyv, const ops_relu_t *relu,
                          const void *xv, size_t P, int C, const double *saved, double *sums,
                          void *dgv, void *dbv, int acc)
{
  const T *dy = dyv, *x = xv;
  T *dgamma = dgv, *dbeta = dbv, *ab;
  if (FN(bn_mask_affine)(relu, C, saved, &ab) != 0) return -1;
  memset(sums, 0, sizeof(double) * 2 * (size_t)C);
  for (size_t p = 0; p < P; p++) {
    size_t base = p * C;
    for (int c = 0; c < C; c++) {
      double g = FN(bn_masked)(dy, relu, x, ab, C, base + c, c);
      double xhat = ((double)x[base + c] - saved[c]) * saved[C + c];
      sums[c] += g;
      sums[C + c] += g * xhat;
    }
  }
  for (int c = 0; c < C; c++) {
    dbeta[c] = (T)((acc ? (double)dbeta[c] : 0.0) + sums[c]);
    dgamma[c] = (T)((acc ? (double)dgamma[c] : 0.0) + sums[C + c]);
  }
  free(ab);
  return 0;
}

int FN(cpu_bn_bwd_apply)(const ops_t *o, const void *dyv, const ops_relu_t *relu,
                         const void *xv, size_t P, int C, const double *saved, const double *sums,
                         const void *gv, void *dxv)
{
  const T *dy = dyv, *x = xv, *gamma = gv;
  T *dx = dxv, *ab;
  double n = saved[2 * C];
  if (P == 0) return 0;
  if (!(n > 0)) return ops_cpu_fail("BatchNorm backward: the forward count is %g", n);
  /* dx = k * (g - m1 - xhat * m2) with per-channel k, m1, m2 */
  T *k = malloc(sizeof(T) * 4 * (size_t)C);
  if (!k) return ops_cpu_fail("out of memory in BatchNorm backward (%d channels)", C);
  if (FN(bn_mask_affine)(relu, C, saved, &ab) != 0) {
    free(k);
    return -1;
  }
  T *m1 = k + C, *m2 = k + 2 * C, *mean = k + 3 * C;
  for (int c = 0; c < C; c++) {
    k[c] = (T)((double)gamma[c] * saved[C + c]);
    m1[c] = (T)(sums[c] / n);
    m2[c] = (T)(sums[C + c] / n);
    mean[c] = (T)saved[c];
  }
  for (size_t p = 0; p < P; p++) {
    size_t base = p * C;
    for (int c = 0; c < C; c++) {
      T g = FN(bn_masked)(dy, relu, x, ab, C, base + c, c);
      T xhat = (x[base + c] - mean[c]) * (T)saved[C + c];
      dx[base + c] = k[c] * (g - m1[c] - xhat * m2[c]);
    }
  }
  free(ab);
  free(k);
  return 0;
}

/* dy of bn_bwd_*_1x1 in a scratch tensor, by the convolution's own input-gradient GEMM; NULL
 * (the message recorded) when it cannot be allocated. */
static T *FN(dy_of_1x1)(const void *g, const void *w, int K, size_t P, int C)
{
  if (!g || !w || K < 1 || K > OPS_BN_1X1_MOST_K) {
    ops_cpu_fail("BatchNorm backward through a 1x1 head: %d classes (1 to %d) with its output "
                 "gradient and weights (g %s, w %s)", K, OPS_BN_1X1_MOST_K, g ? "set" : "NULL",
                 w ? "set" : "NULL");
    return NULL;
  }
  size_t n = P * (size_t)C;
  T *dy = malloc(sizeof(T) * (n ? n : 1));
  if (!dy) {
    ops_cpu_fail("out of memory for a %zu x %d gradient in BatchNorm backward", P, C);
    return NULL;
  }
  FN(cpu_conv1x1_dgrad)(g, w, P, K, C, dy);
  return dy;
}

int FN(cpu_bn_bwd_reduce_1x1)(const ops_t *o, const void *g, const void *w, int K,
                              const ops_relu_t *relu, const void *x, size_t P, int C,
                              const double *saved, double *sums, void *dgamma, void *dbeta,
                              int acc)
{
  T *dy = FN(dy_of_1x1)(g, w, K, P, C);
  if (!dy) return -1;
  int rc = FN(cpu_bn_bwd_reduce)(o, dy, relu, x, P, C, saved, sums, dgamma, dbeta, acc);
  free(dy);
  return rc;
}

int FN(cpu_bn_bwd_apply_1x1)(const ops_t *o, const void *g, const void *w, int K,
                             const ops_relu_t *relu, const void *x, size_t P, int C,
                             const double *saved, const double *sums, const void *gamma,
                             void *dx)
{
  T *dy = FN(dy_of_1x1)(g, w, K, P, C);
  if (!dy) return -1;
  int rc = FN(cpu_bn_bwd_apply)(o, dy, relu, x, P, C, saved, sums, gamma, dx);
  free(dy);
  return rc;
}

/* bn_apply(x) with its ReLU in a scratch tensor for conv1x1_*_bn (NULL, the message recorded,
 * when o's conv1x1_bn_ok refuses c or the tensor cannot be allocated). */
static T *FN(a_of_1x1)(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                       const double *saved, const void *gamma, const void *beta)
{
  if (o->conv1x1_bn_ok(o, c) != 1) {
    ops_cpu_fail("a BatchNorm feeding a convolution directly needs a 1x1 one with at most %d "
                 "outputs, not kind %d with %d", OPS_BN_1X1_MOST_K, (int)c->kind, c->cout);
    return NULL;
  }
  if (!saved || !gamma || !beta) {
    ops_cpu_fail("a 1x1 convolution on a BatchNorm's apply needs the norm's saved statistics, "
                 "gamma and beta (one is NULL)");
    return NULL;
  }
  size_t P = (size_t)n * c->h * c->w, e = P * (size_t)c->cin;
  T *a = malloc(sizeof(T) * (e ? e : 1));
  if (!a) {
    ops_cpu_fail("out of memory for a %zu x %d BatchNorm output", P, c->cin);
    return NULL;
  }
  if (FN(cpu_bn_apply)(NULL, x, P, c->cin, saved, gamma, beta, 1, a)) {
    free(a);
    return NULL;
  }
  return a;
}

int FN(cpu_conv1x1_fwd_bn)(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                           const double *saved, const void *gamma, const void *beta,
                           const void *w, const void *b, void *y, void *ws)
{
  T *a = FN(a_of_1x1)(o, c, n, x, saved, gamma, beta);
  if (!a) return -1;
  int rc = FN(cpu_conv_fwd)(o, c, n, a, w, b, y, ws);
  free(a);
  return rc;
}

int FN(cpu_conv1x1_bwd_filter_bn)(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                                  const double *saved, const void *gamma, const void *beta,
                                  const void *dy, void *dw, void *db, int acc, void *ws)
{
  T *a = FN(a_of_1x1)(o, c, n, x, saved, gamma, beta);
  if (!a) return -1;
  int rc = FN(cpu_conv_bwd_filter)(o, c, n, a, dy, dw, db, acc, ws);
  free(a);
  return rc;
}

int FN(cpu_gn_fwd)(const ops_t *o, const void *xv, int n, size_t hw, int C, int G, double eps,
                   const void *gv, const void *bv, int relu, void *yv, double *saved)
{
  const T *x = xv, *gamma = gv, *beta = bv;
  T *y = yv;
  int cg = C / G;
  double m = (double)hw * cg;
  for (int s = 0; s < n; s++)
    for (int g = 0; g < G; g++) {
      const T *xs = x + (size_t)s * hw * C + (size_t)g * cg;
      double s1 = 0, s2 = 0;
      for (size_t p = 0; p < hw; p++)
        for (int c = 0; c < cg; c++) {
          double v = xs[p * C + c];
          s1 += v;
          s2 += v * v;
        }
      double mean = s1 / m, var = s2 / m - mean * mean;
      if (var < 0) var = 0;
      double inv = 1.0 / sqrt(var + eps);
      saved[(size_t)s * G + g] = mean;
      saved[(size_t)n * G + (size_t)s * G + g] = inv;
      T *ys = y + (size_t)s * hw * C + (size_t)g * cg;
      for (size_t p = 0; p < hw; p++)
        for (int c = 0; c < cg; c++) {
          int ch = g * cg + c;
          T v = FN(gn_affine_at)(xs, p * C + c, mean, inv, gamma[ch], beta[ch]);
          ys[p * C + c] = (relu && !(v > 0)) ? (T)0 : v;
        }
    }
  return 0;
}

/* The upstream gradient at element i of channel ch with GroupNorm's fused ReLU (ops_relu_t). */
static inline T FN(gn_masked)(const T *dy, const ops_relu_t *r, const T *x, size_t i, int ch,
                              double mean, double inv)
{
  if (!r) return dy[i];
  if (r->y) return ((const T *)r->y)[i] > 0 ? dy[i] : (T)0;
  const T *gamma = r->gamma, *beta = r->beta;
  return FN(gn_affine_at)(x, i, mean, inv, gamma[ch], beta[ch]) > 0 ? dy[i] : (T)0;
}

int FN(cpu_gn_bwd)(const ops_t *o, const void *dyv, const ops_relu_t *relu, const void *xv, int n,
                   size_t hw, int C, int G, const double *saved, const void *gv, void *dxv,
                   void *dgv, void *dbv, int acc)
{
  const T *dy = dyv, *x = xv, *gamma = gv;
  if (relu && !relu->y && (!relu->gamma || !relu->beta))
    return ops_cpu_fail("GroupNorm backward: a ReLU mask without y needs gamma and beta");
  T *dx = dxv, *dgamma = dgv, *dbeta = dbv;
  int cg = C / G;
  double m = (double)hw * cg;
  double *pg = calloc(2 * (size_t)C, sizeof *pg); /* Σ g·xhat, Σ g per channel */
  if (!pg) return ops_cpu_fail("out of memory in GroupNorm backward (%d channels)", C);
  for (int s = 0; s < n; s++)
    for (int g = 0; g < G; g++) {
      size_t off = (size_t)s * hw * C + (size_t)g * cg;
      double mean = saved[(size_t)s * G + g], inv = saved[(size_t)n * G + (size_t)s * G + g];
      double a1 = 0, a2 = 0; /* Σ dxhat, Σ dxhat·xhat over the group */
      for (size_t p = 0; p < hw; p++)
        for (int c = 0; c < cg; c++) {
          size_t i = off + p * C + c;
          int ch = g * cg + c;
          double gr = FN(gn_masked)(dy, relu, x, i, ch, mean, inv);
          double xhat = ((double)x[i] - mean) * inv;
          pg[ch] += gr * xhat;
          pg[C + ch] += gr;
          a1 += gr * gamma[ch];
          a2 += gr * gamma[ch] * xhat;
        }
      a1 /= m;
      a2 /= m;
      for (size_t p = 0; p < hw; p++)
        for (int c = 0; c < cg; c++) {
          size_t i = off + p * C + c;
          int ch = g * cg + c;
          double gr = FN(gn_masked)(dy, relu, x, i, ch, mean, inv);
          double xhat = ((double)x[i] - mean) * inv;
          dx[i] = (T)(inv * (gr * gamma[ch] - a1 - xhat * a2));
        }
    }
  for (int c = 0; c < C; c++) {
    dgamma[c] = (T)((acc ? (double)dgamma[c] : 0.0) + pg[c]);
    dbeta[c] = (T)((acc ? (double)dbeta[c] : 0.0) + pg[C + c]);
  }
  free(pg);
  return 0;
}

#undef NCAT_
#undef NCAT
#undef FN
