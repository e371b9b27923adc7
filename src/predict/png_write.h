/* png_write.h — 8-bit PNG files (gray masks of class indices, RGB overlays), written through a
 * temporary file renamed into place. */
#ifndef SRC_PREDICT_PNG_WRITE_H
#define SRC_PREDICT_PNG_WRITE_H

#include <stddef.h>
#include <stdint.h>

/* channels 1 (gray) or 3 (RGB); px: height rows of width * channels bytes. */
int png_write(const char *path, int width, int height, int channels, const uint8_t *px,
              char *err, size_t errlen);

#endif
