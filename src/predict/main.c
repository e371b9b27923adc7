/* main.c — shmddp-predict: a training checkpoint + a folder of PNG images -> PNG masks (and
 * colour overlays, and raw scores), on the CPU or a GPU, batch-wise; or the checkpoint's weights
 * exported to safetensors for PyTorch. Everything is checked before any work: the checkpoint
 * (every CRC), the folders and the output names, every image, the device. Exit status 2: bad
 * flags or files, nothing was done. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build_version.h"
#include "src/device/device.h"
#include "src/predict/predict.h"
#include "src/predict/weights.h"
#include "src/train/machine.h"

static void usage(FILE *f)
{
  fprintf(f,
          "usage: shmddp-predict --checkpoint FILE --images DIR --out DIR [options]\n"
          "       shmddp-predict --checkpoint FILE --export FILE.safetensors\n"
          "The network a shmddp-train checkpoint holds, on a folder of PNG images: per image\n"
          "NAME.png a mask NAME.png in --out (the predicted class of every pixel), and\n"
          "NAME.overlay.png (the classes' colours blended into the image).\n\n"
          "  --checkpoint FILE   a checkpoint of shmddp-train (--save-every, --stop-after)\n"
          "  --images DIR        the *.png images (any size; RGB, gray or palette)\n"
          "  --out DIR           where the outputs go (created if missing); not the --images\n"
          "                      folder, and a file there under an output name is never\n"
          "                      replaced: the run refuses before any work\n"
          "  --device cpu|cuda   default: cuda where a GPU is visible and the build has CUDA\n"
          "  --batch-size B      images per batch, 1..32 (of one size); default: 8\n"
          "  --overlay on|off    the colour overlays; default: on\n"
          "  --logits            also NAME.logits: height*width*classes little-endian f32\n"
          "  --export FILE       write the weights as safetensors in PyTorch's names and layouts\n"
          "                      (README: \"Predictions and exported weights\") and stop\n"
          "  --version, --help\n");
}

typedef struct {
  const char *checkpoint, *export_path;
  predict_config_t pc;
} args_t;

static int parse(int argc, char **argv, args_t *a)
{
  static const struct option opts[] = {
      {"checkpoint", required_argument, 0, 'c'}, {"images", required_argument, 0, 'i'},
      {"out", required_argument, 0, 'o'},        {"device", required_argument, 0, 'd'},
      {"batch-size", required_argument, 0, 'b'}, {"overlay", required_argument, 0, 'O'},
      {"logits", no_argument, 0, 'l'},           {"export", required_argument, 0, 'e'},
      {"version", no_argument, 0, 'V'},          {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  int ch, gpus = train_count_gpus("/proc/driver/nvidia/gpus", "/dev", getenv("CUDA_VISIBLE_DEVICES"));
  a->pc = (predict_config_t){.device = dev_gpus_built() && gpus > 0 ? MODEL_DEVICE_CUDA
                                                                    : MODEL_DEVICE_CPU,
                             .batch = 8, .overlay = 1};
  opterr = 0;
  while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    char *end;
    switch (ch) {
    case 'c': a->checkpoint = optarg; break;
    case 'i': a->pc.images = optarg; break;
    case 'o': a->pc.out = optarg; break;
    case 'e': a->export_path = optarg; break;
    case 'l': a->pc.logits = 1; break;
    case 'd':
      if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
        fprintf(stderr, "shmddp-predict: --device: '%s' is not allowed: choose cpu|cuda\n", optarg);
        return 2;
      }
      a->pc.device = strcmp(optarg, "cuda") ? MODEL_DEVICE_CPU : MODEL_DEVICE_CUDA;
      if (a->pc.device == MODEL_DEVICE_CUDA && (!dev_gpus_built() || gpus == 0)) {
        fprintf(stderr, "shmddp-predict: --device cuda: %s; use --device cpu\n",
                dev_gpus_built() ? "no GPU is visible" : "this build has no CUDA backend");
        return 2;
      }
      break;
    case 'b':
      a->pc.batch = (int)strtol(optarg, &end, 10);
      if (*end || end == optarg || a->pc.batch < 1 || a->pc.batch > 32) {
        fprintf(stderr, "shmddp-predict: --batch-size: '%s' is not allowed: give 1 to 32\n", optarg);
        return 2;
      }
      break;
    case 'O':
      if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
        fprintf(stderr, "shmddp-predict: --overlay: '%s' is not allowed: choose on|off\n", optarg);
        return 2;
      }
      a->pc.overlay = strcmp(optarg, "on") == 0;
      break;
    case 'V': printf("shmddp-predict %s\n", SHMDDP_BUILD_VERSION); return 1;
    case 'h': usage(stdout); return 1;
    default:
      fprintf(stderr, "shmddp-predict: %s '%s'; run with --help for the list\n",
              optopt ? "option needs a value:" : "unknown option", argv[optind - 1]);
      return 2;
    }
  }
  const char *missing = !a->checkpoint ? "--checkpoint FILE"
                        : a->export_path ? NULL
                        : !a->pc.images  ? "--images DIR (or --export FILE)"
                        : !a->pc.out     ? "--out DIR"
                                         : NULL;
  if (optind < argc || missing) {
    fprintf(stderr, "shmddp-predict: %s%s; run with --help\n",
            optind < argc ? "unexpected argument " : "missing ", optind < argc ? argv[optind] : missing);
    return 2;
  }
  return 0;
}

/* mkdir DIR (one level) and check it takes files. */
static int out_dir(const char *dir)
{
  struct stat st;
  if (stat(dir, &st) != 0 && mkdir(dir, 0777) != 0) {
    fprintf(stderr, "shmddp-predict: --out: cannot create %s: %s\n", dir, strerror(errno));
    return 2;
  }
  char probe[4096];
  snprintf(probe, sizeof probe, "%s/.write-check-XXXXXX", dir);
  int fd = mkstemp(probe);
  if (fd < 0) {
    fprintf(stderr, "shmddp-predict: --out: cannot write in %s: %s\n", dir, strerror(errno));
    return 2;
  }
  close(fd);
  unlink(probe);
  return 0;
}

int main(int argc, char **argv)
{
  args_t a = {0};
  int rc = parse(argc, argv, &a);
  if (rc) return rc == 1 ? 0 : rc;
  char err[1024];
  weights_t *w;
  if (weights_open(&w, a.checkpoint, err, sizeof err) != 0) {
    fprintf(stderr, "shmddp-predict: --checkpoint: %s\n", err);
    return 2;
  }
  if (a.export_path) {
    rc = weights_export(w, a.export_path, err, sizeof err);
    if (rc == 0) printf("shmddp-predict: wrote %s\n", a.export_path);
  } else {
    char **names;
    size_t n;
    if (predict_list(a.pc.images, &names, &n, err, sizeof err) != 0 ||
        predict_check(&a.pc, names, n, err, sizeof err) != 0) {
      fprintf(stderr, "shmddp-predict: %s\n", err);
      predict_free_list(names, n);
      weights_close(w);
      return 2;
    }
    if ((rc = out_dir(a.pc.out)) == 0)
      rc = predict_run(w, &a.pc, names, n, stdout, err, sizeof err);
    predict_free_list(names, n);
    if (rc == 2) {
      weights_close(w);
      return rc;
    }
  }
  if (rc != 0) fprintf(stderr, "shmddp-predict: %s\n", err);
  weights_close(w);
  return rc != 0;
}
