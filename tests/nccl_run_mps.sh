#!/bin/sh
# nccl_run_mps.sh — shmddp-nccl-run --mps around a command, over tests/fake_mps_control (on PATH
# under the real program's name) and a stand-in python3 for its CUDA check (no GPU needed): the
# command sees the daemon's variables and its control pipe and keeps its exit status; a daemon
# that cannot start, or a failed check, refuses (exit 2) before the command runs; SIGTERM while
# the command runs still stops the daemon; an MPS already in effect is used as it is. After each:
# no daemon, no folder.
set -u
srcdir=${srcdir:-.}
s=$(mktemp -d /tmp/nccl_run_mps_XXXXXX)
trap 'rm -rf "$s"' EXIT
mkdir "$s/bin" "$s/base"
sed -e "s|@libdir[@]|$s|g" "$srcdir/nccl/shmddp-nccl-run.in" > "$s/run"
chmod +x "$s/run"
: > "$s/libshmddp-nccl.so.0" # readable; preloading it fails harmlessly (ld.so says so on stderr)
ln -s "$(cd "$srcdir/tests" && pwd)/fake_mps_control" "$s/bin/nvidia-cuda-mps-control"
cat > "$s/bin/python3" << 'EOF'
#!/bin/sh
# The CUDA check's stand-in: passes when the daemon's control pipe is where the environment says.
cat > /dev/null
[ -p "${CUDA_MPS_PIPE_DIRECTORY:-}/control" ] || { echo "no daemon" >&2; exit 1; }
[ "${FAKE_PROBE:-}" = fail ] && { echo "driver refused" >&2; exit 1; }
exit 0
EOF
chmod +x "$s/bin/python3"
PATH="$s/bin:$PATH" XDG_RUNTIME_DIR="$s/base" FAKE_MPS_PIDFILE="$s/pid" FAKE_MPS_LOG="$s/log"
export PATH XDG_RUNTIME_DIR FAKE_MPS_PIDFILE FAKE_MPS_LOG
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY FAKE_MPS_MODE FAKE_PROBE
fail=0
bad() {
  echo "FAIL: $*"
  sed 's/^/  stderr: /' "$s/err" 2> /dev/null
  fail=1
}
# Nothing left: no folder in the base, no daemon.
left() {
  [ -z "$(ls -A "$s/base")" ] || bad "$1: left in the base folder: $(ls -A "$s/base")"
  if [ -s "$s/pid" ] && kill -0 "$(cat "$s/pid")" 2> /dev/null; then
    bad "$1: the daemon still runs"
    kill "$(cat "$s/pid")"
  fi
  rm -f "$s/pid" "$s/log" "$s/ran" "$s/started"
}

"$s/run" --mps sh -c '[ -p "$CUDA_MPS_PIPE_DIRECTORY/control" ] && [ -d "$CUDA_MPS_LOG_DIRECTORY" ] && exit 7' 2> "$s/err"
rc=$?
[ $rc = 7 ] || bad "run: status $rc, not the command's 7"
grep -q "MPS: private daemon" "$s/err" || bad "run: no start line"
grep -qx quit "$s/log" 2> /dev/null || bad "run: the daemon was not told to quit"
[ -s "$s/pid" ] || bad "run: no daemon ran"
left run

FAKE_MPS_MODE=fail "$s/run" --mps touch "$s/ran" 2> "$s/err"
rc=$?
[ $rc = 2 ] || bad "daemon fails: status $rc, not 2"
[ ! -e "$s/ran" ] || bad "daemon fails: the command ran"
grep -q "cannot start, as asked" "$s/err" || bad "daemon fails: the daemon's reason is not said"
left "daemon fails"

FAKE_PROBE=fail "$s/run" --mps touch "$s/ran" 2> "$s/err"
rc=$?
[ $rc = 2 ] || bad "check fails: status $rc, not 2"
[ ! -e "$s/ran" ] || bad "check fails: the command ran"
grep -q "driver refused" "$s/err" || bad "check fails: the reason is not said"
grep -qx quit "$s/log" 2> /dev/null || bad "check fails: the daemon was not told to quit"
left "check fails"

# SIGTERM to the wrapper's process group while the command runs.
setsid "$s/run" --mps sh -c 'echo > "$0"; while :; do sleep 0.1; done' "$s/started" 2> "$s/err" &
pid=$!
i=0
while [ ! -e "$s/started" ] && [ $i -lt 600 ]; do # the command has started (at most 30 s)
  sleep 0.05
  i=$((i + 1))
done
[ -e "$s/started" ] || bad "signal: the command never started"
kill -s TERM -- "-$pid"
wait $pid
rc=$?
[ $rc != 0 ] || bad "signal: status 0 after SIGTERM"
grep -qx quit "$s/log" 2> /dev/null || bad "signal: the daemon was not told to quit"
left signal

CUDA_MPS_PIPE_DIRECTORY="$s/theirs" "$s/run" --mps sh -c '[ "$CUDA_MPS_PIPE_DIRECTORY" = "$0" ]' "$s/theirs" 2> "$s/err"
rc=$?
[ $rc = 0 ] || bad "in effect: the command did not run under the user's own MPS"
[ ! -e "$s/pid" ] || bad "in effect: a daemon was started anyway"
left "in effect"

"$s/run" --help 2>&1 | grep -q -- "--mps" || bad "--help does not describe --mps"
[ $fail = 0 ] && echo "PASS: shmddp-nccl-run --mps starts, checks, stops and removes its daemon"
exit $fail
