/* data.h — segmentation datasets behind one interface: sample i is an 8-bit RGB image and an
 * 8-bit class mask at the sample's own size. Two kinds: procedural shapes (a pure function of
 * (seed, split, i)) and a directory of PNG images with PNG masks, validated when opened.
 * data_get() is thread-safe: loader threads call it concurrently. */
#ifndef SRC_DATA_DATA_H
#define SRC_DATA_DATA_H

#include <stddef.h>
#include <stdint.h>

#define DATA_IGNORE_LABEL 255 /* mask value that marks pixels without a class */

typedef struct data_set data_set_t;

typedef struct {
  /* rgb: h*w*3 bytes, mask: h*w bytes; both hold at least max_width*max_height pixels. */
  int (*get)(const data_set_t *ds, size_t index, uint8_t *rgb, uint8_t *mask, int *width,
             int *height, char *err, size_t errlen);
  void (*destroy)(data_set_t *ds);
} data_ops_t;

struct data_set {
  const data_ops_t *ops;
  size_t size;
  int classes;
  int max_width, max_height; /* the largest sample: the buffers get() needs */
  int min_width, min_height; /* the smallest sample */
  char name[64];             /* for messages: "synthetic train", "DIR (val)" */
  /* Pixels per mask value (after --mask-map), counted when the dataset was opened; a dataset
   * that is not scanned (synthetic) leaves counted 0. */
  int counted;
  double label_pixels[256];
  void *impl;
};

typedef enum { DATA_SPLIT_TRAIN = 0, DATA_SPLIT_VAL } data_split_t;

/* Procedural shapes: background plus up to 7 shape kinds (disc, square, triangle, ring, cross,
 * ellipse, half-disc: classes-1 of them, in that order) on textured, noisy, colour-jittered
 * backgrounds. The validation split is a separate stream: it does not depend on the size of
 * the training split. */
#define DATA_SYNTH_MAX_CLASSES 8
typedef struct {
  uint64_t seed;
  size_t size;
  int classes;    /* 2..DATA_SYNTH_MAX_CLASSES */
  int image_size; /* samples are image_size x image_size */
  data_split_t split;
} data_synth_config_t;

int data_open_synthetic(data_set_t **out, const data_synth_config_t *cfg, char *err,
                        size_t errlen);
const char *data_synth_class_name(int cls); /* "background", "disc", ... */

/* DIR/images/NAME.png with DIR/masks/NAME.png (and, if present, DIR/val/images + DIR/val/masks
 * as the validation split; otherwise the last val_size names in sorted order, 10 % when
 * val_size is 0). Every file is decoded once here, so a missing mask, a size mismatch, a label
 * >= classes (other than 255), a corrupt or non-PNG file, an image smaller than min_size or
 * with more than max_pixels pixels (DATA_PNG_DEFAULT_MAX_PIXELS, --max-image-pixels) or an
 * empty folder is reported, naming the file, before training starts. The largest image found
 * sets max_width x max_height, the buffers every get() decodes into. */
int data_open_png_dir(data_set_t **train, data_set_t **val, const char *dir, int classes,
                      int min_size, size_t max_pixels, long val_size, char *err, size_t errlen);

/* 64 Mpx (8192 x 8192): far above the images a segmentation network trains on, and a bound on
 * what a file that claims a huge size can make each loader worker allocate. */
#define DATA_PNG_DEFAULT_MAX_PIXELS ((size_t)64 << 20)

/* The same, with the mask values read through a map and another ignore label. Masks that hold
 * only 0 and the ignore label in the training split are refused (binary masks saved as 0/255
 * would train on background alone), with a message naming --mask-map. */
typedef struct {
  int classes, min_size;
  size_t max_pixels;      /* the most pixels an image may have; 0: DATA_PNG_DEFAULT_MAX_PIXELS */
  long val_size;
  int ignore_label;       /* the mask value (after the map) that marks pixels without a class */
  const uint8_t *map;     /* 256 entries: value v of a mask file is read as map[v]; NULL: as is */
} data_png_opts_t;
int data_open_png_dir_opts(data_set_t **train, data_set_t **val, const char *dir,
                           const data_png_opts_t *o, char *err, size_t errlen);

/* A PNG's width and height from its header (nothing decoded); refused (with the message) when
 * a side exceeds 16384 or width x height exceeds max_pixels. */
int data_png_size(const char *path, int as_mask, size_t max_pixels, int *width, int *height,
                  char *err, size_t errlen);
/* Decode one PNG into buf (cap bytes: width x height x 3 for RGB, x 1 for a mask), under the
 * same limits: as 8-bit RGB (gray and palette expanded, alpha dropped, 16-bit reduced), or as a
 * mask (8-bit gray or palette indices, unchanged). A file that does not fit cap is refused;
 * buf is never reallocated. */
int data_png_read(const char *path, int as_mask, size_t max_pixels, uint8_t *buf, size_t cap,
                  int *width, int *height, char *err, size_t errlen);
/* For a caller that owns its buffer (the dataset scan, shmddp-predict): *buf (re)allocated to
 * the size the header gives (*cap updated), then decoded as data_png_read does; a file that
 * grew between the two is refused. */
int data_png_load(const char *path, int as_mask, size_t max_pixels, uint8_t **buf, size_t *cap,
                  int *width, int *height, char *err, size_t errlen);

/* Sample index (< ds->size) into rgb and mask; its size into *width, *height. */
int data_get(const data_set_t *ds, size_t index, uint8_t *rgb, uint8_t *mask, int *width,
             int *height, char *err, size_t errlen);
void data_destroy(data_set_t *ds); /* NULL is fine */

#endif
