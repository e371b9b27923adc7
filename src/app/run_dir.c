/* run_dir.c — the run's folder and the log a resumed run continues (see run_dir.h). */
#include "config.h"

#include "src/app/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/check.h"
#include "src/obs/report_log.h"
#include "src/obs/shquote.h"

#define RUNS_DIR "runs"
#define LATEST RUNS_DIR "/latest"

/* The files a run writes into its folder (and tools/report beside them). */
static const char *const run_files[] = {"checkpoint.ckpt", "log.jsonl", "summary.json",
                                        "report.html", NULL};

/* Whether name is a run's file; with leftovers, also the temporary file its writer leaves when
 * killed mid-write (outfile.h: NAME.tmp.HEX). */
static int is_run_file(const char *name, int leftovers)
{
  const char *rest = NULL;
  for (int i = 0; run_files[i] && !rest; i++) {
    size_t n = strlen(run_files[i]);
    if (strncmp(name, run_files[i], n) == 0) rest = name + n;
  }
  if (!rest && strncmp(name, "timeline-rank", 13) == 0) {
    size_t d = strspn(name + 13, "0123456789");
    if (d > 0 && strncmp(name + 13 + d, ".json", 5) == 0) rest = name + 13 + d + 5;
  }
  return rest && (*rest == 0 || (leftovers && strncmp(rest, ".tmp.", 5) == 0));
}

/* The run files in dir, named in list ("" and 0 when none or no such folder). */
static int run_files_in(const char *dir, char *list, size_t len)
{
  list[0] = 0;
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!is_run_file(e->d_name, 0)) continue;
    size_t used = strlen(list);
    if (n < 6) snprintf(list + used, len - used, "%s%s", n ? ", " : "", e->d_name);
    else if (n == 6) snprintf(list + used, len - used, ", ...");
    n++;
  }
  closedir(d);
  return n;
}

/* "dir/name" into buf. */
static const char *in_dir(const char *dir, const char *name, char *buf, size_t len)
{
  snprintf(buf, len, "%s/%s", dir, name);
  return buf;
}

/* The run a folder holds, by the first of its files that names one: the log's first line, the
 * checkpoint's record, summary.json's run_id. "" when none does. */
static void folder_run_id(const char *dir, char id[CKPT_RUN_ID_HEX + 1])
{
  char path[TRAIN_PATH_MAX + 32], err[256];
  id[0] = 0;
  if (report_log_run_id(in_dir(dir, "log.jsonl", path, sizeof path), id, CKPT_RUN_ID_HEX + 1) ==
          1 &&
      ckpt_run_is_id(id))
    return;
  id[0] = 0;
  ckpt_t *c;
  if (ckpt_read(in_dir(dir, "checkpoint.ckpt", path, sizeof path), &c, err, sizeof err) == 0) {
    ckpt_run_t r;
    if (ckpt_run_read(c, &r, err, sizeof err) == 0) snprintf(id, CKPT_RUN_ID_HEX + 1, "%s", r.id);
    ckpt_free(c);
    if (id[0]) return;
  }
  FILE *f = fopen(in_dir(dir, "summary.json", path, sizeof path), "r");
  if (!f) return;
  char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strstr(buf, "\"run_id\": \"");
  if (p && strlen(p + 11) > CKPT_RUN_ID_HEX && p[11 + CKPT_RUN_ID_HEX] == '"') {
    snprintf(id, CKPT_RUN_ID_HEX + 1, "%.*s", CKPT_RUN_ID_HEX, p + 11);
    if (!ckpt_run_is_id(id)) id[0] = 0;
  }
}

/* mkdir -p, and a check that this user can write in the folder. */
static int make_dirs(const char *path, char *err, size_t errlen)
{
  char buf[TRAIN_PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p != 0) continue;
    char c = *p;
    *p = 0;
    struct stat st;
    if (stat(buf, &st) != 0 && mkdir(buf, 0777) != 0 && errno != EEXIST) {
      return check_fail(err, errlen, "--out: cannot create %s: %s", buf, strerror(errno));
    }
    *p = c;
    if (!c) break;
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return check_fail(err, errlen, "--out: %s is not a directory", path);
  }
  /* Writable, as this process's user: found here, not by a rank after the fork. A file is
   * created and removed, which is what the log, the summary and checkpoints will do. */
  char probe[TRAIN_PATH_MAX + 32];
  snprintf(probe, sizeof probe, "%s/.write-check-XXXXXX", path);
  int fd = mkstemp(probe);
  if (fd < 0)
    return check_fail(err, errlen,
                      "--out: cannot write in %s: %s; give a folder this user can write to",
                      path, strerror(errno));
  close(fd);
  unlink(probe);
  return 0;
}

/* No --out: a new folder runs/YYYYMMDD-HHMMSS (made at the claim). runs/latest must be free for
 * the link: a folder there (where an earlier version wrote every run) is refused. */
static int choose_new(train_job_t *job, char *err, size_t errlen)
{
  struct stat st;
  if (lstat(LATEST, &st) == 0 && !S_ISLNK(st.st_mode))
    return check_fail(err, errlen,
                      "%s is a %s, but it is where the link to the newest run goes (every run "
                      "without --out gets its own folder in %s/ now); move it away (mv %s "
                      "%s/earlier) or give --out DIR",
                      LATEST, S_ISDIR(st.st_mode) ? "folder" : "file", RUNS_DIR, LATEST,
                      RUNS_DIR);
  CHECK(make_dirs(RUNS_DIR, err, errlen));
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(job->cfg.out_dir, sizeof job->cfg.out_dir, RUNS_DIR "/%Y%m%d-%H%M%S", &tm);
  job->out_fresh = 1;
  return 0;
}

/* Whether the file at path is one of dir's that --overwrite removes. */
static int removed_by_overwrite(const char *dir, const char *path)
{
  char copy[TRAIN_PATH_MAX];
  snprintf(copy, sizeof copy, "%s", path);
  struct stat a, b;
  const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  return is_run_file(name, 1) && stat(dirname(copy), &a) == 0 && stat(dir, &b) == 0 &&
         a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* A folder holding another run's files: refused, unless --resume continues that run or
 * --overwrite replaces it. */
static int check_holder(train_job_t *job, const ckpt_run_t *resumed, char *err, size_t errlen)
{
  const train_config_t *c = &job->cfg;
  char files[512], id[CKPT_RUN_ID_HEX + 1], path[TRAIN_PATH_MAX + 32];
  if (run_files_in(c->out_dir, files, sizeof files) == 0) return 0;
  folder_run_id(c->out_dir, id);
  /* the same run; or a checkpoint and a folder of runs before ids, which went on as then */
  if (resumed && strcmp(resumed->id, id) == 0) return 0;
  if (c->overwrite && resumed && removed_by_overwrite(c->out_dir, c->resume))
    return check_fail(err, errlen,
                      "--overwrite would remove %s, which --resume reads (it belongs to another "
                      "run than the files beside it); copy it out of %s first", c->resume,
                      c->out_dir);
  if (c->overwrite) {
    job->out_replace = 1;
    snprintf(job->other_run, sizeof job->other_run, "%s", id);
    return 0;
  }
  char what[600], dir[2 * TRAIN_PATH_MAX], cont[3 * TRAIN_PATH_MAX];
  snprintf(what, sizeof what, "%s%.8s%s%s", id[0] ? "run " : "", id, id[0] ? ": " : "", files);
  shquote(c->out_dir, dir, sizeof dir);
  if (resumed)
    return check_fail(err, errlen,
                      "--out %s holds another run (%s) than the one --resume %s continues; "
                      "give another --out, or --overwrite to replace that run",
                      dir, what, c->resume);
  cont[0] = 0;
  struct stat st;
  if (stat(in_dir(c->out_dir, "checkpoint.ckpt", path, sizeof path), &st) == 0) {
    char q[2 * TRAIN_PATH_MAX + 64];
    snprintf(cont, sizeof cont, ", or --resume %s to continue it",
             shquote(path, q, sizeof q));
  }
  return check_fail(err, errlen,
                    "--out %s holds another run (%s); give another --out, --overwrite to "
                    "replace that run%s",
                    dir, what, cont);
}

void run_dir_find_log(train_job_t *job, const ckpt_run_t *resumed)
{
  const train_config_t *c = &job->cfg;
  char beside[TRAIN_PATH_MAX + 16], copy[TRAIN_PATH_MAX], own[TRAIN_PATH_MAX + 16];
  char id[CKPT_RUN_ID_HEX + 1];
  snprintf(copy, sizeof copy, "%s", c->resume);
  in_dir(dirname(copy), "log.jsonl", beside, sizeof beside);
  in_dir(c->out_dir, "log.jsonl", own, sizeof own);
  job->log_from[0] = 0;
  if (resumed->id[0]) {
    const char *candidates[] = {own, beside};
    for (int i = 0; i < 2; i++)
      if (report_log_run_id(candidates[i], id, sizeof id) == 1 && !strcmp(id, resumed->id)) {
        snprintf(job->log_from, sizeof job->log_from, "%s", candidates[i]);
        return;
      }
  } else if (report_log_run_id(beside, id, sizeof id) == 0) {
    /* a checkpoint written before runs had ids: the log of its folder, as then */
    snprintf(job->log_from, sizeof job->log_from, "%s", beside);
  }
}

int run_dir_choose(train_job_t *job, const ckpt_run_t *resumed, char *err, size_t errlen)
{
  train_config_t *c = &job->cfg;
  if (!c->out_dir[0] && c->resume[0]) { /* the checkpoint's own folder */
    char real[PATH_MAX];
    if (!realpath(c->resume, real))
      return check_fail(err, errlen, "--resume %s: %s", c->resume, strerror(errno));
    const char *dir = dirname(real);
    if (strlen(dir) >= sizeof c->out_dir)
      return check_fail(err, errlen, "--resume %s: its folder's path is longer than %zu bytes; "
                        "give --out", c->resume, sizeof c->out_dir - 1);
    snprintf(c->out_dir, sizeof c->out_dir, "%s", dir);
  }
  if (!c->out_dir[0]) return choose_new(job, err, errlen);
  CHECK(check_holder(job, resumed, err, errlen));
  if (resumed) run_dir_find_log(job, resumed);
  return make_dirs(c->out_dir, err, errlen);
}

/* runs/latest -> name, replaced in one rename (a reader never finds it missing). */
static int point_latest(const char *name, char *err, size_t errlen)
{
  char tmp[64];
  unsigned char r[8];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
    return check_fail(err, errlen, "getrandom: %s", strerror(errno));
  snprintf(tmp, sizeof tmp, RUNS_DIR "/.latest.tmp.%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1],
           r[2], r[3], r[4], r[5], r[6], r[7]);
  if (symlink(name, tmp) != 0 || rename(tmp, LATEST) != 0) {
    int e = errno;
    unlink(tmp);
    return check_fail(err, errlen, "cannot point %s at %s: %s", LATEST, name, strerror(e));
  }
  return 0;
}

/* Remove the files of the run in dir that --overwrite replaces. */
static int remove_run(const char *dir, char *err, size_t errlen)
{
  DIR *d = opendir(dir);
  if (!d) return check_fail(err, errlen, "--overwrite: cannot read %s: %s", dir, strerror(errno));
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (!is_run_file(e->d_name, 1)) continue;
    if (unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT)
      rc = check_fail(err, errlen, "--overwrite: cannot remove %s/%s: %s", dir, e->d_name,
                      strerror(errno));
  }
  closedir(d);
  return rc;
}

int run_dir_claim(train_job_t *job, FILE *say, char *err, size_t errlen)
{
  train_config_t *c = &job->cfg;
  if (job->out_fresh) {
    char base[TRAIN_PATH_MAX];
    snprintf(base, sizeof base, "%s", c->out_dir);
    /* two runs started in the same second: -2, -3, ... */
    for (int i = 1; mkdir(c->out_dir, 0777) != 0; i++) {
      if (errno != EEXIST || i >= 1000)
        return check_fail(err, errlen, "cannot create %s: %s", c->out_dir, strerror(errno));
      snprintf(c->out_dir, sizeof c->out_dir, "%.*s-%d", TRAIN_PATH_MAX - 16, base, i + 1);
    }
    CHECK(point_latest(c->out_dir + strlen(RUNS_DIR "/"), err, errlen));
    if (say) fprintf(say, "train: this run's folder is %s (%s points at it)\n", c->out_dir, LATEST);
  }
  if (job->out_replace) {
    char files[512];
    run_files_in(c->out_dir, files, sizeof files);
    CHECK(remove_run(c->out_dir, err, errlen));
    if (say)
      fprintf(say, "train: --overwrite: removed %s%.8s%s(%s) from %s\n",
              job->other_run[0] ? "run " : "the other run ", job->other_run,
              job->other_run[0] ? " " : "", files, c->out_dir);
  }
  return 0;
}
