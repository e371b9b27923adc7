/* check_conv_sm90_tile.c — the pixel-tile arithmetic of the wide Hopper convolution
 * (kernels/conv_sm90_tile.h), which the kernel runs on the GPU, checked on the CPU against the
 * definitions: over the tiles of many image shapes (widths that take rows of 64 and the narrow
 * power-of-two ones, heights that end tiles part-way), every output pixel inside the image is
 * some lane's pixel exactly once and the pixel mask says so; each of its nine taps reads the
 * halo line of input pixel (y + ky - 1, x + kx - 1), inside the halo box; the output box's line
 * of a pixel is its index; the boxes are what the copy engine takes. The weight gradient's tiles
 * (whole rows on images 16 and 32 wide) the same way, k-step by k-step. And the kernels' register
 * hand-over (kernels/sm90_regs.h): what a block holds from its launch, and which hand-overs fit. */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_sm90_tile.h"
#include "kernels/sm90_regs.h"
#include "tests/suite_main.h"

/* One image of h x w (the batch only repeats it): the tiles as the kernel numbers them. */
static void check_image(int h, int w)
{
  const sm90_tile_t g = sm90_tile_geometry(w);
  ck_assert_msg(g.tw * g.rw == SM90_TILE_M && (1 << g.tw_log) == g.tw,
                "w %d: rows of %d pixels, %d a warpgroup", w, g.tw, g.rw);
  ck_assert_msg(g.halo_lines <= SM90_TILE_LINES && g.hw <= 256 && 2 * g.rw + 2 <= 256,
                "w %d: a halo of %d lines (%d x %d)", w, g.halo_lines, g.hw, 2 * g.rw + 2);
  /* narrow widths get rows of the whole width: no tile column past the edge */
  if (w < 64 && w >= 2 && (w & (w - 1)) == 0) ck_assert_int_eq(g.tw, w);
  if (w >= 64) ck_assert_int_eq(g.tw, 64);
  const int tiles_x = (w + g.tw - 1) / g.tw, tiles_y = (h + 2 * g.rw - 1) / (2 * g.rw);
  unsigned char *seen = calloc((size_t)h * w, 1);
  ck_assert_ptr_nonnull(seen);
  long idle = 0;
  for (int ty = 0; ty < tiles_y; ty++)
    for (int tx = 0; tx < tiles_x; tx++) {
      const int y0 = ty * 2 * g.rw, x0 = tx * g.tw;
      for (int wg = 0; wg < 2; wg++)
        for (int p = 0; p < SM90_TILE_M; p++) {
          const int y = y0 + sm90_tile_row(&g, wg, p), x = x0 + sm90_tile_col(&g, p);
          /* the output box of warpgroup wg: tw x rw from (y0 + wg rw, x0), line = p */
          const int by = y - (y0 + wg * g.rw), bx = x - x0;
          ck_assert_msg(by >= 0 && by < g.rw && bx >= 0 && bx < g.tw && by * g.tw + bx == p,
                        "w %d: pixel %d of warpgroup %d is not line %d of its box", w, p, wg, p);
          const int in = y < h && x < w;
          ck_assert_msg(sm90_tile_pixel_in(&g, y0, x0, h, w, wg, p) == in,
                        "%dx%d: the mask of (%d, %d) says %d", h, w, y, x, !in);
          if (!in) {
            idle++;
            continue;
          }
          ck_assert_msg(!seen[(size_t)y * w + x], "%dx%d: pixel (%d, %d) twice", h, w, y, x);
          seen[(size_t)y * w + x] = 1;
          const int line0 = sm90_tile_line0(&g, wg, p);
          for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
              const int line = line0 + ky * g.hw + kx;
              ck_assert_msg(line >= 0 && line < g.halo_lines, "%dx%d: tap line %d of %d", h, w,
                            line, g.halo_lines);
              /* the halo box holds rows y0 - 1 .. and columns x0 - 1 .., in row order */
              const int iy = y0 - 1 + line / g.hw, ix = x0 - 1 + line % g.hw;
              ck_assert_msg(iy == y + ky - 1 && ix == x + kx - 1,
                            "%dx%d: tap (%d, %d) of (%d, %d) reads (%d, %d)", h, w, ky, kx, y,
                            x, iy, ix);
            }
        }
    }
  for (size_t i = 0; i < (size_t)h * w; i++)
    ck_assert_msg(seen[i], "%dx%d: pixel (%zu, %zu) in no tile", h, w, i / w, i % w);
  /* narrow power-of-two widths leave no column idle: only rows past the bottom */
  if (g.tw == w) ck_assert_int_eq(idle, (long)(tiles_y * 2 * g.rw - h) * w);
  free(seen);
}

START_TEST(every_pixel_once_every_tap_right)
{
  static const int widths[] = {1, 2, 3, 4, 8, 16, 24, 32, 48, 63, 64, 65, 70, 128, 130, 256};
  static const int heights[] = {1, 2, 3, 5, 9, 16, 32, 33, 65};
  for (size_t i = 0; i < sizeof widths / sizeof *widths; i++)
    for (size_t j = 0; j < sizeof heights / sizeof *heights; j++)
      check_image(heights[j], widths[i]);
}
END_TEST

/* The geometries the U-Net's levels get, and the widths that keep rows of 64. */
START_TEST(geometries)
{
  static const int w[] = {256, 128, 64, 32, 16, 8, 4, 2, 1, 48};
  static const int tw[] = {64, 64, 64, 32, 16, 8, 4, 2, 64, 64};
  static const int lines[] = {264, 264, 264, 204, 180, 180, 204, 264, 264, 264};
  for (size_t i = 0; i < sizeof w / sizeof *w; i++) {
    const sm90_tile_t g = sm90_tile_geometry(w[i]);
    ck_assert_msg(g.tw == tw[i] && g.halo_lines == lines[i],
                  "w %d: rows of %d, a halo of %d lines; expected %d and %d", w[i], g.tw,
                  g.halo_lines, tw[i], lines[i]);
  }
}
END_TEST

/* The weight gradient's tiles (sm90_wtile_geometry) on one h x w image: every pixel inside the
 * image is one tile line exactly once; each k-step's 16 lines lie in one row, in consecutive
 * columns, so the x strip (one image row, tw + 2 pixels from x0 - 1) that tap (ky, kx) reads
 * from line 16 ks % tw + kx holds input pixel (y + ky - 1, x + kx - 1) for each of them; within
 * a run down the strip, tile k reads strips rows k .. rows k + rows + 1 only, so freeing
 * rows k .. rows k + rows - 1 after it is safe. */
static void check_wgrad_image(int h, int w)
{
  const sm90_wtile_t g = sm90_wtile_geometry(w);
  ck_assert_msg(g.tw * g.rows == SM90_TILE_M && g.tw >= 16 && (g.tw & (g.tw - 1)) == 0,
                "w %d: wgrad rows of %d, %d a tile", w, g.tw, g.rows);
  if (w == 16 || w == 32) ck_assert_int_eq(g.tw, w);
  const int strips = sm90_wtile_strips(&g, w), th = sm90_wtile_per_strip(&g, h);
  ck_assert_msg((long)strips * g.tw >= w && (long)(strips - 1) * g.tw < w, "w %d: %d strips", w,
                strips);
  ck_assert_msg((long)th * g.rows >= h && (long)(th - 1) * g.rows < h, "h %d: %d tiles", h, th);
  unsigned char *seen = calloc((size_t)h * w, 1);
  ck_assert_ptr_nonnull(seen);
  for (int st = 0; st < strips; st++)
    for (int k = 0; k < th; k++) {
      const int x0 = st * g.tw, y0 = k * g.rows;
      for (int ks = 0; ks < SM90_TILE_M / 16; ks++) {
        const int srow = 16 * ks / g.tw, sline = 16 * ks % g.tw;
        for (int i = 0; i < 16; i++) {
          const int l = 16 * ks + i, y = y0 + l / g.tw, x = x0 + l % g.tw;
          ck_assert_msg(l / g.tw == srow && l % g.tw == sline + i,
                        "w %d: k-step %d's line %d is not in row %d at column %d", w, ks, l,
                        srow, sline + i);
          for (int ky = 0; ky < 3; ky++) {
            /* the run's strip m = rows k + srow + ky is image row y0 - 1 + srow + ky */
            const int m = g.rows * k + srow + ky;
            ck_assert_msg(m >= g.rows * k && m <= g.rows * k + g.rows + 1,
                          "w %d: tile %d reads strip %d", w, k, m);
            for (int kx = 0; kx < 3; kx++) {
              const int line = sline + i + kx;
              ck_assert_msg(line < g.tw + 2, "w %d: line %d of a %d-pixel strip", w, line,
                            g.tw + 2);
              const int iy = y0 - 1 + srow + ky, ix = x0 - 1 + line;
              ck_assert_msg(iy == y + ky - 1 && ix == x + kx - 1,
                            "%dx%d: tap (%d, %d) of (%d, %d) reads (%d, %d)", h, w, ky, kx, y,
                            x, iy, ix);
            }
          }
          if (y >= h || x >= w) continue;
          ck_assert_msg(!seen[(size_t)y * w + x], "%dx%d: wgrad pixel (%d, %d) twice", h, w, y,
                        x);
          seen[(size_t)y * w + x] = 1;
        }
      }
    }
  for (size_t i = 0; i < (size_t)h * w; i++)
    ck_assert_msg(seen[i], "%dx%d: wgrad pixel (%zu, %zu) in no tile", h, w, i / w, i % w);
  free(seen);
}

START_TEST(wgrad_every_pixel_once_every_tap_right)
{
  static const int widths[] = {1, 2, 8, 15, 16, 17, 24, 32, 48, 64, 65, 130, 256};
  static const int heights[] = {1, 2, 3, 4, 5, 9, 16, 33};
  for (size_t i = 0; i < sizeof widths / sizeof *widths; i++)
    for (size_t j = 0; j < sizeof heights / sizeof *heights; j++)
      check_wgrad_image(heights[j], widths[i]);
  /* the U-Net's levels */
  static const int w[] = {256, 128, 64, 32, 16, 8};
  static const int tw[] = {64, 64, 64, 32, 16, 64};
  for (size_t i = 0; i < sizeof w / sizeof *w; i++)
    ck_assert_int_eq(sm90_wtile_geometry(w[i]).tw, tw[i]);
}
END_TEST

/* The prologue's walk: every line's row and column those of the division, for the halo widths
 * the kernels use (66, the narrow ones 4 .. 34, a strip of 66) and others, the steps the callers
 * take (12, 16) and others, every start below the step, past the largest halo. */
START_TEST(prologue_walk)
{
  for (int hw = 1; hw <= 70; hw++)
    for (int step = 1; step <= 20; step++)
      for (int first = 0; first < step; first++) {
        sm90_walk_t k = sm90_walk_start(first, step, hw);
        for (int l = first; l < 2 * SM90_TILE_LINES; l += step) {
          ck_assert_msg(k.l == l && k.row == l / hw && k.col == l % hw,
                        "hw %d, step %d, from %d: line %d at (%d, %d), walked to %d at (%d, %d)",
                        hw, step, first, l, l / hw, l % hw, k.l, k.row, k.col);
          sm90_walk_next(&k);
        }
      }
}
END_TEST

/* A block of 384 threads (loader and prologue warpgroup, two consumer warpgroups) is capped at
 * 168 registers a thread, so it holds 64,512, not the register file's 65,536: giving the first
 * warpgroup 64 and the consumers 224 asks for 1,024 more than exist, and the consumers' increase
 * never returns (the kernels hung so). 56 / 224 and 64 / 216 fit. A block of 512 (three consumer
 * warpgroups) holds all 65,536. */
START_TEST(register_handover)
{
  ck_assert_int_eq(SM90_BLOCK_REGS(384), 168 * 384);
  ck_assert_int_eq(SM90_BLOCK_REGS(512), 65536);
  ck_assert_int_eq(SM90_BLOCK_REGS(256), 65536);
  ck_assert_int_eq(SM90_BLOCK_REGS(640), 96 * 640); /* 102.4 a thread, down to 96 */
  const int fwd_hang = 128 * 64 + 256 * 224;
  const int fwd_a = 128 * 56 + 256 * 224, fwd_b = 128 * 64 + 256 * 216;
  ck_assert(fwd_hang > SM90_BLOCK_REGS(384));
  ck_assert(fwd_a <= SM90_BLOCK_REGS(384) && fwd_b <= SM90_BLOCK_REGS(384));
  ck_assert(128 * 56 + 384 * 152 <= SM90_BLOCK_REGS(512));
  ck_assert(128 * 80 + 384 * 152 > SM90_BLOCK_REGS(512));
  /* against the count the runtime reports for the loaded kernel */
  ck_assert(sm90_regs_fit(168, 384, fwd_a) && sm90_regs_fit(168, 384, fwd_b));
  ck_assert(!sm90_regs_fit(168, 384, fwd_hang));
  ck_assert(!sm90_regs_fit(160, 384, fwd_a)); /* a build that uses fewer registers */
  ck_assert(sm90_regs_fit(128, 512, 65536) && !sm90_regs_fit(127, 512, 65536));
}
END_TEST

static Suite *make_tile_suite(const suite_env_t *env)
{
  (void)env;
  Suite *s = suite_create("conv_sm90_tile");
  SUITE_CASE(s, "geometry", every_pixel_once_every_tap_right, geometries, prologue_walk);
  SUITE_CASE(s, "wgrad", wgrad_every_pixel_once_every_tap_right);
  SUITE_CASE(s, "registers", register_handover);
  return s;
}

SUITE_MAIN("check_conv_sm90_tile", make_tile_suite, SUITE_CPU_ONLY)
