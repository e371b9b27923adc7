/* data_png.c — PNG decoding with libpng, and the directory dataset (DIR/images/NAME.png with
 * DIR/masks/NAME.png). Every pair is decoded and checked when the dataset is opened, so broken
 * data stops the run before any rank starts, with the file's name in the message. */
#include "config.h"

#include "src/data/data.h"

#include <dirent.h>
#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "src/check.h"

#define PNG_MAX_SIDE 16384
/* The longest chunk a file may hold besides the image data (which is streamed): only PLTE and
 * tRNS (at most 768 and 256 bytes) are read, the rest are skipped, so this bounds no allocation,
 * only the bytes skipped; it leaves room for real metadata (XMP text, ICC profiles, Exif). */
#define PNG_MAX_CHUNK ((png_alloc_size_t)8 << 20)
#define PNG_MAX_CHUNKS 32 /* ancillary chunks libpng may store (none are kept) */

typedef struct {
  char msg[200];
  char warning[200]; /* the last warning: libpng explains some errors in one before */
} png_error_ctx_t;

static void on_png_error(png_structp png, png_const_charp msg)
{
  png_error_ctx_t *ctx = png_get_error_ptr(png);
  snprintf(ctx->msg, sizeof ctx->msg, "%s", msg);
  png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg)
{
  /* Warnings (e.g. a bad gamma chunk) do not stop training; the last one explains an error. */
  png_error_ctx_t *ctx = png_get_error_ptr(png);
  snprintf(ctx->warning, sizeof ctx->warning, "%s", msg);
}

static const char *color_type_name(int t)
{
  switch (t) {
  case PNG_COLOR_TYPE_GRAY: return "grayscale";
  case PNG_COLOR_TYPE_GRAY_ALPHA: return "grayscale+alpha";
  case PNG_COLOR_TYPE_PALETTE: return "palette";
  case PNG_COLOR_TYPE_RGB: return "RGB";
  case PNG_COLOR_TYPE_RGB_ALPHA: return "RGBA";
  default: return "unknown";
  }
}

/* Opens path as a PNG and reads its header under the limits: the side limit through libpng's
 * user limits (checked when the header is read, before any image data), the pixel count right
 * after it; transformations for the wanted layout are set up. 0, or -1 with the message. */
typedef struct {
  FILE *f;
  png_structp png;
  png_infop info;
  png_error_ctx_t ectx;
} png_reader_t;

static void reader_close(png_reader_t *r)
{
  if (r->png) png_destroy_read_struct(&r->png, r->info ? &r->info : NULL, NULL);
  if (r->f) fclose(r->f);
  r->png = NULL;
  r->info = NULL;
  r->f = NULL;
}

/* The layout checks and transformations after the header; NULL, or what is wrong. */
static const char *want_layout(png_reader_t *r, int as_mask, int depth, int type)
{
  if (as_mask) {
    /* Class indices are used as stored: no palette lookup, no scaling of low bit depths. */
    if ((type != PNG_COLOR_TYPE_GRAY && type != PNG_COLOR_TYPE_PALETTE) || depth > 8)
      return "not a mask: a mask must be an 8-bit (or less) grayscale or palette PNG holding "
             "class indices";
    if (depth < 8) png_set_packing(r->png);
  } else {
    if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(r->png);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(r->png);
    if (depth == 16) png_set_strip_16(r->png);
    if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA)
      png_set_gray_to_rgb(r->png);
    png_set_strip_alpha(r->png);
  }
  png_read_update_info(r->png, r->info);
  if (png_get_channels(r->png, r->info) != (as_mask ? 1 : 3) || png_get_bit_depth(r->png, r->info) != 8)
    return "an unsupported PNG layout";
  return NULL;
}

/* Decodes path into buf (cap bytes); buf NULL: the header only (the size, under the limits). */
static int png_decode(const char *path, int as_mask, size_t max_pixels, uint8_t *buf, size_t cap,
                      int *width, int *height, char *err, size_t errlen)
{
  png_reader_t r = {.f = fopen(path, "rb")}; /* ectx zeroed */
  if (!r.f) return check_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
  unsigned char sig[8];
  if (fread(sig, 1, 8, r.f) != 8 || png_sig_cmp(sig, 0, 8) != 0) {
    reader_close(&r);
    return check_fail(err, errlen, "%s: not a PNG file (it does not start with the PNG signature)",
                      path);
  }
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r.ectx, on_png_error, on_png_warning);
  r.info = r.png ? png_create_info_struct(r.png) : NULL;
  if (!r.info) {
    reader_close(&r);
    return check_fail(err, errlen, "%s: out of memory starting libpng", path);
  }
  png_bytep *volatile rows = NULL;
  if (setjmp(png_jmpbuf(r.png))) {
    free(rows);
    reader_close(&r);
    return check_fail(err, errlen, "%s: corrupt PNG, or over a limit (libpng: %s%s%s%s)", path,
                      r.ectx.msg, r.ectx.warning[0] ? "; " : "", r.ectx.warning,
                      strstr(r.ectx.warning, "limit") ? ": at most 16384 pixels a side"
                      : strstr(r.ectx.msg, "too large") ? ": a chunk may hold at most 8 MiB"
                                                        : "");
  }
  /* Every allocation a file can ask for is bounded before a byte of it is read. The sides and
   * the pixel count: below. Chunks: only the pixels matter here, so every chunk but IHDR, PLTE,
   * tRNS, IDAT and IEND is skipped unread (text, ICC profiles, palettes, Exif: libpng would
   * allocate what their headers claim, 2 GiB for 80 bytes of file); a chunk whose header claims
   * more than PNG_MAX_CHUNK (IDAT: more than the image can hold) is a "benign" error, which
   * libpng only warns about by default and then reads on: here it is an error, as is every
   * benign error (a damaged palette or transparency chunk), so the file is refused at once.
   * A bad CRC of a chunk that is skipped anyway does not matter. */
  png_set_user_limits(r.png, PNG_MAX_SIDE, PNG_MAX_SIDE);
  png_set_chunk_malloc_max(r.png, PNG_MAX_CHUNK);
  png_set_chunk_cache_max(r.png, PNG_MAX_CHUNKS);
  png_set_keep_unknown_chunks(r.png, PNG_HANDLE_CHUNK_NEVER, NULL, -1);
  png_set_benign_errors(r.png, 0);
  png_set_crc_action(r.png, PNG_CRC_DEFAULT, PNG_CRC_QUIET_USE);
  png_init_io(r.png, r.f);
  png_set_sig_bytes(r.png, 8);
  png_read_info(r.png, r.info);
  png_uint_32 w = png_get_image_width(r.png, r.info), h = png_get_image_height(r.png, r.info);
  int depth = png_get_bit_depth(r.png, r.info), type = png_get_color_type(r.png, r.info);
  size_t px = (size_t)w * h, need = px * (as_mask ? 1 : 3);
  char bad[200] = "";
  const char *layout;
  if (px > max_pixels)
    snprintf(bad, sizeof bad, "%zu pixels, more than --max-image-pixels (%zu)", px, max_pixels);
  else if ((layout = want_layout(&r, as_mask, depth, type)) != NULL)
    snprintf(bad, sizeof bad, "%s", layout);
  else if (buf && need > cap)
    snprintf(bad, sizeof bad, "larger than when the dataset was opened (it changed since)");
  if (bad[0]) {
    reader_close(&r);
    return check_fail(err, errlen, "%s: %s (this file is %ux%u, %s, %d-bit)", path, bad,
                      (unsigned)w, (unsigned)h, color_type_name(type), depth);
  }
  if (buf) {
    rows = malloc(h * sizeof *rows);
    if (!rows) png_error(r.png, "out of memory for row pointers");
    for (png_uint_32 y = 0; y < h; y++) rows[y] = buf + (size_t)y * w * (as_mask ? 1 : 3);
    png_read_image(r.png, rows);
    png_read_end(r.png, NULL);
    free(rows);
  }
  reader_close(&r);
  *width = (int)w;
  *height = (int)h;
  return 0;
}

int data_png_size(const char *path, int as_mask, size_t max_pixels, int *width, int *height,
                  char *err, size_t errlen)
{
  return png_decode(path, as_mask, max_pixels, NULL, 0, width, height, err, errlen);
}

int data_png_read(const char *path, int as_mask, size_t max_pixels, uint8_t *buf, size_t cap,
                  int *width, int *height, char *err, size_t errlen)
{
  return png_decode(path, as_mask, max_pixels, buf, cap, width, height, err, errlen);
}

int data_png_load(const char *path, int as_mask, size_t max_pixels, uint8_t **buf, size_t *cap,
                  int *width, int *height, char *err, size_t errlen)
{
  int w, h;
  if (data_png_size(path, as_mask, max_pixels, &w, &h, err, errlen) != 0) return -1;
  size_t need = (size_t)w * (size_t)h * (as_mask ? 1 : 3); /* w, h <= 16384: no overflow */
  if (need > *cap || !*buf) {
    uint8_t *nb = realloc(*buf, need ? need : 1);
    if (!nb)
      return check_fail(err, errlen, "%s: out of memory for %dx%d pixels", path, w, h);
    *buf = nb;
    *cap = need;
  }
  return data_png_read(path, as_mask, max_pixels, *buf, *cap, width, height, err, errlen);
}

/* ---- the directory dataset ---- */

typedef struct {
  char **images, **masks; /* paths */
  size_t n;
  size_t max_pixels;
  uint8_t map[256];       /* mask value in the file -> label */
} png_dir_t;

static int png_dir_get(const data_set_t *ds, size_t i, uint8_t *rgb, uint8_t *mask, int *width,
                       int *height, char *err, size_t errlen)
{
  const png_dir_t *d = ds->impl;
  /* The caller's buffers hold max_width * max_height pixels (the scan's largest): decode
   * straight into them; a file that grew since is refused, never given a new buffer. */
  size_t px = (size_t)ds->max_width * ds->max_height;
  int mw, mh;
  if (data_png_read(d->images[i], 0, d->max_pixels, rgb, 3 * px, width, height, err, errlen) != 0 ||
      data_png_read(d->masks[i], 1, d->max_pixels, mask, px, &mw, &mh, err, errlen) != 0)
    return -1;
  if (mw != *width || mh != *height)
    return check_fail(err, errlen, "%s: changed since the dataset was opened", d->images[i]);
  for (size_t p = 0; p < (size_t)mw * mh; p++) mask[p] = d->map[mask[p]];
  return 0;
}

static void png_dir_free(png_dir_t *d)
{
  if (!d) return;
  for (size_t i = 0; i < d->n; i++) {
    free(d->images[i]);
    free(d->masks[i]);
  }
  free(d->images);
  free(d->masks);
  free(d);
}

static void png_dir_destroy(data_set_t *ds)
{
  png_dir_free(ds->impl);
  free(ds);
}

static const data_ops_t png_dir_ops = {.get = png_dir_get, .destroy = png_dir_destroy};

static int cmp_names(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
}

/* The *.png names in dir, sorted bytewise (not by locale: the split must not depend on it). */
static int list_pngs(const char *dir, char ***out, size_t *count, char *err, size_t errlen)
{
  *out = NULL;
  *count = 0;
  DIR *d = opendir(dir);
  if (!d) {
    return check_fail(err, errlen, "%s: cannot open the folder: %s", dir, strerror(errno));
  }
  char **names = NULL;
  size_t n = 0, capn = 0;
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    size_t len = strlen(e->d_name);
    if (len < 5 || strcasecmp(e->d_name + len - 4, ".png") != 0) {
      rc = check_fail(err, errlen,
                      "%s/%s: not a PNG file name; this folder may hold only *.png files "
                      "(convert or move it)",
                      dir, e->d_name);
      break;
    }
    if (n == capn) {
      capn = capn ? 2 * capn : 64;
      char **nn = realloc(names, capn * sizeof *nn);
      if (!nn) {
        rc = -1;
        snprintf(err, errlen, "out of memory listing %s", dir);
        break;
      }
      names = nn;
    }
    if (!(names[n] = strdup(e->d_name))) {
      rc = -1;
      snprintf(err, errlen, "out of memory listing %s", dir);
      break;
    }
    n++;
  }
  closedir(d);
  if (rc == 0 && n == 0) {
    rc = check_fail(err, errlen, "%s: the folder holds no PNG images", dir);
  }
  if (rc != 0) {
    free_names(names, n);
    return -1;
  }
  qsort(names, n, sizeof *names, cmp_names);
  *out = names;
  *count = n;
  return 0;
}

static char *join(const char *a, const char *b)
{
  size_t len = strlen(a) + strlen(b) + 2;
  char *p = malloc(len);
  if (p) snprintf(p, len, "%s/%s", a, b);
  return p;
}

/* Decoding buffers, reused from one file to the next. */
typedef struct {
  uint8_t *rgb, *mask;
  size_t rcap, mcap;
} decode_buf_t;

/* Pair k of d: the mask exists, both decode, they agree in size, the image holds a crop, and
 * every label (read through the map) is a class or the ignored one; its labels and extent are
 * counted into ds. */
static int check_pair(data_set_t *ds, const png_dir_t *d, size_t k, const data_png_opts_t *o,
                      decode_buf_t *buf, char *err, size_t errlen)
{
  const int classes = o->classes, min_size = o->min_size;
  struct stat st;
  if (stat(d->masks[k], &st) != 0)
    return check_fail(err, errlen, "%s: missing: the image %s needs a mask of the same name",
                      d->masks[k], d->images[k]);
  int w, h, mw, mh;
  if (data_png_load(d->images[k], 0, d->max_pixels, &buf->rgb, &buf->rcap, &w, &h, err,
                    errlen) != 0 ||
      data_png_load(d->masks[k], 1, d->max_pixels, &buf->mask, &buf->mcap, &mw, &mh, err,
                    errlen) != 0)
    return -1;
  if (mw != w || mh != h)
    return check_fail(err, errlen, "%s: size mismatch: the mask is %dx%d, its image %s is %dx%d",
                      d->masks[k], mw, mh, d->images[k], w, h);
  if (w < min_size || h < min_size)
    return check_fail(err, errlen,
                      "%s: %dx%d is smaller than the crop size %d (--image-size); use "
                      "larger images or a smaller --image-size",
                      d->images[k], w, h, min_size);
  for (size_t p = 0; p < (size_t)w * h; p++) {
    int v = d->map[buf->mask[p]];
    if (v >= classes && v != o->ignore_label)
      return check_fail(err, errlen,
                        "%s: label %d at pixel (%zu, %zu) is not a class: with %d classes "
                        "(--classes) labels are 0 to %d, and %d marks pixels to ignore "
                        "(--ignore-label); map other values with --mask-map VALUE:LABEL",
                        d->masks[k], v, p % (size_t)w, p / (size_t)w, classes, classes - 1,
                        o->ignore_label);
    ds->label_pixels[v] += 1;
  }
  if (w > ds->max_width) ds->max_width = w;
  if (h > ds->max_height) ds->max_height = h;
  if (w < ds->min_width) ds->min_width = w;
  if (h < ds->min_height) ds->min_height = h;
  return 0;
}

/* Decode and check every pair of names[first, first + n); then hand them to a data_set_t. */
static int open_split(data_set_t **out, const char *root, const char *sub, char **names,
                      size_t first, size_t n, const data_png_opts_t *o, const char *label,
                      char *err, size_t errlen)
{
  *out = NULL;
  char img_dir[2048], mask_dir[2048];
  snprintf(img_dir, sizeof img_dir, "%s%s/images", root, sub);
  snprintf(mask_dir, sizeof mask_dir, "%s%s/masks", root, sub);
  data_set_t *ds = calloc(1, sizeof *ds);
  png_dir_t *d = calloc(1, sizeof *d);
  if (d) {
    d->images = calloc(n, sizeof *d->images);
    d->masks = calloc(n, sizeof *d->masks);
  }
  if (!ds || !d || !d->images || !d->masks) {
    free(ds);
    png_dir_free(d);
    return check_fail(err, errlen, "out of memory opening %s", root);
  }
  ds->ops = &png_dir_ops;
  ds->impl = d;
  d->max_pixels = o->max_pixels ? o->max_pixels : DATA_PNG_DEFAULT_MAX_PIXELS;
  ds->classes = o->classes;
  ds->counted = 1;
  for (int v = 0; v < 256; v++) d->map[v] = o->map ? o->map[v] : (uint8_t)v;
  ds->min_width = ds->min_height = PNG_MAX_SIDE;
  snprintf(ds->name, sizeof ds->name, "%.40s (%s)", root, label);
  decode_buf_t buf = {0};
  int rc = 0;
  for (size_t k = 0; k < n && rc == 0; k++) {
    const char *name = names[first + k];
    d->images[k] = join(img_dir, name);
    d->masks[k] = join(mask_dir, name);
    d->n = k + 1;
    if (!d->images[k] || !d->masks[k])
      rc = check_fail(err, errlen, "out of memory opening %s", root);
    else
      rc = check_pair(ds, d, k, o, &buf, err, errlen);
  }
  free(buf.rgb);
  free(buf.mask);
  if (rc != 0) {
    data_destroy(ds);
    return -1;
  }
  ds->size = n;
  *out = ds;
  return 0;
}

static int is_dir(const char *path)
{
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Masks of nothing but class 0 and the ignore label: the common 0/255 binary masks, whose
 * foreground 255 would be ignored. */
static int check_foreground(const data_set_t *train, const char *dir, const data_png_opts_t *o,
                            char *err, size_t errlen)
{
  double fg = 0;
  for (int v = 1; v < o->classes; v++) fg += train->label_pixels[v];
  if (fg > 0 || train->label_pixels[o->ignore_label] == 0) return 0;
  char two[64] = ""; /* binary masks train a model of two classes */
  if (o->classes != 2)
    snprintf(two, sizeof two, " --classes 2 (--classes is %d now)", o->classes);
  return check_fail(err, errlen,
                    "%s/masks: the training masks hold only 0 and %d, and %d marks pixels to "
                    "ignore (--ignore-label), so no pixel of any class but 0 would be trained "
                    "on; if %d is your foreground (binary masks saved as 0/%d), give "
                    "--mask-map %d:1%s",
                    dir, o->ignore_label, o->ignore_label, o->ignore_label, o->ignore_label,
                    o->ignore_label, two);
}

int data_open_png_dir(data_set_t **train, data_set_t **val, const char *dir, int classes,
                      int min_size, size_t max_pixels, long val_size, char *err, size_t errlen)
{
  data_png_opts_t o = {.classes = classes,
                       .min_size = min_size,
                       .max_pixels = max_pixels,
                       .val_size = val_size,
                       .ignore_label = DATA_IGNORE_LABEL};
  return data_open_png_dir_opts(train, val, dir, &o, err, errlen);
}

int data_open_png_dir_opts(data_set_t **train, data_set_t **val, const char *dir,
                           const data_png_opts_t *o, char *err, size_t errlen)
{
  const long val_size = o->val_size;
  *train = *val = NULL;
  char path[2048];
  const char *parts[] = {"/images", "/masks", "/val/images", "/val/masks"};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s%s", dir, parts[i]);
    if (!is_dir(path)) {
      return check_fail(err, errlen,
                        "%s: missing: a PNG dataset is a folder with images/*.png and "
                        "masks/*.png (same names; masks hold class indices)",
                        path);
    }
  }
  char **names = NULL;
  size_t n = 0;
  if (list_pngs((snprintf(path, sizeof path, "%s/images", dir), path), &names, &n, err,
                errlen) != 0)
    return -1;
  snprintf(path, sizeof path, "%s/val/images", dir);
  int rc;
  if (is_dir(path)) {
    char **vnames = NULL;
    size_t vn = 0;
    snprintf(path, sizeof path, "%s/val/masks", dir);
    if (!is_dir(path)) {
      rc = check_fail(err, errlen, "%s: missing: %s/val/images needs val/masks beside it", path,
                      dir);
    } else {
      snprintf(path, sizeof path, "%s/val/images", dir);
      rc = list_pngs(path, &vnames, &vn, err, errlen);
    }
    if (rc == 0) rc = open_split(train, dir, "", names, 0, n, o, "train", err, errlen);
    if (rc == 0)
      rc = open_split(val, dir, "/val", vnames, 0, vn, o, "val", err, errlen);
    free_names(vnames, vn);
  } else {
    size_t nval = val_size > 0 ? (size_t)val_size : (n + 9) / 10;
    if (nval >= n) {
      rc =
          check_fail(err, errlen,
                     "%s: %zu image%s cannot be split into training and %zu for "
                     "validation; add images, give a smaller --val-size, or provide val/images and "
                     "val/masks",
                     dir, n, n == 1 ? "" : "s", nval);
    } else {
      rc = open_split(train, dir, "", names, 0, n - nval, o, "train", err, errlen);
      if (rc == 0)
        rc = open_split(val, dir, "", names, n - nval, nval, o, "val", err, errlen);
    }
  }
  free_names(names, n);
  if (rc == 0) rc = check_foreground(*train, dir, o, err, errlen);
  if (rc != 0) {
    data_destroy(*train);
    data_destroy(*val);
    *train = *val = NULL;
  }
  return rc;
}
