/* torch_check.c — writes one training step of the model in a simple binary format, so
 * dev/torch_crosscheck.py can rebuild the same U-Net in PyTorch and compare the loss and every
 * gradient. Format (all little-endian, in --out DIR):
 *   meta.txt     "config key=value ..." then one line per parameter tensor:
 *                "tensor NAME OFFSET COUNT SHAPE" (SHAPE as the model stores it, e.g. 64x3x3x3 =
 *                [cout][kh][kw][cin]; transposed conv cinx2x2xcout; 1x1 coutxcin), then "loss L"
 *   params.bin   the flat f32 weights before the step (offsets above)
 *   grads.bin    the flat f32 gradients of the mean per-pixel cross-entropy
 *   x.bin        the batch, f32 NHWC;  y.bin: the labels, i32 NHW */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef HAVE_CUDNN
#include <cuda_runtime_api.h>
#endif

#include "src/model/unet.h"
#include "src/obs/outfile.h"

/* Files are written as the trainer writes its own (src/obs/outfile.h): a fresh private file
 * renamed into place, never through a link someone planted under the name. */
static FILE *open_out(const char *dir, const char *name, char *path, size_t pathlen, char *tmp,
                      size_t tmplen)
{
  snprintf(path, pathlen, "%s/%s", dir, name);
  FILE *f = outfile_fopen_temp(path, tmp, tmplen);
  if (!f) fprintf(stderr, "torch_check: cannot create a file beside %s: %s\n", path, strerror(errno));
  return f;
}

static int close_out(FILE *f, const char *path, const char *tmp)
{
  if (outfile_commit(f, tmp, path, 1) == 0) return 0;
  fprintf(stderr, "torch_check: cannot write %s: %s\n", path, strerror(errno));
  return -1;
}

static int dump(const char *dir, const char *name, const void *p, size_t bytes)
{
  char path[1200], tmp[1300];
  FILE *f = open_out(dir, name, path, sizeof path, tmp, sizeof tmp);
  if (!f) return -1;
  if (fwrite(p, 1, bytes, f) != bytes) {
    fprintf(stderr, "torch_check: cannot write %s\n", path);
    fclose(f);
    unlink(tmp);
    return -1;
  }
  return close_out(f, path, tmp);
}

/* A copy between this program's host memory and the model's, which is on the GPU with cuda. */
enum { TO_MODEL, FROM_MODEL };
static int copy(int cuda, int way, void *dst, const void *src, size_t bytes)
{
  if (!cuda) {
    memcpy(dst, src, bytes);
    return 0;
  }
#ifdef HAVE_CUDNN
  enum cudaMemcpyKind kind = way == TO_MODEL ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  return cudaMemcpy(dst, src, bytes, kind) == cudaSuccess ? 0 : -1;
#else
  (void)way;
  return -1;
#endif
}

int main(int argc, char **argv)
{
  model_config_t mc;
  model_config_default(&mc);
  const char *out = "torch_check", *widths = "16,32,64";
  int batch = 2, cuda = 0;
  static const struct option opts[] = {
    {"device", required_argument, 0, 'd'}, {"precision", required_argument, 0, 'p'},
    {"widths", required_argument, 0, 'w'}, {"size", required_argument, 0, 's'},
    {"batch", required_argument, 0, 'b'}, {"classes", required_argument, 0, 'k'},
    {"norm", required_argument, 0, 'n'}, {"out", required_argument, 0, 'o'},
    {"seed", required_argument, 0, 'r'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (ch) {
    case 'd': cuda = strcmp(optarg, "cuda") == 0; break;
    case 'p':
      mc.precision = strcmp(optarg, "bf16") == 0 ? MODEL_BF16 : strcmp(optarg, "fp16") == 0 ? MODEL_FP16 : MODEL_FP32;
      break;
    case 'w': widths = optarg; break;
    case 's': mc.height = mc.width = atoi(optarg); break;
    case 'b': batch = atoi(optarg); break;
    case 'k': mc.classes = atoi(optarg); break;
    case 'n': mc.norm = strcmp(optarg, "group") == 0 ? MODEL_NORM_GROUP : MODEL_NORM_BATCH; break;
    case 'o': out = optarg; break;
    case 'r': mc.seed = strtoull(optarg, NULL, 10); break;
    default:
      printf("usage: torch_check [--device cpu|cuda] [--precision fp32|bf16|fp16] [--widths LIST]\n"
             "  [--size S] [--batch B] [--classes K] [--norm batch|group] [--seed N] [--out DIR]\n");
      return ch == 'h' ? 0 : 2;
    }
  }
  mc.levels = 0;
  for (char *w = strdup(widths), *tok = strtok(w, ","); tok && mc.levels < MODEL_MAX_LEVELS;
       tok = strtok(NULL, ","))
    mc.widths[mc.levels++] = atoi(tok);
  mc.max_batch = batch;
  mc.device = cuda ? MODEL_DEVICE_CUDA : MODEL_DEVICE_CPU;
  mc.cuda_device = 0;
  char err[512];
  model_t *m;
  if (model_create(&m, &mc, err, sizeof err) != 0) {
    fprintf(stderr, "torch_check: %s\n", err);
    return 2;
  }
  size_t np = model_flat_size(m), px = (size_t)batch * mc.height * mc.width;
  float *x = malloc(px * 3 * sizeof *x), *p = malloc(np * sizeof *p), *g = malloc(np * sizeof *g);
  int32_t *y = malloc(px * sizeof *y);
  unsigned st = 12345u + (unsigned)mc.seed;
  for (size_t i = 0; i < px * 3; i++) {
    st = st * 1103515245u + 12345u;
    x[i] = (float)((st >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  for (size_t i = 0; i < px; i++) {
    size_t q = i % ((size_t)mc.height * mc.width), row = q / mc.width, col = q % mc.width;
    y[i] = (int32_t)((row / 5 + col / 7 + i / ((size_t)mc.height * mc.width)) % (size_t)mc.classes);
  }
  void *xd = x, *yd = y;
#ifdef HAVE_CUDNN
  if (cuda && (cudaMalloc(&xd, px * 3 * sizeof *x) != cudaSuccess ||
               cudaMalloc(&yd, px * sizeof *y) != cudaSuccess)) {
    fprintf(stderr, "torch_check: cudaMalloc failed\n");
    return 1;
  }
#endif
  float loss = 0;
  if (copy(cuda, TO_MODEL, xd, x, px * 3 * sizeof *x) ||
      copy(cuda, TO_MODEL, yd, y, px * sizeof *y) ||
      copy(cuda, FROM_MODEL, p, model_params(m), np * sizeof *p) ||
      model_train_step(m, xd, yd, batch, 1.0f, 0, NULL, &loss, err, sizeof err) != 0 ||
      copy(cuda, FROM_MODEL, g, model_grads(m), np * sizeof *g)) {
    fprintf(stderr, "torch_check: %s\n", err[0] ? err : "copy failed");
    return 1;
  }
  if (mkdir(out, 0700) != 0 && errno != EEXIST) {
    fprintf(stderr, "torch_check: cannot make %s: %s\n", out, strerror(errno));
    return 1;
  }
  char path[1200], tmp[1300];
  FILE *f = open_out(out, "meta.txt", path, sizeof path, tmp, sizeof tmp);
  if (!f) return 1;
  fprintf(f, "config widths=%s size=%d batch=%d classes=%d norm=%s groups=%d precision=%s device=%s\n",
          widths, mc.height, batch, mc.classes, mc.norm == MODEL_NORM_GROUP ? "group" : "batch",
          mc.groups, mc.precision == MODEL_BF16 ? "bf16" : mc.precision == MODEL_FP16 ? "fp16" : "fp32",
          cuda ? "cuda" : "cpu");
  for (int t = 0; t < unet_num_tensors(m); t++) {
    const layer_param_t *lp = unet_tensor(m, t);
    fprintf(f, "tensor %s %zu %zu %s\n", lp->name, lp->offset, lp->count, lp->shape);
  }
  fprintf(f, "loss %.9g\n", (double)loss);
  if (close_out(f, path, tmp) != 0) return 1;
  int rc = dump(out, "params.bin", p, np * sizeof *p) || dump(out, "grads.bin", g, np * sizeof *g) ||
           dump(out, "x.bin", x, px * 3 * sizeof *x) || dump(out, "y.bin", y, px * sizeof *y);
  printf("torch_check: %s step written to %s (loss %.6f, %zu parameters)\n",
         cuda ? "cuda" : "cpu", out, (double)loss, model_num_params(m));
  model_destroy(m);
  return rc ? 1 : 0;
}
