/* check_cli.c — the trainer's command line: every flag's validation (a bad value is refused
 * with a message naming the flag), the defaults on a CPU-only and on a GPU machine, --help, and
 * GPU counting without CUDA (fake /proc and /dev trees). */
#include "config.h"

#include <check.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/app/options.h"
#include "src/app/gpu_share.h"
#include "src/app/relaunch.h"
#include "tests/suite_main.h"

/* no GPU, CUDA build, 2 cores */
static const train_machine_t cpu_box = {.visible_gpus = 0, .cuda_built = 1, .online_cpus = 2};
/* 2 GPUs */
static const train_machine_t gpu_box = {.visible_gpus = 2, .cuda_built = 1, .online_cpus = 32};
/* GPUs, but a --without-cuda build */
static const train_machine_t nocuda_box = {.visible_gpus = 2, .cuda_built = 0, .online_cpus = 4};
/* started by mpirun with 4 processes, built with MPI */
static const train_machine_t mpi_box = {.visible_gpus = 1, .cuda_built = 1, .online_cpus = 16,
                                        .mpi_ranks = 4, .mpi_built = 1};

/* Parse a NULL-terminated list of arguments (after the program name). */
static int parse(train_config_t *c, const train_machine_t *m, char *err, size_t errlen, ...)
{
  char *argv[64];
  int argc = 0;
  argv[argc++] = "train";
  va_list ap;
  va_start(ap, errlen);
  char *a;
  while ((a = va_arg(ap, char *)) != NULL) argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;
  FILE *devnull = fopen("/dev/null", "w");
  err[0] = 0;
  int rc = train_config_parse(c, argc, argv, m, devnull, err, errlen);
  fclose(devnull);
  return rc;
}

#define REJECT(m, needle, ...)                                                        \
  do {                                                                                \
    train_config_t c_;                                                                \
    char e_[512];                                                                     \
    int rc_ = parse(&c_, m, e_, sizeof e_, __VA_ARGS__, (char *)NULL);                \
    ck_assert_msg(rc_ == 2, "expected rejection of [%s], rc %d", #__VA_ARGS__, rc_);  \
    ck_assert_msg(strstr(e_, needle) != NULL, "message '%s' lacks '%s'", e_, needle); \
  } while (0)

START_TEST(test_defaults_cpu)
{
  train_config_t c;
  char err[512];
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, (char *)NULL), 0);
  ck_assert_int_eq(c.device, MODEL_DEVICE_CPU);
  ck_assert_int_eq(c.nproc, 2);
  ck_assert_int_eq(c.mode, TRAIN_MODE_DDP);
  ck_assert_str_eq(c.model, "unet");
  ck_assert_int_eq(c.levels, 3);
  ck_assert_int_eq(c.widths[0], 16);
  ck_assert_int_eq(c.widths[2], 64);
  ck_assert_int_eq(c.norm, MODEL_NORM_BATCH);
  ck_assert_int_eq(c.sync_bn, 1);
  ck_assert_int_eq(c.classes, 4);
  ck_assert_int_eq(c.image_size, 64);
  ck_assert_int_eq(c.precision, MODEL_FP32);
  ck_assert_int_eq(c.optimizer, OPTIM_SGD);
  ck_assert(c.synthetic);
  ck_assert_int_eq(c.accum_steps, 1);
  ck_assert_int_eq(c.drop_last, 0);
  ck_assert_int_eq(c.steps, 0);
  ck_assert(c.lr > 0 && c.momentum == 0.9);
  /* Single core: one CPU rank. */
  train_machine_t one = {.visible_gpus = 0, .cuda_built = 1, .online_cpus = 1};
  ck_assert_int_eq(parse(&c, &one, err, sizeof err, (char *)NULL), 0);
  ck_assert_int_eq(c.nproc, 1);
}
END_TEST

START_TEST(test_defaults_gpu)
{
  train_config_t c;
  char err[512];
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, (char *)NULL), 0);
  ck_assert_int_eq(c.device, MODEL_DEVICE_CUDA);
  ck_assert_int_eq(c.nproc, 2);
  ck_assert_int_eq(c.levels, 5);
  ck_assert_int_eq(c.widths[4], 1024);
  ck_assert_int_eq(c.image_size, 256);
  ck_assert_int_eq(c.batch_size, 6);
  ck_assert_int_eq(c.precision, MODEL_BF16);
  /* Ranks sharing a GPU get a private MPS daemon when one can be had; on and off are taken. */
  ck_assert_int_eq(c.mps, TRAIN_MPS_AUTO);
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, "--mps", "on", (char *)NULL), 0);
  ck_assert_int_eq(c.mps, TRAIN_MPS_ON);
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, "--mps", "off", (char *)NULL), 0);
  ck_assert_int_eq(c.mps, TRAIN_MPS_OFF);
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, "--no-mps", (char *)NULL), 0);
  ck_assert_int_eq(c.mps, TRAIN_MPS_OFF);
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, "--no-mps", "--mps", "off", (char *)NULL),
                   0);
  ck_assert_int_eq(c.mps, TRAIN_MPS_OFF);
  /* GPU ranks are bound to their GPU's NUMA node unless --numa-bind off says not to: the
   * launch asks for it only for GPU ranks. */
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, (char *)NULL), 0);
  ck_assert_int_eq(c.numa_bind, 1);
  shmddp_launch_config_t lc;
  train_launch_config(&c, &lc);
  ck_assert_int_eq(lc.nproc, 2);
  ck_assert_int_eq(lc.use_gpus, 1);
  ck_assert_int_eq(lc.bind_numa, 1);
  ck_assert_str_eq(lc.label, "train");
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, "--numa-bind", "off", (char *)NULL), 0);
  ck_assert_int_eq(c.numa_bind, 0);
  train_launch_config(&c, &lc);
  ck_assert_int_eq(lc.use_gpus, 1);
  ck_assert_int_eq(lc.bind_numa, 0);
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, "--device", "cpu", (char *)NULL), 0);
  ck_assert_int_eq(c.numa_bind, 1);
  train_launch_config(&c, &lc);
  ck_assert_int_eq(lc.use_gpus, 0);
  ck_assert_int_eq(lc.bind_numa, 0); /* CPU ranks have no GPU to follow */
  /* Placement changes no result: it is not part of the run's description (a resume key). */
  char placed[1024], unplaced[1024];
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, (char *)NULL), 0);
  train_config_describe(&c, placed, sizeof placed);
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, "--numa-bind", "off", (char *)NULL), 0);
  train_config_describe(&c, unplaced, sizeof unplaced);
  ck_assert_str_eq(placed, unplaced);
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, (char *)NULL), 0);
  /* Bit-identical runs and CUDA graphs by default; both can be switched off. */
  ck_assert_int_eq(c.deterministic, 1);
  ck_assert_int_eq(c.cuda_graph, 1);
  model_config_t mc;
  train_config_model(&c, 1, &mc);
  ck_assert_int_eq(mc.conv_benchmark, 0);
  ck_assert_int_eq(mc.cuda_device, 1);
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, "--deterministic", "off", "--cuda-graph",
                         "off", (char *)NULL), 0);
  ck_assert_int_eq(c.deterministic, 0);
  ck_assert_int_eq(c.cuda_graph, 0);
  train_config_model(&c, 0, &mc);
  ck_assert_int_eq(mc.conv_benchmark, 1);
  /* The determinism setting is part of the run's description (and the resume key). */
  char desc[1024];
  train_config_describe(&c, desc, sizeof desc);
  ck_assert_msg(strstr(desc, "deterministic=0") != NULL, "%s", desc);
  /* A CPU run on the GPU machine gets the CPU defaults. */
  ck_assert_int_eq(parse(&c, &gpu_box, err, sizeof err, "--device", "cpu", (char *)NULL), 0);
  ck_assert_int_eq(c.levels, 3);
  ck_assert_int_eq(c.image_size, 64);
  /* Without the CUDA backend, the default is the CPU. */
  ck_assert_int_eq(parse(&c, &nocuda_box, err, sizeof err, (char *)NULL), 0);
  ck_assert_int_eq(c.device, MODEL_DEVICE_CPU);
  /* AdamW's own defaults; --momentum becomes its beta1. */
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, "--optimizer", "adamw", "--momentum",
                         "0.8", (char *)NULL), 0);
  ck_assert(c.lr < 0.01 && c.weight_decay == 0.01);
  optim_config_t oc;
  train_config_optim(&c, &oc);
  ck_assert_int_eq(oc.kind, OPTIM_ADAMW);
  ck_assert(oc.beta1 == 0.8 && oc.lr == c.lr && oc.weight_decay == 0.01);
  /* SGD: momentum, Nesterov, warm-up carried over. */
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, "--momentum", "0.5", "--nesterov",
                         "--warmup-steps", "7", "--lr", "0.2", (char *)NULL), 0);
  train_config_optim(&c, &oc);
  ck_assert_int_eq(oc.kind, OPTIM_SGD);
  ck_assert(oc.momentum == 0.5 && oc.nesterov == 1 && oc.warmup_steps == 7 && oc.lr == 0.2);
}
END_TEST

START_TEST(test_values_accepted)
{
  train_config_t c;
  char err[512];
  char dir[] = "/tmp/check_cli_XXXXXX", out[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  /* a folder that does not exist yet (the trainer makes it), whatever else the machine's /tmp
   * holds */
  snprintf(out, sizeof out, "%s/out", dir);
  int rc = parse(&c, &gpu_box, err, sizeof err, "--device", "cuda", "--nproc", "1", "--mode",
                 "ddp", "--model", "unet", "--widths", "16,32,64,128", "--norm", "group",
                 "--groups", "4", "--classes", "3", "--image-size", "96", "--batch-size", "5",
                 "--epochs", "7", "--steps", "123", "--lr", "0.02", "--optimizer", "sgd",
                 "--momentum", "0.8", "--weight-decay", "0", "--nesterov", "--warmup-steps", "9",
                 "--precision", "fp16", "--data", dir, "--val-size", "2",
                 "--workers", "3", "--seed", "0x10", "--out", out, "--bucket-mb", "2.5",
                 "--accum-steps", "2", "--drop-last", "--timeout", "12.5", "--log-every", "4",
                 (char *)NULL);
  ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
  ck_assert_int_eq(c.nproc, 1);
  ck_assert_int_eq(c.levels, 4);
  ck_assert_int_eq(c.widths[3], 128);
  ck_assert_int_eq(c.norm, MODEL_NORM_GROUP);
  ck_assert_int_eq(c.groups, 4);
  ck_assert_int_eq(c.sync_bn, 0); /* GroupNorm has nothing to synchronise */
  ck_assert_int_eq(c.classes, 3);
  ck_assert_int_eq(c.image_size, 96);
  ck_assert_int_eq(c.batch_size, 5);
  ck_assert_int_eq(c.epochs, 7);
  ck_assert_int_eq(c.steps, 123);
  ck_assert_double_eq(c.lr, 0.02);
  ck_assert_double_eq(c.momentum, 0.8);
  ck_assert_double_eq(c.weight_decay, 0);
  ck_assert_int_eq(c.nesterov, 1);
  ck_assert_int_eq(c.warmup_steps, 9);
  ck_assert_int_eq(c.precision, MODEL_FP16);
  ck_assert(!c.synthetic);
  ck_assert_str_eq(c.data_dir, dir);
  ck_assert_int_eq(c.val_size, 2);
  ck_assert_int_eq(c.workers, 3);
  ck_assert_uint_eq(c.seed, 16);
  ck_assert_str_eq(c.out_dir, out);
  ck_assert_double_eq(c.bucket_mb, 2.5);
  ck_assert_int_eq(c.grad_comm_bf16, 0); /* the default */
  ck_assert_int_eq(c.accum_steps, 2);
  ck_assert_int_eq(c.drop_last, 1);
  ck_assert_double_eq(c.timeout_s, 12.5);
  ck_assert_int_eq(c.log_every, 4);
  /* GroupNorm's default groups divide every width. */
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, "--norm", "group", "--widths", "12,24",
                         (char *)NULL), 0);
  ck_assert_int_eq(c.groups, 4);
  /* Presets by name, SyncBN switched on later. */
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, "--widths", "small", "--sync-bn", "on",
                         "--sync-bn-from-epoch", "2", "--epochs", "4", (char *)NULL), 0);
  ck_assert_int_eq(c.levels, 4);
  ck_assert_int_eq(c.sync_bn_from_epoch, 2);
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, "--sync-bn", "off", (char *)NULL), 0);
  ck_assert_int_eq(c.sync_bn, 0);
  /* DataParallel on CPU devices too; BatchNorm per replica; a head wider than the synthetic
   * labels (the DP imbalance case). */
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, "--mode", "dp", "--classes", "150",
                         (char *)NULL), 0);
  ck_assert_int_eq(c.mode, TRAIN_MODE_DP);
  ck_assert_int_eq(c.sync_bn, 0);
  ck_assert_int_eq(c.classes, 150);
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, "--grad-comm", "bf16", (char *)NULL), 0);
  ck_assert_int_eq(c.grad_comm_bf16, 1);
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, "--grad-comm", "f32", (char *)NULL), 0);
  ck_assert_int_eq(c.grad_comm_bf16, 0);
  /* --mask-map: each class is written back as the first value mapped to it, else as itself */
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, "--data", dir, "--classes", "3",
                         "--mask-map", "255:1,128:1,7:0", (char *)NULL), 0);
  ck_assert_int_eq(c.mask_map[255], 1);
  ck_assert_int_eq(c.mask_map[7], 0);
  ck_assert_int_eq(c.class_value[0], 7);
  ck_assert_int_eq(c.class_value[1], 255);
  ck_assert_int_eq(c.class_value[2], 2);
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, (char *)NULL), 0);
  for (int k = 0; k < 256; k++) ck_assert_int_eq(c.class_value[k], k);
  /* no --out: train_job_open chooses the folder; --max-restarts without --save-every saves
   * at every epoch's end, not with one */
  ck_assert_str_eq(c.out_dir, "");
  ck_assert_int_eq(c.save_auto, 0);
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, "--max-restarts", "3", "--overwrite",
                         (char *)NULL), 0);
  ck_assert_int_eq(c.max_restarts, 3);
  ck_assert_int_eq(c.overwrite, 1);
  ck_assert_int_eq(c.save_auto, 1);
  ck_assert_int_eq(parse(&c, &cpu_box, err, sizeof err, "--max-restarts", "3", "--save-every",
                         "7", (char *)NULL), 0);
  ck_assert_int_eq(c.save_auto, 0);
  ck_assert_int_eq(c.save_every, 7);
  rmdir(dir);
}
END_TEST

START_TEST(test_bad_values)
{
  const train_machine_t *m = &cpu_box;
  REJECT(m, "--device", "--device", "tpu");
  REJECT(m, "--nproc", "--nproc", "0");
  REJECT(m, "--nproc", "--nproc", "9");
  REJECT(m, "--nproc", "--nproc", "two");
  REJECT(m, "--mode", "--mode", "fsdp");
  REJECT(m, "--model", "--model", "resnet");
  REJECT(m, "--widths", "--widths", "huge");
  REJECT(m, "--widths", "--widths", "8,0,16");
  REJECT(m, "--widths", "--widths", "8,16,");
  REJECT(m, "--widths", "--widths", "1,2,3,4,5,6,7,8,9");
  REJECT(m, "--norm", "--norm", "layer");
  REJECT(m, "--groups", "--groups", "0");
  REJECT(m, "--sync-bn", "--sync-bn", "yes");
  REJECT(m, "--deterministic", "--deterministic", "1");
  REJECT(m, "--cuda-graph", "--cuda-graph", "true");
  REJECT(m, "--sync-bn-from-epoch", "--sync-bn-from-epoch", "-1");
  REJECT(m, "--classes", "--classes", "1");
  REJECT(m, "--classes", "--classes", "256");
  REJECT(m, "--image-size", "--image-size", "4");
  REJECT(m, "--image-size", "--image-size", "64px");
  REJECT(m, "--batch-size", "--batch-size", "0");
  REJECT(m, "--epochs", "--epochs", "0");
  REJECT(m, "--steps", "--steps", "-5");
  REJECT(m, "--lr", "--lr", "0");
  REJECT(m, "--lr", "--lr", "nan");
  REJECT(m, "--lr", "--lr", "-0.1");
  REJECT(m, "--optimizer", "--optimizer", "adam");
  REJECT(m, "--momentum", "--momentum", "1");
  REJECT(m, "--weight-decay", "--weight-decay", "-1e-4");
  REJECT(m, "--warmup-steps", "--warmup-steps", "x");
  REJECT(m, "--precision", "--precision", "fp8");
  REJECT(m, "--data", "--data", "/nonexistent/dataset");
  REJECT(m, "--data", "--data", "");
  REJECT(m, "--train-size", "--train-size", "0");
  REJECT(m, "--val-size", "--val-size", "0");
  REJECT(m, "--workers", "--workers", "-1");
  REJECT(m, "--workers", "--workers", "65");
  REJECT(m, "--seed", "--seed", "-3");
  REJECT(m, "--seed", "--seed", "12abc");
  REJECT(m, "--out", "--out", "");
  REJECT(m, "--bucket-mb", "--bucket-mb", "0");
  REJECT(m, "f32|bf16", "--grad-comm", "f16");
  REJECT(m, "--accum-steps", "--accum-steps", "0");
  REJECT(m, "--save-every", "--save-every", "-1");
  REJECT(m, "--resume", "--resume", "/nonexistent/ckpt");
  REJECT(m, "--timeout", "--timeout", "0");
  REJECT(m, "--log-every", "--log-every", "0");
  /* The message says what is allowed. */
  REJECT(m, "from 1 to 4096", "--batch-size", "-2");
  REJECT(m, "cpu|cuda", "--device", "gpu");
}
END_TEST

START_TEST(test_bad_combinations)
{
  train_config_t c0;
  char err0[512];
  REJECT(&cpu_box, "--device cuda", "--device", "cuda");       /* no GPU visible */
  REJECT(&gpu_box, "--mps", "--mps", "yes");                    /* auto, on or off */
  REJECT(&gpu_box, "contradict", "--no-mps", "--mps", "on");
  REJECT(&gpu_box, "--numa-bind", "--numa-bind", "yes");       /* on or off */
  REJECT(&nocuda_box, "no CUDA backend", "--device", "cuda");  /* built without CUDA */
  REJECT(&gpu_box, "--mode dp", "--mode", "dp", "--nproc", "3"); /* 2 GPUs, one per replica */
  /* DDP: more ranks than GPUs share them round-robin (gpu_share.c) */
  ck_assert_int_eq(parse(&c0, &gpu_box, err0, sizeof err0, "--device", "cuda", "--nproc", "3",
                         (char *)NULL), 0);
  ck_assert_int_eq(c0.nproc, 3);
  ck_assert_int_eq(c0.gpus, 2);
  char share[128];
  train_share_describe(&c0, share, sizeof share);
  ck_assert_str_eq(share, "ranks 0, 2 share GPU 0; rank 1 alone on GPU 1");
  REJECT(&cpu_box, "--image-size", "--image-size", "62");      /* tiny: 3 levels, 62 % 4 */
  REJECT(&cpu_box, "--image-size", "--widths", "8,8,8,8,8,8", "--image-size", "32");
  REJECT(&cpu_box, "--sync-bn on", "--norm", "group", "--sync-bn", "on");
  REJECT(&cpu_box, "--groups", "--norm", "group", "--groups", "3");
  REJECT(&cpu_box, "--groups", "--groups", "2"); /* only with GroupNorm */
  REJECT(&cpu_box, "--sync-bn-from-epoch", "--sync-bn", "off", "--sync-bn-from-epoch", "1");
  REJECT(&cpu_box, "--sync-bn-from-epoch", "--epochs", "3", "--sync-bn-from-epoch", "3");
  REJECT(&cpu_box, "--nesterov", "--optimizer", "adamw", "--nesterov");
  REJECT(&cpu_box, "--nesterov", "--momentum", "0", "--nesterov");
  REJECT(&cpu_box, "--precision fp32", "--precision", "bf16"); /* the CPU backend is fp32 */
  /* DataParallel: per-replica BatchNorm only; checkpoints and traces are DDP's */
  REJECT(&cpu_box, "--sync-bn on", "--mode", "dp", "--sync-bn", "on");
  REJECT(&cpu_box, "--mode dp", "--mode", "dp", "--save-every", "5");
  REJECT(&cpu_box, "--mode dp", "--mode", "dp", "--max-restarts", "1");
  /* restarts need checkpoints along the way; under mpirun the job is mpirun's */
  REJECT(&cpu_box, "--max-restarts", "--max-restarts", "1", "--save-every", "0");
  REJECT(&cpu_box, "--max-restarts", "--max-restarts", "101");
  REJECT(&mpi_box, "--max-restarts", "--max-restarts", "1");
  REJECT(&cpu_box, "--mode ddp", "--mode", "dp", "--grad-comm", "bf16"); /* no all-reduce */
  REJECT(&mpi_box, "one machine", "--grad-comm", "bf16");
  ck_assert_int_eq(parse(&c0, &mpi_box, err0, sizeof err0, (char *)NULL), 0); /* mpirun alone: fine */
  /* mpirun hands its ranks a terminal even when its output goes to a file: auto means lines */
  ck_assert_int_eq(c0.progress, TRAIN_PROGRESS_LINES);
  ck_assert_int_eq(parse(&c0, &mpi_box, err0, sizeof err0, "--progress", "bar", (char *)NULL), 0);
  ck_assert_int_eq(c0.progress, TRAIN_PROGRESS_BAR);
  ck_assert_int_eq(parse(&c0, &cpu_box, err0, sizeof err0, (char *)NULL), 0);
  ck_assert_int_eq(c0.progress, TRAIN_PROGRESS_AUTO);
  REJECT(&cpu_box, "--progress", "--progress", "fancy");
  REJECT(&cpu_box, "did you mean --batch-size?", "--batchsize", "4");
  REJECT(&cpu_box, "--ignore-label: 2 is a class", "--classes", "3", "--ignore-label", "2");
  REJECT(&cpu_box, "--mask-map", "--mask-map", "255:");
  REJECT(&cpu_box, "--mask-map", "--mask-map", "256:1");
  REJECT(&cpu_box, "--train-size", "--data", "/tmp", "--train-size", "5");
  REJECT(&cpu_box, "unknown option", "--bogus");
  REJECT(&cpu_box, "takes no value", "--nesterov=yes");
  REJECT(&cpu_box, "needs a value", "--lr");
  REJECT(&cpu_box, "unexpected argument", "extra");

  char file[] = "/tmp/check_cli_file_XXXXXX";
  int fd = mkstemp(file);
  ck_assert_int_ge(fd, 0);
  close(fd);
  REJECT(&cpu_box, "--out", "--out", file);                        /* a file, not a directory */
  REJECT(&cpu_box, "--data", "--data", file);
  unlink(file);
}
END_TEST

START_TEST(test_help_lists_every_flag)
{
  static const char *const flags[] = {
    "--device", "--nproc", "--mode", "--model", "--widths", "--norm", "--groups", "--sync-bn",
    "--sync-bn-from-epoch", "--classes", "--image-size", "--batch-size", "--epochs", "--steps",
    "--lr", "--optimizer", "--momentum", "--weight-decay", "--nesterov", "--warmup-steps",
    "--precision", "--data", "--train-size", "--val-size", "--workers", "--seed", "--out",
    "--bucket-mb", "--accum-steps", "--drop-last", "--save-every", "--resume", "--timeout",
    "--log-every", "--timing-warmup", "--timeline", "--stop-after", "--deterministic",
    "--cuda-graph", "--help", "--help-env", "--version", "--progress", "--mask-map",
    "--ignore-label", "--ranks-per-node", "--grad-comm", "--max-image-pixels", "--max-restarts",
    "--overwrite", "--numa-bind", NULL};
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  train_config_t c;
  char err[256];
  char *argv[] = {"train", "--help", NULL};
  ck_assert_int_eq(train_config_parse(&c, 2, argv, &cpu_box, f, err, sizeof err), 1);
  fclose(f);
  for (int i = 0; flags[i]; i++) {
    /* The flag at the start of a help line, followed by its value or description. */
    char pat[64];
    snprintf(pat, sizeof pat, "  %s ", flags[i]);
    ck_assert_msg(strstr(buf, pat) != NULL, "--help does not list %s", flags[i]);
  }
  /* Every line with a flag says its default (or is --help itself / a flag without one). */
  int lines = 0, with_default = 0;
  for (char *p = buf; (p = strstr(p, "\n  --")) != NULL; p++) {
    lines++;
    char *next = strstr(p + 1, "\n  --");
    char *d = strstr(p, "default");
    if (d && (!next || d < next)) with_default++;
  }
  ck_assert_int_ge(lines, 33);
  ck_assert_int_ge(with_default, lines - 3); /* --resume, --help and --version have none */
  free(buf);
}
END_TEST

static void touch(const char *dir, const char *name)
{
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  int fd = open(p, O_CREAT | O_WRONLY, 0600);
  ck_assert_int_ge(fd, 0);
  close(fd);
}

/* An MPI launcher's world size is read as shm/env.c reads numbers: plain digits, exact; any
 * other value is refused, named, before anything starts. */
START_TEST(test_mpi_launcher_env)
{
  static const struct {
    const char *value;
    int ranks; /* -1: refused */
  } cases[] = {{"4", 4},     {"0x10", -1}, {" 4", -1}, {"4x", -1}, {"+4", -1},
               {"4.0", -1}, {"99999999999999999999", -1}, {"2147483648", -1}};
  unsetenv("PMI_SIZE");
  unsetenv("PMIX_SIZE");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    setenv("OMPI_COMM_WORLD_SIZE", cases[i].value, 1);
    train_machine_t m;
    train_machine_probe(&m);
    m.mpi_built = 1;
    if (cases[i].ranks > 0) {
      ck_assert_int_eq(m.mpi_ranks, cases[i].ranks);
      ck_assert_str_eq(m.mpi_bad, "");
      continue;
    }
    ck_assert_int_eq(m.mpi_ranks, 0);
    char want[96];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_SIZE=%s: an MPI launcher's", cases[i].value);
    REJECT(&m, want, "--device", "cpu");
  }
  unsetenv("OMPI_COMM_WORLD_SIZE");
}
END_TEST

START_TEST(test_count_gpus)
{
  char proc[] = "/tmp/check_cli_proc_XXXXXX", dev[] = "/tmp/check_cli_dev_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(proc));
  ck_assert_ptr_nonnull(mkdtemp(dev));
  ck_assert_int_eq(train_count_gpus(proc, dev, NULL), 0);
  /* /dev nodes: nvidia0..2 count, nvidiactl and nvidia-uvm do not. */
  touch(dev, "nvidia0");
  touch(dev, "nvidia1");
  touch(dev, "nvidia2");
  touch(dev, "nvidiactl");
  touch(dev, "nvidia-uvm");
  ck_assert_int_eq(train_count_gpus(proc, dev, NULL), 3);
  ck_assert_int_eq(train_count_gpus("/nonexistent", dev, NULL), 3);
  /* The driver's list wins when present. */
  touch(proc, "0000:17:00.0");
  touch(proc, "0000:65:00.0");
  ck_assert_int_eq(train_count_gpus(proc, dev, NULL), 2);
  /* CUDA_VISIBLE_DEVICES. */
  ck_assert_int_eq(train_count_gpus(proc, dev, ""), 0);
  ck_assert_int_eq(train_count_gpus(proc, dev, "1"), 1);
  ck_assert_int_eq(train_count_gpus(proc, dev, "1,0"), 2);
  ck_assert_int_eq(train_count_gpus(proc, dev, "0,7,1"), 1); /* stops at the invalid entry */
  ck_assert_int_eq(train_count_gpus(proc, dev, "-1"), 0);
  ck_assert_int_eq(train_count_gpus(proc, dev, "GPU-8a3b,GPU-77c1"), 2);
  ck_assert_int_eq(train_count_gpus(proc, dev, "0,1,0,1"), 2); /* never more than exist */
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s %s", proc, dev);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *cli_suite(const suite_env_t *env)
{
  Suite *s = suite_create("cli");
  SUITE_CASE(s, "defaults", test_defaults_cpu, test_defaults_gpu, test_help_lists_every_flag);
  SUITE_CASE(s, "validation", test_values_accepted, test_bad_values, test_bad_combinations);
  SUITE_CASE(s, "machine", test_count_gpus, test_mpi_launcher_env);
  return s;
}

SUITE_MAIN("check_cli", cli_suite, SUITE_CPU_ONLY)
