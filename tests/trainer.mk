# tests/trainer.mk: Check suites of the trainer (CLI, data pipeline, sampler, metrics, training).
if HAVE_CHECK
TRAINER_TEST_LIBS = $(TRAINER_LIBS) $(SHMDDP_LIBS) $(PNG_LIBS) $(ZLIB_LIBS) $(TEST_LIBS)
check_PROGRAMS += tests/check_cli tests/check_data tests/check_sampler tests/check_metrics \
	tests/check_train
TESTS += tests/check_cli tests/check_data tests/check_sampler tests/check_metrics tests/check_train
tests_check_cli_SOURCES = tests/check_cli.c
tests_check_cli_CFLAGS = $(TEST_CFLAGS)
tests_check_cli_LDADD = $(TRAINER_TEST_LIBS)
tests_check_data_SOURCES = tests/check_data.c
tests_check_data_CFLAGS = $(TEST_CFLAGS) $(PNG_CFLAGS)
tests_check_data_LDADD = $(TRAINER_TEST_LIBS)
tests_check_sampler_SOURCES = tests/check_sampler.c
tests_check_sampler_CFLAGS = $(TEST_CFLAGS)
tests_check_sampler_LDADD = $(TRAINER_TEST_LIBS)
tests_check_metrics_SOURCES = tests/check_metrics.c
tests_check_metrics_CFLAGS = $(TEST_CFLAGS)
tests_check_metrics_LDADD = $(TRAINER_TEST_LIBS)
tests_check_train_SOURCES = tests/check_train.c
tests_check_train_CFLAGS = $(TEST_CFLAGS)
tests_check_train_LDADD = $(TRAINER_TEST_LIBS)
endif
include $(top_srcdir)/tests/dp.mk
# What a user meets (CPU ranks): PNG masks and their labels; resuming, logs and longer runs;
# checks before the fork, progress output, --version and flag suggestions.
TESTS += tests/user_masks.sh tests/user_resume.sh
EXTRA_DIST += tests/user_masks.sh tests/user_resume.sh
# shmddp-predict: masks, overlays and scores from a checkpoint; the exported weights in a plain
# PyTorch module (SKIP without python3-torch).
TESTS += tests/predict.sh tests/predict_torch.sh
EXTRA_DIST += tests/predict.sh tests/predict_torch.sh tests/predict_torch.py tests/predict_lib.sh
TESTS += tests/user_cli.sh
EXTRA_DIST += tests/user_cli.sh
