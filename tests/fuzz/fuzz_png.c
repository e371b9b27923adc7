/* fuzz_png.c — libFuzzer harness for the PNG dataset loader (data_png_read, data_open_png_dir):
 * any bytes must decode or be refused with a message; never a crash, a leak or a bad access.
 * Build and run: tests/fuzz/run.sh png SECONDS */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/fuzz/png_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static char dir[64];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/shmddp-fuzz-png-XXXXXX");
    if (!mkdtemp(dir)) abort();
  }
  png_fuzz_run(data, size, dir);
  return 0;
}
