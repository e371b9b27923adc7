/* elem_cpu_tmpl.h — body of elem_cpu.c for one element type (define T and SFX first). */
#define ECAT_(a, b) a##_##b
#define ECAT(a, b) ECAT_(a, b)
#define FN(name) ECAT(name, SFX)

int FN(cpu_relu_fwd)(const ops_t *o, const void *xv, size_t count, void *yv)
{
  const T *x = xv;
  T *y = yv;
  for (size_t i = 0; i < count; i++) y[i] = x[i] > 0 ? x[i] : (T)0;
  return 0;
}

int FN(cpu_relu_bwd)(const ops_t *o, const void *dyv, const void *yv, size_t count, void *dxv)
{
  const T *dy = dyv, *y = yv;
  T *dx = dxv;
  for (size_t i = 0; i < count; i++) dx[i] = y[i] > 0 ? dy[i] : (T)0;
  return 0;
}

/* The pool over rows of x ldx elements apart (C channels each). */
static void FN(maxpool_ld)(const T *x, size_t ldx, int n, int h, int w, int C, T *y, uint8_t *arg)
{
  int ho = h / 2, wo = w / 2;
  for (int s = 0; s < n; s++)
    for (int oy = 0; oy < ho; oy++)
      for (int ox = 0; ox < wo; ox++) {
        size_t out = (((size_t)s * ho + oy) * wo + ox) * C;
        const T *x00 = x + (((size_t)s * h + 2 * oy) * w + 2 * ox) * ldx;
        const T *src[4] = {x00, x00 + ldx, x00 + (size_t)w * ldx, x00 + (size_t)w * ldx + ldx};
        for (int c = 0; c < C; c++) {
          T best = src[0][c];
          uint8_t bi = 0;
          for (uint8_t k = 1; k < 4; k++)
            if (src[k][c] > best) { best = src[k][c]; bi = k; } /* ties: the first wins */
          y[out + c] = best;
          arg[out + c] = bi;
        }
      }
}

int FN(cpu_maxpool_fwd)(const ops_t *o, const void *xv, int n, int h, int w, int C, void *yv,
                        uint8_t *arg)
{
  FN(maxpool_ld)(xv, (size_t)C, n, h, w, C, yv, arg);
  return 0;
}

/* The reference of the fused pass: the apply, then the pool of what it wrote. */
int FN(cpu_bn_apply_pool)(const ops_t *o, const void *xv, int n, int h, int w, int C,
                          const double *saved, const void *gv, const void *bv, int relu, void *yv,
                          size_t ldy, void *pooled, uint8_t *arg)
{
  if (n < 0 || h < 0 || w < 0 || h % 2 || w % 2)
    return ops_cpu_fail("BatchNorm with a 2x2 max-pool over %d images of %dx%d: the size must be "
                        "even", n, h, w);
  if (FN(cpu_bn_apply_ld)(o, xv, (size_t)n * h * w, C, saved, gv, bv, relu, yv, ldy)) return -1;
  FN(maxpool_ld)(yv, ldy, n, h, w, C, pooled, arg);
  return 0;
}

int FN(cpu_maxpool_bwd)(const ops_t *o, const void *dyv, const uint8_t *arg, int n, int h,
                        int w, int C, void *dxv, int acc)
{
  const T *dy = dyv;
  T *dx = dxv;
  int ho = h / 2, wo = w / 2;
  if (!acc) memset(dx, 0, sizeof(T) * (size_t)n * h * w * C);
  for (int s = 0; s < n; s++)
    for (int oy = 0; oy < ho; oy++)
      for (int ox = 0; ox < wo; ox++) {
        size_t out = (((size_t)s * ho + oy) * wo + ox) * C;
        T *d00 = dx + (((size_t)s * h + 2 * oy) * w + 2 * ox) * C;
        T *dst[4] = {d00, d00 + C, d00 + (size_t)w * C, d00 + (size_t)w * C + C};
        for (int c = 0; c < C; c++) dst[arg[out + c]][c] += dy[out + c];
      }
  return 0;
}

int FN(cpu_concat_fwd)(const ops_t *o, const void *av, int ca, const void *bv, int cb,
                       size_t P, void *yv)
{
  const T *a = av, *b = bv;
  T *y = yv;
  for (size_t p = 0; p < P; p++) {
    if (a) memcpy(y + p * (ca + cb), a + p * ca, sizeof(T) * ca);
    memcpy(y + p * (ca + cb) + ca, b + p * cb, sizeof(T) * cb);
  }
  return 0;
}

/* One pixel's row of the concat's gradient split: da (+)= row[:ca], db = row[ca:]. */
static void FN(split_row)(const T *row, int ca, int cb, T *da, int acc_a, T *db)
{
  if (acc_a)
    for (int c = 0; c < ca; c++) da[c] += row[c];
  else
    memcpy(da, row, sizeof(T) * ca);
  memcpy(db, row + ca, sizeof(T) * cb);
}

int FN(cpu_concat_bwd)(const ops_t *o, const void *dyv, int ca, int cb, size_t P, void *dav,
                       int acc_a, void *dbv)
{
  const T *dy = dyv;
  T *da = dav, *db = dbv;
  for (size_t p = 0; p < P; p++)
    FN(split_row)(dy + p * (ca + cb), ca, cb, da + p * ca, acc_a, db + p * cb);
  return 0;
}

/* concat_bwd with db gathered (ops.h): output pixel (R, col) of the n * H rows, R = image * H +
 * row, goes to input pixel (R / 2) * w + col / 2 (H even: R / 2 = image * h + row / 2), tap
 * (R % 2, col % 2). */
int FN(cpu_concat_bwd_gathered)(const ops_t *o, const void *dyv, int ca, int cb, int n, int H,
                                int W, void *dav, int acc_a, void *dbv)
{
  if (n < 0 || H < 0 || W < 0 || H % 2 || W % 2)
    return ops_cpu_fail("concat backward into the gathered order: %d images of %dx%d pixels "
                        "(both sides must be even)", n, H, W);
  const T *dy = dyv;
  T *da = dav, *db = dbv;
  const size_t rows = (size_t)n * H, w = (size_t)W / 2;
  for (size_t R = 0; R < rows; R++)
    for (size_t col = 0; col < (size_t)W; col++) {
      const size_t p = R * W + col;
      const size_t q = ((R / 2 * w + col / 2) * 2 + R % 2) * 2 + col % 2;
      FN(split_row)(dy + p * (ca + cb), ca, cb, da + p * ca, acc_a, db + q * cb);
    }
  return 0;
}

int FN(cpu_from_f32)(const ops_t *o, const float *src, size_t count, void *dstv)
{
  T *dst = dstv;
  for (size_t i = 0; i < count; i++) dst[i] = (T)src[i];
  return 0;
}

int FN(cpu_to_f32)(const ops_t *o, const void *srcv, size_t count, float *dst, int acc)
{
  const T *src = srcv;
  if (acc)
    for (size_t i = 0; i < count; i++) dst[i] = (float)((T)dst[i] + src[i]);
  else
    for (size_t i = 0; i < count; i++) dst[i] = (float)src[i];
  return 0;
}

#undef ECAT_
#undef ECAT
#undef FN
