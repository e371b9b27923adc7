/* report_log.c — JSON-lines writing; numbers through json_out.h (%.9g: enough digits to tell
 * steps apart, short enough to read; NaN and infinities as null, which JSON allows and NaN is
 * not). */
#include "config.h"

#include "src/obs/report_log.h"
#include "src/obs/json_out.h"
#include "src/obs/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/check.h"

struct report_log {
  FILE *f;
};

/* The first line: the run this log belongs to. */
static int run_line(FILE *f, const char *run_id)
{
  fputs("{\"type\": \"run\", \"run_id\": ", f);
  json_string(f, run_id);
  fputs("}\n", f);
  return fflush(f) == 0 ? 0 : -1;
}

int report_log_run_id(const char *path, char *id, size_t idlen)
{
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  int found = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  static const char head[] = "{\"type\": \"run\", \"run_id\": \"";
  if (!found || strncmp(line, head, sizeof head - 1) != 0) return 0;
  const char *p = line + sizeof head - 1;
  size_t n = strspn(p, "0123456789abcdef");
  if (n == 0 || p[n] != '"' || n >= idlen) return 0;
  snprintf(id, idlen, "%.*s", (int)n, p);
  return 1;
}

int report_log_open(report_log_t **out, const char *dir, const char *run_id, char *err,
                    size_t errlen)
{
  *out = NULL;
  char path[2048];
  snprintf(path, sizeof path, "%s/log.jsonl", dir);
  report_log_t *l = calloc(1, sizeof *l);
  if (!l || !(l->f = outfile_fopen_private(path))) {
    snprintf(err, errlen, "%s: cannot create the log: %s", path, strerror(errno));
    free(l);
    return -1;
  }
  if (run_line(l->f, run_id) != 0) {
    snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    report_log_close(l);
    return -1;
  }
  *out = l;
  return 0;
}

/* Whether a log line (a whole record) belongs before a resume at last_step (the run's own line
 * is written afresh). */
static int keep_record(const char *line, long last_step)
{
  const char *s = strstr(line, "\"step\": ");
  if (!s || strncmp(line, "{\"type\": \"run\"", 15) == 0) return 0;
  long step = strtol(s + 8, NULL, 10);
  return strstr(line, "\"type\": \"val\"") ? step < last_step : step <= last_step;
}

int report_log_continue(report_log_t **out, const char *dir, const char *from_log,
                        long last_step, const char *run_id, char *err, size_t errlen)
{
  *out = NULL;
  char path[2048], tmp[2100];
  snprintf(path, sizeof path, "%s/log.jsonl", dir);
  FILE *in = fopen(from_log, "r");
  if (!in) return report_log_open(out, dir, run_id, err, errlen);
  /* The new log is written beside the old one (outfile.h: a random name, O_EXCL, 0600), then
   * renamed over it. */
  FILE *f = outfile_fopen_temp(path, tmp, sizeof tmp);
  if (!f) {
    snprintf(err, errlen, "%s: cannot create a temporary file beside it: %s", path,
             strerror(errno));
    fclose(in);
    return -1;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  run_line(f, run_id);
  /* A line holding a NUL byte is no record of ours (and would end the string early: the
   * record after it would join the cut line). */
  while ((n = getline(&line, &cap, in)) > 0)
    if (line[n - 1] == '\n' && !memchr(line, 0, (size_t)n) && keep_record(line, last_step))
      fwrite(line, 1, (size_t)n, f);
  free(line);
  fclose(in);
  /* renamed while open: the lock on the temporary file covers the rename (outfile.h) */
  int bad = ferror(f) | (fflush(f) != 0);
  if (bad) remove(tmp);
  if (bad || outfile_rename(tmp, path, 1) != 0) {
    snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    fclose(f);
    return -1;
  }
  report_log_t *l = calloc(1, sizeof *l);
  if (!l) {
    fclose(f);
    snprintf(err, errlen, "out of memory for the log");
    return -1;
  }
  l->f = f; /* the renamed file, positioned at its end */
  *out = l;
  return 0;
}

void report_log_close(report_log_t *l)
{
  if (!l) return;
  fclose(l->f);
  free(l);
}

static int finish(report_log_t *l)
{
  fputs("}\n", l->f);
  return fflush(l->f) == 0 ? 0 : -1;
}

typedef struct {
  const char *key;
  double v;
} field_t;

/* ", \"key\": value" for each of n fields, in order. */
static void fields(FILE *f, const field_t *fl, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    fprintf(f, ", \"%s\": ", fl[i].key);
    json_number(f, fl[i].v);
  }
}

int report_log_step(report_log_t *l, const report_step_t *s)
{
  FILE *f = l->f;
  fprintf(f, "{\"type\": \"step\", \"step\": %ld, \"epoch\": %ld", s->step, s->epoch);
  const field_t fl[] = {{"loss", s->loss},
                        {"lr", s->lr},
                        {"loss_scale", s->loss_scale},
                        {"images_per_s", s->images_per_s},
                        {"step_ms", s->step_ms},
                        {"data_wait_ms", s->data_wait_ms},
                        {"exposed_comm_ms", s->exposed_comm_ms},
                        {"syncbn_ms", s->syncbn_ms}};
  fields(f, fl, sizeof fl / sizeof fl[0]);
  fprintf(f, ", \"skipped\": %s", s->skipped ? "true" : "false");
  if (s->extra && s->extra[0]) fprintf(f, ", %s", s->extra);
  return finish(l);
}

int report_log_restart(const char *dir, const char *run_id, long step, int number,
                       const char *reason, char *err, size_t errlen)
{
  char path[2048];
  snprintf(path, sizeof path, "%s/log.jsonl", dir);
  report_log_t *l = NULL;
  int fd = open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    CHECK(report_log_open(&l, dir, run_id, err, errlen));
  } else if (fd < 0) {
    return check_fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
  } else if (!(l = calloc(1, sizeof *l)) || !(l->f = fdopen(fd, "a"))) {
    close(fd);
    free(l);
    return check_fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
  }
  FILE *f = l->f;
  fprintf(f, "{\"type\": \"restart\", \"step\": %ld, \"restart\": %d, \"reason\": ", step,
          number);
  json_string(f, reason);
  int rc = finish(l);
  report_log_close(l);
  return rc == 0 ? 0 : check_fail(err, errlen, "%s: write failed (disk full?)", path);
}

int report_log_val(report_log_t *l, const report_val_t *v, const char *memory_json)
{
  FILE *f = l->f;
  fprintf(f, "{\"type\": \"val\", \"step\": %ld, \"epoch\": %ld", v->step, v->epoch);
  const field_t fl[] = {{"val_loss", v->loss},
                        {"val_miou", v->miou},
                        {"val_acc", v->acc},
                        {"val_seconds", v->seconds}};
  fields(f, fl, sizeof fl / sizeof fl[0]);
  if (memory_json) fprintf(f, ", \"memory\": %s", memory_json);
  return finish(l);
}
