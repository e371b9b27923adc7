/* fdpass.h — a mesh of connected Unix sockets between the processes of a group, carrying small
 * messages and file descriptors (SCM_RIGHTS): how device memory exported as a POSIX file
 * descriptor reaches the peers (see collectives/devmem/devmem.h). No CUDA here: the CPU suites
 * test it.
 *
 * Set-up, collective, with a host barrier between the steps:
 *   1. every rank fdpass_listen()s: a SOCK_SEQPACKET socket bound to a kernel-chosen name in the
 *      abstract namespace (nothing in the file system to leak), and publishes the name;
 *   2. every rank connects to each peer of lower rank (fdpass_connect) and says who it is;
 *   3. every rank accepts its higher-ranked peers (fdpass_accept) and closes the listener.
 * Both ends check the other's credentials (SO_PEERCRED): a socket whose other end belongs to
 * another user is refused, so an abstract name that anyone can connect to gives nothing away, and
 * once the listener is closed nobody can join. Messages on a pair are reliable and ordered.
 * Why a socket rather than pidfd_getfd(): that needs ptrace permission over the peer, which Yama
 * (ptrace_scope 1, the default on many distributions) refuses between sibling processes. */
#ifndef SHM_FDPASS_H
#define SHM_FDPASS_H

#include <stddef.h>

#include "shmddp.h"

#define FDPASS_NAME_BYTES 16 /* an autobound abstract name is 6 bytes ("\0" + 5 hex digits) */

typedef struct fdpass fdpass_t;

/* Step 1: the listening socket; name/name_len are what peers connect to. */
int fdpass_listen(fdpass_t **out, int rank, int nranks, unsigned char name[FDPASS_NAME_BYTES],
                  size_t *name_len, char *err, size_t errlen);
/* Step 2: connect to peer (peer < rank) listening at name. */
int fdpass_connect(fdpass_t *m, int peer, const unsigned char *name, size_t name_len, char *err,
                   size_t errlen);
/* Step 3: accept one connection from each peer set in want (a bit per rank), waiting at most
 * timeout_s for them; then the listener is closed. */
int fdpass_accept(fdpass_t *m, unsigned want, double timeout_s, char *err, size_t errlen);
/* 1 when peer's socket is connected. */
int fdpass_has(const fdpass_t *m, int peer);

/* What fdpass_send returns. */
enum {
  FDPASS_SENT = 0,
  FDPASS_ERROR = -1,
  FDPASS_FULL = -2, /* the peer has not read enough of what it was sent: nothing was sent */
  FDPASS_GONE = -3  /* the peer has closed its end (left the group, or died): nothing was sent */
};

/* Send msg (len bytes) and, when fd >= 0, a duplicate of fd to peer; never blocks and never
 * raises SIGPIPE. Returns one of the above; err says why when it is not FDPASS_SENT. */
int fdpass_send(fdpass_t *m, int peer, const void *msg, size_t len, int fd, char *err,
                size_t errlen);
/* Receive the next message from peer if there is one: 1 with *len and *fd (-1: none) set, 0
 * when nothing is queued, FDPASS_GONE when the peer has closed its end (a later call may still
 * return what it sent before: a reset is said first), FDPASS_ERROR on an error (the message is dropped and any descriptor it carried
 * is closed). A message longer than cap, or with more than one descriptor, is an error. */
int fdpass_recv(fdpass_t *m, int peer, void *msg, size_t cap, size_t *len, int *fd, char *err,
                size_t errlen);

void fdpass_close(fdpass_t *m);

#endif
