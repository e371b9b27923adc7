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
#include "src/obs/json_out.h"
#include "src/obs/outfile.h"

static size_t elem_size(st_dtype_t d) { return d == ST_I64 ? 8 : 4; }

static size_t tensor_bytes(const st_tensor_t *t)
{
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  return n * elem_size(t->dtype);
}

/* The JSON header, padded with spaces to a multiple of 8 bytes (strings through json_out.h:
 * the settings may hold any bytes of a path). */
static char *header(const st_tensor_t *t, int n, const char *const *meta, int n_meta,
                    size_t *len)
{
  char *h = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&h, &size);
  if (!f) return NULL;
  fputc('{', f);
  if (n_meta > 0) {
    json_string(f, "__metadata__");
    fputs(":{", f);
    for (int i = 0; i < n_meta; i++) {
      if (i) fputc(',', f);
      json_string(f, meta[2 * i]);
      fputc(':', f);
      json_string(f, meta[2 * i + 1]);
    }
    fprintf(f, "}%s", n ? "," : "");
  }
  size_t data = 0;
  for (int i = 0; i < n; i++) {
    size_t b = tensor_bytes(&t[i]);
    if (i) fputc(',', f);
    json_string(f, t[i].name);
    fprintf(f, ":{\"dtype\":\"%s\",\"shape\":[", t[i].dtype == ST_I64 ? "I64" : "F32");
    for (int d = 0; d < t[i].ndim; d++)
      fprintf(f, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
    fprintf(f, "],\"data_offsets\":[%zu,%zu]}", data, data + b);
    data += b;
  }
  fputc('}', f);
  while (ftell(f) % 8) fputc(' ', f);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    free(h);
    return NULL;
  }
  *len = size;
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
