#!/usr/bin/env bash
# bench/run_trust_gpu.sh OUTDIR — the trust-boundary changes on the GPU machine (a configured
# CUDA build in the tree root; builds nothing). Each part is time-bounded and the script goes on
# after a failure; a summary line per part at the end, details in OUTDIR/*.log. The bounds add
# up to 4 minutes; expected well under 2.
#   1. joined groups with GPUs (tests/check_join_cuda) and the CUDA collectives suite
#   2. the host-staged transport, whose shared memory is now an unnamed, reserved, checked file:
#      2 ranks forced onto it (SHMDDP_CUDA_P2P=0, -a staged), every result checked, over the
#      join-by-id path too; afterwards nothing named shmddp-* is left in /dev/shm
#   3. a bad CUDA-transport setting (SHMDDP_CUDA_TS_BLOCKS=999) is refused with its range
#   4. GPU checkpoints resume bit-identically (tests/resume_gpu.sh: the loader's new checks);
#      timeout -s TERM on a GPU run leaves a checkpoint (tests/fault_signal.sh, FAULT_DEVICE=cuda)
set -u
out=${1:?usage: bench/run_trust_gpu.sh OUTDIR}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export top_builddir=. srcdir=.
summary=()
part() { # NAME LIMIT_S COMMAND...: run, log, record PASS/FAIL/SKIP
  name=$1 limit=$2; shift 2
  timeout -s TERM -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  case $rc in 0) r=PASS ;; 77) r=SKIP ;; 124) r="FAIL (over ${limit} s)" ;; *) r="FAIL (exit $rc)" ;; esac
  summary+=("$name: $r")
}
before=$(ls /dev/shm | grep -c '^shmddp' || true)
part check_join_cuda 150 tests/check_join_cuda
part check_cuda_collectives 120 tests/check_cuda_collectives
B="./tools/allreduce_bench --device cuda -p 2 -b 8 -e 16M -f 8 -n 5 -w 2 -c 1"
part staged_forked 25 env SHMDDP_CUDA_P2P=0 $B -a staged
part staged_joined 25 env SHMDDP_CUDA_P2P=0 $B -a staged --join
after=$(ls /dev/shm | grep -c '^shmddp' || true)
if [ "$after" -le "$before" ]; then summary+=("dev_shm_clean: PASS ($after shmddp entries, $before before)")
else summary+=("dev_shm_clean: FAIL ($after shmddp entries, $before before: $(ls /dev/shm | grep '^shmddp' | tr '\n' ' '))"); fi
SHMDDP_CUDA_TS_BLOCKS=999 timeout 20 $B -e 64K > "$out/bad_env.log" 2>&1
if grep -q "SHMDDP_CUDA_TS_BLOCKS=999 is out of range: it takes a whole number from 1 to 128" "$out/bad_env.log"
then summary+=("bad_env_refused: PASS"); else summary+=("bad_env_refused: FAIL (see bad_env.log)"); fi
part resume_gpu 45 tests/resume_gpu.sh
part timeout_term_gpu 30 env FAULT_DEVICE=cuda tests/fault_signal.sh
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
