/* safetensors.h — writing the safetensors format (https://github.com/huggingface/safetensors):
 * 8 bytes of little-endian header length N, N bytes of JSON header naming every tensor with its
 * dtype, shape and byte range, then the raw little-endian data. The format is small enough to
 * write directly; reading it back needs no library either (the CI test reads it with Python's
 * json and torch.frombuffer). */
#ifndef SRC_PREDICT_SAFETENSORS_H
#define SRC_PREDICT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 4

typedef enum { ST_F32 = 0, ST_I64 } st_dtype_t;

typedef struct {
  char name[64];
  st_dtype_t dtype;
  int ndim;                   /* 0: a scalar */
  int64_t shape[ST_MAX_DIMS];
  const void *data;           /* host memory, little-endian, product(shape) elements */
} st_tensor_t;

/* Writes the tensors (and string metadata: pairs of keys and values, n_meta pairs) to path
 * through a temporary file of mode 0600 renamed into place: a failed write leaves no file and
 * whatever was at path. */
int safetensors_write(const char *path, const st_tensor_t *t, int n, const char *const *meta,
                      int n_meta, char *err, size_t errlen);

#endif
