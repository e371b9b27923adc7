# tests/local.mk — the one registry of the tests: every test program and script of the tree is
# listed here, with its build lines, grouped by the layer it tests:
#   library      check_reduce check_shm check_collectives check_join check_join_trust
#                check_coloc check_devmem; GPU: check_cuda_collectives(_other) check_join_cuda
#                check_coloc_cuda check_devmem_cuda kill_rank_gpu.sh; NCCL front end: check_nccl,
#                check_nccl_conf(_gpu), check_nccl_life; CUDA build: nccl_exports.sh nccl_run.sh;
#                any build: nccl_run_mps.sh; the PyTorch soak: torch_soak_cpu.sh
#                torch_soak_runner.sh; shmddp-allreduce-bench: allreduce_bench.sh
#   trainer's    check_ops check_model check_optim check_arena check_plan check_conv_fused
#                check_conv_fused_bwd
#   layers       check_ops_module startup_libs.sh; cuDNN: check_ops_cuda check_model_cuda; sm_90
#                GPUs: check_conv_sm90_cuda
#   trainer      check_cli check_mps check_data check_sampler check_metrics check_train check_checkpoint
#                check_ddp check_dp check_timeline; check_report.sh report_hostile.sh
#                report_browser.sh torch_oracle.sh resume.sh resume_gpu.sh
#   docs         readme_env.sh docs_links.sh
#   bench/       bench_fed_median.sh bench_graph_timeline.sh
#   faults       kill_rank.sh check_fuzz_regress report_fuzz.sh fault_kill.sh fault_env.sh
#                fault_ckpt.sh fault_files.sh (with tests/ckpt_craft) fault_signal.sh restart.sh
#                (with tests/ckpt_look, as the resume tests)
#   across nodes mpi.sh (with tests/mpi_ddp, an MPI program)
#   dev/         check_account (the step account behind dev/ops_cuda_bench -A)
# Check suites, one per module; GPU tests SKIP (exit 77) without a GPU, and mpi.sh without MPI.
# Without the Check library tests/no-check.sh says how to get it.
AM_TESTS_ENVIRONMENT = top_builddir=$(top_builddir); srcdir=$(srcdir); export top_builddir srcdir; \
	bin_programs='$(bin_PROGRAMS) $(bin_SCRIPTS)'; pkglibdir='$(pkglibdir)'; \
	export bin_programs pkglibdir;
EXTRA_DIST += tests/no-check.sh tests/suite_main.h tests/failures.h tests/testutil.h \
	tests/lib.sh tests/wait_lib.sh tests/fault_lib.sh tests/fuzz
TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
TEST_LIBS = $(CHECK_LIBS)
# The model needs only shmddp.h's types, not the library.
MODEL_TEST_LIBS = $(MODEL_LIBS) $(CUDA_RT_LIBS) -lm $(TEST_LIBS)
TRAINER_TEST_LIBS = $(APP_LIBS) $(SHMDDP_LIBS) $(PNG_LIBS) $(ZLIB_LIBS) $(TEST_LIBS)

if HAVE_CHECK
# ---- the library: reductions, shm/, the collectives, communicators joined by id ----
check_PROGRAMS += tests/check_reduce tests/check_shm tests/check_collectives tests/check_join \
	tests/check_join_trust
TESTS += tests/check_reduce tests/check_shm tests/check_collectives tests/check_join \
	tests/check_join_trust
tests_check_reduce_SOURCES = tests/check_reduce.c
tests_check_reduce_CFLAGS = $(TEST_CFLAGS)
tests_check_reduce_LDADD = libcollcheck.a $(SHMDDP_LIBS) $(TEST_LIBS)
tests_check_shm_SOURCES = tests/check_shm.c tests/testutil.h
tests_check_shm_CFLAGS = $(TEST_CFLAGS)
tests_check_shm_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
tests_check_collectives_SOURCES = tests/check_collectives.c tests/testutil.h
tests_check_collectives_CFLAGS = $(TEST_CFLAGS)
tests_check_collectives_LDADD = libcollcheck.a $(SHMDDP_LIBS) $(TEST_LIBS)
# Ranks as processes this suite starts itself, and threads.
tests_check_join_SOURCES = tests/check_join.c tests/join_harness.h
tests_check_join_CFLAGS = $(TEST_CFLAGS)
tests_check_join_LDADD = libcollcheck.a $(SHMDDP_LIBS) $(TEST_LIBS)
# Who can get into a group: other users' attacks, names, clean-up.
tests_check_join_trust_SOURCES = tests/check_join_trust.c tests/join_harness.h
tests_check_join_trust_CFLAGS = $(TEST_CFLAGS)
tests_check_join_trust_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
if HAVE_CUDA
# The CUDA collectives, and communicators joined by id with device buffers.
# check_cuda_collectives is two programs of one source (suite_main.h: SUITE_PART), so a parallel
# make check runs its halves side by side.
check_PROGRAMS += tests/check_cuda_collectives tests/check_cuda_collectives_other \
	tests/check_join_cuda
TESTS += tests/check_cuda_collectives tests/check_cuda_collectives_other tests/check_join_cuda
tests_check_cuda_collectives_SOURCES = tests/check_cuda_collectives.c
tests_check_cuda_collectives_CFLAGS = $(TEST_CFLAGS)
tests_check_cuda_collectives_LDADD = libcollcheck.a $(SHMDDP_LIBS) $(TEST_LIBS)
tests_check_cuda_collectives_other_SOURCES = tests/check_cuda_collectives.c
tests_check_cuda_collectives_other_CFLAGS = $(TEST_CFLAGS) -DSUITE_PART='"other"'
tests_check_cuda_collectives_other_LDADD = $(tests_check_cuda_collectives_LDADD)
tests_check_join_cuda_SOURCES = tests/check_join_cuda.c tests/join_harness.h
tests_check_join_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_join_cuda_LDADD = libcollcheck.a $(SHMDDP_LIBS) $(TEST_LIBS)
# Any device pointer: cudaMalloc, cuMem chunks, ncclMemAlloc, cudaMallocAsync; 1000 reallocations
# (processes joined by id; SKIP without a GPU).
check_PROGRAMS += tests/check_devmem_cuda
TESTS += tests/check_devmem_cuda
tests_check_devmem_cuda_SOURCES = tests/check_devmem_cuda.c tests/join_harness.h
tests_check_devmem_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_devmem_cuda_LDADD = libcollcheck.a $(SHMDDP_LIBS) $(TEST_LIBS)
# Ranks that share a GPU: every collective through the co-located path, in processes and
# threads, graph capture (SKIP without a GPU).
check_PROGRAMS += tests/check_coloc_cuda
TESTS += tests/check_coloc_cuda
tests_check_coloc_cuda_SOURCES = tests/check_coloc_cuda.c
tests_check_coloc_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_coloc_cuda_LDADD = libcollcheck.a $(SHMDDP_LIBS) $(TEST_LIBS)
# The entry points libshmddp-nccl.so exports (and their pnccl twins), and shmddp-nccl-run.
TESTS += tests/nccl_exports.sh tests/nccl_run.sh
endif
# The NCCL front end on host-only communicators (every build), and its conformance harness:
# every collective x dtype x op x place x count x 2, 3, 5, 8 ranks against an f64 reference;
# with device buffers on one shared GPU where there is one.
# The GPU matrix is a program of its own (check_nccl_conf_gpu; suite_main.h: SUITE_PART).
check_PROGRAMS += tests/check_nccl tests/check_nccl_conf tests/check_nccl_conf_gpu
TESTS += tests/check_nccl tests/check_nccl_conf tests/check_nccl_conf_gpu
tests_check_nccl_SOURCES = tests/check_nccl.c
tests_check_nccl_CFLAGS = $(TEST_CFLAGS)
tests_check_nccl_LDADD = libcollcheck.a libshmddp_nccl_core.la $(SHMDDP_LIBS) $(TEST_LIBS)
tests_check_nccl_conf_SOURCES = tests/check_nccl_conf.c tests/nccl_conf.c tests/nccl_conf_ref.c \
	tests/nccl_conf.h
tests_check_nccl_conf_CFLAGS = $(TEST_CFLAGS)
tests_check_nccl_conf_LDADD = libshmddp_nccl_core.la $(SHMDDP_LIBS) $(TEST_LIBS) $(CUDA_RT_LIBS) -lm
tests_check_nccl_conf_gpu_SOURCES = $(tests_check_nccl_conf_SOURCES)
tests_check_nccl_conf_gpu_CFLAGS = $(TEST_CFLAGS) -DSUITE_PART='"gpu"'
tests_check_nccl_conf_gpu_LDADD = $(tests_check_nccl_conf_LDADD)
# The communicator's life beyond init and split: shrink (after a SIGKILL too), with the
# conformance harness on the communicators it makes (host-only).
check_PROGRAMS += tests/check_nccl_life
TESTS += tests/check_nccl_life
tests_check_nccl_life_SOURCES = tests/check_nccl_life.c tests/nccl_conf.c tests/nccl_conf_ref.c \
	tests/nccl_conf.h tests/testutil.h
tests_check_nccl_life_CFLAGS = $(TEST_CFLAGS)
tests_check_nccl_life_LDADD = libshmddp_nccl_core.la $(SHMDDP_LIBS) $(TEST_LIBS) $(CUDA_RT_LIBS) -lm

# ---- the trainer's layers: ops, model, optimizers, memory ledger and plan ----
check_PROGRAMS += tests/check_ops tests/check_model tests/check_optim tests/check_arena tests/check_plan
TESTS += tests/check_ops tests/check_model tests/check_optim tests/check_arena tests/check_plan
tests_check_ops_SOURCES = tests/check_ops.c
tests_check_ops_CFLAGS = $(TEST_CFLAGS)
tests_check_ops_LDADD = $(MODEL_TEST_LIBS)
tests_check_model_SOURCES = tests/check_model.c tests/unet_fixture.h
tests_check_model_CFLAGS = $(TEST_CFLAGS)
tests_check_model_LDADD = $(MODEL_TEST_LIBS)
tests_check_optim_SOURCES = tests/check_optim.c
tests_check_optim_CFLAGS = $(TEST_CFLAGS)
tests_check_optim_LDADD = $(MODEL_TEST_LIBS)
tests_check_arena_SOURCES = tests/check_arena.c
tests_check_arena_CFLAGS = $(TEST_CFLAGS)
tests_check_arena_LDADD = $(MODEL_TEST_LIBS)
tests_check_plan_SOURCES = tests/check_plan.c tests/unet_fixture.h
tests_check_plan_CFLAGS = $(TEST_CFLAGS)
tests_check_plan_LDADD = $(MODEL_TEST_LIBS)
# The fused forward convolution's CPU reference (BN prologue, conv, statistics) against f64.
check_PROGRAMS += tests/check_conv_fused
TESTS += tests/check_conv_fused
tests_check_conv_fused_SOURCES = tests/check_conv_fused.c tests/conv_fused_testutil.h
tests_check_conv_fused_CFLAGS = $(TEST_CFLAGS)
tests_check_conv_fused_LDADD = $(MODEL_TEST_LIBS)
# The wide Hopper convolution's pixel tiles (kernels/conv_sm90_tile.h) and the Hopper kernels'
# register hand-over (kernels/sm90_regs.h): the arithmetic the kernels run, on the CPU.
check_PROGRAMS += tests/check_conv_sm90_tile
TESTS += tests/check_conv_sm90_tile
tests_check_conv_sm90_tile_SOURCES = tests/check_conv_sm90_tile.c kernels/conv_sm90_tile.h \
  kernels/sm90_regs.h
tests_check_conv_sm90_tile_CFLAGS = $(TEST_CFLAGS)
tests_check_conv_sm90_tile_LDADD = $(MODEL_TEST_LIBS)
# Its backward references (dgrad with the ReLU mask and BN backward sums, wgrad in a fixed
# order) against f64 and against the CPU backend's ops.
check_PROGRAMS += tests/check_conv_fused_bwd
TESTS += tests/check_conv_fused_bwd
tests_check_conv_fused_bwd_SOURCES = tests/check_conv_fused_bwd.c tests/conv_fused_testutil.h
tests_check_conv_fused_bwd_CFLAGS = $(TEST_CFLAGS)
tests_check_conv_fused_bwd_LDADD = $(MODEL_TEST_LIBS)
# The fused convolutions on Hopper against their CPU references (SKIP without an sm_90 GPU).
EXTRA_DIST += tests/check_conv_sm90_cuda.c
if HAVE_CONV_SM90
if HAVE_CUDNN
check_PROGRAMS += tests/check_conv_sm90_cuda
TESTS += tests/check_conv_sm90_cuda
tests_check_conv_sm90_cuda_SOURCES = tests/check_conv_sm90_cuda.c tests/conv_fused_testutil.h
tests_check_conv_sm90_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_conv_sm90_cuda_LDADD = libopscuda.la $(MODEL_LIBS) $(CUDA_OPS_LIBS) -lm $(TEST_LIBS)
endif
endif
# The CUDA ops module: where a program finds it, how a broken one is refused, that only the
# module brings cuBLAS and cuDNN (any build; the stand-ins for broken modules in tests/fake_ops/
# are made below). startup_libs.sh: --help, --version and CPU runs of every program load none.
check_PROGRAMS += tests/check_ops_module
TESTS += tests/check_ops_module tests/startup_libs.sh
tests_check_ops_module_SOURCES = tests/check_ops_module.c
tests_check_ops_module_CFLAGS = $(TEST_CFLAGS)
tests_check_ops_module_LDADD = $(MODEL_TEST_LIBS)
EXTRA_tests_check_ops_module_DEPENDENCIES = $(OPS_MODULE_FAKES)
tests/check_ops_module-check_ops_module.$(OBJEXT): build_version.h
if HAVE_CUDNN
# The CUDA ops against the CPU reference, the model on the GPU against the model on the CPU.
check_PROGRAMS += tests/check_ops_cuda tests/check_model_cuda
TESTS += tests/check_ops_cuda tests/check_model_cuda
tests_check_ops_cuda_SOURCES = tests/check_ops_cuda.c tests/ops_cuda_testutil.h
tests_check_ops_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_ops_cuda_LDADD = libopscuda.la $(MODEL_LIBS) $(CUDA_OPS_LIBS) -lm $(TEST_LIBS)
tests_check_model_cuda_SOURCES = tests/check_model_cuda.c tests/ops_cuda_testutil.h
tests_check_model_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_model_cuda_LDADD = $(TRAINER_LIBS) $(SHMDDP_LIBS) -lm $(TEST_LIBS)
EXTRA_tests_check_model_cuda_DEPENDENCIES = $(OPS_MODULE)
endif

# ---- the trainer: CLI, data, sampler, metrics, training, checkpoints, DDP and DataParallel,
# what a run shows ----
check_PROGRAMS += tests/check_cli tests/check_data tests/check_sampler tests/check_metrics \
	tests/check_train tests/check_checkpoint tests/check_ddp tests/check_dp tests/check_timeline
TESTS += tests/check_cli tests/check_data tests/check_sampler tests/check_metrics \
	tests/check_train tests/check_checkpoint tests/check_ddp tests/check_dp tests/check_timeline \
	tests/check_report.sh tests/report_hostile.sh tests/report_browser.sh tests/resume.sh \
	tests/resume_prepad.sh tests/resume_gpu.sh tests/readme_env.sh tests/env_table.sh
# shmddp-allreduce-bench on CPU ranks: every collective, in and out of place, every result
# checked.
TESTS += tests/allreduce_bench.sh
EXTRA_DIST += tests/allreduce_bench.sh
# The documentation names only what exists: the links of README.md and docs/, and the bench/,
# tests/ and tools/ paths they write.
TESTS += tests/docs_links.sh
EXTRA_DIST += tests/docs_links.sh
# The benchmarks' rate for our trainer leaves out the runs that waited for their batches
# (bench/fed_median.py, used by bench/speed_anchor_gpu.sh and bench/step_ab_gpu.sh).
TESTS += tests/bench_fed_median.sh
EXTRA_DIST += tests/bench_fed_median.sh
# The idle time between a graph-replayed step's kernels from an Nsight Systems trace
# (bench/graph_timeline.py, used by bench/graph_timeline_gpu.sh).
TESTS += tests/bench_graph_timeline.sh
EXTRA_DIST += tests/bench_graph_timeline.sh
# shmddp-nccl-run and MPS (by default where ranks share a GPU, --mps, --no-mps, folders not to
# be trusted, SIGKILL, the preload), over stand-ins for the MPS control program, its CUDA checks
# and torchrun.
TESTS += tests/nccl_run_mps.sh
EXTRA_DIST += tests/nccl_run_mps.sh
# The job's private MPS daemon and --mps, over a stand-in control program (no GPU needed).
check_PROGRAMS += tests/check_mps
TESTS += tests/check_mps
EXTRA_DIST += tests/fake_mps_control
tests_check_mps_SOURCES = tests/check_mps.c tests/testutil.h
tests_check_mps_CFLAGS = $(TEST_CFLAGS)
tests_check_mps_LDADD = $(TRAINER_TEST_LIBS)
tests_check_cli_SOURCES = tests/check_cli.c
tests_check_cli_CFLAGS = $(TEST_CFLAGS)
tests_check_cli_LDADD = $(TRAINER_TEST_LIBS)
tests_check_data_SOURCES = tests/check_data.c
tests_check_data_CFLAGS = $(TEST_CFLAGS) $(PNG_CFLAGS)
tests_check_data_LDADD = $(TRAINER_TEST_LIBS)
tests_check_sampler_SOURCES = tests/check_sampler.c
tests_check_sampler_CFLAGS = $(TEST_CFLAGS)
tests_check_sampler_LDADD = $(TRAINER_TEST_LIBS)
tests_check_metrics_SOURCES = tests/check_metrics.c
tests_check_metrics_CFLAGS = $(TEST_CFLAGS)
tests_check_metrics_LDADD = $(TRAINER_TEST_LIBS)
tests_check_train_SOURCES = tests/check_train.c tests/train_run.h tests/testutil.h
tests_check_train_CFLAGS = $(TEST_CFLAGS)
tests_check_train_LDADD = $(TRAINER_TEST_LIBS)
tests_check_checkpoint_SOURCES = tests/check_checkpoint.c tests/fuzz/ckpt_input.h
tests_check_checkpoint_CFLAGS = $(TEST_CFLAGS)
tests_check_checkpoint_LDADD = libtrainer.a libobs.a $(SHMDDP_LIBS) $(TEST_LIBS)
tests_check_ddp_SOURCES = tests/check_ddp.c tests/parallel_fixture.h tests/testutil.h
tests_check_ddp_CFLAGS = $(TEST_CFLAGS)
tests_check_ddp_LDADD = $(PARALLEL_LIBS) $(SHMDDP_LIBS) $(TEST_LIBS)
# DataParallel against DDP (CPU devices; the GPU variant skips without 2 GPUs).
tests_check_dp_SOURCES = tests/check_dp.c tests/parallel_fixture.h tests/testutil.h
tests_check_dp_CFLAGS = $(TEST_CFLAGS)
tests_check_dp_LDADD = $(APP_LIBS) $(SHMDDP_LIBS) $(PNG_LIBS) $(ZLIB_LIBS) $(TEST_LIBS)
# The timeline, the per-rank step fields and the end-of-run table (check_report.sh: tools/report
# on the files a run writes; report_hostile.sh: on a folder an attacker wrote,
# tests/hostile_run.py; report_browser.sh: both pages in a headless browser, SKIP without one).
tests_check_timeline_SOURCES = tests/check_timeline.c tests/json_mini.c tests/json_mini.h \
	tests/train_run.h tests/testutil.h
tests_check_timeline_CFLAGS = $(TEST_CFLAGS)
tests_check_timeline_LDADD = $(TRAINER_TEST_LIBS)
# What a user meets (CPU ranks): PNG masks and their labels; resuming, logs and longer runs;
# checks before the fork, progress output, --version and flag suggestions. shmddp-predict: masks,
# overlays and scores from a checkpoint; the exported weights in a plain PyTorch module (SKIP
# without python3-torch); outputs that never replace a file the run did not write. PNG files
# that claim gigabytes, refused within a few tens of MB by the trainer and shmddp-predict. Paths
# that are not UTF-8 in every JSON file a run writes, read by a strict reader.
# A run's folder: the model every run ends with, the log that follows its run, runs that never
# mix in one folder (runs/latest, --overwrite). shmddp-predict on a user's data: masks in the
# training masks' values, every image read before anything is written, --keep-going.
TESTS += tests/user_masks.sh tests/user_resume.sh tests/user_cli.sh tests/predict.sh \
	tests/predict_torch.sh tests/predict_outputs.sh tests/png_limits.sh tests/json_strings.sh \
	tests/user_runs.sh tests/predict_inputs.sh
EXTRA_DIST += tests/user_masks.sh tests/user_resume.sh tests/user_cli.sh tests/predict.sh \
	tests/predict_torch.sh tests/predict_torch.py tests/predict_lib.sh tests/png_io.py \
	tests/predict_outputs.sh tests/png_limits.sh tests/json_strings.sh tests/user_runs.sh \
	tests/predict_inputs.sh

# ---- faults: killed ranks, replay of the fuzzers' kept inputs, fault injection on CPU ranks
# (SIGKILL/SIGSTOP of ranks, /dev/shm, segments, checkpoints) ----
check_PROGRAMS += tests/check_fuzz_regress tests/ckpt_craft
TESTS += tests/kill_rank.sh tests/check_fuzz_regress tests/report_fuzz.sh tests/fault_kill.sh \
	tests/fault_env.sh tests/fault_ckpt.sh tests/fault_files.sh tests/fault_signal.sh
# --max-restarts: a killed rank, every rank started again from the last checkpoint to the same
# weights as an uninterrupted run; a rank that dies on every start stops after N.
TESTS += tests/restart.sh
EXTRA_DIST += tests/restart.sh
tests_check_fuzz_regress_SOURCES = tests/check_fuzz_regress.c tests/fuzz/cli_input.h \
	tests/fuzz/png_input.h tests/fuzz/segment_input.h tests/fuzz/log_input.h \
	tests/fuzz/compare_input.h tools/compare_read.c tools/compare.h
tests_check_fuzz_regress_CFLAGS = $(TEST_CFLAGS) $(PNG_CFLAGS)
tests_check_fuzz_regress_LDADD = $(TRAINER_TEST_LIBS)
# Damaged checkpoints for tests/fault_files.sh.
tests_ckpt_craft_SOURCES = tests/ckpt_craft.c
tests_ckpt_craft_LDADD = libtrainer.a libobs.a $(SHMDDP_LIBS)
# A checkpoint's step and run record, and whether two hold the same training state (the shell
# tests of resuming and restarting).
check_PROGRAMS += tests/ckpt_look
tests_ckpt_look_SOURCES = tests/ckpt_look.c
tests_ckpt_look_LDADD = libtrainer.a libobs.a $(SHMDDP_LIBS)

# ---- dev/: the step account's FLOP and byte arithmetic against hand-worked layers ----
check_PROGRAMS += tests/check_account
TESTS += tests/check_account
tests_check_account_SOURCES = tests/check_account.c dev/step_account.c dev/step_account.h \
	tests/json_mini.c tests/json_mini.h
tests_check_account_CFLAGS = $(TEST_CFLAGS)
tests_check_account_LDADD = libobs.a $(TEST_LIBS) -lm
else
TESTS += tests/no-check.sh
endif
# Stand-ins for a broken CUDA ops module: needs-missing.so needs libcudnn.so.999, which exists
# only for its link; other-build.so is a module whose table names another build.
OPS_MODULE_FAKES = tests/fake_ops/needs-missing.so tests/fake_ops/other-build.so
CLEANFILES += $(OPS_MODULE_FAKES) tests/fake_ops/libcudnn.so.999
EXTRA_DIST += tests/ops_module_fake.c tests/startup_libs.sh
tests/fake_ops/needs-missing.so:
	$(AM_V_GEN)$(MKDIR_P) tests/fake_ops && \
	$(CC) -shared -fPIC -Wl,-soname,libcudnn.so.999 -o tests/fake_ops/libcudnn.so.999 -x c /dev/null && \
	$(CC) -shared -fPIC -o $@ -x c /dev/null -x none -Wl,--no-as-needed tests/fake_ops/libcudnn.so.999 && \
	rm -f tests/fake_ops/libcudnn.so.999
tests/fake_ops/other-build.so: $(srcdir)/tests/ops_module_fake.c $(srcdir)/kernels/ops_cuda_module.h \
		$(srcdir)/kernels/ops.h
	$(AM_V_GEN)$(MKDIR_P) tests/fake_ops && \
	$(CC) $(DEFAULT_INCLUDES) $(AM_CPPFLAGS) $(CPPFLAGS) -shared -fPIC -o $@ \
		$(srcdir)/tests/ops_module_fake.c
EXTRA_DIST += tests/resume_prepad.sh tests/data/prepad_step6.ckpt.b64 \
	tests/data/prepad_result.txt
EXTRA_DIST += tests/check_report.sh tests/report_hostile.sh tests/hostile_run.py \
	tests/report_browser.sh tests/report_fuzz.sh tests/resume.sh tests/resume_gpu.sh tests/kill_rank.sh \
	tests/fault_kill.sh tests/fault_env.sh tests/fault_ckpt.sh tests/fault_files.sh \
	tests/fault_signal.sh tests/readme_env.sh tests/env_table.sh tests/nccl_exports.sh \
	tests/nccl_run.sh tests/check_cuda_collectives.c tests/check_join_cuda.c \
	tests/check_ops_cuda.c tests/check_model_cuda.c tests/ops_cuda_testutil.h \
	tests/check_devmem_cuda.c

# The environment table of docs/environment.md is shm/env.c's: tests/readme_env.sh compares
# them, and make readme-env rewrites the page's from the code.
.PHONY: readme-env
readme-env: shmddp-train$(EXEEXT)
	$(AM_V_GEN)./shmddp-train$(EXEEXT) --help-env=markdown > environment.env.tmp && \
	sed -e '/^<!-- help-env: /,/^<!-- help-env end -->/{/^<!--/!d;}' \
	    -e '/^<!-- help-env: /r environment.env.tmp' $(srcdir)/docs/environment.md \
	    > environment.md.tmp && \
	mv environment.md.tmp $(srcdir)/docs/environment.md && rm -f environment.env.tmp

# make fuzz-segment [FUZZ_SECONDS=60]: build the libFuzzer harness of the segment header a joiner
# reads (tests/fuzz/fuzz_segment.c, with clang's ASan and UBSan) and run it from the kept inputs;
# a note, not a failure, where clang is missing. Other targets: tests/fuzz/run.sh TARGET SECONDS.
FUZZ_SECONDS ?= 60
.PHONY: fuzz-segment
fuzz-segment:
	@if command -v clang >/dev/null 2>&1; then \
	  FUZZ_CONFIG_DIR=$(abs_top_builddir) $(srcdir)/tests/fuzz/run.sh segment $(FUZZ_SECONDS); \
	else echo "fuzz-segment: clang is not installed (apt-get install clang libclang-rt-14-dev)"; fi

# ---- without Check: a build leaves `git status` clean (.gitignore covers every file the
# makefiles build, in every configuration; SKIP outside a git checkout) ----
TESTS += tests/gitignore.sh
EXTRA_DIST += tests/gitignore.sh
# ---- without Check: the Hopper convolution kernels' barrier protocols, modelled in python3 and
# walked in random interleavings (dev/conv_sm90_*_protocol.py; SKIP without python3) ----
TESTS += tests/conv_sm90_protocol.sh
EXTRA_DIST += tests/conv_sm90_protocol.sh
# the few-channel kernels' lane arithmetic (dev/conv_rgb_lanes.py)
TESTS += tests/conv_rgb_lanes.sh
EXTRA_DIST += tests/conv_rgb_lanes.sh
# ---- without Check: bench/tree_name.sh names a record's tree by its files (SKIP without git) ----
TESTS += tests/tree_name.sh
EXTRA_DIST += tests/tree_name.sh

# ---- without Check: PyTorch as the oracle of one CPU training step (SKIP where python3 cannot
# import torch), and across nodes over MPI (SKIP in a build without MPI) ----
TESTS += tests/torch_oracle.sh tests/mpi.sh
EXTRA_DIST += tests/torch_oracle.sh tests/mpi.sh
# The PyTorch soak of the NCCL front end: its checks (bench/torch_soak.py) on the CPU with gloo,
# correct results passed and corrupted ones counted (SKIP where python3 cannot import torch); its
# GPU runner (bench/torch_soak.sh) over stand-ins for the GPU machine's programs.
TESTS += tests/torch_soak_cpu.sh tests/torch_soak_runner.sh
EXTRA_DIST += tests/torch_soak_cpu.sh tests/torch_soak_runner.sh
if HAVE_MPI
check_PROGRAMS += tests/mpi_ddp
tests_mpi_ddp_SOURCES = tests/mpi_ddp.c tests/parallel_fixture.h
tests_mpi_ddp_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
tests_mpi_ddp_LDADD = libworld_mpi.a $(PARALLEL_LIBS) $(SHMDDP_LIBS) $(MPI_LIBS)
endif

# Ranks that share a GPU, on the CPU: the placement and the event protocol over simulated
# events (collectives/coloc/coloc.h); a SIGKILLed co-located rank on a GPU (SKIP without one).
if HAVE_CHECK
check_PROGRAMS += tests/check_coloc
TESTS += tests/check_coloc
tests_check_coloc_SOURCES = tests/check_coloc.c tests/failures.h tests/testutil.h
tests_check_coloc_CFLAGS = $(TEST_CFLAGS)
tests_check_coloc_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
endif
TESTS += tests/kill_rank_gpu.sh
EXTRA_DIST += tests/kill_rank_gpu.sh tests/check_coloc_cuda.c

# Sharing device buffers between ranks (collectives/devmem/devmem.h, shm/fdpass.h) on a fake
# driver.
if HAVE_CHECK
check_PROGRAMS += tests/check_devmem
TESTS += tests/check_devmem
tests_check_devmem_SOURCES = tests/check_devmem.c tests/devmem_fake.h
tests_check_devmem_CFLAGS = $(TEST_CFLAGS)
tests_check_devmem_LDADD = $(SHMDDP_LIBS) $(TEST_LIBS)
endif
