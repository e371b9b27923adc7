/* ckpt_input.h — how a fuzzer input becomes a checkpoint file (shared by the libFuzzer harness
 * and the regression test that replays kept inputs). The file checksum rejects nearly every
 * mutation before the parser sees it, so when the first byte is odd the rest gets a repaired
 * end marker and checksum, letting the fuzzer explore the parsing behind that check.
 * Returns a malloc'ed buffer of *out_len bytes. */
#ifndef TESTS_FUZZ_CKPT_INPUT_H
#define TESTS_FUZZ_CKPT_INPUT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static inline uint8_t *ckpt_fuzz_file(const uint8_t *data, size_t size, size_t *out_len)
{
  *out_len = 0;
  if (size == 0) return NULL;
  int repair = data[0] & 1;
  data++;
  size--;
  uint8_t *buf = malloc(size + 1);
  if (!buf) return NULL;
  memcpy(buf, data, size);
  if (repair && size >= 12) {
    memcpy(buf + size - 12, "CKPTEND", 8);
    uint32_t crc = (uint32_t)crc32(0L, buf, (uInt)(size - 4));
    memcpy(buf + size - 4, &crc, 4);
  }
  *out_len = size;
  return buf;
}

#endif
