/* compare.h — tools/compare: what one run of ./train in one mode gives the comparison (parsed
 * from its summary.json, log.jsonl and, for DataParallel, dp_devices.json), and the charts. */
#ifndef TOOLS_COMPARE_H
#define TOOLS_COMPARE_H

#include <stdio.h>

#define CMP_MAX_DEV 8
#define CMP_NCAT 8 /* the ledger's categories, in src/device/arena.h's order */

extern const char *const cmp_categories[CMP_NCAT];

typedef struct {
  char case_name[32];
  char mode[16];          /* dp, ddp, ddp-syncbn */
  int ok;                 /* the run finished and its files were read */
  int world;
  double images_per_s, train_loss;
  double ddp_ips;          /* the same case's DDP (no SyncBN) images/s; 0 if not run */
  double step_ms;         /* mean over the timed steps */
  int split_devs;         /* devices with a step split: DP every device, DDP rank 0 */
  double compute_ms[CMP_MAX_DEV], comm_ms[CMP_MAX_DEV], idle_ms[CMP_MAX_DEV];
  double mem_mib[CMP_MAX_DEV][CMP_NCAT]; /* peak per category */
  double peak_mib[CMP_MAX_DEV];          /* peak of the total (measured per device) */
  int mem_from_rank0[CMP_MAX_DEV];       /* categories copied from rank 0 (DDP, no per-rank data) */
} cmp_run_t;

/* Reads the files of the run in dir (r->mode says which: dp reads dp_devices.json, else
 * log.jsonl, whose first `skip` steps are left out of the step split): 0, or -1 when a file is
 * missing. Whatever the files hold, the numbers are finite and r->world is 1..CMP_MAX_DEV. */
int cmp_read_run(cmp_run_t *r, const char *dir, long skip);

/* The three charts into dir (throughput.svg, step_time.svg, memory.svg). 0 or -1. */
int cmp_write_charts(const char *dir, const cmp_run_t *runs, int nruns, const char *title);

#endif
