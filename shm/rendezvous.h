/* rendezvous.h — ranks started by anyone meet in a segment named by their unique id.
 *
 * The first rank to arrive creates the segment without a name (O_TMPFILE, mode 0600),
 * initialises it and then publishes it under the id's name with linkat(2), which fails if the
 * name exists: a joiner can never see a half-made segment, and of two ranks arriving together
 * exactly one creates. The name is a keyed hash of the id's secret and the header holds another
 * (the proof): the caller computes both (collectives/join.c). A joiner opens the name with
 * O_NOFOLLOW, refuses a file that is not its own user's or that grants group/other access
 * (fstat, before reading a byte), checks the header and then the proof. Each rank claims its
 * place (a CAS of its pid into the rank's slot), publishes what its peers must agree on, and
 * waits for the others. Once all have arrived the name is removed (the first rank to set
 * hdr->unlinked does it, so it is removed exactly once and never a newer segment of the same
 * name); so is it when a member dies while the others wait. A segment whose group is provably
 * dead (shm_pid_alive of every member, or of the creator) is removed by the next rank of this
 * user that creates a group, and replaced when its own id comes again; a live one never. */
#ifndef SHM_RENDEZVOUS_H
#define SHM_RENDEZVOUS_H

#include "shm/segment.h"

#define SHM_ID_PREFIX "/shmddp-id-"

typedef struct {
  char name[64];             /* the id's segment name, SHM_ID_PREFIX and a keyed hash */
  unsigned char auth[SHM_AUTH_BYTES]; /* the proof of the id's secret (in the header too) */
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

/* 1 unless the group of a mapped (checked) segment is provably dead: every member that claimed a
 * place has left or provably died (shm_pid_alive: a reused pid is not them), and, before anyone
 * claimed, the creator. */
int shm_group_alive(const shm_header_t *h);

/* Leave a joined segment: mark this rank EXITED (unless it failed) and unmap. */
void shm_leave(shm_segment_t *seg, int rank);

#endif
