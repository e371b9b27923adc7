/* report_log.h — the per-step JSON-lines log in --out (log.jsonl): one object per optimizer step
 * and one per validation, each on its own line, flushed as written so a crashed run keeps its
 * history. */
#ifndef SRC_OBS_REPORT_LOG_H
#define SRC_OBS_REPORT_LOG_H

#include <stdio.h>

typedef struct {
  long step, epoch;
  double loss, lr, loss_scale, images_per_s;
  double step_ms, data_wait_ms, exposed_comm_ms, syncbn_ms;
  int skipped; /* fp16: the step was skipped for non-finite gradients */
  const char *extra; /* more "key": value fields, comma-separated (run_summary's), or NULL */
} report_step_t;

typedef struct {
  long step, epoch;
  double loss, miou, acc, seconds;
} report_val_t;

typedef struct report_log report_log_t;

/* Creates (truncates) dir/log.jsonl. */
int report_log_open(report_log_t **out, const char *dir, char *err, size_t errlen);
/* A resumed run's log: dir/log.jsonl holds the records of from_log (the log of the run that
 * wrote the checkpoint; it may be the same file) up to the checkpoint's step, once and in order
 * (steps <= last_step, validations before it; a crashed run's later records and a partial last
 * line are dropped, as the resumed run writes them again), and the new records follow. The old
 * file is replaced atomically. A missing from_log starts an empty log. */
int report_log_continue(report_log_t **out, const char *dir, const char *from_log,
                        long last_step, char *err, size_t errlen);
void report_log_close(report_log_t *l); /* NULL is fine */
int report_log_step(report_log_t *l, const report_step_t *s);
/* memory_json: the ledger as a JSON object (run_summary_ledger_json), or NULL. */
int report_log_val(report_log_t *l, const report_val_t *v, const char *memory_json);

#endif
