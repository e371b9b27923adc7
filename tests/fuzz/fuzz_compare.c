/* fuzz_compare.c — libFuzzer harness for what tools/compare reads of a run (cmp_read_run:
 * summary.json, log.jsonl, dp_devices.json, our own JSON read by key): any bytes must be read
 * into a world of 1..CMP_MAX_DEV ranks and finite numbers; never a crash or a bad access.
 * Build and run: tests/fuzz/run.sh compare SECONDS */
#define _GNU_SOURCE
#include <stdint.h>

#include "tests/fuzz/fuzz_dir.h"
#include "tests/fuzz/compare_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  compare_fuzz_run(data, size, fuzz_dir("compare"));
  return 0;
}
