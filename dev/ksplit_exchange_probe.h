/* ksplit_exchange_probe.h — see ksplit_exchange_probe.cu. us_tile[m]: the microseconds a tile of
 * mode m takes with one block of two warpgroups on every multiprocessor (0: the partials only,
 * 1: and a barrier a tile, 2: and the f32 exchange of a 64 x 64 row between the warpgroups),
 * `tiles` tiles a block (1 to 1000), every checksum checked. Runs on the current device. Returns
 * 0, or -1 with a message in err. */
#ifndef DEV_KSPLIT_EXCHANGE_PROBE_H
#define DEV_KSPLIT_EXCHANGE_PROBE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int ksplit_exchange_probe(int tiles, double us_tile[3], char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
