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
tools_torch_check_LDADD = libmodel.a $(SHMDDP_LIBS)
EXTRA_DIST += tools/torch_crosscheck.py
