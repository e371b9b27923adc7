# bench/: benchmark scripts and recorded results.
EXTRA_DIST += bench/run_host_collectives.sh bench/run_collectives_gpu.sh bench/run_train_gpu.sh bench/run_memory_gpu.sh \
	bench/run_step_ab_gpu.sh bench/ab bench/run_grad_comm.sh bench/run_record_1gpu.sh bench/compare_losses.py \
	bench/torch_unet.py bench/results

# Where a U-Net step's time goes, op by op (run it on the GPU machine; bench/ops_cuda_run.sh).
if HAVE_CUDNN
noinst_PROGRAMS += bench/ops_cuda_bench
bench_ops_cuda_bench_SOURCES = bench/ops_cuda_bench.c
bench_ops_cuda_bench_LDADD = libopscuda.a $(MODEL_LIBS) $(CUDA_LIBS) -lm
else
EXTRA_DIST += bench/ops_cuda_bench.c
endif
EXTRA_DIST += bench/ops_cuda_run.sh
