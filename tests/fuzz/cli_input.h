/* cli_input.h — how a fuzzer input becomes a trainer command line, and the parser's contract
 * (shared by the libFuzzer harness and the Check test that replays kept inputs).
 * Byte 0 picks the fake machine (GPUs visible, CUDA built, CPUs); the rest, split on NUL bytes,
 * is argv[1..]. The parser must return 0 (valid), 1 (--help printed) or 2 with a message. */
#ifndef TESTS_FUZZ_CLI_INPUT_H
#define TESTS_FUZZ_CLI_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/app/options.h"

#define CLI_FUZZ_MAX_ARGS 64

/* Returns the parser's status; aborts (a crash the fuzzer and the test both see) when the
 * contract is broken. */
static inline int cli_fuzz_run(const uint8_t *data, size_t size, FILE *help_out)
{
  if (size == 0) return 0;
  train_machine_t m = {.visible_gpus = data[0] % 9, .cuda_built = (data[0] >> 4) & 1,
                       .online_cpus = 1 + ((data[0] >> 5) & 7)};
  data++;
  size--;
  /* One copy with a NUL after every argument (including the last, which may lack one). */
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  char *argv[CLI_FUZZ_MAX_ARGS + 2];
  int argc = 0;
  argv[argc++] = "train";
  for (size_t i = 0; i < size && argc <= CLI_FUZZ_MAX_ARGS; i += strlen(text + i) + 1)
    argv[argc++] = text + i;
  argv[argc] = NULL;
  train_config_t cfg;
  char err[512];
  memset(err, 0, sizeof err);
  int rc = train_config_parse(&cfg, argc, argv, &m, help_out, err, sizeof err);
  if (rc != 0 && rc != 1 && rc != 2) abort(); /* an undocumented status */
  if (rc == 2 && err[0] == 0) abort();       /* a refusal must say why */
  if (rc == 0) {
    /* Accepted: the settings the launcher relies on are in range. */
    if (cfg.nproc < 1 || cfg.nproc > SHMDDP_MAX_RANKS || cfg.levels < 1 ||
        cfg.levels > MODEL_MAX_LEVELS || cfg.image_size < 8 || cfg.batch_size < 1 ||
        cfg.epochs < 1 || !(cfg.timeout_s > 0) || cfg.classes < 2)
      abort();
    char line[2048];
    train_config_describe(&cfg, line, sizeof line);
    model_config_t mc;
    train_config_model(&cfg, cfg.nproc - 1, &mc);
  }
  free(text);
  return rc;
}

#endif
