/* shquote.c — shell words (see shquote.h). */
#include "config.h"

#include "src/obs/shquote.h"

#include <string.h>

const char *shquote(const char *s, char *buf, size_t len)
{
  static const char plain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                              "_-./:@%+=,";
  if (*s && strspn(s, plain) == strlen(s) && strlen(s) < len) {
    strcpy(buf, s);
    return buf;
  }
  size_t o = 0;
  buf[o++] = '\'';
  for (; *s; s++) {
    size_t need = *s == '\'' ? 4 : 1;
    if (o + need + 2 > len) break;
    if (*s == '\'') {
      memcpy(buf + o, "'\\''", 4);
      o += 4;
    } else {
      buf[o++] = *s;
    }
  }
  buf[o++] = '\'';
  buf[o] = 0;
  return buf;
}
