/* options.c — the trainer's option table and everything it drives: the command line
 * (getopt_long's table is built from it), the defaults (resolve() applies each unset option's
 * default from its row, for the device the run uses) and --help (every line printed from the
 * rows: the flag, its value, what it does, its range and its default). A new option is one row
 * here plus its field in train_config_t; the checks between options are in resolve(). Defaults
 * that depend on the machine (GPU or CPU) are resolved after parsing, so --help and the errors
 * can say what each default is on this machine. */
#include "config.h"

#include "src/app/options.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build_version.h"
#include "shm/env.h"
#include "src/data/data.h"

/* Choices are stored as their index: the enums below number their values in the order of the
 * choice lists, and are int-sized. */
_Static_assert(sizeof(model_device_t) == sizeof(int) && sizeof(train_mode_t) == sizeof(int) &&
                   sizeof(model_norm_t) == sizeof(int) &&
                   sizeof(model_precision_t) == sizeof(int) && sizeof(optim_kind_t) == sizeof(int),
               "choice fields are stored through an int");

typedef enum {
  KIND_INT,    /* int field, an integer in [lo, hi] */
  KIND_LONG,   /* long field, an integer in [lo, hi] */
  KIND_DOUBLE, /* double field, a finite number in [lo, hi] ((lo, hi] with lo_open) */
  KIND_CHOICE, /* int field: the index of the value in `choices` */
  KIND_FLAG,   /* int field set to 1; takes no value */
  KIND_PATH,   /* char[TRAIN_PATH_MAX] field, non-empty */
  KIND_SEED,   /* uint64_t field */
  KIND_WIDTHS, /* levels, widths and widths_name: a preset or a list */
  KIND_DATA,   /* synthetic, or a directory into data_dir */
  KIND_MASKMAP, /* VALUE:LABEL,... into mask_map */
  KIND_ACTION  /* --help, --help-env: print and stop; with choices, an optional =VALUE */
} opt_kind_t;

enum {
  SEC_PROCS, SEC_MODEL, SEC_DATA, SEC_OPTIM, SEC_GPU, SEC_OUTPUT, SEC_COUNT
};
static const char *const section_titles[SEC_COUNT] = {
    "Devices and processes", "Model", "Data", "Optimisation", "GPU execution", "Output"};

typedef struct {
  const char *name;   /* the flag without its dashes */
  opt_kind_t kind;
  size_t field;       /* offsetof in train_config_t; NO_FIELD: checked, nothing stored */
  double lo, hi;      /* numbers: the range */
  int lo_open;        /* KIND_DOUBLE: lo itself is not allowed */
  const char *const *choices; /* KIND_CHOICE: the allowed values, NULL-terminated */
  const char *arg;    /* the value as --help writes it; NULL: the choices, or no value */
  const char *dflt;   /* the default as a command-line value (NULL: none, or computed in
                         resolve); dflt_cpu, when set, is the CPU's */
  const char *dflt_cpu;
  const char *dflt_words; /* the default as --help says it, when it is computed */
  int section;
  const char *help;   /* what it does (more sentences after "; " or ". ") */
} option_t;

#define NO_FIELD ((size_t)-1)
#define F(name) offsetof(train_config_t, name)

enum {
  OPT_DEVICE, OPT_NPROC, OPT_MPS, OPT_NO_MPS, OPT_NUMA_BIND, OPT_RANKS_PER_NODE, OPT_MODE,
  OPT_TIMEOUT, OPT_MAX_RESTARTS,
  OPT_MODEL, OPT_WIDTHS, OPT_NORM, OPT_GROUPS, OPT_SYNC_BN, OPT_SYNC_BN_FROM, OPT_CLASSES,
  OPT_PRECISION,
  OPT_DATA, OPT_MASK_MAP, OPT_IGNORE_LABEL, OPT_IMAGE_SIZE, OPT_TRAIN_SIZE, OPT_VAL_SIZE,
  OPT_MAX_IMAGE_PIXELS, OPT_WORKERS, OPT_DROP_LAST, OPT_SEED,
  OPT_BATCH, OPT_EPOCHS, OPT_STEPS, OPT_OPTIMIZER, OPT_LR, OPT_MOMENTUM, OPT_WD, OPT_NESTEROV,
  OPT_WARMUP, OPT_ACCUM, OPT_BUCKET, OPT_GRAD_COMM,
  OPT_DETERMINISTIC, OPT_CUDA_GRAPH,
  OPT_OUT, OPT_OVERWRITE, OPT_PROGRESS, OPT_LOG_EVERY, OPT_TIMING_WARMUP, OPT_TIMELINE, OPT_SAVE_EVERY, OPT_RESUME,
  OPT_STOP_AFTER, OPT_HELP, OPT_HELP_ENV, OPT_VERSION,
  OPT_COUNT
};

static const char *const device_names[] = {"cpu", "cuda", NULL};
static const char *const mode_names[] = {"ddp", "dp", NULL};
static const char *const model_names[] = {"unet", NULL};
static const char *const norm_names[] = {"batch", "group", NULL};
static const char *const onoff_names[] = {"off", "on", NULL};
static const char *const mps_names[] = {"auto", "on", "off", NULL};
static const char *const optimizer_names[] = {"sgd", "adamw", NULL};
static const char *const precision_names[] = {"fp32", "bf16", "fp16", NULL};
static const char *const grad_comm_names[] = {"f32", "bf16", NULL};
static const char *const progress_names[] = {"auto", "bar", "lines", "off", NULL};
static const char *const help_env_names[] = {"markdown", NULL};

/* The GPU defaults are the reference configuration of bench/README.md (4 epochs: about a minute
 * on one GPU, bench/results/train_1xh200.tsv; 8 loader threads keep the step fed); the CPU ones
 * make `make train` learn the shapes in a few minutes on 2 cores. */
static const option_t options[OPT_COUNT] = {
    [OPT_DEVICE] = {"device", KIND_CHOICE, F(device), .choices = device_names,
                    .section = SEC_PROCS,
                    .help = "the devices the ranks train on; cuda first loads the CUDA ops "
                            "module (cuBLAS, cuDNN), before any work"},
    [OPT_NPROC] = {"nproc", KIND_INT, F(nproc), 1, SHMDDP_MAX_RANKS, .arg = "N",
                   .section = SEC_PROCS,
                   .help = "ranks; 2 CPU ranks (one per core) make the default job run the DDP "
                           "path; more ranks than GPUs share them: rank r on GPU r % GPUs"},
    [OPT_MPS] = {"mps", KIND_CHOICE, F(mps), .choices = mps_names, .dflt = "auto",
                 .section = SEC_PROCS,
                 .help = "ranks that share a GPU run under a private MPS daemon started as the "
                         "user for this job (no GPU setting changed; stopped at the end), so "
                         "their kernels run side by side instead of taking turns; auto: when MPS "
                         "can serve them (nvidia-cuda-mps-control on PATH, every GPU's compute "
                         "mode Default, no daemon of another user in /tmp/nvidia-mps; a daemon "
                         "of yours already in effect is used as it is), and the start line says "
                         "which and why; on: required (refused, saying why, when it cannot "
                         "serve); off: the ranks take turns on the GPU"},
    [OPT_NO_MPS] = {"no-mps", KIND_FLAG, NO_FIELD, .section = SEC_PROCS,
                    .help = "the same as --mps off"},
    [OPT_NUMA_BIND] = {"numa-bind", KIND_CHOICE, F(numa_bind), .choices = onoff_names,
                       .dflt = "on", .section = SEC_PROCS,
                       .help = "on: each GPU rank runs on the CPUs of its GPU's NUMA node "
                               "(the node sysfs gives for the GPU's PCI bus id) and prefers "
                               "that node's memory for its host buffers and loader threads; "
                               "nothing to do on a one-node machine or a build without "
                               "libnuma; a binding the machine refuses is a warning and the "
                               "rank runs unbound; off: ranks run wherever the kernel puts "
                               "them (--device cpu, --mode dp and runs under mpirun are not "
                               "bound either way)"},
    [OPT_RANKS_PER_NODE] = {"ranks-per-node", KIND_INT, F(ranks_per_node), 1, SHMDDP_MAX_RANKS,
                            .arg = "K", .section = SEC_PROCS,
                            .dflt_words = "the ranks of one host",
                            .help = "under mpirun (every MPI process is one rank): ranks r/K form "
                                    "a node (one shmddp group; MPI between nodes), so one machine "
                                    "can stand in for several"},
    [OPT_MODE] = {"mode", KIND_CHOICE, F(mode), .choices = mode_names, .dflt = "ddp",
                  .section = SEC_PROCS,
                  .help = "dp: one process drives every device, as PyTorch's DataParallel: "
                          "gathers on device 0, per-replica BatchNorm"},
    [OPT_TIMEOUT] = {"timeout", KIND_DOUBLE, F(timeout_s), 0, 86400, 1, .arg = "S",
                     .dflt = "300", .section = SEC_PROCS,
                     .help = "seconds any collective may wait for a peer"},
    [OPT_MAX_RESTARTS] = {"max-restarts", KIND_INT, F(max_restarts), 0, 100, .arg = "N",
                          .dflt = "0", .section = SEC_PROCS,
                          .help = "when a rank dies (killed, out of memory, a failed GPU), stop "
                                  "the others and start every rank again from the last "
                                  "checkpoint, at most N times; each restart is recorded in "
                                  "log.jsonl and summary.json. Without --save-every a "
                                  "checkpoint is then written at the end of every epoch and "
                                  "after the first step 10 minutes past the last one, so a "
                                  "restart repeats at most an epoch or 10 minutes of training"},

    [OPT_MODEL] = {"model", KIND_CHOICE, NO_FIELD, .choices = model_names, .dflt = "unet",
                   .section = SEC_MODEL, .help = "the network"},
    [OPT_WIDTHS] = {"widths", KIND_WIDTHS, NO_FIELD, .arg = "LIST|PRESET", .dflt = "reference",
                    .dflt_cpu = "16,32,64", .section = SEC_MODEL,
                    .help = "channels per level, e.g. 32,64,128, or tiny (8,16,32), small "
                            "(16,32,64,128), reference (64,...,1024)"},
    [OPT_NORM] = {"norm", KIND_CHOICE, F(norm), .choices = norm_names, .dflt = "batch",
                  .section = SEC_MODEL, .help = "BatchNorm or GroupNorm"},
    [OPT_GROUPS] = {"groups", KIND_INT, F(groups), 1, 4096, .arg = "G", .section = SEC_MODEL,
                    .dflt_words = "the most (<= 8) dividing every width",
                    .help = "GroupNorm groups"},
    [OPT_SYNC_BN] = {"sync-bn", KIND_CHOICE, F(sync_bn), .choices = onoff_names,
                     .section = SEC_MODEL, .dflt_words = "on with --norm batch",
                     .help = "a few images per device give noisy batch statistics; SyncBN "
                             "computes them over the global batch"},
    [OPT_SYNC_BN_FROM] = {"sync-bn-from-epoch", KIND_INT, F(sync_bn_from_epoch), 0, 1000000,
                          .arg = "E", .dflt = "0", .section = SEC_MODEL,
                          .help = "local BatchNorm before epoch E, SyncBN from it"},
    [OPT_CLASSES] = {"classes", KIND_INT, F(classes), 2, 255, .arg = "K", .dflt = "4",
                     .section = SEC_MODEL,
                     .help = "output classes (mask value 255 is ignored); synthetic data draws "
                             "labels 0..7 (more classes: a wider head, unused labels)"},
    [OPT_PRECISION] = {"precision", KIND_CHOICE, F(precision), .choices = precision_names,
                       .dflt = "bf16", .dflt_cpu = "fp32", .section = SEC_MODEL,
                       .help = "bf16 and fp16 keep fp32 master weights; fp16 scales the loss"},

    [OPT_DATA] = {"data", KIND_DATA, NO_FIELD, .arg = "synthetic|DIR", .dflt = "synthetic",
                  .section = SEC_DATA,
                  .help = "synthetic: procedural shapes; DIR holds images/*.png and masks/*.png "
                          "with the same names (and optionally val/images, val/masks)"},
    [OPT_MASK_MAP] = {"mask-map", KIND_MASKMAP, NO_FIELD, .arg = "V:L,...", .section = SEC_DATA,
                      .dflt_words = "none (mask values are the labels)",
                      .help = "read mask value V as label L (DIR only), e.g. 255:1 for binary "
                              "masks saved as 0/255"},
    [OPT_IGNORE_LABEL] = {"ignore-label", KIND_INT, F(ignore_index), 1, 255, .arg = "V",
                          .dflt = "255", .section = SEC_DATA,
                          .help = "the mask value (after --mask-map) of pixels without a class, "
                                  "left out of the loss and the metrics; not a class (>= "
                                  "--classes)"},
    [OPT_IMAGE_SIZE] = {"image-size", KIND_INT, F(image_size), 8, 8192, .arg = "S",
                        .dflt = "256", .dflt_cpu = "64", .section = SEC_DATA,
                        .help = "crop size in pixels"},
    [OPT_TRAIN_SIZE] = {"train-size", KIND_LONG, F(train_size), 1, 100000000, .arg = "N",
                        .dflt = "12000", .dflt_cpu = "1536", .section = SEC_DATA,
                        .help = "synthetic training samples"},
    [OPT_VAL_SIZE] = {"val-size", KIND_LONG, F(val_size), 1, 100000000, .arg = "N",
                      .dflt = "600", .dflt_cpu = "128", .section = SEC_DATA,
                      .dflt_words = "600 (cuda), 128 (cpu) for synthetic; for DIR without "
                                    "val/: the last 10% of the files by name",
                      .help = "validation samples"},
    [OPT_MAX_IMAGE_PIXELS] = {"max-image-pixels", KIND_LONG, F(max_image_pixels), 1, 268435456,
                              .arg = "N", .dflt = "67108864", /* DATA_PNG_DEFAULT_MAX_PIXELS */
                              .section = SEC_DATA,
                              .dflt_words = "67108864 (8192 x 8192)",
                              .help = "DIR: refuse a PNG of more pixels (checked in its header, "
                                      "before it is decoded; the largest image sizes every "
                                      "loader buffer); 1 to 2^28"},
    [OPT_WORKERS] = {"workers", KIND_INT, F(workers), 0, 64, .arg = "N", .dflt = "8",
                     .dflt_cpu = "1", .section = SEC_DATA,
                     .help = "loader threads per rank (0: load in the training thread)"},
    [OPT_DROP_LAST] = {"drop-last", KIND_FLAG, F(drop_last), .section = SEC_DATA,
                       .dflt_words = "off (pad by repeating samples, so every sample is trained "
                                     "on each epoch; this matters for small datasets)",
                       .help = "drop the tail that does not divide evenly over ranks and "
                               "batches"},
    [OPT_SEED] = {"seed", KIND_SEED, F(seed), .arg = "N", .dflt = "1", .section = SEC_DATA,
                  .help = "data, augmentation and initialisation"},

    [OPT_BATCH] = {"batch-size", KIND_INT, F(batch_size), 1, 4096, .arg = "B", .dflt = "6",
                   .dflt_cpu = "8", .section = SEC_OPTIM, .help = "images per device"},
    [OPT_EPOCHS] = {"epochs", KIND_INT, F(epochs), 1, 1000000, .arg = "E", .dflt = "4",
                    .dflt_cpu = "6", .section = SEC_OPTIM, .help = "passes over the data"},
    [OPT_STEPS] = {"steps", KIND_LONG, F(steps), 0, 1000000000, .arg = "N", .dflt = "0",
                   .section = SEC_OPTIM, .help = "stop after N optimizer steps (0: no cap)"},
    [OPT_OPTIMIZER] = {"optimizer", KIND_CHOICE, F(optimizer), .choices = optimizer_names,
                       .dflt = "sgd", .section = SEC_OPTIM, .help = "SGD or AdamW"},
    [OPT_LR] = {"lr", KIND_DOUBLE, F(lr), 0, 10, 1, .arg = "LR", .dflt = "0.1", .dflt_cpu = "0.3",
                .section = SEC_OPTIM,
                .dflt_words = "sgd 0.1 (cuda), 0.3 (cpu); adamw 0.002",
                .help = "peak learning rate"},
    [OPT_MOMENTUM] = {"momentum", KIND_DOUBLE, F(momentum), 0, 0.999999, .arg = "M",
                      .dflt = "0.9", .section = SEC_OPTIM, .help = "SGD momentum, AdamW beta1"},
    [OPT_WD] = {"weight-decay", KIND_DOUBLE, F(weight_decay), 0, 10, .arg = "W", .dflt = "1e-4",
                .section = SEC_OPTIM, .dflt_words = "1e-4 (sgd), 0.01 (adamw)",
                .help = "decoupled for AdamW"},
    [OPT_NESTEROV] = {"nesterov", KIND_FLAG, F(nesterov), .section = SEC_OPTIM,
                      .dflt_words = "off", .help = "Nesterov momentum (sgd)"},
    [OPT_WARMUP] = {"warmup-steps", KIND_LONG, F(warmup_steps), 0, 1000000000, .arg = "N",
                    .dflt = "200", .dflt_cpu = "30", .section = SEC_OPTIM,
                    .dflt_words = "200 (cuda), 30 (cpu), at most a fifth of the run",
                    .help = "linear warm-up, then cosine decay"},
    [OPT_ACCUM] = {"accum-steps", KIND_INT, F(accum_steps), 1, 4096, .arg = "K", .dflt = "1",
                   .section = SEC_OPTIM,
                   .help = "micro-batches per optimizer step (all-reduce on the last)"},
    [OPT_BUCKET] = {"bucket-mb", KIND_DOUBLE, F(bucket_mb), 0, 4096, 1, .arg = "MB",
                    .dflt = "25", .section = SEC_OPTIM,
                    .help = "gradient bucket size for the all-reduce"},
    [OPT_GRAD_COMM] = {"grad-comm", KIND_CHOICE, F(grad_comm_bf16), .choices = grad_comm_names,
                       .dflt = "f32", .section = SEC_OPTIM,
                       .help = "the gradients' type in the all-reduce (--mode ddp, 2+ ranks): "
                               "bf16 halves the bytes; each rank's gradient is rounded to bf16, "
                               "the average is taken in f32 and rounded once (--precision bf16: "
                               "the bf16 gradients as backward wrote them, with no f32 copy)"},

    [OPT_DETERMINISTIC] = {"deterministic", KIND_CHOICE, F(deterministic),
                           .choices = onoff_names, .dflt = "on", .section = SEC_GPU,
                           .help = "on: cuDNN's deterministic convolution algorithms, chosen by "
                                   "its heuristics, so two runs (and a resumed run) are "
                                   "bit-identical; off: time every algorithm at start and take "
                                   "the fastest (like cudnn.benchmark), results may differ in "
                                   "the last bits"},
    [OPT_CUDA_GRAPH] = {"cuda-graph", KIND_CHOICE, F(cuda_graph), .choices = onoff_names,
                        .dflt = "on", .section = SEC_GPU,
                        .help = "capture the training step (forward, loss, backward, gradient "
                                "all-reduce) once and replay it as a CUDA graph: one launch per "
                                "step instead of hundreds; used for full batches without "
                                "accumulation or a timeline (fp16: captured again when the loss "
                                "scale changes)"},

    [OPT_OUT] = {"out", KIND_PATH, F(out_dir), .arg = "DIR", .section = SEC_OUTPUT,
                 .dflt_words = "a new folder runs/YYYYMMDD-HHMMSS for every run, and runs/latest "
                               "a link to the newest; with --resume, the checkpoint's folder",
                 .help = "the run's folder: the model (checkpoint.ckpt, written at the end), "
                         "summary.json and the per-step log (log.jsonl). A folder that holds "
                         "another run is refused, unless --resume continues that run or "
                         "--overwrite replaces it"},
    [OPT_OVERWRITE] = {"overwrite", KIND_FLAG, F(overwrite), .section = SEC_OUTPUT,
                       .help = "an --out holding another run: remove that run's files "
                               "(checkpoint.ckpt, log.jsonl, summary.json, report.html, "
                               "timelines) before this run starts; other files stay"},
    [OPT_PROGRESS] = {"progress", KIND_CHOICE, F(progress), .choices = progress_names,
                      .dflt = "auto", .section = SEC_OUTPUT,
                      .help = "bar: one status line redrawn in place; lines: a plain line every "
                              "--log-every steps; off: only the first lines, validations and "
                              "the result; auto: a bar on a terminal (not under mpirun), lines "
                              "otherwise"},
    [OPT_LOG_EVERY] = {"log-every", KIND_LONG, F(log_every), 1, 1000000000, .arg = "N",
                       .dflt = "20", .dflt_cpu = "10", .section = SEC_OUTPUT,
                       .help = "steps between progress lines"},
    [OPT_TIMING_WARMUP] = {"timing-warmup", KIND_LONG, F(timing_warmup), 1, 1000000,
                           .arg = "N", .dflt = "1", .section = SEC_OUTPUT,
                           .help = "steps left out of images/s (first touches, algorithm "
                                   "caches)"},
    [OPT_TIMELINE] = {"timeline", KIND_LONG, F(timeline_steps), 0, 1000, .arg = "N",
                      .dflt = "0", .section = SEC_OUTPUT,
                      .help = "trace N steps after the timing warm-up into "
                              "DIR/timeline-rank<r>.json (Chrome trace / Perfetto)"},
    [OPT_SAVE_EVERY] = {"save-every", KIND_LONG, F(save_every), 0, 1000000000, .arg = "N",
                        .dflt = "0", .section = SEC_OUTPUT,
                        .help = "also write DIR/checkpoint.ckpt every N steps (atomically: a "
                                "crash never leaves a partial one); it is always written at the "
                                "end of the run and when stopped by SIGINT/SIGTERM or "
                                "--stop-after; 0: only then (and as --max-restarts says)"},
    [OPT_RESUME] = {"resume", KIND_PATH, F(resume), .arg = "PATH", .section = SEC_OUTPUT,
                    .help = "continue from a checkpoint, bit for bit, with the same settings, "
                            "and the log.jsonl of its run (found by the run's id); without --out "
                            "in the checkpoint's folder"},
    [OPT_STOP_AFTER] = {"stop-after", KIND_LONG, F(stop_after), 0, 1000000000, .arg = "N",
                        .dflt = "0", .section = SEC_OUTPUT,
                        .help = "stop after step N with a checkpoint, as if interrupted (0: "
                                "off); N counts from the start of training like the log's "
                                "steps, so a resumed run needs an N past the step it resumes "
                                "at"},
    [OPT_HELP] = {"help", KIND_ACTION, NO_FIELD, .section = SEC_OUTPUT,
                  .help = "this text (also -h)"},
    [OPT_HELP_ENV] = {"help-env", KIND_ACTION, NO_FIELD, .choices = help_env_names,
                      .section = SEC_OUTPUT,
                      .help = "the environment variables shmddp reads, with their ranges and "
                              "defaults (--help-env=markdown: as the README's table)"},
    [OPT_VERSION] = {"version", KIND_ACTION, NO_FIELD, .section = SEC_OUTPUT,
                     .help = "the version (and the git commit it was built from)"},
};

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

static void choice_list(const char *const *names, char *buf, size_t len)
{
  buf[0] = 0;
  for (int i = 0; names[i]; i++) {
    strncat(buf, i ? "|" : "", len - strlen(buf) - 1);
    strncat(buf, names[i], len - strlen(buf) - 1);
  }
}

static int parse_choice(const char *flag, const char *s, const char *const *names, int *out,
                        char *err, size_t errlen)
{
  for (int i = 0; names[i]; i++) {
    if (strcmp(s, names[i]) == 0) {
      *out = i;
      return 0;
    }
  }
  char allowed[256];
  choice_list(names, allowed, sizeof allowed);
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

static int parse_seed(const char *s, uint64_t *out, char *err, size_t errlen)
{
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end || s[0] == '-')
    return usage_error(err, errlen, "--seed: '%s' is not allowed: give an integer from 0 to %llu",
                       s, (unsigned long long)UINT64_MAX);
  *out = v;
  return 0;
}

/* --mask-map V:L[,V:L...]: every other value reads as itself. Class L is written back (by
 * shmddp-predict) as the first V mapped to it. */
static int parse_mask_map(const char *s, train_config_t *c, char *err, size_t errlen)
{
  uint8_t written[256] = {0};
  for (int v = 0; v < 256; v++) c->mask_map[v] = c->class_value[v] = (uint8_t)v;
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10), l = -1;
    if (!errno && end != p && *end == ':' && v >= 0 && v <= 255) {
      p = end + 1;
      l = strtol(p, &end, 10);
      if (errno || end == p || (*end && *end != ',') || l < 0 || l > 255) l = -1;
    }
    if (l < 0 || (*end == ',' && !end[1]))
      return usage_error(err, errlen,
                         "--mask-map: '%s' is not allowed: give VALUE:LABEL pairs of 0 to 255, "
                         "comma-separated (e.g. 255:1)", s);
    c->mask_map[v] = (uint8_t)l;
    if (!written[l]) c->class_value[l] = (uint8_t)v;
    written[l] = 1;
    p = *end ? end + 1 : end;
  }
  if (!*s) return usage_error(err, errlen, "--mask-map: the list is empty; e.g. 255:1");
  c->mask_mapped = 1;
  snprintf(c->mask_map_text, sizeof c->mask_map_text, "%s", s);
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

/* Option o's value s into its field of c. */
static int parse_value(const option_t *o, const char *s, train_config_t *c, char *err,
                       size_t errlen)
{
  char flag[64];
  snprintf(flag, sizeof flag, "--%s", o->name);
  void *field = o->field == NO_FIELD ? NULL : (char *)c + o->field;
  long v = 0;
  int rc, choice = 0;
  switch (o->kind) {
  case KIND_INT:
    rc = parse_long(flag, s, (long)o->lo, (long)o->hi, &v, err, errlen);
    if (rc == 0) *(int *)field = (int)v;
    return rc;
  case KIND_LONG: return parse_long(flag, s, (long)o->lo, (long)o->hi, field, err, errlen);
  case KIND_DOUBLE: return parse_double(flag, s, o->lo, o->lo_open, o->hi, field, err, errlen);
  case KIND_CHOICE:
    rc = parse_choice(flag, s, o->choices, &choice, err, errlen);
    if (rc == 0 && field) *(int *)field = choice;
    return rc;
  case KIND_FLAG:
    if (field) *(int *)field = 1;
    return 0;
  case KIND_PATH: return parse_path(flag, s, field, err, errlen);
  case KIND_SEED: return parse_seed(s, field, err, errlen);
  case KIND_WIDTHS: return parse_widths(s, c, err, errlen);
  case KIND_DATA:
    c->synthetic = strcmp(s, "synthetic") == 0;
    return c->synthetic ? 0 : parse_path(flag, s, c->data_dir, err, errlen);
  case KIND_MASKMAP: return parse_mask_map(s, c, err, errlen);
  case KIND_ACTION: break;
  }
  return usage_error(err, errlen, "internal error: option --%s has no parser", o->name);
}

/* Option o's default on device d (NULL: none in the table). */
static const char *option_default(const option_t *o, model_device_t d)
{
  return d == MODEL_DEVICE_CPU && o->dflt_cpu ? o->dflt_cpu : o->dflt;
}

/* ---- resolve: the machine's defaults and the checks between options ---- */

/* The device and the number of ranks: from the machine, or checked against it. */
static int resolve_ranks(train_config_t *c, const unsigned char *set, const train_machine_t *m,
                         char *err, size_t errlen)
{
  if (m->mpi_bad[0])
    return usage_error(err, errlen,
                       "%s: an MPI launcher's number of processes, but not plain decimal "
                       "digits; start shmddp-train with mpirun, or unset it",
                       m->mpi_bad);
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
    if (c->max_restarts > 0)
      return usage_error(err, errlen,
                         "--max-restarts: under mpirun the job is mpirun's to start and end; "
                         "leave it out and restart the job with --resume");
    c->nproc = m->mpi_ranks;
    /* mpirun hands the ranks a pseudo-terminal even when its own output goes to a file */
    if (c->progress == TRAIN_PROGRESS_AUTO) c->progress = TRAIN_PROGRESS_LINES;
    return 0;
  }
  if (set[OPT_RANKS_PER_NODE])
    return usage_error(err, errlen, "--ranks-per-node: only under mpirun (mpirun -np N "
                       "shmddp-train --ranks-per-node K ...)");
  if (!set[OPT_NPROC])
    c->nproc = c->device == MODEL_DEVICE_CUDA ? m->visible_gpus : default_cpu_nproc(m);
  if (c->nproc > SHMDDP_MAX_RANKS) c->nproc = SHMDDP_MAX_RANKS;
  /* More ranks than GPUs share them round-robin (gpu_share.c checks that they fit). */
  c->gpus = c->device == MODEL_DEVICE_CUDA ? m->visible_gpus : 0;
  if (c->gpus > 0 && c->nproc > c->gpus && c->mode == TRAIN_MODE_DP)
    return usage_error(err, errlen,
                       "--mode dp drives one GPU per replica: %d replicas need %d GPUs but %d %s "
                       "visible (in --mode ddp ranks may share GPUs)",
                       c->nproc, c->nproc, c->gpus, c->gpus == 1 ? "is" : "are");
  return 0;
}

static int resolve_device(train_config_t *c, const unsigned char *set, const train_machine_t *m,
                          char *err, size_t errlen)
{
  if (!set[OPT_DEVICE]) c->device = default_device(m);
  if (c->device != MODEL_DEVICE_CUDA) return 0;
  if (!m->cuda_built)
    return usage_error(err, errlen,
                       "--device cuda: this build has no CUDA backend (configured "
                       "without CUDA); use --device cpu, or reconfigure with the CUDA toolkit");
  if (m->visible_gpus == 0)
    return usage_error(
        err, errlen,
        "--device cuda: no GPU is visible (no /proc/driver/nvidia/gpus "
        "entries or /dev/nvidiaN, or CUDA_VISIBLE_DEVICES hides them); use --device cpu");
  return 0;
}

/* Every option not given takes its row's default for the run's device; then the defaults that
 * depend on other options. */
static void apply_defaults(train_config_t *c, const unsigned char *set)
{
  char err[256];
  for (int i = 0; i < OPT_COUNT; i++) {
    const char *d = option_default(&options[i], c->device);
    if (set[i] || !d) continue;
    if (i == OPT_VAL_SIZE && !c->synthetic) continue; /* a directory: 10 % (data_open_png_dir) */
    if (parse_value(&options[i], d, c, err, sizeof err) != 0) abort(); /* a bad table row */
  }
  c->warmup_auto = !set[OPT_WARMUP];
  if (!c->mask_mapped)
    for (int k = 0; k < 256; k++) c->class_value[k] = (uint8_t)k;
  c->save_auto = c->max_restarts > 0 && !set[OPT_SAVE_EVERY];
  if (c->optimizer == OPTIM_ADAMW) { /* the rows' defaults are SGD's */
    if (!set[OPT_LR]) c->lr = 2e-3;
    if (!set[OPT_WD]) c->weight_decay = 0.01;
  }
}

/* The image size against the levels, the normalisation against its options. */
static int resolve_model(train_config_t *c, const unsigned char *set, char *err, size_t errlen)
{
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
  /* The model's own limits (e.g. the CPU backend computes in fp32 only). */
  model_config_t mc;
  train_config_model(c, 0, &mc);
  char merr[384];
  if (model_config_validate(&mc, merr, sizeof merr) != 0)
    return usage_error(err, errlen, "%s", merr);
  return 0;
}

/* What the data, the optimizer and the mode allow together. */
static int resolve_combinations(const train_config_t *c, const unsigned char *set, char *err,
                                size_t errlen)
{
  if (c->synthetic && set[OPT_MASK_MAP])
    return usage_error(err, errlen, "--mask-map: only for --data DIR (synthetic masks hold the "
                       "labels themselves)");
  if (c->ignore_index < c->classes)
    return usage_error(err, errlen,
                       "--ignore-label: %d is a class with --classes %d; give a value from %d "
                       "to 255", c->ignore_index, c->classes, c->classes);
  for (int v = 0; c->mask_mapped && v < 256; v++)
    if (c->mask_map[v] != v && c->mask_map[v] >= c->classes && c->mask_map[v] != c->ignore_index)
      return usage_error(err, errlen,
                         "--mask-map: %d:%d maps to no class (labels are 0 to %d with --classes "
                         "%d) and not to the ignore label %d", v, c->mask_map[v], c->classes - 1,
                         c->classes, c->ignore_index);
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
  if (c->mode == TRAIN_MODE_DP && (c->save_every > 0 || c->resume[0] || c->stop_after > 0 ||
                                   c->timeline_steps > 0 || c->max_restarts > 0))
    return usage_error(
        err, errlen,
        "--mode dp: checkpoints along the way (--save-every, --resume, --stop-after, "
        "--max-restarts) and --timeline belong to --mode ddp; DataParallel mode is for "
        "comparison runs (it writes the final checkpoint)");
  if (c->max_restarts > 0 && set[OPT_SAVE_EVERY] && c->save_every == 0)
    return usage_error(err, errlen,
                       "--max-restarts: a restart starts from the last checkpoint, and "
                       "--save-every 0 writes none before the end; give --save-every N, or leave "
                       "it out (a checkpoint every epoch and every 10 minutes)");
  return 0;
}

/* The files and folders named: what stat() can tell before anything starts. */
static int resolve_paths(const train_config_t *c, char *err, size_t errlen)
{
  struct stat st;
  if (!c->synthetic) {
    if (stat(c->data_dir, &st) != 0 || !S_ISDIR(st.st_mode))
      return usage_error(err, errlen,
                         "--data: '%s' is not a directory; give synthetic or a directory "
                         "holding images/*.png and masks/*.png",
                         c->data_dir);
  }
  if (c->out_dir[0] && stat(c->out_dir, &st) == 0 && !S_ISDIR(st.st_mode))
    return usage_error(err, errlen,
                       "--out: '%s' exists and is not a directory; give a directory "
                       "(it is created if missing)",
                       c->out_dir);
  if (c->resume[0] && (stat(c->resume, &st) != 0 || !S_ISREG(st.st_mode)))
    return usage_error(err, errlen, "--resume: '%s' is not a readable checkpoint file", c->resume);
  return 0;
}

/* --no-mps is --mps off; with --mps given otherwise, it is a contradiction. */
static int resolve_mps(train_config_t *c, const unsigned char *set, char *err, size_t errlen)
{
  if (!set[OPT_NO_MPS]) return 0;
  if (set[OPT_MPS] && c->mps != TRAIN_MPS_OFF)
    return usage_error(err, errlen, "--no-mps and --mps %s contradict each other; give one",
                       mps_names[c->mps]);
  c->mps = TRAIN_MPS_OFF;
  return 0;
}

static int resolve(train_config_t *c, const unsigned char *set, const train_machine_t *m,
                   char *err, size_t errlen)
{
  int rc = resolve_device(c, set, m, err, errlen);
  if (rc == 0) {
    apply_defaults(c, set);
    rc = resolve_ranks(c, set, m, err, errlen);
  }
  if (rc == 0) rc = resolve_mps(c, set, err, errlen);
  if (rc == 0) rc = resolve_model(c, set, err, errlen);
  if (rc == 0) rc = resolve_combinations(c, set, err, errlen);
  if (rc == 0) rc = resolve_paths(c, err, errlen);
  return rc;
}

/* ---- the command line ---- */

/* The edit distance of a and b (at most 63 bytes each are compared). */
static int distance(const char *a, const char *b)
{
  int la = (int)strnlen(a, 63), lb = (int)strnlen(b, 63), d[64][64];
  for (int i = 0; i <= la; i++) d[i][0] = i;
  for (int j = 0; j <= lb; j++) d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      d[i][j] = best;
    }
  return d[la][lb];
}

/* An unknown flag: its nearest option, when one is near enough to be what was meant. */
static int unknown_option(const char *arg, char *err, size_t errlen)
{
  char name[64];
  const char *p = arg;
  while (*p == '-') p++;
  snprintf(name, sizeof name, "%.*s", (int)strcspn(p, "="), p);
  int best = -1, best_d = 1 << 30;
  for (int i = 0; i < OPT_COUNT; i++) {
    int d = distance(name, options[i].name);
    if (d < best_d) best = i, best_d = d;
  }
  int limit = (int)strlen(name) / 3 > 2 ? (int)strlen(name) / 3 : 2;
  if (best >= 0 && best_d <= limit)
    return usage_error(err, errlen, "unknown option '%s'; did you mean --%s? (run with --help for "
                       "the list)", arg, options[best].name);
  return usage_error(err, errlen, "unknown option '%s'; run with --help for the list", arg);
}

/* getopt_long's table, made from the options' rows: option i answers 256 + i. */
static const struct option *getopt_table(void)
{
  static struct option t[OPT_COUNT + 1];
  if (!t[0].name)
    for (int i = 0; i < OPT_COUNT; i++) {
      const option_t *o = &options[i];
      int has_arg = o->kind == KIND_ACTION ? (o->choices ? optional_argument : no_argument)
                    : o->kind == KIND_FLAG ? no_argument
                                           : required_argument;
      t[i] = (struct option){.name = o->name, .has_arg = has_arg, .val = 256 + i};
    }
  return t;
}

int train_config_parse(train_config_t *c, int argc, char **argv, const train_machine_t *m,
                       FILE *out, char *err, size_t errlen)
{
  *c = (train_config_t){.model = "unet", .ignore_index = 255};
  unsigned char set[OPT_COUNT] = {0};
  int ch;
  optind = 0; /* also resets getopt's state, so tests can parse several command lines */
  opterr = 0;
  while ((ch = getopt_long(argc, argv, ":h", getopt_table(), NULL)) != -1) {
    if (ch == '?') {
      if (optopt >= 256)
        return usage_error(err, errlen, "option '%s' takes no value; run with --help",
                           argv[optind - 1]);
      return unknown_option(argv[optind - 1], err, errlen);
    }
    if (ch == ':')
      return usage_error(err, errlen, "option '%s' needs a value; run with --help",
                         argv[optind - 1]);
    int id = ch == 'h' ? OPT_HELP : ch - 256;
    if (id == OPT_HELP) {
      train_config_usage(out, m);
      return 1;
    }
    if (id == OPT_HELP_ENV) { /* --help-env=markdown: the README's table */
      int markdown = 0;
      int rc = optarg ? parse_choice("--help-env", optarg, help_env_names, &markdown, err, errlen)
                      : 0;
      if (rc) return rc;
      if (optarg) shm_env_print_markdown(out);
      else shm_env_print(out);
      return 1;
    }
    if (id == OPT_VERSION) {
      fprintf(out, "shmddp-train %s\n", SHMDDP_BUILD_VERSION);
      return 1;
    }
    set[id] = 1;
    int rc = parse_value(&options[id], optarg, c, err, errlen);
    if (rc) return rc;
  }
  if (optind < argc)
    return usage_error(err, errlen,
                       "unexpected argument '%s': every setting is a --flag; run with --help",
                       argv[optind]);
  return resolve(c, set, m, err, errlen);
}

/* ---- --help, printed from the rows ---- */

#define HELP_WIDTH 98
#define HELP_INDENT 27

/* text after `used` columns, wrapped at HELP_WIDTH, continued at HELP_INDENT. */
static void print_wrapped(FILE *f, int used, const char *text)
{
  int col = used, first = 1; /* first: of a line */
  const char *p = text;
  while (*p) {
    size_t n = strcspn(p, " ");
    if (!first && col + 1 + (int)n > HELP_WIDTH) {
      fprintf(f, "\n%*s", HELP_INDENT, "");
      col = HELP_INDENT;
      first = 1;
    }
    if (!first) {
      fputc(' ', f);
      col++;
    }
    first = 0;
    fprintf(f, "%.*s", (int)n, p);
    col += (int)n;
    p += n;
    while (*p == ' ') p++;
  }
  fputc('\n', f);
}

/* The range of a number as --help gives it; nothing for the caps of a million and more, which
 * only guard against typos. */
static void range_words(const option_t *o, char *buf, size_t len)
{
  buf[0] = 0;
  if (o->kind == KIND_INT || o->kind == KIND_LONG) {
    if (o->hi < 1e6) snprintf(buf, len, " [%g, %g]", o->lo, o->hi);
  } else if (o->kind == KIND_DOUBLE) {
    snprintf(buf, len, " %c%g, %g]", o->lo_open ? '(' : '[', o->lo, o->hi);
  }
}

/* Option id's default in words, on machine m. */
static void default_words(int id, const train_machine_t *m, char *buf, size_t len)
{
  const option_t *o = &options[id];
  buf[0] = 0;
  if (id == OPT_DEVICE)
    snprintf(buf, len, "%s on this machine (%d GPU%s visible%s)",
             train_device_name(default_device(m)), m->visible_gpus,
             m->visible_gpus == 1 ? "" : "s", m->cuda_built ? "" : ", built without CUDA");
  else if (id == OPT_NPROC)
    snprintf(buf, len, "every visible GPU (cuda), %d here for cpu", default_cpu_nproc(m));
  else if (o->dflt_words)
    snprintf(buf, len, "%s", o->dflt_words);
  else if (o->dflt_cpu)
    snprintf(buf, len, "%s (cuda), %s (cpu)", o->dflt, o->dflt_cpu);
  else if (o->dflt)
    snprintf(buf, len, "%s", o->dflt);
  else if (o->kind == KIND_FLAG)
    snprintf(buf, len, "off");
}

static void print_option(FILE *f, int id, const train_machine_t *m)
{
  const option_t *o = &options[id];
  char arg[128] = "", range[64], dflt[256], text[1024];
  if (o->kind == KIND_CHOICE) choice_list(o->choices, arg, sizeof arg);
  else if (o->arg) snprintf(arg, sizeof arg, "%s", o->arg);
  int used = fprintf(f, "  --%s%s%s", o->name, arg[0] ? " " : "", arg);
  used += fprintf(f, "%*s", used < HELP_INDENT ? HELP_INDENT - used : 1, "");
  range_words(o, range, sizeof range);
  default_words(id, m, dflt, sizeof dflt);
  snprintf(text, sizeof text, "%s%s%s%s", o->help, range, dflt[0] ? "; default: " : "", dflt);
  print_wrapped(f, used, text);
}

void train_config_usage(FILE *f, const train_machine_t *m)
{
  fprintf(f,
          "usage: shmddp-train [--flag value ...]\n"
          "Data-parallel training of a U-Net on the GPUs (or CPU ranks) of this machine, "
          "without NCCL.\nDefaults marked cuda/cpu depend on --device.\n");
  for (int s = 0; s < SEC_COUNT; s++) {
    fprintf(f, "\n%s:\n", section_titles[s]);
    for (int i = 0; i < OPT_COUNT; i++)
      if (options[i].section == s) print_option(f, i, m);
  }
}
