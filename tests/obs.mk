# tests/obs.mk: what a run shows (src/obs/): the timeline, the per-rank step fields and the
# end-of-run table; tools/report on the files a run writes.
EXTRA_DIST += tests/check_report.sh bench/run_report_gpu.sh
if HAVE_CHECK
check_PROGRAMS += tests/check_timeline
TESTS += tests/check_timeline tests/check_report.sh
tests_check_timeline_SOURCES = tests/check_timeline.c tests/json_mini.c tests/json_mini.h
tests_check_timeline_CFLAGS = $(TEST_CFLAGS)
tests_check_timeline_LDADD = $(TRAINER_TEST_LIBS)
endif

# The step account's arithmetic (bench/step_account.c, behind bench/ops_cuda_bench's roofline).
if HAVE_CHECK
check_PROGRAMS += tests/check_account
TESTS += tests/check_account
tests_check_account_SOURCES = tests/check_account.c bench/step_account.c bench/step_account.h \
	tests/json_mini.c tests/json_mini.h
tests_check_account_CFLAGS = $(TEST_CFLAGS)
tests_check_account_LDADD = $(TEST_LIBS) -lm
endif
