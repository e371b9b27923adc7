# wait_lib.sh — waiting for events in the shell tests, sourced by them (tests/fault_lib.sh,
# tests/resume.sh, tests/kill_rank.sh).
#
# The tests wait for events — a line in a log, a file, a process's state — never for a fixed
# time, so that a loaded machine makes them slower, not wrong. Every wait has a limit, which only
# bounds a hang (generous: 120 s by default, WAIT_LIMIT overrides it).
WAIT_LIMIT=${WAIT_LIMIT:-120}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# alive PID: the process exists and is not a zombie.
alive() {
  st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  case $st in Z*) return 1 ;; esac
  return 0
}

# gone PID...: true when none of the processes exists any more (zombies count as gone).
gone() {
  for p in "$@"; do
    st=$(ps -o stat= -p "$p" 2>/dev/null) || continue
    case $st in Z*) ;; *) return 1 ;; esac
  done
  return 0
}

# wait_for [-t SECONDS] CMD...: runs CMD every 20 ms until it succeeds (0), or SECONDS
# (default WAIT_LIMIT) have passed (1).
wait_for() {
  limit=$WAIT_LIMIT
  [ "$1" = -t ] && { limit=$2; shift 2; }
  end=$(($(now_ms) + limit * 1000))
  while ! "$@"; do
    [ "$(now_ms)" -lt "$end" ] || return 1
    sleep 0.02
  done
  return 0
}

# has_line FILE ERE: FILE has a line matching ERE.
has_line() { grep -Eq -- "$2" "$1" 2>/dev/null; }

# wait_line FILE ERE [PID]: waits until FILE has a line matching ERE; 1 when PID (if given)
# ended first, or the limit passed.
wait_line() {
  wait_for _line_or_end "$1" "$2" "${3:-}" && has_line "$1" "$2"
}
_line_or_end() { has_line "$1" "$2" || { [ -n "$3" ] && ! alive "$3"; }; }

# wait_step LOG K [PID]: waits until rank 0 has printed step K in LOG (runs with --log-every 1
# print every step: "epoch E/N step K/T ..."); 1 when PID ended first.
wait_step() { wait_line "$1" " step $2/" "${3:-}"; }

# in_shm_wait PID: the process's main thread sleeps in a system call on an address inside its
# shmddp segment: the futex wait of a collective, a barrier or another wait of the group
# (shm/wait.c). Read from /proc/PID/syscall (the call's number and arguments; needs the right to
# trace PID) and /proc/PID/maps (the segment's mapping, "/dev/shm/shmddp-... (deleted)").
# Returns 2 when /proc/PID/syscall cannot be read.
in_shm_wait() {
  sc=$(cat "/proc/$1/syscall" 2>/dev/null) || return 2
  [ -n "$sc" ] || return 2
  # shellcheck disable=SC2086
  set -- "$1" $sc
  [ $# -ge 3 ] || return 1 # "running", or "-1 sp pc" (blocked, not in a system call)
  case $3 in 0x*) ;; *) return 1 ;; esac
  addr=$(($3))
  while read -r range _ _ _ _ _map_path _; do
    case $_map_path in
      /dev/shm/shmddp-*)
        lo=$((0x${range%-*}))
        hi=$((0x${range#*-}))
        [ "$addr" -ge "$lo" ] && [ "$addr" -lt "$hi" ] && return 0 ;;
    esac
  done < "/proc/$1/maps"
  return 1
}

# wait_in_shm_wait PID: waits until PID sleeps in a wait of its group (in_shm_wait). Returns 0
# when seen, 2 when it cannot be seen here (no access to /proc/PID/syscall: the caller goes on
# without the proof and says so), 1 when PID ended or the limit passed. The sighting is kept, not
# checked again: between two of its bounded futex sleeps (50 ms) a waiting rank is briefly
# "running", and a second look could fall there.
wait_in_shm_wait() {
  in_shm_wait "$1"
  _seen=$?
  [ $_seen -eq 1 ] || return $_seen
  wait_for _shm_wait_or_end "$1"
  return $_seen
}
_shm_wait_or_end() {
  in_shm_wait "$1" && { _seen=0; return 0; }
  ! alive "$1"
}
