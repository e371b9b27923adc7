/* options.h — the trainer's command line: the option table (options.c) that fills and checks a
 * train_config_t (train_config.h). Everything is parsed and validated here, before the launcher
 * forks a rank or anything touches a GPU. */
#ifndef SRC_APP_OPTIONS_H
#define SRC_APP_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include "src/app/machine.h"
#include "src/train/train_config.h"

/* Parse argv into cfg and validate it against the machine. Returns 0 on success, 1 when --help,
 * --help-env or --version was printed to out (the program should exit 0), 2 on a bad flag or value (the message, which
 * names the flag and what is allowed, is in err). Does no work beyond reading /proc and stat(). */
int train_config_parse(train_config_t *cfg, int argc, char **argv, const train_machine_t *machine,
                       FILE *out, char *err, size_t errlen);
void train_config_usage(FILE *out, const train_machine_t *machine);

#endif
