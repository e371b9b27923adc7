/* ckpt_craft.c — makes damaged training checkpoints for tests/fault_files.sh: reads a good one
 * and writes it back with one tensor changed (valid CRCs, so only the loader's own checks can
 * refuse it). Usage: ckpt_craft IN OUT KIND, KIND one of
 *   buffers-u8, optimizer-u8    the tensor stored as bytes (count unchanged: a quarter the data)
 *   params-f64                  the parameters as f64 (twice the data)
 *   params-short                one parameter fewer
 *   state-nan-step, state-huge-step, state-negative-epoch, state-fractional-taken,
 *   state-zero-scale            one value of the progress state */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/train/ckpt_file.h"

enum { ST_STEP, ST_EPOCH, ST_TAKEN, ST_SCALE = 7 }; /* positions in the "state" tensor */

int main(int argc, char **argv)
{
  if (argc != 4) {
    fprintf(stderr, "usage: ckpt_craft IN OUT KIND\n");
    return 2;
  }
  const char *kind = argv[3];
  char err[512];
  ckpt_t *c;
  if (ckpt_read(argv[1], &c, err, sizeof err) != 0) {
    fprintf(stderr, "ckpt_craft: %s\n", err);
    return 1;
  }
  int n = ckpt_count(c);
  ckpt_tensor_t *t = calloc((size_t)n, sizeof *t);
  void *extra = NULL;
  for (int i = 0; i < n; i++) t[i] = *ckpt_tensor(c, i);
  int done = 0;
  for (int i = 0; i < n; i++) {
    const char *name = t[i].name;
    if ((!strcmp(kind, "buffers-u8") && !strcmp(name, "buffers")) ||
        (!strcmp(kind, "optimizer-u8") && !strcmp(name, "optimizer"))) {
      t[i].dtype = CKPT_U8;
      done = 1;
    } else if (!strcmp(kind, "params-f64") && !strcmp(name, "params")) {
      extra = calloc(t[i].count ? t[i].count : 1, 8);
      t[i].dtype = CKPT_F64;
      t[i].data = extra;
      done = 1;
    } else if (!strcmp(kind, "params-short") && !strcmp(name, "params")) {
      t[i].count--;
      done = 1;
    } else if (!strncmp(kind, "state-", 6) && !strcmp(name, "state") && t[i].count > ST_SCALE) {
      double *st = malloc(t[i].count * sizeof *st);
      memcpy(st, t[i].data, t[i].count * sizeof *st);
      if (!strcmp(kind, "state-nan-step")) st[ST_STEP] = NAN;
      else if (!strcmp(kind, "state-huge-step")) st[ST_STEP] = 1e30;
      else if (!strcmp(kind, "state-negative-epoch")) st[ST_EPOCH] = -3;
      else if (!strcmp(kind, "state-fractional-taken")) st[ST_TAKEN] = 2.5;
      else if (!strcmp(kind, "state-zero-scale")) st[ST_SCALE] = 0;
      else break;
      t[i].data = extra = st;
      done = 1;
    }
  }
  if (!done) {
    fprintf(stderr, "ckpt_craft: unknown kind %s (or no such tensor)\n", kind);
    return 2;
  }
  int rc = ckpt_write(argv[2], ckpt_config(c), t, n, err, sizeof err);
  if (rc) fprintf(stderr, "ckpt_craft: %s\n", err);
  free(extra);
  free(t);
  ckpt_free(c);
  return rc ? 1 : 0;
}
