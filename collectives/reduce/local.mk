# collectives/reduce/: the element-wise reductions over every collective dtype (on the host, and
# on the GPU with the CUDA build) and the element size of each dtype, at the bottom of the library.
libshmddp_core_la_SOURCES += \
	collectives/reduce/dtype.c collectives/reduce/half.h \
	collectives/reduce/reduce_cpu.c collectives/reduce/reduce_cpu.h
if HAVE_CUDA
libshmddp_core_la_SOURCES += collectives/reduce/reduce_cuda.cu collectives/reduce/reduce_cuda.h
endif
