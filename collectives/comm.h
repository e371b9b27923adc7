/* comm.h — the communicator (one per rank) and the per-call bookkeeping shared by the
 * algorithms: call signatures, mismatch detection, error messages. Internal to the library. */
#ifndef COLL_COMM_H
#define COLL_COMM_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>

#include "shm/segment.h"
#include "shm/wait.h"
#include "shmddp.h"

typedef enum {
  COLL_ALL_REDUCE = 0,
  COLL_REDUCE_SCATTER,
  COLL_ALL_GATHER,
  COLL_BROADCAST,
  COLL_REDUCE,
  COLL_BARRIER,
  COLL_ALL_TO_ALL,
  COLL_GATHER,
  COLL_SCATTER,
  COLL_NUM_KINDS
} coll_kind_t;

/* What a call is: every rank's must be equal for the same sequence number. */
typedef struct {
  uint64_t seq;
  uint64_t count;
  uint32_t kind, dtype, op, algo;
  int32_t root;
  uint32_t pad;
} coll_sig_t;

/* Written into the first bytes of every staged buffer, so a reader can verify that the data it
 * is about to consume belongs to the same call as its own. */
#define COLL_BUF_HEADER 64

/* Per-rank control words in the segment (each written by its owner only, one line each). */
typedef struct {
  /* The signature of the call this rank is in, under a seqlock (odd while being written). */
  _Alignas(SHM_LINE) _Atomic uint32_t sig_ver;
  _Atomic uint64_t sig_words[sizeof(coll_sig_t) / 8];
  _Alignas(SHM_LINE) _Atomic uint64_t dpost; /* direct rounds posted */
  _Alignas(SHM_LINE) _Atomic uint64_t dack;  /* direct rounds consumed (all peers' buffers) */
  _Alignas(SHM_LINE) _Atomic uint64_t rpost; /* ring messages sent to the next rank */
  _Alignas(SHM_LINE) _Atomic uint64_t rack;  /* ring messages consumed from the previous rank */
} coll_ctrl_t;

#define COLL_DIRECT_BUFS 2
#define COLL_RING_BUFS 4

struct shmddp_comm {
  int rank, nranks, device;
  int channel;                            /* the segment channel this communicator uses */
  shmddp_comm_t *base;                    /* the launcher's communicator (itself for it) */
  shmddp_comm_t *dups[SHM_CHANNELS];      /* base only: communicators made by shmddp_comm_dup */
  shm_segment_t *seg;
  coll_ctrl_t *ctrl[SHMDDP_MAX_RANKS];
  unsigned char *direct_base[SHMDDP_MAX_RANKS];
  unsigned char *ring_base[SHMDDP_MAX_RANKS];
  size_t direct_buf_bytes; /* per buffer, header included */
  size_t ring_buf_bytes;
  uint64_t seq;    /* calls made (count-0 calls included) */
  uint64_t dround; /* direct rounds this rank has posted */
  uint64_t rsent, rrecv;
  double timeout_s;
  shmddp_algo_t algo;          /* forced, or AUTO */
  size_t ring_min_bytes;       /* AUTO: host all-reduce switches from direct to ring here */
  coll_sig_t cur;              /* the call in progress */
  char what[96];               /* "all_reduce #12 (count 1000, f32, sum)" */
  char last_error[512];
  const struct coll_device_ops *dev_ops; /* device-buffer collectives (CUDA build), or NULL */
  void *dev;                             /* their state */
  struct coll_joined *joined;            /* joined by id (collectives/join.c): what it owns */
};

/* The group settings the environment gives where the caller gave none (0): SHMDDP_SLOT_MB,
 * SHMDDP_TIMEOUT (default 300 s); and SHMDDP_ALGO (AUTO when unset). */
/* The /dev/shm name (without the directory) of the segment of a join id: a keyed hash of its
 * secret (collectives/join.c). */
void coll_id_segment_name(const shmddp_unique_id_t *id, char *name, size_t len);
shmddp_status_t coll_env_settings(size_t *slot_bytes, double *timeout_s, shmddp_algo_t *algo,
                                  char *err, size_t errlen);

void coll_comm_init(shmddp_comm_t *comm, shm_segment_t *seg, int channel, int rank, int device,
                    double timeout_s);
/* Release a communicator's device transport, and the duplicates of a base communicator. */
void coll_comm_teardown(shmddp_comm_t *comm);

/* Record an error on the communicator; returns status. */
shmddp_status_t coll_error(shmddp_comm_t *comm, shmddp_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Start a call: fails fast if the group has aborted; publishes the signature. */
shmddp_status_t coll_begin(shmddp_comm_t *comm, coll_kind_t kind, size_t count,
                           shmddp_dtype_t dtype, shmddp_op_t op, int root, shmddp_algo_t algo);
/* Turn a wait error into the communicator's error (copying the group's message). */
shmddp_status_t coll_wait_failed(shmddp_comm_t *comm, shmddp_status_t st, const char *msg);

/* Waiter check: a peer in the same call with a different signature. */
shmddp_status_t coll_check_peers(shmddp_comm_t *comm, char *err, size_t errlen);

/* A wait of a collective for its peers: shm_wait's waiter, with the communicator it waits in.
 * Put it first in a waiter of your own, whose pending function reads the rest. */
typedef struct {
  shm_waiter_t base;
  shmddp_comm_t *comm;
} coll_waiter_t;
/* Wait (shm_wait, the communicator's timeout) until pending(&w->base) is 0, checking the peers'
 * signatures on the slow path (coll_check_peers); a failure becomes the communicator's error.
 * w->comm must be set. */
shmddp_status_t coll_wait(coll_waiter_t *w, uint32_t (*pending)(shm_waiter_t *w));

/* Stamp / verify a staged buffer's header. verify returns SHMDDP_ERR_MISMATCH (and aborts the
 * group) when the writer was in another call. */
void coll_stamp(const shmddp_comm_t *comm, unsigned char *buf);
shmddp_status_t coll_verify(shmddp_comm_t *comm, const unsigned char *buf, int writer);

const char *coll_kind_name(coll_kind_t kind);
void coll_describe(const coll_sig_t *sig, char *buf, size_t len);

#endif
