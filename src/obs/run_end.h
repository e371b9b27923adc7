/* run_end.h — a run's last lines, after its result line: the restarts it made, where its model
 * is, and the commands that use it, pasteable into a shell as printed (every path quoted). */
#ifndef SRC_OBS_RUN_END_H
#define SRC_OBS_RUN_END_H

#include <stdio.h>

#include "src/obs/summary.h"

/* program: how the trainer was started (argv[0]: shmddp-predict is named beside it), or NULL;
 * max_restarts: --max-restarts. */
void run_end_print(FILE *f, const char *out_dir, long step, const char *program,
                   const summary_restart_t *restarts, int nrestarts, int max_restarts);

#endif
