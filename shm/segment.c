/* segment.c — create, map and unlink the group's shared-memory segment.
 * The name is random (getrandom) and opened with O_CREAT|O_EXCL, mode 0600, so another user
 * cannot attach and a stale segment of a crashed run can never be mistaken for ours. Space is
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
  return SHMDDP_OK;
}

/* Creates, sizes and maps a segment under a fresh random name (left in /dev/shm). */
static shmddp_status_t create_mapped(shm_segment_t *seg, int nranks, size_t slot_bytes,
                                     double timeout_s, const unsigned char *nonce, char *err,
                                     size_t errlen)
{
  memset(seg, 0, sizeof *seg);
  shmddp_status_t st = check_args(nranks, slot_bytes, err, errlen);
  if (st != SHMDDP_OK) return st;
  slot_bytes = align_up(slot_bytes, 4096);
  size_t bytes = shm_segment_size(nranks, slot_bytes);

  struct statvfs vfs;
  if (statvfs("/dev/shm", &vfs) == 0) {
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

  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
    random_name(seg->name, sizeof seg->name);
    fd = shm_open(seg->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    snprintf(err, errlen, "cannot create a shared-memory segment in /dev/shm: %s (is /dev/shm "
             "mounted and writable?)", strerror(errno));
    return SHMDDP_ERR_SYSTEM;
  }
  int rc = ftruncate(fd, (off_t)bytes);
  if (rc == 0) rc = posix_fallocate(fd, 0, (off_t)bytes);
  else rc = errno;
  if (rc != 0) {
    if (rc == ENOSPC) {
      snprintf(err, errlen, "/dev/shm ran out of space reserving %.1f MiB for %d ranks: give the "
               "container more (docker run --shm-size=%zum) or use smaller staging slots "
               "(SHMDDP_SLOT_MB)", mib(bytes), nranks, (size_t)(mib(bytes) * 2 + 64));
      st = SHMDDP_ERR_NOSPACE;
    } else {
      snprintf(err, errlen, "cannot size the shared-memory segment to %.1f MiB: %s", mib(bytes),
               strerror(rc));
      st = SHMDDP_ERR_SYSTEM;
    }
    close(fd);
    shm_unlink(seg->name);
    return st;
  }
  void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int map_errno = errno;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(seg->name);
    snprintf(err, errlen, "cannot map the shared-memory segment (%.1f MiB): %s", mib(bytes),
             strerror(map_errno));
    return SHMDDP_ERR_SYSTEM;
  }
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
  if (nonce) memcpy(h->nonce, nonce, sizeof h->nonce);
  atomic_store(&h->abort_rank, -1);
  /* The magic last: a reader that sees it sees a complete header. */
  atomic_thread_fence(memory_order_release);
  h->magic = SHM_MAGIC;
  return SHMDDP_OK;
}

shmddp_status_t shm_segment_create(shm_segment_t *seg, int nranks, size_t slot_bytes,
                                   double timeout_s, char *err, size_t errlen)
{
  shmddp_status_t st = create_mapped(seg, nranks, slot_bytes, timeout_s, NULL, err, errlen);
  /* Forked ranks inherit the mapping; the name is no longer needed. */
  if (st == SHMDDP_OK) shm_unlink(seg->name);
  return st;
}

shmddp_status_t shm_segment_create_named(shm_segment_t *seg, int nranks, size_t slot_bytes,
                                         double timeout_s, const unsigned char *nonce, char *err,
                                         size_t errlen)
{
  return create_mapped(seg, nranks, slot_bytes, timeout_s, nonce, err, errlen);
}

shmddp_status_t shm_segment_map_fd(shm_segment_t *seg, int fd, char *err, size_t errlen)
{
  memset(seg, 0, sizeof *seg);
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    snprintf(err, errlen, "cannot stat the shared-memory segment: %s", strerror(errno));
    return SHMDDP_ERR_SYSTEM;
  }
  if ((size_t)sb.st_size < sizeof(shm_header_t)) {
    snprintf(err, errlen, "the shared-memory segment is %lld bytes, too small for a shmddp "
             "segment", (long long)sb.st_size);
    return SHMDDP_ERR_INVALID;
  }
  size_t bytes = (size_t)sb.st_size;
  void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    snprintf(err, errlen, "cannot map the shared-memory segment (%.1f MiB): %s", mib(bytes),
             strerror(errno));
    return SHMDDP_ERR_SYSTEM;
  }
  shm_header_t *h = base;
  int ok = h->magic == SHM_MAGIC;
  atomic_thread_fence(memory_order_acquire);
  ok = ok && h->version == SHM_VERSION && h->nranks >= 1 && h->nranks <= SHMDDP_MAX_RANKS &&
       h->bytes == bytes && h->slot_bytes >= SHM_MIN_SLOT_BYTES &&
       shm_segment_size(h->nranks, h->slot_bytes) == bytes;
  if (!ok) {
    munmap(base, bytes);
    snprintf(err, errlen, "the shared-memory segment is not a shmddp segment of this version");
    return SHMDDP_ERR_INVALID;
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
