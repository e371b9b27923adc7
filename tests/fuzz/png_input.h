/* png_input.h — how a fuzzer input becomes PNG files for the dataset loader, and the loader's
 * contract (shared by the libFuzzer harness and the Check test that replays kept inputs).
 * Byte 0: bit 0 = decode as a mask, bit 1 = the directory case, bit 2 = with val/ folders,
 * bit 3 = repair every chunk's CRC (else nearly every mutation dies at the CRC check before
 * the decoder sees it), bits 4-7 = classes - 2. Single file: the rest is the file, read through a memfd.
 * Directory: a little-endian u16 image length, the image, then the mask, as images/a.png and
 * masks/a.png beside a valid pair b.png; the dataset must open or be refused with a message,
 * and every sample it accepts must decode within the sizes it announced. */
#ifndef TESTS_FUZZ_PNG_INPUT_H
#define TESTS_FUZZ_PNG_INPUT_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "src/data/data.h"

/* An 8x8 RGB image and its 8x8 mask (classes 0..2), made by tests/fuzz/mkseeds_png.py. */
static const unsigned char png_fuzz_good_image[265] = {
  0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
  0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x08, 0x08, 0x02, 0x00, 0x00, 0x00, 0x4b, 0x6d, 0x29,
  0xdc, 0x00, 0x00, 0x00, 0xd0, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60, 0x60, 0xe7, 0x13,
  0x95, 0x51, 0xd6, 0x32, 0xb4, 0xb0, 0x77, 0xf3, 0x0d, 0x89, 0x4e, 0xca, 0x2c, 0x28, 0xaf, 0x6b,
  0xed, 0x99, 0x3c, 0x6b, 0x21, 0x03, 0xaf, 0x88, 0xb4, 0x92, 0xa6, 0x81, 0xb9, 0x9d, 0xab, 0x4f,
  0x70, 0x54, 0x62, 0x46, 0x7e, 0x59, 0x6d, 0x4b, 0xf7, 0xa4, 0x99, 0x0b, 0x96, 0xaf, 0x63, 0x90,
  0x52, 0xd4, 0xd0, 0x37, 0xb3, 0x75, 0xf1, 0x0e, 0x8a, 0x4c, 0x48, 0xcf, 0x2b, 0xad, 0x69, 0xee,
  0x9a, 0x38, 0x63, 0xfe, 0xb2, 0xb5, 0x5b, 0x76, 0x33, 0xa8, 0xeb, 0x99, 0xda, 0x38, 0x7b, 0x05,
  0x46, 0xc4, 0xa7, 0xe5, 0x96, 0x54, 0x37, 0x75, 0x4e, 0x98, 0x3e, 0x6f, 0xe9, 0x9a, 0xcd, 0xbb,
  0x0e, 0x9e, 0x60, 0x30, 0xb1, 0x76, 0xf2, 0x0c, 0x08, 0x8f, 0x4b, 0xcd, 0x29, 0xae, 0x6a, 0xec,
  0xe8, 0x9f, 0x36, 0x77, 0xc9, 0xea, 0x4d, 0x3b, 0x0f, 0x1c, 0x3f, 0x77, 0x95, 0xc1, 0xd1, 0xc3,
  0x3f, 0x2c, 0x36, 0x25, 0xbb, 0xa8, 0xb2, 0xa1, 0xbd, 0x6f, 0xea, 0x9c, 0xc5, 0xab, 0x36, 0xee,
  0xd8, 0x7f, 0xec, 0xec, 0x95, 0xdb, 0x8f, 0x18, 0xfc, 0x42, 0x63, 0x92, 0xb3, 0x0a, 0x2b, 0xea,
  0xdb, 0x7a, 0xa7, 0xcc, 0x5e, 0xb4, 0x72, 0xc3, 0xf6, 0x7d, 0x47, 0xcf, 0x5c, 0xbe, 0xf5, 0xf0,
  0xc5, 0x7b, 0x06, 0x24, 0x17, 0xae, 0x58, 0xbf, 0x6d, 0xef, 0x91, 0xd3, 0x97, 0x6e, 0x3e, 0x78,
  0xfe, 0xee, 0xeb, 0x1f, 0x00, 0xf1, 0x4a, 0x5e, 0x81, 0x62, 0x44, 0xdb, 0x7f, 0x00, 0x00, 0x00,
  0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
};
static const unsigned char png_fuzz_good_mask[79] = {
  0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
  0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x08, 0x08, 0x00, 0x00, 0x00, 0x00, 0xe1, 0x64, 0xe1,
  0x57, 0x00, 0x00, 0x00, 0x16, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60, 0x60, 0x64, 0x02,
  0x23, 0x18, 0xcd, 0xc4, 0x00, 0xa3, 0x19, 0x48, 0x91, 0x02, 0x00, 0x09, 0x2a, 0x00, 0x41, 0x9d,
  0x21, 0x3b, 0x12, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
};

/* Recompute the CRC of every whole chunk after the 8-byte signature, in place. */
static inline void png_fuzz_fix_crc(uint8_t *p, size_t n)
{
  size_t off = 8;
  while (off + 12 <= n) {
    size_t len = (size_t)p[off] << 24 | (size_t)p[off + 1] << 16 | (size_t)p[off + 2] << 8 | p[off + 3];
    if (len > n - off - 12) break;
    uint32_t crc = (uint32_t)crc32(0L, p + off + 4, (uInt)(len + 4));
    uint8_t *c = p + off + 8 + len;
    c[0] = crc >> 24, c[1] = crc >> 16, c[2] = crc >> 8, c[3] = crc;
    off += len + 12;
  }
}

static inline int png_fuzz_write(const char *path, const uint8_t *p, size_t n)
{
  unlink(path); /* not O_TRUNC: ext4 flushes a truncated-and-rewritten file on close (slow) */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return -1;
  ssize_t w = n ? write(fd, p, n) : 0;
  close(fd);
  return w == (ssize_t)n ? 0 : -1;
}

/* Decode every sample of an opened split; the sizes must be the ones announced. */
static inline void png_fuzz_read_all(const data_set_t *ds)
{
  if (!ds) abort();
  size_t px = (size_t)ds->max_width * ds->max_height;
  uint8_t *rgb = malloc(px * 3 + 1), *mask = malloc(px + 1);
  if (!rgb || !mask) abort();
  for (size_t i = 0; i < ds->size; i++) {
    int w = 0, h = 0;
    char err[512] = "";
    if (data_get(ds, i, rgb, mask, &w, &h, err, sizeof err) != 0) abort(); /* it was validated */
    if (w < ds->min_width || w > ds->max_width || h < ds->min_height || h > ds->max_height) abort();
    for (size_t p = 0; p < (size_t)w * h; p++)
      if (mask[p] >= ds->classes && mask[p] != DATA_IGNORE_LABEL) abort();
  }
  free(rgb);
  free(mask);
}

/* dir: a scratch folder of the caller's (its images/, masks/, val/ are rewritten). */
/* Returns 0 when the input was accepted, 1 when refused with a message (or unusable). */
static inline int png_fuzz_run(const uint8_t *data, size_t size, const char *dir)
{
  if (size == 0) return 1;
  int ok = 1;
  int flags = data[0];
  uint8_t *copy = malloc(size);
  if (!copy) return 1;
  memcpy(copy, data + 1, size - 1);
  data = copy;
  size--;
  char err[512];
  if (!(flags & 2)) {
    if (flags & 8) png_fuzz_fix_crc(copy, size);
    int fd = memfd_create("png", 0);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size)) {
      if (fd >= 0) close(fd);
      free(copy);
      return 1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    uint8_t *buf = NULL;
    size_t cap = 0;
    int w = -1, h = -1, w2 = -1, h2 = -1;
    memset(err, 0, sizeof err);
    /* As the dataset scan does it: the size first, a buffer of exactly that, then the pixels
     * (at most 4 Mpx here: the fuzzer is not to spend its time allocating). */
    if (data_png_size(path, flags & 1, (size_t)4 << 20, &w, &h, err, sizeof err) == 0 &&
        (cap = (size_t)w * h * ((flags & 1) ? 1 : 3)) > 0 && (buf = malloc(cap)) != NULL &&
        data_png_read(path, flags & 1, (size_t)4 << 20, buf, cap, &w2, &h2, err, sizeof err) == 0) {
      size_t bytes = (size_t)w2 * h2 * ((flags & 1) ? 1 : 3);
      if (w2 != w || h2 != h || w < 1 || h < 1 || bytes > cap) abort();
      volatile unsigned sum = 0; /* every decoded byte is readable */
      for (size_t k = 0; k < bytes; k++) sum += buf[k];
      ok = 0;
    } else if (err[0] == 0) {
      abort(); /* a refusal must say why */
    }
    free(buf);
    close(fd);
    free(copy);
    return ok;
  }
  size_t ilen = size >= 2 ? (size_t)(data[0] | data[1] << 8) : 0;
  data += size >= 2 ? 2 : size;
  size -= size >= 2 ? 2 : size;
  if (ilen > size) ilen = size;
  if (flags & 8) {
    png_fuzz_fix_crc((uint8_t *)data, ilen); /* data points into copy */
    png_fuzz_fix_crc((uint8_t *)data + ilen, size - ilen);
  }
  char path[1024];
  const char *subs[] = {"", "/images", "/masks", "/val", "/val/images", "/val/masks"};
  for (int i = 0; i < 6; i++) {
    snprintf(path, sizeof path, "%s%s", dir, subs[i]);
    mkdir(path, 0700);
  }
  const char *roots[] = {"", "/val"};
  for (int r = 0; r < 2; r++) {
    const uint8_t *pa[2] = {data, png_fuzz_good_image}, *pm[2] = {data + ilen, png_fuzz_good_mask};
    size_t na[2] = {ilen, sizeof png_fuzz_good_image}, nm[2] = {size - ilen, sizeof png_fuzz_good_mask};
    const char *names[2] = {"a.png", "b.png"};
    for (int k = 0; k < 2; k++) {
      snprintf(path, sizeof path, "%s%s/images/%s", dir, roots[r], names[k]);
      int bad = png_fuzz_write(path, pa[k], na[k]);
      snprintf(path, sizeof path, "%s%s/masks/%s", dir, roots[r], names[k]);
      if (bad || png_fuzz_write(path, pm[k], nm[k]) != 0) {
        free(copy);
        return 1;
      }
    }
  }
  if (!(flags & 4)) { /* without val/: the split comes from the sorted names */
    const char *gone[] = {"/val/images/a.png", "/val/images/b.png", "/val/masks/a.png",
                          "/val/masks/b.png", "/val/images", "/val/masks", "/val"};
    for (int k = 0; k < 7; k++) {
      snprintf(path, sizeof path, "%s%s", dir, gone[k]);
      if (k < 4) unlink(path);
      else rmdir(path);
    }
  }
  data_set_t *train = NULL, *val = NULL;
  memset(err, 0, sizeof err);
  int classes = 2 + (flags >> 4);
  if (data_open_png_dir(&train, &val, dir, classes, 1, (size_t)4 << 20, 1, err, sizeof err) == 0) {
    png_fuzz_read_all(train);
    png_fuzz_read_all(val);
    ok = 0;
  } else if (err[0] == 0) {
    abort();
  }
  data_destroy(train);
  data_destroy(val);
  free(copy);
  return ok;
}

#endif
