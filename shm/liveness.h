/* liveness.h — peers watched without a supervisor. Ranks that joined by a unique id have no
 * parent process to reap a dead rank, so each communicator runs a watcher thread that sleeps in
 * poll() on a pidfd of every peer process (no polling loop burns a core) and, when a peer dies
 * before it left the group, marks it failed and records the group's abort naming it. Every wait
 * loop and every device kernel of every rank already watches the abort word. */
#ifndef SHM_LIVENESS_H
#define SHM_LIVENESS_H

#include <stdint.h>
#include <sys/types.h>

#include "shm/segment.h"

/* The inode of this process's PID namespace (0 if unknown): pids compare only within one. */
uint64_t shm_pidns_self(void);
/* The start time of process pid (clock ticks after boot, /proc/PID/stat field 22); 0 when it
 * cannot be read. A pid and its start time name one process for the life of the machine. */
uint64_t shm_pid_start(int32_t pid);
/* 0 only when the process (pid, started at start; start 0: unknown) provably no longer runs:
 * no such pid, a zombie, a pid held by another user's process (a member of a group runs as its
 * owner, so that is a reused pid), or a pid whose start time differs (reused). A pid of another
 * PID namespace cannot be judged and counts as alive. */
int shm_pid_alive(int32_t pid, uint64_t pidns, uint64_t start);

typedef struct shm_watch shm_watch_t;

/* Start watching every peer of self that runs in another process. */
shmddp_status_t shm_watch_start(shm_segment_t *seg, int self, shm_watch_t **out, char *err,
                                size_t errlen);
/* Stop the thread and free it (NULL is fine). */
void shm_watch_stop(shm_watch_t *w);

#endif
