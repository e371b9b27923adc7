# tests/coloc.mk: ranks that share a GPU. On the CPU: the placement and the event protocol over
# simulated events (check_coloc). On a GPU (SKIP without one): every collective through the
# co-located path, in processes and threads, graph capture (check_coloc_cuda), and a SIGKILLed
# co-located rank (kill_rank_gpu.sh).
if HAVE_CHECK
check_PROGRAMS += tests/check_coloc
TESTS += tests/check_coloc
tests_check_coloc_SOURCES = tests/check_coloc.c tests/failures.h tests/testutil.h
tests_check_coloc_CFLAGS = $(TEST_CFLAGS)
tests_check_coloc_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
endif

if HAVE_CHECK
if HAVE_CUDA
check_PROGRAMS += tests/check_coloc_cuda
TESTS += tests/check_coloc_cuda
tests_check_coloc_cuda_SOURCES = tests/check_coloc_cuda.c tools/coll_check.c tools/coll_check.h
tests_check_coloc_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_coloc_cuda_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS) -lpthread
endif
endif
EXTRA_DIST += tests/check_coloc_cuda.c
TESTS += tests/kill_rank_gpu.sh
EXTRA_DIST += tests/kill_rank_gpu.sh
