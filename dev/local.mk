# dev/: our own experiments and comparison programs (dev/README.md), built by make, never
# installed; run them on the GPU machine or under mpirun as each one's opening comment says.

# One training step of the model written out for dev/torch_crosscheck.py, which rebuilds the
# U-Net in PyTorch and compares the loss and every gradient (tests/torch_oracle.sh).
noinst_PROGRAMS += dev/torch_check
dev_torch_check_SOURCES = dev/torch_check.c
dev_torch_check_LDADD = $(MODEL_LIBS) $(SHMDDP_LIBS)
EXTRA_DIST += dev/torch_crosscheck.py dev/README.md dev/candidates/README.md

# How many images a second the data loader feeds on this host, by thread count (the rate a
# training step cannot outrun; the trainer's summary calls the shortfall "data wait").
noinst_PROGRAMS += dev/loader_bench
dev_loader_bench_SOURCES = dev/loader_bench.c
dev_loader_bench_CFLAGS = $(AM_CFLAGS) -pthread
dev_loader_bench_LDADD = libdata.a $(PNG_LIBS) -lm
dev_loader_bench_LDFLAGS = -pthread

# The world's all-reduce across nodes under mpirun, in nccl-tests' columns; with --mpi-native
# also MPI_Allreduce beside it (with MPI only).
if HAVE_MPI
noinst_PROGRAMS += dev/mpi_allreduce_bench
dev_mpi_allreduce_bench_SOURCES = dev/mpi_allreduce_bench.c
dev_mpi_allreduce_bench_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
dev_mpi_allreduce_bench_LDADD = libworld_mpi.a libworld.a $(MODEL_LIBS) $(SHMDDP_LIBS) $(MPI_LIBS)
else
EXTRA_DIST += dev/mpi_allreduce_bench.c
endif

# cuDNN builds: where a U-Net step's time goes, op by op (bench/step_ops_gpu.sh runs it); cuDNN's
# graph API against its legacy API, layer by layer, and the fused convolution graphs (what it
# found is in its opening comment).
DEV_CUDNN_SRCS = dev/ops_cuda_bench.c dev/dnn_graph_bench.c
if HAVE_CUDNN
noinst_PROGRAMS += dev/ops_cuda_bench dev/dnn_graph_bench
dev_ops_cuda_bench_SOURCES = dev/ops_cuda_bench.c dev/step_account.c dev/step_account.h \
	dev/cuda_harness.c dev/cuda_harness.h
dev_ops_cuda_bench_LDADD = libopscuda.la $(MODEL_LIBS) $(CUDA_OPS_LIBS) -lm
dev_dnn_graph_bench_SOURCES = dev/dnn_graph_bench.c
dev_dnn_graph_bench_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
dev_dnn_graph_bench_LDADD = $(CUDA_OPS_LIBS) -lm
else
EXTRA_DIST += $(DEV_CUDNN_SRCS)
endif

# CUDA builds: what one hand-over between processes sharing a GPU costs under each way of waiting
# for the peers' interprocess events (bench/shared_gpu.sh OUTDIR handoff).
DEV_HANDOFF_SRCS = dev/coloc_handoff.c dev/coloc_handoff.h dev/coloc_handoff_kernel.cu
if HAVE_CUDA
noinst_PROGRAMS += dev/coloc_handoff
dev_coloc_handoff_SOURCES = $(DEV_HANDOFF_SRCS)
dev_coloc_handoff_LDADD = libobs.a $(CUDA_RT_LIBS)
else
EXTRA_DIST += $(DEV_HANDOFF_SRCS)
endif

# sm_90 GPUs with cuDNN: the fused 3x3 convolutions on Hopper, forward and dgrad (kernels/conv_sm90.h)
# checked against its CPU reference and timed against cuDNN on one layer shape (-i cin -o cout
# -b batch -s size; bench/conv_sm90_gpu.sh runs it on the U-Net's shapes).
# With it, dev/wgmma_desc_probe.cu (sm_90a): how wgmma descriptors starting part-way into a
# swizzle pattern read, which the next convolution designs depend on; and
# dev/ksplit_exchange_probe.cu (-X): what a K split's f32 exchange between two warpgroups costs.
DEV_CONV_SM90_SRCS = dev/conv_sm90_bench.c dev/wgmma_desc_probe.cu dev/wgmma_desc_probe.h \
	dev/ksplit_exchange_probe.cu dev/ksplit_exchange_probe.h dev/cuda_harness.c dev/cuda_harness.h
# dev/conv_sm90_protocol.py, dev/conv_sm90_wide_protocol.py and dev/conv_sm90_wgrad_protocol.py: models
# of the kernels' barrier protocols (python3, CPU; tests/conv_sm90_protocol.sh runs them), on what
# dev/sm90_protocol_model.py gives them (the mbarrier, the random interleaving).
# the few-channel kernels' lane model (tests/conv_rgb_lanes.sh)
EXTRA_DIST += dev/conv_rgb_lanes.py
EXTRA_DIST += $(DEV_CONV_SM90_SRCS) dev/conv_sm90_protocol.py dev/conv_sm90_wide_protocol.py \
	dev/conv_sm90_wgrad_protocol.py dev/sm90_protocol_model.py
if HAVE_CONV_SM90
if HAVE_CUDNN
noinst_PROGRAMS += dev/conv_sm90_bench
dev_conv_sm90_bench_SOURCES = $(DEV_CONV_SM90_SRCS) tests/conv_fused_testutil.h
dev/wgmma_desc_probe.$(OBJEXT): NVCC_ARCHFLAGS = $(NVCC_SM90A_FLAGS)
dev_conv_sm90_bench_LDADD = libopscuda.la $(MODEL_LIBS) $(CUDA_OPS_LIBS) -lm
endif
endif
