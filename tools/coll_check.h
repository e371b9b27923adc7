/* coll_check.h — test patterns for collectives and their f64 reference results, shared by
 * tools/allreduce_bench (-c 1) and the Check suites. */
#ifndef TOOLS_COLL_CHECK_H
#define TOOLS_COLL_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "shmddp.h"

/* The value rank r contributes at element i in iteration iter: small integers plus a
 * fraction, never all zero, different per rank/element/iteration. For PROD the values stay
 * near 1 so products neither overflow nor vanish. */
double coll_pattern(int rank, size_t i, int iter, shmddp_dtype_t dtype, shmddp_op_t op);

/* Fill n elements of dtype with coll_pattern(rank, first + k, iter). */
void coll_fill(void *buf, size_t n, size_t first, int rank, int iter, shmddp_dtype_t dtype,
               shmddp_op_t op);

/* The f64 reference of reducing element i over nranks ranks. */
double coll_expected(int nranks, size_t i, int iter, shmddp_dtype_t dtype, shmddp_op_t op);

/* Convert element k of buf to double. */
double coll_load(const void *buf, size_t k, shmddp_dtype_t dtype);
/* Round a double to dtype's precision and back (what a perfect dtype result would hold). */
double coll_round(double v, shmddp_dtype_t dtype);

/* Allowed |got - want| for a reduction of nranks inputs of magnitude ~scale in dtype. */
double coll_tolerance(shmddp_dtype_t dtype, int nranks, double want);

/* Count elements of got (n elements, global indices first..) that differ from the reference
 * of the all-reduce over nranks; *first_bad gets the first bad global index. */
size_t coll_count_errors(const void *got, size_t n, size_t first, int nranks, int iter,
                         shmddp_dtype_t dtype, shmddp_op_t op, size_t *first_bad);

/* 1 when every rank of comm holds the same n bytes at p (a host all-reduce, min and max, of
 * their hash): results must be bitwise identical on every rank. Collective. */
int coll_same_on_all_ranks(shmddp_comm_t *comm, const void *p, size_t n);

#endif
