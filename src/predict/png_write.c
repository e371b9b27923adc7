/* png_write.c — PNG files with libpng (see png_write.h). */
#include "config.h"

#include "src/predict/png_write.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/check.h"
#include "src/obs/outfile.h"

/* libpng's part, apart so that nothing of ours lives across its longjmp. */
static int encode(FILE *f, int width, int height, int channels, const uint8_t *px)
{
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info) {
    png_destroy_write_struct(&png, &info);
    return -1;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return -1;
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8,
               channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < height; y++)
    png_write_row(png, (png_const_bytep)(px + (size_t)y * width * channels));
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  return 0;
}

int png_write_new(const char *path, int width, int height, int channels, const uint8_t *px,
                  char *err, size_t errlen)
{
  char tmp[4096];
  FILE *f = outfile_fopen_temp(path, tmp, sizeof tmp);
  if (!f) return check_fail(err, errlen, "%s: cannot create: %s", path, strerror(errno));
  if (encode(f, width, height, channels, px) != 0) {
    unlink(tmp);
    fclose(f);
    return check_fail(err, errlen, "%s: cannot write the PNG file (out of memory?)", path);
  }
  if (outfile_commit(f, tmp, path, 0) != 0)
    return check_fail(err, errlen, "%s: cannot write: %s%s", path, strerror(errno),
                      errno == EEXIST ? " (it appeared while the run wrote it; nothing was "
                                        "replaced)" : "");
  return 0;
}
