/* check_data.c — the data pipeline: synthetic shapes (a pure function of (seed, split, index),
 * every class drawn), the PNG directory dataset on files this test writes with libpng (pixels
 * read back as written; each broken-data case refused at open with the file named),
 * augmentation (keyed by (seed, epoch, index), flip and crop against a direct reference), and
 * the loader (batches identical whatever the number of worker threads). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "src/data/augment.h"
#include "src/data/data.h"
#include "src/data/loader.h"
#include "tests/suite_main.h"

/* ---- synthetic ---- */

static data_set_t *open_synth(uint64_t seed, size_t size, int classes, int s, data_split_t split)
{
  data_synth_config_t c = {.seed = seed, .size = size, .classes = classes, .image_size = s,
                           .split = split};
  data_set_t *ds;
  char err[256];
  ck_assert_msg(data_open_synthetic(&ds, &c, err, sizeof err) == 0, "%s", err);
  return ds;
}

START_TEST(test_synth_deterministic)
{
  const int S = 48;
  data_set_t *a = open_synth(3, 100, 4, S, DATA_SPLIT_TRAIN);
  data_set_t *b = open_synth(3, 5000, 4, S, DATA_SPLIT_TRAIN); /* size does not matter */
  data_set_t *other_seed = open_synth(4, 100, 4, S, DATA_SPLIT_TRAIN);
  data_set_t *val = open_synth(3, 100, 4, S, DATA_SPLIT_VAL);
  size_t px = (size_t)S * S;
  uint8_t *r1 = malloc(3 * px), *m1 = malloc(px), *r2 = malloc(3 * px), *m2 = malloc(px);
  char err[256];
  int w, h;
  for (size_t i = 0; i < 20; i++) {
    ck_assert_int_eq(data_get(a, i, r1, m1, &w, &h, err, sizeof err), 0);
    ck_assert_int_eq(w, S);
    ck_assert_int_eq(h, S);
    ck_assert_int_eq(data_get(b, i, r2, m2, &w, &h, err, sizeof err), 0);
    ck_assert_mem_eq(r1, r2, 3 * px);
    ck_assert_mem_eq(m1, m2, px);
    /* Asking again (another "worker", later) gives the same bytes. */
    ck_assert_int_eq(data_get(a, i, r2, m2, &w, &h, err, sizeof err), 0);
    ck_assert_mem_eq(r1, r2, 3 * px);
    ck_assert_int_eq(data_get(other_seed, i, r2, m2, &w, &h, err, sizeof err), 0);
    ck_assert(memcmp(r1, r2, 3 * px) != 0);
    ck_assert_int_eq(data_get(val, i, r2, m2, &w, &h, err, sizeof err), 0);
    ck_assert(memcmp(r1, r2, 3 * px) != 0);
    ck_assert_int_eq(data_get(a, i + 1, r2, m2, &w, &h, err, sizeof err), 0);
    ck_assert(memcmp(r1, r2, 3 * px) != 0);
  }
  ck_assert_int_ne(data_get(a, 100, r1, m1, &w, &h, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "100"));
  free(r1);
  free(m1);
  free(r2);
  free(m2);
  data_destroy(a);
  data_destroy(b);
  data_destroy(other_seed);
  data_destroy(val);
}
END_TEST

START_TEST(test_synth_classes_and_variety)
{
  const int S = 64, classes = _i;
  const size_t n = 64;
  data_set_t *ds = open_synth(11, n, classes, S, DATA_SPLIT_TRAIN);
  size_t px = (size_t)S * S;
  uint8_t *rgb = malloc(3 * px), *mask = malloc(px);
  double pixels[8] = {0};
  /* Mean colour of class-1 pixels per image: it must vary (the class is not a colour). */
  double sum = 0, sum2 = 0;
  int imgs = 0;
  char err[256];
  int w, h;
  for (size_t i = 0; i < n; i++) {
    ck_assert_int_eq(data_get(ds, i, rgb, mask, &w, &h, err, sizeof err), 0);
    double c1 = 0, cnt = 0;
    for (size_t p = 0; p < px; p++) {
      ck_assert_int_lt(mask[p], classes);
      pixels[mask[p]]++;
      if (mask[p] == 1) {
        c1 += rgb[3 * p];
        cnt++;
      }
    }
    if (cnt > 0) {
      sum += c1 / cnt;
      sum2 += (c1 / cnt) * (c1 / cnt);
      imgs++;
    }
  }
  for (int c = 0; c < classes; c++)
    ck_assert_msg(pixels[c] > 0.002 * n * px, "class %d (%s) covers %.0f pixels of %zu", c,
                  data_synth_class_name(c), pixels[c], n * px);
  ck_assert(pixels[0] > 0.3 * n * px); /* background dominates but does not swamp */
  ck_assert(pixels[0] < 0.95 * n * px);
  ck_assert_int_ge(imgs, 4);
  double mean = sum / imgs, sd = sqrt(fmax(0, sum2 / imgs - mean * mean));
  ck_assert_msg(sd > 25, "class-1 colour barely varies (sd %.1f of 255)", sd);
  free(rgb);
  free(mask);
  data_destroy(ds);
}
END_TEST

START_TEST(test_synth_bad_config)
{
  data_set_t *ds;
  char err[256];
  data_synth_config_t c = {.seed = 1, .size = 10, .classes = 9, .image_size = 32,
                           .split = DATA_SPLIT_TRAIN};
  ck_assert_int_ne(data_open_synthetic(&ds, &c, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "classes"));
  c.classes = 4;
  c.size = 0;
  ck_assert_int_ne(data_open_synthetic(&ds, &c, err, sizeof err), 0);
}
END_TEST

/* ---- PNG directory ---- */

static char root[64];

static void mkdirs(const char *sub)
{
  char p[256];
  snprintf(p, sizeof p, "%s/%s", root, sub);
  ck_assert_int_eq(mkdir(p, 0700), 0);
}

/* Write a PNG with libpng: color_type/bit_depth as given; palette (for palette images) maps
 * index i to (i*40, 255-i*40, i*7). 16-bit samples are written big-endian from data. */
static void write_png(const char *sub, const char *name, int w, int h, int color_type, int depth,
                      const uint8_t *data)
{
  char p[512];
  snprintf(p, sizeof p, "%s/%s/%s", root, sub, name);
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  ck_assert(png && info);
  ck_assert_int_eq(setjmp(png_jmpbuf(png)), 0);
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, color_type, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    png_color pal[256];
    for (int i = 0; i < 256; i++) {
      pal[i].red = (png_byte)(i * 40);
      pal[i].green = (png_byte)(255 - i * 40);
      pal[i].blue = (png_byte)(i * 7);
    }
    png_set_PLTE(png, info, pal, 1 << depth);
  }
  png_write_info(png, info);
  int ch = color_type == PNG_COLOR_TYPE_RGB ? 3 : color_type == PNG_COLOR_TYPE_RGB_ALPHA ? 4 : 1;
  size_t rowbytes = (size_t)w * ch * (depth == 16 ? 2 : 1);
  for (int y = 0; y < h; y++) png_write_row(png, (png_const_bytep)(data + (size_t)y * rowbytes));
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  fclose(f);
}

/* An RGB image whose pixels encode (x, y, salt) and a gray mask with labels (x + y) % classes. */
static void write_pair(const char *sub, const char *name, int w, int h, int classes, int salt)
{
  uint8_t *rgb = malloc((size_t)w * h * 3), *m = malloc((size_t)w * h);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      size_t o = (size_t)y * w + x;
      rgb[3 * o] = (uint8_t)x;
      rgb[3 * o + 1] = (uint8_t)y;
      rgb[3 * o + 2] = (uint8_t)salt;
      m[o] = (uint8_t)((x + y) % classes);
    }
  char dir[64];
  snprintf(dir, sizeof dir, "%s%simages", sub, *sub ? "/" : "");
  write_png(dir, name, w, h, PNG_COLOR_TYPE_RGB, 8, rgb);
  snprintf(dir, sizeof dir, "%s%smasks", sub, *sub ? "/" : "");
  write_png(dir, name, w, h, PNG_COLOR_TYPE_GRAY, 8, m);
  free(rgb);
  free(m);
}

static void setup_dir(void)
{
  strcpy(root, "/tmp/check_data_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(root));
  mkdirs("images");
  mkdirs("masks");
}

static void teardown_dir(void)
{
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
}

/* Open expecting failure; the message must contain both needles. */
static void expect_open_error(int classes, int min_size, const char *needle1, const char *needle2)
{
  data_set_t *tr, *va;
  char err[512] = "";
  ck_assert_int_ne(data_open_png_dir(&tr, &va, root, classes, min_size, DATA_PNG_DEFAULT_MAX_PIXELS, 0, err, sizeof err), 0);
  ck_assert_ptr_null(tr);
  ck_assert_ptr_null(va);
  ck_assert_msg(strstr(err, needle1) != NULL, "'%s' lacks '%s'", err, needle1);
  ck_assert_msg(!needle2 || strstr(err, needle2) != NULL, "'%s' lacks '%s'", err, needle2);
}

START_TEST(test_png_dir_reads_back)
{
  char names[12][16];
  for (int i = 0; i < 12; i++) {
    snprintf(names[i], sizeof names[i], "img%02d.png", i);
    write_pair("", names[i], 40 + i, 36, 3, i);
  }
  data_set_t *tr, *va;
  char err[512];
  ck_assert_msg(data_open_png_dir(&tr, &va, root, 3, 32, DATA_PNG_DEFAULT_MAX_PIXELS, 0, err, sizeof err) == 0, "%s", err);
  /* 10 % held out (rounded up): the last two names. */
  ck_assert_uint_eq(tr->size, 10);
  ck_assert_uint_eq(va->size, 2);
  ck_assert_int_eq(tr->max_width, 49);
  ck_assert_int_eq(tr->min_width, 40);
  ck_assert_int_eq(va->max_width, 51);
  uint8_t *rgb = malloc((size_t)va->max_width * va->max_height * 3);
  uint8_t *m = malloc((size_t)va->max_width * va->max_height);
  int w, h;
  ck_assert_int_eq(data_get(va, 1, rgb, m, &w, &h, err, sizeof err), 0);
  ck_assert_int_eq(w, 51);
  ck_assert_int_eq(h, 36);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      size_t o = (size_t)y * w + x;
      ck_assert_int_eq(rgb[3 * o], x);
      ck_assert_int_eq(rgb[3 * o + 1], y);
      ck_assert_int_eq(rgb[3 * o + 2], 11);
      ck_assert_int_eq(m[o], (x + y) % 3);
    }
  data_destroy(tr);
  data_destroy(va);
  /* A separate val/ folder takes precedence over the held-out split. */
  mkdirs("val");
  mkdirs("val/images");
  mkdirs("val/masks");
  write_pair("val", "v.png", 33, 33, 3, 99);
  ck_assert_msg(data_open_png_dir(&tr, &va, root, 3, 32, DATA_PNG_DEFAULT_MAX_PIXELS, 0, err, sizeof err) == 0, "%s", err);
  ck_assert_uint_eq(tr->size, 12);
  ck_assert_uint_eq(va->size, 1);
  ck_assert_int_eq(data_get(va, 0, rgb, m, &w, &h, err, sizeof err), 0);
  ck_assert_int_eq(rgb[2], 99);
  data_destroy(tr);
  data_destroy(va);
  free(rgb);
  free(m);
}
END_TEST

START_TEST(test_png_formats)
{
  /* Gray, palette and 16-bit RGB images come back as 8-bit RGB; a palette mask keeps its
   * indices (not the palette colours); label 255 is allowed (ignored pixels). */
  const int w = 8, h = 8;
  uint8_t gray[64], idx[64], rgb16[64 * 6], mask[64];
  for (int i = 0; i < 64; i++) {
    gray[i] = (uint8_t)(i * 3);
    idx[i] = (uint8_t)(i % 4);
    for (int c = 0; c < 3; c++) {
      rgb16[6 * i + 2 * c] = (uint8_t)(i + c);  /* high byte */
      rgb16[6 * i + 2 * c + 1] = 0x10;          /* low byte */
    }
    mask[i] = i == 5 ? 255 : (uint8_t)(i % 2);
  }
  write_png("images", "a.png", w, h, PNG_COLOR_TYPE_GRAY, 8, gray);
  write_png("masks", "a.png", w, h, PNG_COLOR_TYPE_PALETTE, 8, idx);
  write_png("images", "b.png", w, h, PNG_COLOR_TYPE_PALETTE, 8, idx);
  write_png("masks", "b.png", w, h, PNG_COLOR_TYPE_GRAY, 8, mask);
  write_png("images", "c.png", w, h, PNG_COLOR_TYPE_RGB, 16, rgb16);
  write_png("masks", "c.png", w, h, PNG_COLOR_TYPE_GRAY, 8, mask);
  data_set_t *tr, *va;
  char err[512];
  ck_assert_msg(data_open_png_dir(&tr, &va, root, 4, 8, DATA_PNG_DEFAULT_MAX_PIXELS, 1, err, sizeof err) == 0, "%s", err);
  uint8_t out[64 * 3], m[64];
  int ww, hh;
  ck_assert_int_eq(data_get(tr, 0, out, m, &ww, &hh, err, sizeof err), 0); /* a: gray */
  for (int i = 0; i < 64; i++) {
    for (int c = 0; c < 3; c++) ck_assert_int_eq(out[3 * i + c], gray[i]);
    ck_assert_int_eq(m[i], idx[i]);
  }
  ck_assert_int_eq(data_get(tr, 1, out, m, &ww, &hh, err, sizeof err), 0); /* b: palette */
  for (int i = 0; i < 64; i++) {
    ck_assert_int_eq(out[3 * i], (uint8_t)(idx[i] * 40));
    ck_assert_int_eq(out[3 * i + 1], (uint8_t)(255 - idx[i] * 40));
    ck_assert_int_eq(m[i], mask[i]);
  }
  ck_assert_int_eq(data_get(va, 0, out, m, &ww, &hh, err, sizeof err), 0); /* c: 16-bit */
  for (int i = 0; i < 64; i++)
    for (int c = 0; c < 3; c++) ck_assert_int_eq(out[3 * i + c], rgb16[6 * i + 2 * c]);
  data_destroy(tr);
  data_destroy(va);
  /* An RGB mask is refused: masks hold class indices. */
  uint8_t rgbmask[64 * 3] = {0};
  write_png("masks", "c.png", w, h, PNG_COLOR_TYPE_RGB, 8, rgbmask);
  expect_open_error(4, 8, "masks/c.png", "class indices");
}
END_TEST

START_TEST(test_png_missing_mask)
{
  write_pair("", "a.png", 32, 32, 2, 0);
  write_pair("", "b.png", 32, 32, 2, 0);
  char p[256];
  snprintf(p, sizeof p, "%s/masks/b.png", root);
  unlink(p);
  expect_open_error(2, 32, "masks/b.png", "missing");
}
END_TEST

START_TEST(test_png_size_mismatch)
{
  write_pair("", "a.png", 32, 32, 2, 0);
  write_pair("", "b.png", 32, 32, 2, 0);
  uint8_t m[40 * 32] = {0};
  write_png("masks", "b.png", 40, 32, PNG_COLOR_TYPE_GRAY, 8, m);
  expect_open_error(2, 32, "masks/b.png", "size mismatch");
}
END_TEST

START_TEST(test_png_label_too_large)
{
  write_pair("", "a.png", 32, 32, 2, 0);
  write_pair("", "b.png", 32, 32, 2, 0);
  uint8_t m[32 * 32] = {0};
  m[32 * 3 + 7] = 4;
  write_png("masks", "a.png", 32, 32, PNG_COLOR_TYPE_GRAY, 8, m);
  expect_open_error(2, 32, "masks/a.png", "label 4 at pixel (7, 3)");
  expect_open_error(4, 32, "masks/a.png", "labels are 0 to 3"); /* 4 classes: 0..3 */
}
END_TEST

START_TEST(test_png_corrupt)
{
  write_pair("", "a.png", 32, 32, 2, 0);
  write_pair("", "b.png", 32, 32, 2, 0);
  /* Truncate b's image in the middle of its pixel data. */
  char p[256];
  snprintf(p, sizeof p, "%s/images/b.png", root);
  struct stat st;
  ck_assert_int_eq(stat(p, &st), 0);
  ck_assert_int_eq(truncate(p, st.st_size / 2), 0);
  expect_open_error(2, 32, "images/b.png", "corrupt");
  /* Flip bytes inside the compressed data: the CRC check catches it. */
  write_pair("", "b.png", 32, 32, 2, 0);
  FILE *f = fopen(p, "r+b");
  ck_assert_ptr_nonnull(f);
  fseek(f, 60, SEEK_SET);
  fputc(0x5a, f);
  fputc(0xa5, f);
  fclose(f);
  expect_open_error(2, 32, "images/b.png", "corrupt");
}
END_TEST

START_TEST(test_png_not_png)
{
  write_pair("", "a.png", 32, 32, 2, 0);
  write_pair("", "b.png", 32, 32, 2, 0);
  char p[256];
  snprintf(p, sizeof p, "%s/masks/a.png", root);
  FILE *f = fopen(p, "w");
  fputs("this is not an image\n", f);
  fclose(f);
  expect_open_error(2, 32, "masks/a.png", "not a PNG");
  write_pair("", "a.png", 32, 32, 2, 0);
  /* A file with another extension in images/. */
  snprintf(p, sizeof p, "%s/images/c.jpg", root);
  f = fopen(p, "w");
  fputs("jpeg", f);
  fclose(f);
  expect_open_error(2, 32, "images/c.jpg", "not a PNG");
}
END_TEST

START_TEST(test_png_empty_and_small)
{
  expect_open_error(2, 32, "images", "no PNG");
  write_pair("", "a.png", 32, 32, 2, 0);
  expect_open_error(2, 32, "cannot be split", NULL); /* one image, nothing left to validate */
  write_pair("", "b.png", 24, 40, 2, 0);
  expect_open_error(2, 32, "images/b.png", "smaller than the crop");
  char p[256];
  snprintf(p, sizeof p, "%s/masks", root);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
  ck_assert_int_eq(system(cmd), 0);
  expect_open_error(2, 8, "masks", "missing");
}
END_TEST

/* ---- augmentation ---- */

START_TEST(test_augment)
{
  const int W = 20, H = 16, S = 12;
  uint8_t rgb[20 * 16 * 3], mask[20 * 16];
  for (int i = 0; i < W * H; i++) {
    for (int c = 0; c < 3; c++) rgb[3 * i + c] = (uint8_t)(i * 3 + c);
    mask[i] = (uint8_t)(i % 5); /* 3 classes: 3 and 4 become ignored */
  }
  augment_config_t c = {.crop = S, .random = 1, .seed = 77, .classes = 3, .ignore_label = 255};
  float x[12 * 12 * 3];
  int32_t y[12 * 12];
  int flips = 0, offsets_x[9] = {0}, differs_by_epoch = 0;
  for (size_t idx = 0; idx < 40; idx++) {
    int ox, oy, fl, ox2, oy2, fl2;
    augment_choice(&c, 0, idx, W, H, &ox, &oy, &fl);
    augment_choice(&c, 0, idx, W, H, &ox2, &oy2, &fl2);
    ck_assert(ox == ox2 && oy == oy2 && fl == fl2);
    ck_assert(ox >= 0 && ox <= W - S && oy >= 0 && oy <= H - S);
    flips += fl;
    offsets_x[ox]++;
    augment_choice(&c, 1, idx, W, H, &ox2, &oy2, &fl2);
    differs_by_epoch += ox != ox2 || oy != oy2 || fl != fl2;
    /* The output against a direct reading of the source. */
    augment_sample(&c, 0, idx, rgb, mask, W, H, x, y);
    for (int r = 0; r < S; r++)
      for (int col = 0; col < S; col++) {
        int sx = ox + (fl ? S - 1 - col : col), sy = oy + r;
        size_t o = (size_t)r * S + col, i = (size_t)sy * W + sx;
        for (int ch = 0; ch < 3; ch++)
          ck_assert_float_eq_tol(x[3 * o + ch], (rgb[3 * i + ch] / 255.0f - 0.5f) / 0.25f, 1e-5f);
        ck_assert_int_eq(y[o], mask[i] < 3 ? mask[i] : 255);
      }
  }
  ck_assert(flips > 5 && flips < 35);
  int used = 0;
  for (int k = 0; k <= W - S; k++) used += offsets_x[k] > 0;
  ck_assert_int_ge(used, 5);
  ck_assert_int_ge(differs_by_epoch, 30);
  /* Evaluation: centre crop, no flip, whatever the epoch. */
  augment_config_t v = {.crop = S, .random = 0, .seed = 77, .classes = 3, .ignore_label = 255};
  int ox, oy, fl;
  augment_choice(&v, 5, 3, W, H, &ox, &oy, &fl);
  ck_assert(ox == (W - S) / 2 && oy == (H - S) / 2 && fl == 0);
  /* A sample smaller than the crop is centred and padded with ignored pixels. */
  augment_config_t big = {.crop = 24, .random = 0, .seed = 77, .classes = 3, .ignore_label = 255};
  float xb[24 * 24 * 3];
  int32_t yb[24 * 24];
  augment_sample(&big, 0, 0, rgb, mask, W, H, xb, yb);
  ck_assert_int_eq(yb[0], 255);
  ck_assert_float_eq(xb[0], 0.0f);
  /* Pixel (2, 4) of the crop is source (0, 0). */
  ck_assert_int_eq(yb[4 * 24 + 2], mask[0]);
}
END_TEST

/* ---- loader ---- */

/* Every batch of one epoch, concatenated. */
static void run_epoch(const data_set_t *ds, int workers, long epoch, const size_t *idx,
                      const uint8_t *pad, size_t n, int drop, float *xs, int32_t *ys,
                      size_t *nbatches, int *valid)
{
  loader_config_t c = {.data = ds, .augment = {.crop = 16, .random = 1, .seed = 5, .classes = 4,
                       .ignore_label = 255}, .batch_size = 3, .workers = workers, .depth = 0};
  loader_t *l;
  char err[256];
  ck_assert_msg(loader_create(&l, &c, err, sizeof err) == 0, "%s", err);
  /* Start an epoch and abandon it half-way first: the next one must not be affected. */
  ck_assert_int_eq(loader_start(l, epoch + 100, idx, pad, n, drop, err, sizeof err), 0);
  const loader_batch_t *b;
  ck_assert_int_eq(loader_next(l, &b, err, sizeof err), 1);
  loader_release(l, b);
  ck_assert_int_eq(loader_start(l, epoch, idx, pad, n, drop, err, sizeof err), 0);
  *nbatches = 0;
  *valid = 0;
  size_t off = 0;
  int rc;
  while ((rc = loader_next(l, &b, err, sizeof err)) == 1) {
    ck_assert_uint_eq(b->batch_index, *nbatches);
    ck_assert_uint_eq(b->indices[0], idx[b->batch_index * 3]);
    memcpy(xs + off * 16 * 16 * 3, b->x, (size_t)b->n * 16 * 16 * 3 * sizeof(float));
    memcpy(ys + off * 16 * 16, b->y, (size_t)b->n * 16 * 16 * sizeof(int32_t));
    off += (size_t)b->n;
    *valid += b->valid;
    (*nbatches)++;
    loader_release(l, b);
  }
  ck_assert_int_eq(rc, 0);
  ck_assert_uint_eq(*nbatches, loader_num_batches(l));
  loader_destroy(l);
}

START_TEST(test_loader_independent_of_workers)
{
  data_set_t *ds = open_synth(5, 50, 4, 20, DATA_SPLIT_TRAIN);
  const size_t n = 11; /* 3 full batches of 3 and one of 2 */
  size_t idx[11];
  uint8_t pad[11] = {0};
  for (size_t i = 0; i < n; i++) idx[i] = (i * 7) % 50;
  pad[10] = 1;
  size_t per = n * 16 * 16;
  float *x0 = malloc(per * 3 * sizeof(float)), *x1 = malloc(per * 3 * sizeof(float));
  int32_t *y0 = malloc(per * sizeof(int32_t)), *y1 = malloc(per * sizeof(int32_t));
  size_t nb0, nb1;
  int v0, v1;
  run_epoch(ds, 0, 2, idx, pad, n, 0, x0, y0, &nb0, &v0);
  ck_assert_uint_eq(nb0, 4);
  ck_assert_int_eq(v0, 10);
  /* The same bytes from the synchronous path and from 1 and 3 threads. */
  for (int workers = 1; workers <= 3; workers += 2) {
    run_epoch(ds, workers, 2, idx, pad, n, 0, x1, y1, &nb1, &v1);
    ck_assert_uint_eq(nb1, nb0);
    ck_assert_int_eq(v1, v0);
    ck_assert_mem_eq(x0, x1, per * 3 * sizeof(float));
    ck_assert_mem_eq(y0, y1, per * sizeof(int32_t));
  }
  /* Each sample is the augmentation of its dataset sample, keyed by its index and epoch. */
  augment_config_t ac = {.crop = 16, .random = 1, .seed = 5, .classes = 4, .ignore_label = 255};
  uint8_t rgb[20 * 20 * 3], m[20 * 20];
  float xr[16 * 16 * 3];
  int32_t yr[16 * 16];
  char err[256];
  int w, h;
  ck_assert_int_eq(data_get(ds, idx[4], rgb, m, &w, &h, err, sizeof err), 0);
  augment_sample(&ac, 2, idx[4], rgb, m, w, h, xr, yr);
  ck_assert_mem_eq(xr, x0 + 4 * 16 * 16 * 3, sizeof xr);
  ck_assert_mem_eq(yr, y0 + 4 * 16 * 16, sizeof yr);
  /* drop_incomplete: the short last batch goes. */
  run_epoch(ds, 2, 2, idx, pad, n, 1, x1, y1, &nb1, &v1);
  ck_assert_uint_eq(nb1, 3);
  ck_assert_mem_eq(x0, x1, 9 * 16 * 16 * 3 * sizeof(float));
  free(x0);
  free(x1);
  free(y0);
  free(y1);
  data_destroy(ds);
}
END_TEST

START_TEST(test_loader_reports_errors)
{
  /* A PNG that breaks after the dataset was opened: the batch that needs it fails, with the name. */
  write_pair("", "a.png", 32, 32, 2, 0);
  write_pair("", "b.png", 32, 32, 2, 0);
  write_pair("", "c.png", 32, 32, 2, 0);
  data_set_t *tr, *va;
  char err[512];
  ck_assert_int_eq(data_open_png_dir(&tr, &va, root, 2, 32, DATA_PNG_DEFAULT_MAX_PIXELS, 1, err, sizeof err), 0);
  char p[256];
  snprintf(p, sizeof p, "%s/images/b.png", root);
  ck_assert_int_eq(truncate(p, 40), 0);
  loader_config_t c = {.data = tr, .augment = {.crop = 32, .random = 1, .seed = 5, .classes = 2,
                       .ignore_label = 255}, .batch_size = 1, .workers = _i, .depth = 0};
  loader_t *l;
  ck_assert_int_eq(loader_create(&l, &c, err, sizeof err), 0);
  size_t idx[2] = {0, 1};
  ck_assert_int_eq(loader_start(l, 0, idx, NULL, 2, 0, err, sizeof err), 0);
  const loader_batch_t *b;
  ck_assert_int_eq(loader_next(l, &b, err, sizeof err), 1);
  loader_release(l, b);
  ck_assert_int_eq(loader_next(l, &b, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "images/b.png"));
  loader_destroy(l);
  data_destroy(tr);
  data_destroy(va);
}
END_TEST

START_TEST(test_loader_png_swapped_for_larger)
{
  /* A PNG replaced by a larger one while the run trains (another job rewriting the dataset):
   * the batch that needs it fails with the file's name; the worker's buffers are never
   * reallocated behind it, so the loader keeps working and frees them once (run under
   * --enable-sanitizers by CI). */
  write_pair("", "a.png", 32, 32, 2, 0);
  write_pair("", "b.png", 32, 32, 2, 0);
  write_pair("", "c.png", 32, 32, 2, 0);
  data_set_t *tr, *va;
  char err[512];
  ck_assert_int_eq(data_open_png_dir(&tr, &va, root, 2, 32, DATA_PNG_DEFAULT_MAX_PIXELS, 1, err,
                                     sizeof err), 0);
  write_pair("", "b.png", 96, 80, 2, 0);
  loader_config_t c = {.data = tr, .augment = {.crop = 32, .random = 1, .seed = 5, .classes = 2,
                       .ignore_label = 255}, .batch_size = 1, .workers = _i, .depth = 0};
  loader_t *l;
  ck_assert_int_eq(loader_create(&l, &c, err, sizeof err), 0);
  size_t idx[2] = {0, 1};
  const loader_batch_t *b;
  for (int epoch = 0; epoch < 3; epoch++) {
    ck_assert_int_eq(loader_start(l, epoch, idx, NULL, 2, 0, err, sizeof err), 0);
    ck_assert_int_eq(loader_next(l, &b, err, sizeof err), 1);
    loader_release(l, b);
    ck_assert_int_eq(loader_next(l, &b, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "images/b.png") && strstr(err, "changed since"), "%s", err);
  }
  /* The same buffers still serve the samples that did not change. */
  ck_assert_int_eq(loader_start(l, 3, idx, NULL, 1, 0, err, sizeof err), 0);
  ck_assert_int_eq(loader_next(l, &b, err, sizeof err), 1);
  loader_release(l, b);
  loader_destroy(l);
  data_destroy(tr);
  data_destroy(va);
}
END_TEST

/* A PNG of the given header only: signature, IHDR (RGB, 8-bit), a short IDAT, IEND; with valid
 * CRCs, so libpng reads the header and reaches the image data, which is never inflated. */
static void write_png_header_only(const char *sub, const char *name, uint32_t w, uint32_t h)
{
  unsigned char buf[128];
  size_t n = 0;
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  memcpy(buf, sig, 8);
  n = 8;
  const struct {
    const char *type;
    unsigned char data[13];
    unsigned len;
  } chunks[] = {{"IHDR", {w >> 24, w >> 16, w >> 8, w, h >> 24, h >> 16, h >> 8, h, 8, 2, 0, 0, 0}, 13},
                {"IDAT", {0x78, 0x9c, 0x63, 0x60, 0x00, 0x00}, 6},
                {"IEND", {0}, 0}};
  for (int c = 0; c < 3; c++) {
    unsigned len = chunks[c].len;
    unsigned char *p = buf + n;
    p[0] = (unsigned char)(len >> 24); p[1] = (unsigned char)(len >> 16);
    p[2] = (unsigned char)(len >> 8); p[3] = (unsigned char)len;
    memcpy(p + 4, chunks[c].type, 4);
    memcpy(p + 8, chunks[c].data, len);
    uLong crc = crc32(0L, p + 4, 4 + len);
    p[8 + len] = (unsigned char)(crc >> 24); p[9 + len] = (unsigned char)(crc >> 16);
    p[10 + len] = (unsigned char)(crc >> 8); p[11 + len] = (unsigned char)crc;
    n += 12 + len;
  }
  char path[512];
  snprintf(path, sizeof path, "%s/%s/%s", root, sub, name);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
  fclose(f);
}

START_TEST(test_png_pixel_limit)
{
  write_pair("", "a.png", 40, 40, 2, 0);
  write_pair("", "b.png", 48, 40, 2, 0);
  data_set_t *tr, *va;
  char err[512] = "";
  /* Over the limit: refused from its header, naming the file and the flag. */
  ck_assert_int_ne(data_open_png_dir(&tr, &va, root, 2, 32, 40 * 40, 1, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "b.png: 1920 pixels, more than --max-image-pixels (1600)"), "%s", err);
  ck_assert_msg(data_open_png_dir(&tr, &va, root, 2, 32, 48 * 40, 1, err, sizeof err) == 0, "%s",
                err);
  data_destroy(tr);
  data_destroy(va);
  /* A 100-byte file that claims 16384 x 16384 (a quarter of a billion pixels, 768 MiB a
   * buffer for every loader worker): refused before a pixel is decoded or a byte allocated. */
  write_png_header_only("images", "bomb.png", 16384, 16384);
  write_png_header_only("masks", "bomb.png", 16384, 16384);
  int w = 0, h = 0;
  char path[512];
  snprintf(path, sizeof path, "%s/images/bomb.png", root);
  ck_assert_int_ne(data_png_size(path, 0, DATA_PNG_DEFAULT_MAX_PIXELS, &w, &h, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "268435456 pixels, more than --max-image-pixels (67108864)"), "%s", err);
  expect_open_error(2, 32, "bomb.png", "--max-image-pixels");
  /* More than 16384 on a side: libpng's user limit stops it while reading the header. */
  write_png_header_only("images", "bomb.png", 20000, 8);
  ck_assert_int_ne(data_png_size(path, 0, (size_t)1 << 40, &w, &h, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "exceeds user limit"), "%s", err);
  /* Under the limits, the header alone gives the size. */
  write_png_header_only("images", "bomb.png", 300, 200);
  ck_assert_int_eq(data_png_size(path, 0, DATA_PNG_DEFAULT_MAX_PIXELS, &w, &h, err, sizeof err), 0);
  ck_assert_int_eq(w, 300);
  ck_assert_int_eq(h, 200);
}
END_TEST

static Suite *data_suite(const suite_env_t *env)
{
  Suite *s = suite_create("data");
  TCase *tc = tcase_create("synthetic");
  tcase_add_test(tc, test_synth_deterministic);
  tcase_add_loop_test(tc, test_synth_classes_and_variety, 2, 9);
  tcase_add_test(tc, test_synth_bad_config);
  suite_add_tcase(s, tc);
  tc = SUITE_CASE(s, "png", test_png_dir_reads_back, test_png_formats, test_png_missing_mask,
                  test_png_size_mismatch, test_png_label_too_large, test_png_corrupt,
                  test_png_not_png, test_png_empty_and_small, test_png_pixel_limit);
  tcase_add_checked_fixture(tc, setup_dir, teardown_dir);
  tcase_add_loop_test(tc, test_loader_reports_errors, 0, 2);
  tcase_add_loop_test(tc, test_loader_png_swapped_for_larger, 0, 3);
  SUITE_CASE(s, "pipeline", test_augment, test_loader_independent_of_workers);
  return s;
}

SUITE_MAIN("check_data", data_suite, SUITE_CPU_ONLY)
