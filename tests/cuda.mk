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

# Communicators joined by id with device buffers (processes and threads; SKIP without a GPU).
if HAVE_CHECK
if HAVE_CUDA
check_PROGRAMS += tests/check_join_cuda
TESTS += tests/check_join_cuda
tests_check_join_cuda_SOURCES = tests/check_join_cuda.c tests/join_harness.h tools/coll_check.c tools/coll_check.h
tests_check_join_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_join_cuda_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
endif
endif
EXTRA_DIST += tests/check_join_cuda.c

# Any device pointer: cudaMalloc, cuMem chunks, ncclMemAlloc, cudaMallocAsync; 1000 reallocations
# (processes joined by id; SKIP without a GPU).
if HAVE_CHECK
if HAVE_CUDA
check_PROGRAMS += tests/check_devmem_cuda
TESTS += tests/check_devmem_cuda
tests_check_devmem_cuda_SOURCES = tests/check_devmem_cuda.c tests/join_harness.h tools/coll_check.c tools/coll_check.h
tests_check_devmem_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_devmem_cuda_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
endif
endif
EXTRA_DIST += tests/check_devmem_cuda.c
