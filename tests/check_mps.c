/* check_mps.c — the job's private MPS daemon (src/train/mps.c) and the trainer's --mps policy
 * (gpu_share.c), over tests/fake_mps_control, a stand-in for nvidia-cuda-mps-control that
 * behaves as the real one towards us (control pipe in CUDA_MPS_PIPE_DIRECTORY, quit). Every case
 * checks that nothing is left: no process, no folder. */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/train/gpu_share.h"
#include "src/train/mps.h"
#include "tests/suite_main.h"
#include "tests/testutil.h"

typedef struct {
  char base[64];    /* XDG_RUNTIME_DIR: where the daemon's folder goes */
  char side[64];    /* the fake's pid file and command log */
  char fake[PATH_MAX]; /* the fake control program (realpath writes up to PATH_MAX bytes) */
  char pidfile[128], log[128];
} scratch_t;

static void scratch_open(scratch_t *s)
{
  snprintf(s->base, sizeof s->base, "/tmp/check_mps_base_XXXXXX");
  snprintf(s->side, sizeof s->side, "/tmp/check_mps_side_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(s->base));
  ck_assert_ptr_nonnull(mkdtemp(s->side));
  const char *src = getenv("srcdir");
  char rel[1024];
  snprintf(rel, sizeof rel, "%s/tests/fake_mps_control", src && src[0] ? src : ".");
  ck_assert_ptr_nonnull(realpath(rel, s->fake));
  snprintf(s->pidfile, sizeof s->pidfile, "%s/pid", s->side);
  snprintf(s->log, sizeof s->log, "%s/log", s->side);
  setenv("XDG_RUNTIME_DIR", s->base, 1);
  setenv("FAKE_MPS_PIDFILE", s->pidfile, 1);
  setenv("FAKE_MPS_LOG", s->log, 1);
  unsetenv("FAKE_MPS_MODE");
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  unsetenv("CUDA_MPS_LOG_DIRECTORY");
}

static int entries(const char *dir)
{
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}

static pid_t fake_pid(const scratch_t *s)
{
  FILE *f = fopen(s->pidfile, "r");
  if (!f) return 0;
  long pid = 0;
  if (fscanf(f, "%ld", &pid) != 1) pid = 0;
  fclose(f);
  return (pid_t)pid;
}

/* Nothing left: the daemon's folder gone, the daemon (if it ever ran) gone. */
static void assert_nothing_left(const scratch_t *s)
{
  ck_assert_msg(entries(s->base) == 0, "the daemon's folder is left in %s", s->base);
  pid_t pid = fake_pid(s);
  if (pid > 0) ck_assert_msg(kill(pid, 0) != 0 && errno == ESRCH, "daemon %d still runs", pid);
  test_rm_rf(s->base);
  test_rm_rf(s->side);
}

static int file_has(const char *path, const char *needle)
{
  char buf[1024] = "";
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, needle) != NULL;
}

/* Probes run in a child with the daemon's environment. */
static int probe_sees_daemon(void *arg, char *err, size_t errlen)
{
  const mps_daemon_t *d = arg;
  const char *p = getenv("CUDA_MPS_PIPE_DIRECTORY"), *l = getenv("CUDA_MPS_LOG_DIRECTORY");
  char control[256];
  snprintf(control, sizeof control, "%s/control", p ? p : "");
  struct stat st;
  if (!p || strcmp(p, d->pipe_dir) != 0 || !l || strcmp(l, d->log_dir) != 0)
    return snprintf(err, errlen, "environment not set"), -1;
  if (stat(control, &st) != 0 || !S_ISFIFO(st.st_mode))
    return snprintf(err, errlen, "no control pipe"), -1;
  return 0;
}

static int probe_fails(void *arg, char *err, size_t errlen)
{
  (void)arg;
  return snprintf(err, errlen, "probe said no"), -1;
}

static int probe_hangs(void *arg, char *err, size_t errlen)
{
  (void)arg, (void)err, (void)errlen;
  for (;;) pause();
  return -1; /* not reached: the caller's time limit ends it */
}

START_TEST(test_lifecycle)
{
  scratch_t s;
  scratch_open(&s);
  mps_daemon_t d;
  char err[512];
  ck_assert_msg(mps_start(&d, s.fake, 20.0, err, sizeof err) == 0, "%s", err);
  /* A fresh folder under XDG_RUNTIME_DIR, the user's alone. */
  ck_assert_int_eq(strncmp(d.dir, s.base, strlen(s.base)), 0);
  struct stat st;
  ck_assert_int_eq(stat(d.dir, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0700);
  ck_assert_int_eq(st.st_uid, getuid());
  /* The daemon is our child, and ready. */
  ck_assert_int_gt(d.pid, 0);
  ck_assert_int_eq(fake_pid(&s), d.pid);
  ck_assert_int_eq(kill(d.pid, 0), 0);
  /* This process's environment is not touched by start or probe. */
  ck_assert_ptr_null(getenv("CUDA_MPS_PIPE_DIRECTORY"));
  ck_assert_msg(mps_probe(&d, probe_sees_daemon, &d, 20.0, err, sizeof err) == 0, "%s", err);
  ck_assert_ptr_null(getenv("CUDA_MPS_PIPE_DIRECTORY"));
  ck_assert_int_eq(mps_probe(&d, probe_fails, NULL, 20.0, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "probe said no"), "%s", err);
  ck_assert_int_eq(mps_probe(&d, probe_hangs, NULL, 0.3, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "did not answer"), "%s", err);
  ck_assert_int_eq(mps_export(&d), 0);
  ck_assert_str_eq(getenv("CUDA_MPS_PIPE_DIRECTORY"), d.pipe_dir);
  mps_unexport();
  ck_assert_ptr_null(getenv("CUDA_MPS_LOG_DIRECTORY"));
  /* Stopped by quit (the fake logs it), not by a signal (mps_stop would say so). */
  ck_assert_msg(mps_stop(&d, 20.0, err, sizeof err) == 0, "%s", err);
  ck_assert(file_has(s.log, "quit"));
  ck_assert_int_eq(d.pid, 0);
  ck_assert_msg(mps_stop(&d, 20.0, err, sizeof err) == 0, "a second stop: %s", err);
  assert_nothing_left(&s);
}
END_TEST

/* A daemon that exits at once, or never makes its pipe: refused, with its reason, nothing left. */
static const struct {
  const char *mode;
  double ready_s;
  const char *says[2];
} start_failures[] = {
  {.mode = "fail", .ready_s = 20.0, .says = {"exited (status 3)", "cannot start, as asked"}},
  {.mode = "hang", .ready_s = 0.5, .says = {"made no control pipe", "within"}},
};

START_TEST(test_start_fails)
{
  scratch_t s;
  scratch_open(&s);
  mps_daemon_t d;
  char err[512];
  setenv("FAKE_MPS_MODE", start_failures[_i].mode, 1);
  ck_assert_int_eq(mps_start(&d, s.fake, start_failures[_i].ready_s, err, sizeof err), -1);
  for (int k = 0; k < 2; k++)
    ck_assert_msg(strstr(err, start_failures[_i].says[k]), "%s: %s", start_failures[_i].mode, err);
  ck_assert_int_eq(d.pid, 0);
  assert_nothing_left(&s);
}
END_TEST

START_TEST(test_quit_ignored)
{
  scratch_t s;
  scratch_open(&s);
  mps_daemon_t d;
  char err[512];
  setenv("FAKE_MPS_MODE", "deaf", 1);
  ck_assert_msg(mps_start(&d, s.fake, 20.0, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(mps_stop(&d, 0.5, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "did not quit"), "%s", err);
  ck_assert(file_has(s.log, "quit"));
  assert_nothing_left(&s);
}
END_TEST

START_TEST(test_find_and_in_effect)
{
  char path[1024], why[256];
  ck_assert_int_eq(mps_find_control("/nonexistent/nvidia-cuda-mps-control", path, sizeof path), -1);
  setenv("PATH", "/nonexistent:/bin:/usr/bin", 1);
  ck_assert_int_eq(mps_find_control("sh", path, sizeof path), 0);
  ck_assert_int_eq(access(path, X_OK), 0);
  ck_assert_int_eq(mps_find_control("no-such-program-here", path, sizeof path), -1);
  setenv("CUDA_MPS_PIPE_DIRECTORY", "/somewhere/else", 1);
  ck_assert_int_eq(mps_in_effect(why, sizeof why), 1);
  ck_assert_msg(strstr(why, "/somewhere/else"), "%s", why);
}
END_TEST

/* The trainer's policy, in a build without GPU operations: the daemon starts but the probe's
 * CUDA call cannot succeed, which is what a driver refusing MPS looks like. */
static train_config_t shared_config(int mps)
{
  train_config_t c;
  memset(&c, 0, sizeof c);
  c.device = MODEL_DEVICE_CUDA;
  c.nproc = 2;
  c.gpus = 1;
  c.mps = mps;
  return c;
}

/* PATH holding the fake under its real name (in the side folder). */
static void fake_on_path(const scratch_t *s)
{
  char link[256];
  snprintf(link, sizeof link, "%s/" MPS_CONTROL, s->side);
  ck_assert_int_eq(symlink(s->fake, link), 0);
  char path[512];
  snprintf(path, sizeof path, "%s:/bin:/usr/bin", s->side);
  setenv("PATH", path, 1);
}

START_TEST(test_policy_probe_fails)
{
  scratch_t s;
  scratch_open(&s);
  fake_on_path(&s);
  mps_daemon_t d;
  char line[1024], err[1024];
  train_config_t c = shared_config(TRAIN_MPS_ON);
  ck_assert_int_eq(train_share_mps_start(&c, &d, line, sizeof line, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "--mps on") && strstr(err, "a CUDA process under the daemon failed"),
                "%s", err);
  ck_assert(file_has(s.log, "quit")); /* the daemon ran and was told to quit */
  ck_assert_ptr_null(getenv("CUDA_MPS_PIPE_DIRECTORY"));
  c = shared_config(TRAIN_MPS_AUTO);
  ck_assert_int_eq(train_share_mps_start(&c, &d, line, sizeof line, err, sizeof err), 0);
  ck_assert_msg(strstr(line, "MPS: not used") && strstr(line, "take turns"), "%s", line);
  ck_assert_int_eq(d.pid, 0);
  ck_assert_ptr_null(getenv("CUDA_MPS_PIPE_DIRECTORY"));
  assert_nothing_left(&s);
}
END_TEST

START_TEST(test_policy_choices)
{
  scratch_t s;
  scratch_open(&s);
  mps_daemon_t d;
  char line[1024], err[1024];
  /* Not on PATH: auto goes on without, on refuses. */
  setenv("PATH", "/nonexistent", 1);
  train_config_t c = shared_config(TRAIN_MPS_AUTO);
  ck_assert_int_eq(train_share_mps_start(&c, &d, line, sizeof line, err, sizeof err), 0);
  ck_assert_msg(strstr(line, "not on PATH"), "%s", line);
  c = shared_config(TRAIN_MPS_ON);
  ck_assert_int_eq(train_share_mps_start(&c, &d, line, sizeof line, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "--mps on") && strstr(err, "not on PATH"), "%s", err);
  /* off, and no GPU shared: nothing is started. */
  fake_on_path(&s);
  c = shared_config(TRAIN_MPS_OFF);
  ck_assert_int_eq(train_share_mps_start(&c, &d, line, sizeof line, err, sizeof err), 0);
  ck_assert_msg(strstr(line, "MPS: off"), "%s", line);
  c = shared_config(TRAIN_MPS_ON);
  c.nproc = 1;
  ck_assert_int_eq(train_share_mps_start(&c, &d, line, sizeof line, err, sizeof err), 0);
  ck_assert_str_eq(line, "");
  /* The user's own MPS in effect: used as it is. */
  setenv("CUDA_MPS_PIPE_DIRECTORY", s.side, 1);
  c = shared_config(TRAIN_MPS_ON);
  ck_assert_int_eq(train_share_mps_start(&c, &d, line, sizeof line, err, sizeof err), 0);
  ck_assert_msg(strstr(line, "no private daemon") && strstr(line, s.side), "%s", line);
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  ck_assert_int_eq(fake_pid(&s), 0); /* no daemon was ever started */
  assert_nothing_left(&s);
}
END_TEST

static Suite *mps_suite(const suite_env_t *env)
{
  (void)env;
  Suite *s = suite_create("mps");
  SUITE_CASE(s, "daemon", test_lifecycle, test_quit_ignored, test_find_and_in_effect);
  TCase *fails = tcase_create("start_fails");
  tcase_add_loop_test(fails, test_start_fails, 0,
                      (int)(sizeof start_failures / sizeof start_failures[0]));
  suite_add_tcase(s, fails);
  SUITE_CASE(s, "policy", test_policy_choices);
  /* With GPU operations built, the probe would reach a real driver through the fake's pipe. */
  if (!SUITE_BUILT_CUDNN) SUITE_CASE(s, "policy_no_gpu", test_policy_probe_fails);
  return s;
}

SUITE_MAIN("check_mps", mps_suite, SUITE_CPU_ONLY)
