/* rendezvous.h — ranks started by anyone meet in a segment named by their unique id.
 *
 * The first rank to arrive creates the segment under a private name, initialises it and then
 * publishes it under the id's name with link(2), which fails if the name exists: a joiner can
 * never see a half-made segment, and of two ranks arriving together exactly one creates. Each
 * rank claims its place (a CAS of its pid into the rank's slot), publishes what its peers must
 * agree on, and waits for the others. Once all have arrived the name is removed (the first rank
 * to set hdr->unlinked does it, so it is removed exactly once and never a newer segment of the
 * same name). A segment under the id's name whose members are all dead (left by a crashed job
 * that reused the id) is replaced, never joined. */
#ifndef SHM_RENDEZVOUS_H
#define SHM_RENDEZVOUS_H

#include "shm/segment.h"

typedef struct {
  char name[64];             /* the id's segment name, "/shmddp-id-..." */
  unsigned char nonce[16];   /* the id's random bytes (also stored in the header) */
  int nranks, rank;
  size_t slot_bytes;         /* used by the rank that creates the segment */
  double timeout_s;
  int device_mode;           /* 1: this rank drives a GPU; every rank must say the same */
  const shm_segment_t *watch; /* NULL, or a segment (a parent group) whose failure also ends
                                 the wait for the other ranks */
} shm_join_args_t;

/* Join (or create) the id's segment and wait for every rank. On success the segment is mapped,
 * this rank's slot is RUNNING and the name is gone from /dev/shm. On failure nothing stays
 * mapped; a group this rank had joined is aborted with the reason, so its peers stop too. */
shmddp_status_t shm_join(shm_segment_t *seg, const shm_join_args_t *a, char *err, size_t errlen);

/* Leave a joined segment: mark this rank EXITED (unless it failed) and unmap. */
void shm_leave(shm_segment_t *seg, int rank);

#endif
