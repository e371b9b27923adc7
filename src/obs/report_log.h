/* report_log.h — the per-step JSON-lines log in --out (log.jsonl): one object per optimizer step
 * and one per validation, each on its own line, flushed as written so a crashed run keeps its
 * history. The first line names the run the log belongs to ({"type": "run", "run_id": ...}), so
 * a resumed run finds its log by the run, not by a path; a restart of the ranks adds a line
 * ({"type": "restart", ...}). */
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

/* Creates (truncates) dir/log.jsonl, its first line naming run_id. */
int report_log_open(report_log_t **out, const char *dir, const char *run_id, char *err,
                    size_t errlen);
/* A resumed run's log: dir/log.jsonl names run_id and holds the records of from_log (the log of
 * the run that wrote the checkpoint; it may be the same file) up to the checkpoint's step, once
 * and in order (steps and restarts <= last_step, validations before it; a crashed run's later
 * records and a partial last line are dropped, as the resumed run writes them again), and the
 * new records follow. The old file is replaced atomically. A missing from_log starts a new log. */
int report_log_continue(report_log_t **out, const char *dir, const char *from_log,
                        long last_step, const char *run_id, char *err, size_t errlen);
/* The run the log at path belongs to, into id (idlen >= 33): 1 when its first line names one,
 * 0 when the log has no such line (written before logs named their run), -1 when there is no
 * readable log at path. */
int report_log_run_id(const char *path, char *id, size_t idlen);
void report_log_close(report_log_t *l); /* NULL is fine */
int report_log_step(report_log_t *l, const report_step_t *s);
/* memory_json: the ledger as a JSON object (run_summary_ledger_json), or NULL. */
int report_log_val(report_log_t *l, const report_val_t *v, const char *memory_json);
/* Restart `number` of the ranks, from the checkpoint at `step` (0: from the start), and why;
 * appended by the launcher to dir/log.jsonl while no rank runs (a missing log is made, naming
 * run_id). */
int report_log_restart(const char *dir, const char *run_id, long step, int number,
                       const char *reason, char *err, size_t errlen);

#endif
