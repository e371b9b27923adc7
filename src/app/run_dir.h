/* run_dir.h — the folder a run writes, chosen and checked before anything starts, so that two
 * runs never mix in one folder:
 *  - without --out every run gets a new folder runs/YYYYMMDD-HHMMSS, and runs/latest is a link
 *    to the newest (what the README's commands use); with --resume and no --out, the run goes on
 *    in the checkpoint's folder;
 *  - a folder holding another run's files (checkpoint.ckpt, log.jsonl, summary.json,
 *    report.html, timeline-rank*.json) is refused, unless --resume continues that very run (the
 *    same run id, ckpt_run.h) or --overwrite is given: then those files are removed at the
 *    claim, just before the ranks start, and nothing of the old run is left beside the new one.
 * Also which log.jsonl a resumed run continues: the one of its own run, found by the run id in
 * the log's first line, in --out or beside the checkpoint — not whatever log sits at a path. */
#ifndef SRC_APP_RUN_DIR_H
#define SRC_APP_RUN_DIR_H

#include <stddef.h>
#include <stdio.h>

#include "src/train/job.h"

/* The folder (job->cfg.out_dir, job->out_fresh, job->out_replace, job->other_run) and, for
 * --resume, the log to continue (job->log_from). resumed: --resume's run record (id "" for a
 * checkpoint written before runs had ids), or NULL without --resume. Creates a given folder
 * that is missing (and checks that this user can write in it); a new folder waits for the
 * claim. */
int run_dir_choose(train_job_t *job, const ckpt_run_t *resumed, char *err, size_t errlen);

/* The log this run continues from a checkpoint with record `resumed` (job->log_from). */
void run_dir_find_log(train_job_t *job, const ckpt_run_t *resumed);

/* See train_job_claim. */
int run_dir_claim(train_job_t *job, FILE *say, char *err, size_t errlen);

#endif
