/* devmem_fake.h — a fake device-memory driver for the devmem protocol's CPU tests: "device"
 * allocations are shared memory files (memfd), so forked processes really share, map and unmap
 * them the way ranks do with GPU memory, and a stale mapping really reads stale bytes.
 *   legacy   one memfd mapped once; its "IPC handle" names the owner's descriptor, which a peer
 *            opens through /proc/PID/fd (same user), and the file's identity: a handle of
 *            freed memory is refused with EPERM, as CUDA refuses it ("operation not permitted"),
 *            also when the descriptor's number was reused by a newer allocation
 *   vmm      a reserved range with one memfd per chunk mapped side by side; chunks are exported
 *            as duplicated descriptors
 *   private  anonymous memory the driver refuses to share
 * The counters say how many peer mappings are live, for the tests' "mappings do not grow". */
#ifndef TESTS_DEVMEM_FAKE_H
#define TESTS_DEVMEM_FAKE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collectives/devmem/devmem.h"

#define FAKE_MAX 4096

typedef struct {
  uintptr_t base;
  size_t size;
  uint64_t id;
  devmem_kind_t kind;
  int fd;
} fake_alloc_t;

typedef struct {
  uintptr_t base;
  size_t size;
} fake_open_t;

static fake_alloc_t fake_tab[FAKE_MAX];
static int fake_n;
static uint64_t fake_next_id = 1000;
static fake_open_t fake_opens[FAKE_MAX];
static int fake_nopen;
static long fake_vmm_maps, fake_handles, fake_quiesces;

static void fake_add(uintptr_t base, size_t size, devmem_kind_t kind, int fd)
{
  fake_alloc_t a = {base, size, fake_next_id++, kind, fd};
  if (fake_n < FAKE_MAX) fake_tab[fake_n++] = a;
}

static void *fake_alloc(devmem_kind_t kind, size_t size)
{
  int fd = kind == DEVMEM_PRIVATE ? -1 : memfd_create("fake-dev", MFD_CLOEXEC);
  if (kind != DEVMEM_PRIVATE && (fd < 0 || ftruncate(fd, (off_t)size) != 0)) return NULL;
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                 fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, fd, 0);
  if (p == MAP_FAILED) return NULL;
  fake_add((uintptr_t)p, size, kind, fd);
  return p;
}

/* nchunks chunks of chunk bytes side by side in one reserved range. */
__attribute__((unused)) static void *fake_alloc_vmm(int nchunks, size_t chunk)
{
  char *va = mmap(NULL, nchunks * chunk, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (va == MAP_FAILED) return NULL;
  for (int i = 0; i < nchunks; i++) {
    int fd = memfd_create("fake-vmm", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)chunk) != 0 ||
        mmap(va + i * chunk, chunk, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
      return NULL;
    fake_add((uintptr_t)(va + i * chunk), chunk, DEVMEM_VMM, fd);
  }
  return va;
}

/* Free every allocation inside [p, p + size). */
static void fake_free(void *p, size_t size)
{
  uintptr_t lo = (uintptr_t)p, hi = lo + size;
  for (int i = 0; i < fake_n;) {
    if (fake_tab[i].base >= lo && fake_tab[i].base < hi) {
      if (fake_tab[i].fd >= 0) close(fake_tab[i].fd);
      fake_tab[i] = fake_tab[--fake_n];
    } else {
      i++;
    }
  }
  munmap(p, size);
}

static fake_alloc_t *fake_find(uintptr_t p)
{
  for (int i = 0; i < fake_n; i++)
    if (p >= fake_tab[i].base && p - fake_tab[i].base < fake_tab[i].size) return &fake_tab[i];
  return NULL;
}

static int fk_query(void *ctx, uintptr_t ptr, devmem_range_t *out)
{
  memset(out, 0, sizeof *out);
  fake_alloc_t *a = fake_find(ptr);
  if (a) {
    out->kind = a->kind;
    out->base = a->base;
    out->size = a->size;
    out->id = a->id;
    return 0;
  }
  for (int i = 0; i < fake_nopen; i++) /* a peer's buffer mapped here counts as device memory */
    if (ptr >= fake_opens[i].base && ptr - fake_opens[i].base < fake_opens[i].size) {
      out->kind = DEVMEM_PRIVATE;
      out->base = fake_opens[i].base;
      out->size = fake_opens[i].size;
    }
  return 0;
}

typedef struct {
  int32_t pid, fd;
  uint64_t size;
  uint64_t dev, ino; /* the file the descriptor held when exported */
} fake_handle_t;

_Static_assert(sizeof(fake_handle_t) <= DEVMEM_HANDLE_BYTES, "fake handle too large");

static int fk_legacy_export(void *ctx, uintptr_t base, unsigned char handle[DEVMEM_HANDLE_BYTES])
{
  fake_alloc_t *a = fake_find(base);
  struct stat sb;
  if (!a || a->kind != DEVMEM_LEGACY || fstat(a->fd, &sb) != 0) return EINVAL;
  fake_handle_t h = {(int32_t)getpid(), a->fd, a->size, (uint64_t)sb.st_dev, (uint64_t)sb.st_ino};
  memset(handle, 0, DEVMEM_HANDLE_BYTES);
  memcpy(handle, &h, sizeof h);
  return 0;
}

static int fk_legacy_open(void *ctx, const unsigned char handle[DEVMEM_HANDLE_BYTES],
                          uintptr_t *base, size_t *size)
{
  fake_handle_t h;
  memcpy(&h, handle, sizeof h);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
  if (fake_nopen == FAKE_MAX) return EMFILE;
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 && errno != ENOENT) return errno;
  /* Gone, or the number now holds another allocation: the handle's memory was freed. */
  if (fd < 0 || fstat(fd, &sb) != 0 || (uint64_t)sb.st_dev != h.dev ||
      (uint64_t)sb.st_ino != h.ino) {
    if (fd >= 0) close(fd);
    return EPERM;
  }
  void *p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return errno;
  fake_open_t o = {(uintptr_t)p, h.size};
  fake_opens[fake_nopen++] = o;
  *base = (uintptr_t)p;
  *size = h.size;
  return 0;
}

static int fk_legacy_close(void *ctx, uintptr_t base)
{
  for (int i = 0; i < fake_nopen; i++)
    if (fake_opens[i].base == base) {
      munmap((void *)base, fake_opens[i].size);
      fake_opens[i] = fake_opens[--fake_nopen];
      return 0;
    }
  return EINVAL;
}

static int fk_vmm_export(void *ctx, uintptr_t chunk, int *fd)
{
  fake_alloc_t *a = fake_find(chunk);
  if (!a || a->kind != DEVMEM_VMM || a->base != chunk) return EINVAL;
  *fd = dup(a->fd);
  return *fd < 0 ? errno : 0;
}

static int fk_vmm_import(void *ctx, int fd, uint64_t *h)
{
  int d = dup(fd);
  if (d < 0) return errno;
  fake_handles++;
  *h = (uint64_t)d;
  return 0;
}

static int fk_vmm_release(void *ctx, uint64_t h)
{
  fake_handles--;
  return close((int)h) == 0 ? 0 : errno;
}

static int fk_va_reserve(void *ctx, size_t size, uintptr_t *va)
{
  void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return errno;
  *va = (uintptr_t)p;
  return 0;
}

static int fk_va_free(void *ctx, uintptr_t va, size_t size)
{
  return munmap((void *)va, size) == 0 ? 0 : errno;
}

static int fk_vmm_map(void *ctx, uintptr_t va, size_t size, uint64_t h)
{
  struct stat sb;
  if (fstat((int)h, &sb) != 0 || (size_t)sb.st_size != size) return EINVAL;
  if (mmap((void *)va, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, (int)h, 0) == MAP_FAILED)
    return errno;
  fake_vmm_maps++;
  if (fake_nopen < FAKE_MAX) {
    fake_open_t o = {va, size};
    fake_opens[fake_nopen++] = o;
  }
  return 0;
}

static int fk_vmm_unmap(void *ctx, uintptr_t va, size_t size)
{
  for (int i = 0; i < fake_nopen; i++)
    if (fake_opens[i].base == va) fake_opens[i] = fake_opens[--fake_nopen];
  fake_vmm_maps--;
  return mmap((void *)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
              -1, 0) == MAP_FAILED ? errno : 0;
}

static int fk_set_access(void *ctx, uintptr_t va, size_t size) { return 0; }
static int fk_quiesce(void *ctx)
{
  fake_quiesces++;
  return 0;
}
static const char *fk_error_name(void *ctx, int err) { return strerror(err); }

static const devmem_driver_t fake_driver = {
  NULL, fk_query, fk_legacy_export, fk_legacy_open, fk_legacy_close, fk_vmm_export,
  fk_vmm_import, fk_vmm_release, fk_va_reserve, fk_va_free, fk_vmm_map, fk_vmm_unmap,
  fk_set_access, fk_quiesce, fk_error_name,
};

/* Peer mappings live in this process (legacy opens and VMM chunks). */
__attribute__((unused)) static int fake_live_mappings(void) { return fake_nopen; }

#endif
