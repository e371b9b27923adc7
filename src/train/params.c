/* params.c — the table of environment variables (see params.h) and its checks. The checks accept
 * what the readers accept, so a value refused here would have been misread or ignored there. */
#include "config.h"

#include "src/train/params.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"

static const param_t table[] = {
    /* the launcher and the collectives (collectives/launch.c, collectives/cuda_init.c) */
    {.name = "SHMDDP_ALGO",
     .kind = PARAM_CHOICE,
     .choices = "auto|direct|ring|twoshot|cering|staged|coloc",
     .dflt = "auto",
     .reader = "collectives, at launch",
     .meaning = "force one collective algorithm (auto: by size and transport; ranks sharing a GPU: coloc)"},
    {.name = "SHMDDP_TIMEOUT",
     .kind = PARAM_NUMBER,
     .dflt = "300 (none for NCCL clients)",
     .reader = "collectives, at launch",
     .meaning = "seconds a collective waits for a peer, where the program sets none "
                "(shmddp-train sets --timeout; libshmddp-nccl.so sets no limit unless this is "
                "set)"},
    {.name = "SHMDDP_SLOT_MB",
     .kind = PARAM_NUMBER,
     .dflt = "4",
     .reader = "collectives, at launch",
     .meaning = "host staging per rank in the shared segment, MiB"},
    {.name = "SHMDDP_COLOC_WAIT",
     .kind = PARAM_CHOICE,
     .choices = "host|stream|leader",
     .dflt = "host",
     .reader = "collectives, device transport set-up",
     .meaning = "ranks that share a GPU: where a rank waits for its peers' events (host: its host "
                "queries them, so no stream waits for another process; stream: its stream waits, "
                "the call returns at once; leader: host in each GPU's lowest rank, stream in the "
                "others)"},
    {.name = "SHMDDP_CUDA_P2P",
     .kind = PARAM_FLAG,
     .dflt = "1",
     .reader = "collectives, device transport set-up",
     .meaning = "0: no peer-to-peer access; device collectives go through pinned host memory"},
    {.name = "SHMDDP_MPI_CUDA_AWARE",
     .kind = PARAM_FLAG,
     .dflt = "what MPIX_Query_cuda_support says",
     .reader = "shmddp-train under mpirun, world set-up",
     .meaning = "0: device buffers cross nodes through pinned host memory even where MPI is "
                "CUDA-aware; 1: hand MPI device pointers (only with a CUDA-aware MPI)"},
    {.name = "SHMDDP_CUDA_DIRECT_MAX",
     .kind = PARAM_BYTES,
     .dflt = "1m",
     .reader = "collectives, device transport set-up",
     .meaning = "device all-reduces up to this size are one-shot, larger ones two-shot"},
    {.name = "SHMDDP_CUDA_TS_MAX",
     .kind = PARAM_BYTES,
     .dflt = "4m",
     .reader = "collectives, device transport set-up",
     .meaning = "two-shot all-reduces up to this size run through scratch buffers"},
    {.name = "SHMDDP_CUDA_TS_BLOCKS",
     .kind = PARAM_COUNT,
     .dflt = "the communicator's max_blocks (DDP's buckets: 16), else 128",
     .reader = "collectives, device transport set-up",
     .meaning = "thread blocks of a two-shot all-reduce (1..128)"},
    {.name = "SHMDDP_CUDA_CE_MIN",
     .kind = PARAM_BYTES,
     .dflt = "never",
     .reader = "collectives, device transport set-up",
     .meaning = "use the copy-engine ring from this size (auto never picks it: it lost to the "
                "two-shot, 267 vs 339 GB/s at 1 GiB on 2 x H200)"},
    {.name = "SHMDDP_CUDA_CE_CHUNK",
     .kind = PARAM_BYTES,
     .dflt = "a 32nd of a rank's slice",
     .reader = "collectives, device transport set-up",
     .meaning = "chunk size of the copy-engine ring"},
    {.name = "SHMDDP_CUDA_EXPORTS",
     .kind = PARAM_COUNT,
     .dflt = "1024",
     .reader = "collectives, device transport set-up",
     .meaning = "live exports of a rank's device buffers (16..1048576) before the least recently "
                "used one is retired and its peers unmap it"},
    {.name = "SHMDDP_NCCL_DEBUG",
     .kind = PARAM_FLAG,
     .dflt = "0",
     .reader = "libshmddp-nccl.so, at its first message",
     .meaning = "1: a line per communicator made and every failure on stderr (as "
                "NCCL_DEBUG=INFO; NCCL_DEBUG=WARN prints the failures only)"},
    /* the CUDA backend of the model's ops (kernels/) */
    {.name = "SHMDDP_TF32",
     .kind = PARAM_FLAG,
     .dflt = "1",
     .reader = "kernels, when a CUDA ops table is made",
     .meaning = "0: fp32 convolutions and GEMMs in plain f32, not TF32 (cross-checks against f64)"},
    {.name = "SHMDDP_CONV_SEARCH",
     .kind = PARAM_CHOICE,
     .choices = "heuristic|timed",
     .dflt = "--deterministic decides (on: heuristic)",
     .reader = "kernels, when a convolution is planned",
     .meaning = "how cuDNN's algorithms are chosen: deterministic heuristics, or timing them all"},
    {.name = "SHMDDP_CONV_PAD",
     .kind = PARAM_FLAG,
     .dflt = "1",
     .reader = "kernels, when a convolution is planned",
     .meaning = "0: no zero-padding of few input channels (the RGB layer) to the tensor cores' "
                "width"},
    {.name = "SHMDDP_CONV1X1",
     .kind = PARAM_CHOICE,
     .choices = "cudnn|gemm",
     .dflt = "own kernels for few outputs (the head), cuBLAS otherwise",
     .reader = "kernels, when a convolution is planned",
     .meaning = "run every 1x1 convolution on cuDNN, or on cuBLAS"},
    {.name = "SHMDDP_CONV_WS_MB",
     .kind = PARAM_COUNT,
     .dflt = "512",
     .reader = "kernels, when a convolution is planned",
     .meaning = "largest workspace a convolution algorithm may use, MiB"},
    {.name = "SHMDDP_CONV_VERBOSE",
     .kind = PARAM_FLAG,
     .dflt = "0",
     .reader = "kernels, when a convolution is planned",
     .meaning = "1: print each layer's chosen algorithms and workspace to stderr"},
    /* the model (src/model/unet.c) */
    {.name = "SHMDDP_MEM_PLAN",
     .kind = PARAM_CHOICE,
     .choices = "shared|separate",
     .dflt = "shared",
     .reader = "the model, when it is built",
     .meaning = "separate: every activation and gradient in its own memory, none shared between "
                "tensors that are never alive together (checks the memory plan; costs memory)"},
    {.name = "SHMDDP_RECOMPUTE",
     .kind = PARAM_CHOICE,
     .choices = "auto|all|none|N",
     .dflt = "auto",
     .reader = "the model, when it is built",
     .meaning = "at how many of the shallowest levels backward recomputes the norm+ReLU outputs, "
                "skips and concats (deeper levels keep forward's: faster, more memory); auto: "
                "none in fp32, the 2 shallowest in bf16/fp16 (reference U-Net on one H200: "
                "bench/results/ab_recompute_levels_1xh200.txt)"},
    /* set by the launcher in every rank (shm/launcher.c) */
    {.name = "SHMDDP_RANK",
     .kind = PARAM_SET,
     .dflt = "-",
     .reader = "the rank's code",
     .meaning = "this rank's number"},
    {.name = "SHMDDP_LOCAL_RANK",
     .kind = PARAM_SET,
     .dflt = "-",
     .reader = "the rank's code",
     .meaning = "this rank's number on this machine (its GPU)"},
    {.name = "SHMDDP_WORLD_SIZE",
     .kind = PARAM_SET,
     .dflt = "-",
     .reader = "the rank's code",
     .meaning = "the number of ranks"},
    /* not ours, but honoured */
    {.name = "CUDA_VISIBLE_DEVICES",
     .kind = PARAM_TEXT,
     .dflt = "every GPU",
     .reader = "shmddp-train, before forking (without initialising CUDA)",
     .meaning = "the GPUs a run may use; --nproc defaults to their number"},
};

#define NPARAMS (sizeof table / sizeof table[0])

const param_t *params_table(size_t *count)
{
  *count = NPARAMS;
  return table;
}

static const char *kind_name(const param_t *p)
{
  switch (p->kind) {
  case PARAM_NUMBER:
    return "a positive number";
  case PARAM_COUNT:
    return "a positive integer";
  case PARAM_BYTES:
    return "bytes, or with k|m|g";
  case PARAM_FLAG:
    return "0|1";
  case PARAM_CHOICE:
    return p->choices;
  case PARAM_TEXT:
    return "text";
  case PARAM_SET:
    return "(set)";
  }
  return "?";
}

void params_print(FILE *f)
{
  fprintf(f, "Environment variables (each read once, when what it configures is made):\n\n");
  for (size_t i = 0; i < NPARAMS; i++) {
    const param_t *p = &table[i];
    fprintf(f, "  %-22s %s (default: %s)\n", p->name, kind_name(p), p->dflt);
    fprintf(f, "  %-22s %s\n  %-22s read by %s\n", "", p->meaning, "", p->reader);
  }
}

/* Whether value is what p takes; what is wrong otherwise. */
static int value_ok(const param_t *p, const char *v)
{
  char *end;
  errno = 0;
  switch (p->kind) {
  case PARAM_NUMBER: {
    double d = strtod(v, &end);
    return *v && !errno && !*end && d > 0 && d < 1e300;
  }
  case PARAM_COUNT: {
    long n = strtol(v, &end, 10);
    return *v && !errno && !*end && n > 0;
  }
  case PARAM_BYTES: {
    if (*v < '0' || *v > '9') return 0;
    strtoull(v, &end, 10);
    if (errno) return 0;
    if (*end && strchr("kKmMgG", *end)) end++;
    return !*end;
  }
  case PARAM_FLAG:
    return !strcmp(v, "0") || !strcmp(v, "1");
  case PARAM_CHOICE: {
    size_t len = strlen(v);
    for (const char *c = p->choices; len && *c;) {
      const char *bar = strchr(c, '|');
      size_t n = bar ? (size_t)(bar - c) : strlen(c);
      if (n == len && !strncmp(c, v, n)) return 1;
      if (n == 1 && *c == 'N' && strspn(v, "0123456789") == len) return 1; /* "N": a count */
      c += n + (bar != NULL);
    }
    return 0;
  }
  case PARAM_TEXT:
  case PARAM_SET:
    return 1;
  }
  return 0;
}

int params_check_env(char *const *env, FILE *warn, char *err, size_t errlen)
{
  for (; env && *env; env++) {
    const char *e = *env, *eq = strchr(e, '=');
    if (strncmp(e, "SHMDDP_", 7) != 0 || !eq) continue;
    size_t len = (size_t)(eq - e);
    const param_t *p = NULL;
    for (size_t i = 0; i < NPARAMS && !p; i++)
      if (strlen(table[i].name) == len && !strncmp(table[i].name, e, len)) p = &table[i];
    if (!p) {
      if (warn)
        fprintf(warn,
                "train: warning: %.*s is not a shmddp setting (a typo, or a switch that "
                "was removed); ignored. shmddp-train --help-env lists them\n",
                (int)len, e);
      continue;
    }
    if (!value_ok(p, eq + 1))
      return check_fail(err, errlen,
                        "%s=%s is not allowed: it takes %s; shmddp-train --help-env lists every "
                        "setting",
                        p->name, eq + 1, kind_name(p));
  }
  return 0;
}
