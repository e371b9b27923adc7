/* timeline.c — span recording and the trace file. Spans live in one growing array in the order
 * they began; device spans hold event numbers (a ring of preallocated device events) until the
 * step after next, when their work is certainly done and reading the events costs no wait. The
 * file is a Chrome trace: "X" (complete) events with ts/dur in microseconds, and "M" metadata
 * naming the process after the rank and the rows after the host thread and the streams. */
#include "config.h"

#include "src/clock.h"
#include "src/obs/timeline.h"
#include "src/obs/json_out.h"
#include "src/obs/outfile.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/obs/timeline_dev.h"

/* Events in the ring: a U-Net step uses about 2 per span x (forward, backward, optimizer, a
 * few buckets, two SyncBN exchanges per BN layer) ~ 100; three steps must fit. */
#define TL_EVENTS 8192
#define TL_SPANS_PER_STEP 256

enum { TL_ROW_HOST = 0, TL_ROW_COMPUTE, TL_ROW_COMM };
enum { TL_OPEN = 0, TL_ENDED, TL_TIMED, TL_BAD };

static const struct {
  const char *name, *cat;
  int row;                 /* the row of a device-timed span */
  const char *arg0, *arg1; /* names of the span's numbers, NULL when unused */
} kinds[TIMELINE_NUM_KINDS] = {
    [TIMELINE_STEP] = {"step", "step", TL_ROW_HOST, NULL, NULL},
    [TIMELINE_DATA_WAIT] = {"data wait", "data", TL_ROW_HOST, NULL, NULL},
    [TIMELINE_UPLOAD] = {"copy to device", "data", TL_ROW_COMPUTE, "bytes", NULL},
    [TIMELINE_FORWARD] = {"forward", "compute", TL_ROW_COMPUTE, NULL, NULL},
    [TIMELINE_BACKWARD] = {"backward", "compute", TL_ROW_COMPUTE, NULL, NULL},
    [TIMELINE_SYNCBN] = {"syncbn", "comm", TL_ROW_COMPUTE, "count", NULL},
    [TIMELINE_ALLREDUCE] = {"allreduce", "comm", TL_ROW_COMM, "bucket", "bytes"},
    [TIMELINE_GRAD_WAIT] = {"wait for gradients", "comm", TL_ROW_COMPUTE, NULL, NULL},
    [TIMELINE_OPTIMIZER] = {"optimizer", "compute", TL_ROW_COMPUTE, NULL, NULL},
    [TIMELINE_AGREE] = {"step agreement", "comm", TL_ROW_HOST, NULL, NULL},
};

typedef struct {
  long step;
  double t0, t1; /* microseconds on the host's monotonic clock */
  double a0, a1;
  long ev0, ev1; /* device spans: event numbers (-1: none yet) */
  unsigned char kind, dev, state, nargs;
} tl_span_t;

static struct {
  int open, done;
  char path[2048], tmp[2100], label[64];
  int rank, world;
  void *stream;
  long first, last, step;
  tl_span_t *spans;
  size_t n, cap, timed; /* spans [0, timed) have their final times */
  long ev_next, ev_live; /* next event number; oldest one still to be read */
  size_t dropped;
  timeline_dev_t *dev; /* the device clock (GPU ranks) */
} tl;

int timeline_recording_ = 0;

const char *timeline_path(void) { return tl.done ? tl.path : ""; }

static int has_device(void) { return tl.dev != NULL; }

static int record_event(long *ev, void *stream)
{
  if (!tl.dev) return -1;
  if (tl.ev_next - tl.ev_live >= TL_EVENTS) return -1; /* the ring is full: drop the span */
  if (timeline_dev_record(tl.dev, (size_t)tl.ev_next, stream) != 0) return -1;
  *ev = tl.ev_next++;
  return 0;
}

int timeline_begin_(timeline_kind_t kind, void *stream)
{
  if (tl.n == tl.cap) { /* grows a few times in the first traced step, then not again */
    size_t cap = tl.cap ? 2 * tl.cap : TL_SPANS_PER_STEP;
    tl_span_t *s = cap <= INT_MAX ? realloc(tl.spans, cap * sizeof *s) : NULL;
    if (!s) {
      tl.dropped++;
      return -1;
    }
    tl.spans = s;
    tl.cap = cap;
  }
  tl_span_t *s = &tl.spans[tl.n];
  memset(s, 0, sizeof *s);
  s->kind = (unsigned char)kind;
  s->step = tl.step;
  s->ev0 = s->ev1 = -1;
  s->dev = stream != NULL && has_device();
  if (s->dev) {
    if (record_event(&s->ev0, stream) != 0) {
      tl.dropped++;
      return -1;
    }
  } else {
    s->t0 = clock_us();
  }
  s->state = TL_OPEN;
  return (int)tl.n++;
}

void timeline_end_(int span, void *stream)
{
  if ((size_t)span >= tl.n || tl.spans[span].state != TL_OPEN) return;
  tl_span_t *s = &tl.spans[span];
  if (s->dev) {
    if (!stream || record_event(&s->ev1, stream) != 0) {
      s->state = TL_BAD;
      tl.dropped++;
      return;
    }
  } else {
    s->t1 = clock_us();
  }
  s->state = TL_ENDED;
}

void timeline_args_(int span, double a0, double a1)
{
  if ((size_t)span >= tl.n) return;
  tl.spans[span].a0 = a0;
  tl.spans[span].a1 = a1;
  tl.spans[span].nargs = 2;
}

/* Gives spans of steps <= upto their times: reads the events (done by now) of device spans. */
static void resolve(long upto)
{
  while (tl.timed < tl.n && tl.spans[tl.timed].step <= upto) {
    tl_span_t *s = &tl.spans[tl.timed++];
    if (s->state == TL_OPEN) { /* never ended: its step failed */
      s->state = TL_BAD;
      tl.dropped++;
    }
    if (s->state != TL_ENDED) continue;
    s->state = TL_TIMED;
    if (s->dev && (timeline_dev_time_us(tl.dev, (size_t)s->ev0, &s->t0) != 0 ||
                   timeline_dev_time_us(tl.dev, (size_t)s->ev1, &s->t1) != 0)) {
      s->state = TL_BAD;
      tl.dropped++;
    }
  }
  /* Event numbers grow with the span index, so the oldest live one is the first device span
   * left (its end event, if any, is younger still). */
  tl.ev_live = tl.ev_next;
  for (size_t i = tl.timed; i < tl.n; i++)
    if (tl.spans[i].dev && tl.spans[i].ev0 >= 0) {
      tl.ev_live = tl.spans[i].ev0;
      break;
    }
}

int timeline_open(const timeline_config_t *cfg, char *err, size_t errlen)
{
  memset(&tl, 0, sizeof tl);
  timeline_recording_ = 0;
  if (cfg->steps <= 0) return 0;
  tl.rank = cfg->rank;
  tl.world = cfg->world;
  tl.stream = cfg->stream;
  tl.first = cfg->first_step < 1 ? 1 : cfg->first_step;
  tl.last = tl.first + cfg->steps - 1;
  snprintf(tl.label, sizeof tl.label, "%s", cfg->device_label ? cfg->device_label : "cpu");
  snprintf(tl.path, sizeof tl.path, "%s/timeline-rank%d.json", cfg->dir, cfg->rank);
  if (cfg->cuda_device >= 0 && cfg->stream &&
      timeline_dev_create(&tl.dev, cfg->cuda_device, TL_EVENTS, err, errlen) != 0)
    return -1;
  tl.open = 1;
  return 0;
}

static int by_time(const void *pa, const void *pb)
{
  const tl_span_t *a = *(tl_span_t *const *)pa, *b = *(tl_span_t *const *)pb;
  if (a->t0 != b->t0) return a->t0 < b->t0 ? -1 : 1;
  double da = a->t1 - a->t0, db = b->t1 - b->t0; /* the enclosing span first */
  return da > db ? -1 : da < db;
}

static void put_thread(FILE *f, int tid, const char *name)
{
  fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
          "\"args\":{\"name\":", tl.rank, tid);
  json_string(f, name);
  fputs("}}", f);
  fprintf(f, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
          "\"args\":{\"sort_index\":%d}}", tl.rank, tid, tid);
}

static int write_file(char *err, size_t errlen)
{
  size_t good = 0;
  for (size_t i = 0; i < tl.n; i++) good += tl.spans[i].state == TL_TIMED;
  tl_span_t **order = malloc((good ? good : 1) * sizeof *order);
  FILE *f = order ? outfile_fopen_temp(tl.path, tl.tmp, sizeof tl.tmp) : NULL;
  if (!f) {
    snprintf(err, errlen, "%s: cannot create the timeline: %s", tl.path,
             order ? strerror(errno) : "out of memory");
    free(order);
    return -1;
  }
  good = 0;
  for (size_t i = 0; i < tl.n; i++)
    if (tl.spans[i].state == TL_TIMED) order[good++] = &tl.spans[i];
  qsort(order, good, sizeof *order, by_time);
  int dev = has_device();
  char process[sizeof tl.label + 32];
  snprintf(process, sizeof process, "rank %d (%s)", tl.rank, tl.label);
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"rank\":%d,\"world\":%d,"
          "\"device\":", tl.rank, tl.world);
  json_string(f, tl.label);
  fprintf(f, ",\"clock\":\"%s\",\"first_step\":%ld,\"last_step\":%ld,\"spans\":%zu,"
          "\"dropped\":%zu},\n\"traceEvents\":[\n", dev ? "cuda events" : "host monotonic",
          tl.first, tl.last, good, tl.dropped);
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
          "\"args\":{\"name\":", tl.rank);
  json_string(f, process);
  fputs("}}", f);
  fprintf(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
          "\"args\":{\"sort_index\":%d}}", tl.rank, tl.rank);
  put_thread(f, TL_ROW_HOST, dev ? "host" : "main thread");
  if (dev) {
    put_thread(f, TL_ROW_COMPUTE, "compute stream");
    put_thread(f, TL_ROW_COMM, "communication stream");
  }
  for (size_t i = 0; i < good; i++) {
    const tl_span_t *s = order[i];
    double dur = s->t1 > s->t0 ? s->t1 - s->t0 : 0;
    fputs(",\n{\"name\":", f);
    json_string(f, kinds[s->kind].name);
    fputs(",\"cat\":", f);
    json_string(f, kinds[s->kind].cat);
    fprintf(f, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
            "\"args\":{\"step\":%ld", tl.rank, s->dev ? kinds[s->kind].row : TL_ROW_HOST, s->t0,
            dur, s->step);
    if (s->nargs && kinds[s->kind].arg0) fprintf(f, ",\"%s\":%.17g", kinds[s->kind].arg0, s->a0);
    if (s->nargs && kinds[s->kind].arg1) fprintf(f, ",\"%s\":%.17g", kinds[s->kind].arg1, s->a1);
    fputs("}}", f);
  }
  fputs("\n]}\n", f);
  free(order);
  if (outfile_commit(f, tl.tmp, tl.path, 1) != 0) {
    snprintf(err, errlen, "%s: cannot write the timeline: %s", tl.path, strerror(errno));
    return -1;
  }
  return 0;
}

/* The window is over (or the run is): read every event, write the file, free the events. */
static int finish(char *err, size_t errlen)
{
  timeline_recording_ = 0;
  resolve(LONG_MAX);
  int rc = write_file(err, errlen);
  tl.done = rc == 0;
  free(tl.spans);
  tl.spans = NULL;
  tl.n = tl.cap = tl.timed = 0;
  timeline_dev_destroy(tl.dev);
  tl.dev = NULL;
  tl.open = 0;
  return rc;
}

int timeline_step(long step, char *err, size_t errlen)
{
  tl.step = step;
  if (!tl.open) return 0;
  if (!timeline_recording_ && step >= tl.first && step <= tl.last) {
    if (tl.dev && timeline_dev_anchor(tl.dev, tl.stream, err, errlen) != 0) return -1;
    timeline_recording_ = 1;
  }
  if (!timeline_recording_) return 0;
  if (step > tl.last) return finish(err, errlen);
  /* Step - 2 is done: step - 1's loss was read after its backward, and its optimizer waited
   * for its buckets; only step - 1's optimizer may still be running. */
  resolve(step - 2);
  return 0;
}

int timeline_close(char *err, size_t errlen)
{
  int rc = 0;
  if (tl.open && timeline_recording_) rc = finish(err, errlen);
  free(tl.spans);
  timeline_dev_destroy(tl.dev);
  int done = tl.done;
  char path[sizeof tl.path];
  memcpy(path, tl.path, sizeof path);
  memset(&tl, 0, sizeof tl);
  timeline_recording_ = 0;
  /* timeline_path() still names the file after close, for the end-of-run summary. */
  tl.done = done;
  memcpy(tl.path, path, sizeof path);
  return rc;
}
