/* json_out.c — JSON strings and numbers (see json_out.h). */
#include "config.h"

#include "src/obs/json_out.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The length of the well-formed UTF-8 sequence at s (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), or 0 when s[0] does not start one. */
static size_t utf8_len(const unsigned char *s)
{
  unsigned char c = s[0];
  size_t n;
  unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0; /* overlong below U+0800 */
    if (c == 0xed) hi = 0x9f; /* U+D800..U+DFFF: surrogates */
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90; /* overlong below U+10000 */
    if (c == 0xf4) hi = 0x8f; /* above U+10FFFF */
  } else {
    return 0;
  }
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0; /* a NUL ends the string here too */
  return n;
}

/* The escaped form of the character at s: its bytes into out (at most 6), their count in
 * *olen; returns how many bytes of s it took. */
static size_t escape_one(const unsigned char *s, char out[6], size_t *olen)
{
  static const char hex[] = "0123456789abcdef";
  unsigned char c = s[0];
  if (c == '"' || c == '\\') {
    out[0] = '\\', out[1] = (char)c, *olen = 2;
    return 1;
  }
  if (c < 0x20 || c == 0x7f) {
    const char *named = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : NULL;
    if (named) {
      memcpy(out, named, 2), *olen = 2;
    } else {
      memcpy(out, "\\u00", 4);
      out[4] = hex[c >> 4], out[5] = hex[c & 15], *olen = 6;
    }
    return 1;
  }
  if (c < 0x80) {
    out[0] = (char)c, *olen = 1;
    return 1;
  }
  size_t n = utf8_len(s);
  if (n) {
    memcpy(out, s, n), *olen = n;
    return n;
  }
  memcpy(out, "\\ufffd", 6), *olen = 6;
  return 1;
}

void json_string(FILE *f, const char *s)
{
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  fputc('"', f);
  while (*p) {
    char out[6];
    size_t olen;
    p += escape_one(p, out, &olen);
    fwrite(out, 1, olen, f);
  }
  fputc('"', f);
}

size_t json_string_buf(char *buf, size_t len, const char *s)
{
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  size_t off = 0;
#define PUT(ch)                                                                                    \
  do {                                                                                             \
    if (off + 1 < len) buf[off] = (ch);                                                            \
    off++;                                                                                         \
  } while (0)
  PUT('"');
  while (*p) {
    char out[6];
    size_t olen;
    p += escape_one(p, out, &olen);
    for (size_t i = 0; i < olen; i++) PUT(out[i]);
  }
  PUT('"');
#undef PUT
  if (len) buf[off < len ? off : len - 1] = '\0';
  return off;
}

void json_number(FILE *f, double v)
{
  if (isfinite(v)) fprintf(f, "%.9g", v);
  else fputs("null", f);
}
