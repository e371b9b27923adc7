/* join.c — communicators joined by a unique id: the id and its text form, init and destroy,
 * abort from any thread, and the thread's last error for calls that have no communicator.
 *
 * The id (128 bytes) holds a magic, a version, a secret of 256 random bits (getrandom) and this
 * machine's boot id, so an id carried to another machine is refused at once instead of waiting
 * for peers that can never arrive. The secret never appears in a file name: everything the
 * group shows is computed from it with keyed BLAKE2s (shm/blake2s.h), each use under its own
 * label, so one output tells nothing of the secret or of the others:
 *   name  = "/shmddp-id-" + hex(BLAKE2s-128(secret, "shmddp segment name"))  in /dev/shm
 *   proof = BLAKE2s-256(secret, "shmddp segment proof")                      in the header
 *   derived secret(tag) = BLAKE2s-256(secret, "shmddp derive" + tag)
 * so listing /dev/shm yields neither an id nor the name of a derived id. A joiner presents the
 * proof; the segment's owner and mode are checked before it is read (shm/rendezvous.h). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "collectives/comm.h"
#include "collectives/device.h"
#include "shm/abort.h"
#include "shm/blake2s.h"
#include "shm/liveness.h"
#include "shm/rendezvous.h"

#define ID_MAGIC "shmddpID"
#define ID_VERSION 2
#define SECRET_BYTES 32
#define NAME_HASH_BYTES 16

typedef struct {
  char magic[8];
  uint32_t version, reserved;
  unsigned char secret[SECRET_BYTES];
  unsigned char boot[16]; /* zero when unknown */
} id_layout_t;
_Static_assert(sizeof(id_layout_t) <= sizeof(shmddp_unique_id_t), "id layout too large");
_Static_assert(SHMDDP_UNIQUE_ID_STRLEN == 2 * sizeof(shmddp_unique_id_t) + 1, "id text length");
_Static_assert(SECRET_BYTES <= SHM_BLAKE2S_MAX_KEY, "the secret is BLAKE2s's key");

struct coll_joined {
  shm_segment_t seg;
  shm_watch_t *watch;
};

static _Thread_local char tl_error[512];

const char *shmddp_last_error(void) { return tl_error; }

static shmddp_status_t fail(shmddp_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static shmddp_status_t fail(shmddp_status_t st, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_error, sizeof tl_error, fmt, ap);
  va_end(ap);
  return st;
}

/* /proc/sys/kernel/random/boot_id as 16 bytes; zeros when unreadable. */
static void boot_id(unsigned char out[16])
{
  memset(out, 0, 16);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f) return;
  char text[64] = {0};
  if (fgets(text, sizeof text, f)) {
    int n = 0;
    for (const char *p = text; *p && n < 32; p++) {
      if (!isxdigit((unsigned char)*p)) continue;
      int v = isdigit((unsigned char)*p) ? *p - '0' : tolower((unsigned char)*p) - 'a' + 10;
      out[n / 2] |= (unsigned char)(n % 2 ? v : v << 4);
      n++;
    }
  }
  fclose(f);
}

shmddp_status_t shmddp_get_unique_id(shmddp_unique_id_t *id)
{
  if (!id) return fail(SHMDDP_ERR_INVALID, "shmddp_get_unique_id: id is NULL");
  memset(id, 0, sizeof *id);
  id_layout_t l;
  memset(&l, 0, sizeof l);
  memcpy(l.magic, ID_MAGIC, sizeof l.magic);
  l.version = ID_VERSION;
  size_t got = 0;
  while (got < sizeof l.secret) {
    ssize_t n = getrandom(l.secret + got, sizeof l.secret - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return fail(SHMDDP_ERR_SYSTEM, "shmddp_get_unique_id: getrandom failed: %s",
                  strerror(errno));
    got += (size_t)n;
  }
  boot_id(l.boot);
  memcpy(id->internal, &l, sizeof l);
  return SHMDDP_OK;
}

static shmddp_status_t check_id(const shmddp_unique_id_t *id, int check_boot);

/* out = BLAKE2s(key = the id's secret, label + data): one keyed use of the secret. */
static void keyed(const id_layout_t *l, const char *label, const void *data, size_t len,
                  unsigned char *out, size_t outlen)
{
  unsigned char msg[64];
  size_t n = strlen(label) + 1; /* the NUL ends the label: no label is a prefix of another's input */
  memcpy(msg, label, n);
  if (len) memcpy(msg + n, data, len);
  shm_blake2s(out, outlen, l->secret, sizeof l->secret, msg, n + len);
}

shmddp_status_t shmddp_unique_id_derive(const shmddp_unique_id_t *id, uint64_t tag,
                                        shmddp_unique_id_t *out)
{
  if (!id || !out) return fail(SHMDDP_ERR_INVALID, "shmddp_unique_id_derive: NULL argument");
  shmddp_status_t st = check_id(id, 0);
  if (st != SHMDDP_OK) return st;
  id_layout_t l;
  memcpy(&l, id->internal, sizeof l);
  unsigned char t[8];
  for (int i = 0; i < 8; i++) t[i] = (unsigned char)(tag >> (8 * i));
  unsigned char derived[SECRET_BYTES];
  keyed(&l, "shmddp derive", t, sizeof t, derived, sizeof derived);
  memcpy(l.secret, derived, sizeof l.secret);
  memset(out, 0, sizeof *out);
  memcpy(out->internal, &l, sizeof l);
  return SHMDDP_OK;
}

void coll_id_segment_name(const shmddp_unique_id_t *id, char *name, size_t len)
{
  id_layout_t l;
  memcpy(&l, id->internal, sizeof l);
  unsigned char h[NAME_HASH_BYTES];
  keyed(&l, "shmddp segment name", NULL, 0, h, sizeof h);
  int off = snprintf(name, len, "%s", SHM_ID_PREFIX);
  for (size_t i = 0; i < sizeof h && off > 0 && (size_t)off < len; i++)
    off += snprintf(name + off, len - (size_t)off, "%02x", h[i]);
}

shmddp_status_t shmddp_unique_id_to_string(const shmddp_unique_id_t *id, char *buf, size_t len)
{
  if (!id || !buf) return fail(SHMDDP_ERR_INVALID, "shmddp_unique_id_to_string: NULL argument");
  if (len < SHMDDP_UNIQUE_ID_STRLEN)
    return fail(SHMDDP_ERR_INVALID, "shmddp_unique_id_to_string: the buffer has %zu bytes; it "
                "needs SHMDDP_UNIQUE_ID_STRLEN (%d)", len, SHMDDP_UNIQUE_ID_STRLEN);
  static const char hex[] = "0123456789abcdef";
  const unsigned char *b = (const unsigned char *)id->internal;
  for (size_t i = 0; i < sizeof id->internal; i++) {
    buf[2 * i] = hex[b[i] >> 4];
    buf[2 * i + 1] = hex[b[i] & 15];
  }
  buf[2 * sizeof id->internal] = 0;
  return SHMDDP_OK;
}

static int hexval(char c)
{
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* SHMDDP_OK when the id was made by shmddp_get_unique_id (on this machine, if check_boot). */
static shmddp_status_t check_id(const shmddp_unique_id_t *id, int check_boot)
{
  id_layout_t l;
  memcpy(&l, id->internal, sizeof l);
  if (memcmp(l.magic, ID_MAGIC, sizeof l.magic) != 0 || l.version != ID_VERSION)
    return fail(SHMDDP_ERR_INVALID, "not a shmddp unique id (make one with "
                "shmddp_get_unique_id on one rank and pass it to the others)");
  static const unsigned char zero[16];
  unsigned char mine[16];
  boot_id(mine);
  if (check_boot && memcmp(l.boot, zero, 16) != 0 && memcmp(mine, zero, 16) != 0 &&
      memcmp(l.boot, mine, 16) != 0)
    return fail(SHMDDP_ERR_INVALID, "this unique id was made on another machine (or before a "
                "reboot): the ranks of a shmddp group must run on one machine");
  return SHMDDP_OK;
}

shmddp_status_t shmddp_unique_id_from_string(const char *s, shmddp_unique_id_t *id)
{
  if (!s || !id) return fail(SHMDDP_ERR_INVALID, "shmddp_unique_id_from_string: NULL argument");
  size_t n = strlen(s);
  if (n != 2 * sizeof id->internal)
    return fail(SHMDDP_ERR_INVALID, "a unique id is %zu hex digits; this text has %zu characters",
                2 * sizeof id->internal, n);
  shmddp_unique_id_t tmp;
  for (size_t i = 0; i < sizeof tmp.internal; i++) {
    int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return fail(SHMDDP_ERR_INVALID, "a unique id is hex digits; character %zu is '%c'",
                  hi < 0 ? 2 * i : 2 * i + 1, hi < 0 ? s[2 * i] : s[2 * i + 1]);
    tmp.internal[i] = (char)(hi << 4 | lo);
  }
  shmddp_status_t st = check_id(&tmp, 0);
  if (st != SHMDDP_OK) return st;
  *id = tmp;
  return SHMDDP_OK;
}

shmddp_status_t shmddp_comm_init_rank(shmddp_comm_t **comm, int nranks, shmddp_unique_id_t id,
                                      int rank)
{
  return shmddp_comm_init_rank_config(comm, nranks, id, rank, NULL);
}

shmddp_status_t shmddp_comm_init_rank_config(shmddp_comm_t **out, int nranks,
                                             shmddp_unique_id_t id, int rank,
                                             const shmddp_comm_config_t *config)
{
  tl_error[0] = 0;
  if (!out) return fail(SHMDDP_ERR_INVALID, "shmddp_comm_init_rank: comm is NULL");
  *out = NULL;
  shmddp_comm_config_t cfg = SHMDDP_COMM_CONFIG_INIT;
  if (config) cfg = *config;
  if (nranks < 1 || nranks > SHMDDP_MAX_RANKS)
    return fail(SHMDDP_ERR_INVALID, "shmddp_comm_init_rank: nranks %d is out of range (1 to %d)",
                nranks, SHMDDP_MAX_RANKS);
  if (rank < 0 || rank >= nranks)
    return fail(SHMDDP_ERR_INVALID, "shmddp_comm_init_rank: rank %d is out of range: ranks of "
                "this group are 0 to %d", rank, nranks - 1);
  if (cfg.timeout_s < 0)
    return fail(SHMDDP_ERR_INVALID, "shmddp_comm_init_rank: timeout_s must not be negative");
  shmddp_status_t st = check_id(&id, 1);
  if (st != SHMDDP_OK) return st;

  char err[512];
  shm_join_args_t a = {.nranks = nranks, .rank = rank, .slot_bytes = cfg.slot_bytes,
                       .timeout_s = cfg.timeout_s, .watch = cfg.parent ? cfg.parent->seg : NULL};
  shmddp_algo_t algo;
  st = coll_env_settings(&a.slot_bytes, &a.timeout_s, &algo, err, sizeof err);
  if (st != SHMDDP_OK) return fail(st, "%s", err);
  int device = coll_device_resolve(cfg.device, err, sizeof err);
  if (device < -1) return fail(SHMDDP_ERR_INVALID, "%s", err);
  a.device_mode = device >= 0;
  id_layout_t l;
  memcpy(&l, id.internal, sizeof l);
  keyed(&l, "shmddp segment proof", NULL, 0, a.auth, sizeof a.auth);
  coll_id_segment_name(&id, a.name, sizeof a.name);

  struct coll_joined *j = calloc(1, sizeof *j);
  shmddp_comm_t *comm = calloc(1, sizeof *comm);
  if (!j || !comm) {
    free(j);
    free(comm);
    return fail(SHMDDP_ERR_NOMEM, "shmddp_comm_init_rank: out of memory");
  }
  st = shm_join(&j->seg, &a, err, sizeof err);
  if (st != SHMDDP_OK) {
    free(j);
    free(comm);
    return fail(st, "%s", err);
  }
  coll_comm_init(comm, &j->seg, 0, rank, device, a.timeout_s);
  comm->algo = algo;
  comm->joined = j;
  st = shm_watch_start(&j->seg, rank, &j->watch, err, sizeof err);
  if (st != SHMDDP_OK) {
    shm_abort(&j->seg, st, rank, "rank %d: %s", rank, err);
    snprintf(comm->last_error, sizeof comm->last_error, "%s", err);
  } else if (device >= 0) {
    st = coll_device_attach(comm, device, cfg.quiet);
  }
  if (st != SHMDDP_OK) {
    fail(st, "%s", comm->last_error);
    shmddp_comm_destroy(comm);
    return st;
  }
  *out = comm;
  return SHMDDP_OK;
}

shmddp_status_t shmddp_comm_destroy(shmddp_comm_t *comm)
{
  if (!comm) return SHMDDP_OK;
  if (!comm->joined)
    return fail(SHMDDP_ERR_INVALID, "shmddp_comm_destroy: this communicator was not made by "
                "shmddp_comm_init_rank (free duplicates with shmddp_comm_free; the launcher's "
                "communicator ends with its rank function)");
  struct coll_joined *j = comm->joined;
  coll_comm_teardown(comm);
  shm_watch_stop(j->watch);
  shm_leave(&j->seg, comm->rank);
  free(j);
  free(comm);
  return SHMDDP_OK;
}

shmddp_status_t shmddp_comm_abort(shmddp_comm_t *comm)
{
  if (!comm) return fail(SHMDDP_ERR_INVALID, "shmddp_comm_abort: comm is NULL");
  shm_abort(comm->seg, SHMDDP_ERR_ABORTED, comm->rank,
            "rank %d aborted the communicator (shmddp_comm_abort)", comm->rank);
  return SHMDDP_OK;
}

shmddp_status_t shmddp_comm_check(const shmddp_comm_t *comm, char *why, size_t len)
{
  if (!comm) return fail(SHMDDP_ERR_INVALID, "shmddp_comm_check: comm is NULL");
  char msg[SHM_ABORT_MSG_BYTES];
  shmddp_status_t st = shm_abort_status(comm->seg, msg, sizeof msg);
  if (why && len) snprintf(why, len, "%s", st == SHMDDP_OK ? "" : msg);
  return st;
}

#if !HAVE_CUDA
int coll_device_resolve(int requested, char *err, size_t errlen)
{
  if (requested >= 0) {
    snprintf(err, errlen, "shmddp_comm_init_rank: device %d was asked for, but this shmddp was "
             "built without CUDA (use SHMDDP_DEVICE_NONE or SHMDDP_DEVICE_CURRENT)", requested);
    return -2;
  }
  return -1;
}

shmddp_status_t coll_device_attach(shmddp_comm_t *comm, int device, int quiet)
{
  return coll_error(comm, SHMDDP_ERR_UNSUPPORTED, "built without CUDA");
}

int coll_device_pci_bus_id(int device, char *buf, size_t len, char *err, size_t errlen)
{
  (void)device;
  (void)err;
  (void)errlen;
  if (len) buf[0] = '\0';
  return 1; /* no GPU in this build */
}
#endif
