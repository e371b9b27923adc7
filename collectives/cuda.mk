# collectives/cuda.mk: the device transport (CUDA IPC/P2P collectives), CUDA build only.
# (The GPU reductions it uses are listed in collectives/reduce/local.mk.)
if HAVE_CUDA
libshmddp_core_la_SOURCES += \
	collectives/cuda_init.c collectives/cuda_check.c collectives/cuda_reg.c collectives/cuda_ops.c \
	collectives/devmem_cuda.c collectives/devmem_cuda.h \
	collectives/cuda_state.h collectives/cuda_internal.h collectives/cuda_device.h \
	collectives/cuda_kernels.cu collectives/cuda_staged.cu \
	collectives/cuda_coloc.c collectives/cuda_coloc.h collectives/coloc_kernel.cu
include_HEADERS += include/shmddp_cuda.h
else
EXTRA_DIST += include/shmddp_cuda.h collectives/devmem_cuda.c collectives/devmem_cuda.h
endif
