/* reduce_cpu.h — element-wise reductions over the collective dtypes, on the host: the host
 * collectives' arithmetic and the CPU reference of the CUDA reduce kernels.
 *
 * Arithmetic happens in an accumulator type: f32 for f32/f16/bf16 and the 8-bit floats, f64 for f64, every integer type
 * itself (with wrap-around) for the integers. A reduction of n inputs rounds once, at the end. NaN propagates
 * through min and max. AVG is SUM followed by a division by the number of ranks (integers:
 * truncation toward zero). */
#ifndef COLLECTIVES_REDUCE_REDUCE_CPU_H
#define COLLECTIVES_REDUCE_REDUCE_CPU_H

#include <stddef.h>

#include "shmddp.h"

/* Bytes per element of the accumulator type of dtype. */
size_t reduce_acc_size(shmddp_dtype_t dtype);

/* dst = reduce(srcs[0], ..., srcs[nsrc-1]) element-wise, in that order; finalised for op (AVG
 * divides by avg_div) and stored in dtype. dst may alias any source. */
void reduce_cpu_multi(void *dst, const void *const *srcs, int nsrc, size_t n,
                      shmddp_dtype_t dtype, shmddp_op_t op, int avg_div);

/* acc_out = convert(src) (accumulator type). */
void reduce_cpu_load(void *acc_out, const void *src, size_t n, shmddp_dtype_t dtype);
/* acc_out = acc_in (+) convert(src) element-wise (accumulator type). acc_out may alias acc_in. */
void reduce_cpu_combine(void *acc_out, const void *acc_in, const void *src, size_t n,
                        shmddp_dtype_t dtype, shmddp_op_t op);
/* dst = finalise(acc_in (+) convert(src)): the last step of a ring reduction. */
void reduce_cpu_finish(void *dst, const void *acc_in, const void *src, size_t n,
                       shmddp_dtype_t dtype, shmddp_op_t op, int avg_div);

/* dst[i] = src[i] converted between f32 and a 16-bit float type (f16, bf16), rounded to nearest
 * even (NaN stays NaN): DDP's gradients on the wire in bf16. Returns 0, or -1 for any other pair
 * of types (the same type twice is a copy). */
int reduce_cpu_convert(void *dst, shmddp_dtype_t dst_t, const void *src, shmddp_dtype_t src_t,
                       size_t n);

/* buf[i] = buf[i] * (*scalar) in the accumulator type, rounded once (scalar: one dtype element). */
void reduce_cpu_scale(void *buf, size_t n, shmddp_dtype_t dtype, const void *scalar);

#endif
