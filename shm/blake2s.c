/* blake2s.c — BLAKE2s as RFC 7693 specifies it (see blake2s.h for why it is written here):
 * a 64-byte block, 10 rounds of the G mixing function over a 4x4 state of 32-bit words, the
 * SHA-256 initial values, and the parameter block reduced to its first word (digest length,
 * key length, fanout 1, depth 1) as sequential hashing needs. */
#include "config.h"

#include "shm/blake2s.h"

#include <string.h>

static const uint32_t iv[8] = {0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
                               0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u};

/* The message word schedule of each round (RFC 7693 section 2.7). */
static const uint8_t sigma[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
};

typedef struct {
  uint32_t h[8];
  uint64_t t;          /* bytes compressed so far */
  uint8_t buf[64];
  size_t fill;
} state_t;

static uint32_t rotr(uint32_t x, int n) { return x >> n | x << (32 - n); }

static uint32_t load32(const uint8_t *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void mix(uint32_t *v, int a, int b, int c, int d, uint32_t x, uint32_t y)
{
  v[a] = v[a] + v[b] + x;
  v[d] = rotr(v[d] ^ v[a], 16);
  v[c] = v[c] + v[d];
  v[b] = rotr(v[b] ^ v[c], 12);
  v[a] = v[a] + v[b] + y;
  v[d] = rotr(v[d] ^ v[a], 8);
  v[c] = v[c] + v[d];
  v[b] = rotr(v[b] ^ v[c], 7);
}

static void compress(state_t *s, int last)
{
  uint32_t v[16], m[16];
  for (int i = 0; i < 16; i++) m[i] = load32(s->buf + 4 * i);
  for (int i = 0; i < 8; i++) {
    v[i] = s->h[i];
    v[i + 8] = iv[i];
  }
  v[12] ^= (uint32_t)s->t;
  v[13] ^= (uint32_t)(s->t >> 32);
  if (last) v[14] = ~v[14];
  for (int r = 0; r < 10; r++) {
    const uint8_t *z = sigma[r];
    mix(v, 0, 4, 8, 12, m[z[0]], m[z[1]]);
    mix(v, 1, 5, 9, 13, m[z[2]], m[z[3]]);
    mix(v, 2, 6, 10, 14, m[z[4]], m[z[5]]);
    mix(v, 3, 7, 11, 15, m[z[6]], m[z[7]]);
    mix(v, 0, 5, 10, 15, m[z[8]], m[z[9]]);
    mix(v, 1, 6, 11, 12, m[z[10]], m[z[11]]);
    mix(v, 2, 7, 8, 13, m[z[12]], m[z[13]]);
    mix(v, 3, 4, 9, 14, m[z[14]], m[z[15]]);
  }
  for (int i = 0; i < 8; i++) s->h[i] ^= v[i] ^ v[i + 8];
}

/* Append bytes; a full block is compressed only once more input follows (the last block must
 * be compressed with the final flag). */
static void update(state_t *s, const uint8_t *p, size_t len)
{
  while (len > 0) {
    if (s->fill == 64) {
      s->t += 64;
      compress(s, 0);
      s->fill = 0;
    }
    size_t n = 64 - s->fill < len ? 64 - s->fill : len;
    memcpy(s->buf + s->fill, p, n);
    s->fill += n;
    p += n;
    len -= n;
  }
}

int shm_blake2s(uint8_t *out, size_t outlen, const uint8_t *key, size_t keylen, const void *msg,
                size_t len)
{
  if (outlen < 1 || outlen > SHM_BLAKE2S_MAX_OUT || keylen > SHM_BLAKE2S_MAX_KEY ||
      (keylen && !key))
    return -1;
  state_t s;
  memset(&s, 0, sizeof s);
  memcpy(s.h, iv, sizeof s.h);
  s.h[0] ^= 0x01010000u ^ (uint32_t)keylen << 8 ^ (uint32_t)outlen;
  if (keylen) {
    uint8_t block[64] = {0};
    memcpy(block, key, keylen);
    update(&s, block, sizeof block);
    memset(block, 0, sizeof block);
  }
  update(&s, msg, len);
  s.t += s.fill;
  memset(s.buf + s.fill, 0, 64 - s.fill);
  compress(&s, 1);
  for (size_t i = 0; i < outlen; i++) out[i] = (uint8_t)(s.h[i / 4] >> (8 * (i % 4)));
  memset(&s, 0, sizeof s);
  return 0;
}

int shm_ct_differ(const void *a, const void *b, size_t n)
{
  const volatile uint8_t *x = a, *y = b;
  uint8_t d = 0;
  for (size_t i = 0; i < n; i++) d |= (uint8_t)(x[i] ^ y[i]);
  return d != 0;
}
