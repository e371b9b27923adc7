/* data_synth.c — the procedural shapes dataset. Sample i is drawn from a random stream keyed by
 * (seed, split, i) alone, so it is the same on every rank, thread and run. Shape colours are
 * random (the class is in the outline, not the colour), backgrounds carry gradients and stripes,
 * shapes carry their own texture, and every image gets pixel noise and brightness/contrast
 * jitter: a network has to learn shapes, not thresholds. */
#include "config.h"

#include "src/data/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/data/data_rng.h"

#define SYNTH_MAX_SHAPES 4

enum { SHAPE_DISC = 1, SHAPE_SQUARE, SHAPE_TRIANGLE, SHAPE_RING, SHAPE_CROSS, SHAPE_ELLIPSE,
       SHAPE_HALF_DISC };

typedef struct {
  int cls;
  double cx, cy, r, cos_t, sin_t;
  double col[3];
  double tex_amp, tex_freq, tex_phase; /* stripes across the shape */
} shape_t;

typedef struct {
  data_synth_config_t cfg;
} synth_t;

static const char *const shape_names[DATA_SYNTH_MAX_CLASSES] = {
  "background", "disc", "square", "triangle", "ring", "cross", "ellipse", "half-disc"};

/* (u, v): the pixel relative to the centre, in the shape's rotated frame. */
static int inside(int cls, double u, double v, double r)
{
  double d2 = u * u + v * v;
  switch (cls) {
  case SHAPE_DISC: return d2 <= r * r;
  case SHAPE_SQUARE: return fabs(u) <= 0.85 * r && fabs(v) <= 0.85 * r;
  case SHAPE_TRIANGLE: {
    /* Equilateral, inside the three edges, each at distance 0.625 r from the centre on the side
     * opposite a vertex (vertices at 90, 210 and 330 degrees): circumradius 1.25 r, so its area
     * (2 r^2) is not far below the disc's and the square's. */
    static const double vc[3] = {0.0, -0.86602540378443865, 0.86602540378443865};
    static const double vs[3] = {1.0, -0.5, -0.5};
    for (int k = 0; k < 3; k++)
      if (-(u * vc[k] + v * vs[k]) > 0.625 * r) return 0;
    return 1;
  }
  case SHAPE_RING: return d2 <= r * r && d2 >= 0.3 * r * r;
  case SHAPE_CROSS:
    return (fabs(u) <= r && fabs(v) <= 0.3 * r) || (fabs(v) <= r && fabs(u) <= 0.3 * r);
  case SHAPE_ELLIPSE: return (u / r) * (u / r) + (v / (0.45 * r)) * (v / (0.45 * r)) <= 1.0;
  case SHAPE_HALF_DISC: return d2 <= r * r && v >= 0;
  default: return 0;
  }
}

static double clamp01(double v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

#define TWO_PI 6.283185307179586

/* What one image looks like apart from its shapes: the background (a base colour, a linear
 * gradient and faint stripes) and the jitter over the whole image. */
typedef struct {
  double base[3], grad[3], stripe[3];
  double gx, gy;            /* the gradient's direction */
  double sx, sy, sfreq, sphase; /* the stripes' direction, frequency and phase */
  double noise, contrast, bright;
} scene_t;

static void draw_background(data_rng_t *rng, scene_t *sc)
{
  for (int c = 0; c < 3; c++) sc->base[c] = 0.2 + 0.6 * data_rng_uniform(rng);
  for (int c = 0; c < 3; c++) sc->grad[c] = 0.3 * (data_rng_uniform(rng) - 0.5);
  for (int c = 0; c < 3; c++) sc->stripe[c] = 0.12 * data_rng_uniform(rng);
  double gang = TWO_PI * data_rng_uniform(rng), sang = TWO_PI * data_rng_uniform(rng);
  sc->gx = cos(gang);
  sc->gy = sin(gang);
  sc->sx = cos(sang);
  sc->sy = sin(sang);
  sc->sfreq = 2.0 + 6.0 * data_rng_uniform(rng);
  sc->sphase = TWO_PI * data_rng_uniform(rng);
}

/* Shapes do not overlap (their circumscribed circles are apart): an occluded disc is just a
 * blob, and labels that no outline supports teach nothing. A shape that finds no room after a
 * few tries is left out. Returns how many were placed in sh. */
static int place_shapes(data_rng_t *rng, const synth_t *s, const scene_t *sc, shape_t *sh)
{
  const int S = s->cfg.image_size;
  int want = 1 + (int)data_rng_below(rng, SYNTH_MAX_SHAPES), nshapes = 0;
  for (int k = 0; k < want; k++) {
    shape_t *p = &sh[nshapes];
    p->cls = 1 + (int)data_rng_below(rng, (uint64_t)(s->cfg.classes - 1));
    int placed = 0;
    for (int tries = 0; tries < 10 && !placed; tries++) {
      p->r = S * (0.11 + 0.11 * data_rng_uniform(rng));
      p->cx = S * 0.1 + (S * 0.8) * data_rng_uniform(rng);
      p->cy = S * 0.1 + (S * 0.8) * data_rng_uniform(rng);
      placed = 1;
      for (int j = 0; j < nshapes; j++) {
        double dx = p->cx - sh[j].cx, dy = p->cy - sh[j].cy, gap = 1.25 * (p->r + sh[j].r) + 1.0;
        if (dx * dx + dy * dy < gap * gap) placed = 0;
      }
    }
    if (!placed) continue;
    nshapes++;
    double t = TWO_PI * data_rng_uniform(rng);
    p->cos_t = cos(t);
    p->sin_t = sin(t);
    /* A colour that stands out from the background in at least one channel. */
    for (int tries = 0; tries < 8; tries++) {
      double diff = 0;
      for (int c = 0; c < 3; c++) {
        p->col[c] = data_rng_uniform(rng);
        diff = fmax(diff, fabs(p->col[c] - sc->base[c]));
      }
      if (diff >= 0.3) break;
    }
    p->tex_amp = data_rng_uniform(rng) < 0.5 ? 0.0 : 0.15 * data_rng_uniform(rng);
    p->tex_freq = TWO_PI * (0.2 + 0.4 * data_rng_uniform(rng));
    p->tex_phase = TWO_PI * data_rng_uniform(rng);
  }
  return nshapes;
}

/* The S x S pixels and their labels, the pixel noise drawn from rng as they are written. */
static void render(data_rng_t *rng, int S, const scene_t *sc, const shape_t *sh, int nshapes,
                   uint8_t *rgb, uint8_t *mask)
{
  /* Every shape lies within 1.25 r of its centre (the triangle's circumradius; the square
   * reaches 1.2 r, the cross 1.05 r, the rest r): pixels farther away skip its test, rows
   * out of its reach skip it altogether. The margin keeps this exact under rounding. */
  double reach[SYNTH_MAX_SHAPES];
  for (int k = 0; k < nshapes; k++) reach[k] = 1.2501 * sh[k].r;
  /* The stripes, sin(w x + phase_y) along a row, by rotating (sin, cos) one pixel at a time
   * from exact values at the row's start: two multiply-adds instead of a sin per pixel (the
   * drift over a row is ~1e-14, far below the 8-bit output). */
  const double wx = TWO_PI * sc->sfreq * sc->sx / S, cw = cos(wx), sw = sin(wx);
  for (int y = 0; y < S; y++) {
    double py = y + 0.5;
    int act[SYNTH_MAX_SHAPES], nact = 0;
    for (int k = 0; k < nshapes; k++)
      if (fabs(py - sh[k].cy) <= reach[k]) act[nact++] = k;
    double a0 = TWO_PI * sc->sfreq * (0.5 * sc->sx + py * sc->sy) / S + sc->sphase;
    double ss = sin(a0), cs = cos(a0);
    for (int x = 0; x < S; x++) {
      double px = x + 0.5;
      double g = (px * sc->gx + py * sc->gy) / S - 0.5;
      double st = ss;
      double ns = ss * cw + cs * sw;
      cs = cs * cw - ss * sw;
      ss = ns;
      double col[3];
      for (int c = 0; c < 3; c++) col[c] = sc->base[c] + sc->grad[c] * g + sc->stripe[c] * st;
      int label = 0;
      for (int j = 0; j < nact; j++) {
        const shape_t *p = &sh[act[j]];
        double dx = px - p->cx, dy = py - p->cy;
        if (fabs(dx) > reach[act[j]]) continue;
        double u = dx * p->cos_t + dy * p->sin_t, v = -dx * p->sin_t + dy * p->cos_t;
        if (!inside(p->cls, u, v, p->r)) continue;
        label = p->cls;
        double tex = p->tex_amp > 0 ? p->tex_amp * sin(p->tex_freq * u + p->tex_phase) : 0.0;
        for (int c = 0; c < 3; c++) col[c] = p->col[c] + tex;
      }
      size_t o = (size_t)y * S + x;
      mask[o] = (uint8_t)label;
      for (int c = 0; c < 3; c++) {
        /* Sum of two uniforms: a cheap bell-shaped pixel noise. */
        double n = sc->noise * (data_rng_uniform(rng) + data_rng_uniform(rng) - 1.0);
        double v = (col[c] + n - 0.5) * sc->contrast + 0.5 + sc->bright;
        rgb[3 * o + c] = (uint8_t)lrint(255.0 * clamp01(v));
      }
    }
  }
}

static int synth_get(const data_set_t *ds, size_t index, uint8_t *rgb, uint8_t *mask,
                     int *width, int *height, char *err, size_t errlen)
{
  const synth_t *s = ds->impl;
  data_rng_t rng = data_rng_key(s->cfg.seed, 0x5348415045ULL /* "SHAPE" */, s->cfg.split, index);
  /* one stream, drawn in this order: the background, the shapes, the jitter, the pixels */
  scene_t sc;
  shape_t sh[SYNTH_MAX_SHAPES];
  draw_background(&rng, &sc);
  int nshapes = place_shapes(&rng, s, &sc, sh);
  sc.noise = 0.02 + 0.06 * data_rng_uniform(&rng);
  sc.contrast = 0.8 + 0.4 * data_rng_uniform(&rng);
  sc.bright = 0.2 * (data_rng_uniform(&rng) - 0.5);
  render(&rng, s->cfg.image_size, &sc, sh, nshapes, rgb, mask);
  *width = *height = s->cfg.image_size;
  (void)err;
  (void)errlen;
  return 0;
}

static void synth_destroy(data_set_t *ds)
{
  free(ds->impl);
  free(ds);
}

static const data_ops_t synth_ops = {.get = synth_get, .destroy = synth_destroy};

int data_open_synthetic(data_set_t **out, const data_synth_config_t *cfg, char *err,
                        size_t errlen)
{
  *out = NULL;
  if (cfg->classes < 2 || cfg->classes > DATA_SYNTH_MAX_CLASSES) {
    return check_fail(err, errlen,
                      "synthetic shapes: %d classes requested; there are 2 to %d "
                      "(background and up to %d shapes)",
                      cfg->classes, DATA_SYNTH_MAX_CLASSES, DATA_SYNTH_MAX_CLASSES - 1);
  }
  if (cfg->image_size < 8 || cfg->size == 0) {
    return check_fail(err, errlen,
                      "synthetic shapes: need at least one sample of at least 8x8 pixels "
                      "(asked for %zu of %dx%d)",
                      cfg->size, cfg->image_size, cfg->image_size);
  }
  data_set_t *ds = calloc(1, sizeof *ds);
  synth_t *s = calloc(1, sizeof *s);
  if (!ds || !s) {
    free(ds);
    free(s);
    return check_fail(err, errlen, "out of memory opening the synthetic dataset");
  }
  s->cfg = *cfg;
  ds->ops = &synth_ops;
  ds->impl = s;
  ds->size = cfg->size;
  ds->classes = cfg->classes;
  ds->max_width = ds->max_height = ds->min_width = ds->min_height = cfg->image_size;
  snprintf(ds->name, sizeof ds->name, "synthetic %s", cfg->split == DATA_SPLIT_VAL ? "val" : "train");
  *out = ds;
  return 0;
}

const char *data_synth_class_name(int cls)
{
  return cls >= 0 && cls < DATA_SYNTH_MAX_CLASSES ? shape_names[cls] : "?";
}
