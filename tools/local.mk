# tools/: the programs users install and what they are built from: allreduce_bench (nccl-tests style), doctor,
# compare, report, and the dependency installer. Installed as shmddp-allreduce-bench,
# shmddp-doctor, shmddp-compare and shmddp-report; tools/allreduce_bench, tools/doctor and
# tools/compare are links to them in the build tree (Makefile.am). Our own experiments and
# comparison programs are in dev/.

# The collectives' test patterns and their f64 reference (allreduce_bench -c 1, and the Check
# suites of the collectives), compiled once.
noinst_LIBRARIES += libcollcheck.a
libcollcheck_a_SOURCES = tools/coll_check.c tools/coll_check.h

bin_PROGRAMS += shmddp-allreduce-bench
shmddp_allreduce_bench_SOURCES = tools/allreduce_bench.c \
	tools/allreduce_bench_table.c tools/allreduce_bench_table.h
shmddp_allreduce_bench_LDADD = libcollcheck.a libobs.a $(SHMDDP_LIBS)
if HAVE_CUDA
shmddp_allreduce_bench_SOURCES += tools/allreduce_bench_cuda.c tools/allreduce_bench_cuda.h \
	tools/nccl_dl.c tools/nccl_dl.h
endif

bin_PROGRAMS += shmddp-doctor
shmddp_doctor_SOURCES = tools/doctor.c tools/doctor_report.c tools/doctor_report.h
shmddp_doctor_LDADD = $(SHMDDP_LIBS)
if HAVE_CUDA
shmddp_doctor_SOURCES += tools/doctor_gpu.c tools/doctor_gpu.h
# The CUDA ops module's loader (src/device/ops_module.c), which the GPU checks report on.
shmddp_doctor_LDADD += libdevice.a
EXTRA_shmddp_doctor_DEPENDENCIES = $(OPS_MODULE)
endif

# tools/compare (installed as shmddp-compare): ./train in several modes on the same cases -> a
# table and SVG charts.
bin_PROGRAMS += shmddp-compare
shmddp_compare_SOURCES = tools/compare.c tools/compare.h tools/compare_read.c tools/compare_svg.c
shmddp_compare_LDADD = libobs.a -lm

# tools/report: a python3 script (standard library only) that turns --out folders into
# report.html. `make report` runs it on REPORT_DIRS.
EXTRA_DIST += tools/report
REPORT_DIRS ?= runs/latest
.PHONY: report
report:
	python3 $(srcdir)/tools/report $(REPORT_DIRS)
