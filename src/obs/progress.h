/* progress.h — what rank 0 shows while training: on a terminal one status line redrawn in place
 * (a bar, epoch, step, loss, img/s, ETA); otherwise (a log file, CI) a plain line every
 * log_every steps, so logs stay readable. */
#ifndef SRC_OBS_PROGRESS_H
#define SRC_OBS_PROGRESS_H

#include <stdio.h>

/* auto: a bar when f is a terminal, lines otherwise; off: no step lines (the other lines stay) */
typedef enum { PROGRESS_AUTO = 0, PROGRESS_BAR, PROGRESS_LINES, PROGRESS_OFF } progress_mode_t;

typedef struct {
  FILE *f;
  int tty; /* draw the bar */
  int off; /* no step lines */
  long total_steps, log_every;
  int epochs;
  int drawn; /* a status line is on screen and must be cleared before other output */
} progress_t;

void progress_init(progress_t *p, FILE *f, long total_steps, int epochs, long log_every,
                   progress_mode_t mode);
void progress_step(progress_t *p, long step, int epoch, double loss, double lr,
                   double images_per_s, double eta_s);
/* miou: over `present` of `classes` classes (those in the validation labels). */
void progress_val(progress_t *p, int epoch, long step, double loss, double miou, int present,
                  int classes, double acc, double seconds);
/* A line of its own (the status line, if any, is cleared first). */
void progress_print(progress_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void progress_end(progress_t *p);

/* "1h02m", "3m07s", "12s". */
void progress_format_duration(double s, char *buf, size_t len);

#endif
