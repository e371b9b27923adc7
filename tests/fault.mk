# tests/fault.mk: reliability — replay of the fuzzers' kept inputs, and the
# fault-injection scripts (SIGKILL/SIGSTOP of ranks, /dev/shm, segments, checkpoints) on CPU ranks.
if HAVE_CHECK
check_PROGRAMS += tests/check_fuzz_regress
TESTS += tests/check_fuzz_regress tests/fault_kill.sh tests/fault_env.sh tests/fault_ckpt.sh
tests_check_fuzz_regress_SOURCES = tests/check_fuzz_regress.c tests/fuzz/cli_input.h \
	tests/fuzz/png_input.h
tests_check_fuzz_regress_CFLAGS = $(TEST_CFLAGS) $(PNG_CFLAGS)
tests_check_fuzz_regress_LDADD = $(TRAINER_TEST_LIBS)
endif
EXTRA_DIST += tests/fault_kill.sh tests/fault_env.sh tests/fault_ckpt.sh tests/fault_lib.sh
