/* json_mini.h — a strict JSON parser for tests: whole documents into a tree of values. */
#ifndef TESTS_JSON_MINI_H
#define TESTS_JSON_MINI_H

#include <stddef.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype_t;
typedef struct jv {
  jtype_t t;
  double num;       /* J_NUM, J_BOOL (0/1) */
  char *str;        /* J_STR */
  size_t n;         /* items of J_ARR / J_OBJ */
  struct jv *items; /* array items / object values */
  char **keys;      /* object keys */
} jv_t;

/* 0 when text is exactly one JSON value (whitespace around it allowed), else -1. Either way
 * jv_free(v) releases what was built. */
int jv_parse(const char *text, jv_t *v);
void jv_free(jv_t *v);
/* The value of key in object o; NULL when o is not an object or has no such key. */
const jv_t *jv_get(const jv_t *o, const char *key);

#endif
