# tests/cuda_ops.mk: the CUDA ops against the CPU reference, and the model on the GPU against the
# model on the CPU (both exit 77, SKIP, without a GPU).
if HAVE_CHECK
if HAVE_CUDNN
check_PROGRAMS += tests/check_ops_cuda tests/check_model_cuda
TESTS += tests/check_ops_cuda tests/check_model_cuda
tests_check_ops_cuda_SOURCES = tests/check_ops_cuda.c tests/ops_cuda_testutil.h
tests_check_ops_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_ops_cuda_LDADD = libopscuda.a $(MODEL_LIBS) $(CUDA_LIBS) -lm $(TEST_LIBS)
tests_check_model_cuda_SOURCES = tests/check_model_cuda.c tests/ops_cuda_testutil.h
tests_check_model_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_model_cuda_LDADD = $(TRAINER_LIBS) $(SHMDDP_LIBS) -lm $(TEST_LIBS)
endif
endif
EXTRA_DIST += tests/check_ops_cuda.c tests/check_model_cuda.c tests/ops_cuda_testutil.h
