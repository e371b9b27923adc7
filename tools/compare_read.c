/* compare_read.c — what tools/compare reads of a run it made: summary.json, log.jsonl and, for
 * DataParallel, dp_devices.json (our own JSON: a key's number is found by its name). The files
 * are in a folder others may write to (--work), so nothing read is trusted: a number that is not
 * finite or beyond 1e15 is the key's default, the world size is clamped to 1..CMP_MAX_DEV, and
 * every search stays inside the NUL-terminated text (tests/fuzz/fuzz_compare.c). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/compare.h"

const char *const cmp_categories[CMP_NCAT] = {"parameters", "gradients", "optimizer",
                                              "activations", "workspace", "communication",
                                              "dp_gather", "other"};

static char *slurp(const char *dir, const char *name)
{
  char p[1200];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "r");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (n + 1 == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb) {
        free(buf);
        buf = NULL;
      }
      buf = nb;
    }
  }
  fclose(f);
  if (buf) buf[n] = 0;
  return buf;
}

/* The number after "key" (then optional spaces, a colon, spaces) in s[0..end), or def (also
 * where it is not finite, or beyond any quantity a run writes: then sums of them stay finite). */
static double num(const char *s, const char *end, const char *key, double def)
{
  char pat[80];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  for (const char *p = strstr(s, pat); p && (!end || p < end); p = strstr(p + 1, pat)) {
    const char *q = p + strlen(pat);
    while (*q == ' ') q++;
    if (*q != ':') continue;
    q++;
    while (*q == ' ') q++;
    char *e;
    double v = strtod(q, &e);
    return e == q || !(fabs(v) <= 1e15) ? def : v;
  }
  return def;
}

/* Ledger categories (bytes) from the object that starts at "peak":{ within [s, end). */
static void ledger_peak(const char *s, const char *end, double *mib)
{
  const char *p = strstr(s, "\"peak\":{");
  if (!p || (end && p >= end)) return;
  const char *close = strchr(p, '}');
  for (int k = 0; k < CMP_NCAT; k++) mib[k] = num(p, close, cmp_categories[k], 0) / 1048576.0;
}

static void read_dp(cmp_run_t *r, const char *dev_json)
{
  double step = num(dev_json, NULL, "step_ms", 0);
  r->step_ms = step;
  r->split_devs = r->world;
  for (int i = 0; i < r->world && i < CMP_MAX_DEV; i++) {
    char pat[32];
    snprintf(pat, sizeof pat, "{\"device\": %d,", i);
    const char *s = strstr(dev_json, pat);
    if (!s) continue;
    const char *e = strstr(s + 1, "{\"device\": ");
    r->compute_ms[i] = num(s, e, "compute_ms", 0);
    r->comm_ms[i] = num(s, e, "comm_ms", 0);
    r->idle_ms[i] = num(s, e, "idle_ms", 0);
    ledger_peak(s, e, r->mem_mib[i]);
  }
}

/* DDP: rank 0's step split from log.jsonl (steps after `skip`); per-rank ledgers from the last
 * step line's "memory_mib" where the trainer writes it, else rank 0's for every rank. */
static void read_ddp(cmp_run_t *r, const char *log, const char *summary, long skip)
{
  double n = 0, step = 0, wait = 0, comm = 0;
  const char *last_step = NULL;
  for (const char *line = log; line && *line;) {
    const char *nl = strchr(line, '\n');
    if (strstr(line, "\"type\": \"step\"") && (!nl || strstr(line, "\"type\": \"step\"") < nl)) {
      last_step = line;
      if (num(line, nl, "step", 0) > skip) {
        step += num(line, nl, "step_ms", 0);
        wait += num(line, nl, "data_wait_ms", 0);
        comm += num(line, nl, "exposed_comm_ms", 0) + num(line, nl, "syncbn_ms", 0);
        n++;
      }
    }
    line = nl ? nl + 1 : NULL;
  }
  if (n > 0) {
    r->step_ms = step / n;
    r->comm_ms[0] = comm / n;
    r->idle_ms[0] = wait / n;
    r->compute_ms[0] = r->step_ms - r->comm_ms[0] - r->idle_ms[0];
    r->split_devs = 1;
  }
  const char *mem = strstr(summary, "\"memory\"");
  double rank0[CMP_NCAT] = {0};
  if (mem) ledger_peak(mem, NULL, rank0);
  const char *nl = last_step ? strchr(last_step, '\n') : NULL;
  const char *per = last_step ? strstr(last_step, "\"memory_mib\": [") : NULL;
  if (per && nl && per > nl) per = NULL;
  const char *stop = per ? strchr(per, ']') : NULL; /* the array holds flat objects */
  const char *obj = per ? strchr(per, '{') : NULL;
  for (int i = 0; i < r->world && i < CMP_MAX_DEV; i++) {
    if (obj && stop && obj < stop) {
      const char *close = strchr(obj, '}');
      for (int k = 0; k < CMP_NCAT; k++) r->mem_mib[i][k] = num(obj, close, cmp_categories[k], 0);
      obj = close ? strchr(close, '{') : NULL;
    } else {
      memcpy(r->mem_mib[i], rank0, sizeof rank0);
      r->mem_from_rank0[i] = 1;
    }
  }
}

int cmp_read_run(cmp_run_t *r, const char *dir, long skip)
{
  char *summary = slurp(dir, "summary.json");
  if (!summary) return -1;
  double world = num(summary, NULL, "world", 1);
  r->world = world >= CMP_MAX_DEV ? CMP_MAX_DEV : world >= 1 ? (int)world : 1;
  r->images_per_s = num(summary, NULL, "images_per_s", 0);
  r->train_loss = num(summary, NULL, "train_loss", 0);
  const char *peaks = strstr(summary, "\"peak_mib_per_rank\": [");
  for (int i = 0; peaks && i < r->world; i++) {
    peaks = i == 0 ? strchr(peaks, '[') + 1 : strchr(peaks, ',');
    if (!peaks) break;
    if (i) peaks++;
    r->peak_mib[i] = strtod(peaks, NULL);
    if (!(fabs(r->peak_mib[i]) <= 1e15)) r->peak_mib[i] = 0;
  }
  int rc = 0;
  if (strcmp(r->mode, "dp") == 0) {
    char *dev = slurp(dir, "dp_devices.json");
    if (dev) read_dp(r, dev);
    else rc = -1;
    free(dev);
  } else {
    char *log = slurp(dir, "log.jsonl");
    if (log) read_ddp(r, log, summary, skip);
    else rc = -1;
    free(log);
  }
  free(summary);
  r->ok = rc == 0;
  return rc;
}
