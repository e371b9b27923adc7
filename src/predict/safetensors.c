/* safetensors.c — the safetensors writer (see safetensors.h). The header is padded with spaces
 * to a multiple of 8 bytes, so the data that follows is aligned for every dtype. */
#include "config.h"

#include "src/predict/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/check.h"
#include "src/obs/outfile.h"

static size_t elem_size(st_dtype_t d) { return d == ST_I64 ? 8 : 4; }

static size_t tensor_bytes(const st_tensor_t *t)
{
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  return n * elem_size(t->dtype);
}

/* s as the inside of a JSON string at h + off (at most 6 bytes per byte of s). */
static size_t json_text(char *h, size_t off, const char *s)
{
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') off += (size_t)sprintf(h + off, "\\%c", c);
    else if (c < 0x20) off += (size_t)sprintf(h + off, "\\u%04x", c);
    else h[off++] = (char)c;
  }
  h[off] = 0;
  return off;
}

/* The JSON header (tensor names are ours: letters, digits, dots and underscores). */
static char *header(const st_tensor_t *t, int n, const char *const *meta, int n_meta,
                    size_t *len)
{
  size_t cap = 256 + (size_t)n * 200, off = 0, data = 0;
  for (int i = 0; i < 2 * n_meta; i++) cap += 6 * strlen(meta[i]) + 8;
  char *h = malloc(cap);
  if (!h) return NULL;
  off += (size_t)snprintf(h + off, cap - off, "{");
  if (n_meta > 0) {
    off += (size_t)snprintf(h + off, cap - off, "\"__metadata__\":{");
    for (int i = 0; i < n_meta; i++) {
      off += (size_t)snprintf(h + off, cap - off, "%s\"", i ? "," : "");
      off = json_text(h, off, meta[2 * i]);
      off += (size_t)snprintf(h + off, cap - off, "\":\"");
      off = json_text(h, off, meta[2 * i + 1]);
      off += (size_t)snprintf(h + off, cap - off, "\"");
    }
    off += (size_t)snprintf(h + off, cap - off, "}%s", n ? "," : "");
  }
  for (int i = 0; i < n && off < cap; i++) {
    size_t b = tensor_bytes(&t[i]);
    off += (size_t)snprintf(h + off, cap - off, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "",
                            t[i].name, t[i].dtype == ST_I64 ? "I64" : "F32");
    for (int d = 0; d < t[i].ndim; d++)
      off += (size_t)snprintf(h + off, cap - off, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
    off += (size_t)snprintf(h + off, cap - off, "],\"data_offsets\":[%zu,%zu]}", data, data + b);
    data += b;
  }
  off += (size_t)snprintf(h + off, cap - off, "}");
  if (off + 8 >= cap) {
    free(h);
    return NULL;
  }
  while (off % 8) h[off++] = ' ';
  *len = off;
  return h;
}

int safetensors_write(const char *path, const st_tensor_t *t, int n, const char *const *meta,
                      int n_meta, char *err, size_t errlen)
{
  size_t hlen = 0;
  char *h = header(t, n, meta, n_meta, &hlen);
  if (!h) return check_fail(err, errlen, "%s: out of memory for the header", path);
  char tmp[4096];
  FILE *f = outfile_fopen_temp(path, tmp, sizeof tmp); /* O_EXCL|O_NOFOLLOW, mode 0600 */
  if (!f) {
    free(h);
    return check_fail(err, errlen, "%s: cannot create: %s", path, strerror(errno));
  }
  uint8_t len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  fwrite(len8, 1, 8, f);
  fwrite(h, 1, hlen, f);
  for (int i = 0; i < n; i++) fwrite(t[i].data, 1, tensor_bytes(&t[i]), f);
  free(h);
  /* a failed fwrite leaves the stream's error flag set: outfile_commit refuses it */
  if (outfile_commit(f, tmp, path, 1) != 0)
    return check_fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
  return 0;
}
