/* coloc_jobs.c — what a leader of ranks sharing a GPU computes in a co-located call, as jobs of
 * the one kernel (coloc_kernel.cu), and the same jobs on the host (see coloc_jobs.h).
 *
 * A leader writes the outputs of the ranks of its group only, and reads any rank's input; but an
 * all-reduce among several leaders (ranks on several GPUs) is split into one slice per leader,
 * each written to every rank's output: in place, a rank's input is its output, which its leader
 * would otherwise overwrite while another leader still reads it. The reductions (all-reduce,
 * reduce, reduce-scatter) are REDUCE jobs over every input in rank order, so every rank gets the
 * same bits; the data movements are copies: all-gather and broadcast
 * copy one source to many places (COPY), all-to-all, gather and scatter put several sources
 * one after the other into one destination (CONCAT). A job per output rank (or per source for
 * all-gather) keeps every collective to at most SHMDDP_MAX_RANKS jobs, so one launch. */
#include "config.h"

#include "collectives/coloc/coloc_jobs.h"

#include <string.h>

#include "collectives/reduce/reduce_cpu.h"

void coloc_jobs_lengths(coll_kind_t kind, size_t count, shmddp_dtype_t dtype, int nranks,
                        size_t len[2])
{
  size_t bytes = count * shmddp_dtype_size(dtype), all = bytes * (size_t)nranks;
  len[0] = kind == COLL_REDUCE_SCATTER || kind == COLL_ALL_TO_ALL || kind == COLL_SCATTER ? all
                                                                                          : bytes;
  len[1] = kind == COLL_ALL_GATHER || kind == COLL_ALL_TO_ALL || kind == COLL_GATHER ? all : bytes;
}

static int add_dst(coloc_job_t *j, void *p)
{
  if (!p) return -1;
  j->dst[j->ndst++] = p;
  return 0;
}

static void set_vec(coloc_job_t *j, size_t stride)
{
  uintptr_t bits = stride;
  for (int i = 0; i < j->nsrc; i++) bits |= (uintptr_t)j->src[i];
  for (int i = 0; i < j->ndst; i++) bits |= (uintptr_t)j->dst[i];
  j->vec = (bits & 15) == 0;
}

static const void *at(const void *p, size_t off) { return p ? (const char *)p + off : NULL; }
static void *at_w(void *p, size_t off) { return p ? (char *)p + off : NULL; }

/* CONCAT: source s of rank t's output, unless it already is there (in place: NULL, kept). */
static void concat_src(coloc_job_t *j, const void *src, void *dst_slot)
{
  j->src[j->nsrc++] = src == dst_slot ? NULL : src;
}

/* An all-reduce among several leaders: the elements [*lo, *hi) this leader reduces, for every
 * rank. Slices are whole 16-byte vectors, so aligned buffers stay aligned. */
static void ar_slice(const coloc_work_t *w, size_t *lo, size_t *hi)
{
  size_t ds = shmddp_dtype_size(w->dtype), v = ds < 16 ? 16 / ds : 1;
  size_t per = (w->count + (size_t)w->nslices - 1) / (size_t)w->nslices;
  per = (per + v - 1) / v * v;
  *lo = (size_t)w->slice * per;
  *hi = *lo + per < w->count ? *lo + per : w->count;
  if (*lo > *hi) *lo = *hi;
}

/* The job of output rank t (or source rank q) for w; -1 when a buffer it needs is missing. */
static int one_job(const coloc_work_t *w, int q, size_t bytes, coloc_job_t *j)
{
  int n = w->nranks, in_g = w->group >> q & 1, bad = 0;
  switch (w->kind) {
  case COLL_ALL_REDUCE:
    if (w->nslices > 1) { /* one job: a slice of every input to that slice of every output */
      size_t lo, hi, ds = shmddp_dtype_size(w->dtype);
      ar_slice(w, &lo, &hi);
      if (q > 0 || lo == hi) return 0;
      for (int r = 0; r < n; r++) bad |= !(j->src[j->nsrc++] = at(w->send[r], lo * ds));
      for (int t = 0; t < n; t++) bad |= add_dst(j, at_w(w->recv[t], lo * ds));
      return bad;
    }
    /* one leader: one job, every input to every output of the group, as a reduce's */
    /* fall through */
  case COLL_REDUCE:
    if (q > 0) return 0;
    for (int r = 0; r < n; r++) bad |= !(j->src[j->nsrc++] = w->send[r]);
    for (int t = 0; t < n; t++)
      if ((w->group >> t & 1) && (w->kind == COLL_ALL_REDUCE || t == w->root))
        bad |= add_dst(j, w->recv[t]);
    return bad;
  case COLL_REDUCE_SCATTER: /* output rank q: block q of every input */
    if (!in_g) return 0;
    for (int r = 0; r < n; r++) bad |= !(j->src[j->nsrc++] = at(w->send[r], (size_t)q * bytes));
    return bad | add_dst(j, w->recv[q]);
  case COLL_ALL_GATHER: /* source rank q: its input to slot q of every output of the group */
    bad |= !(j->src[j->nsrc++] = w->send[q]);
    for (int t = 0; t < n; t++)
      if (w->group >> t & 1) bad |= add_dst(j, at_w(w->recv[t], (size_t)q * bytes));
    return bad;
  case COLL_BROADCAST: /* the root's input to every output of the group but its own in place */
    if (q > 0) return 0;
    bad |= !(j->src[j->nsrc++] = w->send[w->root]);
    for (int t = 0; t < n; t++)
      if ((w->group >> t & 1) && w->recv[t] != w->send[w->root]) bad |= add_dst(j, w->recv[t]);
    return bad;
  case COLL_ALL_TO_ALL: /* output rank q: block q of every rank's input, in rank order */
    if (!in_g) return 0;
    bad |= add_dst(j, w->recv[q]);
    for (int r = 0; r < n; r++) {
      bad |= !w->send[r];
      concat_src(j, at(w->send[r], (size_t)q * bytes), at_w(w->recv[q], (size_t)r * bytes));
    }
    return bad;
  case COLL_GATHER: /* the root (if in the group): every rank's input, in rank order */
    if (q > 0 || !(w->group >> w->root & 1)) return 0;
    bad |= add_dst(j, w->recv[w->root]);
    for (int r = 0; r < n; r++) {
      bad |= !w->send[r];
      concat_src(j, w->send[r], at_w(w->recv[w->root], (size_t)r * bytes));
    }
    return bad;
  case COLL_SCATTER: /* output rank q: block q of the root's input */
    if (!in_g) return 0;
    bad |= add_dst(j, w->recv[q]);
    bad |= !w->send[w->root];
    concat_src(j, at(w->send[w->root], (size_t)q * bytes), w->recv[q]);
    return bad;
  default:
    return -1;
  }
}

int coloc_jobs_build(const coloc_work_t *w, coloc_args_t *a)
{
  size_t ds = shmddp_dtype_size(w->dtype), bytes = w->count * ds;
  int bad = w->nranks < 1 || w->nranks > SHMDDP_MAX_RANKS;
  memset(a, 0, sizeof *a);
  a->mode = COLOC_REDUCE;
  a->dtype = w->dtype;
  a->op = w->op;
  a->avg_div = w->nranks;
  a->n = w->count;
  if (w->kind == COLL_ALL_GATHER || w->kind == COLL_BROADCAST) a->mode = COLOC_COPY;
  if (w->kind == COLL_ALL_TO_ALL || w->kind == COLL_GATHER || w->kind == COLL_SCATTER)
    a->mode = COLOC_CONCAT;
  if (a->mode != COLOC_REDUCE) a->n = bytes;
  if (w->kind == COLL_ALL_REDUCE && w->nslices > 1) {
    size_t lo, hi;
    ar_slice(w, &lo, &hi);
    a->n = hi - lo;
  }
  for (int q = 0; q < w->nranks && !bad; q++) {
    coloc_job_t *j = &a->job[a->njobs];
    bad |= one_job(w, q, bytes, j) != 0;
    if (j->ndst > 0) {
      set_vec(j, a->mode == COLOC_CONCAT ? bytes : 0);
      a->njobs++;
    } else {
      memset(j, 0, sizeof *j);
    }
  }
  return bad ? -1 : 0;
}

void coloc_jobs_run_host(const coloc_args_t *a)
{
  for (int i = 0; i < a->njobs; i++) {
    const coloc_job_t *j = &a->job[i];
    if (a->mode == COLOC_REDUCE) {
      /* into the first output (which may be a source: element by element, every source is
       * read before the element is written, as in the kernel), then copied to the others */
      reduce_cpu_multi(j->dst[0], j->src, j->nsrc, a->n, (shmddp_dtype_t)a->dtype,
                       (shmddp_op_t)a->op, a->avg_div);
      for (int d = 1; d < j->ndst; d++)
        if (j->dst[d] != j->dst[0])
          memmove(j->dst[d], j->dst[0], a->n * shmddp_dtype_size((shmddp_dtype_t)a->dtype));
    } else {
      int parts = a->mode == COLOC_CONCAT ? j->nsrc : 1;
      for (int s = 0; s < parts; s++)
        for (int d = 0; d < j->ndst && j->src[s]; d++)
          memmove((char *)j->dst[d] + (a->mode == COLOC_CONCAT ? (size_t)s * a->n : 0),
                  j->src[s], a->n);
    }
  }
}
