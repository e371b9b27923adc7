/* mps.c — the job's private MPS control daemon (see mps.h): started before any rank touches CUDA,
 * stopped on every path out of the job.
 *
 * Why foreground mode (-f) rather than -d: the daemon stays our child, so its exit is seen
 * (waitpid) rather than guessed, and a signal can still reach it if it ignores quit. It gets its
 * own process group (a terminal's Ctrl-C is the launcher's to forward; the daemon must outlive the
 * ranks to be told to quit) and PR_SET_PDEATHSIG, so a launcher killed outright takes it along.
 * Readiness is an event: the control pipe appearing in the pipe directory (inotify), or the
 * daemon's exit; both bounded by ready_s.
 *
 * Why the parent-death signal here, where shmddp-nccl-run (a shell script) uses a watcher: the
 * daemon is this process's own child, so the kernel delivers the signal exactly when this
 * process dies, however it dies; what it cannot do is remove the folder. So the folder is
 * locked (flock on the folder itself, held by this process and inherited by the daemon and the
 * ranks) and the next job removes every shmddp-mps-* folder of this user that no process holds
 * (mps_prepare), the wrapper's too, which locks its folders the same way. */
#include "config.h"

#include "src/app/mps.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "src/check.h"

#define QUIT_GRACE_S 2.0 /* after SIGTERM, before SIGKILL */
#define DIR_PREFIX "shmddp-mps-" /* the job's folder: this and mkdtemp's six characters */

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reap pid within timeout_s (short pauses between looks). 1 reaped (status in *status), 0 not. */
static int reap_within(pid_t pid, double timeout_s, int *status)
{
  double until = now_s() + timeout_s;
  long pause_ns = 200000;
  for (;;) {
    pid_t got = waitpid(pid, status, WNOHANG);
    if (got == pid || (got < 0 && errno == ECHILD)) return 1;
    if (now_s() >= until) return 0;
    struct timespec ts = {0, pause_ns};
    nanosleep(&ts, NULL);
    if (pause_ns < 20000000) pause_ns *= 2;
  }
}

/* Signal a child's process group (its own, see above), or the child alone if that fails. */
static void signal_child(pid_t pid, int sig)
{
  if (kill(-pid, sig) != 0) kill(pid, sig);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
  (void)st, (void)flag, (void)ftw;
  return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

static int remove_tree(const char *dir)
{
  if (!dir[0]) return 0;
  return nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT ? -1 : 0;
}

int mps_dir_trusted(const char *what, const char *path, char *why, size_t len)
{
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return 1;
    return check_fail(why, len, "%s %s cannot be examined: %s", what, path, strerror(errno));
  }
  if (S_ISLNK(st.st_mode))
    return check_fail(why, len, "%s %s is a symbolic link (it could lead anywhere)", what, path);
  if (!S_ISDIR(st.st_mode)) return check_fail(why, len, "%s %s is not a folder", what, path);
  if (st.st_uid != geteuid() && st.st_uid != 0) /* root's: the system's daemon */
    return check_fail(why, len, "%s %s belongs to uid %u, neither you (uid %u) nor root", what,
                      path, (unsigned)st.st_uid, (unsigned)geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return check_fail(why, len, "%s %s is writable by %s (mode %04o)", what, path,
                      st.st_mode & S_IWOTH ? "every user" : "its group",
                      (unsigned)(st.st_mode & 07777));
  return 0;
}

/* A folder the environment names: trusted, or -1 with why (absent: refused too, since whoever
 * makes it first would serve the job's CUDA calls). */
static int named_dir(const char *var, const char *path, char *why, size_t len)
{
  char said[PATH_MAX + 128];
  int t = mps_dir_trusted(var, path, said, sizeof said);
  if (t == 0) return 0;
  if (t == 1)
    return check_fail(why, len, "%s names %s, which does not exist: no MPS daemon listens there, "
                      "and whoever makes that folder first would serve this job's CUDA calls; "
                      "start your daemon there first, or unset %s", var, path, var);
  return check_fail(why, len, "%s: refused: an MPS daemon's folder must be yours alone (CUDA "
                    "would hand it this job's GPU work); point %s at a folder of yours (mode "
                    "0700), or unset it", said, var);
}

int mps_in_effect(const char *default_dir, mps_found_t *found, char *why, size_t len)
{
  *found = MPS_FOUND_NONE;
  const char *v = getenv("CUDA_MPS_PIPE_DIRECTORY");
  if (v && v[0]) {
    const char *l = getenv("CUDA_MPS_LOG_DIRECTORY");
    if (named_dir("CUDA_MPS_PIPE_DIRECTORY", v, why, len) != 0 ||
        (l && l[0] && named_dir("CUDA_MPS_LOG_DIRECTORY", l, why, len) != 0))
      return -1;
    *found = MPS_FOUND_OWN;
    snprintf(why, len, "CUDA_MPS_PIPE_DIRECTORY is set (%s): that daemon is used", v);
    return 0;
  }
  char control[PATH_MAX + 16], said[PATH_MAX + 128];
  struct stat st;
  snprintf(control, sizeof control, "%s/control", default_dir);
  if (lstat(control, &st) != 0) return 0;
  if (mps_dir_trusted("the default MPS folder", default_dir, said, sizeof said) == 0) {
    *found = MPS_FOUND_OWN;
    snprintf(why, len, "a daemon of yours (or the system's) listens at %s: that daemon is used",
             default_dir);
    return 0;
  }
  *found = MPS_FOUND_FOREIGN;
  snprintf(why, len, "an MPS control daemon listens at %s, and %s: it is not used; and since one "
           "MPS server serves one user at a time, a daemon of this job's would wait for that "
           "one's clients", default_dir, said);
  return 0;
}

int mps_find_control(const char *name, char *path, size_t len)
{
  if (strchr(name, '/')) {
    snprintf(path, len, "%s", name);
    return access(path, X_OK) == 0 ? 0 : -1;
  }
  const char *p = getenv("PATH");
  if (!p || !p[0]) p = "/usr/local/bin:/usr/bin:/bin";
  while (*p) {
    size_t n = strcspn(p, ":");
    int w = snprintf(path, len, "%.*s/%s", (int)n, n ? p : ".", name);
    if (w > 0 && (size_t)w < len && access(path, X_OK) == 0) return 0;
    p += n;
    if (*p == ':') p++;
  }
  path[0] = '\0';
  return -1;
}

/* A base folder others cannot rename the job's folder in: writable by the user, and by no one
 * else unless sticky (as /tmp is). */
static int base_ok(const char *v)
{
  struct stat st;
  return v && v[0] == '/' && stat(v, &st) == 0 && S_ISDIR(st.st_mode) &&
         access(v, W_OK | X_OK) == 0 &&
         (!(st.st_mode & (S_IWGRP | S_IWOTH)) || (st.st_mode & S_ISVTX));
}

static const char *base_dir(void)
{
  const char *names[] = {"XDG_RUNTIME_DIR", "TMPDIR"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (base_ok(getenv(names[i]))) return getenv(names[i]);
  return "/tmp";
}

/* Remove the folders of this user's earlier jobs in base that no process holds (each job locks
 * its folder; a folder whose pipe directory does not exist yet is still being made). */
static void sweep(const char *base)
{
  DIR *dir = opendir(base);
  if (!dir) return;
  int bfd = dirfd(dir);
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    if (strncmp(e->d_name, DIR_PREFIX, strlen(DIR_PREFIX)) != 0 ||
        strlen(e->d_name) != strlen(DIR_PREFIX) + 6)
      continue;
    struct stat st;
    if (fstatat(bfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid())
      continue;
    int fd = openat(bfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (fstatat(fd, "pipe", &st, AT_SYMLINK_NOFOLLOW) == 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
      char path[PATH_MAX];
      if (snprintf(path, sizeof path, "%s/%s", base, e->d_name) < (int)sizeof path)
        remove_tree(path);
    }
    close(fd);
  }
  closedir(dir);
}

int mps_prepare(mps_daemon_t *d, char *err, size_t errlen)
{
  memset(d, 0, sizeof *d);
  d->lock_fd = -1;
  const char *base = base_dir();
  struct sockaddr_un sun;
  /* The control pipe is a Unix socket: its path must fit sun_path. */
  if (strlen(base) + sizeof "/shmddp-mps-XXXXXX/pipe/control" > sizeof sun.sun_path ||
      strlen(base) + sizeof "/shmddp-mps-XXXXXX" > sizeof d->dir)
    return check_fail(err, errlen, "MPS: the folder for the daemon's pipe would be too long under "
                      "%s (a socket path holds %zu bytes): set TMPDIR (or XDG_RUNTIME_DIR) to a "
                      "shorter folder", base, sizeof sun.sun_path);
  sweep(base);
  snprintf(d->dir, sizeof d->dir, "%s/" DIR_PREFIX "XXXXXX", base);
  if (!mkdtemp(d->dir)) {
    int e = errno;
    d->dir[0] = '\0';
    return check_fail(err, errlen, "MPS: cannot create a folder under %s: %s", base, strerror(e));
  }
  snprintf(d->pipe_dir, sizeof d->pipe_dir, "%s/pipe", d->dir);
  snprintf(d->log_dir, sizeof d->log_dir, "%s/log", d->dir);
  /* Not close-on-exec: the daemon holds the lock too, so its folder is not swept while it runs. */
  d->lock_fd = open(d->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  if (d->lock_fd < 0 || flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0 ||
      mkdir(d->pipe_dir, 0700) != 0 || mkdir(d->log_dir, 0700) != 0) {
    int e = errno;
    char ignored[64];
    mps_stop(d, 0.0, ignored, sizeof ignored);
    return check_fail(err, errlen, "MPS: cannot create its folders: %s", strerror(e));
  }
  return 0;
}

int mps_export(const mps_daemon_t *d)
{
  if (setenv("CUDA_MPS_PIPE_DIRECTORY", d->pipe_dir, 1) != 0) return -1;
  return setenv("CUDA_MPS_LOG_DIRECTORY", d->log_dir, 1);
}

void mps_unexport(void)
{
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  unsetenv("CUDA_MPS_LOG_DIRECTORY");
}

/* In a forked child: the control program, with the daemon's environment, stdin from `in` (or
 * /dev/null), stdout and stderr to out (or /dev/null). Does not return. */
static void exec_control(const mps_daemon_t *d, int in, const char *out, const char *arg)
{
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  int o = out ? open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
  dup2(in >= 0 ? in : null, 0);
  dup2(o >= 0 ? o : null, 1);
  dup2(o >= 0 ? o : null, 2);
  if (mps_export(d) != 0) _exit(126);
  execl(d->control, d->control, arg, (char *)NULL);
  _exit(127);
}

/* The last line the daemon wrote (its own output), for messages. */
static void last_line(const mps_daemon_t *d, char *buf, size_t len)
{
  char path[PATH_MAX + 16], text[1024];
  buf[0] = '\0';
  snprintf(path, sizeof path, "%s/daemon.out", d->log_dir);
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r')) text[--n] = '\0';
  char *nl = strrchr(text, '\n');
  const char *from = nl ? nl + 1 : text;
  size_t keep = strlen(from) < len ? strlen(from) : len - 1;
  memcpy(buf, from, keep);
  buf[keep] = '\0';
}

/* Until the control pipe appears (1), the daemon exits (0, *status set) or ready_s passes (-1). */
static int wait_ready(const mps_daemon_t *d, int ino, double ready_s, int *status)
{
  char control[PATH_MAX + 16];
  snprintf(control, sizeof control, "%s/control", d->pipe_dir);
  double until = now_s() + ready_s;
  for (;;) {
    if (access(control, F_OK) == 0) return 1;
    if (waitpid(d->pid, status, WNOHANG) == d->pid) return 0;
    double left = until - now_s();
    if (left <= 0) return -1;
    /* The daemon's exit makes no inotify event: look at it every 50 ms. */
    struct pollfd p = {.fd = ino, .events = POLLIN};
    int ms = left < 0.05 ? (int)(left * 1000) + 1 : 50;
    if (ino < 0 || poll(&p, 1, ms) <= 0) {
      if (ino < 0) {
        struct timespec ts = {0, (long)ms * 1000000};
        nanosleep(&ts, NULL);
      }
      continue;
    }
    char buf[4096];
    while (read(ino, buf, sizeof buf) > 0) {
    }
  }
}

int mps_start_in(mps_daemon_t *d, const char *control, double ready_s, char *err, size_t errlen)
{
  snprintf(d->control, sizeof d->control, "%s", control);
  int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (ino >= 0 && inotify_add_watch(ino, d->pipe_dir, IN_CREATE | IN_MOVED_TO) < 0) {
    close(ino);
    ino = -1;
  }
  char out[PATH_MAX + 16];
  snprintf(out, sizeof out, "%s/daemon.out", d->log_dir);
  pid_t parent = getpid();
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    exec_control(d, -1, out, "-f");
  }
  if (pid < 0) {
    int e = errno;
    char ignored[64];
    if (ino >= 0) close(ino);
    mps_stop(d, 0.0, ignored, sizeof ignored);
    return check_fail(err, errlen, "MPS: cannot start %s: %s", control, strerror(e));
  }
  setpgid(pid, pid); /* also here, so a signal to the group cannot race the child's own call */
  d->pid = pid;
  int status = 0, r = wait_ready(d, ino, ready_s, &status);
  if (ino >= 0) close(ino);
  if (r == 1) return 0;
  char said[256];
  last_line(d, said, sizeof said);
  if (r == 0) {
    d->pid = 0;
    check_fail(err, errlen, "MPS: %s -f exited (%s %d) before its control pipe appeared%s%s",
               control, WIFSIGNALED(status) ? "signal" : "status",
               WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
               said[0] ? ": " : "", said);
  } else {
    check_fail(err, errlen, "MPS: %s -f made no control pipe within %.0f s%s%s", control, ready_s,
               said[0] ? ": " : "", said);
  }
  char ignored[64];
  mps_stop(d, 0.0, ignored, sizeof ignored);
  return -1;
}

int mps_start(mps_daemon_t *d, const char *control, double ready_s, char *err, size_t errlen)
{
  if (mps_prepare(d, err, errlen) != 0) return -1;
  return mps_start_in(d, control, ready_s, err, errlen);
}

typedef struct {
  int rc;
  char msg[480];
} probe_result_t;

int mps_probe(const mps_daemon_t *d, mps_probe_fn fn, void *arg, double timeout_s, char *err,
              size_t errlen)
{
  int fd[2];
  if (pipe(fd) != 0) return check_fail(err, errlen, "MPS: cannot probe (pipe): %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    probe_result_t r = {.rc = -1};
    if (mps_export(d) == 0) r.rc = fn(arg, r.msg, sizeof r.msg);
    _exit(write(fd[1], &r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
  }
  close(fd[1]);
  if (pid < 0) {
    close(fd[0]);
    return check_fail(err, errlen, "MPS: cannot probe (fork): %s", strerror(errno));
  }
  probe_result_t r = {.rc = -1};
  struct pollfd p = {.fd = fd[0], .events = POLLIN};
  int ready = poll(&p, 1, (int)(timeout_s * 1000));
  ssize_t got = ready > 0 ? read(fd[0], &r, sizeof r) : -1;
  close(fd[0]);
  if (ready <= 0) kill(pid, SIGKILL);
  int status = 0;
  reap_within(pid, 5.0, &status);
  if (ready == 0)
    return check_fail(err, errlen, "MPS: a process using CUDA under the daemon did not answer "
                      "within %.0f s", timeout_s);
  if (got != (ssize_t)sizeof r)
    return check_fail(err, errlen, "MPS: the probe process failed (%s %d)",
                      WIFSIGNALED(status) ? "signal" : "status",
                      WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  r.msg[sizeof r.msg - 1] = '\0';
  if (r.rc != 0) return check_fail(err, errlen, "%s", r.msg[0] ? r.msg : "MPS: the probe failed");
  return 0;
}

/* Tell the daemon to quit through its own client (the control program reading "quit" on stdin). */
static void send_quit(const mps_daemon_t *d, double timeout_s)
{
  int fd[2];
  if (pipe(fd) != 0) return;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[1]);
    setpgid(0, 0);
    exec_control(d, fd[0], NULL, NULL);
  }
  close(fd[0]);
  if (pid > 0) {
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    ssize_t w = write(fd[1], "quit\n", 5);
    (void)w;
    signal(SIGPIPE, old);
  }
  close(fd[1]);
  if (pid > 0 && !reap_within(pid, timeout_s, NULL)) {
    signal_child(pid, SIGKILL);
    reap_within(pid, 1.0, NULL);
  }
}

int mps_stop(mps_daemon_t *d, double timeout_s, char *err, size_t errlen)
{
  int rc = 0;
  if (err && errlen) err[0] = '\0';
  if (d->pid > 0) {
    int status = 0;
    if (!reap_within(d->pid, 0.0, &status)) {
      if (timeout_s > 0) send_quit(d, timeout_s);
      if (timeout_s <= 0 || !reap_within(d->pid, timeout_s, &status)) {
        if (timeout_s > 0)
          rc = check_fail(err, errlen, "MPS: the daemon did not quit within %.0f s: stopped "
                          "with a signal", timeout_s);
        signal_child(d->pid, SIGTERM);
        if (!reap_within(d->pid, QUIT_GRACE_S, &status)) {
          signal_child(d->pid, SIGKILL);
          reap_within(d->pid, QUIT_GRACE_S, &status);
        }
      }
    }
    d->pid = 0;
  }
  if (d->dir[0] && remove_tree(d->dir) != 0 && rc == 0)
    rc = check_fail(err, errlen, "MPS: cannot remove %s: %s", d->dir, strerror(errno));
  if (d->dir[0] && d->lock_fd >= 0) close(d->lock_fd);
  d->lock_fd = -1;
  d->dir[0] = '\0';
  return rc;
}
