/* rendezvous.c — join by id: create-or-open the id's segment, claim a rank, wait for the rest.
 * See rendezvous.h for the protocol. */
#include "config.h"

#include "shm/rendezvous.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm/abort.h"
#include "shm/blake2s.h"
#include "shm/liveness.h"
#include "shm/timeutil.h"
#include "shm/wait.h"

#define SHM_DIR "/dev/shm"

static void shm_path(const char *name, char *buf, size_t len)
{
  snprintf(buf, len, "%s%s", SHM_DIR, name);
}

/* Remove the id's name, once per segment. */
static void unlink_once(shm_segment_t *seg, const char *name)
{
  uint32_t zero = 0;
  if (atomic_compare_exchange_strong(&seg->hdr->unlinked, &zero, 1)) {
    char path[192];
    shm_path(name, path, sizeof path);
    unlink(path);
  }
}

int shm_group_alive(const shm_header_t *h)
{
  int any = 0, n = h->nranks; /* shared memory: read once, bound before use */
  if (n < 1 || n > SHMDDP_MAX_RANKS) return 1;
  for (int r = 0; r < n; r++) {
    const shm_rank_info_t *ri = &h->rank[r];
    int32_t pid = atomic_load(&ri->pid);
    if (!pid) continue;
    any = 1;
    if (atomic_load(&ri->state) != SHM_RANK_EXITED &&
        shm_pid_alive(pid, atomic_load(&ri->pidns), atomic_load(&ri->start)))
      return 1;
  }
  return !any && shm_pid_alive(atomic_load(&h->creator_pid), atomic_load(&h->creator_pidns),
                               atomic_load(&h->creator_start));
}

/* Create a segment and publish it under the id's name. SHMDDP_OK with *created = 0 when another
 * rank published first (then nothing is left mapped and the caller opens theirs). */
static shmddp_status_t create_and_publish(shm_segment_t *seg, const shm_join_args_t *a,
                                          int *created, char *err, size_t errlen)
{
  *created = 0;
  int fd = -1;
  shmddp_status_t st = shm_segment_create_unpublished(seg, a->nranks, a->slot_bytes, a->timeout_s,
                                                      a->auth, &fd, err, errlen);
  if (st != SHMDDP_OK) return st;
  int32_t me = (int32_t)getpid();
  atomic_store(&seg->hdr->creator_pidns, shm_pidns_self());
  atomic_store(&seg->hdr->creator_start, shm_pid_start(me));
  atomic_store(&seg->hdr->creator_pid, me);
  char path[128];
  shm_path(a->name, path, sizeof path);
  int e = shm_segment_publish(seg, fd, path);
  if (e == 0) {
    snprintf(seg->name, sizeof seg->name, "%s", a->name);
    *created = 1;
    return SHMDDP_OK;
  }
  shm_segment_destroy(seg);
  if (e == EEXIST) return SHMDDP_OK;
  snprintf(err, errlen, "cannot publish the shared-memory segment %s: %s", path, strerror(e));
  return SHMDDP_ERR_SYSTEM;
}

/* Removes the join-by-id segments of this user whose groups are provably dead (every member
 * died before the last one arrived, so nobody removed the name). A live group's segment, another
 * user's file, or anything that is not a valid segment is left alone. */
static void sweep_dead_groups(void)
{
  DIR *d = opendir(SHM_DIR);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, SHM_ID_PREFIX + 1, strlen(SHM_ID_PREFIX) - 1) != 0) continue;
    char path[192], name[128], why[256];
    snprintf(name, sizeof name, "/%.100s", e->d_name);
    shm_path(name, path, sizeof path);
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    shm_segment_t seg;
    struct stat mapped, now;
    if (fstat(fd, &mapped) == 0 && shm_segment_map_fd(&seg, fd, path, why, sizeof why) == SHMDDP_OK) {
      /* Unlink only the file judged: the name must still lead to the inode that was read. */
      if (!shm_group_alive(seg.hdr) && stat(path, &now) == 0 && now.st_ino == mapped.st_ino &&
          now.st_dev == mapped.st_dev)
        unlink_once(&seg, name);
      shm_segment_destroy(&seg);
    }
    close(fd);
  }
  closedir(d);
}

typedef struct {
  shm_waiter_t w;
  shm_segment_t *seg;
  const shm_segment_t *watch;
} arrival_t;

static uint32_t arrival_pending(shm_waiter_t *w)
{
  shm_segment_t *seg = ((arrival_t *)w)->seg;
  uint32_t mask = 0;
  for (int r = 0; r < seg->nranks; r++)
    if (atomic_load_explicit(&seg->hdr->rank[r].state, memory_order_acquire) == SHM_RANK_NONE)
      mask |= 1u << r;
  return mask;
}

/* Before the group is complete there is no watcher thread: look for a member that died, and
 * at the parent group (a rank that will never come may be stopped there). */
static shmddp_status_t arrival_check(shm_waiter_t *w, char *err, size_t errlen)
{
  shm_segment_t *seg = ((arrival_t *)w)->seg;
  const shm_segment_t *watch = ((arrival_t *)w)->watch;
  char why[SHM_ABORT_MSG_BYTES];
  if (watch && shm_abort_status(watch, why, sizeof why) != SHMDDP_OK) {
    snprintf(err, errlen, "the parent group failed while this group was forming: %s", why);
    return SHMDDP_ERR_ABORTED;
  }
  for (int r = 0; r < seg->nranks; r++) {
    shm_rank_info_t *ri = &seg->hdr->rank[r];
    if (atomic_load(&ri->state) != SHM_RANK_RUNNING) continue;
    int32_t pid = atomic_load(&ri->pid);
    if (!shm_pid_alive(pid, atomic_load(&ri->pidns), atomic_load(&ri->start))) {
      atomic_store(&ri->state, SHM_RANK_FAILED);
      snprintf(err, errlen, "rank %d (pid %d) died before every rank had joined", r, (int)pid);
      return SHMDDP_ERR_ABORTED;
    }
  }
  return SHMDDP_OK;
}

/* Mark rank as come; the rank that completes the set removes the name. */
static void mark_seen(shm_segment_t *seg, int rank, const char *name)
{
  uint32_t all = seg->nranks >= 32 ? ~0u : (1u << seg->nranks) - 1;
  uint32_t bit = rank >= 0 && rank < seg->nranks ? 1u << rank : 0;
  uint32_t now = atomic_fetch_or(&seg->hdr->seen, bit) | bit;
  if (now == all) unlink_once(seg, name);
  shm_wake_all(seg);
}

/* Refuse the group this rank has mapped: record why (every member sees it at once), then keep
 * the name until every rank has come and read the reason (or the timeout passes), so that ranks
 * arriving later are refused too instead of waiting for a group that cannot form. */
static shmddp_status_t refuse_group(shm_segment_t *seg, const shm_join_args_t *a,
                                    shmddp_status_t st, double deadline, char *err,
                                    size_t errlen)
{
  shm_abort(seg, st, a->rank, "%s", err);
  st = shm_abort_status(seg, err, errlen); /* the first recorded reason wins */
  mark_seen(seg, a->rank, a->name);
  uint32_t all = (1u << seg->nranks) - 1;
  for (;;) {
    uint32_t w = atomic_load(&seg->hdr->wake);
    if (atomic_load(&seg->hdr->seen) == all || shm_now() >= deadline) break;
    shm_sleep_on_wake(seg, w, 0.05);
  }
  unlink_once(seg, a->name);
  shm_segment_destroy(seg);
  return st;
}

/* Why path cannot be opened, for a joiner: whose file it is and its mode. */
static shmddp_status_t open_refused(const char *path, int e, char *err, size_t errlen)
{
  struct stat sb;
  if (e == ELOOP) {
    snprintf(err, errlen, "%s is a symbolic link, not a shmddp segment: not joined (remove it "
             "if it is not yours to keep)", path);
    return SHMDDP_ERR_INVALID;
  }
  if ((e == EACCES || e == EPERM) && lstat(path, &sb) == 0) {
    snprintf(err, errlen, "%s belongs to uid %u with mode %04o, but a group's segment belongs "
             "to the user of its ranks (uid %u) with mode 0600: it was not made by a rank of "
             "this group, so it was not joined (run every rank as one user)", path,
             (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777), (unsigned)geteuid());
    return SHMDDP_ERR_INVALID;
  }
  snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
  return SHMDDP_ERR_SYSTEM;
}

/* Opens the id's segment: SHMDDP_OK with seg mapped, or with seg->base NULL when there is none
 * (or a provably dead one was just removed): then the caller creates. The owner and mode are
 * checked before a byte is read (shm_segment_map_fd), then the proof of the secret. */
static shmddp_status_t open_existing(shm_segment_t *seg, const shm_join_args_t *a, char *err,
                                     size_t errlen)
{
  memset(seg, 0, sizeof *seg);
  char path[128];
  shm_path(a->name, path, sizeof path);
  int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return errno == ENOENT ? SHMDDP_OK : open_refused(path, errno, err, errlen);
  shmddp_status_t st = shm_segment_map_fd(seg, fd, path, err, errlen);
  close(fd);
  if (st != SHMDDP_OK) return st;
  snprintf(seg->name, sizeof seg->name, "%s", a->name);
  shm_header_t *h = seg->hdr;
  if (shm_ct_differ(h->auth, a->auth, sizeof h->auth)) {
    shm_segment_destroy(seg);
    snprintf(err, errlen, "%s is not the segment of this id (its proof of the id's secret does "
             "not match): not joined", path);
    return SHMDDP_ERR_INVALID;
  }
  if (!shm_group_alive(h)) {
    /* Left by a crashed job that used the same id: replace it. */
    unlink_once(seg, a->name);
    shm_segment_destroy(seg);
  }
  return SHMDDP_OK;
}

shmddp_status_t shm_join(shm_segment_t *seg, const shm_join_args_t *a, char *err, size_t errlen)
{
  memset(seg, 0, sizeof *seg);
  double deadline = shm_now() + a->timeout_s;
  shmddp_status_t st = SHMDDP_OK;
  for (int attempt = 0; !seg->base; attempt++) {
    if (attempt > 0 && shm_now() > deadline) {
      snprintf(err, errlen, "timed out after %.0f s: rank %d could not open or create the "
               "segment %s", a->timeout_s, a->rank, a->name);
      return SHMDDP_ERR_TIMEOUT;
    }
    st = open_existing(seg, a, err, errlen);
    if (st != SHMDDP_OK) return st;
    if (seg->base) break;
    if (attempt == 0) sweep_dead_groups();
    int created = 0;
    st = create_and_publish(seg, a, &created, err, errlen);
    if (st != SHMDDP_OK) return st;
  }
  shm_header_t *h = seg->hdr;

  /* A refused or failed group of this job: report its reason, do not join. */
  st = shm_abort_status(seg, err, errlen);
  if (st != SHMDDP_OK) {
    if (h->nranks == a->nranks) mark_seen(seg, a->rank, a->name);
    shm_segment_destroy(seg);
    return st;
  }
  if (h->nranks != a->nranks) {
    snprintf(err, errlen, "rank %d joined with %d ranks but the group was created with %d: every "
             "rank must pass the same nranks", a->rank, a->nranks, h->nranks);
    return refuse_group(seg, a, SHMDDP_ERR_INVALID, deadline, err, errlen);
  }
  if (a->rank < 0 || a->rank >= a->nranks) {
    snprintf(err, errlen, "rank %d is out of range: ranks of this group are 0 to %d", a->rank,
             a->nranks - 1);
    return refuse_group(seg, a, SHMDDP_ERR_INVALID, deadline, err, errlen);
  }
  shm_rank_info_t *me = &h->rank[a->rank];
  int32_t zero = 0, mypid = (int32_t)getpid();
  if (!atomic_compare_exchange_strong(&me->pid, &zero, mypid)) {
    snprintf(err, errlen, "rank %d was claimed twice (by pid %d and by pid %d): every rank must "
             "pass a distinct rank", a->rank, (int)zero, (int)mypid);
    return refuse_group(seg, a, SHMDDP_ERR_INVALID, deadline, err, errlen);
  }
  atomic_store(&me->pidns, shm_pidns_self());
  atomic_store(&me->start, shm_pid_start(mypid));
  atomic_store(&me->device_mode, a->device_mode);
  atomic_store_explicit(&me->state, SHM_RANK_RUNNING, memory_order_release);
  atomic_fetch_add(&h->joined, 1);
  mark_seen(seg, a->rank, a->name);

  arrival_t aw = {{arrival_pending, arrival_check, "shmddp_comm_init_rank"}, seg, a->watch};
  double left = deadline - shm_now();
  st = shm_wait(seg, a->rank, &aw.w, left > 0.001 ? left : 0.001, err, errlen);
  if (st != SHMDDP_OK) {
    atomic_store(&me->state, SHM_RANK_FAILED);
    unlink_once(seg, a->name);
    shm_segment_destroy(seg);
    return st;
  }
  unlink_once(seg, a->name);
  for (int r = 0; r < a->nranks; r++) {
    int m = atomic_load(&h->rank[r].device_mode);
    if (m != a->device_mode) {
      snprintf(err, errlen, "rank %d %s but rank %d %s: every rank of a group must use a GPU, or "
               "none", a->rank, a->device_mode ? "drives a GPU" : "has no GPU", r,
               m ? "drives one" : "has none (SHMDDP_DEVICE_NONE, or no GPU visible)");
      atomic_store(&me->state, SHM_RANK_FAILED);
      shm_segment_destroy(seg);
      return SHMDDP_ERR_INVALID;
    }
  }
  return SHMDDP_OK;
}

void shm_leave(shm_segment_t *seg, int rank)
{
  if (!seg->base) return;
  shm_rank_info_t *me = &seg->hdr->rank[rank];
  int32_t running = SHM_RANK_RUNNING;
  atomic_compare_exchange_strong(&me->state, &running, SHM_RANK_EXITED);
  shm_wake_all(seg);
  shm_segment_destroy(seg);
}
