/* json_mini.c — a strict JSON parser (RFC 8259; \u escapes become '?') for tests that check
 * files the trainer writes: it rejects what a JSON reader would, and builds a tree to walk. */
#include "tests/json_mini.h"

#include <stdlib.h>
#include <string.h>

static const char *ws(const char *p)
{
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

static const char *value(const char *p, jv_t *v);

static const char *string(const char *p, char **out)
{
  if (*p != '"') return NULL;
  size_t cap = 16, n = 0;
  char *s = malloc(cap);
  for (p++; *p != '"'; p++) {
    if ((unsigned char)*p < 0x20) return free(s), NULL;
    char c = *p;
    if (c == '\\') {
      p++;
      const char *esc = strchr("\"\\/bfnrtu", *p);
      if (!*p || !esc) return free(s), NULL;
      if (*p == 'u') {
        for (int i = 1; i <= 4; i++)
          if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i]) return free(s), NULL;
        p += 4;
        c = '?';
      } else {
        c = "\"\\/\b\f\n\r\t"[esc - "\"\\/bfnrtu"];
      }
    }
    if (n + 2 > cap) s = realloc(s, cap *= 2);
    s[n++] = c;
  }
  s[n] = 0;
  *out = s;
  return p + 1;
}

static const char *number(const char *p, double *out)
{
  const char *q = p;
  if (*q == '-') q++;
  if (*q == '0') q++;
  else if (*q >= '1' && *q <= '9') while (*q >= '0' && *q <= '9') q++;
  else return NULL;
  if (*q == '.') {
    q++;
    if (!(*q >= '0' && *q <= '9')) return NULL;
    while (*q >= '0' && *q <= '9') q++;
  }
  if (*q == 'e' || *q == 'E') {
    q++;
    if (*q == '+' || *q == '-') q++;
    if (!(*q >= '0' && *q <= '9')) return NULL;
    while (*q >= '0' && *q <= '9') q++;
  }
  *out = strtod(p, NULL);
  return q;
}

static const char *list(const char *p, jv_t *v, int obj)
{
  size_t cap = 8;
  v->items = malloc(cap * sizeof *v->items);
  v->keys = obj ? malloc(cap * sizeof *v->keys) : NULL;
  p = ws(p + 1);
  if (*p == (obj ? '}' : ']')) return p + 1;
  for (;;) {
    if (v->n == cap) {
      cap *= 2;
      v->items = realloc(v->items, cap * sizeof *v->items);
      if (obj) v->keys = realloc(v->keys, cap * sizeof *v->keys);
    }
    if (obj) {
      if (!(p = string(ws(p), &v->keys[v->n]))) return NULL;
      p = ws(p);
      if (*p++ != ':') return NULL;
    }
    if (!(p = value(p, &v->items[v->n]))) return NULL;
    v->n++;
    p = ws(p);
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p == (obj ? '}' : ']')) return p + 1;
    return NULL;
  }
}

static const char *value(const char *p, jv_t *v)
{
  memset(v, 0, sizeof *v);
  p = ws(p);
  if (*p == '{') return v->t = J_OBJ, list(p, v, 1);
  if (*p == '[') return v->t = J_ARR, list(p, v, 0);
  if (*p == '"') return v->t = J_STR, string(p, &v->str);
  if (!strncmp(p, "true", 4)) return v->t = J_BOOL, v->num = 1, p + 4;
  if (!strncmp(p, "false", 5)) return v->t = J_BOOL, p + 5;
  if (!strncmp(p, "null", 4)) return v->t = J_NULL, p + 4;
  v->t = J_NUM;
  return number(p, &v->num);
}

void jv_free(jv_t *v)
{
  for (size_t i = 0; i < v->n; i++) {
    jv_free(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->str);
}

int jv_parse(const char *text, jv_t *v)
{
  const char *end = value(text, v);
  return end && *ws(end) == 0 ? 0 : -1;
}

const jv_t *jv_get(const jv_t *o, const char *key)
{
  if (!o || o->t != J_OBJ) return NULL;
  for (size_t i = 0; i < o->n; i++)
    if (!strcmp(o->keys[i], key)) return &o->items[i];
  return NULL;
}
