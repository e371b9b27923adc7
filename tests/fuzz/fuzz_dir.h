/* fuzz_dir.h — the folder in which a harness's input function writes its files: one per fuzzing
 * process, made at the first input (/tmp/shmddp-fuzz-TARGET-XXXXXX), kept until the process
 * ends so that every input reuses it. */
#ifndef SHMDDP_FUZZ_DIR_H
#define SHMDDP_FUZZ_DIR_H

#include <stdio.h>
#include <stdlib.h>

static const char *fuzz_dir(const char *target)
{
  static char dir[64];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/shmddp-fuzz-%s-XXXXXX", target);
    if (!mkdtemp(dir)) abort();
  }
  return dir;
}

#endif
