/* check_ops_module.c — the CUDA ops module and its loader (src/device/ops_module.c): where a
 * program looks for it (relative to itself: the build tree, then the installed prefix), the
 * messages for a module that cannot be used (not a module, a library it needs missing, another
 * build's, a file that is no shared object), and, in a build with the module, that a process
 * maps cuBLAS, cuBLASLt and cuDNN only once the module is loaded (/proc/self/maps), never for a
 * CPU ops table. No GPU is needed: loading touches none. The broken modules are stand-ins built
 * by tests/local.mk (tests/fake_ops/). */
#include "config.h"

#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build_version.h"
#include "src/device/device.h"
#include "src/device/ops_module.h"
#include "tests/suite_main.h"

typedef struct {
  const char *from, *to, *want; /* want NULL: refused */
} relpath_case_t;

START_TEST(relpath_between_directories)
{
  static const relpath_case_t cases[] = {
      {.from = "/usr/bin", .to = "/usr/lib/shmddp", .want = "../lib/shmddp"},
      {.from = "/usr/local/bin", .to = "/usr/local/lib/x86_64-linux-gnu/shmddp",
       .want = "../lib/x86_64-linux-gnu/shmddp"},
      {.from = "/opt/s/bin", .to = "/usr/lib64/shmddp", .want = "../../../usr/lib64/shmddp"},
      {.from = "/a/b", .to = "/a/b", .want = "."},
      {.from = "/a/b/", .to = "/a/b/c/", .want = "c"},
      {.from = "/a/b", .to = "/a/bc", .want = "../bc"},
      {.from = "/a/bc", .to = "/a/b", .want = "../b"},
      {.from = "/", .to = "/lib", .want = "lib"},
      {.from = "/x/y", .to = "/", .want = "../.."},
      {.from = "bin", .to = "/usr/lib", .want = NULL},
      {.from = "/usr/bin", .to = "lib/shmddp", .want = NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char buf[256] = "unset";
    int rc = ops_module_relpath(cases[i].from, cases[i].to, buf, sizeof buf);
    if (!cases[i].want)
      ck_assert_msg(rc == -1, "%s -> %s: accepted as %s", cases[i].from, cases[i].to, buf);
    else
      ck_assert_msg(rc == 0 && strcmp(buf, cases[i].want) == 0, "%s -> %s: rc %d, '%s' (want '%s')",
                    cases[i].from, cases[i].to, rc, buf, cases[i].want);
  }
  char small[8];
  ck_assert_int_eq(ops_module_relpath("/usr/bin", "/usr/lib/shmddp", small, sizeof small), -1);
  ck_assert_int_eq(ops_module_relpath("/a/b", "/a/b", small, 1), -1);
}
END_TEST

START_TEST(candidates_build_tree_then_prefix)
{
  char paths[4][OPS_MODULE_PATH_MAX];
  int n = ops_module_candidates("/home/u/shmddp", "/usr/local/bin", "/usr/local/lib/shmddp", paths,
                                4);
  ck_assert_int_eq(n, 4);
  ck_assert_str_eq(paths[0], "/home/u/shmddp/kernels/.libs/shmddp-ops-cuda.so");
  ck_assert_str_eq(paths[1], "/home/u/shmddp/../kernels/.libs/shmddp-ops-cuda.so");
  ck_assert_str_eq(paths[2], "/home/u/shmddp/../lib/shmddp/shmddp-ops-cuda.so");
  ck_assert_str_eq(paths[3], "/usr/local/lib/shmddp/shmddp-ops-cuda.so");
  /* staged under DESTDIR: the program finds the staged module, not the final prefix's */
  n = ops_module_candidates("/tmp/stage/opt/s/bin", "/opt/s/bin", "/opt/s/lib64/shmddp", paths,
                            4);
  ck_assert_int_eq(n, 4);
  ck_assert_str_eq(paths[2], "/tmp/stage/opt/s/bin/../lib64/shmddp/shmddp-ops-cuda.so");
  ck_assert_int_eq(ops_module_candidates("/p", "/usr/bin", "/usr/lib/shmddp", paths, 1), 1);
}
END_TEST

/* A stand-in of tests/fake_ops/, as an absolute path. */
static void fake(const char *name, char *path, size_t len)
{
  const char *top = getenv("top_builddir");
  char rel[PATH_MAX];
  snprintf(rel, sizeof rel, "%s/tests/fake_ops/%s", top && top[0] ? top : ".", name);
  char *abs = realpath(rel, NULL);
  ck_assert_msg(abs != NULL, "%s is missing (tests/local.mk builds it)", rel);
  snprintf(path, len, "%s", abs);
  free(abs);
}

START_TEST(missing_library_names_it_and_what_to_install)
{
  char path[PATH_MAX], err[2048];
  fake("needs-missing.so", path, sizeof path);
  void *h = (void *)1;
  const ops_cuda_module_t *t = (void *)1;
  ck_assert_int_eq(ops_module_open(path, SHMDDP_BUILD_VERSION, &h, &t, err, sizeof err), -1);
  ck_assert_ptr_null(h);
  ck_assert_ptr_null(t);
  ck_assert_msg(strstr(err, "GPU runs need cuDNN, and libcudnn.so.999 is not found") &&
                    strstr(err, path) && strstr(err, "install cuDNN") &&
                    strstr(err, "dynamic linker") && strstr(err, "--device cpu"),
                "%s", err);
}
END_TEST

START_TEST(another_build_is_refused)
{
  char path[PATH_MAX], err[2048];
  fake("other-build.so", path, sizeof path);
  void *h;
  const ops_cuda_module_t *t;
  ck_assert_int_eq(ops_module_open(path, SHMDDP_BUILD_VERSION, &h, &t, err, sizeof err), -1);
  char want[512];
  snprintf(want, sizeof want, "is of shmddp 0.0.0 (another build), this program of shmddp %s",
           SHMDDP_BUILD_VERSION);
  ck_assert_msg(strstr(err, want) && strstr(err, "make install"), "%s", err);
  /* the same file is taken by a program of that build */
  ck_assert_msg(ops_module_open(path, "0.0.0 (another build)", &h, &t, err, sizeof err) == 0, "%s",
                err);
  ck_assert_ptr_nonnull(h);
  ck_assert_str_eq(t->build, "0.0.0 (another build)");
}
END_TEST

START_TEST(not_a_module_is_refused)
{
  char err[2048];
  void *h;
  const ops_cuda_module_t *t;
  /* a shared object without the entry point */
  ck_assert_int_eq(ops_module_open("libm.so.6", SHMDDP_BUILD_VERSION, &h, &t, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "libm.so.6 is not a shmddp CUDA ops module"), "%s", err);
  /* a file that is no shared object */
  char path[] = "/tmp/check_ops_module_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, "not ELF\n", 8), 8);
  close(fd);
  int rc = ops_module_open(path, SHMDDP_BUILD_VERSION, &h, &t, err, sizeof err);
  unlink(path);
  ck_assert_int_eq(rc, -1);
  ck_assert_msg(strstr(err, "cannot load the CUDA ops module") && strstr(err, path) &&
                    strstr(err, "reinstall shmddp"),
                "%s", err);
}
END_TEST

/* Whether a file whose name contains lib is mapped into this process. */
static int mapped(const char *lib)
{
  FILE *f = fopen("/proc/self/maps", "r");
  ck_assert_ptr_nonnull(f);
  char line[8192];
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, lib) != NULL;
  fclose(f);
  return found;
}

START_TEST(cpu_tables_load_no_cuda_math_library)
{
  char err[256];
  ops_t o;
  ck_assert_msg(dev_ops_init(&o, OPS_F32, DEV_HOST, 1, err, sizeof err) == 0, "%s", err);
  o.destroy(&o);
  ck_assert_ptr_null(ops_module_loaded());
  ck_assert(!mapped("libcublasLt"));
  ck_assert(!mapped("libcublas.so"));
  ck_assert(!mapped("libcudnn"));
}
END_TEST

#ifdef HAVE_CUDNN
/* This build's module, from the build tree (this program is one folder below its top). */
START_TEST(module_brings_the_libraries)
{
  ck_assert(!mapped("libcublasLt"));
  ck_assert(!mapped("libcudnn"));
  char info[4400], err[2048];
  ck_assert_msg(dev_gpu_backend_load(info, sizeof info, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(strstr(info, "/kernels/.libs/shmddp-ops-cuda.so (cuDNN ") && strstr(info, "cuBLAS "),
                "%s", info);
  ck_assert(mapped("shmddp-ops-cuda.so"));
  ck_assert(mapped("libcublasLt"));
  ck_assert(mapped("libcublas.so"));
  ck_assert(mapped("libcudnn"));
  ck_assert_ptr_nonnull(ops_module_loaded());
  ck_assert_str_eq(ops_module_loaded()->build, SHMDDP_BUILD_VERSION);
}
END_TEST
#else
START_TEST(no_backend_in_this_build)
{
  char err[256];
  ck_assert_ptr_null(ops_module_get(err, sizeof err));
  ck_assert_msg(strstr(err, "this build has no CUDA backend") && strstr(err, "--device cpu"), "%s",
                err);
  ops_t o;
  ck_assert_int_eq(dev_ops_init(&o, OPS_F32, 0, 1, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "this build has no CUDA backend"), "%s", err);
}
END_TEST
#endif

static Suite *make_ops_module_suite(const suite_env_t *env)
{
  (void)env;
  Suite *s = suite_create("ops_module");
  SUITE_CASE(s, "where", relpath_between_directories, candidates_build_tree_then_prefix);
  SUITE_CASE(s, "refused", missing_library_names_it_and_what_to_install, another_build_is_refused,
             not_a_module_is_refused);
#ifdef HAVE_CUDNN
  SUITE_CASE(s, "loaded", cpu_tables_load_no_cuda_math_library, module_brings_the_libraries);
#else
  SUITE_CASE(s, "loaded", cpu_tables_load_no_cuda_math_library, no_backend_in_this_build);
#endif
  return s;
}

SUITE_MAIN("check_ops_module", make_ops_module_suite, SUITE_CPU_ONLY)
