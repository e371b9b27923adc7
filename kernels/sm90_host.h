/* sm90_host.h — the host side the Hopper convolutions (kernels/conv_sm90.h) share: the driver's
 * tensor-map encoder reached through the runtime, the NHWC image maps, error messages, the
 * multiprocessor count. C++ (namespace sm90), for the .cu files of those kernels. */
#ifndef KERNELS_SM90_HOST_H
#define KERNELS_SM90_HOST_H

#include <cuda.h>
#include <stddef.h>

namespace sm90 {

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion,
                                    CUtensorMapFloatOOBfill);

/* cuTensorMapEncodeTiled through the runtime (no link against the driver library), or NULL
 * where the driver has none. */
encode_tiled_fn encode_tiled();

/* -1, with the message in err (when err and len). */
int fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* An NHWC bf16 image batch of 64 channels as a 4-D map (c, x, y, n), boxes of bw x bh pixels,
 * 128-byte swizzle, zeros outside. 0, or -1 with a message. */
int map_image(CUtensorMap *m, const void *base, int n, int h, int w, int bw, int bh, char *err,
              size_t len);

/* The same for `channels` channels a pixel (a multiple of 64), boxes of 64 channels (one
 * 128-byte line a pixel) x bw x bh pixels. */
int map_image_c(CUtensorMap *m, const void *base, int n, int h, int w, int channels, int bw,
                int bh, char *err, size_t len);

/* Multiprocessors of CUDA device `device`, 0 when it cannot be told. */
int sm_count(int device);

bool aligned16(const void *p);

/* 0 when a kernel built with `num_regs` registers a thread (cudaFuncAttributes::numRegs) holds,
 * in a block of `threads`, the `need` registers its warpgroups take after setmaxnreg's hand-over;
 * else -1 with a message: launched, it would never finish (an increase waits for registers no
 * warp frees). */
int regs_fit(int num_regs, int threads, int need, const char *what, char *err, size_t len);

} // namespace sm90

#endif
