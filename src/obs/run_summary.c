/* run_summary.c — per-rank numbers in the step log and the end-of-run table. Riding on the
 * step's agreement all-reduce costs a few hundred bytes more in a call that already happens,
 * instead of a second collective (and a second wait) per step. Each rank writes only its own
 * slots and zeros elsewhere, so the f64 sum is an exact gather. */
#include "config.h"

#include "src/clock.h"
#include "src/obs/run_summary.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shmddp.h"
#include "src/check.h"
#include "src/obs/shquote.h"
#include "src/device/device.h"
#include "src/obs/json_out.h"
#include "src/obs/nvml_dl.h"


enum {
  SLOT_CURRENT = 0,
  SLOT_PEAK = ARENA_NUM_CATEGORIES,
  SLOT_TOTAL = 2 * ARENA_NUM_CATEGORIES,
  SLOT_TOTAL_PEAK,
  SLOT_UTIL,
  SLOT_USED
};

#define RS_MAX_RANKS SHMDDP_MAX_RANKS
/* The data wait, in % of the step, from which the summary says the host held the step back. */
#define RS_DATA_WAIT_HINT_PCT 5.0
#define RS_JSON_BYTES (RS_MAX_RANKS * 512) /* ~300 bytes of JSON per rank */

struct run_summary {
  int rank, world;
  const arena_t *arena;
  nvml_dl_t *nvml;
  nvml_sample_t sample; /* the last one, reused between samples */
  int have_sample;
  double sampled_at;
  double *last;    /* the last step's summed slots */
  long timed;      /* steps in the averages */
  double step_ms, wait_ms, comm_ms, syncbn_ms;
  double util_sum[RS_MAX_RANKS], used_max[RS_MAX_RANKS];
  long util_n[RS_MAX_RANKS];
  char json[RS_JSON_BYTES];
};

int run_summary_create(run_summary_t **out, int rank, int world, const arena_t *arena,
                       char *err, size_t errlen)
{
  *out = NULL;
  run_summary_t *s = calloc(1, sizeof *s);
  if (world < 1) world = 1;
  if (!s || !(s->last = calloc((size_t)world * RUN_SUMMARY_PER_RANK, sizeof *s->last))) {
    free(s);
    return check_fail(err, errlen, "out of memory for the run summary");
  }
  s->rank = rank;
  s->world = world;
  s->arena = arena;
  s->sampled_at = -1e9;
  char bus[32], why[256];
  if (dev_pci_bus_id(arena_device(arena), bus, sizeof bus) == 0)
    nvml_open(&s->nvml, NULL, bus, why, sizeof why); /* absent: fields left out */
  *out = s;
  return 0;
}

void run_summary_destroy(run_summary_t *s)
{
  if (!s) return;
  nvml_close(s->nvml);
  free(s->last);
  free(s);
}

size_t run_summary_slots(const run_summary_t *s)
{
  return (size_t)s->world * RUN_SUMMARY_PER_RANK;
}

void run_summary_fill(run_summary_t *s, double *slots)
{
  memset(slots, 0, run_summary_slots(s) * sizeof *slots);
  double *v = slots + (size_t)s->rank * RUN_SUMMARY_PER_RANK;
  const double mib = 1.0 / ARENA_MIB;
  for (int c = 0; c < ARENA_NUM_CATEGORIES; c++) {
    v[SLOT_CURRENT + c] = (double)arena_current(s->arena, (arena_category_t)c) * mib;
    v[SLOT_PEAK + c] = (double)arena_peak(s->arena, (arena_category_t)c) * mib;
  }
  v[SLOT_TOTAL] = (double)arena_total_current(s->arena) * mib;
  v[SLOT_TOTAL_PEAK] = (double)arena_total_peak(s->arena) * mib;
  /* The driver averages utilisation over 1/6 s to 1 s, so sampling more often than every
   * 100 ms adds cost (tens of us a call) and no information: steps in between repeat it. */
  double t = clock_s();
  if (s->nvml && t - s->sampled_at >= 0.1) {
    s->have_sample = nvml_sample(s->nvml, &s->sample) == 0;
    s->sampled_at = t;
  }
  v[SLOT_UTIL] = s->have_sample ? s->sample.gpu_util : -1;
  v[SLOT_USED] = s->have_sample ? s->sample.used_mib : -1;
}

/* Appends to s->json, tracking the offset (output past the end is cut, never overrun). */
static void put(run_summary_t *s, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put(run_summary_t *s, size_t *off, const char *fmt, ...)
{
  if (*off >= sizeof s->json) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(s->json + *off, sizeof s->json - *off, fmt, ap);
  va_end(ap);
  if (k > 0) *off += (size_t)k;
}

/* Appends to buf at *off (len bytes in all), tracking what a cut left out. */
static void put_at(char *buf, size_t len, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put_at(char *buf, size_t len, size_t *off, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(*off < len ? buf + *off : NULL, *off < len ? len - *off : 0, fmt, ap);
  va_end(ap);
  if (k > 0) *off += (size_t)k;
}

int run_summary_ledger_json(const arena_t *a, char *buf, size_t len)
{
  size_t off = 0;
  put_at(buf, len, &off, "{\"device\":");
  off += json_string_buf(off < len ? buf + off : NULL, off < len ? len - off : 0, arena_label(a));
  for (int which = 0; which < 2; which++) {
    put_at(buf, len, &off, ",\"%s\":{", which ? "peak" : "current");
    for (int c = 0; c < ARENA_NUM_CATEGORIES; c++) {
      arena_category_t cat = (arena_category_t)c;
      put_at(buf, len, &off, "%s\"%s\":%zu", c ? "," : "", arena_category_name(cat),
             which ? arena_peak(a, cat) : arena_current(a, cat));
    }
    put_at(buf, len, &off, ",\"total\":%zu}",
           which ? arena_total_peak(a) : arena_total_current(a));
  }
  put_at(buf, len, &off, "}");
  if (len) buf[off < len ? off : len - 1] = '\0';
  return off < len ? 0 : -1;
}

static void format_json(run_summary_t *s)
{
  size_t off = 0;
  put(s, &off, "\"memory_mib\": [");
  for (int r = 0; r < s->world; r++) {
    const double *v = s->last + (size_t)r * RUN_SUMMARY_PER_RANK;
    put(s, &off, "%s{", r ? ", " : "");
    for (int c = 0; c < ARENA_NUM_CATEGORIES; c++)
      put(s, &off, "\"%s\": %.3f, ", arena_category_name((arena_category_t)c),
          v[SLOT_CURRENT + c]);
    put(s, &off, "\"total\": %.3f, \"peak\": %.3f}", v[SLOT_TOTAL], v[SLOT_TOTAL_PEAK]);
  }
  put(s, &off, "]");
  /* NVML fields only when some rank has them; a rank without gets null. */
  static const struct {
    int slot;
    const char *key, *fmt;
  } gpu[] = {{SLOT_UTIL, "gpu_util", "%.0f"}, {SLOT_USED, "gpu_mem_used_mib", "%.1f"}};
  for (size_t g = 0; g < sizeof gpu / sizeof gpu[0]; g++) {
    int any = 0;
    for (int r = 0; r < s->world; r++)
      any |= s->last[(size_t)r * RUN_SUMMARY_PER_RANK + gpu[g].slot] >= 0;
    if (!any) continue;
    put(s, &off, ", \"%s\": [", gpu[g].key);
    for (int r = 0; r < s->world; r++) {
      double x = s->last[(size_t)r * RUN_SUMMARY_PER_RANK + gpu[g].slot];
      if (r) put(s, &off, ", ");
      if (x >= 0) put(s, &off, gpu[g].fmt, x);
      else put(s, &off, "null");
    }
    put(s, &off, "]");
  }
  if (off >= sizeof s->json) { /* cut: keep the line valid JSON without the fields */
    snprintf(s->json, sizeof s->json, "\"memory_mib\": null");
  }
}

void run_summary_step(run_summary_t *s, int timed, const double *slots, double step_ms,
                      double data_wait_ms, double exposed_comm_ms, double syncbn_ms)
{
  memcpy(s->last, slots, run_summary_slots(s) * sizeof *slots);
  format_json(s);
  if (!timed) return;
  s->timed++;
  s->step_ms += step_ms;
  s->wait_ms += data_wait_ms;
  s->comm_ms += exposed_comm_ms;
  s->syncbn_ms += syncbn_ms;
  for (int r = 0; r < s->world && r < RS_MAX_RANKS; r++) {
    const double *v = s->last + (size_t)r * RUN_SUMMARY_PER_RANK;
    if (v[SLOT_UTIL] >= 0) {
      s->util_sum[r] += v[SLOT_UTIL];
      s->util_n[r]++;
    }
    if (v[SLOT_USED] > s->used_max[r]) s->used_max[r] = v[SLOT_USED];
  }
}

const char *run_summary_step_json(const run_summary_t *s) { return s->json; }

void run_summary_print(const run_summary_t *s, FILE *f, const train_result_t *res,
                       const char *out_dir, const char *timeline)
{
  long n = s->timed;
  double step = n ? s->step_ms / n : 0, wait = n ? s->wait_ms / n : 0;
  double comm = n ? s->comm_ms / n : 0, bn = n ? s->syncbn_ms / n : 0;
  double compute = step - wait - comm - bn;
  if (compute < 0) compute = 0;
  fprintf(f, "summary: %d rank%s, %ld steps (%ld timed), %.1f images/s, %.2f ms/step\n",
          s->world, s->world == 1 ? "" : "s", res->steps, n, res->images_per_s, step);
  if (n > 0) {
    const struct {
      const char *name;
      double ms;
    } split[] = {{"compute", compute}, {"exposed communication", comm}, {"SyncBN exchanges", bn},
                 {"data wait", wait}};
    fprintf(f, "  %-28s %10s %7s\n", "step time (rank 0)", "ms/step", "%");
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
      fprintf(f, "  %-28s %10.2f %7.1f\n", split[i].name, split[i].ms,
              step > 0 ? 100 * split[i].ms / step : 0);
    /* A step that waits for its batch is bound by the host, not by the model: say so, and what
     * would help, where the wait is more than noise. */
    if (step > 0 && 100 * wait / step >= RS_DATA_WAIT_HINT_PCT)
      fprintf(f, "  the loader kept the step waiting for its batch %.1f %% of the time: more loader "
              "threads (--workers) or fewer other processes on the host's cores would feed it\n",
              100 * wait / step);
  }
  int w = s->world < RS_MAX_RANKS ? s->world : RS_MAX_RANKS;
  fprintf(f, "  %-28s", "memory ledger, peak MiB");
  for (int r = 0; r < w; r++) fprintf(f, " %9s%d", "rank ", r);
  fputc('\n', f);
  for (int c = 0; c <= ARENA_NUM_CATEGORIES; c++) {
    int slot = c < ARENA_NUM_CATEGORIES ? SLOT_PEAK + c : SLOT_TOTAL_PEAK;
    double any = 0;
    for (int r = 0; r < w; r++) any += s->last[(size_t)r * RUN_SUMMARY_PER_RANK + slot];
    if (any == 0 && c < ARENA_NUM_CATEGORIES) continue; /* categories nobody uses */
    fprintf(f, "  %-28s", c < ARENA_NUM_CATEGORIES ? arena_category_name((arena_category_t)c)
                                                   : "total (peak of the sum)");
    for (int r = 0; r < w; r++)
      fprintf(f, " %10.1f", s->last[(size_t)r * RUN_SUMMARY_PER_RANK + slot]);
    fputc('\n', f);
  }
  int nvml = 0;
  for (int r = 0; r < w; r++) nvml |= s->util_n[r] > 0;
  if (nvml) {
    fprintf(f, "  %-28s", "device memory used (NVML)");
    for (int r = 0; r < w; r++) fprintf(f, " %10.0f", s->used_max[r]);
    fprintf(f, "\n  %-28s", "GPU utilisation, mean %");
    for (int r = 0; r < w; r++)
      fprintf(f, " %10.0f", s->util_n[r] ? s->util_sum[r] / s->util_n[r] : 0);
    fputc('\n', f);
  }
  if (timeline && timeline[0])
    fprintf(f, "  timeline: %s (one per rank; open in https://ui.perfetto.dev)\n", timeline);
  if (out_dir) {
    char q[3 * 1024 + 8];
    fprintf(f, "  report: shmddp-report %s (writes %s/report.html; in the build tree: "
            "tools/report)\n", shquote(out_dir, q, sizeof q), out_dir);
  }
  fflush(f);
}
