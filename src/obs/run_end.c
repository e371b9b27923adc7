/* run_end.c — a run's last lines (see run_end.h). */
#include "config.h"

#include "src/obs/run_end.h"

#include <string.h>

#include "src/obs/shquote.h"

/* The program `name` of this installation: beside the running trainer when it was started by a
 * path (./train in the build tree: ./shmddp-predict), else by its name (from PATH). */
static void sibling_program(const char *program, const char *name, char *buf, size_t len)
{
  const char *slash = program ? strrchr(program, '/') : NULL;
  if (slash) snprintf(buf, len, "%.*s/%s", (int)(slash - program), program, name);
  else snprintf(buf, len, "%s", name);
}

void run_end_print(FILE *f, const char *out_dir, long step, const char *program,
                   const summary_restart_t *restarts, int nrestarts, int max_restarts)
{
  for (int i = 0; i < nrestarts; i++)
    fprintf(f, "train: restart %d of %d (--max-restarts) from step %ld: %s\n", i + 1,
            max_restarts, restarts[i].step, restarts[i].reason);
  char ckpt[4096], prog[4096], qc[3 * sizeof ckpt], qp[3 * sizeof prog];
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint.ckpt", out_dir);
  sibling_program(program, "shmddp-predict", prog, sizeof prog);
  shquote(ckpt, qc, sizeof qc);
  shquote(prog, qp, sizeof qp);
  fprintf(f,
          "train: the model (step %ld) is in %s\n"
          "  predict: %s --checkpoint %s --images IMAGES --out MASKS\n"
          "  export:  %s --checkpoint %s --export model.safetensors\n",
          step, qc, qp, qc, qp, qc);
  fflush(f);
}
