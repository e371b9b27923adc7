/* reduce_cpu.c — host reductions for the collectives, one loop per (dtype, op) through macros so
 * the compiler can vectorise each. See reduce_cpu.h for the arithmetic contract. */
#include "config.h"

#include "collectives/reduce/reduce_cpu.h"

#include <stdint.h>
#include <string.h>

#include "collectives/reduce/half.h"

#define TILE 1024

size_t reduce_acc_size(shmddp_dtype_t dtype)
{
  switch (dtype) {
  case SHMDDP_I8: case SHMDDP_U8: return 1;
  case SHMDDP_F32: case SHMDDP_F16: case SHMDDP_BF16: case SHMDDP_I32: case SHMDDP_U32: return 4;
  case SHMDDP_F8E4M3: case SHMDDP_F8E5M2: return 4;
  case SHMDDP_F64: case SHMDDP_I64: case SHMDDP_U64: return 8;
  default: return 0;
  }
}

/* Binary operators on accumulator values. Integers wrap (computed as unsigned). NaN propagates
 * through min/max: (a != a) catches a NaN in a; a NaN in b fails the comparison and wins. */
#define OP_SUM(a, b) ((a) + (b))
#define OP_PROD(a, b) ((a) * (b))
#define OP_MIN(a, b) (((a) != (a) || (a) < (b)) ? (a) : (b))
#define OP_MAX(a, b) (((a) != (a) || (a) > (b)) ? (a) : (b))
#define IOP_SUM(T, U, a, b) ((T)((U)(a) + (U)(b)))
#define IOP_PROD(T, U, a, b) ((T)((U)(a) * (U)(b)))

/* Conversions between storage and accumulator. */
#define LD_F32(p, i) (((const float *)(p))[i])
#define LD_F64(p, i) (((const double *)(p))[i])
#define LD_F16(p, i) f16_to_f32(((const uint16_t *)(p))[i])
#define LD_BF16(p, i) bf16_to_f32(((const uint16_t *)(p))[i])
#define LD_E4M3(p, i) f8e4m3_to_f32(((const uint8_t *)(p))[i])
#define LD_E5M2(p, i) f8e5m2_to_f32(((const uint8_t *)(p))[i])
#define LD_I32(p, i) (((const int32_t *)(p))[i])
#define LD_I64(p, i) (((const int64_t *)(p))[i])
#define LD_I8(p, i) (((const int8_t *)(p))[i])
#define LD_U8(p, i) (((const uint8_t *)(p))[i])
#define LD_U32(p, i) (((const uint32_t *)(p))[i])
#define LD_U64(p, i) (((const uint64_t *)(p))[i])
#define ST_F32(p, i, v) (((float *)(p))[i] = (v))
#define ST_F64(p, i, v) (((double *)(p))[i] = (v))
#define ST_F16(p, i, v) (((uint16_t *)(p))[i] = f32_to_f16(v))
#define ST_BF16(p, i, v) (((uint16_t *)(p))[i] = f32_to_bf16(v))
#define ST_E4M3(p, i, v) (((uint8_t *)(p))[i] = f32_to_f8e4m3(v))
#define ST_E5M2(p, i, v) (((uint8_t *)(p))[i] = f32_to_f8e5m2(v))
#define ST_I32(p, i, v) (((int32_t *)(p))[i] = (v))
#define ST_I64(p, i, v) (((int64_t *)(p))[i] = (v))
#define ST_I8(p, i, v) (((int8_t *)(p))[i] = (v))
#define ST_U8(p, i, v) (((uint8_t *)(p))[i] = (v))
#define ST_U32(p, i, v) (((uint32_t *)(p))[i] = (v))
#define ST_U64(p, i, v) (((uint64_t *)(p))[i] = (v))

/* combine: out[i] = in[i] (op) LD(src, i) */
#define DEF_COMBINE_F(NAME, ACC, LD)                                                          \
  static void NAME(void *out_, const void *in_, const void *src, size_t n, shmddp_op_t op)    \
  {                                                                                           \
    ACC *out = out_;                                                                          \
    const ACC *in = in_;                                                                      \
    switch (op) {                                                                             \
    case SHMDDP_SUM: case SHMDDP_AVG:                                                         \
      { for (size_t i = 0; i < n; i++) out[i] = OP_SUM(in[i], (ACC)LD(src, i)); } break;          \
    case SHMDDP_PROD: { for (size_t i = 0; i < n; i++) out[i] = OP_PROD(in[i], (ACC)LD(src, i)); } break; \
    case SHMDDP_MIN: for (size_t i = 0; i < n; i++) { ACC b = LD(src, i); out[i] = OP_MIN(in[i], b); } break; \
    case SHMDDP_MAX: for (size_t i = 0; i < n; i++) { ACC b = LD(src, i); out[i] = OP_MAX(in[i], b); } break; \
    default: break;                                                                           \
    }                                                                                         \
  }
#define DEF_COMBINE_I(NAME, ACC, U, LD)                                                       \
  static void NAME(void *out_, const void *in_, const void *src, size_t n, shmddp_op_t op)    \
  {                                                                                           \
    ACC *out = out_;                                                                          \
    const ACC *in = in_;                                                                      \
    switch (op) {                                                                             \
    case SHMDDP_SUM: case SHMDDP_AVG:                                                         \
      { for (size_t i = 0; i < n; i++) out[i] = IOP_SUM(ACC, U, in[i], LD(src, i)); } break;      \
    case SHMDDP_PROD: { for (size_t i = 0; i < n; i++) out[i] = IOP_PROD(ACC, U, in[i], LD(src, i)); } break; \
    case SHMDDP_MIN: for (size_t i = 0; i < n; i++) { ACC b = LD(src, i); out[i] = in[i] < b ? in[i] : b; } break; \
    case SHMDDP_MAX: for (size_t i = 0; i < n; i++) { ACC b = LD(src, i); out[i] = in[i] > b ? in[i] : b; } break; \
    default: break;                                                                           \
    }                                                                                         \
  }
DEF_COMBINE_F(combine_f32, float, LD_F32)
DEF_COMBINE_F(combine_f64, double, LD_F64)
DEF_COMBINE_F(combine_f16, float, LD_F16)
DEF_COMBINE_F(combine_bf16, float, LD_BF16)
DEF_COMBINE_F(combine_e4m3, float, LD_E4M3)
DEF_COMBINE_F(combine_e5m2, float, LD_E5M2)
DEF_COMBINE_I(combine_i32, int32_t, uint32_t, LD_I32)
DEF_COMBINE_I(combine_i64, int64_t, uint64_t, LD_I64)
DEF_COMBINE_I(combine_i8, int8_t, uint8_t, LD_I8)
DEF_COMBINE_I(combine_u8, uint8_t, uint8_t, LD_U8)
DEF_COMBINE_I(combine_u32, uint32_t, uint32_t, LD_U32)
DEF_COMBINE_I(combine_u64, uint64_t, uint64_t, LD_U64)

#define DEF_LOAD(NAME, ACC, LD)                                                               \
  static void NAME(void *out_, const void *src, size_t n)                                     \
  {                                                                                           \
    ACC *out = out_;                                                                          \
    for (size_t i = 0; i < n; i++) out[i] = LD(src, i);                                      \
  }
DEF_LOAD(load_f32, float, LD_F32)
DEF_LOAD(load_f64, double, LD_F64)
DEF_LOAD(load_f16, float, LD_F16)
DEF_LOAD(load_bf16, float, LD_BF16)
DEF_LOAD(load_e4m3, float, LD_E4M3)
DEF_LOAD(load_e5m2, float, LD_E5M2)
DEF_LOAD(load_i32, int32_t, LD_I32)
DEF_LOAD(load_i64, int64_t, LD_I64)
DEF_LOAD(load_i8, int8_t, LD_I8)
DEF_LOAD(load_u8, uint8_t, LD_U8)
DEF_LOAD(load_u32, uint32_t, LD_U32)
DEF_LOAD(load_u64, uint64_t, LD_U64)

/* store: dst[i] = final(acc[i]); AVG divides (in the accumulator type) by div. */
#define DEF_STORE(NAME, ACC, ST)                                                              \
  static void NAME(void *dst, const void *acc_, size_t n, shmddp_op_t op, int div)            \
  {                                                                                           \
    const ACC *acc = acc_;                                                                    \
    if (op == SHMDDP_AVG) {                                                                   \
      for (size_t i = 0; i < n; i++) ST(dst, i, (ACC)(acc[i] / (ACC)div));                    \
    } else {                                                                                  \
      for (size_t i = 0; i < n; i++) ST(dst, i, acc[i]);                                      \
    }                                                                                         \
  }
DEF_STORE(store_f32, float, ST_F32)
DEF_STORE(store_f64, double, ST_F64)
DEF_STORE(store_f16, float, ST_F16)
DEF_STORE(store_bf16, float, ST_BF16)
DEF_STORE(store_e4m3, float, ST_E4M3)
DEF_STORE(store_e5m2, float, ST_E5M2)
DEF_STORE(store_i32, int32_t, ST_I32)
DEF_STORE(store_i64, int64_t, ST_I64)
DEF_STORE(store_i8, int8_t, ST_I8)
DEF_STORE(store_u8, uint8_t, ST_U8)
DEF_STORE(store_u32, uint32_t, ST_U32)
DEF_STORE(store_u64, uint64_t, ST_U64)

typedef struct {
  void (*load)(void *, const void *, size_t);
  void (*combine)(void *, const void *, const void *, size_t, shmddp_op_t);
  void (*store)(void *, const void *, size_t, shmddp_op_t, int);
  size_t size;
} dtype_ops_t;

static const dtype_ops_t ops_table[SHMDDP_NUM_DTYPES] = {
  [SHMDDP_F32] = {load_f32, combine_f32, store_f32, 4},
  [SHMDDP_F64] = {load_f64, combine_f64, store_f64, 8},
  [SHMDDP_F16] = {load_f16, combine_f16, store_f16, 2},
  [SHMDDP_BF16] = {load_bf16, combine_bf16, store_bf16, 2},
  [SHMDDP_I32] = {load_i32, combine_i32, store_i32, 4},
  [SHMDDP_I64] = {load_i64, combine_i64, store_i64, 8},
  [SHMDDP_I8] = {load_i8, combine_i8, store_i8, 1},
  [SHMDDP_U8] = {load_u8, combine_u8, store_u8, 1},
  [SHMDDP_U32] = {load_u32, combine_u32, store_u32, 4},
  [SHMDDP_U64] = {load_u64, combine_u64, store_u64, 8},
  [SHMDDP_F8E4M3] = {load_e4m3, combine_e4m3, store_e4m3, 1},
  [SHMDDP_F8E5M2] = {load_e5m2, combine_e5m2, store_e5m2, 1},
};

void reduce_cpu_multi(void *dst, const void *const *srcs, int nsrc, size_t n,
                      shmddp_dtype_t dtype, shmddp_op_t op, int avg_div)
{
  const dtype_ops_t *t = &ops_table[dtype];
  _Alignas(64) unsigned char acc[TILE * 8];
  for (size_t off = 0; off < n; off += TILE) {
    size_t m = n - off < TILE ? n - off : TILE;
    t->load(acc, (const char *)srcs[0] + off * t->size, m);
    for (int p = 1; p < nsrc; p++) t->combine(acc, acc, (const char *)srcs[p] + off * t->size, m, op);
    t->store((char *)dst + off * t->size, acc, m, op, avg_div);
  }
}

void reduce_cpu_load(void *acc_out, const void *src, size_t n, shmddp_dtype_t dtype)
{
  ops_table[dtype].load(acc_out, src, n);
}

void reduce_cpu_combine(void *acc_out, const void *acc_in, const void *src, size_t n,
                        shmddp_dtype_t dtype, shmddp_op_t op)
{
  ops_table[dtype].combine(acc_out, acc_in, src, n, op);
}

void reduce_cpu_finish(void *dst, const void *acc_in, const void *src, size_t n,
                       shmddp_dtype_t dtype, shmddp_op_t op, int avg_div)
{
  const dtype_ops_t *t = &ops_table[dtype];
  size_t as = reduce_acc_size(dtype);
  _Alignas(64) unsigned char acc[TILE * 8];
  for (size_t off = 0; off < n; off += TILE) {
    size_t m = n - off < TILE ? n - off : TILE;
    t->combine(acc, (const char *)acc_in + off * as, (const char *)src + off * t->size, m, op);
    t->store((char *)dst + off * t->size, acc, m, op, avg_div);
  }
}

void reduce_cpu_scale(void *buf, size_t n, shmddp_dtype_t dtype, const void *scalar)
{
  const dtype_ops_t *t = &ops_table[dtype];
  _Alignas(64) unsigned char acc[TILE * 8];
  for (size_t off = 0; off < n; off += TILE) {
    size_t m = n - off < TILE ? n - off : TILE;
    char *p = (char *)buf + off * t->size;
    t->load(acc, p, m);
    /* acc * scalar, element by element: combine with a source that repeats the scalar */
    _Alignas(64) unsigned char rep[TILE * 8];
    for (size_t i = 0; i < m; i++) memcpy(rep + i * t->size, scalar, t->size);
    t->combine(acc, acc, rep, m, SHMDDP_PROD);
    t->store(p, acc, m, SHMDDP_PROD, 1);
  }
}

int reduce_cpu_convert(void *dst, shmddp_dtype_t dst_t, const void *src, shmddp_dtype_t src_t,
                       size_t n)
{
  if (dst_t == src_t) {
    size_t es = shmddp_dtype_size(dst_t);
    if (!es) return -1;
    if (n && dst != src) memmove(dst, src, n * es);
    return 0;
  }
  if (src_t == SHMDDP_F32 && (dst_t == SHMDDP_BF16 || dst_t == SHMDDP_F16)) {
    const float *s = src;
    uint16_t *d = dst;
    if (dst_t == SHMDDP_BF16)
      for (size_t i = 0; i < n; i++) d[i] = f32_to_bf16(s[i]);
    else
      for (size_t i = 0; i < n; i++) d[i] = f32_to_f16(s[i]);
    return 0;
  }
  if (dst_t == SHMDDP_F32 && (src_t == SHMDDP_BF16 || src_t == SHMDDP_F16)) {
    const uint16_t *s = src;
    float *d = dst;
    if (src_t == SHMDDP_BF16)
      for (size_t i = 0; i < n; i++) d[i] = bf16_to_f32(s[i]);
    else
      for (size_t i = 0; i < n; i++) d[i] = f16_to_f32(s[i]);
    return 0;
  }
  return -1;
}
