/* shmfile.c — private shared-memory files made by one process for its peers (see shmfile.h). */
#include "config.h"

#include "shm/shmfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

shmddp_status_t shm_file_create(size_t bytes, int *fd, char *path, size_t pathlen, char *err,
                                size_t errlen)
{
  *fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (*fd >= 0) {
    snprintf(path, pathlen, "/proc/%d/fd/%d", (int)getpid(), *fd);
  } else {
    unsigned char r[8];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
      snprintf(err, errlen, "getrandom failed: %s", strerror(errno));
      return SHMDDP_ERR_SYSTEM;
    }
    snprintf(path, pathlen, "/dev/shm/shmddp-staged-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1],
             r[2], r[3], r[4], r[5], r[6], r[7]);
    *fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  int rc = *fd < 0 ? errno : 0;
  if (!rc && (fchmod(*fd, 0600) != 0 || ftruncate(*fd, (off_t)bytes) != 0)) rc = errno;
  if (!rc) rc = posix_fallocate(*fd, 0, (off_t)bytes);
  if (!rc) return SHMDDP_OK;
  if (*fd >= 0) shm_file_forget(*fd, path);
  *fd = -1;
  snprintf(err, errlen, "cannot create %zu bytes of shared memory in /dev/shm: %s%s", bytes,
           strerror(rc), rc == ENOSPC ? " (free space in /dev/shm, or give the container more: "
                                        "docker run --shm-size)" : "");
  return rc == ENOSPC ? SHMDDP_ERR_NOSPACE : SHMDDP_ERR_SYSTEM;
}

void shm_file_forget(int fd, const char *path)
{
  if (strncmp(path, "/dev/shm/", 9) == 0) unlink(path);
  if (fd >= 0) close(fd);
}

shmddp_status_t shm_file_map(const char *path, size_t bytes, void **map, char *err, size_t errlen)
{
  *map = NULL;
  int fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open the shared memory %s: %s", path, strerror(errno));
    return SHMDDP_ERR_SYSTEM;
  }
  struct stat sb;
  shmddp_status_t st = SHMDDP_OK;
  if (fstat(fd, &sb) != 0) {
    snprintf(err, errlen, "cannot stat the shared memory %s: %s", path, strerror(errno));
    st = SHMDDP_ERR_SYSTEM;
  } else if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid() || (sb.st_mode & 077) != 0 ||
             (uint64_t)sb.st_size != (uint64_t)bytes) {
    snprintf(err, errlen, "the shared memory %s is not what its maker announced (uid %u, mode "
             "%04o, %lld bytes; expected uid %u, mode 0600, %zu bytes): not mapped", path,
             (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777), (long long)sb.st_size,
             (unsigned)geteuid(), bytes);
    st = SHMDDP_ERR_INVALID;
  } else {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      snprintf(err, errlen, "cannot map the shared memory %s: %s", path, strerror(errno));
      st = SHMDDP_ERR_SYSTEM;
    } else {
      *map = p;
    }
  }
  close(fd);
  return st;
}
