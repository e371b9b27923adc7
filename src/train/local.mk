# src/train/: the `train` program (shmddp-train): configuration and command line, the job
# prepared before the ranks fork, the training loops, checkpoints, metrics -> libtrainer.a.
noinst_LIBRARIES += libtrainer.a
libtrainer_a_CFLAGS = $(AM_CFLAGS) $(PNG_CFLAGS)
libtrainer_a_SOURCES = \
	src/train/train_config.c src/train/train_config.h src/train/train_machine.c \
	src/train/train.h src/train/train_job.c \
	src/train/loop.c src/train/loop.h src/train/engine_ddp.c src/train/engine_dp.c \
	src/train/dp_train.h \
	src/train/train_device.c src/train/train_device.h \
	src/train/train_ckpt.c src/train/train_ckpt.h \
	src/train/checkpoint.c src/train/checkpoint.h \
	src/train/metrics.c src/train/metrics.h \
	src/train/params.c src/train/params.h \
	src/train/train_share.c src/train/train_share.h

bin_PROGRAMS += shmddp-train
# train_mpi.c (the program under mpirun) is the one part of the trainer that calls MPI: it is
# here rather than in libtrainer.a, so the test programs do not link MPI.
shmddp_train_SOURCES = src/train/main.c src/train/train_mpi.c src/train/train_mpi.h
shmddp_train_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
shmddp_train_LDADD = $(WORLD_MPI_LIBS) $(TRAINER_LIBS) $(SHMDDP_LIBS) $(PNG_LIBS) $(ZLIB_LIBS) \
	$(MPI_LIBS)
