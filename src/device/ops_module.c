/* ops_module.c — loads the CUDA ops module (shmddp-ops-cuda.so: the CUDA backend of the ops
 * table, kernels/ops_cuda_module.h) the first time a GPU needs it.
 *
 * Why a module loaded on first use: a program that links cuBLAS pays for cuBLASLt's initialisation
 * at start, before main: dlopen of libcublasLt.so.13 alone takes 0.67-0.70 s of a 2-core machine
 * (its static initialisers build ~200 MB of tables: half the time in its own code, the rest page
 * faults), cuBLAS 10 ms more, cuDNN 8-12 ms, the CUDA runtime 10 ms, the dynamic linker's
 * relocations of every library ~25 ms. So `--version` took 0.8 s, and so did the start of every CPU
 * run. Only the math libraries move out: the CUDA runtime stays linked (the collectives and the
 * device interface need it; it loads in 10 ms and does no work until its first use). One module
 * built from the backend's own code (linked against cuBLAS and cuDNN by the linker, one entry
 * point) rather than dlopen of each library and dlsym of the 45 functions the backend calls: the
 * backend keeps compiling against the real headers, and a missing symbol is found at link time.
 * dlopen with RTLD_NOW: a library missing or too old is reported when the module is loaded, which
 * the programs do before any work (dev_gpu_backend_load), not in the middle of a step. The module
 * touches no GPU while it loads, so the launcher may load it before it forks the ranks, which then
 * share the loaded copy. dev_gpu_backend_load (device.h) is here too, so the doctor can report the
 * module without linking the rest of src/device/. */
#include "config.h"

#include "src/device/ops_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build_version.h"
#include "src/check.h"
#include "src/device/device.h"
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h> /* CUDART_VERSION: the CUDA the libraries must be for */
#endif

int ops_module_relpath(const char *from, const char *to, char *buf, size_t len)
{
  if (from[0] != '/' || to[0] != '/' || len == 0) return -1;
  /* The common leading components, then ".." for each of from's others and to's others. */
  size_t common = 0, i = 0;
  for (;; i++) {
    char a = from[i], b = to[i];
    if ((a == '/' || a == 0) && (b == '/' || b == 0)) common = i;
    if (a != b || a == 0) break;
  }
  size_t n = 0;
  buf[0] = 0;
  for (const char *p = from + common; *p;) {
    while (*p == '/') p++;
    if (!*p) break;
    int w = snprintf(buf + n, len - n, "%s..", n ? "/" : "");
    if (w < 0 || (size_t)w >= len - n) return -1;
    n += (size_t)w;
    while (*p && *p != '/') p++;
  }
  const char *rest = to + common;
  while (*rest == '/') rest++;
  size_t rl = strlen(rest);
  while (rl && rest[rl - 1] == '/') rl--;
  int w = rl ? snprintf(buf + n, len - n, "%s%.*s", n ? "/" : "", (int)rl, rest)
             : (n ? 0 : snprintf(buf, len, "."));
  if (w < 0 || (size_t)w >= len - n) return -1;
  return 0;
}

int ops_module_candidates(const char *exe_dir, const char *bindir, const char *pkglibdir,
                          char (*paths)[OPS_MODULE_PATH_MAX], int max)
{
  char rel[OPS_MODULE_PATH_MAX];
  const char *const build_tree[] = {"", "/.."};
  int n = 0;
  for (int i = 0; i < 2 && n < max; i++) {
    int w = snprintf(paths[n], OPS_MODULE_PATH_MAX, "%s%s/kernels/%s/%s", exe_dir, build_tree[i],
                     SHMDDP_LT_OBJDIR, OPS_CUDA_MODULE_FILE);
    if (w > 0 && w < OPS_MODULE_PATH_MAX) n++;
  }
  if (n < max && ops_module_relpath(bindir, pkglibdir, rel, sizeof rel) == 0) {
    int w = snprintf(paths[n], OPS_MODULE_PATH_MAX, "%s/%s/%s", exe_dir, rel, OPS_CUDA_MODULE_FILE);
    if (w > 0 && w < OPS_MODULE_PATH_MAX) n++;
  }
  if (n < max) {
    int w = snprintf(paths[n], OPS_MODULE_PATH_MAX, "%s/%s", pkglibdir, OPS_CUDA_MODULE_FILE);
    if (w > 0 && w < OPS_MODULE_PATH_MAX) n++;
  }
  return n;
}

/* What a user installs for a library the dynamic linker did not find (dlerror's text starts
 * with its name), or NULL for another failure. */
static const char *library_package(const char *why, char *lib, size_t liblen)
{
  const char *colon = strstr(why, ": cannot open shared object file");
  if (!colon || strncmp(why, "lib", 3) != 0) return NULL;
  snprintf(lib, liblen, "%.*s", (int)(colon - why), why);
  if (strncmp(lib, "libcudnn", 8) == 0) return "cuDNN";
  if (strncmp(lib, "libcublas", 9) == 0) return "cuBLAS (a part of the CUDA toolkit)";
  if (strncmp(lib, "libcudart", 9) == 0) return "the CUDA runtime (a part of the CUDA toolkit)";
  return "the library";
}

int ops_module_open(const char *path, const char *build, void **handle,
                    const ops_cuda_module_t **table, char *err, size_t errlen)
{
  *handle = NULL;
  *table = NULL;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    char lib[256];
    const char *what = library_package(why ? why : "", lib, sizeof lib);
    if (!what)
      return check_fail(err, errlen, "cannot load the CUDA ops module %s: %s; reinstall shmddp "
                        "(make install), or run on the CPU (--device cpu)", path, why ? why : "?");
    int cuda = 0;
#ifdef CUDART_VERSION
    cuda = CUDART_VERSION / 1000;
#endif
    char for_cuda[32] = "";
    if (cuda > 0) snprintf(for_cuda, sizeof for_cuda, " for CUDA %d", cuda);
    return check_fail(err, errlen,
                      "GPU runs need %s, and %s is not found (%s needs it): install %s%s where the "
                      "dynamic linker finds it (ldconfig, or LD_LIBRARY_PATH), or run on the CPU "
                      "(--device cpu)", what, lib, path, what, for_cuda);
  }
  ops_cuda_module_fn entry;
  *(void **)&entry = dlsym(h, OPS_CUDA_MODULE_ENTRY);
  const ops_cuda_module_t *t = entry ? entry() : NULL;
  if (!t) {
    dlclose(h);
    return check_fail(err, errlen, "%s is not a shmddp CUDA ops module (no %s): reinstall "
                      "shmddp (make install), or in the build tree run make", path,
                      OPS_CUDA_MODULE_ENTRY);
  }
  if (!t->build || strcmp(t->build, build) != 0 || t->ops_size != sizeof(ops_t)) {
    char theirs[128];
    snprintf(theirs, sizeof theirs, "%s", t->build ? t->build : "?");
    dlclose(h);
    return check_fail(err, errlen, "the CUDA ops module %s is of shmddp %s, this program of "
                      "shmddp %s: install both from one build (make install), or in the build "
                      "tree run make", path, theirs, build);
  }
  *handle = h;
  *table = t;
  return 0;
}

static struct {
  pthread_mutex_t lock;
  int tried;
  const ops_cuda_module_t *table;
  char path[OPS_MODULE_PATH_MAX];
  char err[2048];
} loaded = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The first candidate that exists is the one: a module there that cannot be loaded is reported,
 * not passed over for another build's. */
static void load(void)
{
#ifndef HAVE_CUDNN
  check_fail(loaded.err, sizeof loaded.err,
             "this build has no CUDA backend (it needs cuDNN): use --device cpu");
#else
  char exe[OPS_MODULE_PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) n = 0;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  char paths[4][OPS_MODULE_PATH_MAX];
  int count = ops_module_candidates(exe, SHMDDP_BINDIR, SHMDDP_PKGLIBDIR, paths, 4);
  for (int i = 0; i < count; i++) {
    char path[PATH_MAX];
    if (!realpath(paths[i], path)) continue; /* not there */
    void *h;
    if (ops_module_open(path, SHMDDP_BUILD_VERSION, &h, &loaded.table, loaded.err,
                        sizeof loaded.err) == 0)
      snprintf(loaded.path, sizeof loaded.path, "%s", path);
    return;
  }
  int w = snprintf(loaded.err, sizeof loaded.err, "the CUDA ops module %s is not installed "
                   "(looked for", OPS_CUDA_MODULE_FILE);
  for (int i = 0; i < count && w > 0 && (size_t)w < sizeof loaded.err; i++)
    w += snprintf(loaded.err + w, sizeof loaded.err - (size_t)w, "%s %s", i ? "," : "", paths[i]);
  if (w > 0 && (size_t)w < sizeof loaded.err)
    snprintf(loaded.err + w, sizeof loaded.err - (size_t)w,
             "): GPU runs need it; reinstall shmddp (make install), or in the build tree run "
             "make, or run on the CPU (--device cpu)");
#endif
}

const ops_cuda_module_t *ops_module_get(char *err, size_t errlen)
{
  pthread_mutex_lock(&loaded.lock);
  if (!loaded.tried) {
    loaded.tried = 1;
    load();
  }
  const ops_cuda_module_t *t = loaded.table;
  if (!t) check_fail(err, errlen, "%s", loaded.err);
  pthread_mutex_unlock(&loaded.lock);
  return t;
}

const ops_cuda_module_t *ops_module_loaded(void)
{
  pthread_mutex_lock(&loaded.lock);
  const ops_cuda_module_t *t = loaded.table;
  pthread_mutex_unlock(&loaded.lock);
  return t;
}

const char *ops_module_path(void) { return loaded.path; }

int dev_gpu_backend_load(char *info, size_t infolen, char *err, size_t errlen)
{
  const ops_cuda_module_t *m = ops_module_get(err, errlen);
  if (!m) return -1;
  if (info && infolen) {
    long dnn = 0, blas = 0;
    m->library_versions(&dnn, &blas);
    snprintf(info, infolen, "%s (cuDNN %ld.%ld.%ld, cuBLAS %ld.%ld.%ld)", ops_module_path(),
             dnn / 10000, dnn / 100 % 100, dnn % 100, blas / 10000, blas / 100 % 100, blas % 100);
  }
  return 0;
}
