/* train_config.c — command-line parsing (getopt_long) and validation of the trainer's settings.
 * Defaults that depend on the machine (GPU or CPU) are resolved after parsing, so --help and the
 * errors can say what each default is on this machine. */
#include "config.h"

#include "src/train/train_config.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/data/data.h"
#include "src/train/params.h"

enum {
  OPT_DEVICE = 256, OPT_NPROC, OPT_MODE, OPT_MODEL, OPT_WIDTHS, OPT_NORM, OPT_GROUPS, OPT_SYNC_BN,
  OPT_SYNC_BN_FROM, OPT_CLASSES, OPT_IMAGE_SIZE, OPT_BATCH, OPT_EPOCHS, OPT_STEPS, OPT_LR,
  OPT_OPTIMIZER, OPT_MOMENTUM, OPT_WD, OPT_NESTEROV, OPT_WARMUP, OPT_PRECISION, OPT_DATA,
  OPT_TRAIN_SIZE, OPT_VAL_SIZE, OPT_WORKERS, OPT_SEED, OPT_OUT, OPT_BUCKET, OPT_ACCUM,
  OPT_DROP_LAST, OPT_SAVE_EVERY, OPT_RESUME, OPT_TIMEOUT, OPT_LOG_EVERY, OPT_TIMING_WARMUP, OPT_STOP_AFTER, OPT_TIMELINE,
  OPT_DETERMINISTIC, OPT_CUDA_GRAPH, OPT_HELP_ENV, OPT_RANKS_PER_NODE, OPT_GRAD_COMM, OPT_END
};

static const struct option long_opts[] = {
  {"device", required_argument, 0, OPT_DEVICE},
  {"nproc", required_argument, 0, OPT_NPROC},
  {"ranks-per-node", required_argument, 0, OPT_RANKS_PER_NODE},
  {"mode", required_argument, 0, OPT_MODE},
  {"model", required_argument, 0, OPT_MODEL},
  {"widths", required_argument, 0, OPT_WIDTHS},
  {"norm", required_argument, 0, OPT_NORM},
  {"groups", required_argument, 0, OPT_GROUPS},
  {"sync-bn", required_argument, 0, OPT_SYNC_BN},
  {"sync-bn-from-epoch", required_argument, 0, OPT_SYNC_BN_FROM},
  {"classes", required_argument, 0, OPT_CLASSES},
  {"image-size", required_argument, 0, OPT_IMAGE_SIZE},
  {"batch-size", required_argument, 0, OPT_BATCH},
  {"epochs", required_argument, 0, OPT_EPOCHS},
  {"steps", required_argument, 0, OPT_STEPS},
  {"lr", required_argument, 0, OPT_LR},
  {"optimizer", required_argument, 0, OPT_OPTIMIZER},
  {"momentum", required_argument, 0, OPT_MOMENTUM},
  {"weight-decay", required_argument, 0, OPT_WD},
  {"nesterov", no_argument, 0, OPT_NESTEROV},
  {"warmup-steps", required_argument, 0, OPT_WARMUP},
  {"precision", required_argument, 0, OPT_PRECISION},
  {"data", required_argument, 0, OPT_DATA},
  {"train-size", required_argument, 0, OPT_TRAIN_SIZE},
  {"val-size", required_argument, 0, OPT_VAL_SIZE},
  {"workers", required_argument, 0, OPT_WORKERS},
  {"seed", required_argument, 0, OPT_SEED},
  {"out", required_argument, 0, OPT_OUT},
  {"bucket-mb", required_argument, 0, OPT_BUCKET},
  {"grad-comm", required_argument, 0, OPT_GRAD_COMM},
  {"accum-steps", required_argument, 0, OPT_ACCUM},
  {"drop-last", no_argument, 0, OPT_DROP_LAST},
  {"save-every", required_argument, 0, OPT_SAVE_EVERY},
  {"resume", required_argument, 0, OPT_RESUME},
  {"timeout", required_argument, 0, OPT_TIMEOUT},
  {"log-every", required_argument, 0, OPT_LOG_EVERY},
  {"timing-warmup", required_argument, 0, OPT_TIMING_WARMUP},
  {"stop-after", required_argument, 0, OPT_STOP_AFTER},
  {"timeline", required_argument, 0, OPT_TIMELINE},
  {"deterministic", required_argument, 0, OPT_DETERMINISTIC},
  {"cuda-graph", required_argument, 0, OPT_CUDA_GRAPH},
  {"help", no_argument, 0, 'h'},
  {"help-env", no_argument, 0, OPT_HELP_ENV},
  {0, 0, 0, 0}};

/* Defaults per device: the GPU ones are the reference configuration of BENCHMARKS.md (4 epochs:
 * about a minute on one H200; 8 loader threads keep ~800 img/s of 256x256 shapes coming); the
 * CPU ones make `make train` learn the shapes in a few minutes on 2 cores. */
typedef struct {
  const char *widths;
  double sgd_lr;
  int image_size, batch_size, epochs, workers;
  long train_size, val_size, warmup_steps, log_every;
  model_precision_t precision;
} device_defaults_t;

static const device_defaults_t cpu_defaults = {
    .widths = "16,32,64", .sgd_lr = 0.3, .image_size = 64, .batch_size = 8, .epochs = 6,
    .workers = 1, .train_size = 1536, .val_size = 128, .warmup_steps = 30, .log_every = 10,
    .precision = MODEL_FP32};
static const device_defaults_t cuda_defaults = {
    .widths = "reference", .sgd_lr = 0.1, .image_size = 256, .batch_size = 6, .epochs = 4,
    .workers = 8, .train_size = 12000, .val_size = 600, .warmup_steps = 200, .log_every = 20,
    .precision = MODEL_BF16};

static const struct {
  const char *name;
  int levels;
  int widths[MODEL_MAX_LEVELS];
} presets[] = {
  {.name = "tiny", .levels = 3, .widths = {8, 16, 32}},
  {.name = "small", .levels = 4, .widths = {16, 32, 64, 128}},
  {.name = "reference", .levels = 5, .widths = {64, 128, 256, 512, 1024}},
};


/* A bad flag or value: the message, and 2 (train_config_parse's answer for it). */
static int usage_error(char *err, size_t errlen, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return 2;
}

const char *train_device_name(model_device_t d) { return d == MODEL_DEVICE_CUDA ? "cuda" : "cpu"; }

const char *train_precision_name(model_precision_t p)
{
  return p == MODEL_BF16 ? "bf16" : p == MODEL_FP16 ? "fp16" : "fp32";
}

static const char *opt_name(optim_kind_t o) { return o == OPTIM_ADAMW ? "adamw" : "sgd"; }

static model_device_t default_device(const train_machine_t *m)
{
  return m->cuda_built && m->visible_gpus > 0 ? MODEL_DEVICE_CUDA : MODEL_DEVICE_CPU;
}

/* CPU ranks: 2 (one core each on CI's 2-core machines), so the default job exercises the whole
 * data-parallel path; 1 on a single-core machine. */
static int default_cpu_nproc(const train_machine_t *m) { return m->online_cpus >= 2 ? 2 : 1; }

/* ---- value parsers: each names the flag and says what is allowed ---- */

static int parse_long(const char *flag, const char *s, long lo, long hi, long *out, char *err,
                      size_t errlen)
{
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    return usage_error(err, errlen, "%s: '%s' is not allowed: give an integer from %ld to %ld",
                       flag, s, lo, hi);
  *out = v;
  return 0;
}

static int parse_int(const char *flag, const char *s, long lo, long hi, int *out, char *err,
                     size_t errlen)
{
  long v;
  int rc = parse_long(flag, s, lo, hi, &v, err, errlen);
  if (rc == 0) *out = (int)v;
  return rc;
}

/* lo_open: the lower bound itself is not allowed. */
static int parse_double(const char *flag, const char *s, double lo, int lo_open, double hi,
                        double *out, char *err, size_t errlen)
{
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v < lo || (lo_open && v == lo) || v > hi)
    return usage_error(err, errlen, "%s: '%s' is not allowed: give a number %s %g and <= %g", flag,
                       s, lo_open ? ">" : ">=", lo, hi);
  *out = v;
  return 0;
}

static int parse_choice(const char *flag, const char *s, const char *const *names, int *out,
                        char *err, size_t errlen)
{
  char allowed[256] = "";
  for (int i = 0; names[i]; i++) {
    if (strcmp(s, names[i]) == 0) {
      *out = i;
      return 0;
    }
    strncat(allowed, i ? "|" : "", sizeof allowed - strlen(allowed) - 1);
    strncat(allowed, names[i], sizeof allowed - strlen(allowed) - 1);
  }
  return usage_error(err, errlen, "%s: '%s' is not allowed: choose %s", flag, s, allowed);
}

static int parse_path(const char *flag, const char *s, char *out, char *err, size_t errlen)
{
  if (!*s) return usage_error(err, errlen, "%s: the path is empty", flag);
  if (strlen(s) >= TRAIN_PATH_MAX)
    return usage_error(err, errlen, "%s: the path is longer than %d bytes", flag,
                       TRAIN_PATH_MAX - 1);
  strcpy(out, s);
  return 0;
}

static int parse_widths(const char *s, train_config_t *c, char *err, size_t errlen)
{
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
    if (strcmp(s, presets[i].name) == 0) {
      c->levels = presets[i].levels;
      memcpy(c->widths, presets[i].widths, sizeof c->widths);
      snprintf(c->widths_name, sizeof c->widths_name, "%s", s);
      return 0;
    }
  }
  int n = 0;
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    long w = strtol(p, &end, 10);
    if (errno || end == p || (*end && *end != ',') || w < 1 || w > 4096 || n == MODEL_MAX_LEVELS)
      return usage_error(err, errlen,
                         "--widths: '%s' is not allowed: give tiny, small, reference, or 1 to %d "
                         "comma-separated channel counts from 1 to 4096 (e.g. 32,64,128)",
                         s, MODEL_MAX_LEVELS);
    c->widths[n++] = (int)w;
    p = *end ? end + 1 : end;
    if (*end && !*p) return usage_error(err, errlen, "--widths: '%s' ends with a comma", s);
  }
  if (n == 0)
    return usage_error(
        err, errlen, "--widths: the list is empty: give tiny, small, reference or e.g. 32,64,128");
  c->levels = n;
  snprintf(c->widths_name, sizeof c->widths_name, "%s", s);
  return 0;
}

/* ---- parse and validate ---- */

static const char *const device_names[] = {"cpu", "cuda", NULL};
static const char *const mode_names[] = {"ddp", "dp", NULL};
static const char *const norm_names[] = {"batch", "group", NULL};
static const char *const onoff_names[] = {"off", "on", NULL};
static const char *const optimizer_names[] = {"sgd", "adamw", NULL};
static const char *const precision_names[] = {"fp32", "bf16", "fp16", NULL};
static const char *const grad_comm_names[] = {"f32", "bf16", NULL};

static int resolve(train_config_t *c, const unsigned char *set, const train_machine_t *m,
                   char *err, size_t errlen)
{
  if (!set[OPT_DEVICE]) c->device = default_device(m);
  if (c->device == MODEL_DEVICE_CUDA) {
    if (!m->cuda_built)
      return usage_error(err, errlen,
                         "--device cuda: this build has no CUDA backend (configured "
                         "without CUDA); use --device cpu, or reconfigure with the CUDA toolkit");
    if (m->visible_gpus == 0)
      return usage_error(
          err, errlen,
          "--device cuda: no GPU is visible (no /proc/driver/nvidia/gpus "
          "entries or /dev/nvidiaN, or CUDA_VISIBLE_DEVICES hides them); use --device cpu");
  }
  const device_defaults_t *dd = c->device == MODEL_DEVICE_CUDA ? &cuda_defaults : &cpu_defaults;
  if (m->mpi_ranks > 0) { /* every MPI process is one rank; the nodes share out the GPUs */
    if (!m->mpi_built)
      return usage_error(err, errlen,
                         "started by mpirun (%d processes), but this shmddp-train was built "
                         "without MPI: reconfigure with --with-mpi (Open MPI installed), or run "
                         "it without mpirun on one machine", m->mpi_ranks);
    if (set[OPT_NPROC] && c->nproc != m->mpi_ranks)
      return usage_error(err, errlen,
                         "--nproc %d: under mpirun every MPI process is one rank (%d here); "
                         "leave --nproc out, or give mpirun -np %d",
                         c->nproc, m->mpi_ranks, c->nproc);
    if (c->mode == TRAIN_MODE_DP)
      return usage_error(err, errlen, "--mode dp drives the devices of one process: it does "
                         "not run under mpirun");
    if (c->grad_comm_bf16)
      return usage_error(err, errlen,
                         "--grad-comm bf16: one machine only for now (between nodes the ring "
                         "would round every step's partial sum to bf16, which is not tested); "
                         "under mpirun leave it out (f32)");
    c->nproc = m->mpi_ranks;
  } else {
    if (set[OPT_RANKS_PER_NODE])
      return usage_error(err, errlen, "--ranks-per-node: only under mpirun (mpirun -np N "
                         "shmddp-train --ranks-per-node K ...)");
    if (!set[OPT_NPROC])
      c->nproc = c->device == MODEL_DEVICE_CUDA ? m->visible_gpus : default_cpu_nproc(m);
    if (c->nproc > SHMDDP_MAX_RANKS) c->nproc = SHMDDP_MAX_RANKS;
  }
  /* More ranks than GPUs share them round-robin (train_share.c checks that they fit). */
  c->gpus = m->mpi_ranks == 0 && c->device == MODEL_DEVICE_CUDA ? m->visible_gpus : 0;
  if (c->gpus > 0 && c->nproc > c->gpus && c->mode == TRAIN_MODE_DP)
    return usage_error(err, errlen,
                       "--mode dp drives one GPU per replica: %d replicas need %d GPUs but %d %s "
                       "visible (in --mode ddp ranks may share GPUs)",
                       c->nproc, c->nproc, c->gpus, c->gpus == 1 ? "is" : "are");
  if (!set[OPT_WIDTHS]) parse_widths(dd->widths, c, err, errlen);
  if (!set[OPT_IMAGE_SIZE]) c->image_size = dd->image_size;
  if (!set[OPT_BATCH]) c->batch_size = dd->batch_size;
  if (!set[OPT_EPOCHS]) c->epochs = dd->epochs;
  if (!set[OPT_WORKERS]) c->workers = dd->workers;
  if (!set[OPT_TRAIN_SIZE]) c->train_size = dd->train_size;
  if (!set[OPT_VAL_SIZE]) c->val_size = c->synthetic ? dd->val_size : 0;
  if (!set[OPT_WARMUP]) c->warmup_steps = dd->warmup_steps;
  c->warmup_auto = !set[OPT_WARMUP];
  if (!set[OPT_LOG_EVERY]) c->log_every = dd->log_every;
  if (!set[OPT_TIMING_WARMUP]) c->timing_warmup = 1;
  if (!set[OPT_PRECISION]) c->precision = dd->precision;
  if (!set[OPT_LR]) c->lr = c->optimizer == OPTIM_ADAMW ? 2e-3 : dd->sgd_lr;
  if (!set[OPT_WD]) c->weight_decay = c->optimizer == OPTIM_ADAMW ? 0.01 : 1e-4;

  int div = 1 << (c->levels - 1);
  if (c->image_size % div != 0)
    return usage_error(err, errlen,
                       "--image-size: %d is not divisible by %d, which %d levels of "
                       "2x2 pooling need; use a multiple of %d or fewer --widths",
                       c->image_size, div, c->levels, div);
  if (c->image_size / div < 2)
    return usage_error(err, errlen,
                       "--image-size: %d leaves the deepest of %d levels smaller than "
                       "2x2; use at least %d or fewer --widths",
                       c->image_size, c->levels, 2 * div);

  if (c->norm == MODEL_NORM_GROUP) {
    if (set[OPT_SYNC_BN] && c->sync_bn)
      return usage_error(err, errlen,
                         "--sync-bn on: GroupNorm has no batch statistics to exchange; "
                         "use --norm batch with --sync-bn on, or --sync-bn off");
    c->sync_bn = 0;
    if (!set[OPT_GROUPS]) { /* the most groups (up to 8) that divide every width */
      c->groups = 8;
      for (int i = 0; i < c->levels; i++)
        while (c->widths[i] % c->groups) c->groups /= 2;
    }
    for (int i = 0; i < c->levels; i++)
      if (c->widths[i] % c->groups)
        return usage_error(err, errlen,
                           "--groups: %d does not divide width %d; choose a divisor of "
                           "every --widths entry",
                           c->groups, c->widths[i]);
  } else {
    if (set[OPT_GROUPS]) return usage_error(err, errlen, "--groups: only used with --norm group");
    if (!set[OPT_SYNC_BN]) c->sync_bn = 1;
  }
  if (c->mode == TRAIN_MODE_DP) { /* per-replica statistics, as torch.nn.DataParallel */
    if (set[OPT_SYNC_BN] && c->sync_bn)
      return usage_error(err, errlen,
                         "--sync-bn on: DataParallel keeps per-replica BatchNorm "
                         "statistics (as PyTorch's does); use --mode ddp for SyncBN");
    c->sync_bn = 0;
  }
  if (set[OPT_SYNC_BN_FROM] && !c->sync_bn)
    return usage_error(err, errlen, "--sync-bn-from-epoch: needs --sync-bn on (and --norm batch)");
  if (c->sync_bn_from_epoch >= c->epochs && set[OPT_SYNC_BN_FROM])
    return usage_error(err, errlen,
                       "--sync-bn-from-epoch: %d is not before the last epoch (%d epochs "
                       "run, numbered from 0); give 0 to %d",
                       c->sync_bn_from_epoch, c->epochs, c->epochs - 1);

  if (!c->synthetic && (set[OPT_TRAIN_SIZE]))
    return usage_error(err, errlen,
                       "--train-size: only for --data synthetic (a directory's size is "
                       "the number of its images)");

  if (c->nesterov && c->optimizer != OPTIM_SGD)
    return usage_error(err, errlen, "--nesterov: only for --optimizer sgd");
  if (c->nesterov && c->momentum == 0)
    return usage_error(err, errlen, "--nesterov: needs --momentum > 0");

  if (c->mode == TRAIN_MODE_DP && c->grad_comm_bf16)
    return usage_error(err, errlen,
                       "--grad-comm bf16: DataParallel sums the replicas' gradients on one "
                       "device, there is no all-reduce to narrow; use --mode ddp");

  if (c->mode == TRAIN_MODE_DP &&
      (c->save_every > 0 || c->resume[0] || c->stop_after > 0 || c->timeline_steps > 0))
    return usage_error(
        err, errlen,
        "--mode dp: checkpoints (--save-every, --resume, --stop-after) "
        "and --timeline belong to --mode ddp; DataParallel mode is for comparison runs");

  /* The model's own limits (e.g. the CPU backend computes in fp32 only). */
  model_config_t mc;
  train_config_model(c, 0, &mc);
  char merr[384];
  if (model_config_validate(&mc, merr, sizeof merr) != 0)
    return usage_error(err, errlen, "%s", merr);

  struct stat st;
  if (!c->synthetic) {
    if (stat(c->data_dir, &st) != 0 || !S_ISDIR(st.st_mode))
      return usage_error(err, errlen,
                         "--data: '%s' is not a directory; give synthetic or a directory "
                         "holding images/*.png and masks/*.png",
                         c->data_dir);
  }
  if (stat(c->out_dir, &st) == 0 && !S_ISDIR(st.st_mode))
    return usage_error(err, errlen,
                       "--out: '%s' exists and is not a directory; give a directory "
                       "(it is created if missing)",
                       c->out_dir);
  if (c->resume[0] && (stat(c->resume, &st) != 0 || !S_ISREG(st.st_mode)))
    return usage_error(err, errlen, "--resume: '%s' is not a readable checkpoint file", c->resume);
  return 0;
}

static void set_defaults(train_config_t *c)
{
  *c = (train_config_t){.mode = TRAIN_MODE_DDP,
                        .model = "unet",
                        .norm = MODEL_NORM_BATCH,
                        .groups = 8,
                        .classes = 4,
                        .optimizer = OPTIM_SGD,
                        .momentum = 0.9,
                        .synthetic = 1,
                        .seed = 1,
                        .out_dir = "runs/latest",
                        .bucket_mb = 25,
                        .accum_steps = 1,
                        .timeout_s = 300,
                        .ignore_index = 255,
                        .deterministic = 1,
                        .cuda_graph = 1};
}

int train_config_parse(train_config_t *c, int argc, char **argv, const train_machine_t *m,
                       FILE *out, char *err, size_t errlen)
{
  set_defaults(c);
  unsigned char set[OPT_END] = {0};
  int rc = 0, ch, idx;
  optind = 0; /* also resets getopt's state, so tests can parse several command lines */
  opterr = 0;
  while (rc == 0 && (ch = getopt_long(argc, argv, ":h", long_opts, &idx)) != -1) {
    int v = 0;
    const char *a = optarg;
    if (ch >= OPT_DEVICE && ch < OPT_END) set[ch] = 1;
    switch (ch) {
    case 'h': train_config_usage(out, m); return 1;
    case OPT_HELP_ENV: params_print(out); return 1;
    case '?':
      if (optopt >= OPT_DEVICE)
        return usage_error(err, errlen, "option '%s' takes no value; run with --help",
                           argv[optind - 1]);
      return usage_error(err, errlen, "unknown option '%s'; run with --help for the list",
                         argv[optind - 1]);
    case ':':
      return usage_error(err, errlen, "option '%s' needs a value; run with --help",
                         argv[optind - 1]);
    case OPT_DEVICE:
      rc = parse_choice("--device", a, device_names, &v, err, errlen);
      c->device = v ? MODEL_DEVICE_CUDA : MODEL_DEVICE_CPU;
      break;
    case OPT_NPROC: rc = parse_int("--nproc", a, 1, SHMDDP_MAX_RANKS, &c->nproc, err, errlen); break;
    case OPT_RANKS_PER_NODE:
      rc = parse_int("--ranks-per-node", a, 1, SHMDDP_MAX_RANKS, &c->ranks_per_node, err, errlen);
      break;
    case OPT_MODE:
      rc = parse_choice("--mode", a, mode_names, &v, err, errlen);
      c->mode = v ? TRAIN_MODE_DP : TRAIN_MODE_DDP;
      break;
    case OPT_MODEL: {
      static const char *const models[] = {"unet", NULL};
      rc = parse_choice("--model", a, models, &v, err, errlen);
      break;
    }
    case OPT_WIDTHS: rc = parse_widths(a, c, err, errlen); break;
    case OPT_NORM:
      rc = parse_choice("--norm", a, norm_names, &v, err, errlen);
      c->norm = v ? MODEL_NORM_GROUP : MODEL_NORM_BATCH;
      break;
    case OPT_GROUPS: rc = parse_int("--groups", a, 1, 4096, &c->groups, err, errlen); break;
    case OPT_SYNC_BN: rc = parse_choice("--sync-bn", a, onoff_names, &c->sync_bn, err, errlen); break;
    case OPT_SYNC_BN_FROM:
      rc = parse_int("--sync-bn-from-epoch", a, 0, 1000000, &c->sync_bn_from_epoch, err, errlen);
      break;
    case OPT_CLASSES: rc = parse_int("--classes", a, 2, 255, &c->classes, err, errlen); break;
    case OPT_IMAGE_SIZE: rc = parse_int("--image-size", a, 8, 8192, &c->image_size, err, errlen); break;
    case OPT_BATCH: rc = parse_int("--batch-size", a, 1, 4096, &c->batch_size, err, errlen); break;
    case OPT_EPOCHS: rc = parse_int("--epochs", a, 1, 1000000, &c->epochs, err, errlen); break;
    case OPT_STEPS: rc = parse_long("--steps", a, 0, 1000000000L, &c->steps, err, errlen); break;
    case OPT_LR: rc = parse_double("--lr", a, 0, 1, 10, &c->lr, err, errlen); break;
    case OPT_OPTIMIZER:
      rc = parse_choice("--optimizer", a, optimizer_names, &v, err, errlen);
      c->optimizer = v ? OPTIM_ADAMW : OPTIM_SGD;
      break;
    case OPT_MOMENTUM:
      rc = parse_double("--momentum", a, 0, 0, 0.999999, &c->momentum, err, errlen);
      break;
    case OPT_WD: rc = parse_double("--weight-decay", a, 0, 0, 10, &c->weight_decay, err, errlen); break;
    case OPT_NESTEROV: c->nesterov = 1; break;
    case OPT_WARMUP:
      rc = parse_long("--warmup-steps", a, 0, 1000000000L, &c->warmup_steps, err, errlen);
      break;
    case OPT_PRECISION:
      rc = parse_choice("--precision", a, precision_names, &v, err, errlen);
      c->precision = v == 1 ? MODEL_BF16 : v == 2 ? MODEL_FP16 : MODEL_FP32;
      break;
    case OPT_DATA:
      c->synthetic = strcmp(a, "synthetic") == 0;
      if (!c->synthetic) rc = parse_path("--data", a, c->data_dir, err, errlen);
      break;
    case OPT_TRAIN_SIZE:
      rc = parse_long("--train-size", a, 1, 100000000L, &c->train_size, err, errlen);
      break;
    case OPT_VAL_SIZE: rc = parse_long("--val-size", a, 1, 100000000L, &c->val_size, err, errlen); break;
    case OPT_WORKERS: rc = parse_int("--workers", a, 0, 64, &c->workers, err, errlen); break;
    case OPT_SEED: {
      char *end;
      errno = 0;
      unsigned long long s = strtoull(a, &end, 0);
      if (errno || end == a || *end || a[0] == '-')
        rc = usage_error(err, errlen, "--seed: '%s' is not allowed: give an integer from 0 to %llu",
                         a, (unsigned long long)UINT64_MAX);
      c->seed = s;
      break;
    }
    case OPT_OUT: rc = parse_path("--out", a, c->out_dir, err, errlen); break;
    case OPT_BUCKET: rc = parse_double("--bucket-mb", a, 0, 1, 4096, &c->bucket_mb, err, errlen); break;
    case OPT_GRAD_COMM:
      rc = parse_choice("--grad-comm", a, grad_comm_names, &v, err, errlen);
      c->grad_comm_bf16 = v == 1;
      break;
    case OPT_ACCUM: rc = parse_int("--accum-steps", a, 1, 4096, &c->accum_steps, err, errlen); break;
    case OPT_DROP_LAST: c->drop_last = 1; break;
    case OPT_SAVE_EVERY:
      rc = parse_long("--save-every", a, 0, 1000000000L, &c->save_every, err, errlen);
      break;
    case OPT_RESUME: rc = parse_path("--resume", a, c->resume, err, errlen); break;
    case OPT_TIMEOUT: rc = parse_double("--timeout", a, 0, 1, 86400, &c->timeout_s, err, errlen); break;
    case OPT_LOG_EVERY:
      rc = parse_long("--log-every", a, 1, 1000000000L, &c->log_every, err, errlen);
      break;
    case OPT_STOP_AFTER:
      rc = parse_long("--stop-after", a, 0, 1000000000L, &c->stop_after, err, errlen);
      break;
    case OPT_TIMING_WARMUP:
      rc = parse_long("--timing-warmup", a, 1, 1000000L, &c->timing_warmup, err, errlen);
      break;
    case OPT_TIMELINE:
      rc = parse_long("--timeline", a, 0, 1000, &c->timeline_steps, err, errlen);
      break;
    case OPT_DETERMINISTIC:
      rc = parse_choice("--deterministic", a, onoff_names, &c->deterministic, err, errlen);
      break;
    case OPT_CUDA_GRAPH:
      rc = parse_choice("--cuda-graph", a, onoff_names, &c->cuda_graph, err, errlen);
      break;
    default:
      return usage_error(err, errlen, "internal error: unhandled option %d", ch);
    }
  }
  if (rc) return rc;
  if (optind < argc)
    return usage_error(err, errlen,
                       "unexpected argument '%s': every setting is a --flag; run with --help",
                       argv[optind]);
  return resolve(c, set, m, err, errlen);
}

void train_config_model(const train_config_t *c, int local_rank, model_config_t *mc)
{
  *mc = (model_config_t){.in_channels = 3,
                         .classes = c->classes,
                         .levels = c->levels,
                         .norm = c->norm,
                         .groups = c->groups,
                         .max_batch = c->batch_size,
                         .height = c->image_size,
                         .width = c->image_size,
                         .ignore_index = c->ignore_index,
                         .precision = c->precision,
                         .device = c->device,
                         .cuda_device = c->device == MODEL_DEVICE_CUDA ? local_rank : -1,
                         .seed = c->seed,
                         .conv_benchmark = !c->deterministic};
  memcpy(mc->widths, c->widths, sizeof mc->widths);
}

void train_config_optim(const train_config_t *c, optim_config_t *oc)
{
  optim_config_default(oc, c->optimizer);
  oc->lr = c->lr;
  oc->weight_decay = c->weight_decay;
  if (c->optimizer == OPTIM_SGD) {
    oc->momentum = c->momentum;
    oc->nesterov = c->nesterov;
  } else {
    oc->beta1 = c->momentum; /* --momentum is AdamW's beta1 */
  }
  oc->warmup_steps = c->warmup_steps;
}

void train_config_describe(const train_config_t *c, char *buf, size_t len)
{
  snprintf(buf, len,
           "device=%s nproc=%d mode=%s model=%s widths=%s norm=%s sync_bn=%s "
           "sync_bn_from_epoch=%d classes=%d image_size=%d batch_size=%d epochs=%d steps=%ld "
           "lr=%g optimizer=%s momentum=%g weight_decay=%g nesterov=%d warmup_steps=%ld "
           "precision=%s data=%s train_size=%ld val_size=%ld workers=%d seed=%llu "
           "bucket_mb=%g accum_steps=%d drop_last=%d deterministic=%d grad_comm=%s",
           train_device_name(c->device), c->nproc, c->mode == TRAIN_MODE_DP ? "dp" : "ddp",
           c->model, c->widths_name, c->norm == MODEL_NORM_GROUP ? "group" : "batch",
           c->sync_bn ? "on" : "off", c->sync_bn_from_epoch, c->classes, c->image_size,
           c->batch_size, c->epochs, c->steps, c->lr, opt_name(c->optimizer), c->momentum,
           c->weight_decay, c->nesterov, c->warmup_steps, train_precision_name(c->precision),
           c->synthetic ? "synthetic" : c->data_dir, c->train_size, c->val_size, c->workers,
           (unsigned long long)c->seed, c->bucket_mb, c->accum_steps, c->drop_last,
           c->deterministic, c->grad_comm_bf16 ? "bf16" : "f32");
}

void train_config_usage(FILE *f, const train_machine_t *m)
{
  const device_defaults_t *g = &cuda_defaults, *p = &cpu_defaults;
  model_device_t dev = default_device(m);
  fprintf(f,
"usage: train [--flag value ...]\n"
"Data-parallel training of a U-Net on the GPUs (or CPU ranks) of this machine, without NCCL.\n"
"Defaults marked cuda/cpu depend on --device.\n\n"
"Devices and processes:\n"
"  --device cpu|cuda        default: %s on this machine (%d GPU%s visible%s)\n"
"  --nproc N                ranks, 1..%d; default: every visible GPU (cuda), %d here for cpu\n"
"                           (2 CPU ranks, one per core, so the default job runs the DDP path);\n"
"                           more ranks than GPUs share them: rank r on GPU r %% GPUs\n"
"  --ranks-per-node K       under mpirun (every MPI process is one rank): ranks r/K form a\n"
"                           node (one shmddp group; MPI between nodes), so one machine can\n"
"                           stand in for several; default: the ranks of one host\n"
"  --mode ddp|dp            default: ddp (dp: one process drives every device, as PyTorch's\n"
"                           DataParallel: gathers on device 0, per-replica BatchNorm)\n"
"  --timeout S              seconds any collective may wait for a peer; default: 300\n\n",
          train_device_name(dev), m->visible_gpus, m->visible_gpus == 1 ? "" : "s",
          m->cuda_built ? "" : ", built without CUDA", SHMDDP_MAX_RANKS, default_cpu_nproc(m));
  fprintf(f,
"Model:\n"
"  --model unet             default: unet\n"
"  --widths LIST|PRESET     channels per level, e.g. 32,64,128, or tiny (8,16,32), small\n"
"                           (16,32,64,128), reference (64,...,1024);\n"
"                           default: %s (cuda), %s (cpu)\n"
"  --norm batch|group       default: batch\n"
"  --groups G               GroupNorm groups; default: the most (<= 8) dividing every width\n"
"  --sync-bn on|off         default: on with --norm batch: a few images per device give noisy\n"
"                           batch statistics, SyncBN computes them over the global batch\n"
"  --sync-bn-from-epoch E   local BatchNorm before epoch E, SyncBN from it; default: 0\n"
"  --classes K              2..255 (mask value 255 is ignored); default: 4; synthetic data\n"
"                           draws labels 0..%d (more classes: a wider head, unused labels)\n"
"  --precision fp32|bf16|fp16  default: %s (cuda), %s (cpu)\n\n",
          g->widths, p->widths, DATA_SYNTH_MAX_CLASSES - 1, train_precision_name(g->precision),
          train_precision_name(p->precision));
  fprintf(f,
"Data:\n"
"  --data synthetic|DIR     default: synthetic (procedural shapes); DIR holds images/*.png and\n"
"                           masks/*.png with the same names (and optionally val/images, val/masks)\n"
"  --image-size S           crop size in pixels; default: %d (cuda), %d (cpu)\n"
"  --train-size N           synthetic training samples; default: %ld (cuda), %ld (cpu)\n"
"  --val-size N             validation samples; default: %ld (cuda), %ld (cpu) for synthetic;\n"
"                           for DIR without val/: the last 10%% of the files by name\n"
"  --workers N              loader threads per rank, 0..64 (0: load in the training thread);\n"
"                           default: %d (cuda), %d (cpu)\n"
"  --drop-last              drop the tail that does not divide evenly over ranks and batches;\n"
"                           default: off (pad by repeating samples, so every sample is trained\n"
"                           on each epoch; this matters for small datasets)\n"
"  --seed N                 data, augmentation and initialisation; default: 1\n\n",
          g->image_size, p->image_size, g->train_size, p->train_size, g->val_size, p->val_size,
          g->workers, p->workers);
  fprintf(f,
"Optimisation:\n"
"  --batch-size B           per device; default: %d (cuda), %d (cpu)\n"
"  --epochs E               default: %d (cuda), %d (cpu)\n"
"  --steps N                stop after N optimizer steps (0: no cap); default: 0\n"
"  --optimizer sgd|adamw    default: sgd\n"
"  --lr LR                  peak learning rate; default: sgd %g (cuda), %g (cpu); adamw 0.002\n"
"  --momentum M             SGD momentum, AdamW beta1; default: 0.9\n"
"  --weight-decay W         default: 1e-4 (sgd), 0.01 (adamw)\n"
"  --nesterov               Nesterov momentum (sgd); default: off\n"
"  --warmup-steps N         linear warm-up, then cosine decay; default: %ld (cuda), %ld (cpu),\n"
"                           at most a fifth of the run\n"
"  --accum-steps K          micro-batches per optimizer step (all-reduce on the last); default: 1\n"
"  --bucket-mb MB           gradient bucket size for the all-reduce; default: 25\n"
"  --grad-comm f32|bf16     the gradients' type in the all-reduce (--mode ddp, 2+ ranks): bf16\n"
"                           halves the bytes; each rank's gradient is rounded to bf16, the\n"
"                           average is taken in f32 and rounded once (--precision bf16: the\n"
"                           bf16 gradients as backward wrote them, with no f32 copy); default:\n"
"                           f32\n\n",
          g->batch_size, p->batch_size, g->epochs, p->epochs, g->sgd_lr, p->sgd_lr, g->warmup_steps,
          p->warmup_steps);
  fprintf(f,
"GPU execution:\n"
"  --deterministic on|off   on: cuDNN's deterministic convolution algorithms, chosen by its\n"
"                           heuristics, so two runs (and a resumed run) are bit-identical;\n"
"                           off: time every algorithm at start and take the fastest (like\n"
"                           cudnn.benchmark), results may differ in the last bits; default: on\n"
"  --cuda-graph on|off      capture the training step (forward, loss, backward, gradient\n"
"                           all-reduce) once and replay it as a CUDA graph: one launch per step\n"
"                           instead of hundreds; used for full batches without accumulation\n"
"                           or a timeline (fp16: captured again when the loss scale changes);\n"
"                           default: on\n\n");
  fprintf(f,
"Output:\n"
"  --out DIR                summary.json and the per-step log (log.jsonl); default: runs/latest\n"
"  --log-every N            steps between progress lines; default: %ld (cuda), %ld (cpu)\n"
"  --timing-warmup N        steps left out of images/s (first touches, algorithm caches);\n"
"                           default: 1\n"
"  --timeline N             trace N steps after the timing warm-up into\n"
"                           DIR/timeline-rank<r>.json (Chrome trace / Perfetto); default: 0\n"
"  --save-every N           write DIR/checkpoint.ckpt every N steps and at the end (atomically:\n"
"                           a crash never leaves a partial one); 0: only when stopped by\n"
"                           SIGINT/SIGTERM or --stop-after; default: 0\n"
"  --resume PATH            continue from a checkpoint, bit for bit, with the same settings\n"
"  --stop-after N           stop after step N with a checkpoint, as if interrupted; N counts\n"
"                           from the start of training like the log's steps, so a resumed run\n"
"                           needs an N past the step it resumes at; default: 0 (off)\n"
"  --help                   this text (also -h)\n"
"  --help-env               the environment variables shmddp reads, with their defaults\n",
          g->log_every, p->log_every);
}
