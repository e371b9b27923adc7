/* train_config.h — every setting of a training run (train_config_t, as options.c fills it from
 * the command line) and what the training loop derives from them: the model's and the
 * optimizer's configurations, and the one line naming every setting (the log, summary.json, a
 * checkpoint's key). */
#ifndef SRC_TRAIN_TRAIN_CONFIG_H
#define SRC_TRAIN_TRAIN_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "src/model/model.h"
#include "src/model/optim.h"

#define TRAIN_PATH_MAX 1024
/* --max-restarts without --save-every: the most seconds of training between checkpoints. */
#define TRAIN_SAVE_AUTO_S 600

typedef enum { TRAIN_MODE_DDP = 0, TRAIN_MODE_DP } train_mode_t;
/* --mps, in the order of its choices. */
typedef enum { TRAIN_MPS_AUTO = 0, TRAIN_MPS_ON, TRAIN_MPS_OFF } train_mps_t;
/* --progress: auto is a bar on a terminal outside mpirun, plain lines otherwise */
typedef enum { TRAIN_PROGRESS_AUTO = 0, TRAIN_PROGRESS_BAR, TRAIN_PROGRESS_LINES,
               TRAIN_PROGRESS_OFF } train_progress_mode_t;

typedef struct {
  model_device_t device;
  int nproc;
  int ranks_per_node; /* under MPI: ranks r/K form a node (0: the ranks of one host) */
  train_mode_t mode;
  char model[16];           /* "unet" */
  int levels;
  int widths[MODEL_MAX_LEVELS];
  char widths_name[64];     /* the preset name or the list as given */
  model_norm_t norm;
  int groups;               /* GroupNorm groups */
  int sync_bn;              /* 0/1 (resolved; never on with GroupNorm) */
  int sync_bn_from_epoch;
  int classes;
  int image_size;
  int batch_size;           /* per device */
  int epochs;
  long steps;               /* cap on optimizer steps; 0 = none */
  double lr;
  optim_kind_t optimizer;
  double momentum;         /* SGD momentum; AdamW beta1 */
  double weight_decay;
  int nesterov;
  long warmup_steps;
  int warmup_auto;          /* default: capped at 1/5 of the run's steps once they are known */
  model_precision_t precision;
  int synthetic;            /* --data synthetic */
  char data_dir[TRAIN_PATH_MAX];
  long train_size, val_size; /* synthetic sizes; for a directory val_size 0 = 10 % */
  long max_image_pixels;    /* a directory's PNGs: the most pixels one may have */
  int workers;
  uint64_t seed;
  char out_dir[TRAIN_PATH_MAX]; /* --out; "" when not given (train_job_open chooses the folder) */
  int overwrite;            /* --overwrite: the run an --out holds is replaced */
  int max_restarts;         /* --max-restarts: restarts of every rank after a rank died */
  int save_auto;            /* checkpoints at every epoch's end and every SAVE_AUTO_S seconds
                               (--max-restarts without --save-every) */
  double bucket_mb;
  int grad_comm_bf16;       /* --grad-comm bf16: gradients all-reduced in bf16 */
  int accum_steps;
  int drop_last;
  long save_every;          /* optimizer steps between checkpoints; 0 = only at the end */
  char resume[TRAIN_PATH_MAX];
  double timeout_s;
  long log_every;
  long timing_warmup; /* steps left out of images/s */
  long stop_after;    /* stop (with a checkpoint) after this step, as if interrupted; counted from
                         the start of training (a resumed run's too); 0: off */
  long timeline_steps; /* steps traced after the timing warm-up (--timeline); 0: off */
  int ignore_index;         /* --ignore-label: mask value the loss and metrics skip (255) */
  int mask_mapped;          /* --mask-map given: mask values are read through mask_map */
  uint8_t mask_map[256];
  char mask_map_text[128];
  uint8_t class_value[256]; /* the mask value class k is read from: the first V of a V:k in
                               --mask-map, else k (predictions are written in these values) */
  int progress;             /* --progress: a train_progress_mode_t */
  int deterministic;        /* --deterministic: bit-identical GPU runs (default on) */
  int cuda_graph;           /* --cuda-graph: replay the training step as a CUDA graph (default on) */
  int mps;                  /* --mps: a train_mps_t (gpu_share.c) */
  int numa_bind;            /* --numa-bind: each GPU rank binds to its GPU's NUMA node (default
                               on; the launch's bind_numa) */
  int gpus;                 /* cuda, one machine: the GPUs visible at launch; rank r drives GPU
                               r % gpus, so more ranks than GPUs share them (gpu_share.c) */
} train_config_t;

/* The model configuration this training configuration implies (for rank `local_rank`). */
void train_config_model(const train_config_t *cfg, int local_rank, model_config_t *mc);
/* The optimizer settings of the configuration (total_steps is the job's, set by the caller). */
void train_config_optim(const train_config_t *c, optim_config_t *oc);

/* One line naming every setting (for the log and summary.json's config). */
void train_config_describe(const train_config_t *cfg, char *buf, size_t len);

const char *train_device_name(model_device_t d);
const char *train_precision_name(model_precision_t p);

#endif
