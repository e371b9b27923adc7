/* ckpt_look.c — training checkpoints as the shell tests see them.
 *   ckpt_look FILE        prints "step=N run=ID classes=K values=V0,V1,..." (run=- and classes=0
 *                         for a checkpoint without a run record)
 *   ckpt_look FILE1 FILE2 exit 0 when both hold the same training state: the same settings line
 *                         and every tensor but the run record the same, byte for byte (two runs
 *                         of the same settings differ only in their run ids); else 1, naming
 *                         the first difference. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "src/train/ckpt_file.h"
#include "src/train/ckpt_run.h"

static int show(const ckpt_t *c)
{
  const ckpt_tensor_t *st = ckpt_find(c, "state");
  char err[256];
  ckpt_run_t run;
  if (!st || st->dtype != CKPT_F64 || st->count < 1 || ckpt_run_read(c, &run, err, sizeof err)) {
    fprintf(stderr, "ckpt_look: no training state or a damaged run record\n");
    return 1;
  }
  double step;
  memcpy(&step, st->data, sizeof step);
  printf("step=%.0f run=%s classes=%d values=", step, run.id[0] ? run.id : "-", run.classes);
  for (int k = 0; k < run.classes; k++) printf("%s%d", k ? "," : "", run.class_value[k]);
  printf("\n");
  return 0;
}

/* Whether every tensor of a but the run record is in b, the same. */
static int contained(const ckpt_t *a, const ckpt_t *b, const char *an, const char *bn)
{
  for (int i = 0; i < ckpt_count(a); i++) {
    const ckpt_tensor_t *t = ckpt_tensor(a, i), *u = ckpt_find(b, t->name);
    if (!strcmp(t->name, CKPT_RUN_TENSOR)) continue;
    if (!u) {
      printf("ckpt_look: %s has tensor '%s', %s has not\n", an, t->name, bn);
      return 0;
    }
    if (u->dtype != t->dtype || u->count != t->count ||
        memcmp(u->data, t->data, t->count * ckpt_dtype_size(t->dtype)) != 0) {
      printf("ckpt_look: tensor '%s' differs between %s and %s\n", t->name, an, bn);
      return 0;
    }
  }
  return 1;
}

int main(int argc, char **argv)
{
  if (argc != 2 && argc != 3) {
    fprintf(stderr, "usage: ckpt_look FILE [FILE2]\n");
    return 2;
  }
  char err[512];
  ckpt_t *c[2] = {NULL, NULL};
  for (int i = 1; i < argc; i++)
    if (ckpt_read(argv[i], &c[i - 1], err, sizeof err) != 0) {
      fprintf(stderr, "ckpt_look: %s\n", err);
      ckpt_free(c[0]);
      return 2;
    }
  int rc;
  if (argc == 2) {
    rc = show(c[0]);
  } else if (strcmp(ckpt_config(c[0]), ckpt_config(c[1])) != 0) {
    printf("ckpt_look: the settings lines differ\n");
    rc = 1;
  } else {
    rc = contained(c[0], c[1], argv[1], argv[2]) && contained(c[1], c[0], argv[2], argv[1]) ? 0 : 1;
  }
  ckpt_free(c[0]);
  ckpt_free(c[1]);
  return rc;
}
