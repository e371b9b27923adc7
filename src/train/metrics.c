/* metrics.c — confusion matrix accumulation and the ratios taken from it. */
#include "config.h"

#include "src/train/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int metrics_init(metrics_t *m, int classes)
{
  m->classes = classes;
  m->counts = calloc((size_t)classes * classes, sizeof *m->counts);
  return m->counts ? 0 : -1;
}

void metrics_free(metrics_t *m)
{
  free(m->counts);
  m->counts = NULL;
}

void metrics_reset(metrics_t *m)
{
  memset(m->counts, 0, metrics_count_len(m) * sizeof *m->counts);
}

size_t metrics_count_len(const metrics_t *m) { return (size_t)m->classes * m->classes; }

void metrics_add(metrics_t *m, const int32_t *label, const int32_t *pred, size_t n)
{
  const int k = m->classes;
  for (size_t i = 0; i < n; i++) {
    int t = label[i], p = pred[i];
    if (t < 0 || t >= k || p < 0 || p >= k) continue;
    m->counts[(size_t)t * k + p] += 1;
  }
}

void metrics_merge(metrics_t *dst, const metrics_t *src)
{
  for (size_t i = 0; i < metrics_count_len(dst); i++) dst->counts[i] += src->counts[i];
}

double metrics_pixels(const metrics_t *m)
{
  double s = 0;
  for (size_t i = 0; i < metrics_count_len(m); i++) s += m->counts[i];
  return s;
}

double metrics_pixel_accuracy(const metrics_t *m)
{
  double total = metrics_pixels(m), diag = 0;
  for (int c = 0; c < m->classes; c++) diag += m->counts[(size_t)c * m->classes + c];
  return total > 0 ? diag / total : 0.0;
}

double metrics_iou(const metrics_t *m, int c)
{
  const int k = m->classes;
  double tp = m->counts[(size_t)c * k + c], row = 0, col = 0;
  for (int j = 0; j < k; j++) {
    row += m->counts[(size_t)c * k + j];
    col += m->counts[(size_t)j * k + c];
  }
  double uni = row + col - tp;
  return row > 0 ? tp / uni : NAN;
}

int metrics_present(const metrics_t *m, int c)
{
  for (int j = 0; j < m->classes; j++)
    if (m->counts[(size_t)c * m->classes + j] > 0) return 1;
  return 0;
}

int metrics_present_count(const metrics_t *m)
{
  int n = 0;
  for (int c = 0; c < m->classes; c++) n += metrics_present(m, c);
  return n;
}

double metrics_miou(const metrics_t *m)
{
  double sum = 0;
  int n = 0;
  for (int c = 0; c < m->classes; c++) {
    if (!metrics_present(m, c)) continue;
    sum += metrics_iou(m, c);
    n++;
  }
  return n ? sum / n : 0.0;
}
