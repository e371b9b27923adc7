/* segment.h — the shared-memory segment every rank of a group maps: its layout and lifecycle.
 *
 * Layout (every part starts on a SHM_LINE boundary):
 *   header                 group-wide words: futex wake word, abort and stop words, per-rank
 *                          state and barrier counters (one cache line per rank)
 *   ctrl[channel][nranks]  SHM_CTRL_BYTES per rank and channel for the collectives' counters
 *   xchg[nranks]           SHM_XCHG_BYTES per rank for transports (e.g. CUDA IPC handles)
 *   slot[channel][nranks]  host staging for collective data: slot_bytes per rank on channel 0,
 *                          SHM_AUX_SLOT_BYTES (at most slot_bytes) on the others
 * A channel carries one communicator (shmddp_comm_dup takes the next one), so independent
 * streams of collectives, e.g. gradient buckets and SyncBN statistics, never share counters.
 * The launcher creates the segment before it forks; ranks inherit the mapping, so the name is
 * unlinked right after mapping and a crash of any process can never leave it in /dev/shm.
 * Ranks that join by a unique id (shm/rendezvous.c) find the segment by a name computed from the
 * id's secret instead (a keyed hash: the name reveals nothing of the id); it is published fully
 * initialised (created without a name, then linked to the id's name) and unlinked once every
 * rank has arrived. A joiner maps a segment only after fstat shows it is a regular file of its
 * own effective uid with no group or other access, and trusts nothing in the header before
 * shm_header_check has checked it.
 */
#ifndef SHM_SEGMENT_H
#define SHM_SEGMENT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shmddp.h"

/* 128 bytes: a cache line plus the adjacent line the hardware prefetcher pairs with it. */
#define SHM_LINE 128
#define SHM_CTRL_BYTES 4096
#define SHM_XCHG_BYTES 65536
#define SHM_MAGIC 0x73686d6464703031ULL /* "shmddp01" */
#define SHM_VERSION 3              /* layout of shm_header_t; joiners refuse others */
#define SHM_DEFAULT_SLOT_BYTES ((size_t)4 << 20)
#define SHM_MIN_SLOT_BYTES ((size_t)64 << 10)
#define SHM_MAX_SLOT_BYTES ((size_t)64 << 30) /* far above any use; keeps sizes from overflowing */
#define SHM_ABORT_MSG_BYTES 400
#define SHM_CHANNELS 4
#define SHM_AUX_SLOT_BYTES ((size_t)256 << 10)
#define SHM_AUTH_BYTES 32

enum shm_rank_state {
  SHM_RANK_NONE = 0,
  SHM_RANK_RUNNING,
  SHM_RANK_EXITED,  /* returned 0 */
  SHM_RANK_FAILED   /* returned non-zero or was killed */
};

typedef struct {
  _Alignas(SHM_LINE) _Atomic uint64_t barrier; /* barriers this rank has entered */
  _Atomic int32_t state;                       /* enum shm_rank_state */
  _Atomic int32_t pid;
  _Atomic int32_t exit_status;                 /* waitpid status, valid once not RUNNING */
  _Atomic int32_t device_mode;                 /* joined ranks: 1 with a GPU, 0 host only */
  _Atomic uint64_t pidns;                      /* joined ranks: inode of their PID namespace */
  _Atomic uint64_t start;                      /* joined ranks: process start time (see
                                                  shm_pid_start): a reused pid is not them */
} shm_rank_info_t;

typedef struct {
  uint64_t magic;
  uint32_t version;
  int32_t nranks;
  uint64_t bytes;
  uint64_t slot_bytes;
  double timeout_s;
  _Alignas(SHM_LINE) _Atomic uint32_t wake; /* futex word: bumped whenever anything is published */
  _Atomic uint32_t waiters;                 /* ranks asleep on wake (skip the syscall when 0) */
  _Alignas(SHM_LINE) _Atomic uint32_t abort_status; /* 0, or the shmddp_status_t of the failure */
  _Atomic uint32_t abort_claim;                     /* the first aborter writes the message */
  _Atomic int32_t abort_rank;                       /* the rank blamed, or -1 */
  _Atomic uint32_t stop_signal;                     /* SIGINT/SIGTERM received by the launcher */
  char abort_msg[SHM_ABORT_MSG_BYTES];
  /* Join by id (shm/rendezvous.c): the proof of the id's secret that a joiner must match, ranks
   * that have claimed their place, the word whose first setter removes the name from /dev/shm
   * (exactly once per segment), and the creating process (to tell a dead group from a live one). */
  _Alignas(SHM_LINE) unsigned char auth[SHM_AUTH_BYTES];
  _Atomic uint32_t joined;
  _Atomic uint32_t seen;        /* bit r: rank r has come (joined, or found the group refused) */
  _Atomic uint32_t unlinked;
  _Atomic int32_t creator_pid;
  _Atomic uint64_t creator_pidns;
  _Atomic uint64_t creator_start;
  shm_rank_info_t rank[SHMDDP_MAX_RANKS];
} shm_header_t;

typedef struct {
  void *base;
  size_t bytes;
  int nranks;
  size_t slot_bytes;
  shm_header_t *hdr;
  char name[64]; /* the name it had in /dev/shm (already unlinked); "" when it had none */
} shm_segment_t;

size_t shm_segment_size(int nranks, size_t slot_bytes);
/* Create, map and unlink a new segment. On failure returns an error status and writes a message
 * that says what to do (e.g. give a container more /dev/shm). */
shmddp_status_t shm_segment_create(shm_segment_t *seg, int nranks, size_t slot_bytes,
                                   double timeout_s, char *err, size_t errlen);
/* Create and map a new segment that has no name yet (O_TMPFILE; where /dev/shm lacks it, a
 * private random name), for the caller to initialise and then publish with
 * shm_segment_publish; *fd stays open until then. auth (SHM_AUTH_BYTES) goes into the header. */
shmddp_status_t shm_segment_create_unpublished(shm_segment_t *seg, int nranks, size_t slot_bytes,
                                               double timeout_s, const unsigned char *auth,
                                               int *fd, char *err, size_t errlen);
/* Give the segment of fd the name path (/dev/shm/...), atomically and only if no file has it:
 * 0, or an errno (EEXIST when the name is taken). Closes fd; the private name, if any, is gone. */
int shm_segment_publish(shm_segment_t *seg, int fd, const char *path);
/* Map an existing segment from an open descriptor (path names it in messages). Before a byte is
 * read: it must be a regular file owned by this process's effective uid with no group or other
 * permission bits, else SHMDDP_ERR_INVALID with a message naming its owner and mode. Then its
 * header is checked (shm_header_check). */
shmddp_status_t shm_segment_map_fd(shm_segment_t *seg, int fd, const char *path, char *err,
                                   size_t errlen);
/* The checks of a header that is not ours (bytes: the size of the mapping, at least
 * sizeof(shm_header_t)): magic, version, world size, slot size and total size agree. SHMDDP_OK
 * or SHMDDP_ERR_INVALID with a message. Reads only the header. */
shmddp_status_t shm_header_check(const shm_header_t *h, size_t bytes, char *err, size_t errlen);
void shm_segment_destroy(shm_segment_t *seg);

void *shm_rank_ctrl(const shm_segment_t *seg, int channel, int rank);
void *shm_rank_xchg(const shm_segment_t *seg, int rank);
void *shm_rank_slot(const shm_segment_t *seg, int channel, int rank);
size_t shm_slot_bytes(const shm_segment_t *seg, int channel);

#endif
