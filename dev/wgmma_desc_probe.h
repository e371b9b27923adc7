/* wgmma_desc_probe.h — see wgmma_desc_probe.cu. mn 0: bad[use_base][shift] = elements of a
 * 64 x 64 product wrong when the A descriptor starts `shift` lines into a 128-byte swizzle
 * pattern, with the base-offset field 0 (use_base 0) or (start >> 7) & 7 (1). mn 1: the same
 * for an MN-major B starting `shift` lines in, with the (leading, stride) byte offsets
 * (16, 1024) (use_base 0) or (1024, 16) (1). Runs on the current device (sm_90). Returns 0, or
 * -1 with a message in err. */
#ifndef DEV_WGMMA_DESC_PROBE_H
#define DEV_WGMMA_DESC_PROBE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int wgmma_desc_probe(int mn, int bad[2][8], char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
