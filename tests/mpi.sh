#!/bin/sh
# mpi.sh — the trainer across nodes over MPI, on this machine: 4 MPI ranks as 2 simulated nodes
# of 2 CPU ranks (--ranks-per-node 2: ranks 0,1 are node 0, ranks 2,3 node 1).
#  1. tests/mpi_ddp: the world's all-reduce against f64; the DDP engine over the hierarchical
#     world equals one rank on the 4x batch (GroupNorm; BatchNorm + SyncBN; 2 micro-batches) to
#     check_ddp's tolerance, the same bits on every rank and on a rerun.
#  2. shmddp-train under mpirun trains as the forked launcher's 4 ranks on one node: the same
#     losses, validation and step count.
#     The mpirun line of docs/multi-node.md (<!-- mpi-command -->) runs as written, as root too.
#  3. A SIGKILLed MPI rank (node 1's first rank, then node 0's second) ends the whole job within
#     5 s, non-zero, the rank named (by mpirun: "process rank R ... exited on signal 9", or by
#     its node peer: "rank l (pid P) was killed"), no rank left running, and nothing in /dev/shm
#     of the segments the job's ranks had mapped.
# SKIP (77) in a build without MPI (configure found no mpicc) or without mpirun. Waits are for
# events (a step printed, the job's end), never for a fixed time (tests/wait_lib.sh).
set -u
. "${srcdir:-.}/tests/wait_lib.sh"
top=${top_builddir:-.}
[ -x "$top/tests/mpi_ddp" ] || { echo "SKIP: built without MPI (configure --with-mpi, Open MPI installed)"; exit 77; }
command -v mpirun > /dev/null 2>&1 || { echo "SKIP: mpirun not found"; exit 77; }
# CI runs as root, which Open MPI refuses without these two switches.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Leak reports of Open MPI's own allocations are not ours to fix (see .ci/run).
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
# 4 ranks on CI's 2 cores: --oversubscribe (Open MPI then yields the CPU while it waits).
MPIRUN="mpirun -np 4 --oversubscribe"
train=$top/shmddp-train
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

echo "== 1. the DDP engine over 2 nodes x 2 ranks against one rank"
$MPIRUN "$top/tests/mpi_ddp" --ranks-per-node 2 || bad "tests/mpi_ddp (above)"

echo "== 2. shmddp-train under mpirun against the launcher's 4 ranks on one node"
ARGS="--device cpu --widths tiny --image-size 32 --batch-size 2 --steps 6 --epochs 1
  --train-size 64 --val-size 16 --workers 0 --log-every 1"
# shellcheck disable=SC2086
$MPIRUN "$train" $ARGS --ranks-per-node 2 --out "$tmp/mpi" > "$tmp/mpi.log" 2>&1 ||
  { bad "mpirun shmddp-train failed"; cat "$tmp/mpi.log"; }
# shellcheck disable=SC2086
"$train" $ARGS --nproc 4 --out "$tmp/one" > "$tmp/one.log" 2>&1 ||
  { bad "shmddp-train --nproc 4 failed"; cat "$tmp/one.log"; }
grep -q "2 nodes x 2 ranks over MPI" "$tmp/mpi.log" || bad "the log does not say 2 nodes x 2 ranks"
# The result lines without the timings: the same steps, losses, validation.
result() { grep '^result:' "$1" | tr ' ' '\n' | grep -E '^(steps|train_loss|val_loss|val_miou|val_acc|initial_loss|world)='; }
result "$tmp/mpi.log" > "$tmp/mpi.res"
result "$tmp/one.log" > "$tmp/one.res"
if [ -s "$tmp/mpi.res" ] && cmp -s "$tmp/mpi.res" "$tmp/one.res"; then
  echo "ok: the same result: $(tr '\n' ' ' < "$tmp/mpi.res")"
else
  bad "results differ: mpirun: $(tr '\n' ' ' < "$tmp/mpi.res") / launcher: $(tr '\n' ' ' < "$tmp/one.res")"
fi

echo "== 2b. docs/multi-node.md's mpirun line, as written (as root without the environment switches)"
line=$(sed -n '/<!-- mpi-command -->/,/^```$/p' "${srcdir:-.}/docs/multi-node.md" | sed -n '/^```sh$/,/^```$/p' | sed '1d;$d')
case $line in
  mpirun*" ./shmddp-train "*)
    cmd=$(printf '%s' "$line" | sed "s|\./shmddp-train|$train|")
    # shellcheck disable=SC2086
    (unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM; eval "$cmd \$ARGS --out \"\$tmp/readme\"") \
      > "$tmp/readme.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q "2 nodes x 2 ranks over MPI" "$tmp/readme.log"; then
      echo "ok: $line (and this test's short settings)"
    else
      bad "docs/multi-node.md's line failed (exit $rc): $line"; tail -8 "$tmp/readme.log"
    fi ;;
  *) bad "docs/multi-node.md: no mpirun line running ./shmddp-train after <!-- mpi-command -->" ;;
esac

echo "== 3. a SIGKILLed MPI rank ends the job"
# rank_pid R: the pid of MPI rank R among mpirun's children (from its environment).
rank_pid() {
  for p in $(pgrep -P "$job"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return 0; }
  done
  return 1
}
four_ranks() { [ "$(pgrep -P "$job" | wc -l)" -ge 4 ] || ! alive "$job"; }
for trial in "2 3" "1 5"; do
  set -- $trial
  victim_rank=$1 step=$2
  # shellcheck disable=SC2086
  $MPIRUN "$train" $ARGS --ranks-per-node 2 --steps 100000 --epochs 100000 --out "$tmp/kill$victim_rank" \
    > "$tmp/kill.log" 2>&1 &
  job=$!
  wait_for four_ranks
  pids=$(pgrep -P "$job" | tr '\n' ' ')
  if ! wait_step "$tmp/kill.log" "$step" "$job"; then
    bad "rank $victim_rank: step $step never came"; cat "$tmp/kill.log"; kill -9 "$job"; wait "$job"; continue
  fi
  victim=$(rank_pid "$victim_rank") || { bad "MPI rank $victim_rank not found"; kill -9 "$job"; wait "$job"; continue; }
  # the segments the job's ranks map (already unlinked: "(deleted)")
  segs=$(for p in $pids; do grep -o '/dev/shm/shmddp-[^ ]*' "/proc/$p/maps" 2>/dev/null; done | sort -u)
  t0=$(now_ms)
  kill -9 "$victim"
  wait "$job"
  rc=$?
  ms=$(($(now_ms) - t0))
  name="MPI rank $victim_rank (pid $victim) killed after step $step"
  f=$fails
  [ "$rc" -ne 0 ] || bad "$name: exit status 0"
  [ "$ms" -lt 5000 ] || bad "$name: the job took $ms ms to end"
  grep -Eq "process rank $victim_rank with PID .* exited on signal 9|\(pid $victim\) was killed by signal 9" "$tmp/kill.log" ||
    bad "$name: no message names it"
  # mpirun can return while its daemon is still reaping the ranks: wait (bounded) for them to end.
  wait_for -t 10 gone $pids || for p in $pids; do alive "$p" && bad "$name: rank pid $p still runs 10 s after the job ended"; done
  [ -n "$segs" ] || bad "$name: no shmddp segment seen in the ranks' maps"
  for s in $segs; do [ ! -e "$s" ] || bad "$name: $s is left in /dev/shm"; done
  echo "$name: job exit $rc after $ms ms; $(echo $segs | wc -w) segment(s) mapped, none left"
  [ $f -eq $fails ] || tail -20 "$tmp/kill.log"
  grep -E "signal 9|was killed" "$tmp/kill.log" | head -3
done
[ $fails -eq 0 ] && echo "mpi.sh: all passed"
[ $fails -eq 0 ]
