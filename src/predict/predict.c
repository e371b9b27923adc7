/* predict.c — a folder of images through a network (see predict.h). */
#include "config.h"

#include "src/predict/predict.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "src/check.h"
#include "src/data/data.h"
#include "src/device/arena.h"
#include "src/device/device.h"
#include "src/obs/outfile.h"
#include "src/predict/png_write.h"

static int cmp_names(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void predict_free_list(char **names, size_t n)
{
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
}

int predict_list(const char *dir, char ***names, size_t *n, char *err, size_t errlen)
{
  *names = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) return check_fail(err, errlen, "%s: cannot open the folder: %s", dir, strerror(errno));
  size_t cap = 0;
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.' || len < 5 || strcasecmp(e->d_name + len - 4, ".png") != 0) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 64;
      char **nn = realloc(*names, cap * sizeof *nn);
      if (!nn) rc = check_fail(err, errlen, "out of memory listing %s", dir);
      else *names = nn;
    }
    if (rc == 0 && !((*names)[*n] = strdup(e->d_name)))
      rc = check_fail(err, errlen, "out of memory listing %s", dir);
    if (rc == 0) (*n)++;
  }
  closedir(d);
  if (rc == 0 && *n == 0) rc = check_fail(err, errlen, "%s: no *.png images in the folder", dir);
  if (rc != 0) {
    predict_free_list(*names, *n);
    *names = NULL;
    *n = 0;
    return -1;
  }
  qsort(*names, *n, sizeof **names, cmp_names);
  return 0;
}

/* Output k of the image named name (NAME.png): the mask NAME.png, the overlay NAME.overlay.png,
 * the scores NAME.logits. */
enum { OUT_MASK, OUT_OVERLAY, OUT_LOGITS, OUT_KINDS };

static void output_name(const char *name, int k, char *buf, size_t len)
{
  static const char *const ext[OUT_KINDS] = {".png", ".overlay.png", ".logits"};
  snprintf(buf, len, "%.*s%s", (int)(strlen(name) - 4), name, ext[k]);
}

static int output_wanted(const predict_config_t *pc, int k)
{
  return k == OUT_MASK || (k == OUT_OVERLAY && pc->overlay) || (k == OUT_LOGITS && pc->logits);
}

typedef struct {
  char name[512];
  size_t input;
} out_name_t;

static int cmp_out(const void *a, const void *b)
{
  return strcmp(((const out_name_t *)a)->name, ((const out_name_t *)b)->name);
}

/* No two images would write the same output name (a.overlay.png's mask is a.png's overlay), and
 * none of the names exists in --out. */
static int check_output_names(const predict_config_t *pc, char **names, size_t n, char *err,
                              size_t errlen)
{
  out_name_t *outs = calloc(n * OUT_KINDS, sizeof *outs);
  if (!outs) return check_fail(err, errlen, "out of memory checking the output names");
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < OUT_KINDS; k++)
      if (output_wanted(pc, k)) {
        output_name(names[i], k, outs[m].name, sizeof outs[m].name);
        outs[m++].input = i;
      }
  qsort(outs, m, sizeof *outs, cmp_out);
  int rc = 0;
  for (size_t j = 1; j < m && rc == 0; j++)
    if (strcmp(outs[j - 1].name, outs[j].name) == 0)
      rc = check_fail(err, errlen,
                      "%s/%s and %s/%s would both write %s/%s: rename one of the images",
                      pc->images, names[outs[j - 1].input], pc->images, names[outs[j].input],
                      pc->out, outs[j].name);
  for (size_t j = 0; j < m && rc == 0; j++) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", pc->out, outs[j].name);
    if (lstat(path, &st) == 0)
      rc = check_fail(err, errlen,
                      "%s already exists: shmddp-predict never replaces a file it did not "
                      "write; give a new or empty --out, or remove the earlier outputs",
                      path);
    else if (errno != ENOENT && errno != ENOTDIR) /* ENOTDIR: --out is no folder (out_dir) */
      rc = check_fail(err, errlen, "%s: cannot tell whether it exists: %s", path,
                      strerror(errno));
  }
  free(outs);
  return rc;
}

int predict_check_outputs(const predict_config_t *pc, char **names, size_t n, char *err,
                          size_t errlen)
{
  /* The same folder, whatever the paths say (a symlink, "dir/.", a bind mount): its device
   * and inode. An --out that does not exist yet is a new folder. */
  struct stat in, out;
  if (stat(pc->images, &in) != 0)
    return check_fail(err, errlen, "%s: %s", pc->images, strerror(errno));
  if (stat(pc->out, &out) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino)
    return check_fail(err, errlen,
                      "--out %s is the --images folder %s: the masks would take the images' "
                      "names; give another folder",
                      pc->out, pc->images);
  return check_output_names(pc, names, n, err, errlen);
}

/* A class's colour in the overlay: class 0 (background) leaves the image as it is. */
static void class_colour(int c, uint8_t rgb[3])
{
  static const uint8_t palette[][3] = {{230, 25, 75},  {60, 180, 75},  {255, 225, 25},
                                       {0, 130, 200},  {245, 130, 48}, {145, 30, 180},
                                       {70, 240, 240}, {240, 50, 230}, {210, 245, 60}};
  memcpy(rgb, palette[(c - 1) % (int)(sizeof palette / sizeof palette[0])], 3);
}

typedef struct {
  const predict_config_t *pc;
  const weights_t *w;
  model_t *m;
  int mh, mw, mb;          /* the model's padded size and batch */
  float *x, *logits;       /* host: the batch, the scores */
  int32_t *pred;           /* host */
  void *dx, *dpred;        /* on the model's device */
  uint8_t *rgb[64];        /* the batch's decoded images */
  size_t rgb_cap[64];
  int width[64], height[64];
} run_t;

static void drop_model(run_t *r)
{
  if (!r->m) return;
  arena_free(model_arena(r->m), r->dx);
  arena_free(model_arena(r->m), r->dpred);
  model_destroy(r->m);
  r->m = NULL;
  free(r->x);
  free(r->logits);
  free(r->pred);
  r->x = r->logits = NULL;
  r->pred = NULL;
}

/* A model for batches of padded height h, width w (the one there is, when it fits). */
static int model_for(run_t *r, int h, int w, char *err, size_t errlen)
{
  if (r->m && r->mh == h && r->mw == w) return 0;
  drop_model(r);
  const predict_config_t *pc = r->pc;
  CHECK(weights_model(r->w, pc->device, pc->cuda_device, pc->batch, h, w, &r->m, err, errlen));
  size_t px = (size_t)pc->batch * h * w, k = (size_t)r->w->net.classes;
  arena_t *a = model_arena(r->m);
  r->mh = h;
  r->mw = w;
  r->x = malloc(px * 3 * sizeof *r->x);
  r->logits = malloc(px * k * sizeof *r->logits);
  r->pred = malloc(px * sizeof *r->pred);
  r->dx = arena_alloc(a, px * 3 * sizeof(float), ARENA_ACTIVATIONS, "predict input");
  r->dpred = arena_alloc(a, px * sizeof(int32_t), ARENA_ACTIVATIONS, "predictions");
  if (!r->x || !r->logits || !r->pred || !r->dx || !r->dpred)
    return check_fail(err, errlen, "out of memory for batches of %d images of %dx%d",
                      pc->batch, w, h);
  return 0;
}

static int round_up(int v, int to) { return (v + to - 1) / to * to; }

/* Image i of the batch (its decoded pixels in r->rgb[i]) into the padded input. */
static void fill_input(run_t *r, int i)
{
  float *x = r->x + (size_t)i * r->mh * r->mw * 3;
  memset(x, 0, (size_t)r->mh * r->mw * 3 * sizeof *x);
  for (int y = 0; y < r->height[i]; y++)
    for (int c = 0; c < r->width[i] * 3; c++)
      x[(size_t)y * r->mw * 3 + c] =
          ((float)r->rgb[i][(size_t)y * r->width[i] * 3 + c] / 255.0f - 0.5f) * 4.0f;
}

/* The outputs of image i of the batch, named after names[i]. */
static int write_outputs(run_t *r, int i, const char *name, char *err, size_t errlen)
{
  const predict_config_t *pc = r->pc;
  int W = r->width[i], H = r->height[i], K = r->w->net.classes;
  size_t img = (size_t)i * r->mh * r->mw;
  uint8_t *mask = malloc((size_t)W * H), *over = malloc((size_t)W * H * 3);
  float *lg = pc->logits ? malloc((size_t)W * H * K * sizeof *lg) : NULL;
  if (!mask || !over || (pc->logits && !lg)) {
    free(mask), free(over), free(lg);
    return check_fail(err, errlen, "out of memory writing the outputs of %s", name);
  }
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      size_t o = (size_t)y * W + x, p = img + (size_t)y * r->mw + x;
      int c = r->pred[p];
      mask[o] = pc->class_ids ? (uint8_t)c : r->w->class_value[c];
      uint8_t col[3];
      if (c > 0) class_colour(c, col);
      for (int ch = 0; ch < 3; ch++) {
        uint8_t v = r->rgb[i][3 * o + ch];
        over[3 * o + ch] = c > 0 ? (uint8_t)((v + col[ch] + 1) / 2) : v;
      }
      if (lg) memcpy(lg + o * K, r->logits + p * K, (size_t)K * sizeof *lg);
    }
  char path[4096], file[512];
  output_name(name, OUT_MASK, file, sizeof file);
  snprintf(path, sizeof path, "%s/%s", pc->out, file);
  int rc = png_write_new(path, W, H, 1, mask, err, errlen);
  if (rc == 0 && pc->overlay) {
    output_name(name, OUT_OVERLAY, file, sizeof file);
    snprintf(path, sizeof path, "%s/%s", pc->out, file);
    rc = png_write_new(path, W, H, 3, over, err, errlen);
  }
  if (rc == 0 && lg) {
    /* as the PNG files: a private temporary file given the name only where it is free */
    output_name(name, OUT_LOGITS, file, sizeof file);
    snprintf(path, sizeof path, "%s/%s", pc->out, file);
    char tmp[4200];
    FILE *f = outfile_fopen_temp(path, tmp, sizeof tmp);
    if (!f) {
      rc = check_fail(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    } else {
      fwrite(lg, sizeof *lg, (size_t)W * H * K, f); /* a failure sets the error flag */
      if (outfile_commit(f, tmp, path, 0) != 0)
        rc = check_fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    }
  }
  free(mask), free(over), free(lg);
  return rc;
}

/* names[first, first + n): decoded, the same padded size, through the network. */
static int run_batch(run_t *r, char **names, size_t first, int n, FILE *log, char *err,
                     size_t errlen)
{
  const predict_config_t *pc = r->pc;
  for (int i = 0; i < n; i++) fill_input(r, i);
  size_t px = (size_t)n * r->mh * r->mw;
  int dev = arena_device(model_arena(r->m));
  CHECK(dev_copy_now(r->dx, dev, r->x, DEV_HOST, px * 3 * sizeof(float), err, errlen));
  CHECK(model_eval_logits(r->m, r->dx, n, r->dpred, r->logits, err, errlen));
  CHECK(dev_copy_now(r->pred, DEV_HOST, r->dpred, dev, px * sizeof(int32_t), err, errlen));
  for (int i = 0; i < n; i++) CHECK(write_outputs(r, i, names[first + i], err, errlen));
  if (log)
    fprintf(log, "predict: %s .. %s (%d image%s, %dx%d)\n", names[first], names[first + n - 1], n,
            n == 1 ? "" : "s", r->mw, r->mh);
  (void)pc;
  return 0;
}

void predict_check(const predict_config_t *pc, char **names, size_t n, predict_bad_t *bad,
                   size_t *nbad)
{
  uint8_t *rgb = NULL;
  size_t cap = 0;
  *nbad = 0;
  for (size_t k = 0; k < n; k++) {
    char path[4096], why[512];
    int iw, ih;
    snprintf(path, sizeof path, "%s/%s", pc->images, names[k]);
    if (data_png_load(path, 0, DATA_PNG_DEFAULT_MAX_PIXELS, &rgb, &cap, &iw, &ih, why,
                      sizeof why) == 0)
      continue;
    bad[*nbad].name = names[k];
    snprintf(bad[*nbad].why, sizeof bad[*nbad].why, "%s", why);
    (*nbad)++;
  }
  free(rgb);
}

int predict_run(const weights_t *w, const predict_config_t *pc, char **names, size_t count,
                FILE *log, char *err, size_t errlen)
{
  run_t r = {.pc = pc, .w = w};
  int rc = 0, multiple = 1 << (w->net.levels - 1), n = 0, bh = 0, bw = 0;
  size_t first = 0;
  for (size_t k = 0; k <= count && rc == 0; k++) {
    int h = 0, wd = 0, iw = 0, ih = 0;
    if (k < count) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", pc->images, names[k]);
      rc = data_png_load(path, 0, DATA_PNG_DEFAULT_MAX_PIXELS, &r.rgb[n], &r.rgb_cap[n], &iw, &ih,
                         err, errlen);
      if (rc != 0) break;
      h = round_up(ih, multiple) < 2 * multiple ? 2 * multiple : round_up(ih, multiple);
      wd = round_up(iw, multiple) < 2 * multiple ? 2 * multiple : round_up(iw, multiple);
    }
    /* the batch so far ends at a new size, when full, or after the last image */
    if (n > 0 && (k == count || h != bh || wd != bw || n == pc->batch)) {
      rc = model_for(&r, bh, bw, err, errlen);
      if (rc == 0) rc = run_batch(&r, names, first, n, log, err, errlen);
      if (k < count) { /* the image just read starts the next batch */
        uint8_t *t = r.rgb[0];
        size_t tc = r.rgb_cap[0];
        r.rgb[0] = r.rgb[n], r.rgb_cap[0] = r.rgb_cap[n];
        r.rgb[n] = t, r.rgb_cap[n] = tc;
      }
      first = k;
      n = 0;
    }
    if (k < count) {
      r.width[n] = iw, r.height[n] = ih;
      bh = h, bw = wd;
      n++;
    }
  }
  drop_model(&r);
  for (int i = 0; i < 64; i++) free(r.rgb[i]);
  return rc;
}
