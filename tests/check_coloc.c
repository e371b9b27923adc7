/* check_coloc.c — the co-located path's logic on the CPU: the placement of ranks on devices, and
 * the event protocol (collectives/coloc/coloc.c) run by forked ranks over a simulated transport
 * whose "events" remember the call of their latest record, so every wait and query is checked
 * against the record it must see (an event recorded again too early is caught), and whose "kernel"
 * is the leader's jobs run on the host (collectives/coloc/coloc_jobs.c, the GPU kernel's
 * reference), every collective in turn: a rank that returns before the work is done, or a leader
 * that reads an input already overwritten, gives a wrong result. A simulated record completes a
 * random time after it is made, as a GPU's would: a rank that waits on the host must have seen what
 * it waits for complete (the leader every READY before its work, a member every leader's DONE
 * before it returns). Every wait choice (host, stream, leader, and ranks with different choices)
 * runs every placement. Ranks sleep at random points to vary the interleavings. Also: a dead leader
 * or member (before its call, or after publishing an event that never completes), a mismatched
 * call, restart from the published words, and protocols without their DONE wait, on the stream and
 * on the host, which these checks catch. The jobs of every collective are also checked alone
 * against references, for every placement, root and in-place layout.
 * Buffers: every call gets a new allocation per rank, freed as soon as the call returns (as a
 * caching allocator may), and the rendezvous opens every peer's on the host the way the CUDA
 * transport's exchange does: for ranks in separate processes a legacy handle of the fake driver
 * (tests/devmem_fake.h), which refuses a handle of freed memory as CUDA does; for ranks that are
 * threads of one process the pointer's classification, which freed memory fails. A member that
 * opens its peers' buffers only once its leader has returned (or is provably waiting for it)
 * replays deterministically the interleaving in which a leader freed a buffer a member was
 * still about to open. */
#include "config.h"

#include <check.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collectives/coloc/coloc.h"
#include "collectives/coloc/coloc_jobs.h"
#include "collectives/reduce/reduce_cpu.h"
#include "shm/abort.h"
#include "shm/wait.h"
#include "tests/devmem_fake.h"
#include "tests/failures.h"
#include "tests/suite_main.h"
#include "tests/testutil.h"

/* ---------------- placement ---------------- */

typedef struct {
  const char *name;
  int nranks;
  const char *keys[SHMDDP_MAX_RANKS];
  int ok, ngroups, shared;
  uint32_t leaders;
  uint32_t members[4];
  const char *text;
} plan_case_t;

static const plan_case_t plan_cases[] = {
  {.name = "two ranks on one GPU", .nranks = 2, .keys = {"A", "A"}, .ok = 0, .ngroups = 1,
   .shared = 1, .leaders = 0x1, .members = {0x3}, .text = "ranks 0, 1 share G0"},
  {.name = "four ranks round-robin on two GPUs", .nranks = 4, .keys = {"A", "B", "A", "B"},
   .ok = 0, .ngroups = 2, .shared = 1, .leaders = 0x3, .members = {0x5, 0xa},
   .text = "ranks 0, 2 share G0; ranks 1, 3 share G1"},
  {.name = "three ranks, three GPUs", .nranks = 3, .keys = {"A", "B", "C"}, .ok = 0,
   .ngroups = 3, .shared = 0, .leaders = 0x7, .members = {0x1, 0x2, 0x4},
   .text = "rank 0 alone on G0; rank 1 alone on G1; rank 2 alone on G2"},
  {.name = "uneven: three and one", .nranks = 4, .keys = {"B", "A", "B", "B"}, .ok = 0,
   .ngroups = 2, .shared = 1, .leaders = 0x3, .members = {0xd, 0x2},
   .text = "ranks 0, 2, 3 share G0; rank 1 alone on G1"},
  {.name = "eight on one", .nranks = 8, .keys = {"A", "A", "A", "A", "A", "A", "A", "A"},
   .ok = 0, .ngroups = 1, .shared = 1, .leaders = 0x1, .members = {0xff},
   .text = "ranks 0, 1, 2, 3, 4, 5, 6, 7 share G0"},
  {.name = "one rank", .nranks = 1, .keys = {"A"}, .ok = 0, .ngroups = 1, .shared = 0,
   .leaders = 0x1, .members = {0x1}, .text = "rank 0 alone on G0"},
  {.name = "an empty key", .nranks = 2, .keys = {"A", ""}, .ok = -1},
  {.name = "no ranks", .nranks = 0, .ok = -1},
  {.name = "too many ranks", .nranks = SHMDDP_MAX_RANKS + 1, .ok = -1},
};

START_TEST(placement_groups_ranks_by_device)
{
  case_failures_t f;
  cf_init(&f);
  static const char *const names[] = {"G0", "G1", "G2", "G3"};
  for (size_t i = 0; i < sizeof plan_cases / sizeof plan_cases[0]; i++) {
    const plan_case_t *c = &plan_cases[i];
    char keys[SHMDDP_MAX_RANKS + 1][COLOC_KEY_BYTES];
    memset(keys, 0, sizeof keys);
    for (int r = 0; r < c->nranks && r < SHMDDP_MAX_RANKS; r++)
      if (c->keys[r]) snprintf(keys[r], COLOC_KEY_BYTES, "%s", c->keys[r]);
    coloc_plan_t p;
    int rc = coloc_plan(&p, c->nranks, (const char(*)[COLOC_KEY_BYTES])keys);
    CF_CHECK(&f, rc == c->ok, "%s: returned %d, want %d", c->name, rc, c->ok);
    if (rc != 0 || c->ok != 0) continue;
    CF_CHECK(&f, p.ngroups == c->ngroups, "%s: %d groups, want %d", c->name, p.ngroups, c->ngroups);
    CF_CHECK(&f, p.shared == c->shared, "%s: shared %d", c->name, p.shared);
    CF_CHECK(&f, p.leaders == c->leaders, "%s: leaders %#x, want %#x", c->name, p.leaders,
             c->leaders);
    for (int g = 0; g < c->ngroups; g++) {
      CF_CHECK(&f, p.members[g] == c->members[g], "%s: group %d members %#x, want %#x", c->name,
               g, p.members[g], c->members[g]);
      CF_CHECK(&f, (p.leaders >> p.leader[g] & 1) && p.group[p.leader[g]] == g &&
               (p.members[g] & ((1u << p.leader[g]) - 1)) == 0,
               "%s: group %d's leader %d is not its lowest rank", c->name, g, p.leader[g]);
    }
    char text[256];
    coloc_describe(&p, names, text, sizeof text);
    CF_CHECK(&f, strcmp(text, c->text) == 0, "%s: described as \"%s\", want \"%s\"", c->name, text,
             c->text);
  }
  /* A key without its terminating NUL (as a corrupt segment could hold) is refused. */
  char keys[2][COLOC_KEY_BYTES];
  memset(keys, 'A', sizeof keys);
  coloc_plan_t p;
  CF_CHECK(&f, coloc_plan(&p, 2, (const char(*)[COLOC_KEY_BYTES])keys) == -1,
           "an unterminated key was accepted");
  CF_ASSERT_NONE(&f, "placement");
}
END_TEST

/* Under MPS: "every sharing rank under MPS" holds only when every rank that shares a GPU says
 * MPS; a rank alone on its GPU does not count. The path is the co-located one either way; capture
 * never takes it. */
typedef struct {
  const char *name;
  int nranks;
  const char *keys[8];
  int mps[8];
  int all_mps;
} mps_case_t;

static const mps_case_t mps_cases[] = {
  {.name = "two on one, both MPS", .nranks = 2, .keys = {"A", "A"}, .mps = {1, 1}, .all_mps = 1},
  {.name = "two on one, one MPS", .nranks = 2, .keys = {"A", "A"}, .mps = {1, 0}, .all_mps = 0},
  {.name = "two on one, none", .nranks = 2, .keys = {"A", "A"}, .mps = {0, 0}, .all_mps = 0},
  {.name = "three and one, the lone rank without", .nranks = 4, .keys = {"B", "A", "B", "B"},
   .mps = {1, 0, 1, 1}, .all_mps = 1},
  {.name = "three and one, a sharing rank without", .nranks = 4, .keys = {"B", "A", "B", "B"},
   .mps = {1, 1, 0, 1}, .all_mps = 0},
  {.name = "nothing shared, all MPS", .nranks = 2, .keys = {"A", "B"}, .mps = {1, 1}, .all_mps = 0},
};

START_TEST(mps_choice)
{
  case_failures_t f;
  cf_init(&f);
  for (size_t i = 0; i < sizeof mps_cases / sizeof mps_cases[0]; i++) {
    const mps_case_t *c = &mps_cases[i];
    char keys[8][COLOC_KEY_BYTES];
    memset(keys, 0, sizeof keys);
    for (int r = 0; r < c->nranks; r++) snprintf(keys[r], COLOC_KEY_BYTES, "%s", c->keys[r]);
    coloc_plan_t p;
    CF_CHECK(&f, coloc_plan(&p, c->nranks, (const char(*)[COLOC_KEY_BYTES])keys) == 0, "%s: plan",
             c->name);
    int all = coloc_all_mps(&p, c->mps);
    CF_CHECK(&f, all == c->all_mps, "%s: all under MPS %d, want %d", c->name, all, c->all_mps);
    /* the co-located path whenever a device is shared, MPS or not; never under capture */
    CF_CHECK(&f, coloc_use_path(&p, 0) == p.shared, "%s: co-located %d, want %d", c->name,
             coloc_use_path(&p, 0), p.shared);
    CF_CHECK(&f, coloc_use_path(&p, 1) == 0, "%s: captured: co-located", c->name);
    /* without SHMDDP_COLOC_WAIT: stream waits only where every sharing rank is under MPS, and
     * then no rank's host waits; otherwise every rank's host waits */
    coloc_wait_t w = coloc_default_wait(all);
    CF_CHECK(&f, w == (c->all_mps ? COLOC_WAIT_STREAM : COLOC_WAIT_HOST), "%s: default wait %s",
             c->name, coloc_wait_name(w));
    for (int r = 0; r < c->nranks; r++)
      CF_CHECK(&f, coloc_host_waits(w, &p, r) == !c->all_mps, "%s: rank %d host waits %d",
               c->name, r, coloc_host_waits(w, &p, r));
  }
  CF_ASSERT_NONE(&f, "mps choice");
}
END_TEST

typedef struct {
  const char *name;
  int nranks;
  const char *keys[SHMDDP_MAX_RANKS];
  int threads; /* the ranks are threads of one process (buffers classified, not opened) */
} placement_t;

static const placement_t placements[] = {
  {"two ranks on one GPU", 2, {"A", "A"}, 0},
  {"three ranks on one GPU", 3, {"A", "A", "A"}, 0},
  {"four ranks round-robin on two GPUs", 4, {"A", "B", "A", "B"}, 0},
  {"three and one", 4, {"A", "A", "B", "A"}, 0},
  {"every rank alone (forced)", 3, {"A", "B", "C"}, 0},
  {"eight on one GPU", 8, {"A", "A", "A", "A", "A", "A", "A", "A"}, 0},
  {"three threads on one GPU", 3, {"A", "A", "A"}, 1},
  {"four threads on two GPUs", 4, {"A", "B", "B", "A"}, 1},
};

/* ---------------- a call's jobs, alone ---------------- */

#define JOB_K 5       /* elements per rank's block */
#define JOB_LEN (SHMDDP_MAX_RANKS * JOB_K + 3) /* a rank's buffer: every block, and a margin */
#define JOB_UNTOUCHED (-7777.0)

typedef struct {
  double a[JOB_LEN], b[JOB_LEN]; /* a rank's two buffers: send in a and recv in b, or both in b */
} job_rank_t;

static const coll_kind_t job_kinds[] = {COLL_ALL_REDUCE, COLL_REDUCE, COLL_REDUCE_SCATTER,
                                        COLL_ALL_GATHER, COLL_BROADCAST, COLL_ALL_TO_ALL,
                                        COLL_GATHER, COLL_SCATTER};

static double job_input(int rank, int i) { return rank * 100.0 + i + 0.25; }

/* Where rank r's send and recv are: apart (a, b), or in place as NCCL lays them out. */
static void job_layout(coll_kind_t kind, int inplace, int r, job_rank_t *m, double **send,
                       double **recv)
{
  *send = m->a;
  *recv = m->b;
  if (!inplace) return;
  switch (kind) {
  case COLL_REDUCE_SCATTER: *send = m->b; *recv = m->b + r * JOB_K; break;
  case COLL_ALL_GATHER:
  case COLL_GATHER: *send = m->b + r * JOB_K; break;
  case COLL_SCATTER: *send = m->b; *recv = m->b + r * JOB_K; break;
  default: *send = m->b; break; /* all-reduce, reduce, broadcast */
  }
}

/* What a correct call writes: into the expected images `want` (recv offsets as in `got`). */
static void job_expect(coll_kind_t kind, int n, int root, job_rank_t *want, job_rank_t *got,
                       double *const *recv)
{
  for (int t = 0; t < n; t++) {
    if ((kind == COLL_REDUCE || kind == COLL_GATHER) && t != root) continue;
    double *out = want[t].b + (recv[t] - got[t].b); /* recv is always in b */
    int len = kind == COLL_ALL_GATHER || kind == COLL_GATHER || kind == COLL_ALL_TO_ALL
                  ? n * JOB_K : JOB_K;
    for (int i = 0; i < len; i++) {
      int q = i / JOB_K, j = i % JOB_K;
      double v = 0;
      switch (kind) {
      case COLL_ALL_REDUCE:
      case COLL_REDUCE:
        for (int r = 0; r < n; r++) v += job_input(r, i);
        break;
      case COLL_REDUCE_SCATTER:
        for (int r = 0; r < n; r++) v += job_input(r, t * JOB_K + i);
        break;
      case COLL_ALL_GATHER:
      case COLL_GATHER: v = job_input(q, j); break;
      case COLL_ALL_TO_ALL: v = job_input(q, t * JOB_K + j); break;
      case COLL_SCATTER: v = job_input(root, t * JOB_K + i); break;
      default: v = job_input(root, i); break;
      }
      out[i] = v;
    }
  }
}

/* One call of kind on placement p: every leader's jobs on the host, then every byte of every
 * rank's buffers against what a correct call leaves there (outputs written, nothing else). */
static void job_case(case_failures_t *f, const placement_t *p, coll_kind_t kind, int root,
                     int inplace)
{
  int n = p->nranks;
  char keys[SHMDDP_MAX_RANKS][COLOC_KEY_BYTES];
  for (int r = 0; r < n; r++) snprintf(keys[r], COLOC_KEY_BYTES, "%s", p->keys[r]);
  coloc_plan_t plan;
  if (coloc_plan(&plan, n, (const char(*)[COLOC_KEY_BYTES])keys) != 0) {
    cf_fail(f, "%s: no plan", p->name);
    return;
  }
  static job_rank_t got[SHMDDP_MAX_RANKS], want[SHMDDP_MAX_RANKS];
  double *send[SHMDDP_MAX_RANKS], *recv[SHMDDP_MAX_RANKS];
  int in_len = kind == COLL_REDUCE_SCATTER || kind == COLL_ALL_TO_ALL || kind == COLL_SCATTER
                   ? n * JOB_K : JOB_K;
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < JOB_LEN; i++) got[r].a[i] = got[r].b[i] = JOB_UNTOUCHED;
    job_layout(kind, inplace, r, &got[r], &send[r], &recv[r]);
    for (int i = 0; i < in_len; i++) send[r][i] = job_input(r, i);
    want[r] = got[r];
  }
  job_expect(kind, n, root, want, got, recv);
  coloc_work_t w = {.kind = kind, .count = JOB_K, .dtype = SHMDDP_F64, .op = SHMDDP_SUM,
                    .root = root, .nranks = n};
  int root_send = kind == COLL_BROADCAST || kind == COLL_SCATTER;
  int root_recv = kind == COLL_REDUCE || kind == COLL_GATHER;
  for (int r = 0; r < n; r++) {
    w.send[r] = root_send && r != root ? NULL : send[r];
    w.recv[r] = root_recv && r != root ? NULL : recv[r];
  }
  char what[160];
  snprintf(what, sizeof what, "%s, %s, root %d%s", p->name, coll_kind_name(kind), root,
           inplace ? ", in place" : "");
  for (int g = 0; g < plan.ngroups; g++) {
    coloc_args_t a;
    w.group = plan.members[g];
    w.slice = g;
    w.nslices = plan.ngroups;
    if (coloc_jobs_build(&w, &a) != 0) {
      cf_fail(f, "%s: group %d: a buffer reported missing", what, g);
      return;
    }
    int concat = kind == COLL_ALL_TO_ALL || kind == COLL_GATHER || kind == COLL_SCATTER;
    CF_CHECK(f, !concat || a.mode == COLOC_CONCAT, "%s: mode %d, not one CONCAT launch",
             what, a.mode);
    CF_CHECK(f, a.njobs >= 0 && a.njobs <= SHMDDP_MAX_RANKS, "%s: %d jobs", what, a.njobs);
    coloc_jobs_run_host(&a);
  }
  int bad = 0, first_rank = -1, first_i = -1;
  const char *first_buf = "";
  for (int r = 0; r < n; r++)
    for (int i = 0; i < JOB_LEN; i++)
      for (int k = 0; k < 2; k++)
        if ((k ? got[r].b[i] != want[r].b[i] : got[r].a[i] != want[r].a[i]) && bad++ == 0) {
          first_rank = r;
          first_i = i;
          first_buf = k ? "recv side" : "send side";
        }
  CF_CHECK(f, bad == 0, "%s: %d values differ from the reference, the first on rank %d, %s "
           "buffer, element %d", what, bad, first_rank, first_buf, first_i);
}

/* Every collective's jobs equal the reference, on every placement, for every root, apart and in
 * place (all-to-all: apart only; it is never in place on device buffers). */
START_TEST(jobs_of_every_collective_equal_the_reference)
{
  case_failures_t f;
  cf_init(&f);
  for (size_t pi = 0; pi < sizeof placements / sizeof placements[0]; pi++)
    for (size_t k = 0; k < sizeof job_kinds / sizeof job_kinds[0]; k++)
      for (int root = 0; root < placements[pi].nranks; root++)
        for (int inplace = 0; inplace < (job_kinds[k] == COLL_ALL_TO_ALL ? 1 : 2); inplace++)
          job_case(&f, &placements[pi], job_kinds[k], root, inplace);
  /* a buffer the work needs, missing: refused, not dereferenced */
  static double buf[SHMDDP_MAX_RANKS * JOB_K];
  coloc_work_t w = {.kind = COLL_GATHER, .count = JOB_K, .dtype = SHMDDP_F64, .root = 1,
                    .nranks = 2, .group = 0x3, .send = {buf, buf}, .recv = {NULL, NULL}};
  coloc_args_t a;
  CF_CHECK(&f, coloc_jobs_build(&w, &a) == -1, "a gather without the root's recv was accepted");
  w.kind = COLL_ALL_TO_ALL;
  w.recv[0] = w.recv[1] = buf;
  w.send[1] = NULL;
  CF_CHECK(&f, coloc_jobs_build(&w, &a) == -1, "an all-to-all without a send was accepted");
  CF_ASSERT_NONE(&f, "jobs");
}
END_TEST

/* ---------------- the protocol over a simulated transport ---------------- */

#define ELEMS 48
#define CALLS 300

#define BUF_WORDS 64 /* each rank's buffer of a call, in 32-bit words */

typedef struct {
  _Alignas(128) _Atomic uint64_t word;          /* the protocol word */
  _Alignas(128) _Atomic uint64_t ready;         /* the rendezvous */
  uint64_t count[2];                            /* the call's count, by the parity of ready */
  unsigned char handle[2][DEVMEM_HANDLE_BYTES]; /* the call's buffer, by the parity of ready */
  _Atomic uint64_t alloc;    /* threads: the call whose buffer is allocated (0: none) */
  _Atomic uint64_t returned; /* the last call this rank returned from (its buffer then freed) */
  _Alignas(128) _Atomic uint64_t gen[COLOC_NKINDS]; /* simulated events: latest record's call */
  _Atomic uint64_t done[COLOC_NKINDS]; /* the latest record: SIM_DONE(completion time, call) */
  double in[ELEMS], out[ELEMS];
} sim_rank_t;

/* A simulated record: when it completes (microseconds on the monotonic clock), and its call. */
#define SIM_DONE(us, call) ((uint64_t)(us) << 16 | ((call) & 0xffff))
#define SIM_NEVER (~0ull >> 16)

enum { SIM_OK = 0, SIM_BROKEN, SIM_BROKEN_HOST, SIM_DIE, SIM_DIE_PUBLISHED, SIM_MISMATCH,
       SIM_LATE_OPEN };

/* The wait choices a run gives its ranks: one for all, or host and stream alternating. */
enum { SIM_WAIT_MIXED = COLOC_NWAITS, SIM_NWAITS };

typedef struct {
  int nranks, mode, victim, at_call; /* SIM_DIE* / SIM_MISMATCH / SIM_LATE_OPEN: which rank,
                                        from which call */
  int wait;                          /* a coloc_wait_t, or SIM_WAIT_MIXED */
  int threads;                       /* the ranks are threads of one process (as modelled) */
  const char *keys[SHMDDP_MAX_RANKS];
  sim_rank_t rank[SHMDDP_MAX_RANKS];
  case_failures_t fails[SHMDDP_MAX_RANKS];
  int status[SHMDDP_MAX_RANKS];
  char msg[SHMDDP_MAX_RANKS][SHM_ABORT_MSG_BYTES];
} sim_t;

static sim_t *g_sim;

typedef struct {
  shmddp_comm_t *comm;
  sim_t *sim;
  const coloc_plan_t *plan;
  unsigned rng;
  int host_waits;
  uint64_t seq;     /* the call in progress */
  coll_kind_t kind; /* its collective, root and count */
  int root;
  size_t count;
  uint32_t *buf;    /* this rank's buffer of that call (a fake device allocation) */
} sim_ctx_t;

/* Sometimes sleep a little, so ranks reach each step in varying orders. */
static void jitter(sim_ctx_t *c)
{
  unsigned r = (unsigned)rand_r(&c->rng);
  if (r % 4 == 0) usleep(r % 40);
}

static uint64_t now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int victim_from(const sim_ctx_t *c, int mode, uint64_t seq)
{
  return c->sim->mode == mode && c->comm->rank == c->sim->victim && seq >= (uint64_t)c->sim->at_call;
}

/* The record completes up to 300 us later (never, for a victim that dies after publishing). */
static shmddp_status_t sim_record(void *v, int kind, uint64_t seq)
{
  sim_ctx_t *c = v;
  jitter(c);
  sim_rank_t *mine = &c->sim->rank[c->comm->rank];
  uint64_t at = victim_from(c, SIM_DIE_PUBLISHED, seq) ? SIM_NEVER
                                                       : now_us() + (unsigned)rand_r(&c->rng) % 300;
  atomic_store(&mine->done[kind], SIM_DONE(at, seq));
  atomic_store(&mine->gen[kind], seq);
  return SHMDDP_OK;
}

/* Whether rank peer's event kind of call seq has completed; a record of another call is a
 * failure (the record meant for this call was replaced, or is not there yet). */
static int sim_completed(sim_ctx_t *c, int peer, int kind, uint64_t seq)
{
  uint64_t d = atomic_load(&c->sim->rank[peer].done[kind]);
  CF_CHECK(&c->sim->fails[c->comm->rank], (d & 0xffff) == (seq & 0xffff), "call %llu: queried "
           "rank %d's %s event, whose latest record is call %llu's", (unsigned long long)seq, peer,
           kind == COLOC_READY ? "READY" : "DONE", (unsigned long long)(d & 0xffff));
  return (d >> 16) <= now_us();
}

static shmddp_status_t sim_query(void *v, int peer, int kind, uint64_t seq, int *done)
{
  sim_ctx_t *c = v;
  *done = c->sim->mode == SIM_BROKEN_HOST || sim_completed(c, peer, kind, seq);
  return SHMDDP_OK;
}

static shmddp_status_t sim_wait(void *v, int peer, int kind, uint64_t seq)
{
  sim_ctx_t *c = v;
  uint64_t g = atomic_load(&c->sim->rank[peer].gen[kind]);
  CF_CHECK(&c->sim->fails[c->comm->rank], g == seq, "call %llu: waited on rank %d's %s event, "
           "whose latest record is call %llu's", (unsigned long long)seq, peer,
           kind == COLOC_READY ? "READY" : "DONE", (unsigned long long)g);
  jitter(c);
  return SHMDDP_OK;
}

typedef struct {
  shm_waiter_t w;
  sim_ctx_t *c;
  uint64_t seq;
} ready_wait_t;

static uint32_t ready_pending(shm_waiter_t *w)
{
  ready_wait_t *x = (ready_wait_t *)w;
  uint32_t m = 0;
  for (int r = 0; r < x->c->sim->nranks; r++)
    if (atomic_load(&x->c->sim->rank[r].ready) < x->seq) m |= 1u << r;
  return m;
}

static shmddp_status_t ready_check(shm_waiter_t *w, char *err, size_t len)
{
  return coll_check_peers(((ready_wait_t *)w)->c->comm, err, len);
}

static uint32_t pattern(int rank, uint64_t call, int i)
{
  return (uint32_t)rank * 1000003u + (uint32_t)call * 7919u + (uint32_t)i;
}

/* As the exchange does (cuda_reg.c): a failed open after the group stopped reports the group's
 * reason, since the owner may have left the call, and freed the buffer, because of it. */
static shmddp_status_t open_failed(shmddp_comm_t *comm, int q, const char *why)
{
  char msg[SHM_ABORT_MSG_BYTES];
  shmddp_status_t st = shm_abort_status(comm->seg, msg, sizeof msg);
  if (st != SHMDDP_OK) return coll_wait_failed(comm, st, msg);
  return coll_error(comm, SHMDDP_ERR_CUDA, "rank %d, %s: rank %d's buffer: %s", comm->rank,
                    comm->what, q, why);
}

/* The host side of the exchange: open (processes) or classify (threads) every peer's buffer of
 * call seq, and read it. A freed buffer fails as it does on a GPU, and stops the call. */
static shmddp_status_t open_peers(sim_ctx_t *c, uint64_t seq)
{
  shmddp_comm_t *comm = c->comm;
  for (int q = 0; q < comm->nranks; q++) {
    if (q == comm->rank) continue;
    if (c->sim->threads) {
      if (atomic_load(&c->sim->rank[q].alloc) != seq)
        return open_failed(comm, q, "not device memory (freed)");
      continue;
    }
    uintptr_t base = 0;
    size_t size = 0;
    int e = fk_legacy_open(NULL, c->sim->rank[q].handle[seq & 1], &base, &size);
    if (e != 0) return open_failed(comm, q, strerror(e));
    const uint32_t *w = (const uint32_t *)base;
    int bad = 0;
    for (int i = 0; i < BUF_WORDS; i++) bad += w[i] != pattern(q, seq, i);
    fk_legacy_close(NULL, base);
    CF_CHECK(&c->sim->fails[comm->rank], bad == 0, "call %llu: %d words of rank %d's buffer are "
             "another allocation's", (unsigned long long)seq, bad, q);
  }
  return SHMDDP_OK;
}

/* SIM_LATE_OPEN: open the peers' buffers only once every other rank has returned from call seq
 * (and freed its buffer) or, having published 2·seq-1, sleeps in a wait (then it can only be
 * waiting for this rank). One of the two comes in any protocol; which one decides whether the
 * buffers can still be opened. Polls: the sleepers' count is the segment's. */
static void late_open_wait(sim_ctx_t *c, uint64_t seq)
{
  shm_header_t *h = c->comm->seg->hdr;
  for (int q = 0; q < c->comm->nranks; q++) {
    sim_rank_t *p = &c->sim->rank[q];
    while (q != c->comm->rank && atomic_load(&p->returned) < seq &&
           !(atomic_load(&p->word) >= 2 * seq - 1 && atomic_load(&h->waiters) > 0) &&
           atomic_load(&h->abort_status) == 0)
      sched_yield();
  }
}

static shmddp_status_t sim_rendezvous(void *v, uint64_t seq)
{
  sim_ctx_t *c = v;
  shmddp_comm_t *comm = c->comm;
  sim_rank_t *mine = &c->sim->rank[comm->rank];
  mine->count[seq & 1] = comm->cur.count;
  if (fk_legacy_export(NULL, (uintptr_t)c->buf, mine->handle[seq & 1]) != 0)
    return coll_error(comm, SHMDDP_ERR_INTERNAL, "rank %d: cannot export its buffer", comm->rank);
  atomic_store(&mine->ready, seq);
  shm_wake_all(comm->seg);
  ready_wait_t x = {{ready_pending, ready_check, comm->what}, c, seq};
  char err[SHM_ABORT_MSG_BYTES];
  shmddp_status_t st = shm_wait(comm->seg, comm->rank, &x.w, comm->timeout_s, err, sizeof err);
  if (st != SHMDDP_OK) return coll_wait_failed(comm, st, err);
  if (victim_from(c, SIM_DIE_PUBLISHED, seq)) _exit(7); /* its READY never completes */
  /* As the CUDA transport's exchange does: the peers' records of this call must match. A peer
   * writes this parity again only at seq + 2, after this rank's seq + 1. */
  for (int r = 0; r < comm->nranks; r++)
    if (c->sim->rank[r].count[seq & 1] != comm->cur.count)
      return coll_error(comm, SHMDDP_ERR_MISMATCH, "rank %d: call %llu has count %llu on rank %d",
                        comm->rank, (unsigned long long)seq,
                        (unsigned long long)c->sim->rank[r].count[seq & 1], r);
  if (victim_from(c, SIM_LATE_OPEN, seq)) late_open_wait(c, seq);
  else jitter(c);
  return open_peers(c, seq);
}

/* A rank that waits on the host has seen the events it waited for complete: a leader every
 * READY of the call before its work, a rank every other leader's DONE before it returns. */
static void check_completed(sim_ctx_t *c, uint32_t ranks, int kind, uint64_t seq)
{
  for (int q = 0; q < c->sim->nranks; q++)
    if ((ranks >> q & 1) && q != c->comm->rank)
      CF_CHECK(&c->sim->fails[c->comm->rank], sim_completed(c, q, kind, seq), "call %llu: went "
               "on before rank %d's %s event completed", (unsigned long long)seq, q,
               kind == COLOC_READY ? "READY" : "DONE");
}

/* The leader's "kernel": the jobs of its group, on the host (a rank passes no send buffer to a
 * broadcast or scatter, and no recv buffer to a reduce or gather, unless it is the root). */
static shmddp_status_t sim_work(void *v)
{
  sim_ctx_t *c = v;
  if (c->host_waits) check_completed(c, ~0u, COLOC_READY, c->seq);
  jitter(c);
  int n = c->sim->nranks;
  coloc_work_t w = {.kind = c->kind, .count = c->count, .dtype = SHMDDP_F64, .op = SHMDDP_SUM,
                    .root = c->root, .nranks = n,
                    .group = c->plan->members[c->plan->group[c->comm->rank]],
                    .slice = c->plan->group[c->comm->rank], .nslices = c->plan->ngroups};
  int root_send = c->kind == COLL_BROADCAST || c->kind == COLL_SCATTER;
  int root_recv = c->kind == COLL_REDUCE || c->kind == COLL_GATHER;
  for (int r = 0; r < n; r++) {
    w.send[r] = root_send && r != c->root ? NULL : c->sim->rank[r].in;
    w.recv[r] = root_recv && r != c->root ? NULL : c->sim->rank[r].out;
  }
  coloc_args_t a;
  CF_CHECK(&c->sim->fails[c->comm->rank], coloc_jobs_build(&w, &a) == 0, "call %llu: %s: no "
           "jobs (a buffer missing)", (unsigned long long)c->seq, coll_kind_name(c->kind));
  coloc_jobs_run_host(&a);
  return SHMDDP_OK;
}

static const coloc_ops_t sim_ops = {.record = sim_record, .wait = sim_wait, .query = sim_query,
                                    .rendezvous = sim_rendezvous, .work = sim_work};

static double input(int rank, uint64_t call, int i) { return rank * 1000.0 + (double)call + i * 0.5; }

/* This rank's buffer of call `call`: a new allocation (fake device memory), filled. */
static int new_buffer(sim_ctx_t *c, uint64_t call)
{
  c->buf = fake_alloc(DEVMEM_LEGACY, BUF_WORDS * sizeof(uint32_t));
  if (!c->buf) return -1;
  for (int i = 0; i < BUF_WORDS; i++) c->buf[i] = pattern(c->comm->rank, call, i);
  atomic_store(&c->sim->rank[c->comm->rank].alloc, call);
  return 0;
}

/* The call has returned: its buffer is freed at once, as a caching allocator may. */
static void free_buffer(sim_ctx_t *c, uint64_t call)
{
  sim_rank_t *mine = &c->sim->rank[c->comm->rank];
  atomic_store(&mine->alloc, 0);
  fake_free(c->buf, BUF_WORDS * sizeof(uint32_t));
  c->buf = NULL;
  atomic_store(&mine->returned, call);
}

/* The collective of call k: every one in turn (all-reduce only in the runs that break the
 * protocol, whose checks count on every rank's output being written). */
static const coll_kind_t sim_kinds[] = {COLL_ALL_REDUCE, COLL_ALL_TO_ALL, COLL_REDUCE_SCATTER,
                                        COLL_GATHER, COLL_ALL_GATHER, COLL_SCATTER,
                                        COLL_BROADCAST, COLL_REDUCE};

static void sim_call(sim_ctx_t *c, uint64_t call)
{
  int n = c->sim->nranks, broken = c->sim->mode == SIM_BROKEN || c->sim->mode == SIM_BROKEN_HOST;
  c->kind = broken ? COLL_ALL_REDUCE : sim_kinds[call % (sizeof sim_kinds / sizeof sim_kinds[0])];
  c->root = (int)(call % (uint64_t)n);
  int blocks = c->kind == COLL_ALL_TO_ALL || c->kind == COLL_REDUCE_SCATTER ||
               c->kind == COLL_GATHER || c->kind == COLL_ALL_GATHER || c->kind == COLL_SCATTER;
  c->count = blocks ? ELEMS / (size_t)n : ELEMS;
}

/* Elements of this rank's output of call `call` that differ from the reference (-1: nothing to
 * check on this rank). */
static int sim_wrong(const sim_ctx_t *c, uint64_t call)
{
  int me = c->comm->rank, n = c->sim->nranks, root = c->root, bad = 0;
  size_t k = c->count;
  const double *out = c->sim->rank[me].out;
  if ((c->kind == COLL_REDUCE || c->kind == COLL_GATHER) && me != root) return -1;
  size_t len = c->kind == COLL_ALL_TO_ALL || c->kind == COLL_ALL_GATHER || c->kind == COLL_GATHER
                   ? k * (size_t)n : k;
  for (size_t i = 0; i < len; i++) {
    int q = (int)(i / k), j = (int)(i % k);
    double want = 0;
    switch (c->kind) {
    case COLL_ALL_REDUCE:
    case COLL_REDUCE:
      for (int r = 0; r < n; r++) want += input(r, call, (int)i);
      break;
    case COLL_REDUCE_SCATTER:
      for (int r = 0; r < n; r++) want += input(r, call, me * (int)k + (int)i);
      break;
    case COLL_ALL_GATHER:
    case COLL_GATHER: want = input(q, call, j); break;
    case COLL_ALL_TO_ALL: want = input(q, call, me * (int)k + j); break;
    case COLL_SCATTER: want = input(root, call, me * (int)k + (int)i); break;
    default: want = input(root, call, (int)i); break; /* broadcast */
    }
    bad += out[i] != want;
  }
  return bad;
}

/* The protocol without step 4's wait (what these checks must catch): a member returns right
 * after the rendezvous; the leader is slow. */
static shmddp_status_t broken_call(shmddp_comm_t *comm, coloc_state_t *cs, sim_ctx_t *c)
{
  uint64_t k = ++cs->calls;
  shmddp_status_t st = sim_record(c, COLOC_READY, k);
  if (st == SHMDDP_OK) st = sim_rendezvous(c, k);
  if (st != SHMDDP_OK || !(cs->plan.leaders >> comm->rank & 1)) return st;
  usleep(2000);
  for (int q = 0; q < comm->nranks; q++)
    if (q != comm->rank) sim_wait(c, q, COLOC_READY, k);
  sim_work(c);
  return sim_record(c, COLOC_DONE, k);
}

static int sim_rank(shmddp_comm_t *comm, void *arg)
{
  sim_t *sim = arg;
  int me = comm->rank, n = comm->nranks;
  case_failures_t *f = &sim->fails[me];
  char keys[SHMDDP_MAX_RANKS][COLOC_KEY_BYTES];
  _Atomic uint64_t *words[SHMDDP_MAX_RANKS];
  for (int r = 0; r < n; r++) {
    snprintf(keys[r], COLOC_KEY_BYTES, "%s", sim->keys[r]);
    words[r] = &sim->rank[r].word;
  }
  coloc_plan_t plan;
  if (coloc_plan(&plan, n, (const char(*)[COLOC_KEY_BYTES])keys) != 0) return 1;
  coloc_wait_t wait = sim->wait == SIM_WAIT_MIXED ? (me % 2 ? COLOC_WAIT_STREAM : COLOC_WAIT_HOST)
                                                  : (coloc_wait_t)sim->wait;
  coloc_state_t cs;
  coloc_state_init(&cs, &plan, words);
  cs.host_waits = coloc_host_waits(wait, &plan, me);
  sim_ctx_t c = {.comm = comm, .sim = sim, .plan = &plan, .rng = 12345u + (unsigned)me * 77u,
                 .host_waits = cs.host_waits};
  sim_rank_t *mine = &sim->rank[me];
  shmddp_status_t st = SHMDDP_OK;
  for (uint64_t call = 1; call <= CALLS && st == SHMDDP_OK; call++) {
    for (int i = 0; i < ELEMS; i++) mine->in[i] = input(me, call, i);
    sim_call(&c, call);
    size_t count = c.count;
    if (sim->mode == SIM_MISMATCH && me == sim->victim && call == (uint64_t)sim->at_call) count++;
    if (sim->mode == SIM_DIE && me == sim->victim && call == (uint64_t)sim->at_call) _exit(7);
    st = coll_begin(comm, c.kind, count, SHMDDP_F64, SHMDDP_SUM, c.root, SHMDDP_ALGO_COLOC);
    if (st != SHMDDP_OK) break;
    c.seq = cs.calls + 1;
    if (new_buffer(&c, call) != 0) return 1;
    st = sim->mode == SIM_BROKEN ? broken_call(comm, &cs, &c) : coloc_call(comm, &cs, &sim_ops, &c);
    free_buffer(&c, call);
    if (st != SHMDDP_OK) break;
    if (cs.host_waits) check_completed(&c, plan.leaders, COLOC_DONE, call);
    int bad = sim_wrong(&c, call);
    CF_CHECK(f, bad <= 0, "call %llu (%s, root %d): %d outputs wrong", (unsigned long long)call,
             coll_kind_name(c.kind), c.root, bad);
  }
  sim->status[me] = st;
  snprintf(sim->msg[me], sizeof sim->msg[me], "%s", shmddp_comm_last_error(comm));
  if (st != SHMDDP_OK || sim->mode != SIM_OK) return st == SHMDDP_OK ? 0 : 2;
  /* Teardown waits for every peer's last waits; afterwards every word says so. */
  CF_CHECK(f, coloc_quiesce(comm, &cs) == SHMDDP_OK, "quiesce: %s", shmddp_comm_last_error(comm));
  for (int r = 0; r < n; r++)
    CF_CHECK(f, atomic_load(&sim->rank[r].word) >= 2 * (uint64_t)CALLS, "after quiesce rank %d's "
             "word is %llu", r, (unsigned long long)atomic_load(&sim->rank[r].word));
  /* A new life of the transport continues the numbering from the words. */
  if (shmddp_barrier(comm) != SHMDDP_OK) return 1;
  coloc_state_t again;
  coloc_state_init(&again, &plan, words);
  again.host_waits = cs.host_waits;
  c.seq = again.calls + 1;
  c.kind = COLL_ALL_REDUCE;
  c.count = ELEMS;
  CF_CHECK(f, again.calls == CALLS, "restarted at call %llu, want %d",
           (unsigned long long)again.calls, CALLS);
  for (int i = 0; i < ELEMS; i++) mine->in[i] = input(me, CALLS + 1, i);
  if (coll_begin(comm, COLL_ALL_REDUCE, ELEMS, SHMDDP_F64, SHMDDP_SUM, -1, SHMDDP_ALGO_COLOC) ||
      new_buffer(&c, CALLS + 1) != 0)
    return 1;
  shmddp_status_t again_st = coloc_call(comm, &again, &sim_ops, &c);
  free_buffer(&c, CALLS + 1);
  if (again_st != SHMDDP_OK) return 1;
  double want = 0;
  for (int r = 0; r < n; r++) want += input(r, CALLS + 1, 0);
  CF_CHECK(f, mine->out[0] == want, "after the restart: %g, want %g", mine->out[0], want);
  return 0;
}

static void setup(void) { g_sim = test_shared_alloc(sizeof *g_sim); }
static void teardown(void) { munmap(g_sim, sizeof *g_sim); }

static shmddp_launch_result_t run_sim_as(int nranks, const char *const *keys, int threads, int wait,
                                         int mode, int victim, int at_call)
{
  memset(g_sim, 0, sizeof *g_sim);
  g_sim->nranks = nranks;
  g_sim->threads = threads;
  g_sim->wait = wait;
  g_sim->mode = mode;
  g_sim->victim = victim;
  g_sim->at_call = at_call;
  for (int r = 0; r < nranks; r++) {
    g_sim->keys[r] = keys[r];
    cf_init(&g_sim->fails[r]);
  }
  return test_launch(nranks, 30, 0, sim_rank, g_sim);
}

static shmddp_launch_result_t run_sim(int nranks, const char *const *keys, int wait, int mode,
                                      int victim, int at_call)
{
  return run_sim_as(nranks, keys, 0, wait, mode, victim, at_call);
}

static case_failures_t all_failures(void)
{
  case_failures_t all;
  cf_merge_ranks(&all, g_sim->fails, g_sim->nranks, "rank");
  return all;
}


static const char *wait_label(int wait)
{
  return wait == SIM_WAIT_MIXED ? "host and stream alternating" : coloc_wait_name((coloc_wait_t)wait);
}

/* Every placement under every wait choice (_i: placement * SIM_NWAITS + choice). */
START_TEST(protocol_orders_every_wait_after_its_record)
{
  const placement_t *p = &placements[_i / SIM_NWAITS];
  int wait = _i % SIM_NWAITS;
  shmddp_launch_result_t res = run_sim_as(p->nranks, p->keys, p->threads, wait, SIM_OK, 0, 0);
  case_failures_t all = all_failures();
  char name[160];
  snprintf(name, sizeof name, "%s, %s waits", p->name, wait_label(wait));
  ck_assert_msg(res.exit_code == 0, "%s: a rank failed: %s", name, res.message);
  ck_assert_msg(all.checks >= (long)p->nranks * CALLS, "%s: only %ld checks ran", name,
                all.checks);
  CF_ASSERT_NONE(&all, name);
}
END_TEST

/* _i 0: stream waits without step 4 (a member returns right after the rendezvous); _i 1: host
 * waits whose queries say "complete" at once. */
START_TEST(checks_catch_a_protocol_without_its_done_wait)
{
  static const char *const keys[] = {"A", "A"};
  if (_i == 0) run_sim(2, keys, COLOC_WAIT_STREAM, SIM_BROKEN, 0, 0);
  else run_sim(2, keys, COLOC_WAIT_HOST, SIM_BROKEN_HOST, 0, 0);
  case_failures_t all = all_failures();
  ck_assert_msg(all.failed > 0, "%s: a rank that goes on before what it waits for was not caught "
                "in %ld checks", _i ? "host waits" : "stream waits", all.checks);
}
END_TEST

/* A leader (rank 0) or a member (rank 1) dies at call 50, under each wait choice: before the call,
 * or after publishing a READY that never completes (a peer waiting on the host for it polls
 * instead of sleeping on the segment). Every other rank returns an error that names it, instead
 * of waiting. _i: (victim, when, wait choice). */
START_TEST(dead_rank_is_named)
{
  static const char *const keys[] = {"A", "A", "A"};
  int victim = _i % 2, mode = (_i / 2) % 2 ? SIM_DIE_PUBLISHED : SIM_DIE, wait = _i / 4;
  shmddp_launch_result_t res = run_sim(3, keys, wait, mode, victim, 50);
  ck_assert_int_ne(res.exit_code, 0);
  char want[16];
  snprintf(want, sizeof want, "rank %d", victim);
  for (int r = 0; r < 3; r++) {
    if (r == victim) continue;
    ck_assert_msg(g_sim->status[r] != SHMDDP_OK, "%s waits: rank %d did not notice",
                  wait_label(wait), r);
    ck_assert_msg(strstr(g_sim->msg[r], want) != NULL, "%s waits: rank %d's error does not name "
                  "%s: %s", wait_label(wait), r, want, g_sim->msg[r]);
  }
}
END_TEST

/* A member opens the buffers of call k only once its leader has returned from k (and freed its
 * buffer, as the test frees every buffer right after its call) or sleeps after publishing 2k-1,
 * waiting for it: the interleaving of a leader that frees a buffer a member is about to open,
 * made certain. The protocol keeps a leader in the call until every member has published that it
 * is done with the buffers, so the member always finds them. _i: (processes or threads, wait
 * choice). */
START_TEST(no_buffer_is_freed_before_its_peers_opened_it)
{
  static const char *const keys[] = {"A", "A"};
  int threads = _i % 2, wait = _i / 2;
  shmddp_launch_result_t res = run_sim_as(2, keys, threads, wait, SIM_LATE_OPEN, 1, 1);
  case_failures_t all = all_failures();
  char name[160];
  snprintf(name, sizeof name, "%s, %s waits", threads ? "threads" : "processes",
           wait_label(wait));
  ck_assert_msg(res.exit_code == 0, "%s: %s", name, res.message);
  for (int r = 0; r < 2; r++)
    ck_assert_msg(g_sim->status[r] == SHMDDP_OK, "%s: rank %d: %s", name, r, g_sim->msg[r]);
  CF_ASSERT_NONE(&all, name);
}
END_TEST

START_TEST(mismatched_call_is_an_error)
{
  static const char *const keys[] = {"A", "A", "B"};
  run_sim(3, keys, COLOC_WAIT_HOST, SIM_MISMATCH, 2, 20);
  int mismatch = 0;
  for (int r = 0; r < 3; r++) {
    ck_assert_msg(g_sim->status[r] != SHMDDP_OK, "rank %d went on", r);
    mismatch |= g_sim->status[r] == SHMDDP_ERR_MISMATCH;
  }
  ck_assert_msg(mismatch, "no rank reported a mismatch: %s", g_sim->msg[0]);
}
END_TEST

static Suite *coloc_suite(const suite_env_t *env)
{
  (void)env;
  Suite *s = suite_create("coloc");
  SUITE_CASE(s, "placement", placement_groups_ranks_by_device, mps_choice);
  SUITE_CASE(s, "jobs", jobs_of_every_collective_equal_the_reference);
  TCase *tc = tcase_create("protocol");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, protocol_orders_every_wait_after_its_record, 0,
                      (int)(sizeof placements / sizeof placements[0]) * SIM_NWAITS);
  tcase_add_loop_test(tc, checks_catch_a_protocol_without_its_done_wait, 0, 2);
  tcase_add_loop_test(tc, dead_rank_is_named, 0, 4 * SIM_NWAITS);
  tcase_add_test(tc, mismatched_call_is_an_error);
  tcase_add_loop_test(tc, no_buffer_is_freed_before_its_peers_opened_it, 0, 2 * SIM_NWAITS);
  suite_add_tcase(s, tc);
  return s;
}

SUITE_MAIN("check_coloc", coloc_suite, SUITE_CPU_ONLY)
