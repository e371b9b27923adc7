/* devmem.c — the export side of devmem.h: finding a buffer among the live exports, making new
 * ones (VMM chunks sent to the peers as descriptors), eviction, retirement of freed memory,
 * registrations; and the state's life, the dropping of an import included (the import side,
 * devmem_import.c, builds on this file). The protocol is described in devmem.h. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/devmem/devmem_impl.h"

int devmem_grow(void **arr, size_t *cap, size_t need, size_t size)
{
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap * 2 : 8;
  while (n < need) n *= 2;
  void *p = realloc(*arr, n * size);
  if (!p) return -1;
  *arr = p;
  *cap = n;
  return 0;
}

int devmem_fail(char *err, size_t len, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return -1;
}

const char *devmem_drv_error(const devmem_t *m, int err)
{
  const char *s = m->drv->error_name ? m->drv->error_name(m->drv->ctx, err) : NULL;
  return s ? s : "driver error";
}

const char *devmem_kind_name(devmem_kind_t k)
{
  switch (k) {
  case DEVMEM_LEGACY: return "cudaMalloc memory (legacy IPC)";
  case DEVMEM_VMM: return "cuMem memory (POSIX file descriptors)";
  case DEVMEM_PRIVATE: return "device memory that cannot be shared";
  case DEVMEM_LOCAL: return "memory of the owner's process";
  default: return "not device memory";
  }
}

devmem_t *devmem_new(const devmem_driver_t *drv, fdpass_t *mesh, int rank, int nranks,
                     size_t max_exports)
{
  if (!drv || rank < 0 || nranks < 1 || nranks > SHMDDP_MAX_RANKS || rank >= nranks) return NULL;
  devmem_t *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  pthread_mutex_init(&m->lock, NULL);
  m->drv = drv;
  m->mesh = mesh;
  m->rank = rank;
  m->nranks = nranks;
  m->nremote = nranks - 1;
  m->max_exports = max_exports ? max_exports : DEVMEM_EXPORTS_DEFAULT;
  m->next_id = 1;
  m->next_reg = 1;
  return m;
}

void devmem_set_local(devmem_t *m, int peer, int local)
{
  if (peer < 0 || peer >= m->nranks || peer == m->rank) return;
  m->local[peer] = local != 0;
  m->nremote = 0;
  for (int p = 0; p < m->nranks; p++) m->nremote += p != m->rank && !m->local[p];
}

/* Queue for every peer in another process that export id is gone from exchange due on (sent
 * by flush_retires at the next exchange). */
static int queue_retire(devmem_t *m, uint64_t id, uint64_t due, char *err, size_t errlen)
{
  for (int p = 0; p < m->nranks; p++) {
    if (p == m->rank || m->local[p] || !fdpass_has(m->mesh, p)) continue;
    if (devmem_grow((void **)&m->out, &m->capout, m->nout + 1, sizeof *m->out) != 0)
      return devmem_fail(err, errlen, "out of host memory");
    devmem_outgoing_t o = {p, id, due};
    m->out[m->nout++] = o;
  }
  m->st.retired_sent++;
  return 0;
}

/* Send the queued retirements in order. A peer whose socket is closed has left (or died) and
 * dropped its mappings: its messages go. A full socket keeps the rest of its peer's queue. */
static int flush_retires(devmem_t *m, char *err, size_t errlen)
{
  unsigned char full[SHMDDP_MAX_RANKS] = {0};
  size_t keep = 0, i = 0;
  int rc = 0;
  for (; i < m->nout && rc == 0; i++) {
    devmem_outgoing_t o = m->out[i];
    int sent = FDPASS_FULL;
    if (!full[o.peer]) {
      devmem_msg_t msg = {DEVMEM_MSG_MAGIC, DEVMEM_MSG_RETIRE, o.export_id, o.due, 0, 0, 0, 0, 0};
      sent = fdpass_send(m->mesh, o.peer, &msg, sizeof msg, -1, err, errlen);
    }
    if (sent == FDPASS_FULL) full[o.peer] = 1;
    if (sent == FDPASS_ERROR) rc = -1;
    if (sent == FDPASS_FULL || sent == FDPASS_ERROR) m->out[keep++] = o;
  }
  while (i < m->nout) m->out[keep++] = m->out[i++]; /* after an error: kept for a later try */
  m->nout = keep;
  return rc;
}

static void remove_export(devmem_t *m, size_t i)
{
  free(m->exp[i].chunks);
  m->exp[i] = m->exp[--m->nexp];
  m->st.exports = m->nexp;
}

/* Retire export i: peers drop their mappings from exchange due on. */
static int retire(devmem_t *m, size_t i, uint64_t due, char *err, size_t errlen)
{
  uint64_t id = m->exp[i].id;
  remove_export(m, i);
  return m->mesh ? queue_retire(m, id, due, err, errlen) : 0;
}

/* 1 while the memory export e was made for is still mapped where it was. */
static int export_alive(const devmem_t *m, const devmem_export_t *e)
{
  devmem_range_t r;
  if (e->kind == DEVMEM_LEGACY)
    return m->drv->query(m->drv->ctx, e->base, &r) == 0 && r.kind == DEVMEM_LEGACY &&
           r.base == e->base && r.id == e->chunks[0].id;
  for (uint32_t c = 0; c < e->nchunks; c++) {
    const devmem_range_t *x = &e->chunks[c];
    if (m->drv->query(m->drv->ctx, x->base, &r) != 0 || r.kind != DEVMEM_VMM ||
        r.base != x->base || r.size != x->size || r.id != x->id)
      return 0;
  }
  return 1;
}

/* Retire every export whose memory has been freed (or mapped anew). */
static int recheck(devmem_t *m, uint64_t k, char *err, size_t errlen)
{
  m->last_recheck = k;
  for (size_t i = 0; i < m->nexp;) {
    if (export_alive(m, &m->exp[i])) {
      i++;
      continue;
    }
    if (retire(m, i, k, err, errlen) != 0) return -1;
  }
  return 0;
}

/* What [ptr, ptr + len) lies in: *kind, and for VMM the chunks covering it (malloc'd). */
static int classify(devmem_t *m, uintptr_t ptr, size_t len, devmem_kind_t *kind,
                    devmem_range_t *first, devmem_range_t **chunks, uint32_t *n, char *err,
                    size_t errlen)
{
  *chunks = NULL;
  *n = 0;
  int e = m->drv->query(m->drv->ctx, ptr, first);
  if (e != 0 || first->kind == DEVMEM_NONE)
    return devmem_fail(err, errlen, "buffer %#lx is not device memory of this process (%s)",
                       (unsigned long)ptr, e ? devmem_drv_error(m, e) : "unknown to the driver");
  *kind = first->kind;
  uintptr_t end = ptr + (len ? len : 1);
  if (first->kind != DEVMEM_VMM) {
    if (end < ptr || end > first->base + first->size)
      return devmem_fail(err, errlen, "buffer %#lx of %zu bytes runs past the end of its "
                         "allocation (%zu bytes from %#lx)", (unsigned long)ptr, len,
                         first->size, (unsigned long)first->base);
    return 0;
  }
  size_t cap = 0;
  devmem_range_t r = *first;
  for (;;) {
    if (*n == DEVMEM_MAX_CHUNKS || devmem_grow((void **)chunks, &cap, *n + 1, sizeof r) != 0) {
      free(*chunks);
      *chunks = NULL;
      return devmem_fail(err, errlen, "buffer %#lx: too many memory chunks", (unsigned long)ptr);
    }
    (*chunks)[(*n)++] = r;
    uintptr_t next = r.base + r.size;
    if (next >= end) return 0;
    e = m->drv->query(m->drv->ctx, next, &r);
    if (e == 0 && r.kind != DEVMEM_NONE && r.kind != DEVMEM_VMM) {
      *kind = DEVMEM_PRIVATE; /* a chunk without a shareable handle: the call is staged */
      return 0;
    }
    if (e != 0 || r.kind == DEVMEM_NONE || r.base != next) {
      free(*chunks);
      *chunks = NULL;
      return devmem_fail(err, errlen, "buffer %#lx of %zu bytes is not mapped at %#lx",
                         (unsigned long)ptr, len, (unsigned long)next);
    }
  }
}

/* The live export holding the buffer, or NULL. */
static devmem_export_t *find_export(devmem_t *m, devmem_kind_t kind, const devmem_range_t *first,
                                    const devmem_range_t *chunks, uint32_t n)
{
  for (size_t i = 0; i < m->nexp; i++) {
    devmem_export_t *e = &m->exp[i];
    if (e->kind != kind) continue;
    if (kind == DEVMEM_LEGACY) {
      if (e->chunks[0].id == first->id && e->base == first->base) return e;
      continue;
    }
    /* VMM: every chunk of the buffer is one of the export's, unchanged. */
    uint32_t c = 0;
    while (c < e->nchunks && e->chunks[c].base != chunks[0].base) c++;
    if (c + n > e->nchunks) continue;
    int same = 1;
    for (uint32_t j = 0; j < n && same; j++)
      same = e->chunks[c + j].base == chunks[j].base && e->chunks[c + j].size == chunks[j].size &&
             e->chunks[c + j].id == chunks[j].id;
    if (same) return e;
  }
  return NULL;
}

/* Make room for one more export; 0 when there is none (the buffer is then staged). */
static int make_room(devmem_t *m, uint64_t k, char *err, size_t errlen)
{
  if (m->nexp < m->max_exports) return 1;
  if (!m->mesh) return 0; /* peers could not be told: never evict */
  size_t lru = m->nexp;
  for (size_t i = 0; i < m->nexp; i++)
    if (!m->exp[i].pins && m->exp[i].last_use < k &&
        (lru == m->nexp || m->exp[i].last_use < m->exp[lru].last_use))
      lru = i;
  if (lru == m->nexp) return 0;
  return retire(m, lru, k, err, errlen) == 0 ? 1 : -1;
}

/* Send each chunk of the new VMM export e to every peer in another process (a peer that has
 * left is skipped: the rendezvous reports it). 1: sent; 0: the driver cannot export it or a
 * socket is full (the buffer is then staged, and the chunks sent so far retired); -1: error. */
static int send_chunks(devmem_t *m, const devmem_export_t *e, char *err, size_t errlen)
{
  for (uint32_t c = 0; c < e->nchunks; c++) {
    int fd = -1;
    int de = m->drv->vmm_export(m->drv->ctx, e->chunks[c].base, &fd);
    if (de != 0 || fd < 0) /* peers may hold the chunks sent so far: let them go */
      return c > 0 ? queue_retire(m, e->id, m->k, err, errlen) : 0;
    devmem_msg_t msg = {DEVMEM_MSG_MAGIC, DEVMEM_MSG_CHUNK, e->id, 0, c, e->nchunks,
                        e->chunks[c].base - e->base, e->chunks[c].size, e->size};
    int rc = FDPASS_SENT;
    for (int p = 0; p < m->nranks && (rc == FDPASS_SENT || rc == FDPASS_GONE); p++)
      if (p != m->rank && !m->local[p])
        rc = fdpass_send(m->mesh, p, &msg, sizeof msg, fd, err, errlen);
    close(fd);
    if (rc == FDPASS_ERROR) return -1;
    if (rc == FDPASS_FULL) return queue_retire(m, e->id, m->k, err, errlen);
  }
  return 1;
}

/* A new export of the buffer classified as (kind, first, chunks); *out NULL when it cannot be
 * shared after all. Takes ownership of chunks. */
static int new_export(devmem_t *m, uint64_t k, devmem_kind_t kind, const devmem_range_t *first,
                      devmem_range_t *chunks, uint32_t n, devmem_export_t **out, char *err,
                      size_t errlen)
{
  *out = NULL;
  if (devmem_grow((void **)&m->exp, &m->capexp, m->nexp + 1, sizeof *m->exp) != 0) {
    free(chunks);
    return devmem_fail(err, errlen, "out of host memory");
  }
  devmem_export_t e;
  memset(&e, 0, sizeof e);
  e.id = m->next_id++;
  e.kind = kind;
  e.last_use = k;
  if (kind == DEVMEM_LEGACY) {
    free(chunks);
    e.chunks = malloc(sizeof *e.chunks);
    if (!e.chunks) return devmem_fail(err, errlen, "out of host memory");
    e.chunks[0] = *first;
    e.nchunks = 1;
    e.base = first->base;
    e.size = first->size;
    if (m->drv->legacy_export(m->drv->ctx, e.base, e.handle) != 0) {
      free(e.chunks);
      return 0; /* not shareable after all: staged */
    }
  } else {
    e.chunks = chunks;
    e.nchunks = n;
    e.base = chunks[0].base;
    e.size = chunks[n - 1].base + chunks[n - 1].size - e.base;
    int rc = send_chunks(m, &e, err, errlen);
    if (rc <= 0) {
      free(e.chunks);
      return rc;
    }
  }
  m->exp[m->nexp++] = e;
  m->st.exports = m->nexp;
  m->st.exports_made++;
  *out = &m->exp[m->nexp - 1];
  return 0;
}

/* The export of [ptr, ptr + len), found or made; NULL with *kind PRIVATE when it cannot be
 * shared. The caller holds the lock. */
static int export_locked(devmem_t *m, uint64_t k, uintptr_t ptr, size_t len, devmem_kind_t *kind,
                         devmem_export_t **out, char *err, size_t errlen)
{
  *out = NULL;
  devmem_range_t first, *chunks = NULL;
  uint32_t n = 0;
  if (classify(m, ptr, len, kind, &first, &chunks, &n, err, errlen) != 0) return -1;
  if (*kind == DEVMEM_VMM && !m->mesh) *kind = DEVMEM_PRIVATE;
  if (*kind == DEVMEM_PRIVATE || m->nremote == 0) {
    free(chunks);
    return 0;
  }
  devmem_export_t *e = find_export(m, *kind, &first, chunks, n);
  if (e) {
    free(chunks);
    e->last_use = k;
    *out = e;
    return 0;
  }
  /* A miss: memory may have been freed since; then make room and export. */
  int room = recheck(m, k, err, errlen) == 0 ? make_room(m, k, err, errlen) : -1;
  if (room <= 0) {
    free(chunks);
    if (room == 0) *kind = DEVMEM_PRIVATE;
    return room;
  }
  if (new_export(m, k, *kind, &first, chunks, n, out, err, errlen) != 0) return -1;
  if (!*out) *kind = DEVMEM_PRIVATE;
  return 0;
}

int devmem_export(devmem_t *m, uint64_t k, const void *ptr, size_t len, devmem_desc_t *out,
                  char *err, size_t errlen)
{
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&m->lock);
  if (k > m->k) m->k = k;
  int rc = 0;
  if (m->mesh && k >= m->last_recheck + DEVMEM_RECHECK) rc = recheck(m, k, err, errlen);
  devmem_kind_t kind = DEVMEM_NONE;
  devmem_export_t *e = NULL;
  if (rc == 0) rc = export_locked(m, k, (uintptr_t)ptr, len, &kind, &e, err, errlen);
  /* Before the record is published: what was retired since the last exchange, and now. */
  if (rc == 0 && m->nout) rc = flush_retires(m, err, errlen);
  if (rc == 0) {
    out->ptr = (uint64_t)(uintptr_t)ptr;
    out->kind = m->nremote == 0 ? DEVMEM_LOCAL : kind;
    if (e) {
      out->export_id = e->id;
      out->offset = (uintptr_t)ptr - e->base;
      memcpy(out->handle, e->handle, sizeof out->handle);
    }
  }
  pthread_mutex_unlock(&m->lock);
  return rc;
}

int devmem_register(devmem_t *m, const void *ptr, size_t len, uint64_t *reg, devmem_kind_t *kind,
                    char *err, size_t errlen)
{
  pthread_mutex_lock(&m->lock);
  devmem_export_t *e = NULL;
  int rc = devmem_grow((void **)&m->regs, &m->capregs, m->nregs + 1, sizeof *m->regs);
  if (rc != 0) rc = devmem_fail(err, errlen, "out of host memory");
  if (rc == 0) rc = export_locked(m, m->k, (uintptr_t)ptr, len, kind, &e, err, errlen);
  if (rc == 0) {
    if (e) e->pins++;
    devmem_reg_t r = {m->next_reg++, e ? e->id : 0};
    m->regs[m->nregs++] = r;
    *reg = r.reg;
  }
  pthread_mutex_unlock(&m->lock);
  return rc;
}

int devmem_deregister(devmem_t *m, uint64_t reg, char *err, size_t errlen)
{
  pthread_mutex_lock(&m->lock);
  int rc = 0;
  size_t i = 0;
  while (i < m->nregs && m->regs[i].reg != reg) i++;
  if (i == m->nregs) {
    rc = devmem_fail(err, errlen, "registration %llu is unknown (already deregistered?)",
                     (unsigned long long)reg);
  } else {
    uint64_t id = m->regs[i].export_id;
    m->regs[i] = m->regs[--m->nregs];
    for (size_t j = 0; j < m->nexp && id; j++)
      if (m->exp[j].id == id && --m->exp[j].pins == 0) {
        /* Peers still reading it for a call before this point stop at the next exchange (the
         * message goes with it: nothing is sent from here). */
        rc = retire(m, j, m->k + 1, err, errlen);
        break;
      }
  }
  pthread_mutex_unlock(&m->lock);
  return rc;
}

void devmem_stats(const devmem_t *m, devmem_stats_t *out)
{
  pthread_mutex_lock((pthread_mutex_t *)&m->lock);
  *out = m->st;
  out->imports = 0;
  for (int p = 0; p < m->nranks; p++) out->imports += m->nimp[p];
  out->pending = m->npend;
  out->unsent = m->nout;
  pthread_mutex_unlock((pthread_mutex_t *)&m->lock);
}

void devmem_unmap_chunks(devmem_t *m, uintptr_t va, const devmem_piece_t *pc, uint32_t n)
{
  for (uint32_t i = 0; i < n; i++) m->drv->vmm_unmap(m->drv->ctx, va + pc[i].offset, pc[i].size);
}

void devmem_drop_import(devmem_t *m, int peer, size_t i)
{
  devmem_import_t *x = &m->imp[peer][i];
  const devmem_driver_t *d = m->drv;
  if (x->kind == DEVMEM_LEGACY) {
    /* Another import of the same handle keeps the mapping. */
    int shared = 0;
    for (size_t j = 0; j < m->nimp[peer] && !shared; j++)
      shared = j != i && m->imp[peer][j].kind == DEVMEM_LEGACY && m->imp[peer][j].va == x->va;
    if (!shared) d->legacy_close(d->ctx, x->va);
  } else {
    devmem_unmap_chunks(m, x->va, x->pieces, x->npieces);
    d->va_free(d->ctx, x->va, x->size);
    free(x->pieces);
  }
  m->imp[peer][i] = m->imp[peer][--m->nimp[peer]];
}

void devmem_free(devmem_t *m)
{
  if (!m) return;
  for (int p = 0; p < m->nranks; p++) {
    while (m->nimp[p]) devmem_drop_import(m, p, m->nimp[p] - 1);
    free(m->imp[p]);
  }
  for (size_t i = 0; i < m->npend; i++)
    if (m->pend[i].fd >= 0) close(m->pend[i].fd);
  free(m->pend);
  free(m->out); /* unsent retirements: the peers drop every mapping when they leave too */
  for (size_t i = 0; i < m->nexp; i++) free(m->exp[i].chunks);
  free(m->exp);
  free(m->regs);
  pthread_mutex_destroy(&m->lock);
  free(m);
}
