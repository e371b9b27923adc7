/* check_mps.c — the job's private MPS daemon (src/app/mps.c) and the trainer's --mps policy
 * (gpu_share.c), over tests/fake_mps_control, a stand-in for nvidia-cuda-mps-control that
 * behaves as the real one towards us (control pipe in CUDA_MPS_PIPE_DIRECTORY, quit), and
 * stand-ins for the policy's CUDA probes (compute mode, a context under the daemon). Every case
 * checks that nothing is left: no process, no folder. Also: MPS folders that are not the user's
 * alone (a link, writable by others, another uid's: as root only, by chown) are refused; the
 * folder of a job killed with SIGKILL is swept by the next one, and only such folders. */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/app/gpu_share.h"
#include "src/app/mps.h"
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

/* Whether pid runs: it exists and is not a zombie (an orphan's exit is reaped by whatever
 * process 1 is, which in a container may never do it). */
static int runs(pid_t pid)
{
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return kill(pid, 0) == 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *state = strrchr(buf, ')');
  return !(state && state[1] == ' ' && state[2] == 'Z');
}

/* Nothing left: the daemon's folder gone, the daemon (if it ever ran) gone. */
static void assert_nothing_left(const scratch_t *s)
{
  ck_assert_msg(entries(s->base) == 0, "the daemon's folder is left in %s", s->base);
  pid_t pid = fake_pid(s);
  if (pid > 0) ck_assert_msg(!runs(pid), "daemon %d still runs", pid);
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

START_TEST(test_find_control)
{
  char path[1024];
  ck_assert_int_eq(mps_find_control("/nonexistent/nvidia-cuda-mps-control", path, sizeof path), -1);
  setenv("PATH", "/nonexistent:/bin:/usr/bin", 1);
  ck_assert_int_eq(mps_find_control("sh", path, sizeof path), 0);
  ck_assert_int_eq(access(path, X_OK), 0);
  ck_assert_int_eq(mps_find_control("no-such-program-here", path, sizeof path), -1);
}
END_TEST

/* ---------------- folders MPS would use ---------------- */

/* Another uid's folder can only be made by root (chown). */
static int as_root(void) { return geteuid() == 0; }
#define OTHER_UID 65534 /* nobody */

/* A folder under dir: its mode, and its owner when owner >= 0 (root only). */
static void make_dir(char *path, size_t len, const char *dir, const char *name, mode_t mode,
                     int owner)
{
  snprintf(path, len, "%s/%s", dir, name);
  ck_assert_int_eq(mkdir(path, 0700), 0);
  ck_assert_int_eq(chmod(path, mode), 0);
  if (owner >= 0) ck_assert_int_eq(chown(path, (uid_t)owner, (gid_t)-1), 0);
}

typedef struct {
  const char *name;
  mode_t mode;  /* a folder of this mode; 0: see link/file */
  int other;    /* owned by OTHER_UID (root only) */
  int link;     /* a symbolic link to a trusted folder */
  int file;     /* a plain file */
  int absent;
  int want;     /* mps_dir_trusted's answer */
  const char *says;
} trust_case_t;

static const trust_case_t trust_cases[] = {
  {.name = "yours, 0700", .mode = 0700, .want = 0},
  {.name = "yours, 0755", .mode = 0755, .want = 0},
  {.name = "group-writable", .mode = 0770, .want = -1, .says = "writable by its group"},
  {.name = "world-writable", .mode = 0777, .want = -1, .says = "writable by every user"},
  {.name = "world-writable and sticky", .mode = 01777, .want = -1, .says = "every user"},
  {.name = "a symbolic link", .link = 1, .want = -1, .says = "symbolic link"},
  {.name = "a plain file", .file = 1, .want = -1, .says = "not a folder"},
  {.name = "absent", .absent = 1, .want = 1},
  {.name = "another uid's", .mode = 0700, .other = 1, .want = -1, .says = "belongs to uid 65534"},
}; /* the last one only as root (registered so) */

/* Make case c's folder at path (under dir). */
static void make_case(const trust_case_t *c, const char *dir, char *path, size_t len)
{
  snprintf(path, len, "%s/case", dir);
  if (c->absent) return;
  if (c->file) {
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
  } else if (c->link) {
    char target[256];
    make_dir(target, sizeof target, dir, "target", 0700, -1);
    ck_assert_int_eq(symlink(target, path), 0);
  } else {
    make_dir(path, len, dir, "case", c->mode, c->other ? OTHER_UID : -1);
  }
}

START_TEST(test_dir_trust)
{
  const trust_case_t *c = &trust_cases[_i];
  char dir[] = "/tmp/check_mps_trust_XXXXXX", path[256], why[512] = "";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  make_case(c, dir, path, sizeof path);
  int got = mps_dir_trusted("the pipe folder", path, why, sizeof why);
  ck_assert_msg(got == c->want, "%s: %d, want %d (%s)", c->name, got, c->want, why);
  if (c->says) ck_assert_msg(strstr(why, c->says) && strstr(why, path), "%s: %s", c->name, why);
  test_rm_rf(dir);
}
END_TEST

/* The environment names a folder: trusted, or refused with the variable's name and what to do
 * (a folder that does not exist too: whoever makes it first would serve the job). */
START_TEST(test_named_folder)
{
  const trust_case_t *c = &trust_cases[_i];
  char dir[] = "/tmp/check_mps_named_XXXXXX", path[256], why[1024] = "", none[300];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  make_case(c, dir, path, sizeof path);
  snprintf(none, sizeof none, "%s/no-default", dir);
  setenv("CUDA_MPS_PIPE_DIRECTORY", path, 1);
  unsetenv("CUDA_MPS_LOG_DIRECTORY");
  mps_found_t found = MPS_FOUND_FOREIGN;
  int got = mps_in_effect(none, &found, why, sizeof why);
  if (c->want == 0) {
    ck_assert_msg(got == 0 && found == MPS_FOUND_OWN, "%s: %d/%d: %s", c->name, got, found, why);
    /* ... but not with a log folder that is not trusted */
    char log[256];
    make_dir(log, sizeof log, dir, "log", 0777, -1);
    setenv("CUDA_MPS_LOG_DIRECTORY", log, 1);
    ck_assert_int_eq(mps_in_effect(none, &found, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "CUDA_MPS_LOG_DIRECTORY") && strstr(why, "writable"), "%s", why);
  } else {
    ck_assert_msg(got == -1, "%s: accepted", c->name);
    ck_assert_msg(strstr(why, "CUDA_MPS_PIPE_DIRECTORY") && strstr(why, path) &&
                  strstr(why, "unset"), "%s: %s", c->name, why);
  }
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  unsetenv("CUDA_MPS_LOG_DIRECTORY");
  test_rm_rf(dir);
}
END_TEST

/* A daemon in the default folder (its control pipe there): the user's own folder is used as it
 * is, one that is not trusted is foreign (never used); no control pipe: none. */
START_TEST(test_default_folder)
{
  const trust_case_t *c = &trust_cases[_i];
  char dir[] = "/tmp/check_mps_default_XXXXXX", path[256], why[1024] = "", control[300];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  make_case(c, dir, path, sizeof path);
  if (c->absent || c->file) { /* no daemon can listen there: none */
    mps_found_t found = MPS_FOUND_FOREIGN;
    ck_assert_int_eq(mps_in_effect(path, &found, why, sizeof why), 0);
    ck_assert_int_eq(found, MPS_FOUND_NONE);
    test_rm_rf(dir);
    return;
  }
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  mps_found_t found = MPS_FOUND_FOREIGN;
  ck_assert_int_eq(mps_in_effect(path, &found, why, sizeof why), 0);
  ck_assert_msg(found == MPS_FOUND_NONE, "%s: no control pipe, but found %d", c->name, found);
  snprintf(control, sizeof control, "%s/control", path);
  ck_assert_int_eq(mkfifo(control, 0600), 0);
  ck_assert_int_eq(mps_in_effect(path, &found, why, sizeof why), 0);
  if (c->want == 0) {
    ck_assert_msg(found == MPS_FOUND_OWN && strstr(why, "is used"), "%s: %d: %s", c->name, found,
                  why);
  } else {
    ck_assert_msg(found == MPS_FOUND_FOREIGN, "%s: found %d", c->name, found);
    ck_assert_msg(strstr(why, c->says) && strstr(why, "not used"), "%s: %s", c->name, why);
  }
  test_rm_rf(dir);
}
END_TEST

/* ---------------- the trainer's policy ---------------- */

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

/* Stand-ins for the policy's CUDA probes. */
static int mode_default(void *arg, char *err, size_t errlen)
{
  (void)arg, (void)err, (void)errlen;
  return 0;
}
static int mode_exclusive(void *arg, char *err, size_t errlen)
{
  (void)arg;
  return snprintf(err, errlen, "GPU 0's compute mode is Exclusive_Process, not Default"), -1;
}
static int served_yes(void *arg, char *err, size_t errlen)
{
  (void)arg, (void)err, (void)errlen;
  /* as the driver would: the daemon's pipe is where the environment says */
  const char *p = getenv("CUDA_MPS_PIPE_DIRECTORY");
  char control[300];
  snprintf(control, sizeof control, "%s/control", p ? p : "");
  struct stat st;
  return stat(control, &st) == 0 && S_ISFIFO(st.st_mode) ? 0 : -1;
}
/* A compute-mode probe that records that it ran with the job's folder, no daemon in it. */
static int mode_sees_empty_folder(void *arg, char *err, size_t errlen)
{
  (void)arg;
  const char *p = getenv("CUDA_MPS_PIPE_DIRECTORY");
  char control[300];
  snprintf(control, sizeof control, "%s/control", p ? p : "");
  struct stat st;
  if (!p || strstr(p, "shmddp-mps-") == NULL || stat(p, &st) != 0 || lstat(control, &st) == 0)
    return snprintf(err, errlen, "the probe did not run in the job's empty folder"), -1;
  return 0;
}

/* The probes' default folder: one that does not exist (no daemon of anyone's). */
static train_mps_probes_t probes(const scratch_t *s, mps_probe_fn mode, mps_probe_fn served,
                                 char *none, size_t len)
{
  snprintf(none, len, "%s/no-default-daemon", s->side);
  return (train_mps_probes_t){.default_dir = none, .compute_mode = mode, .served = served};
}

/* Ranks that share a GPU, nothing asked: the job's own daemon, the variables set for the ranks,
 * the start line says so; stopping it leaves nothing. */
START_TEST(test_policy_default_on_when_shared)
{
  scratch_t s;
  scratch_open(&s);
  fake_on_path(&s);
  char none[256], line[1024], err[1024];
  train_mps_probes_t p = probes(&s, mode_sees_empty_folder, served_yes, none, sizeof none);
  mps_daemon_t d;
  train_config_t c = shared_config(TRAIN_MPS_AUTO);
  ck_assert_msg(train_share_mps_start(&c, &p, &d, line, sizeof line, err, sizeof err) == 0, "%s",
                err);
  ck_assert_msg(strstr(line, "MPS: private daemon (2 ranks on GPU 0"), "%s", line);
  ck_assert_int_gt(d.pid, 0);
  ck_assert_int_eq(fake_pid(&s), d.pid);
  ck_assert_str_eq(getenv("CUDA_MPS_PIPE_DIRECTORY"), d.pipe_dir);
  train_share_mps_stop(&d);
  ck_assert_ptr_null(getenv("CUDA_MPS_PIPE_DIRECTORY"));
  ck_assert(file_has(s.log, "quit"));
  assert_nothing_left(&s);
}
END_TEST

/* No daemon where it is not wanted or cannot serve: every rank alone on its GPU; --no-mps; a
 * compute mode other than Default (auto: said on the start line; on: refused); and nothing is
 * ever started or left. */
START_TEST(test_policy_off)
{
  scratch_t s;
  scratch_open(&s);
  fake_on_path(&s);
  char none[256], line[1024], err[1024];
  train_mps_probes_t ok = probes(&s, mode_default, served_yes, none, sizeof none);
  train_mps_probes_t excl = probes(&s, mode_exclusive, served_yes, none, sizeof none);
  mps_daemon_t d;
  train_config_t c = shared_config(TRAIN_MPS_AUTO);
  c.gpus = 2; /* 2 ranks, 2 GPUs */
  ck_assert_int_eq(train_share_mps_start(&c, &ok, &d, line, sizeof line, err, sizeof err), 0);
  ck_assert_str_eq(line, "");
  c = shared_config(TRAIN_MPS_OFF); /* --no-mps */
  ck_assert_int_eq(train_share_mps_start(&c, &ok, &d, line, sizeof line, err, sizeof err), 0);
  ck_assert_msg(strstr(line, "MPS: off (--no-mps, --mps off)"), "%s", line);
  c = shared_config(TRAIN_MPS_AUTO);
  ck_assert_int_eq(train_share_mps_start(&c, &excl, &d, line, sizeof line, err, sizeof err), 0);
  ck_assert_msg(strstr(line, "MPS: not used (GPU 0's compute mode is Exclusive_Process"), "%s",
                line);
  ck_assert_int_eq(d.pid, 0);
  ck_assert_ptr_null(getenv("CUDA_MPS_PIPE_DIRECTORY"));
  c = shared_config(TRAIN_MPS_ON);
  ck_assert_int_eq(train_share_mps_start(&c, &excl, &d, line, sizeof line, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "--mps on") && strstr(err, "Exclusive_Process"), "%s", err);
  ck_assert_int_eq(fake_pid(&s), 0); /* no daemon was ever started */
  assert_nothing_left(&s);
}
END_TEST

/* A daemon that is not trusted in the default folder (here world-writable; another uid's as
 * root): not used, and the ranks are pointed at the job's folder, where none listens, so their
 * driver does not connect to it by itself; --mps on refuses. An MPS folder the environment names
 * that is not trusted refuses the job whatever --mps says (CUDA would use it). */
START_TEST(test_policy_foreign_and_named)
{
  scratch_t s;
  scratch_open(&s);
  fake_on_path(&s);
  char theirs[256], control[300], line[1024], err[1024];
  for (int other = 0; other < 1 + as_root(); other++) {
    make_dir(theirs, sizeof theirs, s.side, other ? "theirs-uid" : "theirs-mode",
             other ? 0755 : 0777, other ? OTHER_UID : -1);
    snprintf(control, sizeof control, "%s/control", theirs);
    ck_assert_int_eq(mkfifo(control, 0600), 0);
    train_mps_probes_t p = {.default_dir = theirs, .compute_mode = mode_default,
                            .served = served_yes};
    mps_daemon_t d;
    train_config_t c = shared_config(TRAIN_MPS_AUTO);
    ck_assert_msg(train_share_mps_start(&c, &p, &d, line, sizeof line, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_msg(strstr(line, "MPS: not used") && strstr(line, theirs) &&
                  strstr(line, other ? "belongs to uid 65534" : "writable by every user"),
                  "%s", line);
    ck_assert_int_eq(d.pid, 0);
    const char *pd = getenv("CUDA_MPS_PIPE_DIRECTORY");
    ck_assert_msg(pd && strcmp(pd, d.pipe_dir) == 0, "the ranks are not kept away: %s",
                  pd ? pd : "(unset)");
    train_share_mps_stop(&d);
    ck_assert_ptr_null(getenv("CUDA_MPS_PIPE_DIRECTORY"));
    c = shared_config(TRAIN_MPS_ON);
    ck_assert_int_eq(train_share_mps_start(&c, &p, &d, line, sizeof line, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--mps on") && strstr(err, theirs), "%s", err);
  }
  if (!as_root()) printf("check_mps: SKIP the other uid's default folder: needs root (chown)\n");
  char link[300];
  snprintf(link, sizeof link, "%s/pipe-link", s.side);
  ck_assert_int_eq(symlink(s.side, link), 0);
  setenv("CUDA_MPS_PIPE_DIRECTORY", link, 1);
  char none[256];
  train_mps_probes_t p = probes(&s, mode_default, served_yes, none, sizeof none);
  mps_daemon_t d;
  train_config_t c = shared_config(TRAIN_MPS_AUTO);
  ck_assert_int_eq(train_share_mps_start(&c, &p, &d, line, sizeof line, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "CUDA_MPS_PIPE_DIRECTORY") && strstr(err, "symbolic link"), "%s",
                err);
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  ck_assert_int_eq(fake_pid(&s), 0); /* no daemon was ever started */
  assert_nothing_left(&s);
}
END_TEST

/* The real probes, in a build without GPU operations: the compute mode cannot be read (no
 * reason to refuse), the daemon starts, and the check under it fails, which is what a driver
 * refusing MPS looks like. */
START_TEST(test_policy_probe_fails)
{
  scratch_t s;
  scratch_open(&s);
  fake_on_path(&s);
  mps_daemon_t d;
  char none[256], line[1024], err[1024];
  train_mps_probes_t p = probes(&s, NULL, NULL, none, sizeof none);
  train_config_t c = shared_config(TRAIN_MPS_ON);
  ck_assert_int_eq(train_share_mps_start(&c, &p, &d, line, sizeof line, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "--mps on") && strstr(err, "a CUDA process under the daemon failed"),
                "%s", err);
  ck_assert(file_has(s.log, "quit")); /* the daemon ran and was told to quit */
  ck_assert_ptr_null(getenv("CUDA_MPS_PIPE_DIRECTORY"));
  c = shared_config(TRAIN_MPS_AUTO);
  ck_assert_int_eq(train_share_mps_start(&c, &p, &d, line, sizeof line, err, sizeof err), 0);
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
  char none[256], line[1024], err[1024];
  train_mps_probes_t p = probes(&s, mode_default, served_yes, none, sizeof none);
  /* Not on PATH: auto goes on without, on refuses. */
  setenv("PATH", "/nonexistent", 1);
  train_config_t c = shared_config(TRAIN_MPS_AUTO);
  ck_assert_int_eq(train_share_mps_start(&c, &p, &d, line, sizeof line, err, sizeof err), 0);
  ck_assert_msg(strstr(line, "not on PATH"), "%s", line);
  c = shared_config(TRAIN_MPS_ON);
  ck_assert_int_eq(train_share_mps_start(&c, &p, &d, line, sizeof line, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "--mps on") && strstr(err, "not on PATH"), "%s", err);
  /* on, and no GPU shared: nothing is started. */
  fake_on_path(&s);
  c = shared_config(TRAIN_MPS_ON);
  c.nproc = 1;
  ck_assert_int_eq(train_share_mps_start(&c, &p, &d, line, sizeof line, err, sizeof err), 0);
  ck_assert_str_eq(line, "");
  /* The user's own MPS in effect: used as it is. */
  setenv("CUDA_MPS_PIPE_DIRECTORY", s.side, 1);
  c = shared_config(TRAIN_MPS_ON);
  ck_assert_int_eq(train_share_mps_start(&c, &p, &d, line, sizeof line, err, sizeof err), 0);
  ck_assert_msg(strstr(line, "no private daemon") && strstr(line, s.side), "%s", line);
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  ck_assert_int_eq(fake_pid(&s), 0); /* no daemon was ever started */
  assert_nothing_left(&s);
}
END_TEST

/* ---------------- folders left behind ---------------- */

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* Wait (at most bound_s: a hang only) for a process that is not our child to end. */
static void wait_gone(pid_t pid, int bound_s)
{
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) { /* no pidfds (Linux < 5.3), or it has ended already: look until it is gone */
    for (int i = 0; i < bound_s * 1000 && runs(pid); i++) usleep(1000);
    ck_assert_msg(!runs(pid), "process %d still runs", pid);
    return;
  }
  struct pollfd p = {.fd = fd, .events = POLLIN};
  ck_assert_msg(poll(&p, 1, bound_s * 1000) == 1, "process %d did not end", pid);
  close(fd);
}

/* Wait until no process holds the lock of the one folder in base (flock blocks until then; a
 * hang is the test's timeout). */
static void wait_unlocked(const char *base)
{
  DIR *d = opendir(base);
  ck_assert_ptr_nonnull(d);
  int fd = -1;
  for (struct dirent *e; fd < 0 && (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  closedir(d);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(flock(fd, LOCK_EX), 0);
  close(fd);
}

/* A job killed outright (SIGKILL, no chance to clean up): its daemon gets the parent-death
 * signal and ends; its folder stays until the next job, which removes it. */
START_TEST(test_killed_job_is_swept)
{
  scratch_t s;
  scratch_open(&s);
  int fd[2];
  ck_assert_int_eq(pipe(fd), 0);
  pid_t job = fork();
  if (job == 0) {
    mps_daemon_t d;
    char err[512];
    close(fd[0]);
    if (mps_start(&d, s.fake, 20.0, err, sizeof err) != 0) _exit(1);
    if (write(fd[1], &d.pid, sizeof d.pid) != (ssize_t)sizeof d.pid) _exit(1);
    for (;;) pause();
  }
  close(fd[1]);
  pid_t daemon = 0;
  ck_assert_int_eq(read(fd[0], &daemon, sizeof daemon), (ssize_t)sizeof daemon);
  close(fd[0]);
  ck_assert_int_eq(entries(s.base), 1);
  kill(job, SIGKILL);
  ck_assert_int_eq(waitpid(job, NULL, 0), job);
  wait_gone(daemon, 30);
  ck_assert_msg(entries(s.base) == 1, "the killed job's folder is not there to sweep");
  /* What the daemon started inherited the job's lock too, and may outlive it a moment (the
   * fake's mkfifo, as the real daemon's servers would): the folder is free once its lock is. */
  wait_unlocked(s.base);
  /* the next job */
  mps_daemon_t d;
  char err[512];
  ck_assert_msg(mps_prepare(&d, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(entries(s.base) == 1, "the killed job's folder was not swept");
  ck_assert_int_eq(mps_stop(&d, 1.0, err, sizeof err), 0);
  assert_nothing_left(&s);
}
END_TEST

/* Only folders of finished jobs are swept: not one a live process holds (until it ends), not
 * one still being made (no pipe folder yet), not a link (nor what it leads to), not another
 * uid's (as root). */
START_TEST(test_sweep_spares_the_living)
{
  scratch_t s;
  scratch_open(&s);
  char held[256], young[256], target[256], link[256], theirs[256], sub[300], err[512];
  make_dir(held, sizeof held, s.base, "shmddp-mps-held01", 0700, -1);
  snprintf(sub, sizeof sub, "%s/pipe", held);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  make_dir(young, sizeof young, s.base, "shmddp-mps-young1", 0700, -1);
  make_dir(target, sizeof target, s.side, "elsewhere", 0700, -1);
  snprintf(sub, sizeof sub, "%s/pipe", target);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  snprintf(link, sizeof link, "%s/shmddp-mps-link01", s.base);
  ck_assert_int_eq(symlink(target, link), 0);
  int n = 3;
  if (as_root()) {
    make_dir(theirs, sizeof theirs, s.base, "shmddp-mps-their1", 0700, -1);
    snprintf(sub, sizeof sub, "%s/pipe", theirs);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    ck_assert_int_eq(chown(theirs, OTHER_UID, (gid_t)-1), 0);
    n++;
  } else {
    printf("check_mps: SKIP another uid's folder in the sweep: needs root (chown)\n");
  }
  /* a live process holds `held`: it says so on `ready`, and ends when we close `fd` */
  int fd[2], ready[2];
  ck_assert_int_eq(pipe(fd), 0);
  ck_assert_int_eq(pipe(ready), 0);
  pid_t holder = fork();
  if (holder == 0) {
    close(fd[1]);
    close(ready[0]);
    int dfd = open(held, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || flock(dfd, LOCK_EX) != 0 || write(ready[1], "l", 1) != 1) _exit(1);
    char c;
    ssize_t r = read(fd[0], &c, 1); /* until the parent closes its end */
    _exit(r < 0);
  }
  close(fd[0]);
  close(ready[1]);
  char c;
  ck_assert_int_eq(read(ready[0], &c, 1), 1);
  close(ready[0]);
  mps_daemon_t d, d2;
  ck_assert_msg(mps_prepare(&d, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(entries(s.base), n + 1); /* everything spared, and the new folder */
  ck_assert_int_eq(access(target, F_OK), 0);
  /* a job that runs is spared by the next one's sweep */
  ck_assert_msg(mps_prepare(&d2, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(entries(s.base), n + 2);
  ck_assert_int_eq(access(d.dir, F_OK), 0);
  ck_assert_int_eq(mps_stop(&d2, 1.0, err, sizeof err), 0);
  ck_assert_int_eq(mps_stop(&d, 1.0, err, sizeof err), 0);
  close(fd[1]);
  ck_assert_int_eq(waitpid(holder, NULL, 0), holder);
  ck_assert_msg(mps_prepare(&d, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(entries(s.base), n); /* `held` is gone now, the new folder came */
  ck_assert_int_eq(access(held, F_OK), -1);
  ck_assert_int_eq(mps_stop(&d, 1.0, err, sizeof err), 0);
  test_rm_rf(young);
  unlink(link);
  if (as_root()) test_rm_rf(theirs);
  assert_nothing_left(&s);
}
END_TEST

static Suite *mps_suite(const suite_env_t *env)
{
  (void)env;
  Suite *s = suite_create("mps");
  SUITE_CASE(s, "daemon", test_lifecycle, test_quit_ignored, test_find_control);
  TCase *fails = tcase_create("start_fails");
  tcase_add_loop_test(fails, test_start_fails, 0,
                      (int)(sizeof start_failures / sizeof start_failures[0]));
  suite_add_tcase(s, fails);
  TCase *trust = tcase_create("trust");
  int ntrust = (int)(sizeof trust_cases / sizeof trust_cases[0]);
  if (!as_root()) {
    ntrust--;
    printf("check_mps: not registered (SKIP): folders of another uid (needs root, to chown "
           "one)\n");
  }
  tcase_add_loop_test(trust, test_dir_trust, 0, ntrust);
  tcase_add_loop_test(trust, test_named_folder, 0, ntrust);
  tcase_add_loop_test(trust, test_default_folder, 0, ntrust);
  suite_add_tcase(s, trust);
  SUITE_CASE(s, "policy", test_policy_choices, test_policy_default_on_when_shared, test_policy_off,
             test_policy_foreign_and_named);
  /* With GPU operations built, the probe would reach a real driver through the fake's pipe. */
  if (!SUITE_BUILT_CUDNN) SUITE_CASE(s, "policy_no_gpu", test_policy_probe_fails);
  SUITE_CASE(s, "left_behind", test_killed_job_is_swept, test_sweep_spares_the_living);
  return s;
}

SUITE_MAIN("check_mps", mps_suite, SUITE_CPU_ONLY)
