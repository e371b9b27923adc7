/* params.h — every environment variable shmddp reads, in one table: name, kind of value,
 * default, who reads it and when, and what it does. `shmddp-train --help-env` prints it, and the
 * README's table is this one. Before anything starts, shmddp-train checks the SHMDDP_* variables
 * of its environment against it: a value its setting does not take is refused (the message names
 * the variable and what it takes), a name that is not a setting (a typo, a removed switch) is
 * reported and ignored.
 *
 * Every setting is read once, when the thing it configures is made (the launch, a communicator's
 * device transport, a CUDA ops table, a convolution's plan), never on a hot path. The collectives'
 * and the kernels' settings are read by their own code (collectives/, kernels/); they are listed
 * here so that one place names them all. */
#ifndef SRC_TRAIN_PARAMS_H
#define SRC_TRAIN_PARAMS_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
  PARAM_NUMBER, /* a positive number */
  PARAM_COUNT,  /* a positive integer */
  PARAM_BYTES,  /* a byte count, optionally with k, m or g (KiB, MiB, GiB) */
  PARAM_FLAG,   /* 0 or 1 */
  PARAM_CHOICE, /* one of `choices` */
  PARAM_TEXT,   /* anything (not checked) */
  PARAM_SET     /* set by the launcher for each rank: read it, do not set it */
} param_kind_t;

typedef struct {
  const char *name;
  param_kind_t kind;
  const char *choices; /* PARAM_CHOICE: "a|b|c" */
  const char *dflt;    /* the value when unset, in words */
  const char *reader;  /* who reads it, and when */
  const char *meaning; /* one line */
} param_t;

/* The table, and its length. */
const param_t *params_table(size_t *count);

/* The table for --help-env. */
void params_print(FILE *f);

/* Checks the SHMDDP_* entries of env (NAME=VALUE strings, NULL-terminated, e.g. environ).
 * Returns 0, or -1 with a message naming the first variable whose value its setting does not
 * take; names that are no setting get a warning on `warn` (may be NULL). */
int params_check_env(char *const *env, FILE *warn, char *err, size_t errlen);

#endif
