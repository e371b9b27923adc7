#!/bin/sh
# bench/torch_soak.sh (the GPU soak's runner) over stand-ins for the GPU machine's programs
# (nvidia-smi, the MPS control daemon, python3 with torch and torchrun, shmddp-nccl-run): each
# mode gets the wrapper flag its --help offers (--mps where MPS is opt-in, --no-mps where it is
# opt-out), the ranks see expandable segments and the mode's --expect-mps, the record has its
# header and every run's table and totals, errors make the exit status 1, a segment a run leaves
# in /dev/shm fails it while one that another live process holds (a test suite beside) does
# not, and an existing OUTFILE or a wrapper with no MPS option is refused before anything starts
# (exit 2).
set -u
. "${srcdir:-.}/tests/lib.sh"
runner=$(cd "${srcdir:-.}" && pwd)/bench/torch_soak.sh
bad() { echo "FAIL: $*"; fail=1; }
mkdir -p "$tmp/bin" "$tmp/tree/bench" "$tmp/tree/.libs" "$tmp/out"
touch "$tmp/tree/bench/torch_soak.py" "$tmp/tree/.libs/libshmddp-nccl.so.0.0.0"
ln -s libshmddp-nccl.so.0.0.0 "$tmp/tree/.libs/libshmddp-nccl.so.0"
cat > "$tmp/bin/nvidia-smi" << 'EOF'
#!/bin/sh
case "$*" in -L) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;; *) echo 1.0 ;; esac
EOF
printf '#!/bin/sh\nexit 0\n' > "$tmp/bin/nvidia-cuda-mps-control"
# python3: the torch check, the GPU load (until SIGTERM) and torchrun, which notes its arguments
# and environment, makes the /dev/shm files $STUB_SHM names and writes the table --table names,
# with $STUB_ERRORS errors.
cat > "$tmp/bin/python3" << 'EOF'
#!/bin/sh
case "$1" in
  -c) echo "2.11.0 13.0" ;;
  bench/torch_soak.py)
    trap 'echo "gpu-load: 7 matmuls of 2048x2048 float32 in 1.0 s"; exit 0' TERM
    echo "gpu-load: ready on Stand-in GPU"
    while :; do sleep 0.1; done ;;
  -m)
    echo "args: $* flag: ${STUB_FLAG:-none} alloc: $PYTORCH_CUDA_ALLOC_CONF"
    echo "communicator made: served by shmddp on cuda0 (stand-in)" >&2
    for n in ${STUB_SHM:-}; do : > "/dev/shm/$n"; done
    while [ $# -gt 1 ]; do [ "$1" = --table ] && table=$2; shift; done
    printf '# stand-in table\nsoak: 100 calls, %s errors\n' "${STUB_ERRORS:-0}" > "$table" ;;
esac
EOF
# shmddp-nccl-run: its --help names $STUB_OPTION; it takes that option, notes it, runs the rest.
cat > "$tmp/tree/shmddp-nccl-run" << 'EOF'
#!/bin/sh
case "$1" in
  --help) echo "usage: shmddp-nccl-run ${STUB_OPTION:+[$STUB_OPTION] }COMMAND [ARG...]" >&2; exit 0 ;;
  --version) echo "shmddp-nccl-run stand-in"; exit 0 ;;
  --mps | --no-mps) export STUB_FLAG=$1; shift ;;
esac
exec "$@"
EOF
chmod +x "$tmp/bin"/* "$tmp/tree/shmddp-nccl-run"
soak() { # NAME [MODE...]: the runner in the stand-in tree; output in $tmp/NAME.log
  n=$1
  shift
  (cd "$tmp/tree" && PATH="$tmp/bin:$PATH" PYTHON=python3 SOAK_SECONDS=1 COMMIT=stand-in \
    bash "$runner" "$tmp/out/$n.txt" "$@") > "$tmp/$n.log" 2>&1
}
has() { grep -qF -- "$2" "$1" || bad "$(basename "$1"): no line with '$2'"; }

# MPS opt-in (the wrapper offers --mps): nomps without a flag, mps with --mps.
STUB_OPTION=--mps soak optin
rc=$?
[ "$rc" = 0 ] || bad "optin: exit status $rc, not 0"
r=$tmp/out/optin.txt
if [ -f "$r" ]; then
  for line in "# commit: stand-in" "# machine: GPU 0: Stand-in GPU" "# date: " \
    "# command: bench/torch_soak.sh $r nomps mps" "## nomps_2ranks: shmddp-nccl-run (no flag" \
    "## mps_2ranks: shmddp-nccl-run --mps," "# stand-in table" \
    "## load: gpu-load: 7 matmuls" "failed: none"; do
    has "$r" "$line"
  done
  [ "$(tail -n 1 "$r")" = "soak: 200 calls, 0 errors" ] || bad "optin: last line '$(tail -n 1 "$r")'"
  has "$tmp/out/optin_logs/nomps_2ranks.log" "--expect-mps off --require-shmddp"
  has "$tmp/out/optin_logs/nomps_2ranks.log" "flag: none alloc: expandable_segments:True"
  has "$tmp/out/optin_logs/mps_2ranks.log" "--expect-mps on --require-shmddp"
  has "$tmp/out/optin_logs/mps_2ranks.log" "flag: --mps alloc: expandable_segments:True"
else
  bad "optin: no record"
fi

# MPS opt-out (the wrapper offers --no-mps), one run with 2 errors: exit 1, the errors summed.
STUB_OPTION=--no-mps STUB_ERRORS=2 soak optout
rc=$?
[ "$rc" = 1 ] || bad "optout: exit status $rc, not 1"
r=$tmp/out/optout.txt
if [ -f "$r" ]; then
  has "$tmp/out/optout_logs/nomps_2ranks.log" "flag: --no-mps"
  has "$tmp/out/optout_logs/mps_2ranks.log" "flag: none"
  has "$r" "failed: nomps_2ranks(errors) mps_2ranks(errors)"
  [ "$(tail -n 1 "$r")" = "soak: 200 calls, 4 errors" ] || bad "optout: last line '$(tail -n 1 "$r")'"
else
  bad "optout: no record"
fi

# Segments made during a run: one named by a live process (another program's, beside the soak)
# is not the run's leftover; one named by a process that is gone is.
sleep 600 &
live=$!
sh -c 'exit 0' &
dead=$!
wait "$dead"
rnd=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
live_seg=shmddp-$live-$rnd dead_seg=shmddp-$dead-$rnd
STUB_OPTION=--mps STUB_SHM="$live_seg $dead_seg" soak shm nomps
rc=$?
kill "$live" 2> /dev/null
rm -f "/dev/shm/$live_seg" "/dev/shm/$dead_seg"
[ "$rc" = 1 ] || bad "shm: exit status $rc, not 1"
has "$tmp/out/shm.txt" "failed: nomps_2ranks(left in /dev/shm: $dead_seg )"
grep -qF "$live_seg" "$tmp/out/shm.txt" && bad "shm: a live process's segment was counted as left"

# Refused before anything starts: an existing OUTFILE; mode mps where the wrapper has no MPS
# option; a mode that does not exist.
STUB_OPTION=--mps soak optin
[ $? = 2 ] || bad "an existing OUTFILE was not refused with exit status 2"
has "$tmp/optin.log" "exists: remove it or name another file"
STUB_OPTION='' soak nompsopt mps
[ $? = 2 ] || bad "mode mps with a wrapper without an MPS option: not refused with exit status 2"
has "$tmp/nompsopt.log" "names neither --mps nor --no-mps"
[ -e "$tmp/out/nompsopt_logs" ] && bad "a refused run made its log folder"
STUB_OPTION=--mps soak badmode nomps fast
[ $? = 2 ] || bad "mode 'fast' was not refused with exit status 2"
has "$tmp/badmode.log" "mode 'fast': give nomps or mps"

[ $fail -eq 0 ] || { tail_logs 30; exit 1; }
echo "ok: flags from --help, the record and its totals, errors, segments left, refusals"
