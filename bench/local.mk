# bench/: benchmark scripts and recorded results.
EXTRA_DIST += bench/run_shared_gpu.sh bench/run_host_collectives.sh bench/run_collectives_gpu.sh bench/run_trust_gpu.sh bench/run_train_gpu.sh bench/run_memory_gpu.sh \
	bench/run_step_ab_gpu.sh bench/ab bench/run_grad_comm.sh bench/run_record_1gpu.sh bench/compare_losses.py \
	bench/torch_unet.py bench/results bench/run_devmem_gpu.sh bench/run_speed_gpu.sh

EXTRA_DIST += bench/ops_cuda_run.sh bench/run_report_gpu.sh bench/run_move_check.sh bench/run_lower_gpu.sh \
	bench/ci_loaded.sh bench/run_coloc_bw_gpu.sh bench/run_dp_gpu.sh bench/run_nccl_busy_gpu.sh \
	bench/run_nccl_contract_gpu.sh bench/run_nccl_life_gpu.sh bench/run_user_gpu.sh bench/run_upconv_diag_gpu.sh \
	bench/run_coloc_colls_gpu.sh
