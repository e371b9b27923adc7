# bench/: benchmark scripts and recorded results.
EXTRA_DIST += bench/run_shared_gpu.sh bench/run_host_collectives.sh bench/run_collectives_gpu.sh bench/run_trust_gpu.sh bench/run_train_gpu.sh bench/run_memory_gpu.sh \
	bench/run_step_ab_gpu.sh bench/ab bench/run_grad_comm.sh bench/run_record_1gpu.sh bench/compare_losses.py \
	bench/torch_unet.py bench/results bench/run_devmem_gpu.sh bench/run_speed_gpu.sh

EXTRA_DIST += bench/gpu_check.sh bench/ops_cuda_run.sh bench/run_report_gpu.sh bench/run_move_check.sh bench/run_lower_gpu.sh \
	bench/ci_loaded.sh bench/run_coloc_bw_gpu.sh bench/run_dp_gpu.sh bench/run_nccl_busy_gpu.sh \
	bench/run_nccl_contract_gpu.sh bench/run_nccl_life_gpu.sh bench/run_user_gpu.sh bench/run_upconv_diag_gpu.sh \
	bench/conv_sm90_gpu.sh bench/run_coloc_colls_gpu.sh

# The PyTorch soak of the NCCL front end (bench/torch_soak.sh runs bench/torch_soak.py, which
# imports its two modules and bench/nccl/common.py; tests/torch_soak_cpu.sh runs its checks on
# the CPU).
EXTRA_DIST += bench/torch_soak.sh bench/torch_soak.py bench/torch_soak_checks.py \
	bench/torch_soak_comm.py bench/nccl/common.py
