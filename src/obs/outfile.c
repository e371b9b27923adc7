/* outfile.c — private, exclusively created output files, and the sweep of the temporary files
 * a killed writer left (see outfile.h). */
#include "config.h"

#include "src/obs/outfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/check.h"

#define TMP_MARK ".tmp."
#define TMP_HEX 16

static int same_file(const struct stat *a, const struct stat *b)
{
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* A file system without flock(2) (some FUSE and network ones): files are still written, unlocked;
 * a sweep there cannot lock them either, so it removes nothing. */
static int no_locks(int e)
{
  return e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS || e == EINVAL;
}

int outfile_create_temp(const char *path, char *tmp, size_t tmplen)
{
  for (int attempt = 0; attempt < 8; attempt++) {
    unsigned char r[TMP_HEX / 2];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) return -1;
    int n = snprintf(tmp, tmplen, "%s" TMP_MARK "%02x%02x%02x%02x%02x%02x%02x%02x", path, r[0],
                     r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
    if (n < 0 || (size_t)n >= tmplen) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      return -1;
    }
    /* The name is visible before the lock is taken: a sweep may have found it unlocked and
     * removed it meanwhile (it holds the lock while it does). Locked, the name must still be
     * this file; else it is gone, and another name is tried. */
    struct stat mine, named;
    int e = 0;
    if (flock(fd, LOCK_EX) != 0 && !no_locks(errno)) e = errno;
    else if (fstat(fd, &mine) != 0) e = errno;
    else if (lstat(tmp, &named) == 0 && same_file(&mine, &named)) return fd;
    close(fd);
    if (e) {
      unlink(tmp);
      errno = e;
      return -1;
    }
  }
  errno = EEXIST;
  return -1;
}

FILE *outfile_fopen_temp(const char *path, char *tmp, size_t tmplen)
{
  int fd = outfile_create_temp(path, tmp, tmplen);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "w");
  if (!f) {
    int e = errno;
    unlink(tmp);
    close(fd);
    errno = e;
  }
  return f;
}

int outfile_rename(const char *tmp, const char *path, int replace)
{
  int rc = replace ? rename(tmp, path) : renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE);
  if (rc != 0 && !replace && (errno == EINVAL || errno == ENOSYS)) {
    /* A file system without RENAME_NOREPLACE: link(2) fails where path exists, too. */
    rc = link(tmp, path);
    if (rc == 0) unlink(tmp);
  }
  if (rc != 0) {
    int e = errno;
    unlink(tmp);
    errno = e;
  }
  return rc;
}

int outfile_commit(FILE *f, const char *tmp, const char *path, int replace)
{
  int e = 0;
  errno = 0;
  if (fflush(f) != 0 || ferror(f)) {
    e = errno ? errno : EIO;
    unlink(tmp);
  } else if (outfile_rename(tmp, path, replace) != 0) {
    e = errno;
  }
  if (fclose(f) != 0 && !e) e = errno;
  errno = e;
  return e ? -1 : 0;
}

FILE *outfile_fopen_private(const char *path)
{
  /* O_NONBLOCK: a FIFO planted under the name fails at once instead of blocking the open. */
  int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) return NULL;
  struct stat sb;
  int e = 0;
  /* An existing file: only a regular file of ours, made private before it is emptied. */
  if (fstat(fd, &sb) != 0) e = errno;
  else if (!S_ISREG(sb.st_mode)) e = EINVAL;
  else if (sb.st_uid != geteuid()) e = EPERM;
  else if (fchmod(fd, 0600) != 0 || ftruncate(fd, 0) != 0 ||
           fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
    e = errno;
  FILE *f = e ? NULL : fdopen(fd, "w");
  if (!f) {
    if (!e) e = errno;
    close(fd);
    errno = e;
  }
  return f;
}

/* Whether name is "<base>.tmp.<16 lowercase hex digits>" with base matching a pattern. */
static int our_temp_name(const char *name, const char *const *patterns, size_t n)
{
  size_t len = strlen(name), mark = strlen(TMP_MARK);
  if (len <= mark + TMP_HEX) return 0;
  const char *hex = name + len - TMP_HEX;
  if (strspn(hex, "0123456789abcdef") != TMP_HEX || memcmp(hex - mark, TMP_MARK, mark) != 0)
    return 0;
  char base[NAME_MAX + 1];
  snprintf(base, sizeof base, "%.*s", (int)(len - TMP_HEX - mark), name);
  for (size_t i = 0; i < n; i++)
    if (fnmatch(patterns[i], base, FNM_PERIOD) == 0) return 1;
  return 0;
}

/* Removes dir's entry name if it is a regular file of ours that nobody holds: 1 removed, 0 not. */
static int sweep_one(int dfd, const char *name)
{
  int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return 0; /* a link (ELOOP), gone, or not ours to read */
  struct stat held, named;
  int gone = 0;
  if (fstat(fd, &held) == 0 && S_ISREG(held.st_mode) && held.st_uid == geteuid() &&
      flock(fd, LOCK_EX | LOCK_NB) == 0 &&
      fstatat(dfd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 && same_file(&held, &named))
    gone = unlinkat(dfd, name, 0) == 0;
  close(fd); /* drops the lock */
  return gone;
}

int outfile_sweep(const char *dir, const char *const *patterns, size_t npatterns,
                  size_t *removed, char *err, size_t errlen)
{
  *removed = 0;
  DIR *d = opendir(dir);
  if (!d) return check_fail(err, errlen, "%s: cannot read the folder: %s", dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (our_temp_name(e->d_name, patterns, npatterns)) *removed += sweep_one(dirfd(d), e->d_name);
  closedir(d);
  return 0;
}
