# src/: the trainer, one folder (and one archive) per layer; a layer uses only the ones below it:
#   predict/   shmddp-predict: a checkpoint's network on images; weights to safetensors
#   app/       the train program: options, the machine, the job, ranks sharing a GPU, launches
#   train/     the training loop and its engines, the run's settings, checkpoints, metrics
#   parallel/  the data-parallel engines: DDP (one process per device) and DataParallel
#   world/     every rank of a job: one machine's shmddp group, or shmddp + MPI across machines
#   data/      datasets, augmentation, the distributed sampler, the loader threads
#   model/     the U-Net, its layers, optimizers and mixed precision, over kernels/' ops
#   obs/       what a run shows: timeline, per-step log, progress, summary, NVML
#   device/    memory (arena and ledger), devices, streams, events and copies
include src/device/local.mk
include src/obs/local.mk
include src/model/local.mk
include src/data/local.mk
include src/world/local.mk
include src/parallel/local.mk
include src/train/local.mk
include src/app/local.mk
include src/predict/local.mk

noinst_HEADERS += src/check.h src/clock.h

# What a program links to use a layer (archives before the ones they need).
# (libkernels.a and the model read their settings through the library core's environment
# table, shm/env.h)
MODEL_LIBS = libmodel.a libobs.a libdevice.a libkernels.a libshmddp_core.la
PARALLEL_LIBS = libparallel.a libworld.a $(MODEL_LIBS)
TRAINER_LIBS = libtrainer.a libparallel.a libworld.a libdata.a $(MODEL_LIBS)
APP_LIBS = libapp.a $(TRAINER_LIBS)
# The same for the programs that run across machines (with MPI: shmddp-train, tests/mpi_ddp).
if HAVE_MPI
WORLD_MPI_LIBS = libworld_mpi.a
endif
