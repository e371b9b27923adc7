/* cuda_internal.h — the CUDA transport's state, memory layouts and kernel launchers, shared by
 * its host files (cuda_init.c, cuda_check.c, cuda_reg.c, cuda_args.c and the algorithms of
 * cuda_algos.h) and its kernels (cuda_kernels.cu, cuda_staged.cu). C and CUDA both include it, so
 * it holds only plain C types.
 *
 * Memory of a rank:
 *   ctrl   (cudaMalloc, exported by IPC, zeroed before its handle is published)
 *          dflags  u64 [CUDA_DIRECT_MAXB][MAXR]  direct kernels' barrier flags, [block][from rank]
 *          verify  u64 [MAXR]                   P2P check: written by each peer at start
 *          ll      16-byte packets [2][nranks][CUDA_LL_WORDS]: one-shot receive slots, [parity][from]
 *          ts      [2][IN | RES] x CUDA_TS_MAX: the scratch two-shot's copy of the input and its
 *                  reduced slice, [parity of the call]
 *   local  (cudaMalloc, never exported): counters that advance inside the kernels (so a captured
 *          graph replays correctly): ll_seq / ts_seq (calls made, one copy per block), depoch per
 *          direct block, sctr per staged block; err_dev, the sticky "a kernel gave up" word
 *   err_host (cudaHostAlloc, mapped): the code of the first give-up, read by the host
 *   staged (POSIX shm shared by the ranks, cudaHostRegister'ed): per rank a region of
 *          post u64 [SB], ack u64 [SB][MAXR], then data [SB][2][CUDA_STAGED_CHUNK]
 * The segment's header is cudaHostRegister'ed too, so spinning kernels can see the abort word. */
#ifndef COLL_CUDA_INTERNAL_H
#define COLL_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "shmddp.h"

#define CUDA_MAXR SHMDDP_MAX_RANKS

#define CUDA_LL_BLOCKS 128 /* at most; a launch uses fewer for small messages */
#define CUDA_LL_THREADS 256
#define CUDA_LL_MAX_BYTES ((size_t)1 << 20) /* payload of one one-shot launch */
#define CUDA_LL_WORDS (CUDA_LL_MAX_BYTES / 8)  /* 8 payload bytes per 16-byte packet */

#define CUDA_DIRECT_MAXB 128
#define CUDA_DIRECT_THREADS 512

#define CUDA_STAGED_BLOCKS 32
#define CUDA_STAGED_THREADS 512
#define CUDA_STAGED_CHUNK ((size_t)128 << 10)
#define CUDA_STAGED_HDR 4096
#define CUDA_STAGED_REGION (CUDA_STAGED_HDR + (size_t)CUDA_STAGED_BLOCKS * 2 * CUDA_STAGED_CHUNK)

#define CUDA_OFF_DFLAGS 0
#define CUDA_OFF_VERIFY (CUDA_OFF_DFLAGS + (size_t)CUDA_DIRECT_MAXB * CUDA_MAXR * 8)
#define CUDA_OFF_LL (CUDA_OFF_VERIFY + 4096)
#define CUDA_TS_MAX ((size_t)4 << 20) /* scratch two-shot: largest message, bytes */
#define CUDA_OFF_TS(n) (CUDA_OFF_LL + (size_t)2 * (n) * CUDA_LL_WORDS * 16)
#define CUDA_CTRL_BYTES(n) (CUDA_OFF_TS(n) + 4 * CUDA_TS_MAX)

/* What a kernel that gave up wrote into err_host. */
#define CUDA_GAVE_UP_ABORT 1
#define CUDA_GAVE_UP_TIMEOUT 2

/* Passed by value to every kernel that waits for a peer. */
typedef struct {
  const volatile uint32_t *abort_word; /* device view of the segment's abort word, or NULL */
  volatile uint32_t *err_host;         /* device view of the mapped error word */
  uint32_t *err_dev;                   /* sticky give-up word in device memory */
  unsigned long long timeout_ns;
} cuda_kctl_t;

typedef struct {
  uint32_t *ll_seq;  /* [CUDA_LL_BLOCKS] */
  uint32_t *ts_seq;  /* [CUDA_DIRECT_MAXB] */
  uint64_t *depoch;  /* [CUDA_DIRECT_MAXB] */
  uint64_t *sctr;    /* [CUDA_STAGED_BLOCKS] */
  uint32_t err_dev;
} cuda_local_t;

/* ---- kernel arguments ---- */

typedef struct {
  const void *send;
  void *recv;
  size_t count; /* elements of this launch (<= CUDA_LL_MAX_BYTES of payload) */
  int dtype, op, avg_div, nranks, rank;
  void *ll_peer[CUDA_MAXR]; /* every rank's ll area (own: local pointer) */
  uint32_t *ll_seq;
  cuda_kctl_t k;
} cuda_ll_args_t;

enum { CUDA_DIRECT_REDUCE = 0, CUDA_DIRECT_COPY = 1 };

typedef struct {
  int mode, dtype, op, avg_div, nranks, rank;
  int nsrc, ndst;
  const void *src[CUDA_MAXR]; /* already offset to the range: reduced in this order */
  void *dst[CUDA_MAXR];
  size_t n;      /* elements (REDUCE) or bytes (COPY) */
  int vec;       /* every pointer 16-byte aligned */
  int barrier_start, barrier_end;
  uint64_t *dflags;                /* own flag array */
  uint64_t *dflags_peer[CUDA_MAXR]; /* every rank's flag array, mapped */
  uint64_t *depoch;
  cuda_kctl_t k;
} cuda_direct_args_t;

/* Scratch two-shot: no user buffer leaves the rank; see cuda_kernels.cu. */
typedef struct {
  int dtype, op, avg_div, nranks, rank;
  const void *send;
  void *recv;
  size_t count, sl;                  /* elements; sl: per rank slice, whole 16-byte vectors */
  unsigned char *ts[CUDA_MAXR];       /* every rank's ts area, mapped */
  uint32_t *ts_seq;
  uint64_t *dflags;
  uint64_t *dflags_peer[CUDA_MAXR];
  uint64_t *depoch;
  cuda_kctl_t k;
} cuda_ts_args_t;

typedef struct {
  int mode, dtype, op, avg_div, nranks, rank;
  const void *src;   /* what this rank posts: src_bytes bytes (every rank the same size) */
  size_t src_bytes;
  int post_data;     /* 0: take part in the handshakes, post nothing (broadcast non-roots) */
  unsigned char *region[CUDA_MAXR]; /* device views of every rank's staged region */
  /* REDUCE: elements [rd_lo, rd_hi) of the posted stream, reduced over all ranks, go to
   * dst[e - rd_lo]. COPY: rank r's posted bytes go to dst + r * dst_stride for r in copy_mask. */
  size_t rd_lo, rd_hi;
  void *dst;
  size_t dst_stride;
  uint32_t copy_mask;
  uint64_t *sctr;
  cuda_kctl_t k;
} cuda_staged_args_t;

#ifdef __cplusplus
extern "C" {
#endif
/* Launchers (cudaError_t as int; 0 is success). */
int cuda_launch_ll(const cuda_ll_args_t *a, void *stream);
int cuda_launch_direct(const cuda_direct_args_t *a, int blocks, void *stream);
int cuda_launch_ts(const cuda_ts_args_t *a, int blocks, void *stream);
int cuda_launch_staged(const cuda_staged_args_t *a, void *stream);
/* P2P check: write value into each target (peer-mapped u64), one thread each. */
int cuda_launch_verify_write(uint64_t *const *targets, const uint64_t *values, int n, void *stream);
/* Blocks a direct launch uses for a call whose largest per-rank range has `bytes` bytes (the
 * same on every rank, so per-block counters stay in step). */
int cuda_direct_blocks(size_t bytes);
#ifdef __cplusplus
}
#endif

#endif
