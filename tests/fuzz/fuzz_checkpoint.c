/* fuzz_checkpoint.c — libFuzzer harness for the checkpoint reader: any bytes must be either
 * accepted as a well-formed checkpoint or refused with a message; never a crash, a hang or an
 * out-of-bounds read. Build and run: tests/fuzz/run.sh checkpoint SECONDS */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "src/train/ckpt_file.h"
#include "tests/fuzz/ckpt_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  size_t len;
  uint8_t *buf = ckpt_fuzz_file(data, size, &len);
  if (!buf) return 0;
  int fd = memfd_create("ckpt", 0);
  ssize_t w = fd >= 0 && len ? write(fd, buf, len) : 0;
  free(buf);
  if (fd < 0 || w != (ssize_t)len) {
    if (fd >= 0) close(fd);
    return 0;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ckpt_t *c = NULL;
  char err[256] = "";
  if (ckpt_read(path, &c, err, sizeof err) == 0) {
    /* Accepted: every tensor must be readable in full. */
    volatile unsigned sum = 0;
    for (int i = 0; i < ckpt_count(c); i++) {
      const ckpt_tensor_t *t = ckpt_tensor(c, i);
      const unsigned char *p = t->data;
      size_t bytes = t->count * ckpt_dtype_size(t->dtype);
      for (size_t k = 0; k < bytes; k++) sum += p[k];
    }
    (void)strlen(ckpt_config(c));
    ckpt_free(c);
  } else if (err[0] == 0) {
    abort(); /* a refusal must say why */
  }
  close(fd);
  return 0;
}
