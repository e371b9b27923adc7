# collectives/cuda.mk: the device transport (CUDA IPC/P2P collectives, collectives/cuda/), the
# CUDA driver behind the device-memory sharing and the co-located path's kernel; CUDA build only.
# (The GPU reductions it uses are listed in collectives/reduce/local.mk.)
if HAVE_CUDA
libshmddp_core_la_SOURCES += \
	collectives/cuda/cuda_init.c collectives/cuda/cuda_check.c collectives/cuda/cuda_reg.c \
	collectives/cuda/cuda_ops.c collectives/cuda/cuda_algos.h \
	collectives/cuda/cuda_args.c collectives/cuda/cuda_args.h \
	collectives/cuda/cuda_allreduce.c collectives/cuda/cuda_rs_ag.c collectives/cuda/cuda_moves.c \
	collectives/cuda/cuda_state.h collectives/cuda/cuda_internal.h collectives/cuda/cuda_device.h \
	collectives/cuda/cuda_kernels.cu collectives/cuda/cuda_staged.cu \
	collectives/cuda/cuda_coloc.c collectives/coloc/coloc_kernel.h \
	collectives/devmem/devmem_cuda.c collectives/devmem/devmem_cuda.h \
	collectives/coloc/coloc_kernel.cu
include_HEADERS += include/shmddp_cuda.h
else
EXTRA_DIST += include/shmddp_cuda.h collectives/devmem/devmem_cuda.c \
	collectives/devmem/devmem_cuda.h
endif
