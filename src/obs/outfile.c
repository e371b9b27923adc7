/* outfile.c — private, exclusively created output files (see outfile.h). */
#include "config.h"

#include "src/obs/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int outfile_create_temp(const char *path, char *tmp, size_t tmplen)
{
  for (int attempt = 0; attempt < 8; attempt++) {
    unsigned char r[8];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) return -1;
    int n = snprintf(tmp, tmplen, "%s.tmp.%02x%02x%02x%02x%02x%02x%02x%02x", path, r[0], r[1],
                     r[2], r[3], r[4], r[5], r[6], r[7]);
    if (n < 0 || (size_t)n >= tmplen) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

FILE *outfile_fopen_temp(const char *path, char *tmp, size_t tmplen)
{
  int fd = outfile_create_temp(path, tmp, tmplen);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "w");
  if (!f) {
    int e = errno;
    close(fd);
    unlink(tmp);
    errno = e;
  }
  return f;
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
