/* internal.h — the NCCL front end's communicator, its call descriptor, and the layers' faces.
 *
 * The front end is four layers, each calling only the ones below it:
 *   api_coll.c, api_comm.c, entry points: fill a call descriptor with everything the call
 *   api_mem.c,              needs (the pre-multiplied sum's scalar included), so nothing is
 *   api_suspend.c           looked up again when it runs; every argument is checked once, here
 *                           (check.c), and trusted below
 *   queue.c                 ncclGroupStart/End: outside a group a call runs at once; inside, it
 *                           is queued per thread until the outermost ncclGroupEnd
 *   exec.c                  the one executor: runs a call, or a group's calls one lane per
 *                           communicator, and aborts the group when a call fails after its peers
 *                           are committed; each call: init.c, then xlate.c
 *   init.c                  first-call initialisation: a communicator's record, its group joined
 *                           (the init call), the pair that carries send/recv with a peer
 *   xlate.c                 a call in shmddp's terms, through collectives/api.h's unchecked
 *                           collectives (the arguments were checked at the entry)
 *   split.c, shrink.c,      communicators made from one (split, shrunk, grown; joined through
 *   grow.c, comm.c,         init.c), a communicator's scratch, drain, revoke, abort and free
 *   window.c                (comm.c), its registered buffers and windows (window.c)
 * under them map.c (types, results, errors, config, debug lines) and dev.c (the few CUDA runtime
 * calls, absent from a CPU-only build, where every communicator is host-only). */
#ifndef NCCL_INTERNAL_H
#define NCCL_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "shmddp.h"
#include "shmddp_nccl.h"

#define NCCL_MAX_PREMUL 64
#define NCCL_MAX_STREAMS 8 /* streams remembered per communicator, for ncclCommFinalize */

/* A pre-multiplied sum's scalar, as captured when a call is queued. */
typedef struct {
  int set;              /* 0: a built-in op */
  int on_device;        /* dev is read when the call runs, in stream order */
  const void *dev;
  unsigned char host[8]; /* the value (ncclScalarHostImmediate) */
} nccl_scalar_t;

/* An op made by ncclRedOpCreatePreMulSum. */
typedef struct {
  int in_use;
  shmddp_dtype_t dtype;
  nccl_scalar_t scalar;
} nccl_premul_t;

/* Scratch memory of a communicator (the pre-multiplied inputs), host or device. Grown by
 * replacing: an outgrown block is kept until the communicator is freed, because calls queued on
 * a stream may still read it. */
typedef struct nccl_scratch {
  void *p;
  size_t bytes;
  struct nccl_scratch *older;
} nccl_scratch_t;

struct ncclComm {
  shmddp_comm_t *c;                      /* NULL until a grouped init has run */
  int nranks, rank, device;              /* device: -1 for host-only communicators (no GPU) */
  shmddp_unique_id_t id;
  shmddp_comm_t *p2p[SHMDDP_MAX_RANKS];  /* two-rank communicators with each peer, made on use */
  nccl_premul_t premul[NCCL_MAX_PREMUL];
  nccl_scratch_t *scratch;
  void *streams[NCCL_MAX_STREAMS];       /* streams calls were enqueued on (device comms) */
  _Atomic int inflight;                  /* calls running on this communicator */
  _Atomic int aborted;
  _Atomic int revoked;
  _Atomic int suspended;                 /* ncclCommSuspend: 1, 2 with its memory released */
  int grow_pending;                      /* ncclCommGetUniqueId made grow_id; not used yet */
  shmddp_unique_id_t grow_id;
  ncclResult_t init_result;              /* of a grouped init, until it has run: ncclInProgress */
  uint16_t shrinks[1u << SHMDDP_MAX_RANKS]; /* shrinks made so far, per set of excluded ranks */
  struct ncclWindow_vidmem *regs;        /* registered buffers and windows (window.c) */
  int blocking, split_share;
  char name[64];                         /* config.commName, or "" */
  char last_error[512];
};

/* A communicator's settings from the client's ncclConfig_t (map.c parses it). */
typedef struct {
  int blocking, split_share;
  char name[64];
} nccl_config_t;

/* ---- the call descriptor ---- */
typedef enum {
  NCCL_CALL_INIT, NCCL_CALL_ALL_REDUCE, NCCL_CALL_BROADCAST, NCCL_CALL_REDUCE,
  NCCL_CALL_ALL_GATHER, NCCL_CALL_REDUCE_SCATTER, NCCL_CALL_ALL_TO_ALL, NCCL_CALL_GATHER,
  NCCL_CALL_SCATTER, NCCL_CALL_SEND, NCCL_CALL_RECV
} nccl_kind_t;

typedef struct {
  nccl_kind_t kind;
  const char *fn; /* the entry point, for messages */
  ncclComm_t comm;
  const void *send;
  void *recv;
  size_t count;
  shmddp_dtype_t dtype;
  shmddp_op_t op;
  nccl_scalar_t premul; /* set: op is SUM of the inputs each multiplied by this rank's scalar */
  int root;             /* root, or the peer of send/recv */
  void *stream;         /* the client's cudaStream_t */
  /* NCCL_CALL_INIT */
  int nranks, rank, device;
  shmddp_unique_id_t id;
} nccl_call_t;

/* The layers' faces, in the order a call goes through them; then the communicators made from
 * one and what a communicator holds; then what every layer uses (map.c, dev.c). */

/* ---- check.c: every argument checked once, by the entry point that received it ---- */
/* comm exists, has joined (or joins in this group), was not aborted, revoked or suspended. */
ncclResult_t nccl_check_comm(ncclComm_t comm, const char *fn);
/* Every argument of a collective or send/recv whose descriptor k the entry point filled: comm,
 * datatype and op (translated into k, a pre-multiplied sum's scalar copied), count, buffers,
 * root or peer. Nothing below checks them again. */
ncclResult_t nccl_check_call(nccl_call_t *k, ncclDataType_t datatype, ncclRedOp_t op);

/* ---- queue.c ---- */
/* Run a call now (outside a group), or queue it (inside one). */
ncclResult_t nccl_enqueue(const nccl_call_t *call);
int nccl_in_group(void);

/* ---- exec.c: the executor ---- */
ncclResult_t nccl_exec_one(const nccl_call_t *call);
ncclResult_t nccl_exec_group(nccl_call_t *calls, size_t n);

/* ---- init.c: first-call initialisation ---- */
/* A communicator not yet joined (init runs later, or now). */
ncclComm_t nccl_comm_new(const nccl_config_t *cfg);
/* Join the group; fn names the entry point in messages. Sets comm->init_result. */
ncclResult_t nccl_join(ncclComm_t comm, const char *fn, int nranks, shmddp_unique_id_t id,
                       int rank, int device);
/* Run a queued init call (NCCL_CALL_INIT): join its group. */
ncclResult_t nccl_init_run(const nccl_call_t *k);
/* The shmddp communicator call k runs on: its communicator's group, or for send/recv to a peer
 * the two-rank communicator with that peer, made on the first call with it (collective over
 * the pair). Refused while the group is not joined. */
ncclResult_t nccl_init_transport(const nccl_call_t *k, shmddp_comm_t **c);

/* ---- xlate.c: one call in shmddp's terms (on the calling thread, the device set) ---- */
/* Run call (not an init) on c, the communicator nccl_init_transport gave. */
ncclResult_t nccl_xlate(const nccl_call_t *call, shmddp_comm_t *c);
/* The self-copies of a lane's send/recv (matched in order); the others go to nccl_xlate. */
ncclResult_t nccl_xlate_self(nccl_call_t *const *calls, size_t n);

/* ---- simulate.c ---- */
/* Estimated microseconds a group of these calls takes (our own coarse model). */
float nccl_sim_estimate(const nccl_call_t *calls, size_t n);

/* ---- split.c ---- */
/* Split comm by (color, key) into *out (NULL for SPLIT_NOCOLOR); collective over comm. */
ncclResult_t nccl_split(ncclComm_t comm, int color, int key, const nccl_config_t *cfg,
                        ncclComm_t *out);

/* ---- shrink.c ---- */
/* The communicator of comm's ranks outside the set `excluded` (bit r: rank r), renumbered in
 * order; collective over those ranks only. abort_first: end comm's work on every rank first. */
ncclResult_t nccl_shrink(ncclComm_t comm, uint32_t excluded, int abort_first,
                         const nccl_config_t *cfg, ncclComm_t *out);
/* The id the survivors of the count-th shrink of a group with id parent, excluding `excluded`,
 * meet by (the tests compute its segment's name). */
shmddp_status_t nccl_shrink_id(const shmddp_unique_id_t *parent, uint32_t excluded,
                               unsigned count, shmddp_unique_id_t *out);

/* ---- grow.c ---- */
/* An existing rank of comm joins the grown group of nranks (rank unchanged); id: the id that
 * ncclCommGetUniqueId made, on the one rank that passes it, NULL on the others. Collective over
 * comm, then over the grown group. */
ncclResult_t nccl_grow(ncclComm_t comm, int nranks, const shmddp_unique_id_t *id,
                       const nccl_config_t *cfg, ncclComm_t *out);

/* ---- comm.c: what a communicator holds, and its end ---- */
/* Mark the whole group failed with reason, so every peer's pending and later calls end. */
void nccl_abort_group(ncclComm_t comm, const char *reason);
/* Refuse new calls on comm, abort its group with reason, wait for the calls in flight here. */
void nccl_revoke(ncclComm_t comm, const char *reason);
/* Abort every transport of comm (from any thread), wait for the calls in flight, free. */
void nccl_comm_abort_free(ncclComm_t comm);
void nccl_comm_free(ncclComm_t comm);
/* Scratch of at least bytes (host or device memory as comm is). */
ncclResult_t nccl_scratch(ncclComm_t comm, size_t bytes, void **out);
/* Bytes of scratch comm holds, and giving it back (no call of comm may be in flight). */
size_t nccl_scratch_bytes(ncclComm_t comm);
void nccl_scratch_release(ncclComm_t comm);
/* Wait for the streams comm's calls went to, then report what failed there (fn in messages). */
ncclResult_t nccl_comm_drain(ncclComm_t comm, const char *fn);

/* ---- window.c: registered buffers and windows ---- */
/* Register [buff, buff + bytes) on comm (window: a window of ncclCommWindowRegister, else a
 * buffer of ncclCommRegister); *out is the client's handle. */
ncclResult_t nccl_reg_add(ncclComm_t comm, const char *fn, void *buff, size_t bytes, int window,
                          int flags, ncclWindow_t *out);
/* Release a handle of comm's (the argument arg of fn), or refuse one comm does not hold. */
ncclResult_t nccl_reg_remove(ncclComm_t comm, const char *fn, const char *arg, void *handle,
                             int window);
/* Release every registration left on comm (ncclCommDestroy, ncclCommAbort). */
void nccl_reg_release_all(ncclComm_t comm);
/* Bytes of device memory comm keeps registered. */
size_t nccl_reg_bytes(ncclComm_t comm);

/* ---- map.c: translations, results, errors, config, debug ---- */
ncclResult_t nccl_result(shmddp_status_t st);
/* Record why a call failed (on comm when given, and as the thread's last error); returns r. */
ncclResult_t nccl_fail(ncclComm_t comm, ncclResult_t r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* From a shmddp status and that communicator's message. */
ncclResult_t nccl_fail_st(ncclComm_t comm, shmddp_status_t st, shmddp_comm_t *c, const char *what);
/* 0, or -1 with the error recorded naming argument arg of fn. */
int nccl_dtype(ncclComm_t comm, const char *fn, ncclDataType_t t, shmddp_dtype_t *out);
/* A built-in op, or a pre-multiplied sum made on comm (its scalar copied into *premul). */
int nccl_op(ncclComm_t comm, const char *fn, ncclRedOp_t op, shmddp_dtype_t dt, shmddp_op_t *out,
            nccl_scalar_t *premul);
/* Parse a client's config of any known size, or an error. */
ncclResult_t nccl_parse_config(const ncclConfig_t *config, nccl_config_t *out, char *err,
                               size_t len);
/* Say once on stderr that name is not served, and why. */
ncclResult_t nccl_unsupported(const char *name, const char *why);
/* Debug level: 0 quiet, 1 warnings (NCCL_DEBUG=WARN), 2 info (NCCL_DEBUG=INFO, or
 * SHMDDP_NCCL_DEBUG=1). Read once; ncclResetDebugInit reads again. */
int nccl_debug_level(void);
void nccl_debug_reset(void);
/* A debug line, prefixed with the communicator's name and rank when comm is given. */
void nccl_log(ncclComm_t comm, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- dev.c: the CUDA runtime, or its absence ---- */
int nccl_dev_current(void);            /* the calling thread's GPU, or -1 without one */
int nccl_dev_select(int device);       /* 0, or -1 (message in *err) */
/* The stream shmddp gets: SHMDDP_HOST for host-only communicators, else the client's stream
 * (0 meaning the legacy default stream). */
shmddp_stream_t nccl_dev_stream(ncclComm_t comm, void *stream);
ncclResult_t nccl_dev_alloc(ncclComm_t comm, void **p, size_t bytes, int on_device);
void nccl_dev_free(void *p, int on_device);
/* Copy bytes between device buffers in stream order (host buffers: at once). */
ncclResult_t nccl_dev_copy(ncclComm_t comm, void *dst, const void *src, size_t bytes, void *stream);
/* Wait for a stream to drain. */
ncclResult_t nccl_dev_sync(ncclComm_t comm, void *stream);
/* SHMDDP_OK or the error a device kernel recorded on c (a host-only build: SHMDDP_OK). */
shmddp_status_t nccl_dev_check(shmddp_comm_t *c);
/* ncclMemAlloc/Free: device memory every peer maps without a copy. */
ncclResult_t nccl_dev_mem_alloc(void **ptr, size_t bytes);
ncclResult_t nccl_dev_mem_free(void *ptr);
/* ncclCommRegister/Deregister on comm's device transport (host-only: nothing, handle NULL). */
ncclResult_t nccl_dev_register(ncclComm_t comm, void *buff, size_t bytes, void **handle);
ncclResult_t nccl_dev_deregister(ncclComm_t comm, void *handle);
/* "P2P on", "host-staged" or "host only". */
const char *nccl_dev_transport(shmddp_comm_t *c);

/* ---- every exported function has a pnccl alias (profilers interpose on those names) ---- */
#define NCCL_ALIAS(name) extern __typeof__(name) p##name __attribute__((alias(#name)));

#endif
