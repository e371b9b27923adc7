# src/train/: the `train` program (shmddp-train): the option table and the machine probe, the job
# prepared before the ranks fork (its folder: run_dir.c), the launches and restarts, the training
# loop and its two engines, the checkpoint file, the training state and the run's record saved
# in it, metrics -> libtrainer.a.
noinst_LIBRARIES += libtrainer.a
libtrainer_a_CFLAGS = $(AM_CFLAGS) $(PNG_CFLAGS)
libtrainer_a_SOURCES = \
	src/train/options.c src/train/options.h src/train/machine.c src/train/machine.h \
	src/train/train_config.c src/train/train_config.h src/train/job.h \
	src/train/job_open.c src/train/job_open.h src/train/run_dir.c src/train/run_dir.h \
	src/train/relaunch.c src/train/relaunch.h \
	src/train/loop.c src/train/loop.h src/train/loop_ddp.c src/train/loop_ddp.h \
	src/train/loop_dp.c src/train/loop_dp.h \
	src/train/batch_io.c src/train/batch_io.h \
	src/train/ckpt_state.c src/train/ckpt_state.h \
	src/train/ckpt_file.c src/train/ckpt_file.h src/train/ckpt_run.c src/train/ckpt_run.h \
	src/train/metrics.c src/train/metrics.h \
	src/train/gpu_share.c src/train/gpu_share.h src/train/mps.c src/train/mps.h

bin_PROGRAMS += shmddp-train
# mpi_main.c (the program under mpirun) is the one part of the trainer that calls MPI: it is
# here rather than in libtrainer.a, so the test programs do not link MPI.
shmddp_train_SOURCES = src/train/main.c src/train/mpi_main.c src/train/mpi_main.h
shmddp_train_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
shmddp_train_LDADD = $(WORLD_MPI_LIBS) $(TRAINER_LIBS) $(SHMDDP_LIBS) $(PNG_LIBS) $(ZLIB_LIBS) \
	$(MPI_LIBS)
# The CUDA ops module it loads on a GPU (kernels/local.mk), made with it.
EXTRA_shmddp_train_DEPENDENCIES = $(OPS_MODULE)
