/* run_summary.h — what a run shows about every rank, not just rank 0: per step, each rank's
 * memory ledger by category and its GPU's utilisation (NVML, where present), gathered in the
 * step's existing agreement all-reduce and appended to the log line; at the end, rank 0's table
 * of throughput, the step time split (compute / exposed communication / SyncBN / data wait)
 * and the ledger of every GPU. */
#ifndef SRC_OBS_RUN_SUMMARY_H
#define SRC_OBS_RUN_SUMMARY_H

#include <stddef.h>
#include <stdio.h>

#include "src/device/arena.h"
#include "src/obs/summary.h"

/* Doubles per rank in the agreement: the ledger's current and peak per category, the totals,
 * GPU utilisation and device memory in use (NVML; -1 where unknown). */
#define RUN_SUMMARY_PER_RANK (2 * ARENA_NUM_CATEGORIES + 4)

typedef struct run_summary run_summary_t;

/* arena: this rank's ledger. On a GPU rank, opens NVML for the arena's device (its absence is
 * not an error: the GPU fields are then left out). */
int run_summary_create(run_summary_t **out, int rank, int world, const arena_t *arena,
                       char *err, size_t errlen);
void run_summary_destroy(run_summary_t *s); /* NULL is fine */

/* How many doubles this run adds to the step's agreement (world * RUN_SUMMARY_PER_RANK). */
size_t run_summary_slots(const run_summary_t *s);
/* Every rank, before the agreement: writes all slots (its own share, zeros elsewhere), so the
 * sum over ranks holds every rank's numbers. */
void run_summary_fill(run_summary_t *s, double *slots);
/* Rank 0, after the agreement: the summed slots and rank 0's step times in ms; timed: the step
 * is past the timing warm-up (it counts in the table's averages, as in images/s). */
void run_summary_step(run_summary_t *s, int timed, const double *slots, double step_ms,
                      double data_wait_ms, double exposed_comm_ms, double syncbn_ms);
/* A ledger as one JSON object {"device":..., "current":{cat:bytes...}, "peak":{...}} into buf:
 * 0, or -1 when it was cut to fit len. */
int run_summary_ledger_json(const arena_t *a, char *buf, size_t len);

/* The last step's per-rank fields for its log line, without braces:
 * "memory_mib": [{"parameters": ..., "total": ..., "peak": ...}, ...], "gpu_util": [...], ... */
const char *run_summary_step_json(const run_summary_t *s);

/* Rank 0, at the end: the table. out_dir names where the files are (NULL: not mentioned);
 * timeline: the trace file written, or "" / NULL. */
void run_summary_print(const run_summary_t *s, FILE *f, const train_result_t *res,
                       const char *out_dir, const char *timeline);

#endif
