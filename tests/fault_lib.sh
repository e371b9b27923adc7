# fault_lib.sh — what the fault-injection scripts share (tests/fault_*.sh), sourced by them:
# start a CPU training run, find its ranks, hit one, and check how the run ended.
# FAULT_SEED reproduces a run's random choices (default: the clock; each script prints the seed
# it used);
# FAULT_DEVICE=cuda runs the ranks on GPUs (by hand on the GPU machine; CI uses CPU ranks),
# FAULT_NPROC_MAX caps the world size (default 3; at most the GPUs there are).
# Faults are placed by events (a step printed, a file written, a rank asleep in a collective:
# tests/wait_lib.sh), never by time: runs print every step (--log-every 1), and a random moment
# is a random step.
. "${srcdir:-.}/tests/lib.sh"
. "${srcdir:-.}/tests/wait_lib.sh"
FAULT_SEED=${FAULT_SEED:-$(date +%s)}
train=${top_builddir:-.}/shmddp-train
FAULT_DEVICE=${FAULT_DEVICE:-cpu}
FAULT_NPROC_MAX=${FAULT_NPROC_MAX:-3}
SHORT="--device $FAULT_DEVICE --widths tiny --image-size 32 --train-size 64 --val-size 8 --batch-size 4 --log-every 1"
[ "$FAULT_DEVICE" = cpu ] || SHORT="$SHORT --precision fp32"
fails=0
# These scripts test how processes end, not leaks (the Check suites do that); under
# --enable-sanitizers LeakSanitizer would also abort every run traced by strace (ptrace).
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# rand N: sets R to a number 0..N-1 from the script's seeded stream (an LCG, so it is the same
# on every platform; not printed, since $(...) would run it in a subshell and lose the state).
rand_state=
rand() {
  [ -n "$rand_state" ] || rand_state=$((FAULT_SEED % 2147483648))
  rand_state=$(((rand_state * 1103515245 + 12345) % 2147483648))
  R=$(((rand_state / 65536) % $1))
}

# start LOG ARGS...: run train in the background; sets $launcher.
start() {
  log=$1; shift
  "$train" "$@" > "$log" 2>&1 &
  launcher=$!
}

# ranks N: wait until the launcher has N children (or has ended); prints their pids in rank
# order (the order of the forks: ascending, unless the pids wrapped around pid_max in between).
_have_ranks() { [ "$(pgrep -P "$launcher" | wc -l)" -ge "$1" ] || ! alive "$launcher"; }
ranks() {
  pmax=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
  wait_for _have_ranks "$1" || return 1
  r=$(pgrep -P "$launcher" | sort -n | awk -v h=$((pmax / 2)) '
    { p[NR] = $1 } END { w = p[NR] - p[1] > h
      for (i = 1; i <= NR; i++) if (!w || p[i] > h) printf "%s ", p[i]
      if (w) for (i = 1; i <= NR; i++) if (p[i] <= h) printf "%s ", p[i] }')
  [ "$(echo $r | wc -w)" -eq "$1" ] || return 1
  echo $r
}

# in_collective VICTIM: waits until VICTIM sleeps inside a collective (tests/wait_lib.sh);
# says so when that cannot be seen here. 1 when it never did.
in_collective() {
  wait_in_shm_wait "$1"
  case $? in
    0) return 0 ;;
    2) echo "note: /proc/$1/syscall is not readable: the kill cannot be placed inside a collective"
       return 0 ;;
  esac
  return 1
}

# no_segment PID: nothing of launcher PID left in /dev/shm.
no_segment() { ! ls /dev/shm 2>/dev/null | grep -q "^shmddp-$1-"; }
