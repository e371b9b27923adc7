/* segment_input.h — how a fuzzer input becomes a shared-memory segment that a joiner opens, and
 * what the joiner must then be able to do (shared by the libFuzzer harness and the Check test
 * that replays kept inputs).
 * Input: 8 bytes, little-endian, the file's size (capped at 1 GiB: sparse, never all touched),
 * then the file's first bytes (its header; the rest of the file is zero). The file is a memfd
 * of this user, mode 0600, as a segment of the group's own would be. The joiner's reads:
 * shm_segment_map_fd (owner, mode, header checks), the group's liveness from the header's pids,
 * and, for an accepted segment, the first and last byte of every region the layout places in
 * it (a layout that reached past the file would fault here). */
#ifndef TESTS_FUZZ_SEGMENT_INPUT_H
#define TESTS_FUZZ_SEGMENT_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm/rendezvous.h"
#include "shm/segment.h"

#define SEGMENT_FUZZ_MAX_FILE ((uint64_t)1 << 30)

static inline void segment_fuzz_touch(volatile char *p, size_t len)
{
  if (len == 0) return;
  p[0] = p[0];
  p[len - 1] = p[len - 1];
}

/* 0: the segment was accepted (and every region of it reachable); 1: refused with a message;
 * -1: the harness itself failed (memfd). */
static inline int segment_fuzz_run(const uint8_t *data, size_t size)
{
  if (size < 8) return 1;
  uint64_t claim = 0;
  for (int i = 0; i < 8; i++) claim |= (uint64_t)data[i] << (8 * i);
  if (claim > SEGMENT_FUZZ_MAX_FILE) claim = SEGMENT_FUZZ_MAX_FILE;
  data += 8;
  size -= 8;
  int fd = memfd_create("shmddp-fuzz-segment", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (ftruncate(fd, (off_t)claim) != 0 || fchmod(fd, 0600) != 0) {
    close(fd);
    return -1;
  }
  size_t head = size < claim ? size : (size_t)claim;
  if (head && pwrite(fd, data, head, 0) != (ssize_t)head) {
    close(fd);
    return -1;
  }
  shm_segment_t seg;
  char err[512] = "";
  shmddp_status_t st = shm_segment_map_fd(&seg, fd, "fuzz segment", err, sizeof err);
  close(fd);
  if (st != SHMDDP_OK) {
    if (!err[0]) __builtin_trap(); /* a refusal must say why */
    return 1;
  }
  (void)shm_group_alive(seg.hdr);
  for (int r = 0; r < seg.nranks; r++) {
    for (int c = 0; c < SHM_CHANNELS; c++) {
      segment_fuzz_touch(shm_rank_ctrl(&seg, c, r), SHM_CTRL_BYTES);
      segment_fuzz_touch(shm_rank_slot(&seg, c, r), shm_slot_bytes(&seg, c));
    }
    segment_fuzz_touch(shm_rank_xchg(&seg, r), SHM_XCHG_BYTES);
  }
  shm_segment_destroy(&seg);
  return 0;
}

/* A valid input: the header of a freshly made segment of nranks ranks and its size. Returns the
 * input's length (0 when cap is too small or creation failed). */
static inline size_t segment_fuzz_make_seed(uint8_t *out, size_t cap, int nranks, size_t slot)
{
  shm_segment_t seg;
  int fd = -1;
  char err[512];
  unsigned char auth[SHM_AUTH_BYTES] = {1};
  if (cap < 8 + sizeof(shm_header_t)) return 0;
  if (shm_segment_create_unpublished(&seg, nranks, slot, 30, auth, &fd, err, sizeof err) != SHMDDP_OK)
    return 0;
  close(fd);
  uint64_t bytes = seg.bytes;
  for (int i = 0; i < 8; i++) out[i] = (uint8_t)(bytes >> (8 * i));
  memcpy(out + 8, seg.hdr, sizeof(shm_header_t));
  shm_segment_destroy(&seg);
  return 8 + sizeof(shm_header_t);
}

#endif
