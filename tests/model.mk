# tests/model.mk: Check suites of the model, ops and optimizers.
if HAVE_CHECK
# The model needs only shmddp.h's types, not the library.
MODEL_TEST_LIBS = $(MODEL_LIBS) $(CUDA_LIBS) -lm $(TEST_LIBS)
check_PROGRAMS += tests/check_ops tests/check_model tests/check_optim tests/check_arena tests/check_plan
TESTS += tests/check_ops tests/check_model tests/check_optim tests/check_arena tests/check_plan
tests_check_ops_SOURCES = tests/check_ops.c
tests_check_ops_CFLAGS = $(TEST_CFLAGS)
tests_check_ops_LDADD = $(MODEL_TEST_LIBS)
tests_check_model_SOURCES = tests/check_model.c tests/unet_fixture.h
tests_check_model_CFLAGS = $(TEST_CFLAGS)
tests_check_model_LDADD = $(MODEL_TEST_LIBS)
tests_check_optim_SOURCES = tests/check_optim.c
tests_check_optim_CFLAGS = $(TEST_CFLAGS)
tests_check_optim_LDADD = $(MODEL_TEST_LIBS)
tests_check_arena_SOURCES = tests/check_arena.c
tests_check_arena_CFLAGS = $(TEST_CFLAGS)
tests_check_arena_LDADD = $(MODEL_TEST_LIBS)
tests_check_plan_SOURCES = tests/check_plan.c tests/unet_fixture.h
tests_check_plan_CFLAGS = $(TEST_CFLAGS)
tests_check_plan_LDADD = $(MODEL_TEST_LIBS)
endif
