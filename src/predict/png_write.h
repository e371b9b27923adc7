/* png_write.h — new 8-bit PNG files (gray masks of class indices, RGB overlays), written through
 * a private temporary file that is then given the name (src/obs/outfile.h). */
#ifndef SRC_PREDICT_PNG_WRITE_H
#define SRC_PREDICT_PNG_WRITE_H

#include <stddef.h>
#include <stdint.h>

/* channels 1 (gray) or 3 (RGB); px: height rows of width * channels bytes. path must not exist:
 * a file there is never replaced (an error, EEXIST). */
int png_write_new(const char *path, int width, int height, int channels, const uint8_t *px,
                  char *err, size_t errlen);

#endif
