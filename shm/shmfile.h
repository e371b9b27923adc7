/* shmfile.h — private shared-memory files that one process makes and its peers (same user, same
 * machine) map by a path it hands them: the CUDA transport's host staging memory.
 *
 * The maker creates the file without a name (O_TMPFILE in /dev/shm, mode 0600) and reserves its
 * pages with posix_fallocate, so a full /dev/shm is an error with a message at creation instead
 * of SIGBUS in a collective; peers open it through the maker's descriptor
 * (/proc/PID/fd/N), so no name exists that a crash could leave behind. Where /dev/shm lacks
 * O_TMPFILE the file gets a random name, removed by shm_file_forget once the peers have it.
 * A peer maps it only after fstat shows a regular file of its own effective uid, no group or
 * other permission bits, and exactly the size it expects. */
#ifndef SHM_SHMFILE_H
#define SHM_SHMFILE_H

#include <stddef.h>

#include "shmddp.h"

#define SHM_FILE_PATH_MAX 64

/* Creates a file of bytes bytes; *fd open, path (for peers) filled. SHMDDP_OK, or
 * SHMDDP_ERR_NOSPACE / SHMDDP_ERR_SYSTEM with a message. */
shmddp_status_t shm_file_create(size_t bytes, int *fd, char *path, size_t pathlen, char *err,
                                size_t errlen);
/* Once every peer has mapped it: closes fd and removes the name if it has one. */
void shm_file_forget(int fd, const char *path);
/* A peer: opens path and checks owner, mode and size (== bytes) before mapping it read-write.
 * *map set; SHMDDP_OK or SHMDDP_ERR_INVALID / SHMDDP_ERR_SYSTEM with a message. */
shmddp_status_t shm_file_map(const char *path, size_t bytes, void **map, char *err, size_t errlen);

#endif
