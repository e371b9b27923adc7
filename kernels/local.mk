# kernels/: the trainer's operations (convolution, GEMM, normalisation, element-wise, loss,
# optimizers) behind the ops table of kernels/ops.h. The CPU reference of every op (f32 and f64
# from one source each) is always built, into libkernels.a; with cuDNN the CUDA backend (cuDNN
# convolutions, own kernels for the rest) is built into the CUDA ops module, a shared module the
# programs load on first GPU use (src/device/ops_module.c). Nothing here uses the rest of the
# tree but the environment table (shm/env.h: libshmddp_core.la, which $(MODEL_LIBS) lists after
# libkernels.a; the module has its own copy): src/device/ picks a backend per device.
noinst_LIBRARIES += libkernels.a
# The GEMM and conv loops are the CPU backend's hot path: -O3 for vectorisation.
libkernels_a_CFLAGS = $(AM_CFLAGS) -O3
libkernels_a_SOURCES = \
	kernels/ops.h kernels/ops_cpu.c kernels/ops_cpu.h kernels/ops_cpu_tables.c kernels/cpu_tmpl.h \
	kernels/gemm_cpu.c kernels/gemm_cpu.h kernels/gemm_cpu_tmpl.h \
	kernels/conv_cpu.c kernels/conv_cpu_tmpl.h kernels/conv_fused_cpu.c kernels/conv_fused_cpu.h \
	kernels/conv_fused_bwd_cpu.c kernels/conv_fused_bwd_cpu.h kernels/conv_fused_ops_cpu.c \
	kernels/conv_fused_rank.c kernels/conv_fused_rank.h \
	kernels/norm_cpu.c kernels/norm_cpu_tmpl.h \
	kernels/elem_cpu.c kernels/elem_cpu_tmpl.h \
	kernels/loss_cpu.c kernels/loss_cpu_tmpl.h \
	kernels/optim_cpu.c kernels/optim_cpu.h

# The CUDA backend (nvcc's suffix rules in Makefile.am): libopscuda.la holds its code,
# position-independent; kernels/shmddp-ops-cuda.la is the module made of it (installed in
# $(pkglibdir) as shmddp-ops-cuda.so), the one thing that links cuBLAS, cuBLASLt and cuDNN
# ($(CUDA_OPS_LIBS)) and exports only its entry point (kernels/ops_cuda_module.h). Test and dev/
# programs that call the backend's own functions link libopscuda.la and $(CUDA_OPS_LIBS) too.
OPSCUDA_HDRS = kernels/ops_cuda.h kernels/ops_cuda.cuh kernels/conv_rgb.cuh
OPSCUDA_SRCS = kernels/ops_cuda.cu kernels/conv_cuda.cu kernels/conv_gemm_cuda.cu \
	kernels/conv_up_gemm_cuda.cu kernels/conv_skinny_cuda.cu kernels/conv_rgb_cuda.cu \
	kernels/conv_rgb_tf32_cuda.cu \
	kernels/conv_fused_cuda.cu kernels/conv_fused_rank.c kernels/conv_fused_rank.h kernels/norm_cuda.cu \
	kernels/elem_cuda.cu kernels/loss_cuda.cu kernels/head_train_cuda.cu kernels/optim_cuda.cu
noinst_HEADERS += kernels/ops_cuda_module.h
EXTRA_DIST += kernels/ops_cuda_module.map
if HAVE_CUDNN
noinst_LTLIBRARIES += libopscuda.la
libopscuda_la_SOURCES = $(OPSCUDA_HDRS) $(OPSCUDA_SRCS)
pkglib_LTLIBRARIES = kernels/shmddp-ops-cuda.la
kernels_shmddp_ops_cuda_la_SOURCES = kernels/ops_cuda_module.c shm/env.c
kernels_shmddp_ops_cuda_la_LIBADD = libopscuda.la $(CUDA_OPS_LIBS) -lm
kernels_shmddp_ops_cuda_la_LDFLAGS = -module -avoid-version -shared -no-undefined \
	$(LIB_NO_UNDEFINED) -Wl,--version-script=$(srcdir)/kernels/ops_cuda_module.map
EXTRA_kernels_shmddp_ops_cuda_la_DEPENDENCIES = kernels/ops_cuda_module.map
# What a program that may load the module depends on, so `make shmddp-train` builds it too.
OPS_MODULE = kernels/shmddp-ops-cuda.la
else
EXTRA_DIST += $(OPSCUDA_HDRS) $(OPSCUDA_SRCS) kernels/ops_cuda_module.c
OPS_MODULE =
endif

# Kernels on Hopper's own instructions (wgmma, sm_90a only): the fused 3x3 convolutions
# (kernels/conv_sm90.h) the backend's fused entries run (kernels/conv_fused_cuda.cu), built into
# libopscuda.la where configure's architectures include 90 (HAVE_CONV_SM90 in config.h). Their
# objects are compiled for sm_90a alone, whatever else the build targets.
CONV_SM90_SRCS = kernels/conv_sm90.h kernels/conv_sm90_cuda.cu kernels/sm90_ptx.cuh \
  kernels/sm90_conv.cuh kernels/sm90_host.h kernels/sm90_regs.h kernels/sm90_host.cu \
  kernels/conv_sm90_wgrad_cuda.cu \
  kernels/conv_sm90_wide.h kernels/conv_sm90_tile.h kernels/conv_sm90_wide_cuda.cu \
  kernels/conv_sm90_wgrad_wide_cuda.cu
if HAVE_CONV_SM90
if HAVE_CUDNN
libopscuda_la_SOURCES += $(CONV_SM90_SRCS)
kernels/conv_sm90_cuda.lo kernels/sm90_host.lo kernels/conv_sm90_wgrad_cuda.lo \
  kernels/conv_sm90_wide_cuda.lo \
  kernels/conv_sm90_wgrad_wide_cuda.lo: NVCC_ARCHFLAGS = $(NVCC_SM90A_FLAGS)
else
EXTRA_DIST += $(CONV_SM90_SRCS)
endif
else
EXTRA_DIST += $(CONV_SM90_SRCS)
endif
