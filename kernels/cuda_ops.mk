# kernels/cuda_ops.mk: the CUDA backend of the trainer's ops (cuDNN convolutions, own kernels for
# normalisation, element-wise ops, loss and optimizers) -> libopscuda.a, cuDNN builds only.
# Programs that use it link libopscuda.a BEFORE libmodel.a, and $(CUDA_LIBS).
OPSCUDA_HDRS = kernels/ops_cuda.h kernels/ops_cuda.cuh
OPSCUDA_SRCS = kernels/ops_cuda.cu kernels/conv_cuda.cu kernels/conv_gemm_cuda.cu \
	kernels/conv_skinny_cuda.cu kernels/norm_cuda.cu \
	kernels/elem_cuda.cu kernels/loss_cuda.cu kernels/optim_cuda.cu
if HAVE_CUDNN
noinst_LIBRARIES += libopscuda.a
libopscuda_a_SOURCES = $(OPSCUDA_HDRS) $(OPSCUDA_SRCS)
else
EXTRA_DIST += $(OPSCUDA_HDRS) $(OPSCUDA_SRCS)
endif

# Where a U-Net step's time goes, op by op (run it on the GPU machine).
if HAVE_CUDNN
noinst_PROGRAMS += bench/ops_cuda_bench
bench_ops_cuda_bench_SOURCES = bench/ops_cuda_bench.c bench/step_account.c bench/step_account.h
bench_ops_cuda_bench_LDADD = libopscuda.a $(MODEL_LIBS) $(CUDA_LIBS) -lm
else
EXTRA_DIST += bench/ops_cuda_bench.c
endif
EXTRA_DIST += bench/ops_cuda_run.sh

# cuDNN's graph API against its legacy API, layer by layer, and the fused convolution graphs
# (the measurements behind conv_graph_cuda.cu; run it on the GPU machine).
if HAVE_CUDNN
noinst_PROGRAMS += tools/dnn_graph_bench
tools_dnn_graph_bench_SOURCES = tools/dnn_graph_bench.c
tools_dnn_graph_bench_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tools_dnn_graph_bench_LDADD = $(CUDA_LIBS) -lm
else
EXTRA_DIST += tools/dnn_graph_bench.c
endif
