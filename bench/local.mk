# bench/: benchmark scripts (bench/README.md is their index) and recorded results.
EXTRA_DIST += bench/README.md bench/lib.sh bench/tree_name.sh bench/fed_median.py bench/results \
	bench/allreduce_gpu.sh bench/allreduce_host.sh bench/ci_loaded.sh bench/coloc_bandwidth_gpu.sh \
	bench/devmem_gpu.sh bench/dp_vs_ddp_gpu.sh bench/gpu_check.sh bench/grad_comm.sh \
	bench/memory_gpu.sh bench/nccl_busy_peer_gpu.sh bench/nccl_contract_gpu.sh bench/nccl_life_gpu.sh \
	bench/record_gpu.sh bench/report_gpu.sh bench/same_training_gpu.sh bench/shared_gpu.sh \
	bench/speed_anchor_gpu.sh bench/step_ab_gpu.sh bench/step_ops_gpu.sh bench/train_speed_gpu.sh \
	bench/user_paths_gpu.sh bench/compare_losses.py bench/torch_unet.py

EXTRA_DIST += bench/conv_sm90_gpu.sh bench/coloc_collectives_gpu.sh bench/engine_miou_gpu.sh \
	bench/graph_timeline_gpu.sh bench/graph_timeline.py

# The PyTorch soak of the NCCL front end (bench/torch_soak.sh runs bench/torch_soak.py, which
# imports its two modules and bench/nccl/common.py; tests/torch_soak_cpu.sh runs its checks on
# the CPU).
EXTRA_DIST += bench/torch_soak.sh bench/torch_soak.py bench/torch_soak_checks.py \
	bench/torch_soak_comm.py

# PyTorch and CuPy on libshmddp-nccl.so (bench/nccl/) and the trainer across nodes (bench/mpi/).
EXTRA_DIST += bench/nccl/clients_gpu.sh bench/nccl/imports.sh bench/nccl/common.py \
	bench/nccl/allreduce_timing.py bench/nccl/busy_peer.py bench/nccl/collectives.py \
	bench/nccl/compare.py bench/nccl/contract.py bench/nccl/cupy_allreduce.py \
	bench/nccl/ddp_train.py bench/nccl/devmem_torch.py bench/nccl/kill_worker.py \
	bench/nccl/shrink_torch.py \
	bench/mpi/multinode_gpu.sh bench/mpi/predict.py bench/mpi/ckpt_diff.py
