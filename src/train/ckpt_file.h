/* ckpt_file.h — checkpoint files: named tensors with a CRC32 each, plus the run's
 * configuration text, written atomically (a private temporary file, fsync, rename, fsync of the
 * directory) so a crash or a full disk never replaces a good checkpoint with a partial one. The
 * file is mode 0600. */
#ifndef SRC_TRAIN_CKPT_FILE_H
#define SRC_TRAIN_CKPT_FILE_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_VERSION 1
#define CKPT_MAX_NAME 63

typedef enum { CKPT_U8 = 0, CKPT_I32, CKPT_I64, CKPT_F32, CKPT_F64 } ckpt_dtype_t;

typedef struct {
  const char *name;    /* unique, at most CKPT_MAX_NAME bytes */
  ckpt_dtype_t dtype;
  uint64_t count;      /* elements */
  const void *data;    /* host memory */
} ckpt_tensor_t;

/* Test seam: the writer's write(2). NULL restores the default. */
typedef long (*ckpt_write_fn)(int fd, const void *buf, size_t len);
void ckpt_set_write_fn(ckpt_write_fn fn);

/* Write tensors and config to path atomically. On any error (disk full, read-only directory,
 * ...) the message says what failed, the temporary file is removed and whatever was at path is
 * untouched. */
int ckpt_write(const char *path, const char *config, const ckpt_tensor_t *tensors, int ntensors,
               char *err, size_t errlen);

typedef struct ckpt ckpt_t;

/* Read and verify a whole checkpoint (magic, version, sizes, every CRC). A truncated or corrupt
 * file is refused with a message naming the problem (and the tensor). */
int ckpt_read(const char *path, ckpt_t **out, char *err, size_t errlen);
void ckpt_free(ckpt_t *c);
const char *ckpt_config(const ckpt_t *c);
int ckpt_count(const ckpt_t *c);
/* NULL when absent. */
const ckpt_tensor_t *ckpt_find(const ckpt_t *c, const char *name);
const ckpt_tensor_t *ckpt_tensor(const ckpt_t *c, int i);
/* Tensor `name` when it holds exactly count elements of dtype (so its data are count times the
 * dtype's size bytes); else NULL with a message naming the tensor and both shapes. */
const ckpt_tensor_t *ckpt_expect(const ckpt_t *c, const char *name, ckpt_dtype_t dtype,
                                 uint64_t count, char *err, size_t errlen);
/* Copy tensor `name` into dst after checking its dtype and count. */
int ckpt_get(const ckpt_t *c, const char *name, ckpt_dtype_t dtype, uint64_t count, void *dst,
             char *err, size_t errlen);

size_t ckpt_dtype_size(ckpt_dtype_t d);

#endif
