/* compare_svg.c — tools/compare's charts as plain SVG: horizontal stacked bars, one section per
 * case with its own scale (the imbalance case is several times the reference one), a legend,
 * the value at the end of every bar. No library: a few rect and text elements. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "src/obs/outfile.h"
#include "tools/compare.h"

#define W 1040
#define LABEL_W 190
#define BAR_W 560
#define ROW_H 22
#define MAX_SEG 8

typedef struct {
  char label[64];
  double seg[MAX_SEG];
  char note[96];
} row_t;

typedef struct {
  const char *title, *unit;
  int nseg;
  const char *seg_names[MAX_SEG];
  const char *seg_colors[MAX_SEG];
} chart_t;

static const char *mode_color(const char *mode)
{
  return !strcmp(mode, "dp") ? "#d62728" : !strcmp(mode, "ddp") ? "#1f77b4" : "#2ca02c";
}

static void esc(FILE *f, const char *s)
{
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else fputc(*s, f);
  }
}

/* A round step for the axis: 1, 2 or 5 times a power of ten, about 5 ticks over max. */
static double tick_step(double max)
{
  double raw = max / 5, p = pow(10, floor(log10(raw > 0 ? raw : 1))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void legend(FILE *f, const chart_t *c, int y)
{
  int x = LABEL_W;
  for (int k = 0; k < c->nseg; k++) {
    if (!c->seg_names[k]) continue;
    fprintf(f, "<rect x='%d' y='%d' width='12' height='12' fill='%s'/>", x, y - 10,
            c->seg_colors[k]);
    fprintf(f, "<text x='%d' y='%d'>", x + 16, y);
    esc(f, c->seg_names[k]);
    fputs("</text>\n", f);
    x += 26 + 7 * (int)strlen(c->seg_names[k]);
  }
}

/* One case: its name, an axis, and the rows. Returns the y below it. */
static int section(FILE *f, const chart_t *c, const char *name, const row_t *rows, int n,
                   const char *const *colors_per_row, int y)
{
  double max = 0;
  for (int i = 0; i < n; i++) {
    double t = 0;
    for (int k = 0; k < c->nseg; k++) t += rows[i].seg[k];
    if (t > max) max = t;
  }
  if (max <= 0) max = 1;
  double step = tick_step(max), top = ceil(max / step) * step;
  fprintf(f, "<text x='10' y='%d' font-weight='bold'>", y + 14);
  esc(f, name);
  fputs("</text>\n", f);
  y += 24;
  int h = n * ROW_H + 6;
  for (double t = 0; t <= top + step / 2; t += step) {
    int x = LABEL_W + (int)(BAR_W * t / top);
    fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='#ddd'/>", x, y, x, y + h);
    fprintf(f, "<text x='%d' y='%d' text-anchor='middle' fill='#666' font-size='10'>%g</text>\n",
            x, y + h + 12, t);
  }
  fprintf(f, "<text x='%d' y='%d' fill='#666' font-size='10'>%s</text>\n", LABEL_W + BAR_W + 30,
          y + h + 12, c->unit);
  for (int i = 0; i < n; i++) {
    int ry = y + 3 + i * ROW_H;
    fprintf(f, "<text x='%d' y='%d' text-anchor='end'>", LABEL_W - 8, ry + 14);
    esc(f, rows[i].label);
    fputs("</text>", f);
    double x = LABEL_W;
    for (int k = 0; k < c->nseg; k++) {
      double w = BAR_W * rows[i].seg[k] / top;
      if (w <= 0) continue;
      fprintf(f, "<rect x='%.1f' y='%d' width='%.1f' height='%d' fill='%s'/>", x, ry, w,
              ROW_H - 5, colors_per_row ? colors_per_row[i] : c->seg_colors[k]);
      x += w;
    }
    fprintf(f, "<text x='%.1f' y='%d' font-size='11'>", x + 5, ry + 13);
    esc(f, rows[i].note);
    fputs("</text>\n", f);
  }
  return y + h + 22;
}

typedef int (*fill_fn)(const cmp_run_t *r, row_t *rows, int max);

static int chart(const char *dir, const char *file, const chart_t *c, const cmp_run_t *runs,
                 int nruns, fill_fn fill, int per_mode_color, const char *subtitle,
                 const char *footnote)
{
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  /* The height: count the rows first. */
  row_t rows[64];
  int total = 0, ncases = 0;
  for (int i = 0; i < nruns; i++) {
    if (i == 0 || strcmp(runs[i].case_name, runs[i - 1].case_name)) ncases++;
    if (runs[i].ok) total += fill(&runs[i], rows, 64);
  }
  int height = 70 + (c->nseg > 1 ? 22 : 0) + ncases * 52 + total * ROW_H + 40;
  char tmp[4200];
  FILE *f = outfile_fopen_temp(path, tmp, sizeof tmp); /* a fresh private file, renamed */
  if (!f) return -1;
  fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' "
          "font-family='DejaVu Sans, Helvetica, Arial, sans-serif' font-size='12'>\n"
          "<rect width='100%%' height='100%%' fill='white'/>\n", W, height);
  fprintf(f, "<text x='10' y='22' font-size='16' font-weight='bold'>");
  esc(f, c->title);
  fprintf(f, "</text>\n<text x='10' y='40' fill='#444'>");
  esc(f, subtitle);
  fputs("</text>\n", f);
  int y = 52;
  if (c->nseg > 1) {
    legend(f, c, y + 10);
    y += 22;
  }
  for (int i = 0; i < nruns;) {
    int j = i, n = 0;
    const char *colors[64];
    while (j < nruns && !strcmp(runs[j].case_name, runs[i].case_name)) {
      if (runs[j].ok) {
        int got = fill(&runs[j], rows + n, 64 - n);
        for (int k = 0; k < got; k++) colors[n + k] = mode_color(runs[j].mode);
        n += got;
      }
      j++;
    }
    y = section(f, c, runs[i].case_name, rows, n, per_mode_color ? colors : NULL, y);
    i = j;
  }
  fprintf(f, "<text x='10' y='%d' fill='#666' font-size='10'>", height - 12);
  esc(f, footnote);
  fputs("</text>\n</svg>\n", f);
  return outfile_commit(f, tmp, path, 1);
}

/* ---- the three charts ---- */

static int fill_ips(const cmp_run_t *r, row_t *rows, int max)
{
  if (max < 1) return 0;
  memset(rows, 0, sizeof *rows);
  snprintf(rows->label, sizeof rows->label, "%s (%d devices)", r->mode, r->world);
  rows->seg[0] = r->images_per_s;
  if (r->ddp_ips > 0)
    snprintf(rows->note, sizeof rows->note, "%.0f img/s  (%.2fx DDP)", r->images_per_s,
             r->images_per_s / r->ddp_ips);
  else
    snprintf(rows->note, sizeof rows->note, "%.0f img/s", r->images_per_s);
  return 1;
}

/* A cleared row for device d of run r, labelled "dp device D" or "ddp rank D". */
static row_t *device_row(row_t *w, const cmp_run_t *r, int d)
{
  memset(w, 0, sizeof *w);
  snprintf(w->label, sizeof w->label, "%s %s %d", r->mode, strcmp(r->mode, "dp") ? "rank" : "device",
           d);
  return w;
}

static int fill_split(const cmp_run_t *r, row_t *rows, int max)
{
  int n = 0;
  for (int d = 0; d < r->split_devs && n < max; d++, n++) {
    row_t *w = device_row(&rows[n], r, d);
    w->seg[0] = r->compute_ms[d];
    w->seg[1] = r->comm_ms[d];
    w->seg[2] = r->idle_ms[d];
    snprintf(w->note, sizeof w->note, "%.2f ms  (comm %.2f, idle %.2f)",
             r->compute_ms[d] + r->comm_ms[d] + r->idle_ms[d], r->comm_ms[d], r->idle_ms[d]);
  }
  return n;
}

static double mem_div = 1024.0; /* MiB per chart unit: GiB, or MiB for small runs */

static int fill_mem(const cmp_run_t *r, row_t *rows, int max)
{
  const char *u = mem_div > 1 ? "GiB" : "MiB";
  int n = 0;
  for (int d = 0; d < r->world && n < max; d++, n++) {
    row_t *w = device_row(&rows[n], r, d);
    double extra = 0;
    for (int k = 0; k < CMP_NCAT; k++) {
      w->seg[k] = r->mem_mib[d][k] / mem_div;
      if (k == 2 || k == 6) extra += r->mem_mib[d][k] / mem_div; /* optimizer, dp_gather */
    }
    if (!strcmp(r->mode, "dp") && extra > 0)
      snprintf(w->note, sizeof w->note, "%.2f %s  (optimizer + DP gather %.2f)",
               r->peak_mib[d] / mem_div, u, extra);
    else
      snprintf(w->note, sizeof w->note, "%.2f %s%s", r->peak_mib[d] / mem_div, u,
               r->mem_from_rank0[d] && d > 0 ? "  (split as rank 0)" : "");
  }
  return n;
}

int cmp_write_charts(const char *dir, const cmp_run_t *runs, int nruns, const char *title)
{
  char t1[256], t2[256], t3[256];
  snprintf(t1, sizeof t1, "%s: training throughput", title);
  chart_t ips = {t1, "img/s", 1, {NULL}, {"#888"}};
  if (chart(dir, "throughput.svg", &ips, runs, nruns, fill_ips, 1,
            "images per second over the timed steps (after warm-up), whole machine",
            "bars: dp red, ddp blue, ddp-syncbn green; ratio against DDP without SyncBN of the "
            "same case") != 0)
    return -1;
  snprintf(t2, sizeof t2, "%s: where a step's time goes", title);
  chart_t split = {t2, "ms", 3, {"compute", "communication", "idle / waiting"},
                   {"#4c78a8", "#f58518", "#c7c7c7"}};
  if (chart(dir, "step_time.svg", &split, runs, nruns, fill_split, 0,
            "mean per step; DP: every device (CUDA events); DDP: rank 0 (comm = exposed "
            "all-reduce + SyncBN, idle = data wait)",
            "DP compute: forward + backward (device 0: + loss + optimizer); DP comm: replicate, "
            "scatter, gather, gradient reduce") != 0)
    return -1;
  snprintf(t3, sizeof t3, "%s: peak memory per device by ledger category", title);
  double most = 0;
  for (int i = 0; i < nruns; i++)
    for (int d = 0; d < runs[i].world; d++)
      if (runs[i].peak_mib[d] > most) most = runs[i].peak_mib[d];
  mem_div = most < 2048 ? 1.0 : 1024.0;
  chart_t mem = {t3, mem_div > 1 ? "GiB" : "MiB", CMP_NCAT,
                 {"parameters", "gradients", "optimizer", "activations", "workspace",
                  "communication", "DP gather", "other"},
                 {"#4c78a8", "#72b7b2", "#e45756", "#54a24b", "#b8b8b8", "#f58518", "#b279a2",
                  "#9d755d"}};
  return chart(dir, "memory.svg", &mem, runs, nruns, fill_mem, 0,
               "the memory ledger of every device (peak per category); what device 0 holds "
               "beyond the others is DataParallel's cost",
               "DP gather: whole input batch + labels, gathered logits and their gradients, "
               "gradient staging (device 0 only)");
}
