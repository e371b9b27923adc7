/* segment.c — create, map and unlink the group's shared-memory segment.
 * A new segment is created exclusively, mode 0600: without a name (O_TMPFILE) when it is to be
 * published under a join id's name, else under a random name (getrandom) with O_CREAT|O_EXCL,
 * so another user cannot attach and a stale segment of a crashed run can never be mistaken for
 * ours. A segment opened by name is mapped only once its owner and mode are ours alone. Space is
 * reserved with posix_fallocate so a full /dev/shm fails here, with a message, instead of
 * raising SIGBUS in the middle of a collective. */
#include "config.h"

#include "shm/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define SHM_DIR_PATH "/dev/shm"

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static size_t header_size(void) { return align_up(sizeof(shm_header_t), 4096); }

static size_t aux_slot(size_t slot_bytes)
{
  return slot_bytes < SHM_AUX_SLOT_BYTES ? slot_bytes : SHM_AUX_SLOT_BYTES;
}

size_t shm_segment_size(int nranks, size_t slot_bytes)
{
  slot_bytes = align_up(slot_bytes, 4096);
  size_t per_rank = SHM_CHANNELS * SHM_CTRL_BYTES + SHM_XCHG_BYTES + slot_bytes +
                    (SHM_CHANNELS - 1) * aux_slot(slot_bytes);
  return header_size() + (size_t)nranks * per_rank;
}

size_t shm_slot_bytes(const shm_segment_t *seg, int channel)
{
  return channel == 0 ? seg->slot_bytes : aux_slot(seg->slot_bytes);
}

void *shm_rank_ctrl(const shm_segment_t *seg, int channel, int rank)
{
  return (char *)seg->base + header_size() +
         ((size_t)channel * (size_t)seg->nranks + (size_t)rank) * SHM_CTRL_BYTES;
}

void *shm_rank_xchg(const shm_segment_t *seg, int rank)
{
  return (char *)seg->base + header_size() +
         (size_t)SHM_CHANNELS * (size_t)seg->nranks * SHM_CTRL_BYTES + (size_t)rank * SHM_XCHG_BYTES;
}

void *shm_rank_slot(const shm_segment_t *seg, int channel, int rank)
{
  char *slots = (char *)seg->base + header_size() +
                (size_t)seg->nranks * (SHM_CHANNELS * SHM_CTRL_BYTES + SHM_XCHG_BYTES);
  if (channel == 0) return slots + (size_t)rank * seg->slot_bytes;
  slots += (size_t)seg->nranks * seg->slot_bytes;
  return slots + ((size_t)(channel - 1) * (size_t)seg->nranks + (size_t)rank) *
                     aux_slot(seg->slot_bytes);
}

static void random_name(char *buf, size_t len)
{
  unsigned char r[8];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
    /* Unpredictability is defence in depth here: O_EXCL already refuses an existing name. */
    uint64_t x = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)buf;
    memcpy(r, &x, sizeof r);
  }
  snprintf(buf, len, "/shmddp-%d-%02x%02x%02x%02x%02x%02x%02x%02x", (int)getpid(), r[0], r[1],
           r[2], r[3], r[4], r[5], r[6], r[7]);
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static shmddp_status_t check_args(int nranks, size_t slot_bytes, char *err, size_t errlen)
{
  if (nranks < 1 || nranks > SHMDDP_MAX_RANKS) {
    snprintf(err, errlen, "world size %d is out of range: use 1 to %d ranks", nranks,
             SHMDDP_MAX_RANKS);
    return SHMDDP_ERR_INVALID;
  }
  if (slot_bytes < SHM_MIN_SLOT_BYTES) {
    snprintf(err, errlen, "staging slot of %zu bytes is too small: use at least %zu KiB",
             slot_bytes, SHM_MIN_SLOT_BYTES >> 10);
    return SHMDDP_ERR_INVALID;
  }
  if (slot_bytes > SHM_MAX_SLOT_BYTES) {
    snprintf(err, errlen, "staging slot of %zu bytes is too large: use at most %zu MiB",
             slot_bytes, SHM_MAX_SLOT_BYTES >> 20);
    return SHMDDP_ERR_INVALID;
  }
  return SHMDDP_OK;
}

/* A new segment file, created exclusively with mode 0600 (fchmod too: a umask could have taken
 * the owner's write bit). unnamed: an O_TMPFILE in /dev/shm (seg->name ""), which no process
 * can open by name before it is published; where /dev/shm does not offer that, and for the
 * launcher's segments, a fresh random name. -1 with errno on failure. */
static int open_new(shm_segment_t *seg, int unnamed)
{
  int fd = -1;
  seg->name[0] = 0;
  if (unnamed) {
    fd = open(SHM_DIR_PATH, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) return -1;
  }
  for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
    random_name(seg->name, sizeof seg->name);
    fd = shm_open(seg->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd >= 0 && fchmod(fd, 0600) != 0) {
    int e = errno;
    close(fd);
    if (seg->name[0]) shm_unlink(seg->name);
    errno = e;
    return -1;
  }
  return fd;
}

/* Sizes the new file and reserves its pages; SHMDDP_OK or a message. */
static shmddp_status_t reserve(int fd, size_t bytes, int nranks, char *err, size_t errlen)
{
  int rc = ftruncate(fd, (off_t)bytes);
  if (rc == 0) rc = posix_fallocate(fd, 0, (off_t)bytes);
  else rc = errno;
  if (rc == 0) return SHMDDP_OK;
  if (rc == ENOSPC) {
    snprintf(err, errlen, "/dev/shm ran out of space reserving %.1f MiB for %d ranks: give the "
             "container more (docker run --shm-size=%zum) or use smaller staging slots "
             "(SHMDDP_SLOT_MB)", mib(bytes), nranks, (size_t)(mib(bytes) * 2 + 64));
    return SHMDDP_ERR_NOSPACE;
  }
  snprintf(err, errlen, "cannot size the shared-memory segment to %.1f MiB: %s", mib(bytes),
           strerror(rc));
  return SHMDDP_ERR_SYSTEM;
}

/* Creates, sizes and maps a new segment (see open_new); *fd_out keeps the file open when not
 * NULL. A named one is left in /dev/shm for the caller. */
static shmddp_status_t create_mapped(shm_segment_t *seg, int nranks, size_t slot_bytes,
                                     double timeout_s, const unsigned char *auth, int *fd_out,
                                     char *err, size_t errlen)
{
  memset(seg, 0, sizeof *seg);
  shmddp_status_t st = check_args(nranks, slot_bytes, err, errlen);
  if (st != SHMDDP_OK) return st;
  slot_bytes = align_up(slot_bytes, 4096);
  size_t bytes = shm_segment_size(nranks, slot_bytes);

  struct statvfs vfs;
  if (statvfs(SHM_DIR_PATH, &vfs) == 0) {
    size_t avail = (size_t)vfs.f_bavail * (size_t)vfs.f_frsize;
    if (avail < bytes) {
      snprintf(err, errlen,
               "/dev/shm has %.1f MiB free but %d ranks need %.1f MiB of shared memory: free "
               "space in /dev/shm, give the container more (docker run --shm-size=%zum), or "
               "use smaller staging slots (SHMDDP_SLOT_MB)",
               mib(avail), nranks, mib(bytes), (size_t)(mib(bytes) * 2 + 64));
      return SHMDDP_ERR_NOSPACE;
    }
  }

  int fd = open_new(seg, fd_out != NULL);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create a shared-memory segment in /dev/shm: %s (is /dev/shm "
             "mounted and writable?)", strerror(errno));
    return SHMDDP_ERR_SYSTEM;
  }
  st = reserve(fd, bytes, nranks, err, errlen);
  void *base = MAP_FAILED;
  if (st == SHMDDP_OK) {
    base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      snprintf(err, errlen, "cannot map the shared-memory segment (%.1f MiB): %s", mib(bytes),
               strerror(errno));
      st = SHMDDP_ERR_SYSTEM;
    }
  }
  if (st != SHMDDP_OK || !fd_out) close(fd);
  if (st != SHMDDP_OK) {
    if (seg->name[0]) shm_unlink(seg->name);
    return st;
  }
  if (fd_out) *fd_out = fd;
  seg->base = base;
  seg->bytes = bytes;
  seg->nranks = nranks;
  seg->slot_bytes = slot_bytes;
  seg->hdr = (shm_header_t *)base;

  shm_header_t *h = seg->hdr; /* fresh tmpfs pages are zero */
  h->version = SHM_VERSION;
  h->nranks = nranks;
  h->bytes = bytes;
  h->slot_bytes = slot_bytes;
  h->timeout_s = timeout_s;
  if (auth) memcpy(h->auth, auth, sizeof h->auth);
  atomic_store(&h->abort_rank, -1);
  /* The magic last: a reader that sees it sees a complete header. */
  atomic_thread_fence(memory_order_release);
  h->magic = SHM_MAGIC;
  return SHMDDP_OK;
}

shmddp_status_t shm_segment_create(shm_segment_t *seg, int nranks, size_t slot_bytes,
                                   double timeout_s, char *err, size_t errlen)
{
  shmddp_status_t st = create_mapped(seg, nranks, slot_bytes, timeout_s, NULL, NULL, err, errlen);
  /* Forked ranks inherit the mapping; the name is no longer needed. */
  if (st == SHMDDP_OK) shm_unlink(seg->name);
  return st;
}

shmddp_status_t shm_segment_create_unpublished(shm_segment_t *seg, int nranks, size_t slot_bytes,
                                               double timeout_s, const unsigned char *auth,
                                               int *fd, char *err, size_t errlen)
{
  *fd = -1;
  return create_mapped(seg, nranks, slot_bytes, timeout_s, auth, fd, err, errlen);
}

int shm_segment_publish(shm_segment_t *seg, int fd, const char *path)
{
  int rc;
  if (seg->name[0]) {
    char priv[128];
    snprintf(priv, sizeof priv, "%s%s", SHM_DIR_PATH, seg->name);
    rc = link(priv, path);
    int e = errno;
    unlink(priv);
    errno = e;
  } else {
    /* linkat(fd, "", ..., AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; the /proc link does not. */
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    rc = linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
  }
  int e = rc == 0 ? 0 : errno;
  close(fd);
  return e;
}

shmddp_status_t shm_header_check(const shm_header_t *h, size_t bytes, char *err, size_t errlen)
{
  if (bytes < sizeof(shm_header_t) || h->magic != SHM_MAGIC) {
    snprintf(err, errlen, "the shared-memory segment is not a shmddp segment");
    return SHMDDP_ERR_INVALID;
  }
  atomic_thread_fence(memory_order_acquire);
  if (h->version != SHM_VERSION) {
    snprintf(err, errlen, "the shared-memory segment has layout version %u; this shmddp reads "
             "version %d (every rank of a group must run the same shmddp)", h->version,
             SHM_VERSION);
    return SHMDDP_ERR_INVALID;
  }
  /* Each bound before the arithmetic that uses it: shm_segment_size must not overflow. */
  int ok = h->nranks >= 1 && h->nranks <= SHMDDP_MAX_RANKS && h->slot_bytes >= SHM_MIN_SLOT_BYTES &&
           h->slot_bytes <= SHM_MAX_SLOT_BYTES && h->slot_bytes % 4096 == 0 && h->bytes == bytes &&
           shm_segment_size(h->nranks, (size_t)h->slot_bytes) == bytes;
  if (!ok) {
    snprintf(err, errlen, "the shared-memory segment's header is inconsistent (%d ranks, slots "
             "of %llu bytes, %llu bytes in all, file of %zu bytes): not joined", (int)h->nranks,
             (unsigned long long)h->slot_bytes, (unsigned long long)h->bytes, bytes);
    return SHMDDP_ERR_INVALID;
  }
  return SHMDDP_OK;
}

/* A regular file of this process's effective uid that no one else may read or write. */
static shmddp_status_t check_owner(const struct stat *sb, const char *path, char *err,
                                   size_t errlen)
{
  uid_t me = geteuid();
  if (S_ISREG(sb->st_mode) && sb->st_uid == me && (sb->st_mode & 077) == 0) return SHMDDP_OK;
  if (!S_ISREG(sb->st_mode)) {
    snprintf(err, errlen, "%s is not a regular file (mode %06o): not a shmddp segment; not "
             "joined", path, (unsigned)sb->st_mode);
    return SHMDDP_ERR_INVALID;
  }
  snprintf(err, errlen, "%s belongs to uid %u with mode %04o, but a group's segment belongs to "
           "the user of its ranks (uid %u) with mode 0600: it was not made by a rank of this "
           "group, so it was not joined (run every rank as one user; remove the file if it is "
           "stale)", path, (unsigned)sb->st_uid, (unsigned)(sb->st_mode & 07777), (unsigned)me);
  return SHMDDP_ERR_INVALID;
}

shmddp_status_t shm_segment_map_fd(shm_segment_t *seg, int fd, const char *path, char *err,
                                   size_t errlen)
{
  memset(seg, 0, sizeof *seg);
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    snprintf(err, errlen, "cannot stat %s: %s", path, strerror(errno));
    return SHMDDP_ERR_SYSTEM;
  }
  shmddp_status_t st = check_owner(&sb, path, err, errlen);
  if (st != SHMDDP_OK) return st;
  if (sb.st_size < (off_t)sizeof(shm_header_t) || (uint64_t)sb.st_size > SIZE_MAX / 2) {
    snprintf(err, errlen, "%s is %lld bytes: not a shmddp segment", path,
             (long long)sb.st_size);
    return SHMDDP_ERR_INVALID;
  }
  size_t bytes = (size_t)sb.st_size;
  void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    snprintf(err, errlen, "cannot map %s (%.1f MiB): %s", path, mib(bytes), strerror(errno));
    return SHMDDP_ERR_SYSTEM;
  }
  shm_header_t *h = base;
  st = shm_header_check(h, bytes, err, errlen);
  if (st != SHMDDP_OK) {
    munmap(base, bytes);
    return st;
  }
  seg->base = base;
  seg->bytes = bytes;
  seg->nranks = h->nranks;
  seg->slot_bytes = h->slot_bytes;
  seg->hdr = h;
  return SHMDDP_OK;
}

void shm_segment_destroy(shm_segment_t *seg)
{
  if (seg->base) munmap(seg->base, seg->bytes);
  memset(seg, 0, sizeof *seg);
}
