/* step_account.c — the FLOP and byte arithmetic of a training step's operations, the account's
 * rows and totals, and its markdown and JSON forms (step_account.h says what is counted). */
#include "config.h"

#include "dev/step_account.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/obs/json_out.h"

static const char *const pass_names[ACCT_NPASS] = {
    [ACCT_CAST_INPUT] = "cast input",         [ACCT_CONV_FWD] = "conv fwd",
    [ACCT_BN_STATS] = "bn stats",             [ACCT_BN_APPLY] = "bn apply+relu",
    [ACCT_MAXPOOL] = "maxpool",               [ACCT_BN_RECOMPUTE] = "bn recompute",
    [ACCT_CONCAT] = "concat",                 [ACCT_LOSS] = "loss",
    [ACCT_CONV_BWD_FILTER] = "conv bwd filter", [ACCT_CAST_GRADS] = "cast grads",
    [ACCT_CONV_BWD_DATA] = "conv bwd data",   [ACCT_BN_BWD_REDUCE] = "bn bwd reduce",
    [ACCT_BN_BWD_APPLY] = "bn bwd apply",     [ACCT_OPTIMIZER] = "optimizer"};

const char *acct_pass_name(acct_pass_t p)
{
  return (unsigned)p < ACCT_NPASS ? pass_names[p] : "?";
}

int acct_pass_of(const char *name)
{
  for (int p = 0; p < ACCT_NPASS; p++)
    if (!strcmp(pass_names[p], name)) return p;
  return -1;
}

/* ---- costs from shapes ---- */

acct_cost_t acct_conv(const ops_conv_t *c, acct_pass_t pass, int n, size_t elem, size_t gelem)
{
  const int taps = c->kind == OPS_CONV3X3 ? 9 : c->kind == OPS_CONV1X1 ? 1 : 4;
  const int up = c->kind == OPS_CONVT2X2 ? 2 : 1;
  const double in = (double)n * c->h * c->w * c->cin;
  const double out = (double)n * (up * c->h) * (up * c->w) * c->cout;
  const double weights = (double)taps * c->cin * c->cout;
  const double bias = c->kind == OPS_CONV3X3 ? 0 : c->cout;
  acct_cost_t r = {2.0 * n * c->h * c->w * (double)c->cin * c->cout * taps, 0};
  switch (pass) {
  case ACCT_CONV_FWD: r.bytes = (in + weights + bias + out) * elem; break;
  case ACCT_CONV_BWD_DATA: r.bytes = (out + weights + in) * elem; break;
  case ACCT_CONV_BWD_FILTER: r.bytes = (in + out) * elem + (weights + bias) * gelem; break;
  default: r.flops = 0; break;
  }
  return r;
}

acct_cost_t acct_conv_fused(const ops_conv_t *c, acct_pass_t pass, int n, size_t elem,
                            size_t gelem)
{
  acct_cost_t r = acct_conv(c, pass, n, elem, gelem);
  const double coef = 2.0 * c->cin * sizeof(float), f64 = sizeof(double);
  switch (pass) {
  case ACCT_CONV_FWD: r.bytes += coef + (2.0 * c->cout + 1) * f64; break;
  case ACCT_CONV_BWD_DATA:
    r.bytes += (double)n * c->h * c->w * c->cin * elem + coef + (2.0 * c->cin + 1) * f64 +
               2.0 * c->cin * f64;
    break;
  case ACCT_CONV_BWD_FILTER: r.bytes += coef; break;
  default: break;
  }
  return r;
}

acct_cost_t acct_bn_finalize(int C)
{
  return (acct_cost_t){0, 2 * (2.0 * C + 1) * sizeof(double) + 2 * 2.0 * C * sizeof(float)};
}

acct_cost_t acct_bn_coef(int C, size_t elem)
{
  return (acct_cost_t){0, 2.0 * C * (sizeof(double) + elem + sizeof(float))};
}

acct_cost_t acct_bn_params(int C, size_t gelem)
{
  return (acct_cost_t){0, 2.0 * C * (sizeof(double) + gelem)};
}

acct_cost_t acct_bn(acct_pass_t pass, size_t P, int C, size_t elem)
{
  const double t = (double)P * C * elem; /* one pass over the tensor */
  int passes = pass == ACCT_BN_STATS                                   ? 1
               : pass == ACCT_BN_APPLY || pass == ACCT_BN_RECOMPUTE    ? 2
               : pass == ACCT_BN_BWD_REDUCE                            ? 2
               : pass == ACCT_BN_BWD_APPLY                             ? 3
                                                                       : 0;
  return (acct_cost_t){0, passes * t};
}

acct_cost_t acct_bn_head(acct_pass_t pass, size_t P, int C, int K, size_t elem)
{
  if (pass != ACCT_BN_BWD_REDUCE && pass != ACCT_BN_BWD_APPLY) return (acct_cost_t){0, 0};
  const double t = (double)P * C * elem, g = (double)P * K * elem;
  /* reduce: x and g; apply: x and g, dx written */
  return (acct_cost_t){2.0 * P * C * K, (pass == ACCT_BN_BWD_APPLY ? 2 : 1) * t + g};
}

acct_cost_t acct_maxpool_fwd(int n, int h, int w, int C, size_t elem)
{
  const double full = (double)n * h * w * C, pooled = full / 4;
  return (acct_cost_t){0, full * elem + pooled * elem + pooled};
}

acct_cost_t acct_maxpool_bwd(int n, int h, int w, int C, size_t elem, int acc)
{
  const double full = (double)n * h * w * C, pooled = full / 4;
  return (acct_cost_t){0, pooled * elem + pooled + (acc ? 2 : 1) * full * elem};
}

acct_cost_t acct_concat_fwd(size_t P, int ca, int cb, int with_a, size_t elem)
{
  return (acct_cost_t){0, 2.0 * P * ((with_a ? ca : 0) + cb) * elem};
}

acct_cost_t acct_concat_bwd(size_t P, int ca, int cb, int acc_a, size_t elem)
{
  return (acct_cost_t){0, (double)P * (2 * (ca + cb) + (acc_a ? ca : 0)) * elem};
}

acct_cost_t acct_loss(size_t P, int K, size_t elem)
{
  return (acct_cost_t){0, (double)P * (2.0 * K * elem + 4)};
}

acct_cost_t acct_cast(size_t count, size_t elem)
{
  return (acct_cost_t){0, (double)count * (4 + elem)};
}

acct_cost_t acct_sgd(size_t count, size_t gelem, size_t welem)
{
  return (acct_cost_t){0, (double)count * (16 + gelem + welem)};
}

/* ---- rows and totals ---- */

const char *acct_engine_name(acct_engine_t e) { return e == ACCT_FUSED ? "fused" : "library"; }

int acct_add(acct_t *a, const char *layer, acct_pass_t pass, acct_cost_t c)
{
  return acct_add_on(a, layer, pass, ACCT_LIBRARY, c);
}

int acct_add_on(acct_t *a, const char *layer, acct_pass_t pass, acct_engine_t e, acct_cost_t c)
{
  for (int i = 0; i < a->n; i++) {
    acct_row_t *r = &a->rows[i];
    if (r->pass == pass && !strcmp(r->layer, layer)) {
      if (e == ACCT_FUSED) r->engine = ACCT_FUSED;
      r->ops++;
      r->flops += c.flops;
      r->bytes += c.bytes;
      return 0;
    }
  }
  if (a->n == a->cap) {
    int cap = a->cap ? 2 * a->cap : 64;
    acct_row_t *rows = realloc(a->rows, (size_t)cap * sizeof *rows);
    if (!rows) return -1;
    a->rows = rows;
    a->cap = cap;
  }
  acct_row_t *r = &a->rows[a->n++];
  memset(r, 0, sizeof *r);
  snprintf(r->layer, sizeof r->layer, "%s", layer);
  r->pass = pass;
  r->engine = e;
  r->ops = 1;
  r->flops = c.flops;
  r->bytes = c.bytes;
  r->ms = -1;
  return 0;
}

static int is_conv_pass(acct_pass_t p)
{
  return p == ACCT_CONV_FWD || p == ACCT_CONV_BWD_FILTER || p == ACCT_CONV_BWD_DATA;
}

int acct_fused_layers(const acct_t *a)
{
  int n = 0;
  for (int i = 0; i < a->n; i++) {
    const acct_row_t *r = &a->rows[i];
    if (r->engine != ACCT_FUSED || !is_conv_pass(r->pass)) continue;
    int seen = 0; /* counted at its first fused convolution row */
    for (int j = 0; j < i && !seen; j++)
      seen = a->rows[j].engine == ACCT_FUSED && is_conv_pass(a->rows[j].pass) &&
             !strcmp(a->rows[j].layer, r->layer);
    n += !seen;
  }
  return n;
}

void acct_free(acct_t *a)
{
  free(a->rows);
  memset(a, 0, sizeof *a);
}

double acct_roofline_ms(acct_cost_t c, const acct_ceiling_t *k)
{
  double t = 0;
  if (c.flops > 0 && k->flops > 0) t = c.flops / k->flops;
  if (c.bytes > 0 && k->bw > 0 && c.bytes / k->bw > t) t = c.bytes / k->bw;
  return 1e3 * t;
}

/* Totals with the roofline drawn against k (NULL: roof_ms 0). */
static acct_total_t total_at(const acct_t *a, acct_pass_t pass, const acct_ceiling_t *k)
{
  acct_total_t t = {0};
  for (int i = 0; i < a->n; i++) {
    const acct_row_t *r = &a->rows[i];
    if (pass != ACCT_NPASS && r->pass != pass) continue;
    t.rows++;
    t.ops += r->ops;
    t.flops += r->flops;
    t.bytes += r->bytes;
    if (r->ms > 0) t.ms += r->ms;
    if (k) t.roof_ms += acct_roofline_ms((acct_cost_t){r->flops, r->bytes}, k);
  }
  return t;
}

acct_total_t acct_total(const acct_t *a, acct_pass_t pass) { return total_at(a, pass, NULL); }

double acct_mfu(const acct_t *a, const acct_report_t *r)
{
  if (!(r->step_ms > 0) || !(r->ceiling.flops > 0)) return 0;
  return total_at(a, ACCT_NPASS, NULL).flops / (r->step_ms * 1e-3) / r->ceiling.flops;
}

/* ---- markdown ---- */

/* A pass's cost in the step: its own ablation where measured, else the sum of its rows. */
static double pass_cost(const acct_report_t *r, int p, const acct_total_t *t)
{
  return r->pass_ms[p] >= 0 ? r->pass_ms[p] : t->ms;
}

static double rate(double amount, double ms, double unit)
{
  return ms > 0 ? amount / (ms * 1e-3) / unit : 0;
}

static void md_totals(FILE *f, const acct_t *a, const acct_report_t *r)
{
  acct_total_t all = total_at(a, ACCT_NPASS, &r->ceiling);
  double passes = 0;
  for (int p = 0; p < ACCT_NPASS; p++) {
    acct_total_t t = total_at(a, (acct_pass_t)p, NULL);
    if (t.rows) passes += pass_cost(r, p, &t);
  }
  double conv_ms = 1e3 * all.flops / r->ceiling.flops;
  fprintf(f, "## Totals\n\n| quantity | value |\n|---|---|\n");
  fprintf(f, "| step, CUDA graph replayed | %.3f ms = %.1f img/s |\n", r->step_ms,
          r->images * 1e3 / r->step_ms);
  fprintf(f, "| FLOPs per step (convolutions) | %.1f GFLOP (%.1f GFLOP per image) |\n",
          all.flops / 1e9, all.flops / 1e9 / r->images);
  fprintf(f, "| HBM bytes per step (each tensor once) | %.2f GB |\n", all.bytes / 1e9);
  fprintf(f, "| achieved: FLOP rate / byte rate over the step | %.1f TFLOP/s / %.0f GB/s |\n",
          rate(all.flops, r->step_ms, 1e12), rate(all.bytes, r->step_ms, 1e9));
  fprintf(f, "| **MFU** (step FLOPs / step time / matrix ceiling) | **%.1f %%** |\n",
          100 * acct_mfu(a, r));
  fprintf(f, "| the FLOPs alone at the matrix ceiling | %.3f ms |\n", conv_ms);
  fprintf(f, "| roofline step (every op at its ceiling, one after another) | %.3f ms = %.1f "
          "img/s |\n", all.roof_ms, all.roof_ms > 0 ? r->images * 1e3 / all.roof_ms : 0);
  fprintf(f, "| sum of the passes' costs in the step (each left out alone) | %.3f ms (%.1f %% "
          "of the step; the rest: launch gaps, and overlap counted twice) |\n\n", passes,
          100 * passes / r->step_ms);
}

static void md_passes(FILE *f, const acct_t *a, const acct_report_t *r)
{
  fprintf(f, "## Per pass\n\nms in step: the step replayed without the pass's operations, "
          "the difference. roofline: each operation at max(FLOPs / matrix ceiling, bytes / copy "
          "ceiling). of ceiling: roofline / measured. above: measured - roofline.\n\n");
  fprintf(f, "| pass | ops | GFLOP | MB | ms in step | %% of step | TFLOP/s | GB/s | roofline "
          "ms | of ceiling | above ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int p = 0; p < ACCT_NPASS; p++) {
    acct_total_t t = total_at(a, (acct_pass_t)p, &r->ceiling);
    if (!t.rows) continue;
    double ms = pass_cost(r, p, &t);
    fprintf(f, "| %s | %d | %.1f | %.0f | %.3f | %.1f | %.1f | %.0f | %.3f | %.0f %% | %.3f |\n",
            acct_pass_name((acct_pass_t)p), t.ops, t.flops / 1e9, t.bytes / 1e6, ms,
            100 * ms / r->step_ms, rate(t.flops, ms, 1e12), rate(t.bytes, ms, 1e9), t.roof_ms,
            ms > 0 ? 100 * t.roof_ms / ms : 0, ms - t.roof_ms);
  }
  fputc('\n', f);
}

typedef struct {
  const acct_row_t *row;
  double above;
} above_t;

/* The passes in three groups: convolutions, the BatchNorm passes, the other element passes. */
static int group_of(int p)
{
  if (is_conv_pass((acct_pass_t)p)) return 0;
  if (p == ACCT_BN_STATS || p == ACCT_BN_APPLY || p == ACCT_BN_RECOMPUTE ||
      p == ACCT_BN_BWD_REDUCE || p == ACCT_BN_BWD_APPLY)
    return 1;
  return 2;
}

static void md_groups(FILE *f, const acct_t *a, const acct_report_t *r)
{
  static const char *const names[3] = {"convolutions", "BatchNorm passes",
                                       "other element passes, optimizer"};
  double ms[3] = {0}, roof[3] = {0}, sum = 0;
  for (int p = 0; p < ACCT_NPASS; p++) {
    acct_total_t t = total_at(a, (acct_pass_t)p, &r->ceiling);
    if (!t.rows) continue;
    double c = pass_cost(r, p, &t);
    ms[group_of(p)] += c;
    roof[group_of(p)] += t.roof_ms;
    sum += c;
  }
  fprintf(f, "## Where the time goes\n\n| part | ms in step | %% of step | roofline ms | above "
          "ms |\n|---|---:|---:|---:|---:|\n");
  for (int g = 0; g < 3; g++)
    fprintf(f, "| %s | %.3f | %.1f | %.3f | %.3f |\n", names[g], ms[g], 100 * ms[g] / r->step_ms,
            roof[g], ms[g] - roof[g]);
  fprintf(f, "| in no pass alone (launch gaps; negative: overlap counted twice) | %.3f | %.1f | "
          "0 | %.3f |\n\n", r->step_ms - sum, 100 * (r->step_ms - sum) / r->step_ms,
          r->step_ms - sum);
}

static int cmp_above(const void *x, const void *y)
{
  double a = ((const above_t *)x)->above, b = ((const above_t *)y)->above;
  return a < b ? 1 : a > b ? -1 : 0;
}

static void md_where(FILE *f, const acct_t *a, const acct_report_t *r, int top)
{
  above_t *v = malloc((size_t)(a->n ? a->n : 1) * sizeof *v);
  if (!v) return;
  int n = 0;
  for (int i = 0; i < a->n; i++) {
    const acct_row_t *row = &a->rows[i];
    if (row->ms < 0) continue;
    v[n].row = row;
    v[n++].above = row->ms - acct_roofline_ms((acct_cost_t){row->flops, row->bytes}, &r->ceiling);
  }
  qsort(v, (size_t)n, sizeof *v, cmp_above);
  fprintf(f, "## The largest gaps to the roofline, by layer and pass\n\n| layer | pass | engine "
          "| ms in step | roofline ms | above ms | bound by |\n|---|---|---|---:|---:|---:|---|\n");
  for (int i = 0; i < n && i < top; i++) {
    const acct_row_t *row = v[i].row;
    double tf = row->flops / r->ceiling.flops, tb = row->bytes / r->ceiling.bw;
    fprintf(f, "| %s | %s | %s | %.3f | %.3f | %.3f | %s |\n", row->layer,
            acct_pass_name(row->pass), acct_engine_name(row->engine), row->ms,
            1e3 * (tf > tb ? tf : tb), v[i].above, tf > tb ? "FLOPs" : "bytes");
  }
  fputc('\n', f);
  free(v);
}

static void md_rows(FILE *f, const acct_t *a, const acct_report_t *r)
{
  fprintf(f, "## Per layer and pass\n\nms in step: the step replayed without this layer's "
          "operations of this pass, the difference (a few microseconds are noise).\n\n"
          "| layer | pass | engine | ops | GFLOP | MB | ms in step | TFLOP/s | GB/s | of ceiling "
          "|\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < a->n; i++) {
    const acct_row_t *row = &a->rows[i];
    double roof = acct_roofline_ms((acct_cost_t){row->flops, row->bytes}, &r->ceiling);
    const char *pass = acct_pass_name(row->pass), *engine = acct_engine_name(row->engine);
    if (row->ms < 0)
      fprintf(f, "| %s | %s | %s | %d | %.2f | %.1f | - | - | - | - |\n", row->layer, pass,
              engine, row->ops, row->flops / 1e9, row->bytes / 1e6);
    else
      fprintf(f, "| %s | %s | %s | %d | %.2f | %.1f | %.3f | %.1f | %.0f | %.0f %% |\n",
              row->layer, pass, engine, row->ops, row->flops / 1e9, row->bytes / 1e6, row->ms,
              rate(row->flops, row->ms, 1e12), rate(row->bytes, row->ms, 1e9),
              row->ms > 0 ? 100 * roof / row->ms : 0);
  }
  fputc('\n', f);
}

int acct_write_markdown(FILE *f, const acct_t *a, const acct_report_t *r)
{
  fprintf(f, "# The account of a training step\n\n%s on %s. Ceilings measured in this run: "
          "matrix product %.1f TFLOP/s, device-to-device copy %.0f GB/s (read + written).\n\n",
          r->config ? r->config : "", r->device ? r->device : "?", r->ceiling.flops / 1e12,
          r->ceiling.bw / 1e9);
  if (r->engine) {
    int fused = acct_fused_layers(a);
    fprintf(f, "Convolution engine: SHMDDP_CONV_ENGINE=%s, %d layer%s fused.\n\n", r->engine,
            fused, fused == 1 ? "" : "s");
  }
  md_totals(f, a, r);
  md_groups(f, a, r);
  md_passes(f, a, r);
  md_where(f, a, r, 15);
  md_rows(f, a, r);
  return ferror(f) ? -1 : 0;
}

/* ---- JSON ---- */

/* A number JSON can hold (non-finite values become null). */
static void json_num(FILE *f, double v)
{
  if (isfinite(v)) fprintf(f, "%.6g", v);
  else fputs("null", f);
}

int acct_write_json(FILE *f, const acct_t *a, const acct_report_t *r)
{
  acct_total_t all = total_at(a, ACCT_NPASS, &r->ceiling);
  fputs("{\"device\": ", f);
  json_string(f, r->device);
  fputs(", \"config\": ", f);
  json_string(f, r->config);
  fputs(", \"step_ms\": ", f);
  json_num(f, r->step_ms);
  fprintf(f, ", \"images\": %d, \"ceiling_tflops\": ", r->images);
  json_num(f, r->ceiling.flops / 1e12);
  fputs(", \"ceiling_gbs\": ", f);
  json_num(f, r->ceiling.bw / 1e9);
  fputs(", \"gflop\": ", f);
  json_num(f, all.flops / 1e9);
  fputs(", \"gbytes\": ", f);
  json_num(f, all.bytes / 1e9);
  fputs(", \"roofline_ms\": ", f);
  json_num(f, all.roof_ms);
  fputs(", \"mfu\": ", f);
  json_num(f, acct_mfu(a, r));
  fputs(", \"engine\": ", f);
  if (r->engine) json_string(f, r->engine);
  else fputs("null", f);
  fprintf(f, ", \"fused_layers\": %d", acct_fused_layers(a));
  fputs(",\n \"passes\": [", f);
  int first = 1;
  for (int p = 0; p < ACCT_NPASS; p++) {
    acct_total_t t = total_at(a, (acct_pass_t)p, &r->ceiling);
    if (!t.rows) continue;
    fputs(first ? "\n  {\"pass\": " : ",\n  {\"pass\": ", f);
    first = 0;
    json_string(f, acct_pass_name((acct_pass_t)p));
    fprintf(f, ", \"ops\": %d, \"gflop\": ", t.ops);
    json_num(f, t.flops / 1e9);
    fputs(", \"mb\": ", f);
    json_num(f, t.bytes / 1e6);
    fputs(", \"ms\": ", f);
    json_num(f, pass_cost(r, p, &t));
    fputs(", \"roofline_ms\": ", f);
    json_num(f, t.roof_ms);
    fputc('}', f);
  }
  fputs("],\n \"rows\": [", f);
  for (int i = 0; i < a->n; i++) {
    const acct_row_t *row = &a->rows[i];
    fputs(i ? ",\n  {\"layer\": " : "\n  {\"layer\": ", f);
    json_string(f, row->layer);
    fputs(", \"pass\": ", f);
    json_string(f, acct_pass_name(row->pass));
    fputs(", \"engine\": ", f);
    json_string(f, acct_engine_name(row->engine));
    fprintf(f, ", \"ops\": %d, \"gflop\": ", row->ops);
    json_num(f, row->flops / 1e9);
    fputs(", \"mb\": ", f);
    json_num(f, row->bytes / 1e6);
    fputs(", \"ms\": ", f);
    if (row->ms >= 0) json_num(f, row->ms);
    else fputs("null", f);
    fputs(", \"roofline_ms\": ", f);
    json_num(f, acct_roofline_ms((acct_cost_t){row->flops, row->bytes}, &r->ceiling));
    fputc('}', f);
  }
  fputs("]}\n", f);
  return ferror(f) ? -1 : 0;
}
