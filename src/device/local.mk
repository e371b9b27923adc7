# src/device/: what runs on a device -> libdevice.a: memory with its ledger (arena), the device
# interface (device.h: devices, memory, streams, events, copies, graphs; the ops backend of each
# device and the flat f32 arithmetic of the optimizer), over the CUDA runtime in GPU builds and
# plain host code otherwise, and the ops backends themselves: the CPU reference of kernels/ (f32
# and f64 from one source each) and, with cuDNN, the CUDA ops (kernels/cuda_ops.mk).
# device_sum.c and device_comm.c need the shmddp library; the rest does not.
noinst_LIBRARIES += libdevice.a
# The GEMM and conv loops are the CPU backend's hot path: -O3 for vectorisation.
libdevice_a_CFLAGS = $(AM_CFLAGS) -O3
libdevice_a_SOURCES = \
	src/device/arena.c src/device/arena.h src/device/plan.c src/device/plan.h \
	src/device/device.c src/device/device.h src/device/device_ops.c \
	src/device/device_sum.c src/device/device_comm.c \
	kernels/ops.h kernels/ops_cpu.c kernels/ops_cpu.h \
	kernels/gemm_cpu.c kernels/gemm_cpu.h kernels/gemm_cpu_tmpl.h \
	kernels/conv_cpu.c kernels/conv_cpu_tmpl.h \
	kernels/norm_cpu.c kernels/norm_cpu_tmpl.h \
	kernels/elem_cpu.c kernels/elem_cpu_tmpl.h \
	kernels/loss_cpu.c kernels/loss_cpu_tmpl.h \
	kernels/optim_cpu.c kernels/optim_cpu.h
# Programs linking libdevice.a need $(CUDA_LIBS) (empty without CUDA).
if HAVE_CUDNN
libdevice_a_LIBADD = $(libopscuda_a_OBJECTS)
EXTRA_libdevice_a_DEPENDENCIES = $(libopscuda_a_OBJECTS)
endif
