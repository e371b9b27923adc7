/* compare_input.h — how a fuzzer input becomes the files tools/compare reads of a run
 * (cmp_read_run), and the reader's contract; shared by the libFuzzer harness and the Check test
 * that replays kept inputs. Byte 0: bit 0 = a DataParallel run (dp_devices.json, else
 * log.jsonl), bits 1-4 = the steps left out of the split; bytes 1-2: the length of summary.json
 * (little-endian), then summary.json, then the other file. A run whose files exist is read, and
 * whatever they hold, its world is 1..CMP_MAX_DEV and every number is finite. */
#ifndef TESTS_FUZZ_COMPARE_INPUT_H
#define TESTS_FUZZ_COMPARE_INPUT_H

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/compare.h"

static inline int compare_fuzz_write(const char *dir, const char *name, const uint8_t *p, size_t n)
{
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  unlink(path);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return -1;
  ssize_t w = n ? write(fd, p, n) : 0;
  close(fd);
  return w == (ssize_t)n ? 0 : -1;
}

/* dir: a scratch folder of the caller's. 0: read; 1: not usable as an input. */
static inline int compare_fuzz_run(const uint8_t *data, size_t size, const char *dir)
{
  if (size < 3) return 1;
  int dp = data[0] & 1;
  long skip = (data[0] >> 1) & 15;
  size_t slen = (size_t)(data[1] | data[2] << 8);
  data += 3;
  size -= 3;
  if (slen > size) slen = size;
  if (compare_fuzz_write(dir, "summary.json", data, slen) != 0 ||
      compare_fuzz_write(dir, dp ? "dp_devices.json" : "log.jsonl", data + slen, size - slen) != 0)
    return 1;
  cmp_run_t r;
  memset(&r, 0, sizeof r);
  snprintf(r.mode, sizeof r.mode, "%s", dp ? "dp" : "ddp");
  if (cmp_read_run(&r, dir, skip) != 0) abort(); /* both files exist */
  if (r.world < 1 || r.world > CMP_MAX_DEV || r.split_devs < 0 || r.split_devs > CMP_MAX_DEV)
    abort();
  double all = r.images_per_s + r.train_loss + r.step_ms;
  for (int d = 0; d < CMP_MAX_DEV; d++) {
    all += r.compute_ms[d] + r.comm_ms[d] + r.idle_ms[d] + r.peak_mib[d];
    for (int k = 0; k < CMP_NCAT; k++) all += r.mem_mib[d][k];
  }
  if (!isfinite(all)) abort();
  return 0;
}

#endif
