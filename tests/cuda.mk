# tests/cuda.mk: Check suites of the CUDA collectives (skip without a GPU).
if HAVE_CHECK
if HAVE_CUDA
check_PROGRAMS += tests/check_cuda_collectives
TESTS += tests/check_cuda_collectives
tests_check_cuda_collectives_SOURCES = tests/check_cuda_collectives.c \
	tools/coll_check.c tools/coll_check.h
tests_check_cuda_collectives_CFLAGS = $(TEST_CFLAGS)
tests_check_cuda_collectives_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
endif
endif
