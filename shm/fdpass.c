/* fdpass.c — the socket mesh of fdpass.h: listen/connect/accept with credential checks, and
 * messages with at most one file descriptor each. */
#include "config.h"

#include "shm/fdpass.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "shm/timeutil.h"

#define HELLO_MAGIC 0x666470617373ULL /* "fdpass" */

struct fdpass {
  int rank, nranks;
  int listener;
  int sock[SHMDDP_MAX_RANKS]; /* -1: no connection with that rank */
};

typedef struct {
  uint64_t magic;
  int32_t rank;
  int32_t pad;
} hello_t;

static int fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t len, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return -1;
}

/* The other end of s belongs to this user. */
static int same_user(int s, char *err, size_t len)
{
  struct ucred cr;
  socklen_t cl = sizeof cr;
  if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0)
    return fail(err, len, "SO_PEERCRED: %s", strerror(errno));
  if (cr.uid != geteuid())
    return fail(err, len, "a process of uid %u (not this user, %u) is on the other end of the "
                "descriptor-passing socket; refused", (unsigned)cr.uid, (unsigned)geteuid());
  return 0;
}

int fdpass_listen(fdpass_t **out, int rank, int nranks, unsigned char name[FDPASS_NAME_BYTES],
                  size_t *name_len, char *err, size_t errlen)
{
  *out = NULL;
  if (nranks < 1 || nranks > SHMDDP_MAX_RANKS || rank < 0 || rank >= nranks)
    return fail(err, errlen, "fdpass: rank %d of %d", rank, nranks);
  fdpass_t *m = calloc(1, sizeof *m);
  if (!m) return fail(err, errlen, "fdpass: out of memory");
  m->rank = rank;
  m->nranks = nranks;
  for (int i = 0; i < SHMDDP_MAX_RANKS; i++) m->sock[i] = -1;
  m->listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  socklen_t al = sizeof(sa_family_t); /* autobind: the kernel picks a free abstract name */
  if (m->listener < 0 || bind(m->listener, (struct sockaddr *)&a, al) != 0 ||
      listen(m->listener, SHMDDP_MAX_RANKS * 2) != 0) {
    int e = errno;
    fdpass_close(m);
    return fail(err, errlen, "fdpass: cannot listen on a Unix socket: %s", strerror(e));
  }
  al = sizeof a;
  if (getsockname(m->listener, (struct sockaddr *)&a, &al) != 0 ||
      al <= sizeof(sa_family_t) || al - sizeof(sa_family_t) > FDPASS_NAME_BYTES) {
    fdpass_close(m);
    return fail(err, errlen, "fdpass: unexpected socket name (length %u)", (unsigned)al);
  }
  *name_len = al - sizeof(sa_family_t);
  memcpy(name, a.sun_path, *name_len);
  *out = m;
  return 0;
}

int fdpass_connect(fdpass_t *m, int peer, const unsigned char *name, size_t name_len, char *err,
                   size_t errlen)
{
  if (peer < 0 || peer >= m->nranks || peer == m->rank || m->sock[peer] >= 0)
    return fail(err, errlen, "fdpass: cannot connect to rank %d", peer);
  if (name_len < 1 || name_len > FDPASS_NAME_BYTES || name[0] != 0)
    return fail(err, errlen, "fdpass: rank %d published no valid socket name", peer);
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  memcpy(a.sun_path, name, name_len);
  if (s < 0 || connect(s, (struct sockaddr *)&a, (socklen_t)(sizeof(sa_family_t) + name_len)) != 0) {
    int e = errno;
    if (s >= 0) close(s);
    return fail(err, errlen, "fdpass: cannot connect to rank %d: %s", peer, strerror(e));
  }
  hello_t h = {HELLO_MAGIC, m->rank, 0};
  if (same_user(s, err, errlen) != 0) {
    close(s);
    return -1;
  }
  if (send(s, &h, sizeof h, MSG_NOSIGNAL) != (ssize_t)sizeof h) {
    int e = errno;
    close(s);
    return fail(err, errlen, "fdpass: cannot greet rank %d: %s", peer, strerror(e));
  }
  m->sock[peer] = s;
  return 0;
}

/* The rank a fresh connection says it is, after the credential check; -1 to drop it. */
static int greeted(fdpass_t *m, int s, unsigned want, double deadline, char *err, size_t errlen)
{
  if (same_user(s, err, errlen) != 0) return -1;
  struct pollfd p = {s, POLLIN, 0};
  int ms = (int)((deadline - shm_now()) * 1000);
  if (poll(&p, 1, ms > 0 ? ms : 0) != 1) return fail(err, errlen, "fdpass: a peer connected but never said who it is");
  hello_t h;
  if (recv(s, &h, sizeof h, MSG_DONTWAIT) != (ssize_t)sizeof h || h.magic != HELLO_MAGIC ||
      h.rank < 0 || h.rank >= m->nranks || !(want >> h.rank & 1) || m->sock[h.rank] >= 0)
    return fail(err, errlen, "fdpass: a connection did not say it is an expected rank");
  return h.rank;
}

int fdpass_accept(fdpass_t *m, unsigned want, double timeout_s, char *err, size_t errlen)
{
  double deadline = shm_now() + timeout_s;
  unsigned have = 0;
  int rc = 0;
  char why[256] = "";
  while ((have & want) != want) {
    int s = accept4(m->listener, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (shm_now() > deadline) {
        rc = fail(err, errlen, "fdpass: ranks %#x never connected%s%s", want & ~have,
                  why[0] ? "; " : "", why);
        break;
      }
      struct pollfd p = {m->listener, POLLIN, 0};
      poll(&p, 1, 20);
      continue;
    }
    if (s < 0) {
      rc = fail(err, errlen, "fdpass: accept: %s", strerror(errno));
      break;
    }
    int r = greeted(m, s, want, deadline, why, sizeof why);
    if (r < 0) {
      close(s); /* someone else: ignored, the expected ranks may still come */
      continue;
    }
    m->sock[r] = s;
    have |= 1u << r;
  }
  close(m->listener);
  m->listener = -1;
  return rc;
}

int fdpass_has(const fdpass_t *m, int peer)
{
  return m && peer >= 0 && peer < m->nranks && m->sock[peer] >= 0;
}

int fdpass_send(fdpass_t *m, int peer, const void *msg, size_t len, int fd, char *err,
                size_t errlen)
{
  if (!fdpass_has(m, peer)) return fail(err, errlen, "fdpass: no connection with rank %d", peer);
  struct iovec iov = {(void *)msg, len};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } c;
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (fd >= 0) {
    memset(&c, 0, sizeof c);
    mh.msg_control = c.buf;
    mh.msg_controllen = sizeof c.buf;
    struct cmsghdr *ch = CMSG_FIRSTHDR(&mh);
    ch->cmsg_level = SOL_SOCKET;
    ch->cmsg_type = SCM_RIGHTS;
    ch->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(ch), &fd, sizeof fd);
  }
  ssize_t n = sendmsg(m->sock[peer], &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == (ssize_t)len) return FDPASS_SENT;
  int e = n < 0 ? errno : 0;
  fail(err, errlen, "fdpass: sending to rank %d: %s", peer, e ? strerror(e) : "short write");
  if (e == EAGAIN || e == EWOULDBLOCK) return FDPASS_FULL;
  if (e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ECONNREFUSED) return FDPASS_GONE;
  return FDPASS_ERROR;
}

/* Close every descriptor a received message carried. */
static void close_passed(struct msghdr *mh)
{
  for (struct cmsghdr *ch = CMSG_FIRSTHDR(mh); ch; ch = CMSG_NXTHDR(mh, ch)) {
    if (ch->cmsg_level != SOL_SOCKET || ch->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (ch->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(ch) + i * sizeof(int), sizeof fd);
      close(fd);
    }
  }
}

int fdpass_recv(fdpass_t *m, int peer, void *msg, size_t cap, size_t *len, int *fd, char *err,
                size_t errlen)
{
  *len = 0;
  *fd = -1;
  if (!fdpass_has(m, peer)) return fail(err, errlen, "fdpass: no connection with rank %d", peer);
  struct iovec iov = {msg, cap};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(4 * sizeof(int))];
  } c;
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = c.buf;
  mh.msg_controllen = sizeof c.buf;
  ssize_t n = recvmsg(m->sock[peer], &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  if (n < 0 && errno != ECONNRESET)
    return fail(err, errlen, "fdpass: receiving from rank %d: %s", peer, strerror(errno));
  if (n <= 0) { /* ECONNRESET: it closed with messages of ours unread (said once, then EOF) */
    fail(err, errlen, "fdpass: rank %d closed its socket", peer);
    return FDPASS_GONE;
  }
  int nfd = 0, got = -1;
  for (struct cmsghdr *ch = CMSG_FIRSTHDR(&mh); ch; ch = CMSG_NXTHDR(&mh, ch))
    if (ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS) {
      nfd += (int)((ch->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      memcpy(&got, CMSG_DATA(ch), sizeof got);
    }
  if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || nfd > 1) {
    close_passed(&mh);
    return fail(err, errlen, "fdpass: rank %d sent a malformed message (%zd bytes, %d "
                "descriptors)", peer, n, nfd);
  }
  *len = (size_t)n;
  *fd = nfd ? got : -1;
  return 1;
}

void fdpass_close(fdpass_t *m)
{
  if (!m) return;
  if (m->listener >= 0) close(m->listener);
  for (int i = 0; i < SHMDDP_MAX_RANKS; i++)
    if (m->sock[i] >= 0) close(m->sock[i]);
  free(m);
}
