/* failures.h — matrix tests report every failing case, not only the first.
 *
 * A test that runs a table or a matrix of cases checks each case with CF_CHECK (or records a
 * failure with cf_fail) instead of ck_assert, which would end the test at the first bad case; at
 * the end, CF_ASSERT_NONE fails the test once, listing every failing case. The list is plain
 * memory without pointers, so it may live in memory shared with forked ranks. */
#ifndef TESTS_FAILURES_H
#define TESTS_FAILURES_H

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  long checks, failed;
  size_t len;       /* bytes used in text */
  long left_out;    /* failures that did not fit */
  char text[6000];  /* one line per failure */
} case_failures_t;

static inline void cf_init(case_failures_t *f) { memset(f, 0, sizeof *f); }

/* Records a failing case: one line of text. */
static inline void cf_fail(case_failures_t *f, const char *fmt, ...)
{
  f->failed++;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  size_t n = strlen(line);
  if (f->left_out || f->len + n + 3 >= sizeof f->text) {
    f->left_out++;
    return;
  }
  memcpy(f->text + f->len, "  ", 2);
  memcpy(f->text + f->len + 2, line, n);
  f->text[f->len + 2 + n] = '\n';
  f->len += n + 3;
  f->text[f->len] = 0;
}

/* Appends one failure, "text; ", to a short list in a fixed buffer (a rank's result in shared
 * memory); a failure that would leave fewer than `keep` bytes free is left out. */
static inline void fail_list_vadd(char *list, size_t size, size_t keep, const char *fmt,
                                  va_list ap)
{
  size_t off = strlen(list);
  if (off + keep >= size) return;
  vsnprintf(list + off, size - off, fmt, ap);
  off = strlen(list);
  snprintf(list + off, size - off, "; ");
}

/* Counts a check; records a failure (the message) when cond is false. */
#define CF_CHECK(f, cond, ...)                                                                \
  do {                                                                                        \
    (f)->checks++;                                                                            \
    if (!(cond)) cf_fail((f), __VA_ARGS__);                                                   \
  } while (0)

/* Adds every failure of src to dst, prefixed (e.g. "rank 2: "). */
static inline void cf_merge(case_failures_t *dst, const case_failures_t *src, const char *prefix)
{
  dst->checks += src->checks;
  const char *p = src->text;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    while (n && *p == ' ') p++, n--;
    cf_fail(dst, "%s%.*s", prefix, (int)n, p);
    p += n + (nl ? 1 : 0);
  }
  dst->failed += src->left_out;
  dst->left_out += src->left_out;
}

/* The failures of ranks 0..n-1 (fails[r]: rank r's) in one list, each prefixed "WHO R: " (who:
 * "rank", "thread rank"). */
static inline void cf_merge_ranks(case_failures_t *all, const case_failures_t *fails, int n,
                                  const char *who)
{
  cf_init(all);
  char prefix[48];
  for (int r = 0; r < n; r++) {
    snprintf(prefix, sizeof prefix, "%.30s %d: ", who, r);
    cf_merge(all, &fails[r], prefix);
  }
}

/* Fails the test when any check failed, naming every failing case: all of them in the log
 * (stdout), as many as fit in Check's message (its messages are limited to about 4 KiB). */
#define CF_ASSERT_NONE(f, what)                                                               \
  do {                                                                                        \
    if ((f)->failed)                                                                          \
      printf("%s: %ld of %ld checks failed:\n%s%s", (what), (f)->failed, (f)->checks,          \
             (f)->text, (f)->left_out ? "  (more left out)\n" : "");                           \
    ck_assert_msg((f)->failed == 0, "%s: %ld of %ld checks failed:\n%.2500s%s", (what),        \
                  (f)->failed, (f)->checks, (f)->text,                                        \
                  (f)->len > 2500 || (f)->left_out ? "\n  (more: see the list above)" : "");   \
  } while (0)

#endif
