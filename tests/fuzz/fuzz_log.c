/* fuzz_log.c — libFuzzer harness for the log a resumed run reads back (report_log_continue:
 * the earlier run's log.jsonl, kept up to the checkpoint's step): any bytes must give a log of
 * whole lines of the old one, in order, then the new record; never a crash or a bad access.
 * Build and run: tests/fuzz/run.sh log SECONDS */
#define _GNU_SOURCE
#include <stdint.h>

#include "tests/fuzz/fuzz_dir.h"
#include "tests/fuzz/log_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  log_fuzz_run(data, size, fuzz_dir("log"));
  return 0;
}
