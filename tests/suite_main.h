/* suite_main.h — the one main() of every Check suite (SUITE_MAIN), its test cases (SUITE_CASE),
 * and how GPU cases get in.
 *
 * A suite's make function receives what the machine has (suite_env_t: the CUDA GPUs visible)
 * and adds a GPU test case only where it can run: suite_gpu_cases() says yes or no and, for no,
 * writes to the log which cases were left out and why. A GPU case is never registered to return
 * early as a pass. A suite that ends up with no test at all, or whose every case needs GPUs
 * (SUITE_MAIN's last argument) on a machine with too few, exits 77, which automake reports as
 * SKIP.
 *
 * GPUs are counted in a forked child (cudaGetDeviceCount), so the suite's own process never
 * initialises CUDA: a CUDA context does not survive the fork of the ranks its tests launch, and
 * Check forks every test. A CPU-only build counts none without touching CUDA.
 *
 * Check's per-test timeouts only bound hangs. A test case that sets none gets Check's default,
 * 4 s, which a loaded machine can exceed; suite_main raises that default to 120 s unless
 * CK_DEFAULT_TIMEOUT is set (CK_TIMEOUT_MULTIPLIER still scales every timeout). */
#ifndef TESTS_SUITE_MAIN_H
#define TESTS_SUITE_MAIN_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* A suite too long to be one test of a parallel `make check` is built as several programs from
 * one source, each with -DSUITE_PART='"name"' (the part it runs; none: the first part); the make
 * function registers the cases of env->part only. */
#ifndef SUITE_PART
#define SUITE_PART ""
#endif

typedef struct {
  const char *name; /* the suite's program, for messages */
  const char *part; /* SUITE_PART: which part of a split suite this program runs ("": the first) */
  int gpus;         /* CUDA GPUs visible (after CUDA_VISIBLE_DEVICES); 0 when not counted */
  char why[200];    /* why there are none, when there are none */
} suite_env_t;

typedef Suite *(*suite_make_fn)(const suite_env_t *env);

/* Whether GPUs were counted at all: suites without GPU cases do not count them. */
enum { SUITE_CPU_ONLY = -1, SUITE_SOME_GPU = 0 };

/* Runs ask in a forked child, so that the suite's process never touches CUDA: the text ask
 * wrote into msg comes back in out (len bytes at most). Returns ask's status (0: yes), or -1
 * with the reason in out when the child could not run or died. */
static inline int suite_ask_child(int (*ask)(char *msg, size_t len), char *out, size_t len)
{
  int fd[2];
  if (pipe(fd) != 0) return snprintf(out, len, "pipe failed"), -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    char msg[256] = "";
    int rc = ask(msg, sizeof msg);
    ssize_t m = write(fd[1], msg, strlen(msg));
    _exit(rc == 0 && m >= 0 ? 0 : 1);
  }
  close(fd[1]);
  ssize_t got = pid > 0 ? read(fd[0], out, len - 1) : -1;
  close(fd[0]);
  out[got > 0 ? got : 0] = 0;
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  if (pid > 0 && WIFEXITED(status)) return WEXITSTATUS(status);
  snprintf(out, len, "%s", pid > 0 ? "the child died" : "fork failed");
  return -1;
}

#ifdef HAVE_CUDA
/* In the child: "COUNT why-none". */
static inline int suite_gpu_count_child(char *msg, size_t len)
{
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  snprintf(msg, len, "%d %s", e == cudaSuccess ? count : 0,
           e == cudaSuccess ? "no CUDA device" : cudaGetErrorString(e));
  return 0;
}
#endif

/* Counts the visible GPUs in a child process. */
static inline int suite_count_gpus(char *why, size_t len)
{
#ifndef HAVE_CUDA
  snprintf(why, len, "a build without CUDA");
  return 0;
#else
  char buf[200];
  int count = 0, off = 0;
  if (suite_ask_child(suite_gpu_count_child, buf, sizeof buf) != 0 ||
      sscanf(buf, "%d %n", &count, &off) < 1)
    return snprintf(why, len, "the GPU probe failed"), 0;
  snprintf(why, len, "%s", buf + off);
  return count;
#endif
}

/* Whether this build has the trainer's GPU operations (cuDNN): `built` for their cases below. */
#ifdef HAVE_CUDNN
#define SUITE_BUILT_CUDNN 1
#else
#define SUITE_BUILT_CUDNN 0
#endif

/* Whether cases that need `needed` GPUs and were compiled in (`built`) can run here. When not,
 * prints that `what` was not registered, and why. */
static inline int suite_gpu_cases(const suite_env_t *env, int needed, int built, const char *what)
{
  if (!built) {
    printf("%s: not registered (SKIP): %s: not in this build (no CUDA, or no cuDNN)\n",
           env->name, what);
    return 0;
  }
  if (env->gpus < needed) {
    printf("%s: not registered (SKIP): %s: needs %d GPU%s, %d visible%s%s\n", env->name, what,
           needed, needed == 1 ? "" : "s", env->gpus, env->gpus ? "" : ": ",
           env->gpus ? "" : env->why);
    return 0;
  }
  return 1;
}

/* A test case named name with the tests listed (in that order), added to s. Returns the case,
 * for its fixtures, timeout and loop tests (which Check applies whenever they are set). START_TEST
 * names a TTest since Check 0.13, which configure asks for. */
#define SUITE_CASE(s, name, ...)                                                              \
  suite_add_case((s), (name), (const TTest *const[]){__VA_ARGS__, NULL})

static inline TCase *suite_add_case(Suite *s, const char *name, const TTest *const *tests)
{
  TCase *tc = tcase_create(name);
  for (; *tests; tests++) tcase_add_test(tc, *tests);
  suite_add_tcase(s, tc);
  return tc;
}

/* gpus_needed: SUITE_CPU_ONLY (no GPU cases; GPUs are not counted), SUITE_SOME_GPU (some cases
 * need GPUs: the make function decides), or n > 0 (every case needs n GPUs: exit 77 with fewer). */
static inline int suite_main(const char *name, suite_make_fn make, int gpus_needed)
{
  suite_env_t env;
  memset(&env, 0, sizeof env);
  env.name = name;
  env.part = SUITE_PART;
  setenv("CK_DEFAULT_TIMEOUT", "120", 0);
  if (gpus_needed != SUITE_CPU_ONLY) {
    env.gpus = suite_count_gpus(env.why, sizeof env.why);
    if (env.gpus > 0) printf("%s: %d GPU%s visible\n", name, env.gpus, env.gpus == 1 ? "" : "s");
  }
  if (gpus_needed > 0 && env.gpus < gpus_needed) {
    printf("%s: SKIP: needs %d GPU%s, %d visible%s%s\n", name, gpus_needed,
           gpus_needed == 1 ? "" : "s", env.gpus, env.gpus ? "" : ": ", env.gpus ? "" : env.why);
    return 77;
  }
  SRunner *sr = srunner_create(make(&env));
  srunner_run_all(sr, CK_NORMAL);
  int ran = srunner_ntests_run(sr), failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  if (ran == 0) {
    printf("%s: SKIP: no test case can run here\n", name);
    return 77;
  }
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#define SUITE_MAIN(name, make, gpus_needed)                                                   \
  int main(void) { return suite_main(name, make, gpus_needed); }

#endif
