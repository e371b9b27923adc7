/* log_input.h — how a fuzzer input becomes the log.jsonl a resumed run reads back
 * (report_log_continue keeps the earlier run's records up to the checkpoint's step), and the
 * reader's contract; shared by the libFuzzer harness and the Check test that replays kept inputs.
 * Bytes 0-1: the checkpoint's step (little-endian); the rest: the old log, any bytes. The new
 * log must hold only whole lines of the old one, in their order, each a step record at or before
 * that step or a validation before it, followed by the record the resumed run appends. */
#ifndef TESTS_FUZZ_LOG_INPUT_H
#define TESTS_FUZZ_LOG_INPUT_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/obs/report_log.h"

/* Whether [line, line + n) (its '\n' included) is a whole line of old[0, size). */
static inline int log_fuzz_is_line_of(const uint8_t *old, size_t size, const char *line, size_t n,
                                      size_t *from)
{
  for (size_t at = *from; at + n <= size; at++) {
    if ((at == 0 || old[at - 1] == '\n') && memcmp(old + at, line, n) == 0) {
      *from = at + n;
      return 1;
    }
  }
  return 0;
}

/* dir: a scratch folder of the caller's (its log.jsonl is rewritten). Returns 0 when the log
 * was continued, 1 when refused with a message; aborts when the contract is broken. */
static inline int log_fuzz_run(const uint8_t *data, size_t size, const char *dir)
{
  if (size < 2) return 1;
  long last_step = data[0] | data[1] << 8;
  data += 2;
  size -= 2;
  int fd = memfd_create("log", 0);
  if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size)) {
    if (fd >= 0) close(fd);
    return 1;
  }
  char from[64], path[1024];
  snprintf(from, sizeof from, "/proc/self/fd/%d", fd);
  snprintf(path, sizeof path, "%s/log.jsonl", dir);
  report_log_t *l = NULL;
  char err[512] = "";
  static const char run_id[] = "00112233445566778899aabbccddeeff";
  int rc = report_log_continue(&l, dir, from, last_step, run_id, err, sizeof err);
  close(fd);
  if (rc != 0) {
    if (!err[0]) abort(); /* a refusal says why */
    return 1;
  }
  report_step_t s = {.step = last_step + 1, .loss = 1.0};
  if (report_log_step(l, &s) != 0) abort();
  report_log_close(l);
  FILE *f = fopen(path, "rb");
  if (!f) abort();
  char *line = NULL, *prev = NULL;
  size_t cap = 0, at = 0;
  ssize_t n, prevn = 0;
  /* the first line names the run, written afresh */
  char head[96];
  int hn = snprintf(head, sizeof head, "{\"type\": \"run\", \"run_id\": \"%s\"}\n", run_id);
  if ((n = getline(&line, &cap, f)) != hn || memcmp(line, head, (size_t)hn) != 0) abort();
  while ((n = getline(&line, &cap, f)) > 0) {
    if (line[n - 1] != '\n') abort(); /* whole lines only */
    /* every line but the last is a line of the old log, in order */
    if (prev && !log_fuzz_is_line_of(data, size, prev, (size_t)prevn, &at)) abort();
    free(prev);
    if (!(prev = malloc((size_t)n))) abort();
    memcpy(prev, line, (size_t)n);
    prevn = n;
  }
  char want[64]; /* the last is the record the resumed run appended */
  int wn = snprintf(want, sizeof want, "{\"type\": \"step\", \"step\": %ld,", last_step + 1);
  if (!prev || prevn < wn || memcmp(prev, want, (size_t)wn) != 0) abort();
  free(prev);
  free(line);
  fclose(f);
  return 0;
}

#endif
