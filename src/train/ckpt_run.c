/* ckpt_run.c — a checkpoint's run record (see ckpt_run.h). */
#include "config.h"

#include "src/train/ckpt_run.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "src/check.h"

static const char hex[] = "0123456789abcdef";

static void to_hex(const uint8_t *b, char *out)
{
  for (int i = 0; i < CKPT_RUN_ID_BYTES; i++) {
    out[2 * i] = hex[b[i] >> 4];
    out[2 * i + 1] = hex[b[i] & 15];
  }
  out[CKPT_RUN_ID_HEX] = 0;
}

static int hex_digit(char c)
{
  const char *p = c ? strchr(hex, c) : NULL;
  return p ? (int)(p - hex) : -1;
}

int ckpt_run_new_id(char id[CKPT_RUN_ID_HEX + 1], char *err, size_t errlen)
{
  uint8_t b[CKPT_RUN_ID_BYTES];
  if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
    return check_fail(err, errlen, "cannot make the run's id: getrandom: %s", strerror(errno));
  to_hex(b, id);
  return 0;
}

int ckpt_run_is_id(const char *s)
{
  for (int i = 0; i < CKPT_RUN_ID_HEX; i++)
    if (hex_digit(s[i]) < 0) return 0;
  return s[CKPT_RUN_ID_HEX] == 0;
}

size_t ckpt_run_encode(const ckpt_run_t *r, uint8_t *buf, size_t len)
{
  if (!ckpt_run_is_id(r->id) || r->classes < 1 || r->classes > 255 ||
      len < 18 + (size_t)r->classes)
    return 0;
  buf[0] = CKPT_RUN_VERSION;
  for (int i = 0; i < CKPT_RUN_ID_BYTES; i++)
    buf[1 + i] = (uint8_t)(hex_digit(r->id[2 * i]) << 4 | hex_digit(r->id[2 * i + 1]));
  buf[17] = (uint8_t)r->classes;
  memcpy(buf + 18, r->class_value, (size_t)r->classes);
  return 18 + (size_t)r->classes;
}

int ckpt_run_read(const ckpt_t *c, ckpt_run_t *r, char *err, size_t errlen)
{
  memset(r, 0, sizeof *r);
  const ckpt_tensor_t *t = ckpt_find(c, CKPT_RUN_TENSOR);
  if (!t) return 0; /* written before runs had a record */
  const uint8_t *b = t->data;
  if (t->dtype != CKPT_U8 || t->count < 18 || b[0] < 1 || b[17] < 1 ||
      t->count < 18 + (uint64_t)b[17])
    return check_fail(err, errlen, "the checkpoint's run record is damaged (%llu bytes, "
                      "version %d)", (unsigned long long)t->count, t->count ? b[0] : -1);
  to_hex(b + 1, r->id);
  r->classes = b[17];
  memcpy(r->class_value, b + 18, (size_t)r->classes);
  return 0;
}
