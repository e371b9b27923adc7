/* conv_sm90_tile.h — the pixel tiles of the wide Hopper convolution (kernels/conv_sm90_wide_cuda.cu):
 * which output pixels a tile holds, where each consumer lane's pixel and its nine taps lie in the
 * tile's halo box, and which pixels are inside the image. One definition for the kernel, its
 * host side and the CPU test that checks the arithmetic (tests/check_conv_sm90_tile.c).
 *
 * A tile is M = 128 output pixels of one image, two consumer warpgroups of 64 each. Rows of
 * tw = 64 pixels (one row per warpgroup), or, on an image narrower than 64 whose width is a power
 * of two (2 .. 32), rows of the whole width, rw = 64 / tw of them per warpgroup; so a tile is
 * 2 rw rows x tw pixels at (y0, x0). Pixel p (0..63) of warpgroup wg is row wg rw + p / tw,
 * column p % tw of the tile: the line p of the warpgroup's output box (tw pixels x rw rows, 64
 * channels a line). The halo box is 2 rw + 2 rows x hw = tw + 2 pixels from (y0 - 1, x0 - 1),
 * halo_lines lines in row order; tap (ky, kx) of pixel p reads its line line0 + ky hw + kx. */
#ifndef KERNELS_CONV_SM90_TILE_H
#define KERNELS_CONV_SM90_TILE_H

#ifdef __CUDACC__
#define SM90_TILE_FN static __host__ __device__ __forceinline__
#else
#define SM90_TILE_FN static inline
#endif

#define SM90_TILE_M 64       /* output pixels of a consumer warpgroup */
#define SM90_TILE_LINES 264  /* the largest halo (tw = 64 and tw = 2): what a stage holds */

typedef struct {
  int tw, tw_log; /* pixels a tile row, its log2 */
  int rw;         /* rows a warpgroup */
  int hw;         /* pixels a halo row */
  int halo_lines; /* lines of the halo box */
} sm90_tile_t;

/* The geometry for an image w pixels wide (w >= 1). */
SM90_TILE_FN sm90_tile_t sm90_tile_geometry(int w)
{
  sm90_tile_t g;
  g.tw = SM90_TILE_M;
  if (w < SM90_TILE_M && w >= 2 && (w & (w - 1)) == 0) g.tw = w;
  g.tw_log = 0;
  while ((1 << g.tw_log) < g.tw) g.tw_log++;
  g.rw = SM90_TILE_M / g.tw;
  g.hw = g.tw + 2;
  g.halo_lines = g.hw * (2 * g.rw + 2);
  return g;
}

/* Row and column within the tile of pixel p (0..63) of warpgroup wg. */
SM90_TILE_FN int sm90_tile_row(const sm90_tile_t *g, int wg, int p)
{
  return wg * g->rw + (p >> g->tw_log);
}
SM90_TILE_FN int sm90_tile_col(const sm90_tile_t *g, int p) { return p & (g->tw - 1); }

/* The halo line of pixel p of warpgroup wg at tap (0, 0): the input pixel (row - 1, col - 1)
 * of the output pixel's. */
SM90_TILE_FN int sm90_tile_line0(const sm90_tile_t *g, int wg, int p)
{
  return sm90_tile_row(g, wg, p) * g->hw + sm90_tile_col(g, p);
}

/* Whether pixel p of warpgroup wg of the tile at (y0, x0) is inside an h x w image. */
SM90_TILE_FN int sm90_tile_pixel_in(const sm90_tile_t *g, int y0, int x0, int h, int w, int wg,
                                    int p)
{
  return y0 + sm90_tile_row(g, wg, p) < h && x0 + sm90_tile_col(g, p) < w;
}

/* The weight gradient's row tiles (kernels/conv_sm90_wgrad_wide_cuda.cu): K = 64 pixels a tile,
 * taken in k-steps of 16 that must each lie within one image row (a wgmma's activation operand is
 * 16 consecutive lines of one x strip, one image row). Rows of tw = 64 pixels, or, on an image
 * whose width is 16 or 32, rows = 64 / tw whole rows. Line l (0..63) of the tile at (y0, x0) is
 * pixel (y0 + l / tw, x0 + l % tw); its dy box is tw pixels x rows rows; k-step ks reads x strip
 * (image row) y0 + 16 ks / tw - 1 + ky from its line 16 ks % tw + kx. A column strip of an
 * h-row image has ceil(h / rows) tiles. */
typedef struct {
  int tw;   /* pixels a tile row */
  int rows; /* image rows a tile */
} sm90_wtile_t;

SM90_TILE_FN sm90_wtile_t sm90_wtile_geometry(int w)
{
  sm90_wtile_t g;
  g.tw = (w == 16 || w == 32) ? w : SM90_TILE_M;
  g.rows = SM90_TILE_M / g.tw;
  return g;
}

/* Tiles down a column strip of an h-row image, and column strips across a w-pixel row. */
SM90_TILE_FN int sm90_wtile_per_strip(const sm90_wtile_t *g, int h)
{
  return (h + g->rows - 1) / g->rows;
}
SM90_TILE_FN int sm90_wtile_strips(const sm90_wtile_t *g, int w) { return (w + g->tw - 1) / g->tw; }

/* The prologue's walk over a halo (or strip) of hw pixels a row, in row order: a thread takes
 * lines first, first + step, ... (sm90_conv.cuh bn_relu_halo). Each line's row and column follow
 * from the last one's by an addition and one carry, so a line costs no division (hw is a
 * run-time value in the wide kernels, where a division is a long sequence). */
typedef struct {
  int l, row, col; /* the current line, its halo row and column */
  int step, dr, dc, hw;
} sm90_walk_t;

SM90_TILE_FN sm90_walk_t sm90_walk_start(int first, int step, int hw)
{
  sm90_walk_t k;
  k.l = first;
  k.row = first / hw;
  k.col = first - k.row * hw;
  k.step = step;
  k.dr = step / hw;
  k.dc = step - k.dr * hw;
  k.hw = hw;
  return k;
}

SM90_TILE_FN void sm90_walk_next(sm90_walk_t *k)
{
  k->l += k->step;
  k->row += k->dr;
  k->col += k->dc;
  if (k->col >= k->hw) { /* dc < hw and col < hw: one carry at most */
    k->col -= k->hw;
    k->row++;
  }
}

#endif
