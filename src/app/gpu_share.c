/* gpu_share.c — ranks that share GPUs: the start line's placement and the memory check made
 * before any rank starts (see gpu_share.h). The collectives between ranks that share a GPU take
 * the co-located path by themselves (README: Many ranks on one GPU); the engine replays no CUDA
 * graph then, under MPS too (world_share_gpus says why). --mps: the private MPS daemon's policy
 * (the process management is mps.c's). */
#include "config.h"

#include "src/app/gpu_share.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/device/arena.h"
#include "src/check.h"
#include "src/device/device.h"
#include "src/model/model.h"

/* What a rank's CUDA context and libraries (cuDNN, cuBLAS handles) take beyond its arena: an
 * allowance, since it cannot be measured before the ranks exist. */
#define CONTEXT_ALLOWANCE ((size_t)768 << 20)

int train_share_needed(const train_config_t *c) { return c->gpus > 0 && c->nproc > c->gpus; }

void train_share_describe(const train_config_t *c, char *buf, size_t len)
{
  size_t at = 0;
  buf[0] = '\0';
  if (!train_share_needed(c)) return;
  for (int g = 0; g < c->gpus && g < c->nproc; g++) {
    char ranks[64] = "";
    size_t n = 0;
    for (int r = g; r < c->nproc; r += c->gpus)
      n += (size_t)snprintf(ranks + n, sizeof ranks - n, "%s%d", n ? ", " : "", r);
    int alone = g + c->gpus >= c->nproc;
    int w = snprintf(buf + at, len - at, "%s%s %s %s GPU %d", g ? "; " : "",
                     alone ? "rank" : "ranks", ranks, alone ? "alone on" : "share", g);
    if (w < 0 || (size_t)w >= len - at) return;
    at += (size_t)w;
  }
}

typedef struct {
  int ok;
  size_t plan_bytes, free_bytes, total_bytes;
  char err[400];
} probe_t;

/* In the child: the model on GPU 0, its arena's size, the GPU's free memory. */
static void probe(const train_config_t *c, probe_t *p)
{
  model_config_t mc;
  train_config_model(c, 0, &mc);
  size_t total = 0;
  model_t *m = NULL;
  if (dev_mem_info(0, &p->free_bytes, &total, p->err, sizeof p->err) != 0) return;
  if (model_create(&m, &mc, p->err, sizeof p->err) != 0) return;
  p->plan_bytes = arena_total_peak(model_arena(m));
  p->total_bytes = total;
  p->ok = 1;
}

int train_share_check_memory(const train_config_t *c, char *err, size_t errlen)
{
  if (!train_share_needed(c)) return 0;
  int fd[2];
  if (pipe(fd) != 0) return snprintf(err, errlen, "cannot probe the GPU's memory (pipe)"), -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    probe_t p;
    memset(&p, 0, sizeof p);
    probe(c, &p);
    _exit(write(fd[1], &p, sizeof p) == (ssize_t)sizeof p ? 0 : 1);
  }
  close(fd[1]);
  probe_t p;
  memset(&p, 0, sizeof p);
  ssize_t got = pid > 0 ? read(fd[0], &p, sizeof p) : -1;
  close(fd[0]);
  if (pid > 0) waitpid(pid, NULL, 0);
  if (got != (ssize_t)sizeof p || !p.ok)
    return snprintf(err, errlen, "--nproc %d on %d GPU%s: cannot measure a rank's memory on GPU "
                    "0: %s", c->nproc, c->gpus, c->gpus == 1 ? "" : "s",
                    p.err[0] ? p.err : "the probe process failed"), -1;
  int k = (c->nproc + c->gpus - 1) / c->gpus; /* ranks on GPU 0, the busiest */
  double gib = 1024.0 * 1024.0 * 1024.0;
  double per = (double)(p.plan_bytes + CONTEXT_ALLOWANCE) / gib;
  /* The probe's own context is in use while free is read: one rank's allowance is taken. */
  double need = per * k - (double)CONTEXT_ALLOWANCE / gib, have = (double)p.free_bytes / gib;
  if (need <= have) return 0;
  return snprintf(err, errlen, "--nproc %d on %d GPU%s: the %d ranks on GPU 0 need about %.1f "
                  "GiB each (the memory plan of this model at --batch-size %d: %.1f GiB, and "
                  "about %.2f GiB for the rank's CUDA context), %.1f GiB in all, but GPU 0 has "
                  "%.1f GiB free of %.1f; use fewer ranks per GPU or a smaller --batch-size",
                  c->nproc, c->gpus, c->gpus == 1 ? "" : "s", k, per, c->batch_size,
                  (double)p.plan_bytes / gib, (double)CONTEXT_ALLOWANCE / gib, need,
                  have, (double)p.total_bytes / gib), -1;
}

/* How long the daemon may take to make its control pipe, a first CUDA call under it to answer
 * (the server starts on that call), the compute modes to be read, and the daemon to quit. */
#define MPS_READY_S 10.0
#define MPS_PROBE_S 60.0
#define MPS_MODE_S 30.0
#define MPS_STOP_S 10.0

/* In a child with the daemon's environment: one CUDA call, and the driver's word on MPS. */
static int mps_probe_gpu(void *arg, char *err, size_t errlen)
{
  int enabled = 0;
  (void)arg;
  if (dev_mps_enabled(0, &enabled, err, errlen) != 0) return -1;
  if (!enabled)
    return check_fail(err, errlen, "the driver did not run a CUDA context under the daemon");
  return 0;
}

static const char *compute_mode_name(int mode)
{
  static const char *const names[] = {"Default", "Exclusive_Thread", "Prohibited",
                                      "Exclusive_Process"};
  return mode >= 0 && mode < 4 ? names[mode] : "unknown";
}

/* In a child (the job's folder as the pipe directory, no daemon in it): the compute mode of every
 * GPU the ranks use. Only Default lets a private daemon serve the user's ranks beside whatever
 * else runs there: Exclusive_Process is an administrator's promise of one process (or one
 * system-wide MPS) per GPU, Prohibited no process at all. A mode that cannot be read is no
 * reason to refuse: the check under the daemon decides then. */
static int mps_compute_mode(void *arg, char *err, size_t errlen)
{
  const train_config_t *c = arg;
  int used = c->gpus < c->nproc ? c->gpus : c->nproc;
  for (int g = 0; g < used; g++) {
    int mode = 0;
    char why[256];
    if (dev_compute_mode(g, &mode, why, sizeof why) != 0) return 0;
    if (mode != 0)
      return check_fail(err, errlen, "GPU %d's compute mode is %s, not Default (an "
                        "administrator's setting, nvidia-smi -c)", g, compute_mode_name(mode));
  }
  return 0;
}

static const train_mps_probes_t real_probes = {.default_dir = MPS_DEFAULT_PIPE_DIR,
                                               .compute_mode = mps_compute_mode,
                                               .served = mps_probe_gpu};

/* Why no daemon could serve: --mps on refuses the job, auto says so on the start line. */
static int mps_not_had(const train_config_t *c, const char *why, char *line, size_t len,
                       char *err, size_t errlen)
{
  if (c->mps == TRAIN_MPS_ON)
    return check_fail(err, errlen, "--mps on: no MPS daemon for the ranks that share a GPU: %s "
                      "(or run with --no-mps: the ranks take turns on the GPU)", why);
  snprintf(line, len, "MPS: not used (%s): the ranks that share a GPU take turns on it", why);
  return 0;
}

/* A daemon that is not trusted listens in the default folder: never used. The ranks' driver
 * would connect to it by itself, so they get the job's folder as their pipe directory instead,
 * where no daemon listens (the driver then runs them without MPS). */
static int keep_away(const train_config_t *c, mps_daemon_t *d, const char *why, char *line,
                     size_t len, char *err, size_t errlen)
{
  if (c->mps == TRAIN_MPS_ON) return mps_not_had(c, why, line, len, err, errlen);
  char perr[PATH_MAX + 128] = "cannot set the ranks' environment";
  if (mps_prepare(d, perr, sizeof perr) != 0 || mps_export(d) != 0) {
    train_share_mps_stop(d);
    return check_fail(err, errlen, "%s; and the ranks cannot be kept away from it: %s", why,
                      perr);
  }
  snprintf(line, len, "MPS: not used (%s); the ranks look for a daemon in %s instead, where none "
           "listens: the ranks that share a GPU take turns on it", why, d->pipe_dir);
  return 0;
}

int train_share_mps_start(const train_config_t *c, const train_mps_probes_t *probes,
                          mps_daemon_t *d, char *line, size_t len, char *err, size_t errlen)
{
  train_mps_probes_t given = probes ? *probes : real_probes, *p = &given;
  if (!p->default_dir) p->default_dir = real_probes.default_dir;
  if (!p->compute_mode) p->compute_mode = real_probes.compute_mode;
  if (!p->served) p->served = real_probes.served;
  memset(d, 0, sizeof *d);
  d->lock_fd = -1;
  line[0] = '\0';
  if (!train_share_needed(c)) return 0;
  if (c->mps == TRAIN_MPS_OFF) {
    snprintf(line, len, "MPS: off (--no-mps, --mps off): the ranks that share a GPU take turns on "
             "it");
    return 0;
  }
  char why[PATH_MAX + 512], control[PATH_MAX];
  mps_found_t found;
  if (mps_in_effect(p->default_dir, &found, why, sizeof why) != 0)
    return check_fail(err, errlen, "%s", why);
  if (found == MPS_FOUND_OWN) {
    snprintf(line, len, "MPS: no private daemon: %s", why);
    return 0;
  }
  if (found == MPS_FOUND_FOREIGN) return keep_away(c, d, why, line, len, err, errlen);
  if (mps_find_control(MPS_CONTROL, control, sizeof control) != 0)
    return mps_not_had(c, MPS_CONTROL " is not on PATH (it comes with the NVIDIA driver)", line,
                       len, err, errlen);
  if (mps_prepare(d, why, sizeof why) != 0) return mps_not_had(c, why, line, len, err, errlen);
  char probe_err[512];
  if (mps_probe(d, p->compute_mode, (void *)c, MPS_MODE_S, probe_err, sizeof probe_err) != 0) {
    train_share_mps_stop(d);
    return mps_not_had(c, probe_err, line, len, err, errlen);
  }
  if (mps_start_in(d, control, MPS_READY_S, why, sizeof why) != 0)
    return mps_not_had(c, why, line, len, err, errlen);
  if (mps_probe(d, p->served, NULL, MPS_PROBE_S, probe_err, sizeof probe_err) != 0) {
    train_share_mps_stop(d);
    snprintf(why, sizeof why, "a CUDA process under the daemon failed: %s; another user's MPS "
             "server may hold the GPU", probe_err);
    return mps_not_had(c, why, line, len, err, errlen);
  }
  if (mps_export(d) != 0) {
    train_share_mps_stop(d);
    return mps_not_had(c, "cannot set the ranks' environment", line, len, err, errlen);
  }
  if (c->gpus == 1)
    snprintf(line, len, "MPS: private daemon (%d ranks on GPU 0; --no-mps goes without)",
             c->nproc);
  else
    snprintf(line, len, "MPS: private daemon (%d ranks on %d GPUs; --no-mps goes without)",
             c->nproc, c->gpus);
  return 0;
}

void train_share_mps_stop(mps_daemon_t *d)
{
  char err[PATH_MAX + 128];
  if (!d->pid && !d->dir[0]) return;
  mps_unexport();
  if (mps_stop(d, MPS_STOP_S, err, sizeof err) != 0) fprintf(stderr, "train: %s\n", err);
}
