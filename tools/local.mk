# tools/: allreduce_bench (nccl-tests style), doctor and the dependency installer. Installed as
# shmddp-allreduce-bench and shmddp-doctor; tools/allreduce_bench and tools/doctor are links to
# them in the build tree (Makefile.am).
bin_PROGRAMS += shmddp-allreduce-bench
shmddp_allreduce_bench_SOURCES = tools/allreduce_bench.c tools/allreduce_bench.h \
	tools/coll_check.c tools/coll_check.h
shmddp_allreduce_bench_LDADD = $(SHMDDP_LIBS)
if HAVE_CUDA
shmddp_allreduce_bench_SOURCES += tools/allreduce_bench_cuda.c tools/nccl_dl.c tools/nccl_dl.h
endif
bin_PROGRAMS += shmddp-doctor
shmddp_doctor_SOURCES = tools/doctor.c tools/doctor.h
shmddp_doctor_LDADD = $(SHMDDP_LIBS)
if HAVE_CUDA
shmddp_doctor_SOURCES += tools/doctor_gpu.c
endif
noinst_PROGRAMS += tools/torch_check
tools_torch_check_SOURCES = tools/torch_check.c
tools_torch_check_LDADD = $(MODEL_LIBS) $(SHMDDP_LIBS)
EXTRA_DIST += tools/torch_crosscheck.py

# tools/compare (installed as shmddp-compare): ./train in several modes on the same cases -> a
# table and SVG charts.
bin_PROGRAMS += shmddp-compare
shmddp_compare_SOURCES = tools/compare.c tools/compare.h tools/compare_svg.c
shmddp_compare_LDADD = -lm

# tools/report: a python3 script (standard library only) that turns --out folders into
# report.html. `make report` runs it on REPORT_DIRS.
EXTRA_DIST += tools/report
REPORT_DIRS ?= runs/latest
.PHONY: report
report:
	python3 $(srcdir)/tools/report $(REPORT_DIRS)

# tools/mpi_allreduce_bench (with MPI, not installed): the world's all-reduce across nodes under
# mpirun, in nccl-tests' columns; with --mpi-native also MPI_Allreduce beside it.
if HAVE_MPI
noinst_PROGRAMS += tools/mpi_allreduce_bench
tools_mpi_allreduce_bench_SOURCES = tools/mpi_allreduce_bench.c
tools_mpi_allreduce_bench_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tools_mpi_allreduce_bench_LDADD = libworld_mpi.a libworld.a $(MODEL_LIBS) $(SHMDDP_LIBS) $(MPI_LIBS)
endif

# cuDNN's graph API against its legacy API, layer by layer, and the fused convolution graphs
# (run it on the GPU machine; what it found is in its opening comment).
if HAVE_CUDNN
noinst_PROGRAMS += tools/dnn_graph_bench
tools_dnn_graph_bench_SOURCES = tools/dnn_graph_bench.c
tools_dnn_graph_bench_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tools_dnn_graph_bench_LDADD = $(CUDA_LIBS) -lm
else
EXTRA_DIST += tools/dnn_graph_bench.c
endif
