/* env.h — every environment variable shmddp reads, in one table (name, kind, accepted range,
 * default, who reads it, meaning), and the one validating reader every layer uses: the
 * launcher and the collectives, the CUDA transport, the NCCL front end, the trainer's kernels,
 * model and world. Nothing else calls getenv for a SHMDDP_* setting.
 *
 * A reader returns 0 when the variable is unset (or empty: the default applies), 1 with the
 * value when it is set to something the setting takes, and -1 with a message naming the
 * variable, what it was given, why, and the accepted range when it is not (anything but plain
 * decimal digits, a whole part above 2^53, out of range). `shmddp-train --help-env` prints the
 * table and the README's table is the same text (tests/readme_env.sh); before anything starts,
 * shmddp-train checks every SHMDDP_* variable of its environment against it
 * (shm_env_check_environ).
 *
 * Every setting is read once, when the thing it configures is made (the launch, a
 * communicator's device transport, a CUDA ops table, a convolution's plan), never per call. The
 * few readers without an error path (a convolution planner's switches: shm_env_is,
 * shm_env_count_or) belong to the trainer, which has refused bad values before they run; used
 * alone they take a bad value for the default. */
#ifndef SHM_ENV_H
#define SHM_ENV_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  SHM_ENV_NUMBER, /* a decimal number (digits, optionally '.' and digits) in [min, max] */
  SHM_ENV_COUNT,  /* a whole number (digits) in [min, max] */
  SHM_ENV_BYTES,  /* a byte count (digits), optionally k, m or g (KiB, MiB, GiB), in [min, max] */
  SHM_ENV_FLAG,   /* 0 or 1 */
  SHM_ENV_CHOICE, /* one of `choices` ("N" among them: a whole number, checked by its reader) */
  SHM_ENV_TEXT,   /* anything (not ours: e.g. CUDA_VISIBLE_DEVICES) */
  SHM_ENV_SET     /* set by the launcher for each rank: read it, do not set it */
} shm_env_kind_t;

typedef struct {
  const char *name;
  shm_env_kind_t kind;
  double min, max;     /* NUMBER, COUNT, BYTES */
  const char *choices; /* CHOICE: "a|b|c" */
  const char *unit;    /* NUMBER, COUNT: what the number counts ("seconds", "MiB") */
  const char *dflt;    /* the value when unset, in words */
  const char *reader;  /* who reads it, and when */
  const char *meaning; /* one line */
} shm_env_param_t;

/* One entry of the table by name (NULL when it is no setting). */
const shm_env_param_t *shm_env_find(const char *name);

/* What p takes, in words ("a number from 0.0625 to 65536 (MiB)", "0|1", "auto|ring"). */
void shm_env_accepts(const shm_env_param_t *p, char *buf, size_t len);

/* Checks value against p: 0, or -1 with a message naming p's variable and the accepted range. */
int shm_env_check(const shm_env_param_t *p, const char *value, char *err, size_t errlen);

/* The readers (see the top of this file). name must be in the table. */
int shm_env_number(const char *name, double *value, char *err, size_t errlen);
int shm_env_count(const char *name, long *value, char *err, size_t errlen);
int shm_env_bytes(const char *name, uint64_t *value, char *err, size_t errlen);
int shm_env_flag(const char *name, int *value, char *err, size_t errlen);
/* CHOICE (and TEXT): *value points into the environment. */
int shm_env_choice(const char *name, const char **value, char *err, size_t errlen);

/* v as plain decimal digits, exactly (no sign, spaces, decimal point, exponent or 0x; at most
 * max, which is at most 2^53): 0 with the number in *out, or -1. The same rule for the variables
 * that are not shmddp's settings but are read as numbers (an MPI launcher's world size). */
int shm_env_parse_whole(const char *v, uint64_t max, uint64_t *out);

/* Without an error path (trainer only, see above): whether the valid value of name is value;
 * a count, or dflt when unset or invalid. */
int shm_env_is(const char *name, const char *value);
long shm_env_count_or(const char *name, long dflt);

/* Checks the SHMDDP_* entries of env (NAME=VALUE strings, NULL-terminated, e.g. environ): 0, or
 * -1 with a message naming the first variable whose value its setting does not take. A name
 * that is no setting (a typo, a removed switch) gets a warning on warn (may be NULL), prefixed
 * with who (e.g. "train"). */
int shm_env_check_environ(char *const *env, const char *who, FILE *warn, char *err,
                          size_t errlen);

/* The table for people (--help-env), and as the README's markdown table (the same words). */
void shm_env_print(FILE *f);
void shm_env_print_markdown(FILE *f);

#ifdef __cplusplus
}
#endif

#endif
