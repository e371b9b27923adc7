# tests/dp.mk: DataParallel against DDP (CPU devices; the GPU variant skips without 2 GPUs).
if HAVE_CHECK
check_PROGRAMS += tests/check_dp
TESTS += tests/check_dp
tests_check_dp_SOURCES = tests/check_dp.c tests/parallel_fixture.h tests/testutil.h
tests_check_dp_CFLAGS = $(TEST_CFLAGS)
tests_check_dp_LDADD = $(TRAINER_LIBS) $(SHMDDP_LIBS) $(PNG_LIBS) $(ZLIB_LIBS) $(TEST_LIBS)
endif
