/* env.c — the environment table and its validating reader (see env.h). A value is plain decimal
 * digits (a NUMBER may have one decimal point between digits; a byte count one k|m|g suffix),
 * checked character by character before it is converted: no sign, no spaces, no exponent, no
 * 0x, nothing trailing — the forms strtod/strtoull would also take. Whole parts are exact: above
 * 2^53 a double no longer holds every integer, so such a value is refused rather than rounded;
 * then the setting's range is checked. */
#include "config.h"

#include "shm/env.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GiB 1073741824.0
#define EXACT_MAX 9007199254740992ULL /* 2^53: every whole number up to it is a double */

static const shm_env_param_t table[] = {
    /* the launcher and the collectives (collectives/launch.c, shm/launcher.c) */
    {.name = "SHMDDP_ALGO", .kind = SHM_ENV_CHOICE,
     .choices = "auto|direct|ring|twoshot|cering|staged|coloc", .dflt = "auto",
     .reader = "collectives, when a communicator is made",
     .meaning = "force one collective algorithm (auto: by size and transport; ranks sharing a "
                "GPU: coloc)"},
    {.name = "SHMDDP_TIMEOUT", .kind = SHM_ENV_NUMBER, .min = 0.001, .max = 31536000,
     .unit = "seconds", .dflt = "300 (none for NCCL clients)",
     .reader = "collectives, when a communicator is made",
     .meaning = "seconds a collective waits for a peer, where the program sets none "
                "(shmddp-train sets --timeout; libshmddp-nccl.so sets no limit unless this is "
                "set)"},
    {.name = "SHMDDP_SLOT_MB", .kind = SHM_ENV_NUMBER, .min = 0.0625, .max = 65536,
     .unit = "MiB", .dflt = "4", .reader = "collectives, when a communicator is made",
     .meaning = "host staging per rank in the shared segment, MiB (64 KiB to 64 GiB)"},
    {.name = "SHMDDP_STOP_GRACE", .kind = SHM_ENV_NUMBER, .min = 1, .max = 86400,
     .unit = "seconds", .dflt = "30", .reader = "the launcher, at launch",
     .meaning = "after a SIGINT/SIGTERM, how long ranks may take to stop at a step boundary "
                "(and checkpoint) before they are killed; repeated signals meanwhile are absorbed"},
    /* the CUDA transport (collectives/cuda/cuda_init.c) */
    {.name = "SHMDDP_COLOC_WAIT", .kind = SHM_ENV_CHOICE, .choices = "auto|host|stream|leader",
     .dflt = "auto", .reader = "collectives, device transport set-up",
     .meaning = "ranks that share a GPU: where a rank waits for its peers' events (auto: stream when "
                "every rank sharing a GPU runs under MPS, host otherwise; host: its host "
                "queries them, so no stream waits for another process; stream: its stream waits, "
                "the call returns at once; leader: host in each GPU's lowest rank, stream in the "
                "others)"},
    {.name = "SHMDDP_CUDA_P2P", .kind = SHM_ENV_FLAG, .dflt = "1",
     .reader = "collectives, device transport set-up",
     .meaning = "0: no peer-to-peer access; device collectives go through pinned host memory"},
    {.name = "SHMDDP_CUDA_DIRECT_MAX", .kind = SHM_ENV_BYTES, .min = 0, .max = GiB, .dflt = "1m",
     .reader = "collectives, device transport set-up",
     .meaning = "device all-reduces up to this size are one-shot, larger ones two-shot"},
    {.name = "SHMDDP_CUDA_TS_MAX", .kind = SHM_ENV_BYTES, .min = 0, .max = GiB, .dflt = "4m",
     .reader = "collectives, device transport set-up",
     .meaning = "two-shot all-reduces up to this size run through scratch buffers (at most 4m)"},
    {.name = "SHMDDP_CUDA_TS_BLOCKS", .kind = SHM_ENV_COUNT, .min = 1, .max = 128,
     .unit = "blocks", .dflt = "the communicator's max_blocks (DDP's buckets: 16), else 128",
     .reader = "collectives, device transport set-up",
     .meaning = "thread blocks of a two-shot all-reduce"},
    {.name = "SHMDDP_CUDA_CE_MIN", .kind = SHM_ENV_BYTES, .min = 0, .max = 9007199254740992.0,
     .dflt = "never", .reader = "collectives, device transport set-up",
     .meaning = "use the copy-engine ring from this size (auto never picks it: it lost to the "
                "two-shot at every size, bench/results/allreduce_2xh200_algos.txt)"},
    {.name = "SHMDDP_CUDA_CE_CHUNK", .kind = SHM_ENV_BYTES, .min = 4096, .max = GiB,
     .dflt = "a 32nd of a rank's slice", .reader = "collectives, device transport set-up",
     .meaning = "chunk size of the copy-engine ring"},
    {.name = "SHMDDP_CUDA_EXPORTS", .kind = SHM_ENV_COUNT, .min = 16, .max = 1048576,
     .unit = "exports", .dflt = "1024", .reader = "collectives, device transport set-up",
     .meaning = "live exports of a rank's device buffers before the least recently used one is "
                "retired and its peers unmap it"},
    /* the NCCL front end (nccl/) */
    {.name = "SHMDDP_NCCL_DEBUG", .kind = SHM_ENV_FLAG, .dflt = "0",
     .reader = "libshmddp-nccl.so, at its first message",
     .meaning = "1: a line per communicator made and every failure on stderr (as "
                "NCCL_DEBUG=INFO; NCCL_DEBUG=WARN prints the failures only)"},
    {.name = "SHMDDP_NCCL_LIB", .kind = SHM_ENV_TEXT,
     .dflt = "libshmddp-nccl.so.0 in the installed library folder",
     .reader = "shmddp-nccl-run, at start",
     .meaning = "the library shmddp-nccl-run preloads into its command; a path without spaces or "
                "colons (LD_PRELOAD would split it there: refused)"},
    /* the trainer's world across machines (src/world/world_mpi.c) */
    {.name = "SHMDDP_MPI_CUDA_AWARE", .kind = SHM_ENV_FLAG,
     .dflt = "what MPIX_Query_cuda_support says", .reader = "shmddp-train under mpirun, world set-up",
     .meaning = "0: device buffers cross nodes through pinned host memory even where MPI is "
                "CUDA-aware; 1: hand MPI device pointers (only with a CUDA-aware MPI)"},
    /* the CUDA backend of the model's ops (kernels/) */
    {.name = "SHMDDP_TF32", .kind = SHM_ENV_FLAG, .dflt = "1",
     .reader = "kernels, when a CUDA ops table is made",
     .meaning = "0: fp32 convolutions and GEMMs in plain f32, not TF32 (cross-checks against f64)"},
    {.name = "SHMDDP_CONV_SEARCH", .kind = SHM_ENV_CHOICE, .choices = "heuristic|timed",
     .dflt = "--deterministic decides (on: heuristic)",
     .reader = "kernels, when a convolution is planned",
     .meaning = "how cuDNN's algorithms are chosen: deterministic heuristics, or timing them all"},
    {.name = "SHMDDP_CONV_PAD", .kind = SHM_ENV_FLAG, .dflt = "1",
     .reader = "kernels, when a convolution is planned",
     .meaning = "0: the layer of few input channels (RGB) on cuDNN at its own width: no "
                "zero-padding to the tensor cores' width, no own kernels (1: its forward and "
                "weight gradient on own tensor-core kernels in bf16, f16, and f32 with TF32 "
                "allowed)"},
    {.name = "SHMDDP_CONV1X1", .kind = SHM_ENV_CHOICE, .choices = "cudnn|gemm",
     .dflt = "own kernels for few outputs (the head), cuBLAS otherwise",
     .reader = "kernels, when a convolution is planned",
     .meaning = "run every 1x1 convolution on cuDNN, or on cuBLAS"},
    {.name = "SHMDDP_CONV_WS_MB", .kind = SHM_ENV_COUNT, .min = 1, .max = 1048576, .unit = "MiB",
     .dflt = "512", .reader = "kernels, when a convolution is planned",
     .meaning = "largest workspace a convolution algorithm may use, MiB"},
    {.name = "SHMDDP_CONV_VERBOSE", .kind = SHM_ENV_FLAG, .dflt = "0",
     .reader = "kernels, when a convolution is planned",
     .meaning = "1: print each layer's chosen algorithms and workspace to stderr"},
    /* the model (src/model/unet.c) */
    {.name = "SHMDDP_MEM_PLAN", .kind = SHM_ENV_CHOICE, .choices = "shared|separate",
     .dflt = "shared", .reader = "the model, when it is built",
     .meaning = "separate: every activation and gradient in its own memory, none shared between "
                "tensors that are never alive together (checks the memory plan; costs memory)"},
    {.name = "SHMDDP_RECOMPUTE", .kind = SHM_ENV_CHOICE, .choices = "auto|all|none|N",
     .dflt = "auto", .reader = "the model, when it is built",
     .meaning = "at how many of the shallowest levels backward recomputes the norm+ReLU outputs, "
                "skips and concats (deeper levels keep forward's: faster, more memory); auto: "
                "none in fp32, the 2 shallowest in bf16/fp16 (reference U-Net on one H200: "
                "bench/results/ab_recompute_levels_1xh200.txt)"},
    {.name = "SHMDDP_CONV_ENGINE", .kind = SHM_ENV_CHOICE, .choices = "auto|library|fused",
     .dflt = "auto", .reader = "the model, when it is built",
     .meaning = "which kernels run the blocks' 3x3 convolutions: fused (our kernels "
                "with the previous BatchNorm + ReLU folded into the input's load, in a block's "
                "second convolution, and the statistics or sums into the output's store; the "
                "first blocks' plain input gradients on the same kernels; "
                "wherever the backend has them: on a GPU, Hopper (sm_90) in bf16, channels "
                "multiples of 64 up to 1024; on the CPU, every such layer, composed of its plain "
                "ops), library (the plain ops: cuDNN, and the separate BatchNorm passes), or auto "
                "(fused only where it was measured faster: kernels/conv_fused_rank.c, "
                "bench/results/conv_engine_1xh100.txt)"},
    {.name = "SHMDDP_CONV_FUSE_SHAPES", .kind = SHM_ENV_TEXT, .dflt = "none",
     .reader = "the model, when it is built",
     .meaning = "for measurements: layer shapes SHMDDP_CONV_ENGINE=auto also runs fused wherever "
                "the backend has kernels for them, beyond the shapes measured faster "
                "(kernels/conv_fused_rank.c), to time one in the step before it enters that "
                "table: USE:CIN:COUT entries joined by commas, USE pair (a block's second "
                "convolution), stats (a first block's, with its statistics) or dgrad (the plain "
                "input gradient of a convolution with no BatchNorm to fuse into it: a first "
                "block's), e.g. stats:256:512,pair:256:256,dgrad:256:128; refused with fused or "
                "library"},
    {.name = "SHMDDP_WGRAD_STREAM", .kind = SHM_ENV_CHOICE, .choices = "auto|off|N",
     .dflt = "auto", .reader = "the model, when it is built",
     .meaning = "from which level down backward computes the convolutions' weight gradients on "
                "a second stream, beside the input gradients (GPU; the plan keeps their inputs "
                "alive until the main stream waits for them); auto: from level 1 on a GPU, off "
                "on the CPU (fp32: bench/results/ab_wgrad_stream_1xh200.txt; bf16: "
                "bench/results/ab_rednarrow32_wgrad_stream_pair256_1xh100.txt); always off when "
                "weight gradients are staged one layer at a time (16-bit compute with f32 "
                "gradients: gradient accumulation, or several ranks without bf16 gradient "
                "all-reduce)"},
    {.name = "SHMDDP_HEAD_FUSED", .kind = SHM_ENV_CHOICE, .choices = "train|1|0|forward|backward",
     .dflt = "train", .reader = "the model, when it is built",
     .meaning = "the 1x1 head fused with the BatchNorm of the block before it, where the backend "
                "has the path (the CPU; CUDA with the head on its few-output kernels, not "
                "SHMDDP_CONV1X1=cudnn|gemm): forward runs the head on the BatchNorm's apply "
                "without storing that block's output (the head's weight gradient reads the "
                "block's conv output through the norm again), backward forms the head's input "
                "gradient inside that BatchNorm's backward instead of storing it and reading it "
                "back; train: both, and in a training step the head's forward, the loss and the "
                "head's backward down to that BatchNorm's reduce as one op that reads the "
                "block's output once (kernels/ops.h head_train_1x1; on a GPU the gradients' sums "
                "in another order than the separate ops', not their bits); 1: both halves as "
                "separate ops, forward or backward: that half only, 0: neither (1, forward, "
                "backward and 0 give the same bits)"},
    {.name = "SHMDDP_UPCONV_GATHERED", .kind = SHM_ENV_CHOICE, .choices = "auto|0|1",
     .dflt = "auto", .reader = "the model, when it is built",
     .meaning = "1: the concat's backward writes each up-convolution's gradient in the order "
                "its GEMMs read (kernels/ops.h concat_bwd_gathered), so its weight and input "
                "gradients are one GEMM each with no gather pass, wherever the backend takes it "
                "(the CPU; on a GPU, up-convolutions on cuBLAS); 0: that gradient in NHWC; "
                "auto: 1 in 16-bit compute types (bf16, fp16), 0 otherwise "
                "(bench/results/ab_pdl_upgather_1xh100.txt)"},
    /* set by the launcher in every rank (shm/launcher.c) */
    {.name = "SHMDDP_RANK", .kind = SHM_ENV_SET, .dflt = "-", .reader = "the rank's code",
     .meaning = "this rank's number"},
    {.name = "SHMDDP_LOCAL_RANK", .kind = SHM_ENV_SET, .dflt = "-", .reader = "the rank's code",
     .meaning = "this rank's number on this machine (its GPU)"},
    {.name = "SHMDDP_WORLD_SIZE", .kind = SHM_ENV_SET, .dflt = "-", .reader = "the rank's code",
     .meaning = "the number of ranks"},
    /* not ours, but honoured */
    {.name = "CUDA_VISIBLE_DEVICES", .kind = SHM_ENV_TEXT, .dflt = "every GPU",
     .reader = "shmddp-train, before forking (without initialising CUDA)",
     .meaning = "the GPUs a run may use; --nproc defaults to their number"},
    {.name = "CUDA_MPS_PIPE_DIRECTORY", .kind = SHM_ENV_TEXT,
     .dflt = "unset (MPS's own: /tmp/nvidia-mps)",
     .reader = "shmddp-train and shmddp-nccl-run, before the ranks start",
     .meaning = "an MPS daemon of yours: used as it is, and no private one is started; refused "
                "unless it is a folder of yours (or root's), not a link, writable by no one else"},
    {.name = "CUDA_MPS_LOG_DIRECTORY", .kind = SHM_ENV_TEXT, .dflt = "unset",
     .reader = "shmddp-train and shmddp-nccl-run, with CUDA_MPS_PIPE_DIRECTORY",
     .meaning = "that daemon's log folder: checked as CUDA_MPS_PIPE_DIRECTORY is"},
    {.name = "NCCL_DEBUG", .kind = SHM_ENV_TEXT, .dflt = "none",
     .reader = "libshmddp-nccl.so, at its first message",
     .meaning = "NCCL's own: WARN prints every failure on stderr, INFO and TRACE also a line per "
                "communicator made"},
    /* set by the NCCL front end's wrapper (nccl/shmddp-nccl-run.in) */
    {.name = "LD_PRELOAD", .kind = SHM_ENV_SET, .dflt = "-", .reader = "the dynamic loader",
     .meaning = "set by shmddp-nccl-run for the command it runs: libshmddp-nccl.so first, then "
                "what was there"},
    /* where a private MPS daemon lives (src/app/mps.c, shmddp-nccl-run) */
    {.name = "XDG_RUNTIME_DIR", .kind = SHM_ENV_TEXT, .dflt = "none",
     .reader = "shmddp-train and shmddp-nccl-run, when they start an MPS daemon",
     .meaning = "where a private MPS daemon's folder is made (else TMPDIR, else /tmp)"},
    {.name = "TMPDIR", .kind = SHM_ENV_TEXT, .dflt = "/tmp",
     .reader = "shmddp-train and shmddp-nccl-run, when they start an MPS daemon",
     .meaning = "where a private MPS daemon's folder is made when XDG_RUNTIME_DIR is unset"},
    {.name = "PATH", .kind = SHM_ENV_TEXT, .dflt = "/usr/local/bin:/usr/bin:/bin",
     .reader = "shmddp-train and shmddp-nccl-run, when they start an MPS daemon",
     .meaning = "where nvidia-cuda-mps-control is looked for"},
    /* MPI launchers (src/app/machine.c) */
    {.name = "OMPI_COMM_WORLD_SIZE", .kind = SHM_ENV_SET, .dflt = "-",
     .reader = "shmddp-train, before MPI_Init",
     .meaning = "set by Open MPI's mpirun (PMI_SIZE, PMIX_SIZE by other launchers): the trainer "
                "is one process of an MPI job across machines"},
    {.name = "PMI_SIZE", .kind = SHM_ENV_SET, .dflt = "-", .reader = "shmddp-train, before MPI_Init",
     .meaning = "set by PMI launchers (MPICH's mpiexec): as OMPI_COMM_WORLD_SIZE"},
    {.name = "PMIX_SIZE", .kind = SHM_ENV_SET, .dflt = "-", .reader = "shmddp-train, before MPI_Init",
     .meaning = "set by PMIx launchers (srun): as OMPI_COMM_WORLD_SIZE"},
    /* tools/compare.c */
    {.name = "COMMIT", .kind = SHM_ENV_TEXT, .dflt = "none", .reader = "shmddp-compare",
     .meaning = "the commit named in the header of the table it writes"},
};

#define NPARAMS (sizeof table / sizeof table[0])

const shm_env_param_t *shm_env_find(const char *name)
{
  for (size_t i = 0; i < NPARAMS; i++)
    if (strcmp(table[i].name, name) == 0) return &table[i];
  return NULL;
}

/* A byte count for people: 4096, 64k, 1m, 1g. */
static void bytes_text(double b, char *buf, size_t len)
{
  static const char suffix[] = "gmk";
  for (int i = 0; i < 3; i++) {
    double unit = (double)(1ULL << (10 * (3 - i)));
    if (b >= unit && fmod(b, unit) == 0) {
      snprintf(buf, len, "%.0f%c", b / unit, suffix[i]);
      return;
    }
  }
  snprintf(buf, len, "%.0f", b);
}

void shm_env_accepts(const shm_env_param_t *p, char *buf, size_t len)
{
  char lo[32], hi[32];
  switch (p->kind) {
  case SHM_ENV_NUMBER:
    snprintf(buf, len, "a number from %.10g to %.10g (%s)", p->min, p->max, p->unit);
    return;
  case SHM_ENV_COUNT:
    snprintf(buf, len, "a whole number from %.0f to %.0f (%s)", p->min, p->max, p->unit);
    return;
  case SHM_ENV_BYTES:
    bytes_text(p->min, lo, sizeof lo);
    bytes_text(p->max, hi, sizeof hi);
    snprintf(buf, len, "bytes from %s to %s (k, m, g: KiB, MiB, GiB)", lo, hi);
    return;
  case SHM_ENV_FLAG: snprintf(buf, len, "0|1"); return;
  case SHM_ENV_CHOICE: snprintf(buf, len, "%s", p->choices); return;
  case SHM_ENV_TEXT: snprintf(buf, len, "text"); return;
  case SHM_ENV_SET: snprintf(buf, len, "(set by a launcher)"); return;
  }
  snprintf(buf, len, "?");
}

static int refuse(const shm_env_param_t *p, const char *value, const char *why, char *err,
                  size_t errlen)
{
  char acc[128];
  shm_env_accepts(p, acc, sizeof acc);
  snprintf(err, errlen, "%s=%s %s: it takes %s (shmddp-train --help-env lists every setting)",
           p->name, value, why, acc);
  return -1;
}

/* Leading decimal digits of *v as a whole number, *v moved past them: their count, or -1 when
 * the number passes EXACT_MAX (the digits are consumed all the same). */
static int take_digits(const char **v, unsigned long long *out)
{
  unsigned long long x = 0;
  int n = 0, big = 0;
  for (; **v >= '0' && **v <= '9'; (*v)++, n++) {
    if (!big) x = 10 * x + (unsigned long long)(**v - '0'); /* x <= 2^53: no overflow */
    big |= x > EXACT_MAX;
  }
  *out = x;
  return big ? -1 : n;
}

int shm_env_parse_whole(const char *v, uint64_t max, uint64_t *out)
{
  unsigned long long x;
  int n = v ? take_digits(&v, &x) : 0;
  if (n <= 0 || *v || x > max) return -1;
  *out = x;
  return 0;
}

/* The value of a NUMBER, COUNT or BYTES setting: 0, or -1 with the message. */
static int parse_numeric(const shm_env_param_t *p, const char *v, double *out, char *err,
                         size_t errlen)
{
  static const char *const junk[] = {
      [SHM_ENV_NUMBER] = "is not a decimal number: only digits and one decimal point between "
                         "them are taken (no sign, spaces, exponent or 0x)",
      [SHM_ENV_COUNT] = "is not a whole number: only decimal digits are taken (no sign, spaces, "
                        "decimal point, exponent or 0x)",
      [SHM_ENV_BYTES] = "is not a byte count: only decimal digits and one k, m or g after them "
                        "are taken (no sign, spaces, decimal point, exponent or 0x)"};
  static const char *const inexact =
      "is more than 2^53 (9007199254740992), above which a whole number is not held exactly";
  const char *s = v;
  unsigned long long whole;
  int n = take_digits(&s, &whole);
  if (n == 0) return refuse(p, v, junk[p->kind], err, errlen);
  double d = (double)whole;
  if (p->kind == SHM_ENV_NUMBER && *s == '.') {
    const char *frac = ++s;
    while (*s >= '0' && *s <= '9') s++;
    if (s == frac) return refuse(p, v, junk[p->kind], err, errlen);
    d = strtod(v, NULL); /* digits '.' digits: strtod reads exactly these, correctly rounded */
  } else if (p->kind == SHM_ENV_BYTES && *s && strchr("kKmMgG", *s)) {
    int shift = strchr("kK", *s) ? 10 : strchr("mM", *s) ? 20 : 30;
    s++;
    if (n > 0 && whole > (EXACT_MAX >> shift)) n = -1;
    d = (double)(whole << (n > 0 ? shift : 0));
  }
  if (*s) return refuse(p, v, junk[p->kind], err, errlen);
  if (n < 0) return refuse(p, v, inexact, err, errlen);
  if (!(d >= p->min && d <= p->max)) return refuse(p, v, "is out of range", err, errlen);
  *out = d;
  return 0;
}

static int choice_ok(const shm_env_param_t *p, const char *v)
{
  size_t len = strlen(v);
  for (const char *c = p->choices; len && *c;) {
    const char *bar = strchr(c, '|');
    size_t n = bar ? (size_t)(bar - c) : strlen(c);
    if (n == len && !strncmp(c, v, n)) return 1;
    if (n == 1 && *c == 'N' && strspn(v, "0123456789") == len && len < 10) return 1;
    c += n + (bar != NULL);
  }
  return 0;
}

int shm_env_check(const shm_env_param_t *p, const char *v, char *err, size_t errlen)
{
  double d;
  switch (p->kind) {
  case SHM_ENV_NUMBER:
  case SHM_ENV_COUNT:
  case SHM_ENV_BYTES:
    return parse_numeric(p, v, &d, err, errlen);
  case SHM_ENV_FLAG:
    return !strcmp(v, "0") || !strcmp(v, "1") ? 0 : refuse(p, v, "is not 0 or 1", err, errlen);
  case SHM_ENV_CHOICE:
    return choice_ok(p, v) ? 0 : refuse(p, v, "is not one of the choices", err, errlen);
  case SHM_ENV_TEXT:
  case SHM_ENV_SET:
    return 0;
  }
  return -1;
}

/* The table entry of name (of the given kinds) and its value: 0 unset, 1 set, -1 error. */
static int lookup(const char *name, unsigned kinds, const shm_env_param_t **p, const char **v,
                  char *err, size_t errlen)
{
  *p = shm_env_find(name);
  if (!*p || !(kinds & (1u << (*p)->kind))) {
    snprintf(err, errlen, "%s is not a setting of this kind in shmddp's environment table "
             "(shm/env.c)", name);
    return -1;
  }
  *v = getenv(name);
  return *v && **v ? 1 : 0;
}

#define KIND(k) (1u << (k))

/* A numeric setting of the given kind, parsed: 0 unset, 1 set (in *d), -1 error. */
static int numeric(const char *name, unsigned kind, double *d, char *err, size_t errlen)
{
  const shm_env_param_t *p;
  const char *v;
  int rc = lookup(name, kind, &p, &v, err, errlen);
  return rc == 1 ? (parse_numeric(p, v, d, err, errlen) ? -1 : 1) : rc;
}

/* Any other setting of the given kinds, checked against its entry: 0 unset, 1 set (in *v),
 * -1 error. */
static int checked(const char *name, unsigned kinds, const char **v, char *err, size_t errlen)
{
  const shm_env_param_t *p;
  int rc = lookup(name, kinds, &p, v, err, errlen);
  return rc == 1 ? (shm_env_check(p, *v, err, errlen) ? -1 : 1) : rc;
}

int shm_env_number(const char *name, double *value, char *err, size_t errlen)
{
  return numeric(name, KIND(SHM_ENV_NUMBER), value, err, errlen);
}

int shm_env_count(const char *name, long *value, char *err, size_t errlen)
{
  double d;
  int rc = numeric(name, KIND(SHM_ENV_COUNT), &d, err, errlen);
  if (rc == 1) *value = (long)d;
  return rc;
}

int shm_env_bytes(const char *name, uint64_t *value, char *err, size_t errlen)
{
  double d;
  int rc = numeric(name, KIND(SHM_ENV_BYTES), &d, err, errlen);
  if (rc == 1) *value = (uint64_t)d;
  return rc;
}

int shm_env_flag(const char *name, int *value, char *err, size_t errlen)
{
  const char *v;
  int rc = checked(name, KIND(SHM_ENV_FLAG), &v, err, errlen);
  if (rc == 1) *value = v[0] == '1';
  return rc;
}

int shm_env_choice(const char *name, const char **value, char *err, size_t errlen)
{
  const char *v;
  int rc = checked(name, KIND(SHM_ENV_CHOICE) | KIND(SHM_ENV_TEXT), &v, err, errlen);
  if (rc == 1) *value = v;
  return rc;
}

int shm_env_is(const char *name, const char *value)
{
  const shm_env_param_t *p = shm_env_find(name);
  const char *v = getenv(name);
  char err[256];
  return p && v && shm_env_check(p, v, err, sizeof err) == 0 && strcmp(v, value) == 0;
}

long shm_env_count_or(const char *name, long dflt)
{
  long v;
  char err[256];
  return shm_env_count(name, &v, err, sizeof err) == 1 ? v : dflt;
}

int shm_env_check_environ(char *const *env, const char *who, FILE *warn, char *err,
                          size_t errlen)
{
  for (; env && *env; env++) {
    const char *e = *env, *eq = strchr(e, '=');
    if (strncmp(e, "SHMDDP_", 7) != 0 || !eq) continue;
    size_t len = (size_t)(eq - e);
    const shm_env_param_t *p = NULL;
    for (size_t i = 0; i < NPARAMS && !p; i++)
      if (strlen(table[i].name) == len && !strncmp(table[i].name, e, len)) p = &table[i];
    if (!p) {
      if (warn)
        fprintf(warn, "%s: warning: %.*s is not a shmddp setting (a typo, or a switch that was "
                "removed); ignored. shmddp-train --help-env lists them\n", who, (int)len, e);
      continue;
    }
    if (eq[1] && shm_env_check(p, eq + 1, err, errlen) != 0) return -1;
  }
  return 0;
}

void shm_env_print(FILE *f)
{
  fprintf(f, "Environment variables (each read once, when what it configures is made):\n\n");
  for (size_t i = 0; i < NPARAMS; i++) {
    const shm_env_param_t *p = &table[i];
    char acc[128];
    shm_env_accepts(p, acc, sizeof acc);
    fprintf(f, "  %-22s %s (default: %s)\n", p->name, acc, p->dflt);
    fprintf(f, "  %-22s %s\n  %-22s read by %s\n", "", p->meaning, "", p->reader);
  }
}

/* Markdown cell text: '|' escaped. */
static void cell(FILE *f, const char *s)
{
  fputc(' ', f);
  for (; *s; s++) {
    if (*s == '|') fputs(" \\| ", f);
    else fputc(*s, f);
  }
  fputs(" |", f);
}

void shm_env_print_markdown(FILE *f)
{
  fprintf(f, "| variable | value | default | what it does | read by |\n|---|---|---|---|---|\n");
  for (size_t i = 0; i < NPARAMS; i++) {
    const shm_env_param_t *p = &table[i];
    char acc[128], name[64];
    shm_env_accepts(p, acc, sizeof acc);
    snprintf(name, sizeof name, "`%s`", p->name);
    fputc('|', f);
    cell(f, name);
    cell(f, acc);
    cell(f, p->dflt);
    cell(f, p->meaning);
    cell(f, p->reader);
    fputc('\n', f);
  }
}
