# tests/obs.mk: observability (issue 10) — its sources and its tests. The timeline goes into
# libmodel.a, the lowest library whose code records spans (the model, the DDP engine and the
# loop all do); the per-rank step numbers, the end-of-run table and NVML go into libtrainer.a.
libmodel_a_SOURCES += src/timeline.c src/timeline.h
EXTRA_DIST += src/timeline_cuda.c src/timeline_cuda.h
if HAVE_CUDA
libmodel_a_SOURCES += src/timeline_cuda.c src/timeline_cuda.h
endif
libtrainer_a_SOURCES += src/run_summary.c src/run_summary.h src/nvml_dl.c src/nvml_dl.h

# tools/report: a python3 script (standard library only) that turns --out folders into
# report.html. `make report` runs it on REPORT_DIRS.
EXTRA_DIST += tools/report tests/check_report.sh bench/run_report_gpu.sh
REPORT_DIRS ?= runs/latest
.PHONY: report
report:
	python3 $(srcdir)/tools/report $(REPORT_DIRS)

if HAVE_CHECK
check_PROGRAMS += tests/check_timeline
TESTS += tests/check_timeline tests/check_report.sh
tests_check_timeline_SOURCES = tests/check_timeline.c tests/json_mini.c tests/json_mini.h
tests_check_timeline_CFLAGS = $(TEST_CFLAGS)
tests_check_timeline_LDADD = $(TRAINER_TEST_LIBS)
endif
