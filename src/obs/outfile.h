/* outfile.h — how the trainer creates the files it writes into --out (checkpoints, the per-step
 * log, the summary, timelines), which may be a directory other users can write to (/tmp, a
 * shared project folder): never through a name someone else planted, never readable by others.
 *
 * A file replaced whole (checkpoint, summary, timeline) is written to "<path>.tmp.<16 random hex
 * digits>", created O_CREAT|O_EXCL|O_NOFOLLOW with mode 0600 (a planted symlink or file under
 * that name makes the create fail; the name cannot be guessed in advance), then renamed over
 * path. A file written in place (the log) is opened O_NOFOLLOW, mode 0600 and, when it existed,
 * set to 0600 before a byte is written. Logs are 0600 too: they hold data paths and settings. */
#ifndef SRC_OBS_OUTFILE_H
#define SRC_OBS_OUTFILE_H

#include <stddef.h>
#include <stdio.h>

/* Creates a fresh temporary file beside path (its name in tmp); a descriptor open for writing,
 * or -1 with errno set. */
int outfile_create_temp(const char *path, char *tmp, size_t tmplen);
/* The same as a stdio stream ("w"); NULL with errno set. */
FILE *outfile_fopen_temp(const char *path, char *tmp, size_t tmplen);
/* Opens path for writing from its start, as described above; NULL with errno set. */
FILE *outfile_fopen_private(const char *path);

#endif
