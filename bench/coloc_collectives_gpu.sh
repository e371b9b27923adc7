#!/usr/bin/env bash
# bench/coloc_collectives_gpu.sh OUTDIR — ranks sharing one GPU as a user gets them: every run goes
# through shmddp-nccl-run, once by default (MPS where it can serve: a private daemon for the run)
# and once with --no-mps; on the GPU machine, from a configured and built CUDA tree (run in its
# root; nothing is built here: `make -j` first). About 3 minutes.
#
# 2 and 4 ranks on GPU 0 (tools/allreduce_bench --device cuda --nproc N, every result checked):
#   all-reduce of 8 B (the latency: target <= 10 us for 2 ranks by default, twice real NCCL's
#   one-rank 4.9 us), and all-reduce, all-to-all, gather and scatter at 64 B .. 1 MiB (-b 64 -e 1M
#   -f 16; gather and scatter rooted at rank 0; bytes are the whole, nccl-tests' convention).
#   Without MPS each of these is one co-located call, one hand-over, so all-to-all, gather and
#   scatter should cost no more than an all-reduce of the same bytes.
#
# OUTDIR/colls_1xgpu.tsv: every row (ranks, mps: default|off, collective, then the bench's
# columns); OUTDIR/summary.txt: which MPS each run had (the wrapper's line), the targets, and
# whether a daemon or a folder was left; OUTDIR/colls.log: the runs' output. Exit status 1 when a
# run failed, found a wrong result, or left something behind.
set -u
OUT=${1:?usage: bench/coloc_collectives_gpu.sh OUTDIR}
BUDGET_S=${BUDGET_S:-400}
T_START=$(date +%s)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export CUDA_VISIBLE_DEVICES=${COLOC_GPU:-0} NCCL_NVLS_ENABLE=0
COMMIT=${COMMIT:-$(sh "$(dirname "$0")/tree_name.sh" "$(dirname "$0")/..")}
B=./tools/allreduce_bench
RUNNER=./shmddp-nccl-run
LIB=$(readlink -f .libs/libshmddp-nccl.so.0 2>/dev/null)
SUM="$OUT/summary.txt"
TSV="$OUT/colls_1xgpu.tsv"
LOG="$OUT/colls.log"
FAILED=0
note() { echo "$*" | tee -a "$SUM"; }
: > "$SUM"
: > "$LOG"
note "# ranks sharing GPU $CUDA_VISIBLE_DEVICES through shmddp-nccl-run, by default and with --no-mps; date $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $COMMIT"
nvidia-smi -L 2>/dev/null | sed 's/^/# gpu: /' | tee -a "$SUM"
note "# compute mode: $(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | head -1); nvidia-cuda-mps-control: $(command -v nvidia-cuda-mps-control || echo 'not on PATH (no MPS by default)')"
for p in "$B" "$RUNNER" "$LIB"; do
  [ -n "$p" ] && [ -e "$p" ] || { note "missing: ${p:-.libs/libshmddp-nccl.so.0}: build the CUDA tree first (make -j)"; exit 1; }
done
{
  echo "# ranks sharing one GPU (CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES), f32, out of place, results checked; mps default: as shmddp-nccl-run chooses, off: --no-mps"
  echo "# command: SHMDDP_NCCL_LIB=$LIB $RUNNER [--no-mps] $B --device cuda --nproc N -C COLL -b 8 -e 8 | -b 64 -e 1M -f 16 -n 50 -w 10 -c 1 --tsv FILE"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $COMMIT"
  nvidia-smi -L 2>/dev/null | sed 's/^/# gpu: /'
} > "$TSV"

# What of MPS is left: daemons of this user, folders of the wrapper's.
left() {
  local procs dirs
  procs=$(pgrep -u "$(id -u)" -f 'nvidia-cuda-mps-(control|server)' | tr '\n' ' ')
  dirs=$(ls -d "${XDG_RUNTIME_DIR:-/nonexistent}"/shmddp-mps-* "${TMPDIR:-/tmp}"/shmddp-mps-* /tmp/shmddp-mps-* 2>/dev/null | sort -u | tr '\n' ' ')
  [ -z "$procs$dirs" ] && return 0
  FAILED=1
  note "LEFT BEHIND after $1: MPS processes [$procs] folders [$dirs]"
}

n=0
first=1
for ranks in 2 4; do
  for mps in default off; do
    flag=
    [ $mps = off ] && flag=--no-mps
    for run in "all_reduce|-b 8 -e 8" "all_reduce|-b 64 -e 1M -f 16" "all_to_all|-b 64 -e 1M -f 16" \
               "gather|-b 64 -e 1M -f 16" "scatter|-b 64 -e 1M -f 16"; do
      coll=${run%%|*}
      sizes=${run#*|}
      n=$((n + 1))
      limit=$((BUDGET_S - ($(date +%s) - T_START)))
      [ $limit -gt 60 ] && limit=60
      if [ $limit -lt 10 ]; then FAILED=1; note "$ranks ranks, mps $mps, $coll $sizes: skipped: the budget of $BUDGET_S s is spent"; continue; fi
      echo "+ SHMDDP_NCCL_LIB=$LIB $RUNNER $flag $B --device cuda --nproc $ranks -C $coll $sizes -n 50 -w 10 -c 1" >> "$LOG"
      SHMDDP_NCCL_LIB=$LIB timeout -k 10 $limit $RUNNER $flag $B --device cuda --nproc $ranks -C $coll $sizes \
        -n 50 -w 10 -c 1 --tsv "$OUT/t$n.tsv" > "$OUT/run.out" 2>&1 ||
        { FAILED=1; note "$ranks ranks, mps $mps, $coll: failed (see colls.log)"; }
      cat "$OUT/run.out" >> "$LOG"
      # the wrapper's line: which MPS the run had, and why
      line=$(grep -m1 'shmddp-nccl-run: MPS' "$OUT/run.out")
      [ "$coll $sizes" = "all_reduce -b 8 -e 8" ] && note "$ranks ranks, mps $mps: ${line#shmddp-nccl-run: }"
      left "$ranks ranks, mps $mps, $coll"
      [ -f "$OUT/t$n.tsv" ] || continue
      awk -v r="$ranks" -v m="$mps" -v c="$coll" -v first="$first" \
        'NR == 1 { if (first) print "ranks\tmps\tcollective\t" $0; next } { print r "\t" m "\t" c "\t" $0 }' \
        "$OUT/t$n.tsv" >> "$TSV"
      first=0
      rm -f "$OUT/t$n.tsv"
    done
  done
done
rm -f "$OUT/run.out"

# The targets, read back from the table (columns: 1 ranks, 2 mps, 3 collective, 4 bytes, ...,
# 9 time_us, 12 errors).
awk -F'\t' '
  /^#/ || $1 == "ranks" { next }
  { t[$1 "," $2 "," $3 "," $4] = $9; if ($4 != 8) sz[$4] = 1; if ($12 + 0 > 0) bad++ }
  END {
    split("all_to_all gather scatter", cs, " ")
    for (r = 2; r <= 4; r += 2) {
      printf "%d ranks, all-reduce 8 B: %.1f us by default, %.1f us with --no-mps%s\n", r,
             t[r ",default,all_reduce,8"], t[r ",off,all_reduce,8"],
             (r == 2 ? " (target <= 10 us by default)" : "")
      for (m = 0; m < 2; m++) {
        mode = m ? "off" : "default"
        line = ""
        worst = 0
        for (b in sz) {
          ar = t[r "," mode ",all_reduce," b]
          if (ar <= 0) continue
          line = line sprintf(" %s B: %s/%s/%s/%s;", b, ar, t[r "," mode ",all_to_all," b],
                              t[r "," mode ",gather," b], t[r "," mode ",scatter," b])
          for (i = 1; i <= 3; i++)
            if (t[r "," mode "," cs[i] "," b] / ar > worst) worst = t[r "," mode "," cs[i] "," b] / ar
        }
        printf "%d ranks, mps %s, us all-reduce/all-to-all/gather/scatter:%s\n", r, mode, line
        printf "%d ranks, mps %s: all-to-all, gather and scatter take at most %.2fx an all-reduce of the same bytes (target <= 1 with --no-mps)\n", r, mode, worst
      }
    }
    if (bad) print bad " rows with wrong results"
  }' "$TSV" | tee -a "$SUM"
awk -F'\t' '!/^#/ && $1 != "ranks" && $12 + 0 > 0 { bad++ } END { exit bad ? 1 : 0 }' "$TSV" || FAILED=1
note "done after $(($(date +%s) - T_START)) s: $([ $FAILED -eq 0 ] && echo "every run passed, nothing left" || echo "something FAILED (see the logs)")"
exit $FAILED
