/* fuzz_cli.c — libFuzzer harness for the trainer's command-line parser (train_config_parse):
 * any argv must be accepted or refused with a message; never a crash or an out-of-bounds access.
 * Build and run: tests/fuzz/run.sh cli SECONDS */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>

#include "tests/fuzz/cli_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static FILE *devnull;
  if (!devnull) devnull = fopen("/dev/null", "w"); /* --help output */
  cli_fuzz_run(data, size, devnull);
  return 0;
}
