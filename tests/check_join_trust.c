/* check_join_trust.c — who can get into a group joined by id. The attacks of a local user on
 * another's groups, kept as tests: listing /dev/shm to rebuild an id or a derived id, planting
 * a segment (another uid's file, mode 0666) under a group's name, a segment of one's own that
 * grants others access; and the clean-up rules: a rank out of range is refused before anything
 * is created, a creator killed before the others came leaves nothing once the next group is
 * made, a live group's segment is never removed, and a reused pid does not keep a dead group.
 *
 * Cases with another uid need root (a throwaway uid is taken with setresuid, as setpriv
 * --reuid does); elsewhere they are not registered and the log says SKIP. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "shm/liveness.h"
#include "shm/segment.h"
#include "shm/timeutil.h"
#include "shmddp.h"
#include "tests/join_harness.h"
#include "tests/suite_main.h"

#define PLANTER_UID 54321
#define VICTIM_UID 54322

/* ---- worker mode: one rank that joins, then leaves ---- */

/* From now on poll() and ppoll() fail with EIO in every thread of this process (seccomp). */
static int break_poll(void)
{
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#ifdef __NR_poll
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_poll, 2, 0),
#else
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ppoll, 2, 0),
#endif
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ppoll, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EIO),
  };
  struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
}

/* "pollfail": joined, the watcher's poll breaks, then a call waits for a peer that is alive
 * but never calls: only the watcher's report can end it before the timeout. "idle": joins and
 * stays until the harness has the other's result. */
static int worker_scenario(const char *scenario, const worker_env_t *w, shmddp_comm_t *comm)
{
  char text[1024];
  if (strcmp(scenario, "pollfail") == 0) {
    if (break_poll() != 0) {
      snprintf(text, sizeof text, "seccomp %s", strerror(errno));
      write_file(w->dir, w->rank, "result", text);
      return 77;
    }
    double t0 = shm_now();
    float x = 1;
    shmddp_status_t st = shmddp_all_reduce(comm, &x, &x, 1, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST);
    snprintf(text, sizeof text, "call %d %.3f %s", (int)st, shm_now() - t0,
             shmddp_comm_last_error(comm));
    write_file(w->dir, w->rank, "result", text);
    return 0;
  }
  char path[512];
  snprintf(path, sizeof path, "%s/rank0.result", w->dir);
  double deadline = shm_now() + HANG_BOUND_S;
  while (access(path, F_OK) != 0 && shm_now() < deadline) shm_sleep(0.01);
  write_file(w->dir, w->rank, "result", "idle");
  return 0;
}

static int worker_main(void)
{
  worker_env_t w;
  if (worker_env(&w)) {
    write_file(w.dir, w.rank, "result", shmddp_last_error());
    return 90;
  }
  shmddp_comm_config_t cfg = SHMDDP_COMM_CONFIG_INIT;
  cfg.device = SHMDDP_DEVICE_NONE;
  cfg.slot_bytes = 64 << 10;
  shmddp_comm_t *comm = NULL;
  shmddp_status_t st = shmddp_comm_init_rank_config(&comm, w.nranks, w.id, w.rank, &cfg);
  const char *scenario = getenv("SHMDDP_TEST_WORKER");
  if (st == SHMDDP_OK && strcmp(scenario, "join") != 0) {
    int rc = worker_scenario(scenario, &w, comm);
    shmddp_comm_destroy(comm);
    return rc;
  }
  char text[1024];
  snprintf(text, sizeof text, "init %d %s", (int)st, st == SHMDDP_OK ? "" : shmddp_last_error());
  if (st == SHMDDP_OK) st = shmddp_barrier(comm);
  if (comm) shmddp_comm_destroy(comm);
  write_file(w.dir, w.rank, "result", text);
  return st == SHMDDP_OK ? 0 : 10 + (int)st;
}

/* ---- shared pieces of the cases ---- */

/* Waits (bounded) until path exists. */
static void wait_exists(const char *path)
{
  struct stat sb;
  double deadline = shm_now() + HANG_BOUND_S;
  while (stat(path, &sb) != 0) {
    ck_assert_msg(shm_now() < deadline, "%s never appeared", path);
    shm_sleep(0.002);
  }
}

static int exists(const char *path)
{
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* Runs fn(arg, msg) in a child process as uid (uid 0: without changing it); returns its exit
 * status (0: fn returned 0) with what fn wrote into msg. */
typedef int (*as_user_fn)(void *arg, char *msg, size_t len);

static int as_user(uid_t uid, as_user_fn fn, void *arg, char *msg, size_t len)
{
  int fd[2];
  ck_assert_int_eq(pipe(fd), 0);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(fd[0]);
    char out[1024] = "";
    int rc = 0;
    if (uid != 0 && (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 ||
                     setresuid(uid, uid, uid) != 0)) {
      snprintf(out, sizeof out, "cannot become uid %u: %s", (unsigned)uid, strerror(errno));
      rc = 99;
    } else {
      rc = fn(arg, out, sizeof out);
    }
    ssize_t n = write(fd[1], out, strlen(out));
    _exit(n < 0 ? 98 : rc);
  }
  close(fd[1]);
  size_t got = 0;
  ssize_t n;
  while (got + 1 < len && (n = read(fd[0], msg + got, len - 1 - got)) > 0) got += (size_t)n;
  msg[got] = 0;
  close(fd[0]);
  int ws = wait_exit(pid);
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* The /dev/shm path of an id's segment. */
static void id_path(const shmddp_unique_id_t *id, char *path, size_t len)
{
  char name[96];
  coll_id_segment_name(id, name, sizeof name);
  snprintf(path, len, "/dev/shm%s", name);
}

/* Joins id as rank `rank` of `nranks` with host buffers, any wait bounded at 30 s. */
static shmddp_status_t join_host(shmddp_comm_t **comm, int nranks, shmddp_unique_id_t id,
                                 int rank)
{
  shmddp_comm_config_t cfg = SHMDDP_COMM_CONFIG_INIT;
  cfg.device = SHMDDP_DEVICE_NONE;
  cfg.timeout_s = 30;
  *comm = NULL;
  return shmddp_comm_init_rank_config(comm, nranks, id, rank, &cfg);
}

/* One thread-rank group of one rank: its creation is "the next creator" of the rules. */
static void make_one_rank_group(void)
{
  shmddp_unique_id_t id;
  ck_assert_int_eq(shmddp_get_unique_id(&id), SHMDDP_OK);
  shmddp_comm_t *comm;
  ck_assert_msg(join_host(&comm, 1, id, 0) == SHMDDP_OK, "%s", shmddp_last_error());
  shmddp_comm_destroy(comm);
}

/* Maps a segment file of ours (for the tests that look into or forge a header). */
static shm_header_t *map_header(const char *path, size_t *bytes)
{
  int fd = open(path, O_RDWR);
  ck_assert_msg(fd >= 0, "cannot open %s: %s", path, strerror(errno));
  struct stat sb;
  ck_assert_int_eq(fstat(fd, &sb), 0);
  *bytes = (size_t)sb.st_size;
  void *p = mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ck_assert_ptr_ne(p, MAP_FAILED);
  return p;
}

/* ---- rank range ---- */

START_TEST(out_of_range_rank_is_refused_at_once)
{
  static const int bad[] = {2, -1, 7};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    shmddp_unique_id_t id;
    ck_assert_int_eq(shmddp_get_unique_id(&id), SHMDDP_OK);
    shmddp_comm_t *comm;
    double t0 = shm_now();
    shmddp_status_t st = join_host(&comm, 2, id, bad[i]);
    double took = shm_now() - t0;
    ck_assert_int_eq(st, SHMDDP_ERR_INVALID);
    ck_assert_msg(strstr(shmddp_last_error(), "out of range") != NULL, "%s", shmddp_last_error());
    /* Refused before the rendezvous: no waiting for the 30 s timeout, nothing created. */
    ck_assert_msg(took < 5.0, "rank %d was refused after %.1f s", bad[i], took);
    char path[128];
    id_path(&id, path, sizeof path);
    ck_assert_msg(!exists(path), "rank %d created %s", bad[i], path);
  }
}
END_TEST

/* ---- names, derived ids ---- */

START_TEST(names_reveal_nothing_of_the_id)
{
  group_t g;
  group_new(&g);
  pid_t p0 = spawn_rank(&g, "join", 2, 0, "60");
  wait_exists(g.seg_name);
  /* What any local user sees: the names in /dev/shm. None holds a piece of the secret (id
   * bytes 16..47, hex digits 32..95 of its text). */
  DIR *d = opendir("/dev/shm");
  ck_assert_ptr_nonnull(d);
  struct dirent *e;
  int seen_ours = 0;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "shmddp", 6) != 0) continue;
    seen_ours += strcmp(g.seg_name + strlen("/dev/shm/"), e->d_name) == 0;
    for (int at = 32; at + 8 <= 96; at += 2) {
      char piece[9];
      memcpy(piece, g.id + at, 8);
      piece[8] = 0;
      ck_assert_msg(strstr(e->d_name, piece) == NULL, "/dev/shm/%s shows id digits %d..%d (%s)",
                    e->d_name, at, at + 7, piece);
    }
  }
  closedir(d);
  ck_assert_int_eq(seen_ours, 1);
  /* An attacker's best rebuild: an id of its own whose secret holds the name's bytes. Neither
   * it nor anything derived from it leads to the group or to the group's derived ids. */
  shmddp_unique_id_t real, forged;
  ck_assert_int_eq(shmddp_unique_id_from_string(g.id, &real), SHMDDP_OK);
  ck_assert_int_eq(shmddp_get_unique_id(&forged), SHMDDP_OK);
  const char *hex = strrchr(g.seg_name, '-') + 1;
  for (int i = 0; i < 16 && hex[2 * i]; i++) {
    unsigned v;
    sscanf(hex + 2 * i, "%2x", &v);
    forged.internal[16 + i] = (char)v;
  }
  memcpy(forged.internal + 48, real.internal + 48, 16); /* the boot id is world-readable */
  static const uint64_t tags[] = {0, 1, 0x7032700000000102ULL};
  char a[128], b[128];
  id_path(&forged, a, sizeof a);
  ck_assert_str_ne(a, g.seg_name);
  for (size_t t = 0; t < sizeof tags / sizeof tags[0]; t++) {
    shmddp_unique_id_t dr, df;
    ck_assert_int_eq(shmddp_unique_id_derive(&real, tags[t], &dr), SHMDDP_OK);
    ck_assert_int_eq(shmddp_unique_id_derive(&forged, tags[t], &df), SHMDDP_OK);
    id_path(&dr, a, sizeof a);
    id_path(&df, b, sizeof b);
    ck_assert_str_ne(a, b);
    ck_assert_str_ne(a, g.seg_name);
  }
  pid_t p1 = spawn_rank(&g, "join", 2, 1, "60");
  int w0 = wait_exit(p0), w1 = wait_exit(p1);
  ck_assert_msg(WIFEXITED(w0) && WEXITSTATUS(w0) == 0, "rank 0: %s", wait_file(&g, 0, "result"));
  ck_assert_msg(WIFEXITED(w1) && WEXITSTATUS(w1) == 0, "rank 1: %s", wait_file(&g, 1, "result"));
  group_done(&g);
}
END_TEST

START_TEST(derived_ids_depend_on_the_whole_secret)
{
  shmddp_unique_id_t id, flipped, d0, d1, again;
  ck_assert_int_eq(shmddp_get_unique_id(&id), SHMDDP_OK);
  ck_assert_int_eq(shmddp_unique_id_derive(&id, 5, &d0), SHMDDP_OK);
  ck_assert_int_eq(shmddp_unique_id_derive(&id, 5, &again), SHMDDP_OK);
  ck_assert(memcmp(&d0, &again, sizeof d0) == 0); /* every holder computes the same */
  ck_assert_int_eq(shmddp_unique_id_derive(&id, 6, &d1), SHMDDP_OK);
  ck_assert(memcmp(d0.internal + 16, d1.internal + 16, 32) != 0);
  ck_assert(memcmp(d0.internal + 16, id.internal + 16, 32) != 0);
  /* One bit of the secret, anywhere in it, changes the whole derived secret (a keyed hash; a
   * mixer per half would leave the other half alone). */
  static const int at[] = {16, 23, 24, 31, 32, 47};
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
    flipped = id;
    flipped.internal[at[i]] ^= 1;
    ck_assert_int_eq(shmddp_unique_id_derive(&flipped, 5, &d1), SHMDDP_OK);
    int same = 0;
    for (int k = 16; k < 48; k++) same += d0.internal[k] == d1.internal[k];
    ck_assert_msg(same <= 4, "flipping id byte %d left %d of 32 derived secret bytes alike",
                  at[i], same);
  }
}
END_TEST

/* ---- segments that are not the group's ---- */

START_TEST(own_segment_granting_others_access_is_refused)
{
  group_t g;
  group_new(&g);
  /* Rank 0 creates the group and waits (3 s, then it gives up and removes the name). */
  pid_t p0 = spawn_rank(&g, "join", 2, 0, "3");
  wait_exists(g.seg_name);
  ck_assert_int_eq(chmod(g.seg_name, 0644), 0);
  pid_t p1 = spawn_rank(&g, "join", 2, 1, "3");
  int w1 = wait_exit(p1);
  const char *res = wait_file(&g, 1, "result");
  int st = -1;
  sscanf(res, "init %d", &st);
  ck_assert_msg(WIFEXITED(w1) && st == SHMDDP_ERR_INVALID, "rank 1: %s", res);
  ck_assert_msg(strstr(res, "mode 0644") != NULL && strstr(res, "not joined") != NULL,
                "rank 1's message names no mode: %s", res);
  wait_exit(p0);
  res = wait_file(&g, 0, "result");
  int st0 = -1;
  sscanf(res, "init %d", &st0);
  ck_assert_msg(st0 == SHMDDP_ERR_TIMEOUT, "rank 0 should time out alone: %s", res);
  group_done(&g);
}
END_TEST

typedef struct {
  char path[128];
  shmddp_unique_id_t id;
} plant_t;

/* As the planter: a valid-looking segment of 2 ranks, mode 0666, under the group's name. */
static int plant(void *arg, char *msg, size_t len)
{
  plant_t *p = arg;
  shm_segment_t seg;
  int fd = -1;
  unsigned char auth[SHM_AUTH_BYTES] = {0};
  if (shm_segment_create_unpublished(&seg, 2, 64 << 10, 30, auth, &fd, msg, len) != SHMDDP_OK)
    return 1;
  atomic_store(&seg.hdr->creator_pid, (int32_t)getppid()); /* alive: never cleaned as dead */
  if (fchmod(fd, 0666) != 0) return snprintf(msg, len, "fchmod: %s", strerror(errno)), 2;
  int e = shm_segment_publish(&seg, fd, p->path);
  shm_segment_destroy(&seg);
  if (e) return snprintf(msg, len, "publish %s: %s", p->path, strerror(e)), 3;
  return 0;
}

/* As the victim: rank 0 of 2 joins the id; the message is what init said. */
static int victim_join(void *arg, char *msg, size_t len)
{
  plant_t *p = arg;
  shmddp_comm_config_t cfg = SHMDDP_COMM_CONFIG_INIT;
  cfg.device = SHMDDP_DEVICE_NONE;
  cfg.timeout_s = 3;
  shmddp_comm_t *comm = NULL;
  shmddp_status_t st = shmddp_comm_init_rank_config(&comm, 2, p->id, 0, &cfg);
  snprintf(msg, len, "%s", shmddp_last_error());
  if (comm) shmddp_comm_destroy(comm);
  return (int)st;
}

START_TEST(another_users_planted_segment_is_refused)
{
  static const uid_t victims[] = {0, VICTIM_UID}; /* root, and an ordinary user */
  for (size_t v = 0; v < 2; v++) {
    plant_t p;
    ck_assert_int_eq(shmddp_get_unique_id(&p.id), SHMDDP_OK);
    id_path(&p.id, p.path, sizeof p.path);
    char msg[1024];
    ck_assert_msg(as_user(PLANTER_UID, plant, &p, msg, sizeof msg) == 0, "planter: %s", msg);
    struct stat sb;
    ck_assert_int_eq(stat(p.path, &sb), 0);
    ck_assert_uint_eq(sb.st_uid, PLANTER_UID);
    int st = as_user(victims[v], victim_join, &p, msg, sizeof msg);
    char want[64];
    snprintf(want, sizeof want, "belongs to uid %d with mode 0666", PLANTER_UID);
    ck_assert_msg(st == SHMDDP_ERR_INVALID && strstr(msg, want) && strstr(msg, "not joined"),
                  "victim uid %u: status %d: %s", (unsigned)victims[v], st, msg);
    /* The planted header was not touched: no rank claimed a place, none was seen. */
    size_t bytes;
    shm_header_t *h = map_header(p.path, &bytes);
    ck_assert_int_eq(atomic_load(&h->rank[0].pid), 0);
    ck_assert_uint_eq(atomic_load(&h->seen), 0);
    ck_assert_uint_eq(atomic_load(&h->joined), 0);
    munmap(h, bytes);
    ck_assert_int_eq(unlink(p.path), 0);
  }
}
END_TEST

/* As another user: the group's live segment can be neither read nor written. */
static int try_open(void *arg, char *msg, size_t len)
{
  const char *path = arg;
  int fd = open(path, O_RDONLY);
  if (fd >= 0) return close(fd), snprintf(msg, len, "opened %s", path), 1;
  snprintf(msg, len, "%s", strerror(errno));
  return errno == EACCES ? 0 : 2;
}

START_TEST(another_user_cannot_open_a_forming_group)
{
  group_t g;
  group_new(&g);
  pid_t p0 = spawn_rank(&g, "join", 2, 0, "60");
  wait_exists(g.seg_name);
  struct stat sb;
  ck_assert_int_eq(stat(g.seg_name, &sb), 0);
  ck_assert_uint_eq(sb.st_mode & 0777, 0600);
  char msg[512];
  ck_assert_msg(as_user(PLANTER_UID, try_open, g.seg_name, msg, sizeof msg) == 0, "%s", msg);
  pid_t p1 = spawn_rank(&g, "join", 2, 1, "60");
  ck_assert(WIFEXITED(wait_exit(p0)) && WIFEXITED(wait_exit(p1)));
  ck_assert_str_eq(wait_file(&g, 0, "result"), "init 0 ");
  group_done(&g);
}
END_TEST

/* ---- clean-up: the dead, never the living ---- */

/* A group whose only rank (its creator) was SIGKILLed while it waited: its segment stays until
 * a creator of this user comes (another suite running at the same time may be that creator). */
static void dead_group(group_t *g)
{
  group_new(g);
  pid_t p = spawn_rank(g, "join", 2, 0, "60");
  wait_exists(g->seg_name);
  ck_assert_int_eq(kill(p, SIGKILL), 0);
  wait_exit(p);
}

START_TEST(killed_creator_leaves_nothing_and_live_groups_stay)
{
  group_t live, dead;
  group_new(&live);
  pid_t l0 = spawn_rank(&live, "join", 2, 0, "60");
  wait_exists(live.seg_name);
  dead_group(&dead);
  make_one_rank_group(); /* the next creator */
  ck_assert_msg(!exists(dead.seg_name), "%s (its only rank was killed) is still there",
                dead.seg_name);
  ck_assert_msg(exists(live.seg_name), "%s (a forming group) was removed", live.seg_name);
  pid_t l1 = spawn_rank(&live, "join", 2, 1, "60");
  int w0 = wait_exit(l0), w1 = wait_exit(l1);
  ck_assert_msg(WIFEXITED(w0) && WEXITSTATUS(w0) == 0, "%s", wait_file(&live, 0, "result"));
  ck_assert_msg(WIFEXITED(w1) && WEXITSTATUS(w1) == 0, "%s", wait_file(&live, 1, "result"));
  group_done(&live);
  group_done(&dead);
}
END_TEST

START_TEST(reused_pid_does_not_keep_a_dead_group)
{
  group_t g;
  group_new(&g);
  pid_t p = spawn_rank(&g, "join", 2, 0, "60");
  wait_exists(g.seg_name);
  /* The creator's pid, as if it had died and its pid now named a live process: pid 1, started
   * long before it. Its start time tells them apart (run as an ordinary user, it is also the
   * pid of a process of another user). */
  size_t bytes;
  shm_header_t *h = map_header(g.seg_name, &bytes);
  /* The segment is published before its creator claims rank 0: wait for the claim (its start
   * time is stored last), or the creator would find the slot taken by the pid written below. */
  double deadline = shm_now() + HANG_BOUND_S;
  while (atomic_load(&h->rank[0].start) == 0) {
    ck_assert_msg(shm_now() < deadline, "the creator never claimed rank 0 of %s", g.seg_name);
    shm_sleep(0.002);
  }
  ck_assert_int_eq(atomic_load(&h->rank[0].pid), p);
  uint64_t start = atomic_load(&h->creator_start);
  ck_assert_uint_ne(start, 0);
  ck_assert_uint_ne(start, shm_pid_start(1));
  atomic_store(&h->creator_pid, 1);
  atomic_store(&h->rank[0].pid, 1);
  munmap(h, bytes);
  make_one_rank_group();
  ck_assert_msg(!exists(g.seg_name), "a reused pid kept %s alive", g.seg_name);
  kill(p, SIGKILL);
  wait_exit(p);
  group_done(&g);
}
END_TEST

/* ---- the peer watcher ---- */

START_TEST(failing_watcher_is_reported)
{
  group_t g;
  group_new(&g);
  pid_t p1 = spawn_rank(&g, "idle", 2, 1, "60");
  pid_t p0 = spawn_rank(&g, "pollfail", 2, 0, "60");
  int w0 = wait_exit(p0);
  const char *res = wait_file(&g, 0, "result");
  if (WIFEXITED(w0) && WEXITSTATUS(w0) == 77) {
    printf("check_join_trust: failing_watcher_is_reported: SKIP: %s\n", res);
    wait_exit(p1);
    group_done(&g);
    return;
  }
  int st = -1;
  double took = 99;
  sscanf(res, "call %d %lf", &st, &took);
  /* Before: the watcher thread ended silently and the call waited out its 60 s timeout. */
  ck_assert_msg(st != SHMDDP_OK && st != SHMDDP_ERR_TIMEOUT && strstr(res, "peer watcher failed"),
                "%s", res);
  ck_assert_msg(took < 20, "the failure was reported after %.1f s", took);
  wait_exit(p1);
  group_done(&g);
}
END_TEST

static Suite *join_trust_suite(const suite_env_t *env)
{
  (void)env;
  Suite *s = suite_create("join_trust");
  TCase *tc = SUITE_CASE(s, "same_user", out_of_range_rank_is_refused_at_once,
                         names_reveal_nothing_of_the_id, derived_ids_depend_on_the_whole_secret,
                         own_segment_granting_others_access_is_refused,
                         killed_creator_leaves_nothing_and_live_groups_stay,
                         reused_pid_does_not_keep_a_dead_group, failing_watcher_is_reported);
  tcase_set_timeout(tc, 300);
  if (geteuid() == 0) {
    tc = SUITE_CASE(s, "other_user", another_users_planted_segment_is_refused,
                    another_user_cannot_open_a_forming_group);
    tcase_set_timeout(tc, 300);
  } else {
    printf("check_join_trust: not registered (SKIP): other_user: needs root to take a "
           "throwaway uid\n");
  }
  return s;
}

int main(void)
{
  if (getenv("SHMDDP_TEST_WORKER")) return worker_main();
  return suite_main("check_join_trust", join_trust_suite, SUITE_CPU_ONLY);
}
