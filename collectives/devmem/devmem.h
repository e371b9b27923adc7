/* devmem.h — sharing user device buffers between the ranks of a group: what this rank exports,
 * what it has mapped of its peers', and when a mapping goes. No CUDA here: the driver is a table
 * of functions (devmem_driver_t; devmem_cuda.c fills it from the CUDA driver, the CPU suites
 * with a fake over memfd), so the whole protocol runs in CI without a GPU.
 *
 * Kinds of memory (what the driver's query says about a pointer):
 *   LEGACY   cudaMalloc memory: shared by a legacy CUDA IPC handle (64 bytes, in the call record)
 *   VMM      cuMem memory whose allocation allows POSIX file descriptors (ncclMemAlloc, PyTorch's
 *            expandable segments): each physical chunk the buffer covers is exported as a file
 *            descriptor and passed over the group's socket mesh (fdpass.h); the importer maps the
 *            chunks side by side into one reserved range, so a buffer that crosses chunks is
 *            contiguous on both sides
 *   PRIVATE  device memory nobody else can map (cudaMallocAsync pools, managed memory, cuMem
 *            without a shareable handle type): the calls that meet it are staged (cuda_algos.h)
 * Peers in this process use the owner's pointer as it is (after checking it is device memory of
 * this process that holds the whole range).
 *
 * Protocol (per communicator; "exchange k" is the k-th call that shares user buffers, numbered
 * alike on every rank, see cuda_state.h):
 *   export   Every export gets an id that this rank never reuses. A buffer is looked up among the
 *            live exports (LEGACY: by the driver's buffer id, which CUDA never reuses in a
 *            process; VMM: by each covered chunk's mapping and physical block id); a miss makes a
 *            new export. A new VMM export sends, before the call record is published, one CHUNK
 *            message per chunk with its descriptor to every peer in another process.
 *   record   The call record names, per buffer: its kind, its address in the owner's process,
 *            the export id and the offset in the export. The bytes the call touches are not taken
 *            from it: every rank computes them from the call's signature, which the exchange has
 *            checked to be equal.
 *   import   At exchange k a rank first drains its sockets, then maps every peer buffer of the
 *            records of k it has not mapped yet (by peer and export id) and checks that offset +
 *            bytes lies inside what the driver actually mapped. Mappings are reused while the
 *            export lives.
 *   retire   An export ends when its memory was freed (found by re-querying every live export on
 *            each miss and every DEVMEM_RECHECK exchanges: a different buffer/block id or no
 *            mapping), when it is evicted (least recently used, beyond the settable cap; pinned
 *            registrations are never evicted) or deregistered. The owner then queues RETIRE(id, k)
 *            for every peer and sends the queue at its next exchange, before that exchange's
 *            record is published: a deregistration between calls never touches the sockets, so a
 *            peer that has already left (destroyed its communicator: its mappings are dropped
 *            before its sockets close) cannot make it fail. At a send, a peer whose socket is
 *            closed has left or died and needs no message (the rendezvous reports a dead one);
 *            a socket that is full keeps the rest of that peer's queue for the next exchange (the
 *            peer drains it at each exchange), so any number of retirements can pile up between
 *            two calls. A CHUNK that finds its socket full makes the buffer staged for this call
 *            (the chunks sent so far are retired); one to a peer that left is not sent.
 *            A peer applies a RETIRE only at an exchange >= k (the owner can run one
 *            exchange ahead of a peer still reading the previous records), and only after its own
 *            outstanding GPU work is done (driver quiesce), because kernels it queued earlier may
 *            still read the mapping; while the caller's stream is being captured into a graph
 *            that cannot wait, so the RETIRE waits for the next exchange outside a capture.
 *            A retired id is never named by a later record, so no stale mapping can be read, and
 *            the mappings a peer holds never exceed the owner's live exports plus the
 *            retirements still queued for it.
 * Everything read from the segment or a socket (kinds, ids, offsets, chunk counts and sizes) is
 * range-checked before use; a check that fails is an error naming the peer, never a mapping.
 *
 * The caller's contract: a record names memory that its owner may free as soon as the owner's
 * call returns, and the driver cannot open (or, in-process, classify) freed memory. So the caller's
 * protocol must keep every owner inside call k until every peer has finished its imports of k:
 * the co-located protocol by its words (coloc.c, (f)); the in-kernel algorithms by the cross-rank
 * barrier their kernels start with, which a rank launches only after its imports (an owner's
 * device work of call k, which any free of the memory waits for, cannot finish before it). Nothing
 * here retries an open or caches a classification: either would hide a use after free. */
#ifndef COLL_DEVMEM_H
#define COLL_DEVMEM_H

#include <stddef.h>
#include <stdint.h>

#include "shm/fdpass.h"

#define DEVMEM_HANDLE_BYTES 64
#define DEVMEM_RECHECK 64             /* exchanges between re-queries of the live exports */
#define DEVMEM_EXPORTS_DEFAULT 1024   /* live exports per rank before the least recent goes */
#define DEVMEM_MAX_CHUNKS 65536       /* chunks of one VMM export */
#define DEVMEM_MAX_SPAN ((uint64_t)1 << 42)

typedef enum {
  DEVMEM_NONE = 0, /* not device memory of this process */
  DEVMEM_LEGACY,
  DEVMEM_VMM,
  DEVMEM_PRIVATE,
  DEVMEM_LOCAL     /* record only: only peers in the owner's process may use it (by pointer) */
} devmem_kind_t;

/* What the driver says about one address. */
typedef struct {
  devmem_kind_t kind;
  uintptr_t base; /* LEGACY: the allocation; VMM: the chunk's mapping; PRIVATE: its range */
  size_t size;
  uint64_t id;    /* LEGACY: buffer id; VMM: physical block id */
} devmem_range_t;

/* The driver: each returns 0 or a driver error code (error_name says what it is). */
typedef struct {
  void *ctx;
  int (*query)(void *ctx, uintptr_t ptr, devmem_range_t *out);
  int (*legacy_export)(void *ctx, uintptr_t base, unsigned char handle[DEVMEM_HANDLE_BYTES]);
  /* Open a peer's handle: the mapping's address and the size the driver mapped. */
  int (*legacy_open)(void *ctx, const unsigned char handle[DEVMEM_HANDLE_BYTES], uintptr_t *base,
                     size_t *size);
  int (*legacy_close)(void *ctx, uintptr_t base);
  int (*vmm_export)(void *ctx, uintptr_t chunk, int *fd); /* a new descriptor the caller closes */
  int (*vmm_import)(void *ctx, int fd, uint64_t *handle);  /* fd stays the caller's */
  int (*vmm_release)(void *ctx, uint64_t handle);
  int (*va_reserve)(void *ctx, size_t size, uintptr_t *va);
  int (*va_free)(void *ctx, uintptr_t va, size_t size);
  /* Map handle's whole allocation (size bytes) at va; fails if it is not that size. */
  int (*vmm_map)(void *ctx, uintptr_t va, size_t size, uint64_t handle);
  int (*vmm_unmap)(void *ctx, uintptr_t va, size_t size);
  int (*set_access)(void *ctx, uintptr_t va, size_t size); /* this rank's device reads/writes */
  int (*quiesce)(void *ctx); /* all work this process queued on the device has finished */
  const char *(*error_name)(void *ctx, int err);
} devmem_driver_t;

/* One buffer of a call record, in the segment. */
typedef struct {
  uint32_t kind;      /* devmem_kind_t; DEVMEM_NONE: no buffer */
  uint32_t pad;
  uint64_t ptr;       /* the buffer in its owner's process */
  uint64_t export_id; /* LEGACY, VMM */
  uint64_t offset;    /* of ptr in the export */
  unsigned char handle[DEVMEM_HANDLE_BYTES]; /* LEGACY */
} devmem_desc_t;

typedef struct devmem devmem_t;

typedef struct {
  size_t exports;          /* live exports */
  size_t imports;          /* live mappings of peers' exports, all peers */
  size_t pending;          /* messages received and not yet used */
  size_t unsent;           /* retirements queued for a peer and not sent yet */
  uint64_t exports_made, imports_made;
  uint64_t retired_sent;   /* exports retired here (queued for every peer) */
  uint64_t retired_applied, quiesces;
} devmem_stats_t;

/* max_exports 0: DEVMEM_EXPORTS_DEFAULT. mesh may be NULL (no peer in another process, or no
 * sockets: then VMM memory is PRIVATE to them and exports are never evicted). The driver table
 * and mesh must outlive the state. */
devmem_t *devmem_new(const devmem_driver_t *drv, fdpass_t *mesh, int rank, int nranks,
                     size_t max_exports);
/* Peer p runs in this process (its pointers are used as they are). */
void devmem_set_local(devmem_t *m, int peer, int local);

/* Exchange k, before the record is published: describe [ptr, ptr + len) in *out (exporting it
 * if new, LRU bookkeeping, retirements). 0, or -1 with err (then nothing was published). */
int devmem_export(devmem_t *m, uint64_t k, const void *ptr, size_t len, devmem_desc_t *out,
                  char *err, size_t errlen);
/* Exchange k, after every record is visible: drain the sockets and apply the RETIREs due. */
int devmem_begin_imports(devmem_t *m, uint64_t k, int may_quiesce, char *err, size_t errlen);
/* Peer's buffer d, of which the call touches len bytes, as an address in this process. */
int devmem_import(devmem_t *m, uint64_t k, int peer, const devmem_desc_t *d, size_t len,
                  void **out, char *err, size_t errlen);

/* Registration: [ptr, ptr + len) exported now and pinned until devmem_deregister. *kind says what
 * the memory is (a PRIVATE buffer registers, and is staged when used). */
int devmem_register(devmem_t *m, const void *ptr, size_t len, uint64_t *reg, devmem_kind_t *kind,
                    char *err, size_t errlen);
int devmem_deregister(devmem_t *m, uint64_t reg, char *err, size_t errlen);

void devmem_stats(const devmem_t *m, devmem_stats_t *out);
/* Drop every mapping (the caller has made the device idle) and free the state. */
void devmem_free(devmem_t *m);

const char *devmem_kind_name(devmem_kind_t k);

#endif
