/* nccl_conf.h — the NCCL conformance harness: every collective x dtype x op x in/out of place x
 * count, run by every rank of a communicator and checked against an f64 reference that models
 * each dtype's rounding (the reference's own encoders, not the library's).
 *
 * The data rank r contributes is a function of (rank, element, call), chosen so that every dtype
 * holds it exactly and sums stay exact in the accumulator: the only rounding left is the final
 * one (and the product's, for pre-multiplied sums), which the reference models; AVG, whose
 * quotient is rounded twice (accumulator, then dtype), gets one unit in the last place.
 * Copies (broadcast, gathers, all-to-all, send/recv) are compared bit for bit.
 *
 * Buffers are host memory (host-only communicators, as in CI) or device memory of one GPU that
 * every rank shares (the GPU machine); ranks are threads of the test or processes it forks. */
#ifndef TESTS_NCCL_CONF_H
#define TESTS_NCCL_CONF_H

#include <stddef.h>

#include "shmddp_nccl.h"

#define SHMDDP_NCCL_MAX_RANKS_TESTED 8

typedef enum {
  CONF_ALL_REDUCE, CONF_REDUCE, CONF_REDUCE_SCATTER, CONF_BROADCAST, CONF_ALL_GATHER,
  CONF_ALL_TO_ALL, CONF_GATHER, CONF_SCATTER, CONF_SEND_RECV, CONF_NUM_COLLS
} conf_coll_t;

/* Ops: the five built-in ones, then pre-multiplied sums with a host scalar and with a device
 * scalar (each rank its own). */
enum { CONF_PREMUL_HOST = ncclNumOps, CONF_PREMUL_DEVICE, CONF_NUM_OPS };

#define CONF_ALL_COLLS ((1u << CONF_NUM_COLLS) - 1)
#define CONF_ALL_OPS ((1u << CONF_NUM_OPS) - 1)
#define CONF_ALL_TYPES ((1u << ncclNumTypes) - 1)

typedef struct {
  int nranks;
  int device;            /* -1: host buffers (host-only communicators); else this GPU, shared */
  const size_t *counts;  /* element counts tried */
  int ncounts;
  unsigned colls, types, ops; /* bit masks */
  int sample;            /* 0: every combination; k > 1: only every k-th in the matrix order,
                            starting at nranks % k (another subset for each rank count) */
  int inplace;           /* 0: out of place, 1: in place, 2: both */
} conf_plan_t;

typedef struct {
  long calls, checks, failures;
  int init_failed;
  char fails[1536]; /* the first failures, "what: why; ..." */
} conf_result_t;

/* Run the plan on one rank of comm (every rank of the communicator calls it). */
void conf_run_rank(ncclComm_t comm, int rank, const conf_plan_t *plan, conf_result_t *res);

/* Start plan->nranks ranks (threads, or processes forked before any CUDA call), each joining
 * one communicator and running the plan; results[r] gets rank r's. Returns 0, or -1 when the
 * ranks could not be started. */
int conf_run_threads(const conf_plan_t *plan, conf_result_t *results);
int conf_run_processes(const conf_plan_t *plan, conf_result_t *results);

/* ---- nccl_conf_ref.c: the reference model ----
 * Rank r's element i in call `call` (op: a conf op; the pre-multiplied sums take SUM's data). */
double conf_value(int r, size_t i, int call, ncclDataType_t t, int op);
/* Rank r's own scalar of a pre-multiplied sum with a host (0) or device (1) residence. */
double conf_scalar(int r, int device_scalar, ncclDataType_t t);
/* The f64 reference of reducing element i over n ranks with op, rounded as t holds it. */
double conf_reference(int n, size_t i, int call, ncclDataType_t t, int op);
/* One unit in the last place of t at v (0 for integers). */
double conf_ulp(double v, ncclDataType_t t);
/* The reference's encoding of v in dtype t (rounded to nearest even; the 8-bit floats: e4m3
 * overflows to NaN, having no infinity, e5m2 to infinity) and its decoding. */
void conf_encode(void *dst, size_t k, double v, ncclDataType_t t);
double conf_decode(const void *src, size_t k, ncclDataType_t t);
size_t conf_type_size(ncclDataType_t t);
const char *conf_type_name(ncclDataType_t t);
const char *conf_coll_name(conf_coll_t c);

#endif
