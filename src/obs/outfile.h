/* outfile.h — how the trainer and shmddp-predict create the files they write into an output
 * folder (checkpoints, the per-step log, the summary, timelines, masks, scores), which may be a
 * folder other users can write to (/tmp, a shared project folder): never through a name someone
 * else planted, never readable by others, never half-written under the final name.
 *
 * A file replaced whole (checkpoint, summary, timeline) is written to "<path>.tmp.<16 random hex
 * digits>", created O_CREAT|O_EXCL|O_NOFOLLOW with mode 0600 (a planted symlink or file under
 * that name makes the create fail; the name cannot be guessed in advance), then renamed over
 * path. A file that must be new (a prediction's outputs) is published with a rename that fails
 * where path exists. A file written in place (the log) is opened O_NOFOLLOW, mode 0600 and,
 * when it existed, set to 0600 before a byte is written. Logs are 0600 too: they hold data paths
 * and settings.
 *
 * The writer holds an exclusive flock(2) on its temporary file from before anyone can use the
 * name until it is renamed: a temporary file nobody holds a lock on belongs to a writer that
 * died (kill -9, power loss), and outfile_sweep removes such files at the next start. A lock,
 * not the writer's pid in the name: the kernel drops the lock when the holder dies, however it
 * dies, while a pid is reused by unrelated processes (and means nothing on another machine that
 * shares the folder). On a file system without flock the files are written unlocked, and the
 * sweep, unable to lock them either, removes none. */
#ifndef SRC_OBS_OUTFILE_H
#define SRC_OBS_OUTFILE_H

#include <stddef.h>
#include <stdio.h>

/* Creates a fresh temporary file beside path (its name in tmp), locked as above; a descriptor
 * open for writing, or -1 with errno set. */
int outfile_create_temp(const char *path, char *tmp, size_t tmplen);
/* The same as a stdio stream ("w"); NULL with errno set. */
FILE *outfile_fopen_temp(const char *path, char *tmp, size_t tmplen);
/* Moves the temporary file tmp to path: over whatever is there (replace 1), or only where path
 * does not exist (replace 0: -1 with errno EEXIST otherwise). 0, or -1 with errno set; tmp is
 * removed on failure. Call it before closing tmp's descriptor, so the lock covers the rename. */
int outfile_rename(const char *tmp, const char *path, int replace);
/* Finishes a stream from outfile_fopen_temp: flushes it (a write error is an error), renames it
 * as outfile_rename does and closes it. 0, or -1 with errno set; tmp is gone either way. */
int outfile_commit(FILE *f, const char *tmp, const char *path, int replace);
/* Opens path for writing from its start, as described above; NULL with errno set. */
FILE *outfile_fopen_private(const char *path);

/* Removes, from dir, the temporary files of this naming ("<name>.tmp.<16 hex digits>", where
 * name matches one of the fnmatch(3) patterns) that are regular files of this user and that no
 * writer holds: those a killed writer left. Files of other names, other owners, links and files
 * a live writer holds are left alone. The number removed in *removed; 0, or -1 with the message
 * (the folder cannot be read). */
int outfile_sweep(const char *dir, const char *const *patterns, size_t npatterns,
                  size_t *removed, char *err, size_t errlen);

#endif
