/* shquote.h — a string as one word of a POSIX shell command line, for the commands a run
 * suggests (they are pasted into a shell as printed, also when a path holds spaces or quotes). */
#ifndef SRC_OBS_SHQUOTE_H
#define SRC_OBS_SHQUOTE_H

#include <stddef.h>

/* s as it is (nothing in it a shell would act on) or in single quotes ('\'' for a quote inside)
 * into buf; buf (len >= 3) gets as much as fits, and the return value is buf. */
const char *shquote(const char *s, char *buf, size_t len);

#endif
