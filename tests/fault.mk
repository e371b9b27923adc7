# tests/fault.mk: reliability — replay of the fuzzers' kept inputs, and the
# fault-injection scripts (SIGKILL/SIGSTOP of ranks, /dev/shm, segments, checkpoints) on CPU ranks.
if HAVE_CHECK
check_PROGRAMS += tests/check_fuzz_regress tests/ckpt_craft
TESTS += tests/check_fuzz_regress tests/fault_kill.sh tests/fault_env.sh tests/fault_ckpt.sh \
	tests/fault_files.sh tests/fault_signal.sh
tests_check_fuzz_regress_SOURCES = tests/check_fuzz_regress.c tests/fuzz/cli_input.h \
	tests/fuzz/png_input.h tests/fuzz/segment_input.h
tests_check_fuzz_regress_CFLAGS = $(TEST_CFLAGS) $(PNG_CFLAGS)
tests_check_fuzz_regress_LDADD = $(TRAINER_TEST_LIBS)
# Damaged checkpoints for tests/fault_files.sh.
tests_ckpt_craft_SOURCES = tests/ckpt_craft.c
tests_ckpt_craft_LDADD = libtrainer.a libobs.a $(SHMDDP_LIBS)
endif
EXTRA_DIST += tests/fault_kill.sh tests/fault_env.sh tests/fault_ckpt.sh tests/fault_lib.sh \
	tests/fault_files.sh tests/fault_signal.sh

# make fuzz-segment [FUZZ_SECONDS=60]: build the libFuzzer harness of the segment header a joiner
# reads (tests/fuzz/fuzz_segment.c, with clang's ASan and UBSan) and run it from the kept inputs;
# a note, not a failure, where clang is missing. Other targets: tests/fuzz/run.sh TARGET SECONDS.
FUZZ_SECONDS ?= 60
.PHONY: fuzz-segment
fuzz-segment:
	@if command -v clang >/dev/null 2>&1; then \
	  FUZZ_CONFIG_DIR=$(abs_top_builddir) $(srcdir)/tests/fuzz/run.sh segment $(FUZZ_SECONDS); \
	else echo "fuzz-segment: clang is not installed (apt-get install clang libclang-rt-14-dev)"; fi
