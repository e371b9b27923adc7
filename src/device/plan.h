/* plan.h — one block of memory for tensors whose lifetimes are known in advance, laid out so
 * that tensors alive at the same time never overlap and tensors that are not share bytes.
 *
 * The model's schedule (forward, loss, backward) is run once in "record" mode, without doing any
 * work: each tensor it needs is declared (plan_tensor) in the order the schedule meets it, every
 * use is marked (plan_ptr), and plan_tick separates one operation from the next. The lifetime of
 * a tensor is the span of ticks from its declaration to its last use, both ends included, so an
 * operation's inputs and outputs are always disjoint; an op that reads x and writes y in the
 * same tick never has y placed over x. plan_finish lays the tensors out (in an order, each at
 * the lowest offset clear of every placed tensor whose lifetime meets its own: largest first,
 * then orders searched from it down to the most bytes ever alive at once, where it can) and
 * checks the result pair by pair: plan_verify is the proof the layout is safe, and it runs every
 * time.
 *
 * Afterwards the schedule runs for real in "replay" mode: the same declarations in the same
 * order return the planned tensors (a declaration that does not match the record is an error,
 * never a silent overlap), and plan_ptr returns base + offset. A missing plan_tick only merges
 * two operations into one tick, which makes lifetimes longer: safe, at the price of memory.
 *
 * Why our own: the layout problem is small (a few hundred tensors, once per model) and the
 * allocators of the libraries we use (cuDNN, cuBLAS, the CUDA caching allocators of the
 * frameworks) plan at run time from frees they see, which is what this replaces. */
#ifndef SRC_DEVICE_PLAN_H
#define SRC_DEVICE_PLAN_H

#include <stddef.h>

typedef struct plan plan_t;

#define PLAN_ALIGN 256 /* every tensor's offset is a multiple of this (cuDNN, vector loads) */

int plan_create(plan_t **out, char *err, size_t errlen);
void plan_destroy(plan_t *p);

/* Starts a pass of the schedule (record or replay) from its first declaration and tick 0. */
void plan_begin(plan_t *p);
/* Declares the schedule's next tensor: its id (>= 0), or -1 with the message in err (out of
 * memory while recording; in replay, a declaration that differs from the recorded one). */
int plan_tensor(plan_t *p, size_t bytes, const char *name, char *err, size_t errlen);
/* A use of tensor id at the current tick. Recording: NULL; replaying: its memory. */
void *plan_ptr(plan_t *p, int id);
/* The operation of this tick is done; the next use belongs to the next one. */
void plan_tick(plan_t *p);

/* separate != 0: plan_finish gives every tensor its own bytes (no sharing) — the reference
 * layout that tests compare the shared one against. Before plan_finish. */
void plan_set_separate(plan_t *p, int separate);
/* Ends recording: lays the tensors out and verifies the layout; *bytes gets the block's size.
 * Then plan_set_base gives the block (PLAN_ALIGN-aligned) and replay can start. */
int plan_finish(plan_t *p, size_t *bytes, char *err, size_t errlen);
void plan_set_base(plan_t *p, void *base);

/* 0 when no two tensors whose lifetimes meet share a byte; else -1 naming a pair. */
int plan_verify(const plan_t *p, char *err, size_t errlen);

size_t plan_count(const plan_t *p);
size_t plan_bytes(const plan_t *p);      /* the block: the peak of the planned tensors */
size_t plan_sum_bytes(const plan_t *p);  /* every tensor separately: what planning saves */
/* The largest sum of bytes alive at one tick (a lower bound for any layout). */
size_t plan_live_peak(const plan_t *p);
/* Tensor id's layout, for printouts and tests. */
void plan_tensor_info(const plan_t *p, size_t id, const char **name, size_t *bytes, size_t *offset,
                      int *first, int *last);

#endif
