/* ckpt_run.h — the record of the run a checkpoint belongs to (its "run" tensor): the run's id,
 * made at random when the run starts and kept by every resume and restart, so that a log and an
 * output folder can be matched with a checkpoint by the run they belong to, not by their paths;
 * and the mask value each class stands for (the inverse of --mask-map), so that predictions are
 * written in the values the training masks held.
 *
 * The tensor is u8, versioned by its first byte; a later version only appends fields, and a
 * reader takes the ones it knows. Version 1:
 *   [0] 1   [1..16] the id   [17] K, the classes   [18..18+K) the mask value of class k
 * A checkpoint written before the record existed has none: no id, and classes 0 (class ids are
 * their own values). */
#ifndef SRC_TRAIN_CKPT_RUN_H
#define SRC_TRAIN_CKPT_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "src/train/ckpt_file.h"

#define CKPT_RUN_TENSOR "run"
#define CKPT_RUN_VERSION 1
#define CKPT_RUN_ID_BYTES 16
#define CKPT_RUN_ID_HEX (2 * CKPT_RUN_ID_BYTES)
#define CKPT_RUN_MAX_BYTES (18 + 256)

typedef struct {
  char id[CKPT_RUN_ID_HEX + 1]; /* lower-case hex; "" when the checkpoint has no record */
  int classes;                  /* the entries of class_value; 0: none recorded */
  uint8_t class_value[256];     /* the mask value class k was read from */
} ckpt_run_t;

/* A fresh random id (getrandom), as hex into id. */
int ckpt_run_new_id(char id[CKPT_RUN_ID_HEX + 1], char *err, size_t errlen);

/* Whether s is an id as ckpt_run_new_id writes it (what a log or a file claims is checked). */
int ckpt_run_is_id(const char *s);

/* The record as the tensor's bytes, into buf (at least CKPT_RUN_MAX_BYTES); its length, or 0
 * when r has no valid id or class values. */
size_t ckpt_run_encode(const ckpt_run_t *r, uint8_t *buf, size_t len);

/* The record of checkpoint c into *r (id "" and classes 0 where c has none). -1 with a message
 * naming the fault when the tensor is there but damaged. */
int ckpt_run_read(const ckpt_t *c, ckpt_run_t *r, char *err, size_t errlen);

#endif
