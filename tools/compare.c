/* compare.c — tools/compare: runs ./train in several modes (dp, ddp, ddp-syncbn) on the same
 * cases (sets of train flags, so the same data, model and steps), one run at a time, then
 * writes one table (images/s, the step split per device, peak memory per device by ledger
 * category) and three SVG charts. The runs are separate processes: DataParallel initialises
 * CUDA in its own process and DDP forks ranks, which must happen before any CUDA call. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "build_version.h"
#include "src/obs/outfile.h"
#include "tools/compare.h"

#define MAX_CASES 8
#define MAX_MODES 3

typedef struct {
  char name[32];
  char flags[1024];
} cmp_case_t;

static void usage(FILE *f)
{
  fprintf(f,
"usage: shmddp-compare --out DIR --case NAME='train flags' [--case ...]\n"
"                      [--modes dp,ddp,ddp-syncbn] [--train PATH] [--work DIR] [--table FILE]\n"
"                      [--skip N] [--title TEXT] [--run-timeout S]\n"
"Runs `train FLAGS --mode M --out WORK/NAME-M --overwrite` for every case and mode, one after\n"
"another (a run of an earlier comparison there is replaced),\n"
"then writes DIR/FILE (default compare.tsv) and DIR/{throughput,step_time,memory}.svg.\n"
"  --train PATH   the train program (default: shmddp-train beside this program)\n"
"  --work DIR     where the runs' own output goes (default: DIR/runs)\n"
"  --skip N       steps left out of the DDP step split (default 8; pass the same\n"
"                 --timing-warmup in the flags so images/s leaves them out too)\n"
"  --run-timeout S  kill a run after S seconds (it is reported as failed)\n");
}

/* ---- running ./train ---- */

static double run_timeout_s; /* --run-timeout: a run past it is killed (0: no limit) */

static int run_train(const char *train, const cmp_case_t *c, const char *mode, const char *out)
{
  char *argv[128];
  int argc = 0;
  char flags[1024];
  snprintf(flags, sizeof flags, "%s", c->flags);
  argv[argc++] = (char *)train;
  for (char *tok = strtok(flags, " \t"); tok && argc < 118; tok = strtok(NULL, " \t"))
    argv[argc++] = tok;
  argv[argc++] = "--mode";
  argv[argc++] = strcmp(mode, "dp") == 0 ? "dp" : "ddp";
  if (strcmp(mode, "dp") != 0) {
    argv[argc++] = "--sync-bn";
    argv[argc++] = strcmp(mode, "ddp-syncbn") == 0 ? "on" : "off";
  }
  argv[argc++] = "--out";
  argv[argc++] = (char *)out;
  argv[argc++] = "--overwrite"; /* WORK/NAME-M is this tool's: an earlier comparison's run goes */
  argv[argc] = NULL;
  char logpath[1300];
  snprintf(logpath, sizeof logpath, "%s/train.log", out);
  fprintf(stderr, "compare: %s %s:", c->name, mode);
  for (int i = 1; i < argc; i++) fprintf(stderr, " %s", argv[i]);
  fprintf(stderr, "\n");
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    FILE *lf = outfile_fopen_private(logpath); /* never through a planted link */
    if (lf) {
      dup2(fileno(lf), 1);
      dup2(fileno(lf), 2);
    }
    execvp(train, argv); /* a bare name: from PATH */
    fprintf(stderr, "compare: cannot run %s: %s\n", train, strerror(errno));
    _exit(127);
  }
  int ws;
  for (double waited = 0;; waited += 0.05) {
    pid_t got = waitpid(pid, &ws, run_timeout_s > 0 ? WNOHANG : 0);
    if (got == pid) break;
    if (got < 0) return -1;
    if (waited >= run_timeout_s) {
      fprintf(stderr, "compare: %s %s ran past --run-timeout %g s: killed\n", c->name, mode,
              run_timeout_s);
      kill(pid, SIGKILL);
      waitpid(pid, &ws, 0);
      return -1;
    }
    usleep(50000);
  }
  int ok = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
  if (!ok) fprintf(stderr, "compare: %s %s failed (see %s)\n", c->name, mode, logpath);
  return ok ? 0 : -1;
}

/* ---- the table ---- */

static double ddp_ips(const cmp_run_t *runs, int n, const char *case_name)
{
  for (int i = 0; i < n; i++)
    if (runs[i].ok && strcmp(runs[i].mode, "ddp") == 0 && strcmp(runs[i].case_name, case_name) == 0)
      return runs[i].images_per_s;
  return 0;
}

static int write_table(const char *path, const cmp_run_t *runs, int n, int argc, char **argv)
{
  char tmp[4200];
  FILE *f = outfile_fopen_temp(path, tmp, sizeof tmp); /* a fresh private file, renamed */
  if (!f) return -1;
  time_t now = time(NULL);
  char date[64];
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
  const char *commit = getenv("COMMIT");
  fprintf(f, "# DataParallel vs DDP (tools/compare), %s, commit %s\n# command:", date,
          commit ? commit : "(set COMMIT)");
  for (int i = 0; i < argc; i++) fprintf(f, " %s%s%s", strchr(argv[i], ' ') ? "'" : "", argv[i],
                                         strchr(argv[i], ' ') ? "'" : "");
  fprintf(f, "\n# one row per device; step split: DP per device (CUDA events on each stream), "
          "DDP rank 0 only (comm = exposed all-reduce + SyncBN, idle = data wait);\n"
          "# memory: peak MiB per ledger category (cat_from_rank0 = 1: DDP rank r's categories "
          "are rank 0's, its total is its own)\n");
  fprintf(f, "case\tmode\tdevices\timages_per_s\tvs_ddp\ttrain_loss\tstep_ms\tdevice\t"
          "compute_ms\tcomm_ms\tidle_ms\tpeak_mib");
  for (int k = 0; k < CMP_NCAT; k++) fprintf(f, "\t%s_mib", cmp_categories[k]);
  fprintf(f, "\tcat_from_rank0\n");
  for (int i = 0; i < n; i++) {
    const cmp_run_t *r = &runs[i];
    if (!r->ok) {
      fprintf(f, "%s\t%s\tFAILED\n", r->case_name, r->mode);
      continue;
    }
    double base = r->ddp_ips;
    for (int d = 0; d < r->world; d++) {
      fprintf(f, "%s\t%s\t%d\t%.1f\t%.3f\t%.5f\t%.3f\t%d\t", r->case_name, r->mode, r->world,
              r->images_per_s, base > 0 ? r->images_per_s / base : 0, r->train_loss, r->step_ms,
              d);
      if (d < r->split_devs)
        fprintf(f, "%.3f\t%.3f\t%.3f", r->compute_ms[d], r->comm_ms[d], r->idle_ms[d]);
      else
        fprintf(f, "-\t-\t-");
      fprintf(f, "\t%.1f", r->peak_mib[d]);
      for (int k = 0; k < CMP_NCAT; k++) fprintf(f, "\t%.1f", r->mem_mib[d][k]);
      fprintf(f, "\t%d\n", r->mem_from_rank0[d]);
    }
  }
  return outfile_commit(f, tmp, path, 1);
}

static int mkdir_p(const char *path)
{
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p) continue;
    char c = *p;
    *p = 0;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    *p = c;
    if (!c) return 0;
  }
}

/* shmddp-train in this program's folder (installed together, or both at the top of the build
 * tree); a name without a folder was found on PATH, where shmddp-train is too. */
static const char *default_train(const char *self, char *buf, size_t len)
{
  const char *slash = strrchr(self, '/');
  if (!slash) return "shmddp-train";
  snprintf(buf, len, "%.*s/shmddp-train", (int)(slash - self), self);
  return buf;
}

/* The command line. */
typedef struct {
  const char *out, *work, *table, *train, *title;
  long skip;
  cmp_case_t cases[MAX_CASES];
  int ncases;
  char modes[64];                /* --modes as given; mode[] points into it */
  const char *mode[MAX_MODES];
  int nmodes;
  char beside[4096];             /* the default --train */
} cmp_opts_t;

/* --case NAME='train flags': 0, or 2 after saying what a case looks like. */
static int parse_case(cmp_opts_t *o, const char *v)
{
  const char *eq = strchr(v, '=');
  if (!eq || eq == v || eq - v >= 32 || o->ncases == MAX_CASES) {
    fprintf(stderr, "compare: --case wants NAME='train flags' (NAME up to 31 characters, "
            "at most %d cases)\n", MAX_CASES);
    return 2;
  }
  cmp_case_t *c = &o->cases[o->ncases++];
  snprintf(c->name, sizeof c->name, "%.*s", (int)(eq - v), v);
  snprintf(c->flags, sizeof c->flags, "%s", eq + 1);
  return 0;
}

/* --modes, split at the commas: 0, or 2 after naming a mode that is not one. */
static int parse_modes(cmp_opts_t *o)
{
  for (char *m = strtok(o->modes, ","); m; m = strtok(NULL, ",")) {
    if (strcmp(m, "dp") && strcmp(m, "ddp") && strcmp(m, "ddp-syncbn")) {
      fprintf(stderr, "compare: --modes: '%s' is not one of dp, ddp, ddp-syncbn\n", m);
      return 2;
    }
    if (o->nmodes < MAX_MODES) o->mode[o->nmodes++] = m;
  }
  return 0;
}

/* The command line into o: -1 to run, else the exit status (0 after --help or --version). */
static int parse_args(int argc, char **argv, cmp_opts_t *o)
{
  o->table = "compare.tsv";
  o->train = default_train(argv[0], o->beside, sizeof o->beside);
  o->title = "DataParallel vs DDP";
  snprintf(o->modes, sizeof o->modes, "dp,ddp,ddp-syncbn");
  o->skip = 8;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (!strcmp(a, "--version")) {
      printf("shmddp-compare %s\n", SHMDDP_BUILD_VERSION);
      return 0;
    }
    if (!v) {
      fprintf(stderr, "compare: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--out")) o->out = v;
    else if (!strcmp(a, "--train")) o->train = v;
    else if (!strcmp(a, "--work")) o->work = v;
    else if (!strcmp(a, "--table")) o->table = v;
    else if (!strcmp(a, "--title")) o->title = v;
    else if (!strcmp(a, "--skip")) o->skip = atol(v);
    else if (!strcmp(a, "--run-timeout")) run_timeout_s = atof(v);
    else if (!strcmp(a, "--modes")) snprintf(o->modes, sizeof o->modes, "%s", v);
    else if (!strcmp(a, "--case")) {
      if (parse_case(o, v) != 0) return 2;
    } else {
      fprintf(stderr, "compare: unknown option %s\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (!o->out || o->ncases == 0) {
    usage(stderr);
    return 2;
  }
  return parse_modes(o) != 0 ? 2 : -1;
}

/* Every case in every mode, one run after another, each in WORKDIR/CASE-MODE; returns the
 * number of runs that failed (their rows stay empty). */
static int run_all(const cmp_opts_t *o, const char *workdir, cmp_run_t *runs)
{
  int nruns = 0, failed = 0;
  for (int c = 0; c < o->ncases; c++)
    for (int m = 0; m < o->nmodes; m++) {
      cmp_run_t *r = &runs[nruns++];
      snprintf(r->case_name, sizeof r->case_name, "%.31s", o->cases[c].name);
      snprintf(r->mode, sizeof r->mode, "%s", o->mode[m]);
      char dir[1200];
      snprintf(dir, sizeof dir, "%.1000s/%.31s-%.15s", workdir, o->cases[c].name, o->mode[m]);
      if (mkdir_p(dir) != 0 || run_train(o->train, &o->cases[c], o->mode[m], dir) != 0 ||
          cmp_read_run(r, dir, o->skip) != 0) {
        failed++;
        continue;
      }
      fprintf(stderr, "compare: %s %s: %.1f images/s, peak MiB", r->case_name, r->mode,
              r->images_per_s);
      for (int d = 0; d < r->world; d++) fprintf(stderr, " %.0f", r->peak_mib[d]);
      fprintf(stderr, "\n");
    }
  for (int i = 0; i < nruns; i++) runs[i].ddp_ips = ddp_ips(runs, nruns, runs[i].case_name);
  return failed;
}

/* The table and the charts in --out: 0, or 1 after saying which could not be written. */
static int write_outputs(const cmp_opts_t *o, const cmp_run_t *runs, int nruns, int failed,
                         int argc, char **argv)
{
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", o->out, o->table);
  if (write_table(path, runs, nruns, argc, argv) != 0) {
    fprintf(stderr, "compare: cannot write %s\n", path);
    return 1;
  }
  if (cmp_write_charts(o->out, runs, nruns, o->title) != 0) {
    fprintf(stderr, "compare: cannot write the charts in %s\n", o->out);
    return 1;
  }
  fprintf(stderr, "compare: wrote %s and %s/{throughput,step_time,memory}.svg%s\n", path, o->out,
          failed ? " (some runs FAILED)" : "");
  return 0;
}

int main(int argc, char **argv)
{
  cmp_opts_t o = {0};
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0) return rc;
  char workdir[1024];
  snprintf(workdir, sizeof workdir, "%s", o.work ? o.work : o.out);
  if (!o.work) strncat(workdir, "/runs", sizeof workdir - strlen(workdir) - 1);
  if (mkdir_p(o.out) != 0 || mkdir_p(workdir) != 0) {
    fprintf(stderr, "compare: cannot create %s or %s: %s\n", o.out, workdir, strerror(errno));
    return 1;
  }
  int nruns = o.ncases * o.nmodes;
  cmp_run_t *runs = calloc((size_t)nruns, sizeof *runs);
  if (!runs) return 1;
  int failed = run_all(&o, workdir, runs);
  rc = write_outputs(&o, runs, nruns, failed, argc, argv);
  free(runs);
  return rc ? rc : failed ? 1 : 0;
}
