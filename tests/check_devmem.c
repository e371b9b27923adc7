/* check_devmem.c — the device-memory sharing protocol (collectives/devmem/devmem.h) and its socket
 * mesh (shm/fdpass.h) on the CPU: ranks are forked processes, "device memory" is the fake driver's
 * shared memory files (tests/devmem_fake.h), so exports, descriptor passing, mappings, retirements
 * and the range checks all run for real; a stale mapping would read stale bytes. The GPU runs the
 * same code with the CUDA driver (tests/check_devmem_cuda.c). */
#include "config.h"

#include <check.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/devmem/devmem.h"
#include "collectives/devmem/devmem_impl.h"
#include "shm/timeutil.h"
#include "tests/devmem_fake.h"
#include "tests/suite_main.h"

#define MAXN 4
#define BOUND_S 120.0

typedef struct {
  _Atomic int arrived, generation;
  unsigned char name[MAXN][FDPASS_NAME_BYTES];
  size_t name_len[MAXN];
  devmem_desc_t desc[MAXN];
  int failed[MAXN];
  char msg[MAXN][400];
} shared_t;

static shared_t *sh;
static int N;

/* Every rank has arrived (bounded: a rank that failed ends the wait instead of hanging it). */
static int barrier(void)
{
  int g = atomic_load(&sh->generation);
  if (atomic_fetch_add(&sh->arrived, 1) == N - 1) {
    atomic_store(&sh->arrived, 0);
    atomic_fetch_add(&sh->generation, 1);
    return 0;
  }
  double deadline = shm_now() + BOUND_S;
  for (long spins = 0; atomic_load(&sh->generation) == g; spins++) {
    if (shm_now() > deadline) return -1;
    for (int r = 0; r < N; r++)
      if (sh->failed[r]) return -1; /* a rank gave up: no one else will come */
    if (spins > 100) shm_sleep(20e-6);
    else sched_yield();
  }
  return 0;
}

static int mesh_up(int rank, fdpass_t **mesh, char *err, size_t len)
{
  if (fdpass_listen(mesh, rank, N, sh->name[rank], &sh->name_len[rank], err, len) != 0) return -1;
  if (barrier() != 0) return -1;
  for (int p = 0; p < rank; p++)
    if (fdpass_connect(*mesh, p, sh->name[p], sh->name_len[p], err, len) != 0) return -1;
  if (barrier() != 0) return -1;
  unsigned want = 0;
  for (int p = rank + 1; p < N; p++) want |= 1u << p;
  return fdpass_accept(*mesh, want, 10.0, err, len);
}

typedef int (*scenario_fn)(int rank, devmem_t *m, fdpass_t *mesh, char *msg, size_t len);

static int left; /* this rank has left the group (leave()): its state is gone */

/* What a rank's teardown does (the communicator destroyed): its mappings dropped, then its end of
 * the sockets closed. */
static void leave(devmem_t *m, fdpass_t *mesh)
{
  devmem_free(m);
  fdpass_close(mesh);
  left = 1;
}

/* Fork n ranks running fn (the exports of each capped at max_exports); every rank must succeed. */
static void run_group(int n, size_t max_exports, scenario_fn fn)
{
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(sh, MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  N = n;
  pid_t pid[MAXN];
  for (int r = 0; r < n; r++) {
    pid[r] = fork();
    ck_assert_int_ge(pid[r], 0);
    if (pid[r] == 0) {
      fdpass_t *mesh = NULL;
      int rc = mesh_up(r, &mesh, sh->msg[r], sizeof sh->msg[r]);
      devmem_t *m = rc == 0 ? devmem_new(&fake_driver, mesh, r, n, max_exports) : NULL;
      if (m) rc = fn(r, m, mesh, sh->msg[r], sizeof sh->msg[r]);
      else rc = -1;
      sh->failed[r] = rc != 0;
      if (!left) {
        devmem_free(m);
        fdpass_close(mesh);
      }
      _exit(rc != 0);
    }
  }
  for (int r = 0; r < n; r++) {
    int ws = 0;
    double deadline = shm_now() + BOUND_S + 30;
    while (waitpid(pid[r], &ws, WNOHANG) == 0) {
      if (shm_now() > deadline) kill(pid[r], SIGKILL);
      shm_sleep(0.002);
    }
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "rank %d: %s", r, sh->msg[r]);
  }
  munmap(sh, sizeof *sh);
}

static void fill(void *buf, size_t len, int it, int rank)
{
  uint32_t *w = buf;
  for (size_t i = 0; i < len / 4; i++) w[i] = (uint32_t)it * 1000003u + (uint32_t)rank * 7919u + (uint32_t)i;
}

static size_t wrong(const void *buf, size_t len, int it, int rank)
{
  const uint32_t *w = buf;
  size_t bad = 0;
  for (size_t i = 0; i < len / 4; i++)
    bad += w[i] != (uint32_t)it * 1000003u + (uint32_t)rank * 7919u + (uint32_t)i;
  return bad;
}

#define FAIL(...) return snprintf(msg, len, __VA_ARGS__), -1

/* One exchange: publish [buf, +blen) as exchange k, then read every peer's through the mapping
 * and compare with what the peer wrote for iteration it. */
static int exchange(int rank, devmem_t *m, uint64_t k, void *buf, size_t blen, int it,
                    char *msg, size_t len)
{
  if (devmem_export(m, k, buf, blen, &sh->desc[rank], msg, len) != 0) return -1;
  if (barrier() != 0) FAIL("barrier");
  if (devmem_begin_imports(m, k, 1, msg, len) != 0) return -1;
  for (int p = 0; p < N; p++) {
    if (p == rank) continue;
    void *at = NULL;
    if (devmem_import(m, k, p, &sh->desc[p], blen, &at, msg, len) != 0) return -1;
    size_t bad = wrong(at, blen, it, p);
    if (bad) FAIL("exchange %llu: %zu words of rank %d's buffer wrong (stale mapping?)",
                  (unsigned long long)k, bad, p);
  }
  return barrier() == 0 ? 0 : (snprintf(msg, len, "barrier"), -1);
}

/* Free and reallocate 1000 times (cudaMalloc-like and cuMem-like, the latter crossing chunks):
 * every exchange reads the new data, and the peer mappings never pile up. */
static int sc_churn(int rank, devmem_t *m, fdpass_t *mesh, char *msg, size_t len)
{
  const size_t chunk = 64 << 10;
  int most = 0;
  for (int it = 0; it < 1000; it++) {
    int vmm = (it & 2) != 0; /* two of each in a row: a new allocation where the last was */
    size_t alloc = vmm ? 3 * chunk : 96 << 10, blen = vmm ? 2 * chunk : 50000;
    char *base = vmm ? fake_alloc_vmm(3, chunk) : fake_alloc(DEVMEM_LEGACY, alloc);
    if (!base) FAIL("allocation failed");
    char *buf = base + (vmm ? chunk / 2 : 100);
    fill(buf, blen, it, rank);
    if (exchange(rank, m, (uint64_t)it + 1, buf, blen, it, msg, len) != 0) return -1;
    if (fake_live_mappings() > most) most = fake_live_mappings();
    fake_free(base, alloc);
  }
  devmem_stats_t s;
  devmem_stats(m, &s);
  /* At most one buffer per peer mapped at a time: 3 chunks of the VMM one. */
  if (most > 3 * (N - 1) || s.imports > (size_t)(N - 1) || s.exports > 1)
    FAIL("mappings grew: %d live at most, %zu imports, %zu exports at the end", most, s.imports,
         s.exports);
  if (s.exports_made != 1000 || s.retired_sent < 999 || s.retired_applied < 999 * (uint64_t)(N - 1))
    FAIL("exports %llu, retirements sent %llu, applied %llu", (unsigned long long)s.exports_made,
         (unsigned long long)s.retired_sent, (unsigned long long)s.retired_applied);
  return 0;
}

/* More live buffers than the cap: the least recently used export goes, data stays right. */
static int sc_evict(int rank, devmem_t *m, fdpass_t *mesh, char *msg, size_t len)
{
  enum { NB = 8 };
  char *b[NB];
  for (int i = 0; i < NB; i++)
    if (!(b[i] = fake_alloc(DEVMEM_LEGACY, 8192))) FAIL("allocation failed");
  uint64_t k = 0;
  for (int round = 0; round < 4; round++)
    for (int i = 0; i < NB; i++) {
      int it = round * NB + i;
      fill(b[i], 8192, it, rank);
      if (exchange(rank, m, ++k, b[i], 8192, it, msg, len) != 0) return -1;
      devmem_stats_t s;
      devmem_stats(m, &s);
      if (s.exports > 3 || s.imports > 3 * (size_t)(N - 1))
        FAIL("cap 3 exceeded: %zu exports, %zu imports", s.exports, s.imports);
    }
  devmem_stats_t s;
  devmem_stats(m, &s);
  if (s.retired_sent == 0 || s.exports_made != 4 * NB) FAIL("no eviction happened");
  return 0;
}

/* A registered buffer is never evicted; deregistered, peers drop it and the next use exports
 * it anew. */
static int sc_register(int rank, devmem_t *m, fdpass_t *mesh, char *msg, size_t len)
{
  char *a = fake_alloc_vmm(2, 16384);
  uint64_t reg = 0, k = 0;
  devmem_kind_t kind;
  if (!a || devmem_register(m, a, 32768, &reg, &kind, msg, len) != 0) return -1;
  if (kind != DEVMEM_VMM) FAIL("registered memory is %s", devmem_kind_name(kind));
  uint64_t first = 0;
  for (int i = 0; i < 6; i++) {
    fill(a, 32768, 2 * i, rank);
    if (exchange(rank, m, ++k, a, 32768, 2 * i, msg, len) != 0) return -1;
    if (!first) first = sh->desc[rank].export_id;
    if (sh->desc[rank].export_id != first) FAIL("the registered buffer was exported again");
    char *b = fake_alloc(DEVMEM_LEGACY, 4096); /* kept live: evicts the other exports */
    fill(b, 4096, 2 * i + 1, rank);
    if (exchange(rank, m, ++k, b, 4096, 2 * i + 1, msg, len) != 0) return -1;
  }
  if (devmem_deregister(m, reg, msg, len) != 0) return -1;
  if (devmem_deregister(m, reg, msg, len) == 0) FAIL("a second deregistration was accepted");
  fill(a, 32768, 99, rank);
  if (exchange(rank, m, ++k, a, 32768, 99, msg, len) != 0) return -1;
  if (sh->desc[rank].export_id == first) FAIL("deregistered, yet the export lives on");
  devmem_stats_t s;
  devmem_stats(m, &s);
  if (s.imports > 2 * (size_t)(N - 1)) FAIL("%zu imports with a cap of 2", s.imports);
  return 0;
}

/* A peer that has left the group (its communicator destroyed, its sockets closed) makes no
 * deregistration fail, and the ranks still there get their RETIREs: rank 0 leaves right after
 * the last call, as a faster rank does at the end of a run, then ranks 1 and 2 deregister and
 * make one more call between them. */
static int sc_leave(int rank, devmem_t *m, fdpass_t *mesh, char *msg, size_t len)
{
  const size_t chunk = 16384;
  char *a = fake_alloc_vmm(2, chunk), *b = fake_alloc_vmm(2, chunk);
  uint64_t reg = 0;
  devmem_kind_t kind;
  if (!a || !b) FAIL("allocation failed");
  if (devmem_register(m, a, 2 * chunk, &reg, &kind, msg, len) != 0) return -1;
  fill(a, 2 * chunk, 1, rank);
  if (exchange(rank, m, 1, a, 2 * chunk, 1, msg, len) != 0) return -1;
  if (rank == 0) {
    leave(m, mesh);
    return barrier() == 0 ? 0 : (snprintf(msg, len, "barrier"), -1);
  }
  if (barrier() != 0) FAIL("barrier");
  N = 2; /* ranks 1 and 2 go on; rank 0's socket is closed */
  if (devmem_deregister(m, reg, msg, len) != 0) return -1;
  fake_free(a, 2 * chunk);
  /* One more call of ranks 1 and 2, on a new cuMem-like buffer (its chunks are sent to the
   * remaining peer only): each drops the other's deregistered buffer and reads the new one. */
  int other = rank == 1 ? 2 : 1;
  fill(b, 2 * chunk, 2, rank);
  if (devmem_export(m, 2, b, 2 * chunk, &sh->desc[rank], msg, len) != 0) return -1;
  if (barrier() != 0) FAIL("barrier");
  void *at = NULL;
  if (devmem_begin_imports(m, 2, 1, msg, len) != 0 ||
      devmem_import(m, 2, other, &sh->desc[other], 2 * chunk, &at, msg, len) != 0)
    return -1;
  size_t bad = wrong(at, 2 * chunk, 2, other);
  if (bad) FAIL("%zu words of rank %d's buffer wrong", bad, other);
  devmem_stats_t s;
  devmem_stats(m, &s);
  if (s.retired_applied < 1 || m->nimp[other] != 1)
    FAIL("rank %d's deregistered buffer is still mapped: %llu retirements applied, %zu of its "
         "buffers mapped", other, (unsigned long long)s.retired_applied, m->nimp[other]);
  return barrier() == 0 ? 0 : (snprintf(msg, len, "barrier"), -1);
}

/* More retirements between two calls than a socket holds (registered, deregistered and freed
 * 3000 times, as an allocator that releases its cache does): none fails, and the peer receives
 * them all over the next calls. */
static int sc_backlog(int rank, devmem_t *m, fdpass_t *mesh, char *msg, size_t len)
{
  enum { NREG = 3000 };
  if (rank == 0)
    for (int i = 0; i < NREG; i++) {
      char *p = fake_alloc(DEVMEM_LEGACY, 4096);
      uint64_t reg = 0;
      devmem_kind_t kind;
      if (!p) FAIL("allocation %d failed", i);
      if (devmem_register(m, p, 4096, &reg, &kind, msg, len) != 0 ||
          devmem_deregister(m, reg, msg, len) != 0) {
        size_t at = strlen(msg);
        snprintf(msg + at, len - at, " (registration %d)", i);
        return -1;
      }
      fake_free(p, 4096);
    }
  char *buf = fake_alloc(DEVMEM_LEGACY, 8192);
  if (!buf) FAIL("allocation failed");
  for (int k = 1; k <= 64; k++) {
    fill(buf, 8192, k, rank);
    if (exchange(rank, m, (uint64_t)k, buf, 8192, k, msg, len) != 0) return -1;
  }
  devmem_stats_t s;
  devmem_stats(m, &s);
  if (rank == 0 && s.unsent != 0) FAIL("%zu retirements never sent", s.unsent);
  if (rank == 1 && s.retired_applied < NREG)
    FAIL("%llu of %d retirements arrived", (unsigned long long)s.retired_applied, NREG);
  return 0;
}

/* A cuMem-like buffer of more chunks than a socket holds: staged for that call instead of an
 * error, and the chunks its peer received are let go at the following calls. */
static int sc_many_chunks(int rank, devmem_t *m, fdpass_t *mesh, char *msg, size_t len)
{
  enum { NCHUNK = 1000 };
  char *big = rank == 0 ? fake_alloc_vmm(NCHUNK, 4096) : fake_alloc(DEVMEM_LEGACY, 4096);
  if (!big) FAIL("allocation failed");
  if (devmem_export(m, 1, big, rank == 0 ? NCHUNK * 4096 : 4096, &sh->desc[rank], msg, len) != 0)
    return -1;
  if (barrier() != 0) FAIL("barrier");
  if (devmem_begin_imports(m, 1, 1, msg, len) != 0) return -1;
  if (sh->desc[0].kind != DEVMEM_PRIVATE)
    FAIL("a buffer of %d chunks was shared as %s", NCHUNK, devmem_kind_name(sh->desc[0].kind));
  if (barrier() != 0) FAIL("barrier");
  char *buf = fake_alloc(DEVMEM_LEGACY, 8192);
  for (int k = 2; k <= 4; k++) {
    fill(buf, 8192, k, rank);
    if (exchange(rank, m, (uint64_t)k, buf, 8192, k, msg, len) != 0) return -1;
  }
  devmem_stats_t s;
  devmem_stats(m, &s);
  if (s.pending != 0 || s.unsent != 0)
    FAIL("%zu messages still pending, %zu unsent", s.pending, s.unsent);
  return 0;
}

/* Buffers inside one exported span reuse it; a buffer crossing three chunks reads right. */
static int sc_span(int rank, devmem_t *m, fdpass_t *mesh, char *msg, size_t len)
{
  const size_t chunk = 32768;
  char *seg = fake_alloc_vmm(4, chunk);
  if (!seg) FAIL("allocation failed");
  fill(seg + chunk + 100, 2 * chunk, 1, rank);
  if (exchange(rank, m, 1, seg + chunk + 100, 2 * chunk, 1, msg, len) != 0) return -1;
  uint64_t id = sh->desc[rank].export_id;
  fill(seg + 2 * chunk + 8, 1000, 2, rank);
  if (exchange(rank, m, 2, seg + 2 * chunk + 8, 1000, 2, msg, len) != 0) return -1;
  if (sh->desc[rank].export_id != id) FAIL("a buffer inside an exported span was exported again");
  fill(seg + 4, 4000, 3, rank);
  if (exchange(rank, m, 3, seg + 4, 4000, 3, msg, len) != 0) return -1;
  if (sh->desc[rank].export_id == id) FAIL("chunk 0 is not in the first export");
  return 0;
}

/* Memory that cannot be shared is said to be so; peers in this process take the pointer after
 * checking it. */
static int sc_private(int rank, devmem_t *m, fdpass_t *mesh, char *msg, size_t len)
{
  char *p = fake_alloc(DEVMEM_PRIVATE, 4096);
  devmem_desc_t d;
  if (devmem_export(m, 1, p, 4096, &d, msg, len) != 0) return -1;
  if (d.kind != DEVMEM_PRIVATE) FAIL("private memory exported as %u", d.kind);
  char host[64];
  if (devmem_export(m, 1, host, sizeof host, &d, msg, len) == 0) FAIL("host memory exported");
  if (devmem_export(m, 1, p + 4000, 200, &d, msg, len) == 0) FAIL("a buffer past its end exported");
  for (int q = 0; q < N; q++) devmem_set_local(m, q, 1);
  if (devmem_export(m, 1, p, 4096, &d, msg, len) != 0 || d.kind != DEVMEM_LOCAL)
    FAIL("with every peer in this process the buffer is %u", d.kind);
  void *at = NULL;
  int peer = rank == 0 ? 1 : 0;
  if (devmem_import(m, 1, peer, &d, 4096, &at, msg, len) != 0 || at != p) return -1;
  if (devmem_import(m, 1, peer, &d, 4097, &at, msg, len) == 0) FAIL("a local buffer read past its end");
  d.ptr = (uint64_t)(uintptr_t)host;
  if (devmem_import(m, 1, peer, &d, 64, &at, msg, len) == 0) FAIL("a local host pointer accepted");
  return 0;
}

/* Records and messages from a peer are checked: offsets past the export, kinds another process
 * cannot map, ids never sent, malformed socket messages. */
static int sc_crafted(int rank, devmem_t *m, fdpass_t *mesh, char *msg, size_t len)
{
  char *p = fake_alloc(DEVMEM_LEGACY, 65536);
  if (devmem_export(m, 1, p, 65536, &sh->desc[rank], msg, len) != 0) return -1;
  /* The second barrier: rank 1 has drained its socket before rank 0 sends the bad message. */
  if (barrier() != 0 || devmem_begin_imports(m, 1, 1, msg, len) != 0 || barrier() != 0)
    FAIL("start");
  if (rank == 0) {
    devmem_msg_t bad = {DEVMEM_MSG_MAGIC, DEVMEM_MSG_CHUNK, 7, 0, 0, 1, 4096, 8192, 8192};
    int fd = memfd_create("x", MFD_CLOEXEC);
    if (fdpass_send(mesh, 1, &bad, sizeof bad, fd, msg, len) != 0) return -1;
    close(fd);
    return barrier();
  }
  devmem_desc_t d = sh->desc[0];
  void *at = NULL;
  char e[256];
  if (devmem_import(m, 1, 0, &d, 65536, &at, msg, len) != 0) return -1;
  if (devmem_import(m, 1, 0, &d, 65537, &at, e, sizeof e) == 0 || !strstr(e, "outside"))
    FAIL("65537 bytes of a 65536-byte export accepted");
  d.offset = ~0ULL - 10;
  if (devmem_import(m, 1, 0, &d, 100, &at, e, sizeof e) == 0) FAIL("a huge offset accepted");
  d = sh->desc[0];
  d.kind = DEVMEM_LOCAL;
  if (devmem_import(m, 1, 0, &d, 100, &at, e, sizeof e) == 0) FAIL("a LOCAL record from another process accepted");
  d.kind = DEVMEM_VMM;
  d.export_id = 12345;
  if (devmem_import(m, 1, 0, &d, 100, &at, e, sizeof e) == 0) FAIL("an export never sent accepted");
  if (barrier() != 0) FAIL("barrier");
  if (devmem_begin_imports(m, 2, 1, e, sizeof e) == 0 || !strstr(e, "malformed"))
    FAIL("a chunk past its export's end accepted: %s", e);
  return 0;
}

#define GROUP_TEST(name, n, cap, fn)                                                          \
  START_TEST(name) { run_group(n, cap, fn); }                                                 \
  END_TEST

GROUP_TEST(churn_2_ranks, 2, 0, sc_churn)
GROUP_TEST(churn_3_ranks, 3, 0, sc_churn)
GROUP_TEST(eviction_beyond_the_cap, 3, 3, sc_evict)
GROUP_TEST(registration_pins_and_releases, 2, 2, sc_register)
GROUP_TEST(peer_left_before_deregister, 3, 0, sc_leave)
GROUP_TEST(more_retirements_than_a_socket_holds, 2, 0, sc_backlog)
GROUP_TEST(more_chunks_than_a_socket_holds, 2, 0, sc_many_chunks)
GROUP_TEST(vmm_spans_across_chunks, 3, 0, sc_span)
GROUP_TEST(private_and_local_memory, 2, 0, sc_private)
GROUP_TEST(crafted_records_refused, 2, 0, sc_crafted)

/* A descriptor passed between two forked processes refers to the same file. */
static int sc_fd(int rank, devmem_t *m, fdpass_t *mesh, char *msg, size_t len)
{
  if (rank == 0) {
    int fd = memfd_create("x", MFD_CLOEXEC);
    if (fd < 0 || write(fd, "shared", 6) != 6) FAIL("memfd");
    int rc = fdpass_send(mesh, 1, "hi", 2, fd, msg, len);
    close(fd);
    return rc == 0 && barrier() == 0 ? barrier() : -1; /* stay until rank 1 has checked */
  }
  if (barrier() != 0) FAIL("barrier");
  char buf[8], text[8] = {0};
  size_t n = 0;
  int fd = -1;
  if (fdpass_recv(mesh, 0, buf, sizeof buf, &n, &fd, msg, len) != 1 || n != 2 || fd < 0)
    FAIL("nothing received");
  if (pread(fd, text, 6, 0) != 6 || strcmp(text, "shared") != 0) FAIL("the file differs");
  close(fd);
  if (fdpass_recv(mesh, 0, buf, sizeof buf, &n, &fd, msg, len) != 0) FAIL("a second message");
  return barrier();
}
GROUP_TEST(descriptor_passing, 2, 0, sc_fd)

/* A process of another user that connects is not taken for the expected rank. */
START_TEST(other_user_refused)
{
  if (geteuid() != 0) {
    printf("other_user_refused: not root, cannot act as another user; the check is skipped\n");
    return;
  }
  fdpass_t *m = NULL;
  unsigned char name[FDPASS_NAME_BYTES];
  size_t nl = 0;
  char err[256];
  ck_assert_int_eq(fdpass_listen(&m, 0, 2, name, &nl, err, sizeof err), 0);
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    fdpass_t *c = NULL;
    unsigned char n2[FDPASS_NAME_BYTES];
    size_t l2;
    if (fdpass_listen(&c, 1, 2, n2, &l2, err, sizeof err) != 0) _exit(4);
    /* The connector checks the listener too: root's listener is refused here. */
    _exit(fdpass_connect(c, 0, name, nl, err, sizeof err) == 0 ? 0 : 5);
  }
  int ws = 0;
  waitpid(pid, &ws, 0);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 5, "another user's connect: status %d", ws);
  ck_assert_int_ne(fdpass_accept(m, 2u, 0.5, err, sizeof err), 0);
  ck_assert_msg(!fdpass_has(m, 1), "a connection from another user was taken for rank 1");
  fdpass_close(m);
}
END_TEST

static Suite *devmem_suite(const suite_env_t *env)
{
  Suite *s = suite_create("devmem");
  TCase *tc = SUITE_CASE(s, "protocol", churn_2_ranks, churn_3_ranks, eviction_beyond_the_cap,
                         registration_pins_and_releases, peer_left_before_deregister,
                         more_retirements_than_a_socket_holds, more_chunks_than_a_socket_holds,
                         vmm_spans_across_chunks, private_and_local_memory, crafted_records_refused,
                         descriptor_passing, other_user_refused);
  tcase_set_timeout(tc, 240);
  return s;
}

SUITE_MAIN("check_devmem", devmem_suite, SUITE_CPU_ONLY)
