# tools/: allreduce_bench (nccl-tests style) and the dependency installer.
bin_PROGRAMS += tools/allreduce_bench
tools_allreduce_bench_SOURCES = tools/allreduce_bench.c
tools_allreduce_bench_LDADD = $(SHMDDP_LIBS)
