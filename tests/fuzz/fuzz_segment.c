/* fuzz_segment.c — libFuzzer harness for what a joiner reads of a segment it opens by name
 * (shm_segment_map_fd: owner, mode and header checks; then the liveness of its members and the
 * regions its layout places): any bytes and any file size must be mapped consistently or refused
 * with a message; never a crash or a bad access. Build and run: tests/fuzz/run.sh segment SECONDS
 * (or make fuzz-segment). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>

#include "tests/fuzz/segment_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (segment_fuzz_run(data, size) < 0) abort();
  return 0;
}
