# kernels/: the trainer's operations (convolution, GEMM, normalisation, element-wise, loss,
# optimizers) behind the ops table of kernels/ops.h -> libkernels.a. The CPU reference of every op
# (f32 and f64 from one source each) is always built; with cuDNN the CUDA backend (cuDNN
# convolutions, own kernels for the rest) is built into libopscuda.a and its objects join
# libkernels.a. Nothing here uses the rest of the tree but the environment table (shm/env.h, in
# libshmddp_core.la, which $(MODEL_LIBS) lists after it): src/device/ picks a backend per device.
noinst_LIBRARIES += libkernels.a
# The GEMM and conv loops are the CPU backend's hot path: -O3 for vectorisation.
libkernels_a_CFLAGS = $(AM_CFLAGS) -O3
libkernels_a_SOURCES = \
	kernels/ops.h kernels/ops_cpu.c kernels/ops_cpu.h kernels/cpu_tmpl.h \
	kernels/gemm_cpu.c kernels/gemm_cpu.h kernels/gemm_cpu_tmpl.h \
	kernels/conv_cpu.c kernels/conv_cpu_tmpl.h kernels/conv_fused_cpu.c kernels/conv_fused_cpu.h \
	kernels/norm_cpu.c kernels/norm_cpu_tmpl.h \
	kernels/elem_cpu.c kernels/elem_cpu_tmpl.h \
	kernels/loss_cpu.c kernels/loss_cpu_tmpl.h \
	kernels/optim_cpu.c kernels/optim_cpu.h

# The CUDA backend (nvcc's suffix rule in Makefile.am; a separate archive because the per-target
# flags above would rename objects that rule cannot). Programs that link libopscuda.a itself
# list it before $(MODEL_LIBS), and $(CUDA_LIBS).
OPSCUDA_HDRS = kernels/ops_cuda.h kernels/ops_cuda.cuh
OPSCUDA_SRCS = kernels/ops_cuda.cu kernels/conv_cuda.cu kernels/conv_gemm_cuda.cu \
	kernels/conv_up_gemm_cuda.cu kernels/conv_skinny_cuda.cu kernels/conv_rgb_cuda.cu \
	kernels/norm_cuda.cu \
	kernels/elem_cuda.cu kernels/loss_cuda.cu kernels/optim_cuda.cu
if HAVE_CUDNN
noinst_LIBRARIES += libopscuda.a
libopscuda_a_SOURCES = $(OPSCUDA_HDRS) $(OPSCUDA_SRCS)
libkernels_a_LIBADD = $(libopscuda_a_OBJECTS)
EXTRA_libkernels_a_DEPENDENCIES = $(libopscuda_a_OBJECTS)
else
EXTRA_DIST += $(OPSCUDA_HDRS) $(OPSCUDA_SRCS)
endif

# Kernels on Hopper's own instructions (wgmma, sm_90a only): the fused forward 3x3 convolution
# (kernels/conv_sm90.h), built where configure's architectures include 90, into its own archive
# that only its test and dev/conv_sm90_bench link (the trainer does not call it yet). Its object
# is compiled for sm_90a alone, whatever else the build targets.
CONV_SM90_SRCS = kernels/conv_sm90.h kernels/conv_sm90_cuda.cu
if HAVE_CONV_SM90
noinst_LIBRARIES += libconvsm90.a
libconvsm90_a_SOURCES = $(CONV_SM90_SRCS)
kernels/conv_sm90_cuda.$(OBJEXT): NVCC_ARCHFLAGS = $(NVCC_SM90A_FLAGS)
else
EXTRA_DIST += $(CONV_SM90_SRCS)
endif
