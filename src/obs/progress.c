/* progress.c — progress lines. The terminal check is isatty() on the stream; the bar is
 * redrawn with a carriage return and cleared with an ANSI erase-line before other output. */
#include "config.h"

#include "src/obs/progress.h"

#include <math.h>
#include <stdarg.h>
#include <unistd.h>

void progress_init(progress_t *p, FILE *f, long total_steps, int epochs, long log_every,
                   progress_mode_t mode)
{
  p->f = f;
  p->tty = mode == PROGRESS_BAR || (mode == PROGRESS_AUTO && isatty(fileno(f)));
  p->off = mode == PROGRESS_OFF;
  p->total_steps = total_steps;
  p->epochs = epochs;
  p->log_every = log_every > 0 ? log_every : 1;
  p->drawn = 0;
}

void progress_format_duration(double s, char *buf, size_t len)
{
  if (!isfinite(s) || s < 0) {
    snprintf(buf, len, "?");
    return;
  }
  long t = lround(s);
  if (t >= 3600) snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else if (t >= 60) snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
  else snprintf(buf, len, "%lds", t);
}

static void clear(progress_t *p)
{
  if (p->drawn) fputs("\r\033[K", p->f);
  p->drawn = 0;
}

void progress_step(progress_t *p, long step, int epoch, double loss, double lr,
                   double images_per_s, double eta_s)
{
  char eta[32];
  progress_format_duration(eta_s, eta, sizeof eta);
  if (p->off) return;
  if (p->tty) {
    enum { WIDTH = 24 };
    int filled = p->total_steps > 0 ? (int)(WIDTH * step / p->total_steps) : 0;
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
    bar[WIDTH] = 0;
    fprintf(p->f, "\r\033[K[%s] epoch %d/%d step %ld/%ld loss %.4f lr %.3g %.1f img/s ETA %s",
            bar, epoch + 1, p->epochs, step, p->total_steps, loss, lr, images_per_s, eta);
    p->drawn = 1;
  } else if (step % p->log_every == 0 || step == p->total_steps || step == 1) {
    fprintf(p->f, "epoch %d/%d step %ld/%ld loss %.4f lr %.3g %.1f img/s ETA %s\n", epoch + 1,
            p->epochs, step, p->total_steps, loss, lr, images_per_s, eta);
  }
  fflush(p->f);
}

void progress_val(progress_t *p, int epoch, long step, double loss, double miou, int present,
                  int classes, double acc, double seconds)
{
  clear(p);
  char over[96] = "";
  if (present < classes)
    snprintf(over, sizeof over, " (over %d of %d classes: absent from the labels)", present,
             classes);
  fprintf(p->f, "validation after epoch %d (step %ld): loss %.4f mIoU %.4f%s pixel acc %.4f "
          "(%.1f s)\n", epoch + 1, step, loss, miou, over, acc, seconds);
  fflush(p->f);
}

void progress_print(progress_t *p, const char *fmt, ...)
{
  clear(p);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(p->f, fmt, ap);
  va_end(ap);
  fputc('\n', p->f);
  fflush(p->f);
}

void progress_end(progress_t *p)
{
  if (p->drawn) fputc('\n', p->f);
  p->drawn = 0;
  fflush(p->f);
}
