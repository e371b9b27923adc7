/* norm_cpu_tmpl.h — body of norm_cpu.c for one element type (define T and SFX first). */
#define NCAT_(a, b) a##_##b
#define NCAT(a, b) NCAT_(a, b)
#define FN(name) NCAT(name, SFX)

/* The upstream gradient with the fused ReLU's mask applied. */
static inline T FN(masked)(const T *dy, const T *mask_y, size_t i)
{
  return (mask_y && !(mask_y[i] > 0)) ? (T)0 : dy[i];
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

int FN(cpu_bn_apply)(const ops_t *o, const void *xv, size_t P, int C, const double *saved,
                     const void *gv, const void *bv, int relu, void *yv)
{
  const T *x = xv, *gamma = gv, *beta = bv;
  T *y = yv;
  T *ab = malloc(sizeof(T) * 2 * (size_t)C);
  if (!ab) return ops_cpu_fail("out of memory in BatchNorm (%d channels)", C);
  for (int c = 0; c < C; c++) {
    double a = (double)gamma[c] * saved[C + c];
    ab[c] = (T)a;
    ab[C + c] = (T)((double)beta[c] - saved[c] * a);
  }
  for (size_t p = 0; p < P; p++, x += C, y += C)
    for (int c = 0; c < C; c++) {
      T v = x[c] * ab[c] + ab[C + c];
      y[c] = (relu && !(v > 0)) ? (T)0 : v;
    }
  free(ab);
  return 0;
}

int FN(cpu_bn_bwd_reduce)(const ops_t *o, const void *dyv, const void *mv, const void *xv,
                          size_t P, int C, const double *saved, double *sums, void *dgv,
                          void *dbv, int acc)
{
  const T *dy = dyv, *mask = mv, *x = xv;
  T *dgamma = dgv, *dbeta = dbv;
  memset(sums, 0, sizeof(double) * 2 * (size_t)C);
  for (size_t p = 0; p < P; p++) {
    size_t base = p * C;
    for (int c = 0; c < C; c++) {
      double g = FN(masked)(dy, mask, base + c);
      double xhat = ((double)x[base + c] - saved[c]) * saved[C + c];
      sums[c] += g;
      sums[C + c] += g * xhat;
    }
  }
  for (int c = 0; c < C; c++) {
    dbeta[c] = (T)((acc ? (double)dbeta[c] : 0.0) + sums[c]);
    dgamma[c] = (T)((acc ? (double)dgamma[c] : 0.0) + sums[C + c]);
  }
  return 0;
}

int FN(cpu_bn_bwd_apply)(const ops_t *o, const void *dyv, const void *mv, const void *xv,
                         size_t P, int C, const double *saved, const double *sums,
                         const void *gv, void *dxv)
{
  const T *dy = dyv, *mask = mv, *x = xv, *gamma = gv;
  T *dx = dxv;
  double n = saved[2 * C];
  if (P == 0) return 0;
  if (!(n > 0)) return ops_cpu_fail("BatchNorm backward: the forward count is %g", n);
  /* dx = k * (g - m1 - xhat * m2) with per-channel k, m1, m2 */
  T *k = malloc(sizeof(T) * 4 * (size_t)C);
  if (!k) return ops_cpu_fail("out of memory in BatchNorm backward (%d channels)", C);
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
      T g = FN(masked)(dy, mask, base + c);
      T xhat = (x[base + c] - mean[c]) * (T)saved[C + c];
      dx[base + c] = k[c] * (g - m1[c] - xhat * m2[c]);
    }
  }
  free(k);
  return 0;
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
          T v = (T)(((double)xs[p * C + c] - mean) * inv * (double)gamma[ch] + (double)beta[ch]);
          ys[p * C + c] = (relu && !(v > 0)) ? (T)0 : v;
        }
    }
  return 0;
}

int FN(cpu_gn_bwd)(const ops_t *o, const void *dyv, const void *mv, const void *xv, int n,
                   size_t hw, int C, int G, const double *saved, const void *gv, void *dxv,
                   void *dgv, void *dbv, int acc)
{
  const T *dy = dyv, *mask = mv, *x = xv, *gamma = gv;
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
          double gr = FN(masked)(dy, mask, i);
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
          double gr = FN(masked)(dy, mask, i);
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
