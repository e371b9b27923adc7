/* liveness.c — the peer watcher: one thread per communicator, asleep in poll() on an eventfd
 * (the stop request) and a pidfd per peer process. A pidfd becomes readable when its process
 * exits, however it exits (SIGKILL included), so a death is seen at once rather than after a
 * polling interval. Where pidfd_open is missing (Linux < 5.3) or refused, the thread falls back
 * to checking those peers every 200 ms (shm_pid_alive: the pid and its start time, so a reused
 * pid is not taken for the peer). A poll that fails for good stops the group with the reason.
 *
 * A peer that left properly (shmddp_comm_destroy marks it EXITED) is simply no longer watched;
 * one that dies while RUNNING is marked FAILED and the group's abort is recorded, naming it. */
#include "config.h"

#include "shm/liveness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shm/abort.h"
#include "shm/wait.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* the same number on every architecture */
#endif

#define FALLBACK_POLL_MS 200
#define CHECK_POLL_MS 1000

uint64_t shm_pidns_self(void)
{
  struct stat sb;
  return stat("/proc/self/ns/pid", &sb) == 0 ? (uint64_t)sb.st_ino : 0;
}

/* Reads /proc/PID/stat: the state letter and the start time; 0 on success. */
static int read_stat(int32_t pid, char *state, uint64_t *start)
{
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  /* The command name (field 2) may hold spaces and parentheses: fields are counted from the
   * last ')'. Field 3 is the state, field 22 the start time. */
  const char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ' || !p[2]) return -1;
  *state = p[2];
  p += 2;
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return -1;
    p++;
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(p, &end, 10);
  if (errno || end == p) return -1;
  *start = v;
  return 0;
}

uint64_t shm_pid_start(int32_t pid)
{
  char state;
  uint64_t start = 0;
  return pid > 0 && read_stat(pid, &state, &start) == 0 ? start : 0;
}

int shm_pid_alive(int32_t pid, uint64_t pidns, uint64_t start)
{
  if (pid <= 0) return 0;
  uint64_t mine = shm_pidns_self();
  if (pidns && mine && pidns != mine) return 1; /* cannot tell: not ours to judge */
  if (kill((pid_t)pid, 0) != 0) return errno != ESRCH && errno != EPERM;
  char state;
  uint64_t now = 0;
  if (read_stat(pid, &state, &now) != 0) return 1; /* no /proc: the pid exists, so alive */
  if (state == 'Z' || state == 'X') return 0;
  return !(start && now != start);
}

struct shm_watch {
  shm_segment_t *seg;
  int self;
  int stop_fd;
  pthread_t thread;
  int npeers;
  int rank[SHMDDP_MAX_RANKS];   /* the peer each entry watches */
  int32_t pid[SHMDDP_MAX_RANKS];
  uint64_t start[SHMDDP_MAX_RANKS]; /* the peer's published start time (0: unknown) */
  int pidfd[SHMDDP_MAX_RANKS];  /* -1: watched by kill(pid, 0) */
  int done[SHMDDP_MAX_RANKS];   /* left or dead: no longer watched */
};

static void peer_gone(struct shm_watch *w, int i)
{
  w->done[i] = 1;
  shm_rank_info_t *ri = &w->seg->hdr->rank[w->rank[i]];
  int32_t running = SHM_RANK_RUNNING;
  if (!atomic_compare_exchange_strong(&ri->state, &running, SHM_RANK_FAILED)) return; /* left */
  shm_abort(w->seg, SHMDDP_ERR_ABORTED, w->rank[i],
            "rank %d (pid %d) died while it was still a member (killed, or it exited without "
            "shmddp_comm_destroy)", w->rank[i], (int)w->pid[i]);
  shm_wake_all(w->seg);
}

/* The watcher cannot watch any more (poll failed for good): the group stops now, with the
 * reason, rather than hanging later on a death nobody would see. */
static void watch_failed(struct shm_watch *w, int e)
{
  shm_abort(w->seg, SHMDDP_ERR_SYSTEM, w->self,
            "rank %d's peer watcher failed (poll: %s), so a dead peer could no longer be "
            "noticed: the group stops", w->self, strerror(e));
  shm_wake_all(w->seg);
}

static void *watch_main(void *arg)
{
  struct shm_watch *w = arg;
  for (;;) {
    struct pollfd pfd[SHMDDP_MAX_RANKS + 1];
    int idx[SHMDDP_MAX_RANKS + 1];
    int n = 0, fallback = 0;
    pfd[n].fd = w->stop_fd;
    pfd[n].events = POLLIN;
    idx[n++] = -1;
    for (int i = 0; i < w->npeers; i++) {
      if (w->done[i]) continue;
      if (w->pidfd[i] < 0) {
        fallback = 1;
        continue;
      }
      pfd[n].fd = w->pidfd[i];
      pfd[n].events = POLLIN;
      idx[n++] = i;
    }
    /* pidfds wake the thread at a death; the bounded sleep also looks at the peers without one
     * and makes a poll that started failing known within a second. */
    int rc = poll(pfd, (nfds_t)n, fallback ? FALLBACK_POLL_MS : CHECK_POLL_MS);
    if (rc < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ENOMEM) continue;
      watch_failed(w, errno);
      return NULL;
    }
    if (pfd[0].revents) return NULL; /* stop */
    for (int k = 1; k < n; k++)
      if (pfd[k].revents) peer_gone(w, idx[k]);
    for (int i = 0; i < w->npeers; i++)
      if (!w->done[i] && w->pidfd[i] < 0 &&
          !shm_pid_alive(w->pid[i], atomic_load(&w->seg->hdr->rank[w->rank[i]].pidns), w->start[i]))
        peer_gone(w, i);
  }
}

shmddp_status_t shm_watch_start(shm_segment_t *seg, int self, shm_watch_t **out, char *err,
                                size_t errlen)
{
  *out = NULL;
  struct shm_watch *w = calloc(1, sizeof *w);
  if (!w) {
    snprintf(err, errlen, "out of memory starting the peer watcher");
    return SHMDDP_ERR_NOMEM;
  }
  w->seg = seg;
  w->self = self;
  int32_t me = (int32_t)getpid();
  uint64_t ns = shm_pidns_self();
  for (int r = 0; r < seg->nranks; r++) {
    shm_rank_info_t *ri = &seg->hdr->rank[r];
    int32_t pid = atomic_load(&ri->pid);
    uint64_t pns = atomic_load(&ri->pidns);
    if (r == self || pid == me) continue; /* in this process: it cannot die alone */
    if (pns && ns && pns != ns) continue; /* another PID namespace: the timeout must do */
    int i = w->npeers++;
    w->rank[i] = r;
    w->pid[i] = pid;
    w->start[i] = atomic_load(&ri->start);
    /* The pidfd first, then the start time: if the pid was reused before the pidfd was opened,
     * the pidfd holds the newcomer, whose start time differs; the peer is gone either way. */
    w->pidfd[i] = pid > 0 ? (int)syscall(SYS_pidfd_open, (pid_t)pid, 0) : -1;
    if (pid <= 0 || (w->pidfd[i] < 0 && errno == ESRCH))
      w->done[i] = -1; /* already gone: reported below */
    else if (!shm_pid_alive(pid, pns, w->start[i]))
      w->done[i] = -1;
  }
  w->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (w->stop_fd < 0) {
    snprintf(err, errlen, "cannot create the peer watcher's eventfd: %s", strerror(errno));
    shm_watch_stop(w);
    return SHMDDP_ERR_SYSTEM;
  }
  for (int i = 0; i < w->npeers; i++)
    if (w->done[i] < 0) peer_gone(w, i);
  /* The thread takes no signals: they stay with the application's threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&w->thread, NULL, watch_main, w);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    close(w->stop_fd);
    w->stop_fd = -1;
    snprintf(err, errlen, "cannot start the peer watcher thread: %s", strerror(rc));
    shm_watch_stop(w);
    return SHMDDP_ERR_SYSTEM;
  }
  *out = w;
  return SHMDDP_OK;
}

void shm_watch_stop(shm_watch_t *w)
{
  if (!w) return;
  if (w->stop_fd >= 0) {
    uint64_t one = 1;
    if (write(w->stop_fd, &one, sizeof one) == sizeof one) pthread_join(w->thread, NULL);
    close(w->stop_fd);
  }
  for (int i = 0; i < w->npeers; i++)
    if (w->pidfd[i] >= 0) close(w->pidfd[i]);
  free(w);
}
