/* conv_cpu_tmpl.h — body of conv_cpu.c for one element type (define T and SFX first). */
#define CCAT_(a, b) a##_##b
#define CCAT(a, b) CCAT_(a, b)
#define FN(name) CCAT(name, SFX)
#define GEMM CCAT(gemm_cpu, SFX)

int FN(cpu_conv_plan)(const ops_t *o, ops_conv_t *c, size_t *ws_bytes)
{
  if (c->h <= 0 || c->w <= 0 || c->cin <= 0 || c->cout <= 0 || c->max_n < 0)
    return ops_cpu_fail("convolution shape %dx%d, %d -> %d channels, batch %d is invalid", c->h,
                        c->w, c->cin, c->cout, c->max_n);
  size_t P = (size_t)c->max_n * c->h * c->w;
  *ws_bytes = conv_chunk(c, P) * conv_row_elems(c) * sizeof(T);
  return 0;
}

/* col[p - p0][ky][kx][ci] = x at (y + ky - 1, x + kx - 1), zero outside the image. */
static void FN(im2col)(const T *x, const ops_conv_t *c, size_t p0, size_t pc, T *col)
{
  int H = c->h, W = c->w, C = c->cin;
  size_t hw = (size_t)H * W;
  for (size_t p = p0; p < p0 + pc; p++) {
    size_t img = p / hw;
    int py = (int)(p % hw / W), px = (int)(p % W);
    for (int ky = 0; ky < 3; ky++) {
      int sy = py + ky - 1;
      for (int kx = 0; kx < 3; kx++, col += C) {
        int sx = px + kx - 1;
        if (sy < 0 || sy >= H || sx < 0 || sx >= W)
          memset(col, 0, sizeof(T) * C);
        else
          memcpy(col, x + ((img * H + sy) * W + sx) * C, sizeof(T) * C);
      }
    }
  }
}

/* dx at (y + ky - 1, x + kx - 1) += col[p - p0][ky][kx][:]. */
static void FN(col2im)(const T *col, const ops_conv_t *c, size_t p0, size_t pc, T *dx)
{
  int H = c->h, W = c->w, C = c->cin;
  size_t hw = (size_t)H * W;
  for (size_t p = p0; p < p0 + pc; p++) {
    size_t img = p / hw;
    int py = (int)(p % hw / W), px = (int)(p % W);
    for (int ky = 0; ky < 3; ky++) {
      int sy = py + ky - 1;
      for (int kx = 0; kx < 3; kx++, col += C) {
        int sx = px + kx - 1;
        if (sy < 0 || sy >= H || sx < 0 || sx >= W) continue;
        T *d = dx + ((img * H + sy) * W + sx) * C;
        for (int ci = 0; ci < C; ci++) d[ci] += col[ci];
      }
    }
  }
}

/* Transposed conv: row p - p0 of blk is [(ky=0: kx=0, kx=1), (ky=1: kx=0, kx=1)] x cout, i.e.
 * output pixels (2y+ky, 2x..2x+1), each ky's half contiguous in the NHWC output. */
static void FN(convt_scatter)(const T *blk, const ops_conv_t *c, size_t p0, size_t pc,
                              const T *bias, T *y)
{
  int H = c->h, W = c->w, Co = c->cout;
  size_t hw = (size_t)H * W, half = (size_t)2 * Co;
  for (size_t p = p0; p < p0 + pc; p++, blk += 2 * half) {
    size_t img = p / hw;
    int py = (int)(p % hw / W), px = (int)(p % W);
    for (int ky = 0; ky < 2; ky++) {
      T *d = y + ((img * 2 * H + 2 * py + ky) * 2 * W + 2 * px) * Co;
      const T *s = blk + ky * half;
      for (size_t j = 0; j < half; j++) d[j] = s[j] + bias[j % Co];
    }
  }
}

static void FN(convt_gather)(const T *dy, const ops_conv_t *c, size_t p0, size_t pc, T *blk)
{
  int H = c->h, W = c->w, Co = c->cout;
  size_t hw = (size_t)H * W, half = (size_t)2 * Co;
  for (size_t p = p0; p < p0 + pc; p++, blk += 2 * half) {
    size_t img = p / hw;
    int py = (int)(p % hw / W), px = (int)(p % W);
    for (int ky = 0; ky < 2; ky++)
      memcpy(blk + ky * half, dy + ((img * 2 * H + 2 * py + ky) * 2 * W + 2 * px) * Co,
             sizeof(T) * half);
  }
}

/* db[c] (+)= Σ_p dy[p][c], summed in f64. */
static int FN(bias_grad)(const T *dy, size_t P, int C, T *db, int acc)
{
  double *s = calloc((size_t)C, sizeof *s);
  if (!s) return ops_cpu_fail("out of memory summing a bias gradient (%d channels)", C);
  for (size_t p = 0; p < P; p++, dy += C)
    for (int ch = 0; ch < C; ch++) s[ch] += dy[ch];
  for (int ch = 0; ch < C; ch++) db[ch] = (T)((acc ? (double)db[ch] : 0.0) + s[ch]);
  free(s);
  return 0;
}

int FN(cpu_conv_fwd)(const ops_t *o, const ops_conv_t *c, int n, const void *xv, const void *wv,
                     const void *bv, void *yv, void *wsv)
{
  const T *x = xv, *w = wv, *b = bv;
  T *y = yv, *ws = wsv;
  size_t P = (size_t)n * c->h * c->w, chunk = conv_chunk(c, P);
  int ci = c->cin, co = c->cout;
  switch (c->kind) {
  case OPS_CONV3X3:
    for (size_t p0 = 0; p0 < P; p0 += chunk) {
      size_t pc = P - p0 < chunk ? P - p0 : chunk;
      FN(im2col)(x, c, p0, pc, ws);
      GEMM(0, 1, (int)pc, co, 9 * ci, 1, ws, 9 * ci, w, 9 * ci, 0, y + p0 * co, co);
    }
    return 0;
  case OPS_CONV1X1:
    for (size_t p = 0; p < P; p++) memcpy(y + p * co, b, sizeof(T) * co);
    GEMM(0, 1, (int)P, co, ci, 1, x, ci, w, ci, 1, y, co);
    return 0;
  case OPS_CONVT2X2:
    for (size_t p0 = 0; p0 < P; p0 += chunk) {
      size_t pc = P - p0 < chunk ? P - p0 : chunk;
      GEMM(0, 0, (int)pc, 4 * co, ci, 1, x + p0 * ci, ci, w, 4 * co, 0, ws, 4 * co);
      FN(convt_scatter)(ws, c, p0, pc, b, y);
    }
    return 0;
  }
  return ops_cpu_fail("unknown convolution kind %d", (int)c->kind);
}

int FN(cpu_conv_bwd_filter)(const ops_t *o, const ops_conv_t *c, int n, const void *xv,
                            const void *dyv, void *dwv, void *dbv, int acc, void *wsv)
{
  const T *x = xv, *dy = dyv;
  T *dw = dwv, *db = dbv, *ws = wsv;
  size_t P = (size_t)n * c->h * c->w, chunk = conv_chunk(c, P);
  int ci = c->cin, co = c->cout;
  switch (c->kind) {
  case OPS_CONV3X3:
    if (P == 0 && !acc) memset(dw, 0, sizeof(T) * 9 * ci * co);
    for (size_t p0 = 0; p0 < P; p0 += chunk) {
      size_t pc = P - p0 < chunk ? P - p0 : chunk;
      FN(im2col)(x, c, p0, pc, ws);
      GEMM(1, 0, co, 9 * ci, (int)pc, 1, dy + p0 * co, co, ws, 9 * ci, (acc || p0) ? 1 : 0, dw,
           9 * ci);
    }
    return 0;
  case OPS_CONV1X1:
    GEMM(1, 0, co, ci, (int)P, 1, dy, co, x, ci, acc ? 1 : 0, dw, ci);
    return FN(bias_grad)(dy, P, co, db, acc);
  case OPS_CONVT2X2:
    if (P == 0 && !acc) memset(dw, 0, sizeof(T) * 4 * ci * co);
    for (size_t p0 = 0; p0 < P; p0 += chunk) {
      size_t pc = P - p0 < chunk ? P - p0 : chunk;
      FN(convt_gather)(dy, c, p0, pc, ws);
      GEMM(1, 0, ci, 4 * co, (int)pc, 1, x + p0 * ci, ci, ws, 4 * co, (acc || p0) ? 1 : 0, dw,
           4 * co);
    }
    return FN(bias_grad)(dy, 4 * P, co, db, acc);
  }
  return ops_cpu_fail("unknown convolution kind %d", (int)c->kind);
}

/* A 1x1 convolution's input gradient: dx (P, ci) = dy (P, co) w ([co][ci]); conv_bwd_data's 1x1
 * case, and the BatchNorm backward that forms its dy this way (bn_bwd_*_1x1), so both give the
 * same bits. */
void FN(cpu_conv1x1_dgrad)(const void *dyv, const void *wv, size_t P, int co, int ci, void *dxv)
{
  GEMM(0, 0, (int)P, ci, co, 1, (const T *)dyv, co, (const T *)wv, ci, 0, (T *)dxv, ci);
}

int FN(cpu_conv_bwd_data)(const ops_t *o, const ops_conv_t *c, int n, const void *dyv,
                          const void *wv, void *dxv, void *wsv)
{
  const T *dy = dyv, *w = wv;
  T *dx = dxv, *ws = wsv;
  size_t P = (size_t)n * c->h * c->w, chunk = conv_chunk(c, P);
  int ci = c->cin, co = c->cout;
  switch (c->kind) {
  case OPS_CONV3X3:
    memset(dx, 0, sizeof(T) * P * ci);
    for (size_t p0 = 0; p0 < P; p0 += chunk) {
      size_t pc = P - p0 < chunk ? P - p0 : chunk;
      GEMM(0, 0, (int)pc, 9 * ci, co, 1, dy + p0 * co, co, w, 9 * ci, 0, ws, 9 * ci);
      FN(col2im)(ws, c, p0, pc, dx);
    }
    return 0;
  case OPS_CONV1X1:
    FN(cpu_conv1x1_dgrad)(dy, w, P, co, ci, dx);
    return 0;
  case OPS_CONVT2X2:
    for (size_t p0 = 0; p0 < P; p0 += chunk) {
      size_t pc = P - p0 < chunk ? P - p0 : chunk;
      FN(convt_gather)(dy, c, p0, pc, ws);
      GEMM(0, 1, (int)pc, ci, 4 * co, 1, ws, 4 * co, w, 4 * co, 0, dx + p0 * ci, ci);
    }
    return 0;
  }
  return ops_cpu_fail("unknown convolution kind %d", (int)c->kind);
}

/* ---- the transposed convolution's backward from dy gathered (ops.h) ----
 * z's rows of 4 cout are the blocks convt_gather makes: the same GEMMs over the same chunks read
 * them in place, and the bias gradient sums them in the NHWC image's order, so the results are
 * the plain ops' bits. */

static int FN(not_transposed)(const ops_conv_t *c)
{
  return ops_cpu_fail("a gradient in the gathered order is a transposed convolution's, not "
                      "that of convolution kind %d", (int)c->kind);
}

/* bias_grad of the NHWC image whose gathered form is z: rows visited in the image's order. */
static int FN(bias_grad_gathered)(const T *z, const ops_conv_t *c, int n, T *db, int acc)
{
  const int C = c->cout;
  const size_t h = (size_t)c->h, w = (size_t)c->w;
  double *s = calloc((size_t)C, sizeof *s);
  if (!s) return ops_cpu_fail("out of memory summing a bias gradient (%d channels)", C);
  for (size_t R = 0; R < (size_t)n * 2 * h; R++) /* R / 2 = image * h + t, R % 2 = i */
    for (size_t col = 0; col < 2 * w; col++) {
      const T *row = z + (((R / 2 * w + col / 2) * 2 + R % 2) * 2 + col % 2) * C;
      for (int ch = 0; ch < C; ch++) s[ch] += row[ch];
    }
  for (int ch = 0; ch < C; ch++) db[ch] = (T)((acc ? (double)db[ch] : 0.0) + s[ch]);
  free(s);
  return 0;
}

int FN(cpu_conv_bwd_filter_gathered)(const ops_t *o, const ops_conv_t *c, int n, const void *xv,
                                     const void *zv, void *dwv, void *dbv, int acc, void *wsv)
{
  if (c->kind != OPS_CONVT2X2) return FN(not_transposed)(c);
  const T *x = xv, *z = zv;
  T *dw = dwv, *db = dbv;
  size_t P = (size_t)n * c->h * c->w, chunk = conv_chunk(c, P);
  int ci = c->cin, co = c->cout;
  if (P == 0 && !acc) memset(dw, 0, sizeof(T) * 4 * ci * co);
  for (size_t p0 = 0; p0 < P; p0 += chunk) {
    size_t pc = P - p0 < chunk ? P - p0 : chunk;
    GEMM(1, 0, ci, 4 * co, (int)pc, 1, x + p0 * ci, ci, z + p0 * 4 * co, 4 * co,
         (acc || p0) ? 1 : 0, dw, 4 * co);
  }
  return db ? FN(bias_grad_gathered)(z, c, n, db, acc) : 0;
}

int FN(cpu_conv_bwd_data_gathered)(const ops_t *o, const ops_conv_t *c, int n, const void *zv,
                                   const void *wv, void *dxv, void *wsv)
{
  if (c->kind != OPS_CONVT2X2) return FN(not_transposed)(c);
  const T *z = zv, *w = wv;
  T *dx = dxv;
  size_t P = (size_t)n * c->h * c->w, chunk = conv_chunk(c, P);
  int ci = c->cin, co = c->cout;
  for (size_t p0 = 0; p0 < P; p0 += chunk) {
    size_t pc = P - p0 < chunk ? P - p0 : chunk;
    GEMM(0, 1, (int)pc, ci, 4 * co, 1, z + p0 * 4 * co, 4 * co, w, 4 * co, 0, dx + p0 * ci, ci);
  }
  return 0;
}

#undef CCAT_
#undef CCAT
#undef FN
#undef GEMM
