#!/bin/sh
# nccl_run_mps.sh — shmddp-nccl-run and MPS, over tests/fake_mps_control (on PATH under the real
# program's name) and stand-ins for python3 (its GPU reads: FAKE_GPUS "COUNT MODE...", and its
# CUDA check) and torchrun (which runs its command once): no GPU needed.
#   - ranks that share a GPU (torchrun --nproc-per-node above the GPUs) get a private daemon by
#     default; ranks alone on GPUs, --no-mps, a compute mode other than Default, a command whose
#     ranks cannot be told, get none, and the line on stderr says why; --mps forces it and
#     refuses where it cannot serve (exit 2, before the command runs);
#   - the command keeps its exit status; SIGTERM and SIGKILL of the wrapper still stop the
#     daemon (the wait for SIGKILL's teardown is on a pipe that every process of the run holds);
#   - LD_PRELOAD reaches the command only, never the daemon or the checks; a library path with a
#     space or a colon is refused;
#   - an MPS folder that is not the user's alone is refused (named by the environment) or not
#     used (the default one, which the command is then pointed away from); another uid's only
#     as root (chown), said as SKIP otherwise;
#   - a run removes folders of earlier runs that no process holds, and only those.
# After each: no daemon, no folder.
set -u
srcdir=${srcdir:-.}
s=$(mktemp -d /tmp/nccl_run_mps_XXXXXX)
trap 'rm -rf "$s"' EXIT
mkdir "$s/bin" "$s/base"
sed -e "s|@libdir[@]|$s|g" -e "s|@mps_pipe_dir[@]|$s/default|g" -e "s|@version[@]|test|g" \
  "$srcdir/nccl/shmddp-nccl-run.in" > "$s/run"
chmod +x "$s/run"
lib="$s/libshmddp-nccl.so.0"
: > "$lib" # readable; preloading it fails harmlessly (ld.so says so on stderr)
ln -s "$(cd "$srcdir/tests" && pwd)/fake_mps_control" "$s/bin/nvidia-cuda-mps-control"
cat > "$s/bin/python3" << 'EOF'
#!/bin/sh
# python3's stand-in for the wrapper's two scripts: "- gpus" prints FAKE_GPUS (default: one GPU,
# compute mode Default); "- probe" passes when the daemon's control pipe is where the
# environment says. Each start is logged (its LD_PRELOAD) as the fake daemon's are.
cat > /dev/null
[ -n "${FAKE_MPS_ENV:-}" ] && echo "preload=${LD_PRELOAD:-}" >> "$FAKE_MPS_ENV"
case ${2:-} in
gpus) echo "${FAKE_GPUS:-1 0}" ;;
probe)
  [ -p "${CUDA_MPS_PIPE_DIRECTORY:-}/control" ] || { echo "no daemon" >&2; exit 1; }
  [ "${FAKE_PROBE:-}" = fail ] && { echo "driver refused" >&2; exit 1; }
  ;;
*) exit 9 ;;
esac
exit 0
EOF
cat > "$s/bin/torchrun" << 'EOF'
#!/bin/sh
# torchrun's stand-in: its options, then the command it would run in every worker (here once).
while [ $# -gt 0 ]; do
  case $1 in --*=*) shift ;; --*) shift 2 ;; *) break ;; esac
done
exec "$@"
EOF
chmod +x "$s/bin/python3" "$s/bin/torchrun"
PATH="$s/bin:$PATH" XDG_RUNTIME_DIR="$s/base" FAKE_MPS_PIDFILE="$s/pid" FAKE_MPS_LOG="$s/log"
FAKE_MPS_ENV="$s/env"
export PATH XDG_RUNTIME_DIR FAKE_MPS_PIDFILE FAKE_MPS_LOG FAKE_MPS_ENV
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY FAKE_MPS_MODE FAKE_PROBE FAKE_GPUS LD_PRELOAD
fail=0
bad() {
  echo "FAIL: $*"
  sed 's/^/  stderr: /' "$s/err" 2> /dev/null
  fail=1
}
# Nothing left: no folder in the base, no daemon; and no process but the command had the preload.
left() {
  [ -z "$(ls -A "$s/base")" ] || bad "$1: left in the base folder: $(ls -A "$s/base")"
  if [ -s "$s/pid" ] && kill -0 "$(cat "$s/pid")" 2> /dev/null &&
    [ "$(sed 's/.*) //' "/proc/$(cat "$s/pid")/stat" 2> /dev/null | cut -c1)" != Z ]; then
    bad "$1: the daemon still runs"
    kill "$(cat "$s/pid")"
  fi
  ! grep -q libshmddp-nccl "$s/env" 2> /dev/null || bad "$1: the daemon or a check ran with the preload: $(cat "$s/env")"
  rm -f "$s/pid" "$s/log" "$s/ran" "$s/started" "$s/env" "$s/preload"
}
no_daemon() { [ ! -e "$s/pid" ] || bad "$1: a daemon was started"; }
says() { grep -q -- "$2" "$s/err" || bad "$1: stderr does not say '$2'"; }
# refused NAME SAYS: the run (its status in $rc) was refused, status 2, before the command ran.
refused() {
  [ $rc = 2 ] || bad "$1: status $rc, not 2"
  [ ! -e "$s/ran" ] || bad "$1: the command ran"
  says "$1" "$2"
}
as_root() { [ "$(id -u)" = 0 ]; }

# --mps: a daemon; the command sees it, gets the preload, keeps its status.
"$s/run" --mps sh -c '[ -p "$CUDA_MPS_PIPE_DIRECTORY/control" ] && [ -d "$CUDA_MPS_LOG_DIRECTORY" ] && printf %s "$LD_PRELOAD" > "$0" && exit 7' "$s/preload" 2> "$s/err"
rc=$?
[ $rc = 7 ] || bad "--mps: status $rc, not the command's 7"
[ "$(cat "$s/preload" 2> /dev/null)" = "$lib" ] || bad "--mps: the command's LD_PRELOAD is '$(cat "$s/preload" 2> /dev/null)'"
says "--mps" "MPS: private daemon"
grep -qx quit "$s/log" 2> /dev/null || bad "--mps: the daemon was not told to quit"
[ -s "$s/pid" ] || bad "--mps: no daemon ran"
left "--mps"

# By default: ranks that share a GPU (2 workers, 1 GPU) get a daemon.
"$s/run" torchrun --nproc-per-node 2 sh -c '[ -p "$CUDA_MPS_PIPE_DIRECTORY/control" ] && printf %s "$LD_PRELOAD" > "$0" && exit 7' "$s/preload" 2> "$s/err"
rc=$?
[ $rc = 7 ] || bad "shared: status $rc, not 7 (the command did not see the daemon)"
[ "$(cat "$s/preload" 2> /dev/null)" = "$lib" ] || bad "shared: the command's LD_PRELOAD is wrong"
says shared "MPS: private daemon for this command (2 rank(s) on 1 GPU(s)"
grep -qx quit "$s/log" 2> /dev/null || bad "shared: the daemon was not told to quit"
left shared

# No daemon: ranks alone on GPUs; --no-mps; a command whose ranks cannot be told. The command
# runs with the preload, without MPS variables.
check='[ -z "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && [ "$LD_PRELOAD" = "$0" ] && exit 7'
for case in "alone|2 0 0|none shares one|torchrun --nproc-per-node=2" \
            "no-mps|1 0|MPS: off (--no-mps)|--no-mps torchrun --nproc-per-node 2" \
            "unknown|1 0|cannot tell how many ranks sh starts|"; do
  IFS='|' read -r name gpus say pre << EOF
$case
EOF
  # shellcheck disable=SC2086 # pre holds words
  FAKE_GPUS=$gpus "$s/run" $pre sh -c "$check" "$lib" 2> "$s/err"
  rc=$?
  [ $rc = 7 ] || bad "$name: status $rc, not 7"
  says "$name" "$say"
  no_daemon "$name"
  left "$name"
done

# A compute mode other than Default: none (auto), refused (--mps).
FAKE_GPUS="1 3" "$s/run" torchrun --nproc-per-node 2 sh -c 'exit 7' 2> "$s/err"
rc=$?
[ $rc = 7 ] || bad "exclusive: status $rc, not 7"
says exclusive "MPS: not used (GPU 0's compute mode is Exclusive_Process"
no_daemon exclusive
left exclusive
FAKE_GPUS="2 0 2" "$s/run" --mps touch "$s/ran" 2> "$s/err"
rc=$?
refused "prohibited, --mps" "GPU 1's compute mode is Prohibited"
left "prohibited, --mps"

# A daemon that cannot start, or a failed check: refused before the command runs.
FAKE_MPS_MODE=fail "$s/run" --mps touch "$s/ran" 2> "$s/err"
rc=$?
refused "daemon fails" "cannot start, as asked"
left "daemon fails"
FAKE_PROBE=fail "$s/run" --mps touch "$s/ran" 2> "$s/err"
rc=$?
refused "check fails" "driver refused"
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
[ -e "$s/started" ] || bad "SIGTERM: the command never started"
kill -s TERM -- "-$pid"
wait $pid
rc=$?
[ $rc != 0 ] || bad "SIGTERM: status 0"
grep -qx quit "$s/log" 2> /dev/null || bad "SIGTERM: the daemon was not told to quit"
left SIGTERM

# SIGKILL of the wrapper alone: its watcher still stops the daemon and removes the folder, while
# the command (the user's) runs on. Every process of the run but the command (which closes it)
# holds the write end of a pipe: its end is the event waited for (timeout bounds a hang only).
mkfifo "$s/held"
timeout 120 cat "$s/held" > /dev/null &
reader=$!
"$s/run" torchrun --nproc-per-node 2 sh -c 'exec 5>&-; echo $$ > "$0"; exec sleep 100000' "$s/started" 5> "$s/held" 2> "$s/err" &
pid=$!
i=0
while [ ! -s "$s/started" ] && [ $i -lt 600 ]; do
  sleep 0.05
  i=$((i + 1))
done
[ -s "$s/started" ] || bad "SIGKILL: the command never started"
kill -s KILL $pid
wait $pid 2> /dev/null
wait $reader
[ $? = 0 ] || bad "SIGKILL: the daemon or the watcher still runs after 120 s"
grep -qx quit "$s/log" 2> /dev/null || bad "SIGKILL: the daemon was not told to quit"
kill -0 "$(cat "$s/started")" 2> /dev/null || bad "SIGKILL: the command did not run on"
kill "$(cat "$s/started")"
left SIGKILL
rm -f "$s/held"

# The user's own MPS in effect (CUDA_MPS_PIPE_DIRECTORY, a folder of theirs): used as it is.
mkdir -m 700 "$s/mine"
CUDA_MPS_PIPE_DIRECTORY="$s/mine" "$s/run" --mps sh -c '[ "$CUDA_MPS_PIPE_DIRECTORY" = "$0" ]' "$s/mine" 2> "$s/err"
rc=$?
[ $rc = 0 ] || bad "in effect: the command did not run under the user's own MPS"
says "in effect" "that daemon is used"
no_daemon "in effect"
left "in effect"
# ... but one that is not the user's alone is refused before anything runs.
mkdir -m 777 "$s/open"
chmod 777 "$s/open"
ln -s "$s/mine" "$s/link"
for case in "open|$s/open|writable by others" "link|$s/link|symbolic link" \
            "missing|$s/missing|does not exist"; do
  IFS='|' read -r name dir say << EOF
$case
EOF
  CUDA_MPS_PIPE_DIRECTORY=$dir "$s/run" touch "$s/ran" 2> "$s/err"
  rc=$?
  [ $rc = 2 ] || bad "named $name: status $rc, not 2"
  [ ! -e "$s/ran" ] || bad "named $name: the command ran"
  says "named $name" "$say"
  says "named $name" "CUDA_MPS_PIPE_DIRECTORY"
  left "named $name"
done
if as_root; then
  mkdir -m 700 "$s/theirs"
  chown 65534 "$s/theirs"
  CUDA_MPS_PIPE_DIRECTORY="$s/theirs" "$s/run" touch "$s/ran" 2> "$s/err"
  rc=$?
  [ $rc = 2 ] && [ ! -e "$s/ran" ] || bad "named theirs: status $rc, not 2, or the command ran"
  says "named theirs" "belongs to uid 65534"
  left "named theirs"
else
  echo "SKIP: a folder of another uid named by CUDA_MPS_PIPE_DIRECTORY (needs root, to chown)"
fi

# A daemon in the default folder that is not the user's alone: not used, and the command is
# pointed at the run's folder, where none listens; --mps refuses.
away='case $CUDA_MPS_PIPE_DIRECTORY in */shmddp-mps-*/pipe) [ -d "$CUDA_MPS_PIPE_DIRECTORY" ] && [ ! -e "$CUDA_MPS_PIPE_DIRECTORY/control" ] && exit 7 ;; esac'
for owner in mode uid; do
  if [ $owner = uid ] && ! as_root; then
    echo "SKIP: a daemon of another uid in the default folder (needs root, to chown)"
    continue
  fi
  rm -rf "$s/default"
  mkdir "$s/default"
  mkfifo -m 600 "$s/default/control"
  if [ $owner = mode ]; then chmod 777 "$s/default"; else chown 65534 "$s/default"; fi
  "$s/run" torchrun --nproc-per-node 2 sh -c "$away" 2> "$s/err"
  rc=$?
  [ $rc = 7 ] || bad "foreign ($owner): status $rc, not 7 (the command was not pointed away)"
  says "foreign ($owner)" "MPS: not used (an MPS control daemon listens at $s/default"
  no_daemon "foreign ($owner)"
  left "foreign ($owner)"
  "$s/run" --mps touch "$s/ran" 2> "$s/err"
  rc=$?
  [ $rc = 2 ] && [ ! -e "$s/ran" ] || bad "foreign ($owner), --mps: status $rc, not 2, or the command ran"
  left "foreign ($owner), --mps"
done
rm -rf "$s/default"

# The library path: a space or a colon would split LD_PRELOAD.
for name in "with space.so" "with:colon.so"; do
  : > "$s/$name"
  SHMDDP_NCCL_LIB="$s/$name" "$s/run" --no-mps touch "$s/ran" 2> "$s/err"
  rc=$?
  [ $rc = 2 ] && [ ! -e "$s/ran" ] || bad "library '$name': status $rc, not 2, or the command ran"
  says "library '$name'" "SHMDDP_NCCL_LIB"
  says "library '$name'" "space or a colon"
done

# Folders of earlier runs: removed when no process holds them, kept while one does.
mkdir -m 700 "$s/base/shmddp-mps-left01" "$s/base/shmddp-mps-left01/pipe"
mkdir -m 700 "$s/base/shmddp-mps-held01" "$s/base/shmddp-mps-held01/pipe"
mkfifo "$s/ready" "$s/hold"
flock "$s/base/shmddp-mps-held01" sh -c 'echo locked > "$0"; exec cat "$1" > /dev/null' "$s/ready" "$s/hold" &
holder=$!
read -r _ < "$s/ready"
"$s/run" --mps true 2> "$s/err" || bad "sweep: the run failed"
[ ! -e "$s/base/shmddp-mps-left01" ] || bad "sweep: a folder no process holds was kept"
[ -d "$s/base/shmddp-mps-held01" ] || bad "sweep: a folder a process holds was removed"
: > "$s/hold" # the holder ends
wait $holder
"$s/run" --mps true 2> "$s/err" || bad "sweep: the second run failed"
[ ! -e "$s/base/shmddp-mps-held01" ] || bad "sweep: the folder was kept after its holder ended"
left sweep

"$s/run" --help 2>&1 | grep -q -- "--no-mps" || bad "--help does not describe --no-mps"
"$s/run" --mps --no-mps true 2> "$s/err"
[ $? = 2 ] || bad "--mps --no-mps: not refused"
[ $fail = 0 ] && echo "PASS: shmddp-nccl-run starts, checks, stops and removes its MPS daemon where it should"
exit $fail
