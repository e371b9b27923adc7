# tools/: allreduce_bench (nccl-tests style) and the dependency installer.
bin_PROGRAMS += tools/allreduce_bench
tools_allreduce_bench_SOURCES = tools/allreduce_bench.c tools/allreduce_bench.h \
	tools/coll_check.c tools/coll_check.h
tools_allreduce_bench_LDADD = $(SHMDDP_LIBS)
if HAVE_CUDA
tools_allreduce_bench_SOURCES += tools/allreduce_bench_cuda.c tools/nccl_dl.c tools/nccl_dl.h
endif
bin_PROGRAMS += tools/doctor
tools_doctor_SOURCES = tools/doctor.c tools/doctor.h
tools_doctor_LDADD = $(SHMDDP_LIBS)
if HAVE_CUDA
tools_doctor_SOURCES += tools/doctor_gpu.c
endif
noinst_PROGRAMS += tools/torch_check
tools_torch_check_SOURCES = tools/torch_check.c
tools_torch_check_LDADD = $(MODEL_LIBS) $(SHMDDP_LIBS)
EXTRA_DIST += tools/torch_crosscheck.py

# tools/compare: ./train in several modes on the same cases -> a table and SVG charts.
bin_PROGRAMS += tools/compare
tools_compare_SOURCES = tools/compare.c tools/compare.h tools/compare_svg.c
tools_compare_LDADD = -lm

# tools/report: a python3 script (standard library only) that turns --out folders into
# report.html. `make report` runs it on REPORT_DIRS.
EXTRA_DIST += tools/report
REPORT_DIRS ?= runs/latest
.PHONY: report
report:
	python3 $(srcdir)/tools/report $(REPORT_DIRS)
