/* main.c — shmddp-predict: a training checkpoint + a folder of PNG images -> PNG masks (and
 * colour overlays, and raw scores), on the CPU or a GPU, batch-wise; or the checkpoint's weights
 * exported to safetensors for PyTorch. Everything is checked before any work: the checkpoint
 * (every CRC), the folders and the output names, the device, every image (decoded whole).
 * Exit status 2: bad flags or files, nothing was done; 1: a failure on the way, or --keep-going
 * skipped images. */
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
#include "src/app/machine.h"

static void usage(FILE *f)
{
  fprintf(f,
          "usage: shmddp-predict --checkpoint FILE --images DIR --out DIR [options]\n"
          "       shmddp-predict --checkpoint FILE --export FILE.safetensors\n"
          "The network a shmddp-train checkpoint holds, on a folder of PNG images: per image\n"
          "NAME.png a mask NAME.png in --out (the predicted class of every pixel, in the values\n"
          "the training masks held: with --mask-map 255:1, class 1 is 255), and\n"
          "NAME.overlay.png (the classes' colours blended into the image). Every image is read\n"
          "before anything is written: one that cannot be is named, and nothing is written.\n\n"
          "  --checkpoint FILE   a checkpoint of shmddp-train (--save-every, --stop-after)\n"
          "  --images DIR        the *.png images (any size; RGB, gray or palette)\n"
          "  --out DIR           where the outputs go (created if missing); not the --images\n"
          "                      folder, and a file there under an output name is never\n"
          "                      replaced: the run refuses before any work\n"
          "  --device cpu|cuda   default: cuda where a GPU is visible and the build has CUDA\n"
          "                      (cuda first loads the CUDA ops module: cuBLAS, cuDNN)\n"
          "  --batch-size B      images per batch, 1..32 (of one size); default: 8\n"
          "  --overlay on|off    the colour overlays; default: on\n"
          "  --logits            also NAME.logits: height*width*classes little-endian f32\n"
          "  --class-ids         masks hold the class ids 0..K-1 instead of the mask values\n"
          "  --keep-going        skip the images that cannot be read, list them at the end and\n"
          "                      exit 1, instead of writing nothing\n"
          "  --export FILE       write the weights as safetensors in PyTorch's names and layouts\n"
          "                      (README: \"Predictions and exported weights\") and stop\n"
          "  --version, --help\n");
}

typedef struct {
  const char *checkpoint, *export_path;
  predict_config_t pc;
  int keep_going;
} args_t;

static int parse(int argc, char **argv, args_t *a)
{
  static const struct option opts[] = {
      {"checkpoint", required_argument, 0, 'c'}, {"images", required_argument, 0, 'i'},
      {"out", required_argument, 0, 'o'},        {"device", required_argument, 0, 'd'},
      {"batch-size", required_argument, 0, 'b'}, {"overlay", required_argument, 0, 'O'},
      {"logits", no_argument, 0, 'l'},           {"export", required_argument, 0, 'e'},
      {"class-ids", no_argument, 0, 'I'},        {"keep-going", no_argument, 0, 'k'},
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
    case 'I': a->pc.class_ids = 1; break;
    case 'k': a->keep_going = 1; break;
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

/* "a.png (why), b.png (why)" of bad[from..n): at most `most` of them, then how many more. */
static void list_bad(FILE *f, const predict_bad_t *bad, size_t from, size_t n, size_t most)
{
  for (size_t i = from; i < n && i < from + most; i++)
    fprintf(f, "%s%s (%s)", i > from ? ", " : "", bad[i].name, bad[i].why);
  if (n > from + most) fprintf(f, " and %zu more", n - from - most);
}

/* The images of a->pc.images, every one read before anything is written; the exit status. */
static int predict_images(const weights_t *w, const args_t *a)
{
  char err[1024], **names;
  size_t n, nbad = 0, ngood = 0;
  if (predict_list(a->pc.images, &names, &n, err, sizeof err) != 0) {
    fprintf(stderr, "shmddp-predict: --images: %s\n", err);
    return 2;
  }
  predict_bad_t *bad = calloc(n, sizeof *bad);
  char **good = calloc(n, sizeof *good); /* names[] minus the bad ones (not owned) */
  if (!bad || !good) {
    fprintf(stderr, "shmddp-predict: out of memory for %zu image names\n", n);
    free(bad);
    free(good);
    predict_free_list(names, n);
    return 2;
  }
  predict_check(&a->pc, names, n, bad, &nbad);
  for (size_t i = 0, b = 0; i < n; i++) { /* bad[] is in the names' order */
    if (b < nbad && bad[b].name == names[i]) b++;
    else good[ngood++] = names[i];
  }
  int rc = 0;
  if (nbad > 0 && (!a->keep_going || ngood == 0)) {
    fprintf(stderr, "shmddp-predict: --images: %s/%s cannot be read: %s", a->pc.images,
            bad[0].name, bad[0].why);
    if (nbad > 1) {
      fprintf(stderr, "; %zu more: ", nbad - 1);
      list_bad(stderr, bad, 1, nbad, 3);
    }
    fprintf(stderr, "; nothing was written: replace or remove %s%s\n", nbad == 1 ? "it" : "them",
            ngood == 0 ? "" : ", or give --keep-going to predict the others");
    rc = 2;
  }
  if (rc == 0 && predict_check_outputs(&a->pc, good, ngood, err, sizeof err) != 0) {
    fprintf(stderr, "shmddp-predict: %s\n", err);
    rc = 2;
  }
  if (rc == 0 && a->pc.device == MODEL_DEVICE_CUDA &&
      dev_gpu_backend_load(NULL, 0, err, sizeof err) != 0) {
    fprintf(stderr, "shmddp-predict: --device cuda: %s\n", err);
    rc = 2;
  }
  if (rc == 0) rc = out_dir(a->pc.out);
  if (rc == 0) {
    if (!a->pc.class_ids && w->values_recorded)
      for (int k = 0; k < w->net.classes; k++)
        if (w->class_value[k] != k) {
          printf("shmddp-predict: masks hold the values the training masks held (class %d is "
                 "%d); --class-ids writes the class ids\n", k, w->class_value[k]);
          break;
        }
    if (predict_run(w, &a->pc, good, ngood, stdout, err, sizeof err) != 0) {
      fprintf(stderr, "shmddp-predict: %s\n", err);
      rc = 1;
    }
  }
  if (rc == 0 && nbad > 0) {
    fprintf(stderr, "shmddp-predict: --keep-going: skipped %zu image%s that cannot be read: ",
            nbad, nbad == 1 ? "" : "s");
    list_bad(stderr, bad, 0, nbad, nbad);
    fputc('\n', stderr);
    rc = 1;
  }
  free(good);
  free(bad);
  predict_free_list(names, n);
  return rc;
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
    rc = predict_images(w, &a);
    weights_close(w);
    return rc;
  }
  if (rc != 0) fprintf(stderr, "shmddp-predict: %s\n", err);
  weights_close(w);
  return rc != 0;
}
