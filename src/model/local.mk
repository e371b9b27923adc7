# src/model/: the U-Net, its layers, optimizers and mixed precision -> libmodel.a, with the CPU
# backend of its ops (kernels/*_cpu.c: f32 and f64 from one source each).
noinst_LIBRARIES += libmodel.a
# The GEMM and conv loops are the CPU backend's hot path: -O3 for vectorisation.
libmodel_a_CFLAGS = $(AM_CFLAGS) -O3
libmodel_a_SOURCES = \
	src/model/model.h \
	src/model/unet.c src/model/unet.h src/model/unet_impl.h src/model/unet_build.c \
	src/model/layers.c src/model/layers.h \
	src/model/rng.c src/model/rng.h \
	src/model/optim.c src/model/optim.h \
	src/model/amp.c src/model/amp.h \
	kernels/ops.h kernels/ops_cpu.c kernels/ops_cpu.h \
	kernels/gemm_cpu.c kernels/gemm_cpu.h kernels/gemm_cpu_tmpl.h \
	kernels/conv_cpu.c kernels/conv_cpu_tmpl.h \
	kernels/norm_cpu.c kernels/norm_cpu_tmpl.h \
	kernels/elem_cpu.c kernels/elem_cpu_tmpl.h \
	kernels/loss_cpu.c kernels/loss_cpu_tmpl.h \
	kernels/optim_cpu.c kernels/optim_cpu.h
# With cuDNN the model runs on the GPU too: the CUDA ops (kernels/cuda_ops.mk) go into the
# archive, and programs linking libmodel.a need $(CUDA_LIBS) (empty without CUDA).
if HAVE_CUDNN
libmodel_a_LIBADD = $(libopscuda_a_OBJECTS)
EXTRA_libmodel_a_DEPENDENCIES = $(libopscuda_a_OBJECTS)
endif
