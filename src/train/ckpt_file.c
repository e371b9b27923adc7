/* ckpt_file.c — the checkpoint file format and its atomic writer.
 *
 * Layout (little-endian):
 *   "SHMDDPCK" | u32 version | u32 ntensors | u64 config_len | config bytes
 *   per tensor: u32 name_len | name | u32 dtype | u64 count | u32 crc32(data) | data
 *   "CKPTEND\0" | u32 crc32 of everything before it
 * Each tensor carries its own CRC (zlib's crc32) so a corrupt file names the tensor; the trailer
 * catches truncation and damage to the metadata. The writer streams to a fresh private file
 * beside path (src/obs/outfile.h: a random name, O_EXCL|O_NOFOLLOW, mode 0600), fsyncs it,
 * renames it over path and fsyncs the directory.
 * The reader trusts nothing it reads: every length is checked against what is left of the file
 * before it is used, and a tensor's byte length is its count times its dtype's size (checked for
 * overflow); callers check each tensor's dtype and count against what they expect (ckpt_get,
 * ckpt_expect) before copying. */
#include "config.h"

#include "src/train/ckpt_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "src/check.h"
#include "src/obs/outfile.h"

static const char head_magic[8] = {'S', 'H', 'M', 'D', 'D', 'P', 'C', 'K'};
static const char tail_magic[8] = {'C', 'K', 'P', 'T', 'E', 'N', 'D', 0};

struct ckpt {
  char *config;
  int n;
  ckpt_tensor_t *t;
  char **names;
  void *blob; /* the whole file */
};

size_t ckpt_dtype_size(ckpt_dtype_t d)
{
  switch (d) {
  case CKPT_U8: return 1;
  case CKPT_I32: case CKPT_F32: return 4;
  case CKPT_I64: case CKPT_F64: return 8;
  default: return 0;
  }
}

static long default_write(int fd, const void *buf, size_t len) { return (long)write(fd, buf, len); }
static ckpt_write_fn write_fn = default_write;
void ckpt_set_write_fn(ckpt_write_fn fn) { write_fn = fn ? fn : default_write; }

typedef struct {
  int fd;
  uLong crc; /* running crc of the whole file, for the trailer */
  int err;   /* errno of the first failure */
} sink_t;

static void put(sink_t *s, const void *buf, size_t len)
{
  const char *p = buf;
  while (len > 0 && !s->err) {
    size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
    long w = write_fn(s->fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      s->err = errno;
      return;
    }
    if (w == 0) { s->err = ENOSPC; return; }
    s->crc = crc32(s->crc, (const Bytef *)p, (uInt)w);
    p += w;
    len -= (size_t)w;
  }
}

static void put_u32(sink_t *s, uint32_t v) { put(s, &v, 4); }
static void put_u64(sink_t *s, uint64_t v) { put(s, &v, 8); }

static uLong crc_of(const void *data, uint64_t bytes)
{
  uLong c = crc32(0L, Z_NULL, 0);
  const Bytef *p = data;
  while (bytes > 0) {
    uInt chunk = bytes > (1u << 30) ? (1u << 30) : (uInt)bytes;
    c = crc32(c, p, chunk);
    p += chunk;
    bytes -= chunk;
  }
  return c;
}

int ckpt_write(const char *path, const char *config, const ckpt_tensor_t *t, int n, char *err,
               size_t errlen)
{
  for (int i = 0; i < n; i++) {
    size_t len = t[i].name ? strlen(t[i].name) : 0;
    if (len == 0 || len > CKPT_MAX_NAME || ckpt_dtype_size(t[i].dtype) == 0 ||
        (t[i].count && !t[i].data)) {
      return check_fail(err, errlen, "checkpoint tensor %d ('%s') has a bad name, dtype or buffer",
                        i, t[i].name ? t[i].name : "");
    }
    for (int j = 0; j < i; j++)
      if (strcmp(t[i].name, t[j].name) == 0) {
        return check_fail(err, errlen, "checkpoint tensor name '%s' is used twice", t[i].name);
      }
  }
  char tmp[4096];
  int fd = outfile_create_temp(path, tmp, sizeof tmp);
  if (fd < 0) {
    return check_fail(err, errlen, "cannot create a temporary file beside %s: %s (is the output "
                      "directory writable?)", path, strerror(errno));
  }
  sink_t s = {fd, crc32(0L, Z_NULL, 0), 0};
  const char *cfg = config ? config : "";
  put(&s, head_magic, 8);
  put_u32(&s, CKPT_VERSION);
  put_u32(&s, (uint32_t)n);
  put_u64(&s, strlen(cfg));
  put(&s, cfg, strlen(cfg));
  for (int i = 0; i < n && !s.err; i++) {
    uint64_t bytes = t[i].count * ckpt_dtype_size(t[i].dtype);
    put_u32(&s, (uint32_t)strlen(t[i].name));
    put(&s, t[i].name, strlen(t[i].name));
    put_u32(&s, (uint32_t)t[i].dtype);
    put_u64(&s, t[i].count);
    put_u32(&s, (uint32_t)crc_of(t[i].data, bytes));
    put(&s, t[i].data, bytes);
  }
  put(&s, tail_magic, 8);
  uint32_t total = (uint32_t)s.crc;
  put_u32(&s, total);
  if (!s.err && fsync(fd) != 0) s.err = errno;
  if (s.err) {
    unlink(tmp);
    close(fd);
    return check_fail(err, errlen,
                      "writing checkpoint %s failed: %s%s; the previous checkpoint is "
                      "unchanged",
                      path, strerror(s.err),
                      s.err == ENOSPC ? " (free disk space or choose another --out)" : "");
  }
  /* Renamed before the descriptor is closed: its lock marks the file as being written until
   * it has its final name (outfile.h). */
  if (outfile_rename(tmp, path, 1) != 0) {
    int e = errno;
    close(fd);
    return check_fail(err, errlen,
                      "cannot rename %s to %s: %s; the previous checkpoint is unchanged", tmp, path,
                      strerror(e));
  }
  close(fd);
  /* Make the rename itself durable. */
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

/* ---- reading ---- */

typedef struct {
  const unsigned char *p, *end;
} cursor_t;

static int take(cursor_t *c, void *dst, size_t n)
{
  if ((size_t)(c->end - c->p) < n) return -1;
  memcpy(dst, c->p, n);
  c->p += n;
  return 0;
}

void ckpt_free(ckpt_t *c)
{
  if (!c) return;
  if (c->names)
    for (int i = 0; i < c->n; i++) free(c->names[i]);
  free(c->names);
  free(c->t);
  free(c->config);
  free(c->blob);
  free(c);
}

/* A checkpoint being read is refused: free what was read so far, say why. */
static int refuse(ckpt_t *c, char *err, size_t errlen, const char *path, const char *what)
{
  ckpt_free(c);
  return check_fail(err, errlen, "checkpoint %s is not usable: %s", path, what);
}

/* The whole file into a new checkpoint's blob (*out, *size), or the message. */
static int read_whole(const char *path, ckpt_t **out, size_t *size, char *err, size_t errlen)
{
  FILE *f = fopen(path, "rb");
  if (!f) {
    return check_fail(err, errlen, "cannot open checkpoint %s: %s", path, strerror(errno));
  }
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    fclose(f);
    return check_fail(err, errlen, "checkpoint %s is not a regular file", path);
  }
  ckpt_t *c = calloc(1, sizeof *c);
  *size = (size_t)sb.st_size;
  if (c) c->blob = malloc(*size ? *size : 1);
  if (!c || !c->blob || fread(c->blob, 1, *size, f) != *size) {
    fclose(f);
    return refuse(c, err, errlen, path, "cannot read it whole");
  }
  fclose(f);
  *out = c;
  return 0;
}

/* Tensor i at cur: its header, its bytes within the file and their CRC; it becomes c->t[i].
 * NULL, or what is wrong (in what, when it names the tensor). */
static const char *take_tensor(ckpt_t *c, cursor_t *cur, uint32_t i, char *what, size_t len)
{
  uint32_t name_len, dtype, crc;
  uint64_t count;
  if (take(cur, &name_len, 4) || name_len == 0 || name_len > CKPT_MAX_NAME)
    return "corrupt tensor header";
  c->names[i] = calloc(1, name_len + 1);
  c->n = (int)i + 1;
  if (take(cur, c->names[i], name_len) || take(cur, &dtype, 4) || take(cur, &count, 8) ||
      take(cur, &crc, 4) || ckpt_dtype_size((ckpt_dtype_t)dtype) == 0)
    return "corrupt tensor header";
  uint64_t left = (uint64_t)(cur->end - cur->p), size = ckpt_dtype_size((ckpt_dtype_t)dtype);
  if (count > left / size) {
    snprintf(what, len, "tensor '%s' is cut short", c->names[i]);
    return what;
  }
  uint64_t bytes = count * size; /* no overflow: count <= left / size */
  if ((uint32_t)crc_of(cur->p, bytes) != crc) {
    snprintf(what, len, "tensor '%s' fails its CRC32 check (the file is corrupt)", c->names[i]);
    return what;
  }
  c->t[i].name = c->names[i];
  c->t[i].dtype = (ckpt_dtype_t)dtype;
  c->t[i].count = count;
  c->t[i].data = cur->p;
  cur->p += bytes;
  return NULL;
}

int ckpt_read(const char *path, ckpt_t **out, char *err, size_t errlen)
{
  *out = NULL;
  ckpt_t *c = NULL;
  size_t size = 0;
  CHECK(read_whole(path, &c, &size, err, errlen));
  cursor_t cur = {c->blob, (const unsigned char *)c->blob + size};
  char magic[8];
  uint32_t version, n;
  uint64_t cfg_len;
  if (take(&cur, magic, 8) || memcmp(magic, head_magic, 8))
    return refuse(c, err, errlen, path, "not a shmddp checkpoint (bad magic)");
  if (size < 8 + 12 || memcmp((const char *)c->blob + size - 12, tail_magic, 8))
    return refuse(c, err, errlen, path, "truncated (no end marker): the write did not finish");
  uint32_t want_total;
  memcpy(&want_total, (const char *)c->blob + size - 4, 4);
  if ((uint32_t)crc_of(c->blob, size - 4) != want_total)
    return refuse(c, err, errlen, path, "corrupt (file checksum mismatch)");
  if (take(&cur, &version, 4) || take(&cur, &n, 4) || take(&cur, &cfg_len, 8))
    return refuse(c, err, errlen, path, "truncated header");
  if (version != CKPT_VERSION) {
    char what[96];
    snprintf(what, sizeof what, "format version %u, this build reads version %d", version,
             CKPT_VERSION);
    return refuse(c, err, errlen, path, what);
  }
  if (cfg_len > (uint64_t)(cur.end - cur.p) || n > 1000000)
    return refuse(c, err, errlen, path, "corrupt header");
  c->config = malloc(cfg_len + 1);
  take(&cur, c->config, cfg_len);
  c->config[cfg_len] = 0;
  c->t = calloc(n ? n : 1, sizeof *c->t);
  c->names = calloc(n ? n : 1, sizeof *c->names);
  for (uint32_t i = 0; i < n; i++) {
    char what[160];
    const char *bad = take_tensor(c, &cur, i, what, sizeof what);
    if (bad) return refuse(c, err, errlen, path, bad);
  }
  if ((size_t)(cur.end - cur.p) != 12)
    return refuse(c, err, errlen, path, "unexpected bytes after the last tensor");
  *out = c;
  return 0;
}

const char *ckpt_config(const ckpt_t *c) { return c->config; }
int ckpt_count(const ckpt_t *c) { return c->n; }
const ckpt_tensor_t *ckpt_tensor(const ckpt_t *c, int i) { return i >= 0 && i < c->n ? &c->t[i] : NULL; }

const ckpt_tensor_t *ckpt_find(const ckpt_t *c, const char *name)
{
  for (int i = 0; i < c->n; i++)
    if (strcmp(c->t[i].name, name) == 0) return &c->t[i];
  return NULL;
}

static const char *dtype_name(ckpt_dtype_t d)
{
  static const char *const names[] = {"u8", "i32", "i64", "f32", "f64"};
  return (unsigned)d < sizeof names / sizeof names[0] ? names[d] : "?";
}

const ckpt_tensor_t *ckpt_expect(const ckpt_t *c, const char *name, ckpt_dtype_t dtype,
                                 uint64_t count, char *err, size_t errlen)
{
  const ckpt_tensor_t *t = ckpt_find(c, name);
  if (!t) {
    check_fail(err, errlen, "the checkpoint has no tensor '%s' (written by another version or "
               "model?)", name);
    return NULL;
  }
  if (t->dtype != dtype || t->count != count) {
    check_fail(err, errlen, "checkpoint tensor '%s' holds %llu elements of %s, but this run needs "
               "%llu of %s: resume with the same model configuration", name,
               (unsigned long long)t->count, dtype_name(t->dtype), (unsigned long long)count,
               dtype_name(dtype));
    return NULL;
  }
  return t;
}

int ckpt_get(const ckpt_t *c, const char *name, ckpt_dtype_t dtype, uint64_t count, void *dst,
             char *err, size_t errlen)
{
  const ckpt_tensor_t *t = ckpt_expect(c, name, dtype, count, err, errlen);
  if (!t) return -1;
  memcpy(dst, t->data, count * ckpt_dtype_size(dtype));
  return 0;
}
