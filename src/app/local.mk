# src/app/: the `train` program (shmddp-train) around the training loop: the option table and
# the machine probe, the job prepared before the ranks fork (its folder: run_dir.c), ranks that
# share a GPU (the memory check, the job's private MPS daemon), the launches and restarts ->
# libapp.a; main.c and mpi_main.c (the program under mpirun) make the program.
noinst_LIBRARIES += libapp.a
libapp_a_SOURCES = \
	src/app/options.c src/app/options.h src/app/machine.c src/app/machine.h \
	src/app/job_open.c src/app/job_open.h src/app/run_dir.c src/app/run_dir.h \
	src/app/gpu_share.c src/app/gpu_share.h src/app/mps.c src/app/mps.h \
	src/app/relaunch.c src/app/relaunch.h

bin_PROGRAMS += shmddp-train
# mpi_main.c (the program under mpirun) is the one part of the trainer that calls MPI: it is
# here rather than in libapp.a, so the test programs do not link MPI.
shmddp_train_SOURCES = src/app/main.c src/app/mpi_main.c src/app/mpi_main.h
shmddp_train_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
shmddp_train_LDADD = $(WORLD_MPI_LIBS) $(APP_LIBS) $(SHMDDP_LIBS) $(PNG_LIBS) $(ZLIB_LIBS) \
	$(MPI_LIBS)
# The CUDA ops module it loads on a GPU (kernels/local.mk), made with it.
EXTRA_shmddp_train_DEPENDENCIES = $(OPS_MODULE)
