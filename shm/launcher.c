/* launcher.c — fork N ranks that share one segment, and supervise them.
 *
 * Order matters: the segment is created and every rank forked before anything touches CUDA (a
 * CUDA context does not survive fork()). Ranks get PR_SET_PDEATHSIG, so a launcher killed with
 * SIGKILL takes them along, and their own process group, so a terminal's Ctrl-C reaches the
 * launcher alone, which forwards it once.
 *
 * Supervision: the launcher blocks SIGCHLD/SIGINT/SIGTERM and takes them with sigtimedwait. When
 * a rank exits non-zero or is killed, the launcher marks it failed in the segment and records the
 * group's abort (naming the rank and its exit status or signal); every wait loop of every other
 * rank sees that within its sleep bound (50 ms) and returns SHMDDP_ERR_ABORTED. Ranks still alive
 * after grace_s (default 2 s) are killed. The first SIGINT/SIGTERM is forwarded (ranks stop at a
 * step boundary and checkpoint, see shm_stop_requested); repeats are absorbed, and only
 * stop_grace_s passing (default 30 s, SHMDDP_STOP_GRACE) kills the ranks. Supervisors signal
 * more than once: GNU timeout sends its signal to the launcher and again to its process group,
 * systemd and Slurm repeat theirs; killing at the second signal lost the checkpoint every time.
 *
 * A stop signal inherited as ignored stays ignored, by the launcher and by its ranks. That is the
 * old Unix rule (`if (signal(SIGINT, SIG_IGN) != SIG_IGN) ...`) and what a POSIX shell relies
 * on: it starts a script's background jobs (`./train ... &` in sh) with SIGINT and SIGQUIT
 * ignored, so that a Ctrl-C meant for the script's foreground command does not reach them. Before
 * this rule the launcher took SIGINT once it had blocked it, but a SIGINT arriving earlier was
 * discarded: whether `kill -INT` stopped a background run depended on how far it had got. Now it
 * never does; SIGTERM (never ignored by shells, not by nohup either) stops such a run the same
 * way, with exit status 143. An interactive shell's background jobs (job control) and nohup keep
 * SIGINT's default, so there both signals work.
 */
#include "config.h"

#include "shm/launcher.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/abort.h"
#include "shm/check.h"
#include "shm/timeutil.h"
#include "shm/wait.h"

static shm_header_t *child_hdr; /* the rank's view, for its signal handler */
static volatile sig_atomic_t child_signals;

/* SIGINT/SIGTERM: ask for a stop at the next step boundary. A repeat changes nothing: the
 * launcher kills the rank once the stop grace has passed. */
static void child_on_signal(int sig)
{
  if (child_signals++ > 0) return;
  if (child_hdr) {
    uint32_t zero = 0;
    atomic_compare_exchange_strong(&child_hdr->stop_signal, &zero, (uint32_t)sig);
    atomic_fetch_add(&child_hdr->wake, 1);
  }
}

int shm_stop_requested(const shm_segment_t *seg)
{
  return (int)atomic_load_explicit(&seg->hdr->stop_signal, memory_order_relaxed);
}

static void describe_status(int status, char *buf, size_t len)
{
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    snprintf(buf, len, "was killed by signal %d (%s)", sig, strsignal(sig));
  } else if (WIFEXITED(status)) {
    snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
  } else {
    snprintf(buf, len, "ended with wait status 0x%x", status);
  }
}

static int status_exit_code(int status)
{
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 1;
}

/* Whether sig was ignored when the launcher started (inherited SIG_IGN): then it stays so. */
static int inherited_ignored(int sig)
{
  struct sigaction sa;
  return sigaction(sig, NULL, &sa) == 0 && !(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_IGN;
}

static void run_child(shm_segment_t *seg, int rank, pid_t launcher, const sigset_t *oldmask,
                      const sigset_t *stop_sigs, shm_rank_main fn, void *arg)
{
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(127); /* the launcher died before prctl took effect */
  setpgid(0, 0);
  child_hdr = seg->hdr;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = child_on_signal;
  sigemptyset(&sa.sa_mask);
  if (sigismember(stop_sigs, SIGINT)) sigaction(SIGINT, &sa, NULL); /* else stays ignored */
  if (sigismember(stop_sigs, SIGTERM)) sigaction(SIGTERM, &sa, NULL);
  signal(SIGCHLD, SIG_DFL);
  sigprocmask(SIG_SETMASK, oldmask, NULL);

  char buf[16];
  snprintf(buf, sizeof buf, "%d", rank);
  setenv("SHMDDP_RANK", buf, 1);
  setenv("SHMDDP_LOCAL_RANK", buf, 1);
  snprintf(buf, sizeof buf, "%d", seg->nranks);
  setenv("SHMDDP_WORLD_SIZE", buf, 1);

  shm_rank_info_t *me = &seg->hdr->rank[rank];
  atomic_store(&me->pid, (int32_t)getpid());
  atomic_store(&me->state, SHM_RANK_RUNNING);
  int rc = fn(seg, rank, arg);
  fflush(NULL);
  if (rc != 0)
    shm_abort(seg, SHMDDP_ERR_ABORTED, rank, "rank %d failed (exit status %d)", rank, rc);
  atomic_store(&me->state, rc == 0 ? SHM_RANK_EXITED : SHM_RANK_FAILED);
  shm_wake_all(seg);
  _exit(rc & 0xff ? rc & 0xff : (rc ? 1 : 0));
}

static void kill_all(const pid_t *pids, const int *alive, int n, int sig)
{
  for (int r = 0; r < n; r++)
    if (alive[r]) kill(pids[r], sig);
}

/* What the supervisor knows while it watches the ranks. */
typedef struct {
  const shm_launch_opts_t *o;
  const char *label;
  shm_segment_t *seg;
  shmddp_launch_result_t *res;
  sigset_t block; /* what it takes with sigtimedwait: the stop signals and SIGCHLD */
  pid_t pids[SHMDDP_MAX_RANKS];
  int alive[SHMDDP_MAX_RANKS];
  int status[SHMDDP_MAX_RANKS];
  int nalive;
  int first_failed, killed, sent_kill;
  int interrupted;      /* the stop signal received, 0 before */
  int repeat_said;      /* a repeated stop signal has been reported */
  double stop_at;       /* when the stop signal came */
  double kill_deadline; /* 0: none */
} supervisor_t;

/* The stop signals this run takes: SIGINT and SIGTERM, less any inherited as ignored (see the
 * top of this file). Blocking an ignored signal would queue it instead of discarding it. */
static void block_signals(supervisor_t *sv, sigset_t *stop_sigs, sigset_t *oldmask)
{
  sigemptyset(stop_sigs);
  if (!inherited_ignored(SIGINT)) sigaddset(stop_sigs, SIGINT);
  if (!inherited_ignored(SIGTERM)) sigaddset(stop_sigs, SIGTERM);
  sv->block = *stop_sigs;
  sigaddset(&sv->block, SIGCHLD);
  sigprocmask(SIG_BLOCK, &sv->block, oldmask);
  if (!sv->o->quiet && !sigismember(stop_sigs, SIGINT))
    fprintf(stderr, "%s: SIGINT was ignored when this started (a background job of a script?) "
            "and stays ignored; stop the run with SIGTERM\n", sv->label);
  fflush(NULL);
}

/* Fork every rank. A failed fork stops the ranks already forked and undoes everything. */
static shmddp_status_t fork_ranks(supervisor_t *sv, const sigset_t *oldmask,
                                  const sigset_t *stop_sigs, shm_rank_main fn, void *arg)
{
  pid_t self = getpid();
  for (int r = 0; r < sv->o->nranks; r++) {
    pid_t pid = fork();
    if (pid == 0) run_child(sv->seg, r, self, oldmask, stop_sigs, fn, arg);
    if (pid < 0) {
      snprintf(sv->res->message, sizeof sv->res->message, "cannot fork rank %d: %s", r,
               strerror(errno));
      shm_abort(sv->seg, SHMDDP_ERR_SYSTEM, -1, "%s", sv->res->message);
      kill_all(sv->pids, sv->alive, r, SIGKILL);
      while (sv->nalive > 0 && wait(NULL) > 0) sv->nalive--;
      sigprocmask(SIG_SETMASK, oldmask, NULL);
      shm_segment_destroy(sv->seg);
      return SHMDDP_ERR_SYSTEM;
    }
    sv->pids[r] = pid;
    sv->alive[r] = 1;
    sv->nalive++;
  }
  return SHMDDP_OK;
}

/* Kill the ranks still alive once the deadline set by a failure or a stop signal has passed. */
static void kill_overdue(supervisor_t *sv, double now)
{
  const shm_launch_opts_t *o = sv->o;
  if (sv->kill_deadline <= 0 || now < sv->kill_deadline) return;
  for (int r = 0; r < o->nranks; r++)
    if (sv->alive[r] && !o->quiet)
      fprintf(stderr, "%s: rank %d did not stop within %.1f s; killing it\n", sv->label, r,
              sv->interrupted && sv->first_failed < 0 ? o->stop_grace_s : o->grace_s);
  kill_all(sv->pids, sv->alive, o->nranks, SIGKILL);
  sv->sent_kill = 1;
  sv->kill_deadline = 0;
}

/* Move the kill deadline to grace_s from now, unless one comes sooner. */
static void set_deadline(supervisor_t *sv, double grace_s)
{
  double dl = shm_now() + grace_s;
  if (sv->kill_deadline == 0 || dl < sv->kill_deadline) sv->kill_deadline = dl;
}

/* SIGINT/SIGTERM to the launcher: the first is forwarded (the ranks stop at a step boundary
 * and checkpoint); repeats are absorbed (said once), and the ranks are killed only when the stop
 * grace has passed (kill_overdue). */
static void on_stop_signal(supervisor_t *sv, int sig)
{
  const shm_launch_opts_t *o = sv->o;
  if (sv->interrupted) {
    if (!o->quiet && !sv->repeat_said)
      fprintf(stderr, "%s: received %s again; still stopping (%.0f s left before the ranks are "
              "killed; SIGKILL the launcher to end now)\n", sv->label, strsignal(sig),
              sv->stop_at + o->stop_grace_s - shm_now());
    sv->repeat_said = 1;
    return;
  }
  sv->interrupted = sig;
  sv->stop_at = shm_now();
  atomic_store(&sv->seg->hdr->stop_signal, (uint32_t)sig);
  shm_wake_all(sv->seg);
  if (!o->quiet)
    fprintf(stderr, "%s: received %s; asking the ranks to stop at the end of their step (they "
            "are killed if they have not stopped in %.0f s)\n", sv->label, strsignal(sig),
            o->stop_grace_s);
  kill_all(sv->pids, sv->alive, o->nranks, sig);
  set_deadline(sv, o->stop_grace_s);
}

/* Rank r (pid) ended with wait status ws: record it in the segment and, for the first failure,
 * as the group's abort; start the deadline for the others. */
static void on_rank_end(supervisor_t *sv, int r, pid_t pid, int ws)
{
  const shm_launch_opts_t *o = sv->o;
  shmddp_launch_result_t *res = sv->res;
  sv->alive[r] = 0;
  sv->status[r] = ws;
  sv->nalive--;
  int ok = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
  /* A rank killed by a signal (not the one the user sent) is the cause, even when a peer
   * noticed its death and reported it before the launcher reaped it: name the signal. */
  int by_signal = !ok && WIFSIGNALED(ws) && !sv->sent_kill &&
                  !(sv->interrupted && WTERMSIG(ws) == sv->interrupted);
  char how[128];
  describe_status(ws, how, sizeof how);
  if (!ok && sv->first_failed < 0) {
    sv->first_failed = r;
    /* A rank that fails on its own records the group's abort before exiting; one that is
     * killed cannot, so the launcher records it. The first record names the culprit. */
    shm_abort(sv->seg, SHMDDP_ERR_ABORTED, r, "rank %d (pid %d) %s", r, (int)pid, how);
    char why[SHM_ABORT_MSG_BYTES];
    shm_abort_status(sv->seg, why, sizeof why);
    if (by_signal) snprintf(why, sizeof why, "rank %d (pid %d) %s", r, (int)pid, how);
    snprintf(res->message, sizeof res->message, "%s", why);
    if (!o->quiet && !(sv->interrupted && WIFSIGNALED(ws) && WTERMSIG(ws) == sv->interrupted))
      fprintf(stderr, "%s: %s; stopping the other ranks\n", sv->label, why);
    set_deadline(sv, o->grace_s);
  } else if (by_signal && sv->killed < 0) {
    snprintf(res->message, sizeof res->message, "rank %d (pid %d) %s", r, (int)pid, how);
    if (!o->quiet) fprintf(stderr, "%s: %s\n", sv->label, res->message);
  }
  if (by_signal && sv->killed < 0) sv->killed = r;
  /* The state last: a peer that sees the rank failed (shm_wait) records an abort of its own
   * unless one is there already, and it must find the one above, which names the signal. */
  shm_rank_info_t *ri = &sv->seg->hdr->rank[r];
  atomic_store(&ri->exit_status, ws);
  atomic_store(&ri->state, ok ? SHM_RANK_EXITED : SHM_RANK_FAILED);
  shm_wake_all(sv->seg);
}

/* Until every rank has ended: take stop signals, reap ranks, kill the overdue. */
static void supervise(supervisor_t *sv)
{
  while (sv->nalive > 0) {
    double now = shm_now();
    kill_overdue(sv, now);
    double wait_s = 0.1;
    if (sv->kill_deadline > 0 && sv->kill_deadline - now < wait_s)
      wait_s = sv->kill_deadline - now;
    struct timespec ts = shm_timespec(wait_s);
    siginfo_t si;
    int sig = sigtimedwait(&sv->block, &si, &ts);
    if (sig == SIGINT || sig == SIGTERM) on_stop_signal(sv, sig);
    int ws;
    pid_t pid;
    while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) {
      int r = -1;
      for (int i = 0; i < sv->o->nranks; i++)
        if (sv->pids[i] == pid) r = i;
      if (r < 0 || !sv->alive[r]) continue;
      on_rank_end(sv, r, pid, ws);
    }
  }
}

/* The run's outcome: the rank to blame and the exit code a launcher program should return. */
static void set_result(supervisor_t *sv)
{
  shmddp_launch_result_t *res = sv->res;
  int interrupted = sv->interrupted, first_failed = sv->first_failed;
  res->interrupted = interrupted;
  if (first_failed >= 0) {
    /* Blame the rank the abort record names when it did fail; the first one reaped may only
     * have reacted to it. */
    int blamed = atomic_load(&sv->seg->hdr->abort_rank);
    if (blamed >= 0 && blamed < sv->o->nranks &&
        !(WIFEXITED(sv->status[blamed]) && WEXITSTATUS(sv->status[blamed]) == 0))
      first_failed = blamed;
    if (sv->killed >= 0) first_failed = sv->killed; /* a signal outranks any report of it */
    res->failed_rank = first_failed;
    res->exit_code = status_exit_code(sv->status[first_failed]);
    if (res->exit_code == 0) res->exit_code = 1;
    if (interrupted && WIFSIGNALED(sv->status[first_failed]) &&
        WTERMSIG(sv->status[first_failed]) == interrupted)
      res->exit_code = 128 + interrupted;
  } else if (interrupted) {
    res->exit_code = 128 + interrupted;
    snprintf(res->message, sizeof res->message, "stopped by %s", strsignal(interrupted));
  } else {
    res->exit_code = 0;
  }
}

shmddp_status_t shm_launch(const shm_launch_opts_t *o, shm_rank_main fn, void *arg,
                           shmddp_launch_result_t *res)
{
  memset(res, 0, sizeof *res);
  res->failed_rank = -1;
  res->exit_code = 1;

  shm_segment_t seg;
  shmddp_status_t st = shm_segment_create(&seg, o->nranks, o->slot_bytes, o->timeout_s,
                                          res->message, sizeof res->message);
  if (st != SHMDDP_OK) return st;

  supervisor_t sv = {.o = o, .label = o->label ? o->label : "shmddp", .seg = &seg, .res = res,
                     .first_failed = -1, .killed = -1};
  sigset_t oldmask, stop_sigs;
  block_signals(&sv, &stop_sigs, &oldmask);
  TRY(fork_ranks(&sv, &oldmask, &stop_sigs, fn, arg));
  supervise(&sv);
  set_result(&sv);
  sigprocmask(SIG_SETMASK, &oldmask, NULL);
  shm_segment_destroy(&seg);
  return SHMDDP_OK;
}
