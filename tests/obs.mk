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
