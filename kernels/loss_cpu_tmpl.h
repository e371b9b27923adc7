/* loss_cpu_tmpl.h — body of loss_cpu.c for one element type (define T and SFX first). */
#define LCAT_(a, b) a##_##b
#define LCAT(a, b) LCAT_(a, b)
#define FN(name) LCAT(name, SFX)

int FN(cpu_softmax_ce)(const ops_t *o, const void *lv, const int32_t *labels, size_t P, int K,
                       int ignore_index, double scale, double norm_count, void *dv,
                       int32_t *pred, double *loss_sum, long *count)
{
  const T *logits = lv;
  T *dlogits = dv;
  long cnt = 0;
  for (size_t p = 0; p < P && labels; p++) {
    int32_t l = labels[p];
    if (l == ignore_index) continue;
    if (l < 0 || l >= K)
      return ops_cpu_fail("label %d at pixel %zu is outside [0, %d) and is not the ignore "
                          "index %d", (int)l, p, K, ignore_index);
    cnt++;
  }
  double norm = norm_count > 0 ? norm_count : (double)cnt;
  double coef = norm > 0 ? scale / norm : 0;
  double sum = 0;
  for (size_t p = 0; p < P; p++) {
    const T *z = logits + p * K;
    int best = 0;
    for (int k = 1; k < K; k++)
      if (z[k] > z[best]) best = k;
    if (pred) pred[p] = best;
    int32_t l = labels ? labels[p] : ignore_index;
    int counted = labels && l != ignore_index;
    double zmax = z[best], se = 0;
    for (int k = 0; k < K; k++) se += exp((double)z[k] - zmax);
    double lse = zmax + log(se);
    if (counted) sum += lse - (double)z[l];
    if (dlogits) {
      T *d = dlogits + p * K;
      for (int k = 0; k < K; k++)
        d[k] = counted ? (T)(coef * (exp((double)z[k] - lse) - (k == l ? 1.0 : 0.0))) : (T)0;
    }
  }
  *loss_sum = sum;
  *count = cnt;
  return 0;
}

#undef LCAT_
#undef LCAT
#undef FN
