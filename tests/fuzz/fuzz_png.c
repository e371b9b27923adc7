/* fuzz_png.c — libFuzzer harness for the PNG dataset loader (data_png_read, data_open_png_dir):
 * any bytes must decode or be refused with a message; never a crash, a leak or a bad access.
 * Build and run: tests/fuzz/run.sh png SECONDS */
#define _GNU_SOURCE
#include <stdint.h>

#include "tests/fuzz/fuzz_dir.h"
#include "tests/fuzz/png_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  png_fuzz_run(data, size, fuzz_dir("png"));
  return 0;
}
