# nccl/: NCCL's C interface served by shmddp (CUDA build only): libshmddp-nccl.
NCCL_SRCS = nccl/internal.h nccl/map.c nccl/comm.c nccl/coll.c nccl/group.c nccl/stubs.c
if HAVE_CUDA
noinst_LIBRARIES += libshmddp_nccl.a
libshmddp_nccl_a_SOURCES = $(NCCL_SRCS)
if HAVE_CHECK
check_PROGRAMS += tests/check_nccl
TESTS += tests/check_nccl
tests_check_nccl_SOURCES = tests/check_nccl.c tools/coll_check.c tools/coll_check.h
tests_check_nccl_CFLAGS = $(TEST_CFLAGS)
tests_check_nccl_LDADD = libshmddp_nccl.a $(SHMDDP_LIBS) $(TEST_LIBS)
endif
else
EXTRA_DIST += $(NCCL_SRCS) tests/check_nccl.c
endif
EXTRA_DIST += nccl/exports.txt include/shmddp_nccl.h
