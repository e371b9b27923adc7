/* devmem_impl.h — the state behind devmem.h, shared by its export side and the state's life
 * (devmem.c) and its import side (devmem_import.c, above devmem.c), and the message the owner of
 * an export sends its peers. */
#ifndef COLL_DEVMEM_IMPL_H
#define COLL_DEVMEM_IMPL_H

#include <pthread.h>

#include "collectives/devmem/devmem.h"
#include "shmddp.h"

#define DEVMEM_MSG_MAGIC 0x64766d6dU /* "dvmm" */
enum { DEVMEM_MSG_CHUNK = 1, DEVMEM_MSG_RETIRE = 2 };

/* On the socket: one per chunk of a new VMM export (with its descriptor), one per retirement. */
typedef struct {
  uint32_t magic, type;
  uint64_t export_id;
  uint64_t due;          /* RETIRE: the exchange from which it applies */
  uint32_t index, count; /* CHUNK: this chunk, of count */
  uint64_t offset, size; /* CHUNK: its place in the export */
  uint64_t span;         /* CHUNK: the export's bytes */
} devmem_msg_t;

typedef struct {
  uint64_t id;            /* never 0 */
  devmem_kind_t kind;     /* LEGACY or VMM */
  uintptr_t base;         /* the span exported */
  size_t size;
  devmem_range_t *chunks; /* VMM: what the driver said about each chunk when it was exported */
  uint32_t nchunks;
  unsigned char handle[DEVMEM_HANDLE_BYTES]; /* LEGACY */
  uint64_t last_use;      /* exchange */
  int pins;               /* registrations */
} devmem_export_t;

/* A chunk of a VMM import: where it is mapped in the import's range. */
typedef struct {
  uint64_t offset, size;
  size_t pend; /* while mapping: its entry in the pending list */
} devmem_piece_t;

typedef struct {
  uint64_t id;            /* the peer's export id */
  devmem_kind_t kind;
  uintptr_t va;           /* LEGACY: the opened mapping; VMM: our reserved range */
  size_t size;
  devmem_piece_t *pieces; /* VMM: the chunks mapped in it, by offset */
  uint32_t npieces;
  unsigned char handle[DEVMEM_HANDLE_BYTES]; /* LEGACY: imports of one handle share a mapping */
} devmem_import_t;

typedef struct {
  int peer;
  int fd;                 /* CHUNK: the chunk's descriptor; -1 for RETIRE */
  devmem_msg_t msg;
} devmem_pending_t;

/* A retirement not yet sent to one peer. */
typedef struct {
  int peer;
  uint64_t export_id, due;
} devmem_outgoing_t;

typedef struct {
  uint64_t reg, export_id; /* export_id 0: nothing exported (PRIVATE, or no remote peer) */
} devmem_reg_t;

struct devmem {
  pthread_mutex_t lock;
  const devmem_driver_t *drv;
  fdpass_t *mesh;
  int rank, nranks;
  unsigned char local[SHMDDP_MAX_RANKS];
  int nremote;
  size_t max_exports;
  uint64_t k;             /* the latest exchange seen */
  uint64_t next_id, next_reg, last_recheck;
  devmem_export_t *exp;
  size_t nexp, capexp;
  devmem_import_t *imp[SHMDDP_MAX_RANKS];
  size_t nimp[SHMDDP_MAX_RANKS], capimp[SHMDDP_MAX_RANKS];
  devmem_pending_t *pend;
  size_t npend, cappend;
  devmem_outgoing_t *out; /* retirements to send at the next exchange, in order */
  size_t nout, capout;
  devmem_reg_t *regs;
  size_t nregs, capregs;
  devmem_stats_t st;
};

/* Grow *arr (of *cap elements of size bytes) to hold at least need; -1 when out of memory. */
int devmem_grow(void **arr, size_t *cap, size_t need, size_t size);
int devmem_fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The driver's name for err. */
const char *devmem_drv_error(const devmem_t *m, int err);
/* Unmap the first n chunks of a VMM import mapped at va (the range stays reserved). */
void devmem_unmap_chunks(devmem_t *m, uintptr_t va, const devmem_piece_t *pc, uint32_t n);
/* Drop one import of peer (the device must be idle); its slot is reused. */
void devmem_drop_import(devmem_t *m, int peer, size_t i);

#endif
