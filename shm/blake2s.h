/* blake2s.h — BLAKE2s (RFC 7693), keyed: the pseudo-random function behind the join-by-id
 * secrets (segment names, the proof a joiner presents, derived ids).
 *
 * Why our own ~100 lines and not a crypto library: libshmddp-nccl.so is preloaded into programs
 * (PyTorch, CuPy) that often bring their own OpenSSL; a second libcrypto in such a process is a
 * known source of symbol clashes, and a whole crypto library would be a new dependency for three
 * short keyed hashes per group. The kernel's getrandom(2) supplies the secret; BLAKE2s in its
 * keyed mode is a standard PRF/MAC (RFC 7693 section 2.5), small enough to check line by line
 * against the RFC, and tests/check_shm.c checks it against the RFC's test vector and against
 * vectors made with Python's hashlib (an independent implementation). */
#ifndef SHM_BLAKE2S_H
#define SHM_BLAKE2S_H

#include <stddef.h>
#include <stdint.h>

#define SHM_BLAKE2S_MAX_OUT 32
#define SHM_BLAKE2S_MAX_KEY 32

/* out (outlen bytes, 1..32) = BLAKE2s-outlen of msg keyed with key (keylen 0..32; 0: unkeyed).
 * Returns 0, or -1 when a length is out of range. */
int shm_blake2s(uint8_t *out, size_t outlen, const uint8_t *key, size_t keylen, const void *msg,
                size_t len);

/* Constant-time comparison of n bytes: 0 when equal. */
int shm_ct_differ(const void *a, const void *b, size_t n);

#endif
