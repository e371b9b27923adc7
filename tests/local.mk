# tests/: Check suites, one per module. GPU tests skip (and say so) where there is no GPU.
if HAVE_CHECK
check_PROGRAMS += tests/check_reduce tests/check_shm tests/check_collectives tests/check_checkpoint tests/check_ddp
TESTS += tests/check_reduce tests/check_shm tests/check_collectives tests/check_checkpoint tests/check_ddp tests/kill_rank.sh tests/resume.sh tests/resume_gpu.sh
TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
TEST_LIBS = $(CHECK_LIBS)
tests_check_reduce_SOURCES = tests/check_reduce.c tools/coll_check.c tools/coll_check.h
tests_check_reduce_CFLAGS = $(TEST_CFLAGS)
tests_check_reduce_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
tests_check_shm_SOURCES = tests/check_shm.c tests/testutil.h
tests_check_shm_CFLAGS = $(TEST_CFLAGS)
tests_check_shm_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
tests_check_collectives_SOURCES = tests/check_collectives.c tests/testutil.h tools/coll_check.c tools/coll_check.h
tests_check_collectives_CFLAGS = $(TEST_CFLAGS)
tests_check_collectives_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
tests_check_checkpoint_SOURCES = tests/check_checkpoint.c tests/fuzz/ckpt_input.h
tests_check_checkpoint_CFLAGS = $(TEST_CFLAGS)
tests_check_checkpoint_LDADD = libtrainer.a $(SHMDDP_LIBS) $(TEST_LIBS)
tests_check_ddp_SOURCES = tests/check_ddp.c tests/parallel_fixture.h tests/testutil.h
tests_check_ddp_CFLAGS = $(TEST_CFLAGS)
tests_check_ddp_LDADD = $(PARALLEL_LIBS) $(SHMDDP_LIBS) $(TEST_LIBS)
else
TESTS += tests/no-check.sh
endif
EXTRA_DIST += tests/no-check.sh tests/kill_rank.sh tests/resume.sh tests/resume_gpu.sh tests/fuzz \
	tests/suite_main.h tests/failures.h tests/wait_lib.sh
# PyTorch as the oracle of one CPU training step (SKIP where python3 cannot import torch).
TESTS += tests/torch_oracle.sh
EXTRA_DIST += tests/torch_oracle.sh
AM_TESTS_ENVIRONMENT = top_builddir=$(top_builddir); srcdir=$(srcdir); export top_builddir srcdir;

# Communicators joined by a unique id: ranks as processes this suite starts itself, and threads.
if HAVE_CHECK
check_PROGRAMS += tests/check_join
TESTS += tests/check_join
tests_check_join_SOURCES = tests/check_join.c tests/join_harness.h tools/coll_check.c tools/coll_check.h
tests_check_join_CFLAGS = $(TEST_CFLAGS)
tests_check_join_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
endif

# Across nodes over MPI (tests/mpi.sh; SKIP in a build without MPI): tests/mpi_ddp, an MPI
# program, runs the DDP engine over the hierarchical world under mpirun.
TESTS += tests/mpi.sh
EXTRA_DIST += tests/mpi.sh
if HAVE_MPI
check_PROGRAMS += tests/mpi_ddp
tests_mpi_ddp_SOURCES = tests/mpi_ddp.c tests/parallel_fixture.h
tests_mpi_ddp_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_ddp_LDADD = libworld_mpi.a $(PARALLEL_LIBS) $(SHMDDP_LIBS) $(MPI_LIBS)
endif

# Sharing device buffers between ranks (collectives/devmem.h, fdpass.h) on a fake driver.
if HAVE_CHECK
check_PROGRAMS += tests/check_devmem
TESTS += tests/check_devmem
tests_check_devmem_SOURCES = tests/check_devmem.c tests/devmem_fake.h
tests_check_devmem_CFLAGS = $(TEST_CFLAGS)
tests_check_devmem_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
endif
