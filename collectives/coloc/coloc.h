/* coloc.h — ranks that share a GPU: which ranks share one (the placement), and the per-call
 * protocol that orders their streams with events published through the segment instead of flags
 * that a kernel spins on. No CUDA here: the CUDA transport (cuda_coloc.c) plugs its interprocess
 * events, buffer exchange and kernel into coloc_ops_t; the CPU tests plug in simulated ones that
 * check every wait against the record it must see (tests/check_coloc.c). coloc.c has the protocol
 * and its proof. */
#ifndef COLL_COLOC_H
#define COLL_COLOC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "collectives/comm.h"

#define COLOC_KEY_BYTES 40 /* a device's identity as text (its UUID), NUL included */

/* Which ranks share a device. Groups are numbered by their lowest rank's order; each group's
 * lowest rank is its leader, the one rank that does the group's work in a call. */
typedef struct {
  int nranks, ngroups;
  int group[SHMDDP_MAX_RANKS];        /* rank -> its group */
  int leader[SHMDDP_MAX_RANKS];       /* group -> its lowest rank */
  uint32_t members[SHMDDP_MAX_RANKS]; /* group -> bit r for each of its ranks */
  uint32_t leaders;                   /* bit r for each leader */
  int shared;                         /* 1: some group has more than one rank */
} coloc_plan_t;

/* keys[r]: rank r's device identity; equal keys share a device. Returns 0, or -1 when nranks is
 * out of range or a key is empty or not NUL-terminated (keys come from the segment). */
int coloc_plan(coloc_plan_t *p, int nranks, const char (*keys)[COLOC_KEY_BYTES]);

/* "ranks 0, 2 share GPU 0; 1, 3 share GPU 1" style text, for start lines (names[g]: group g's
 * device as the user knows it, e.g. "GPU 0"). */
void coloc_describe(const coloc_plan_t *p, const char *const *names, char *buf, size_t len);

/* Whether every rank that shares its device with another runs under MPS (mps[r]: rank r's
 * driver's answer, cudaDevAttrMpsEnabled); 0 when no device is shared. */
int coloc_all_mps(const coloc_plan_t *p, const int *mps);

/* The way a call goes when ranks share a device (p->shared), under CUDA-graph capture
 * (capturing) or not: 1 the co-located path, 0 the in-kernel algorithms. The co-located path
 * whenever it can run (no capture: it needs the host in every call), under MPS too: there a
 * kernel that spins on a co-located peer's flags would wait microseconds while the peer is
 * ready, but the peer's kernel may sit behind its own compute, and the spinning blocks then hold
 * SMs that compute needs (a trainer without SyncBN stalled that way, with in-kernel calls up to
 * 1 MiB), while the co-located path costs little more than a hand-over per call under MPS
 * (coloc.c). */
int coloc_use_path(const coloc_plan_t *p, int capturing);

enum { COLOC_READY = 0, COLOC_DONE = 1, COLOC_NKINDS };

/* Where a rank waits for its peers' events (see coloc.c): on the host (it queries them until they
 * have completed, then goes on; its streams never wait for another context), on its stream (the
 * stream waits; the host goes on at once), or on the host for leaders and on the stream for
 * members. The choice is each rank's own: ranks with different choices work together. */
typedef enum { COLOC_WAIT_HOST = 0, COLOC_WAIT_STREAM, COLOC_WAIT_LEADER, COLOC_NWAITS } coloc_wait_t;

/* "host", "stream", "leader" -> the choice; -1 for anything else (NULL or empty: -1 too). */
int coloc_wait_parse(const char *s);
const char *coloc_wait_name(coloc_wait_t w);
/* The wait of a rank whose SHMDDP_COLOC_WAIT is unset (or auto): stream waits when every rank
 * that shares a GPU runs under MPS (all_mps: the kernels of all ranks run side by side, a stream
 * wait on a peer's event costs what it costs in one process, and the host keeps its run-ahead),
 * host waits otherwise (a stream that waits for another context's event holds the GPU's time
 * slice). */
coloc_wait_t coloc_default_wait(int all_mps);
/* Whether rank waits on the host under choice w. */
int coloc_host_waits(coloc_wait_t w, const coloc_plan_t *p, int rank);

/* What a transport supplies for one call. Every function returns a status; a failure stops the
 * group (coloc_call aborts it with the message) because the peers would wait for this rank. */
typedef struct {
  /* Enqueue a record of this rank's event `kind` on the call's stream; it is call `seq`'s. */
  shmddp_status_t (*record)(void *ctx, int kind, uint64_t seq);
  /* Make the call's stream wait for rank `peer`'s event `kind`, whose latest record is call
   * `seq`'s (the protocol guarantees it; a simulated transport checks it). */
  shmddp_status_t (*wait)(void *ctx, int peer, int kind, uint64_t seq);
  /* Host waits: set *done to whether rank `peer`'s event `kind`, whose latest record is call
   * `seq`'s, has completed. Called until it has (with short pauses, and the group's checks). */
  shmddp_status_t (*query)(void *ctx, int peer, int kind, uint64_t seq, int *done);
  /* Publish that this rank has recorded READY for call seq (and whatever the work needs, e.g.
   * its buffers) and return once every rank has; a rank in another call is an error. Host
   * accesses of the peers' buffers (opening or checking them) belong here: the protocol keeps
   * every buffer of call seq allocated until every rank has returned from this function. */
  shmddp_status_t (*rendezvous)(void *ctx, uint64_t seq);
  /* Leaders only: enqueue the group's work (after the waits for every READY). */
  shmddp_status_t (*work)(void *ctx);
} coloc_ops_t;

/* One rank's protocol state. done[r] points to rank r's published word (in the segment, one
 * cache line each, written by its owner only): the last call whose waits and records rank r has
 * enqueued. */
typedef struct {
  coloc_plan_t plan;
  _Atomic uint64_t *done[SHMDDP_MAX_RANKS];
  uint64_t calls; /* calls made through the protocol (the same count on every rank) */
  int host_waits; /* this rank queries its peers' events (query) instead of waiting on them */
  int all_mps;    /* coloc_all_mps of the group: kernels may wait on co-located peers */
} coloc_state_t;

/* Set up the state of a rank that starts (or restarts) the protocol on a communicator: calls
 * continues from the largest published word, so a rank still reading an earlier life's words
 * can never mistake them for new ones. Call it when every rank has finished its earlier calls
 * (after a barrier) and before any rank's next call. It waits on its stream; set host_waits
 * (coloc_host_waits) afterwards for host waits. */
void coloc_state_init(coloc_state_t *cs, const coloc_plan_t *plan,
                      _Atomic uint64_t *const *done_words);

/* One collective through the protocol (see coloc.c). comm->cur must be the call's signature
 * (coll_begin done); its what names the call in messages. */
shmddp_status_t coloc_call(shmddp_comm_t *comm, coloc_state_t *cs, const coloc_ops_t *ops,
                           void *ctx);

/* Before a rank destroys its events: wait until every peer has enqueued its waits of the last
 * call (a peer that has left or failed ends the wait with its error). */
shmddp_status_t coloc_quiesce(shmddp_comm_t *comm, const coloc_state_t *cs);

#endif
