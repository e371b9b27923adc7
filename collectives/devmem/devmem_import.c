/* devmem_import.c — the import side of devmem.h: the peers' messages (chunk descriptors and
 * retirements) drained from the sockets and checked, peer buffers mapped once per export and
 * range-checked on every use, mappings dropped (devmem_drop_import, in devmem.c) when their owner
 * retires them. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/devmem/devmem_impl.h"

/* A message as received: 0 when well formed (it is then owned by the pending list). */
static int take_message(devmem_t *m, int peer, const devmem_msg_t *g, size_t len, int fd,
                        char *err, size_t errlen)
{
  int ok = len == sizeof *g && g->magic == DEVMEM_MSG_MAGIC && g->export_id != 0;
  if (ok && g->type == DEVMEM_MSG_CHUNK)
    ok = fd >= 0 && g->count >= 1 && g->count <= DEVMEM_MAX_CHUNKS && g->index < g->count &&
         g->size > 0 && g->span <= DEVMEM_MAX_SPAN && g->offset <= g->span &&
         g->size <= g->span - g->offset;
  else if (ok)
    ok = g->type == DEVMEM_MSG_RETIRE && fd < 0;
  if (!ok || devmem_grow((void **)&m->pend, &m->cappend, m->npend + 1, sizeof *m->pend) != 0) {
    if (fd >= 0) close(fd);
    return devmem_fail(err, errlen, "rank %d sent a malformed memory message (%zu bytes, type "
                       "%u); refused", peer, len, len >= 8 ? g->type : 0);
  }
  devmem_pending_t p = {peer, fd, *g};
  m->pend[m->npend++] = p;
  return 0;
}

static int drain(devmem_t *m, char *err, size_t errlen)
{
  for (int p = 0; p < m->nranks; p++) {
    if (p == m->rank || m->local[p] || !fdpass_has(m->mesh, p)) continue;
    for (;;) {
      devmem_msg_t g;
      size_t len = 0;
      int fd = -1;
      int r = fdpass_recv(m->mesh, p, &g, sizeof g, &len, &fd, err, errlen);
      if (r == 0 || r == FDPASS_GONE) break; /* gone: the peer has left (the rendezvous tells) */
      if (r < 0 || take_message(m, p, &g, len, fd, err, errlen) != 0) return -1;
    }
  }
  return 0;
}

static void drop_pending(devmem_t *m, size_t i)
{
  if (m->pend[i].fd >= 0) close(m->pend[i].fd);
  m->pend[i] = m->pend[--m->npend];
}

/* Apply the RETIREs due at exchange k; mappings go only once the device is idle. */
static int apply_retires(devmem_t *m, uint64_t k, int may_quiesce, char *err, size_t errlen)
{
  int mapped = 0;
  for (size_t i = 0; i < m->npend; i++) {
    const devmem_pending_t *p = &m->pend[i];
    if (p->msg.type != DEVMEM_MSG_RETIRE || p->msg.due > k) continue;
    for (size_t j = 0; j < m->nimp[p->peer]; j++) mapped |= m->imp[p->peer][j].id == p->msg.export_id;
  }
  int can_unmap = !mapped;
  if (mapped && may_quiesce) {
    int e = m->drv->quiesce(m->drv->ctx);
    if (e != 0)
      return devmem_fail(err, errlen, "waiting for the device before unmapping a peer's freed "
                         "memory: %s", devmem_drv_error(m, e));
    m->st.quiesces++;
    can_unmap = 1;
  }
  if (!can_unmap) return 0; /* inside a graph capture: at a later exchange */
  for (size_t i = 0; i < m->npend;) {
    devmem_pending_t r = m->pend[i];
    if (r.msg.type != DEVMEM_MSG_RETIRE || r.msg.due > k) {
      i++;
      continue;
    }
    for (size_t j = 0; j < m->nimp[r.peer]; j++)
      if (m->imp[r.peer][j].id == r.msg.export_id) {
        devmem_drop_import(m, r.peer, j);
        break;
      }
    /* Chunks of it never mapped (the export failed half way, or was never used). */
    for (size_t j = 0; j < m->npend;)
      if (m->pend[j].peer == r.peer && m->pend[j].msg.type == DEVMEM_MSG_CHUNK &&
          m->pend[j].msg.export_id == r.msg.export_id)
        drop_pending(m, j);
      else
        j++;
    for (size_t j = 0; j < m->npend; j++)
      if (m->pend[j].peer == r.peer && m->pend[j].msg.type == DEVMEM_MSG_RETIRE &&
          m->pend[j].msg.export_id == r.msg.export_id) {
        drop_pending(m, j);
        break;
      }
    m->st.retired_applied++;
    i = 0; /* the list was reshuffled */
  }
  return 0;
}

int devmem_begin_imports(devmem_t *m, uint64_t k, int may_quiesce, char *err, size_t errlen)
{
  pthread_mutex_lock(&m->lock);
  if (k > m->k) m->k = k;
  int rc = m->mesh ? drain(m, err, errlen) : 0;
  if (rc == 0) rc = apply_retires(m, k, may_quiesce, err, errlen);
  pthread_mutex_unlock(&m->lock);
  return rc;
}

/* [ptr, ptr + len) is device memory of this process, every byte mapped. */
static int covered(devmem_t *m, int peer, uintptr_t ptr, size_t len, char *err, size_t errlen)
{
  uintptr_t end = ptr + (len ? len : 1), at = ptr;
  if (end < ptr) return devmem_fail(err, errlen, "rank %d's buffer wraps around", peer);
  for (int steps = 0; at < end; steps++) {
    devmem_range_t r;
    int e = m->drv->query(m->drv->ctx, at, &r);
    if (e != 0 || r.kind == DEVMEM_NONE || at < r.base || at - r.base >= r.size ||
        steps == DEVMEM_MAX_CHUNKS)
      return devmem_fail(err, errlen, "rank %d (this process) passed buffer %#lx of %zu bytes, "
                         "which is not device memory at %#lx", peer, (unsigned long)ptr, len,
                         (unsigned long)at);
    at = r.base + r.size;
  }
  return 0;
}

static int by_offset(const void *a, const void *b)
{
  uint64_t x = ((const devmem_piece_t *)a)->offset, y = ((const devmem_piece_t *)b)->offset;
  return x < y ? -1 : x > y;
}

static int by_pend_desc(const void *a, const void *b)
{
  size_t x = ((const devmem_piece_t *)a)->pend, y = ((const devmem_piece_t *)b)->pend;
  return x > y ? -1 : x < y;
}

/* The pending chunks of peer's export id, sorted by offset and checked to tile [0, span). */
static int gather_chunks(devmem_t *m, int peer, uint64_t id, devmem_piece_t **out, uint32_t *n,
                         uint64_t *span, char *err, size_t errlen)
{
  uint32_t count = 0;
  size_t have = 0, cap = 0;
  devmem_piece_t *pc = NULL;
  for (size_t i = 0; i < m->npend; i++) {
    const devmem_pending_t *p = &m->pend[i];
    if (p->peer != peer || p->msg.type != DEVMEM_MSG_CHUNK || p->msg.export_id != id) continue;
    if ((have && (p->msg.count != count || p->msg.span != *span)) || have == DEVMEM_MAX_CHUNKS ||
        devmem_grow((void **)&pc, &cap, have + 1, sizeof *pc) != 0) {
      free(pc);
      return devmem_fail(err, errlen, "rank %d described export %llu inconsistently", peer,
                         (unsigned long long)id);
    }
    count = p->msg.count;
    *span = p->msg.span;
    devmem_piece_t x = {p->msg.offset, p->msg.size, i};
    pc[have++] = x;
  }
  int ok = have > 0 && have == count;
  if (ok) qsort(pc, have, sizeof *pc, by_offset);
  uint64_t at = 0;
  for (size_t i = 0; ok && i < have; i++) {
    ok = pc[i].offset == at;
    at += pc[i].size;
  }
  if (!ok || at != *span) {
    free(pc);
    return devmem_fail(err, errlen, "rank %d's buffer (export %llu) arrived as %zu of %u chunks "
                       "that do not tile its %llu bytes", peer, (unsigned long long)id, have,
                       count, (unsigned long long)*span);
  }
  *out = pc;
  *n = (uint32_t)have;
  return 0;
}

/* Map peer's VMM export id from its pending chunks (consumed, mapped or not). */
static int map_vmm(devmem_t *m, int peer, uint64_t id, devmem_import_t *x, char *err,
                   size_t errlen)
{
  const devmem_driver_t *d = m->drv;
  devmem_piece_t *pc = NULL;
  uint32_t n = 0;
  uint64_t span = 0;
  if (gather_chunks(m, peer, id, &pc, &n, &span, err, errlen) != 0) return -1;
  uintptr_t va = 0;
  int e = d->va_reserve(d->ctx, span, &va);
  if (e != 0)
    devmem_fail(err, errlen, "reserving %llu bytes of address space for rank %d's buffer: %s",
                (unsigned long long)span, peer, devmem_drv_error(m, e));
  uint32_t mapped = 0;
  for (; e == 0 && mapped < n; mapped++) {
    uint64_t h = 0;
    e = d->vmm_import(d->ctx, m->pend[pc[mapped].pend].fd, &h);
    if (e == 0) {
      e = d->vmm_map(d->ctx, va + pc[mapped].offset, pc[mapped].size, h);
      d->vmm_release(d->ctx, h); /* the mapping holds the memory now */
    }
    if (e != 0) {
      devmem_fail(err, errlen, "mapping chunk at offset %llu of rank %d's buffer: %s",
                  (unsigned long long)pc[mapped].offset, peer, devmem_drv_error(m, e));
      break;
    }
  }
  if (e == 0 && (e = d->set_access(d->ctx, va, span)) != 0)
    devmem_fail(err, errlen, "enabling access to rank %d's buffer: %s", peer,
                devmem_drv_error(m, e));
  devmem_piece_t *keep = NULL;
  if (e == 0 && !(keep = malloc(n * sizeof *keep)))
    e = devmem_fail(err, errlen, "out of host memory");
  if (keep) memcpy(keep, pc, n * sizeof *keep);
  if (e != 0 && va) {
    devmem_unmap_chunks(m, va, pc, mapped);
    d->va_free(d->ctx, va, span);
  }
  /* The descriptors have done their work (or failed): close them, highest list index first so
   * the others stay where pc says. */
  qsort(pc, n, sizeof *pc, by_pend_desc);
  for (uint32_t i = 0; i < n; i++) drop_pending(m, pc[i].pend);
  free(pc);
  if (e != 0) return -1;
  x->va = va;
  x->size = span;
  x->pieces = keep;
  x->npieces = n;
  return 0;
}

/* Open peer's legacy handle, sharing a mapping already open for the same handle. */
static int map_legacy(devmem_t *m, int peer, const devmem_desc_t *dsc, devmem_import_t *x,
                      char *err, size_t errlen)
{
  memcpy(x->handle, dsc->handle, sizeof x->handle);
  for (size_t j = 0; j < m->nimp[peer]; j++) {
    const devmem_import_t *o = &m->imp[peer][j];
    if (o->kind == DEVMEM_LEGACY && memcmp(o->handle, dsc->handle, sizeof o->handle) == 0) {
      x->va = o->va;
      x->size = o->size;
      return 0;
    }
  }
  int e = m->drv->legacy_open(m->drv->ctx, dsc->handle, &x->va, &x->size);
  if (e != 0)
    return devmem_fail(err, errlen, "cannot open rank %d's buffer (legacy IPC): %s", peer,
                       devmem_drv_error(m, e));
  return 0;
}

static int import_locked(devmem_t *m, int peer, const devmem_desc_t *d, size_t len, void **out,
                         char *err, size_t errlen)
{
  if (m->local[peer]) {
    if (d->kind == DEVMEM_NONE || covered(m, peer, (uintptr_t)d->ptr, len, err, errlen) != 0)
      return d->kind == DEVMEM_NONE ? devmem_fail(err, errlen, "rank %d passed no buffer", peer)
                                    : -1;
    *out = (void *)(uintptr_t)d->ptr;
    return 0;
  }
  if ((d->kind != DEVMEM_LEGACY && d->kind != DEVMEM_VMM) || d->export_id == 0 ||
      d->export_id >= ((uint64_t)1 << 62))
    return devmem_fail(err, errlen, "rank %d's buffer record (kind %u, export %llu) cannot be "
                       "mapped by another process", peer, d->kind,
                       (unsigned long long)d->export_id);
  devmem_import_t *x = NULL;
  for (size_t j = 0; j < m->nimp[peer] && !x; j++)
    if (m->imp[peer][j].id == d->export_id) x = &m->imp[peer][j];
  if (!x) {
    if (devmem_grow((void **)&m->imp[peer], &m->capimp[peer], m->nimp[peer] + 1,
                    sizeof *m->imp[peer]) != 0)
      return devmem_fail(err, errlen, "out of host memory");
    devmem_import_t n;
    memset(&n, 0, sizeof n);
    n.id = d->export_id;
    n.kind = (devmem_kind_t)d->kind;
    int rc = n.kind == DEVMEM_LEGACY ? map_legacy(m, peer, d, &n, err, errlen)
                                     : map_vmm(m, peer, n.id, &n, err, errlen);
    if (rc != 0) return rc;
    m->imp[peer][m->nimp[peer]++] = n;
    m->st.imports_made++;
    x = &m->imp[peer][m->nimp[peer] - 1];
  }
  if (x->kind != (devmem_kind_t)d->kind || d->offset > x->size || len > x->size - d->offset)
    return devmem_fail(err, errlen, "rank %d's buffer (offset %llu, %zu bytes) lies outside the "
                       "%zu bytes it shared; refused", peer, (unsigned long long)d->offset, len,
                       x->size);
  *out = (void *)(x->va + d->offset);
  return 0;
}

int devmem_import(devmem_t *m, uint64_t k, int peer, const devmem_desc_t *d, size_t len,
                  void **out, char *err, size_t errlen)
{
  *out = NULL;
  if (peer < 0 || peer >= m->nranks || peer == m->rank)
    return devmem_fail(err, errlen, "rank %d is not a peer", peer);
  pthread_mutex_lock(&m->lock);
  int rc = import_locked(m, peer, d, len, out, err, errlen);
  pthread_mutex_unlock(&m->lock);
  return rc;
}
