#!/usr/bin/env bash
# bench/coloc_bandwidth_gpu.sh OUTDIR — the bandwidth of ranks sharing one GPU at large sizes (the
# co-located kernel, collectives/coloc/coloc_kernel.cu). GPU machine, 1 GPU; run from the root of a
# tree configured and built with CUDA (nothing is built here). About 1.5 minutes.
#
# All-reduce f32 sum, 1..64 MiB, 2 and 4 ranks on GPU 0, without MPS and under a private MPS
# daemon (shmddp-nccl-run --mps, without its NCCL preload), under each way of waiting for the
# peers' events (SHMDDP_COLOC_WAIT, BW_WAITS: default "host leader stream"); every run times a
# device-to-device copy of 64 MiB in the same run (--copy-bw) and checks every result (-c 1).
#
# What to read (OUTDIR/summary.txt): per run, at 64 MiB, busbw against the copy and against the
# bound: an all-reduce on one GPU moves 2n bytes per byte (n inputs read, n outputs written),
# the copy 2, so busbw/copy is at most 2(n-1)/n^2 (0.5 for 2 ranks, 0.375 for 4); and the sweep's
# split into a streaming rate (the slope between 32 and 64 MiB, as memory traffic: 2n bytes per
# byte, against the copy's 2) and a fixed cost per call (the protocol's hand-over between calls).
# OUTDIR/coloc_bw_1xh200.tsv: the rows; OUTDIR/bw.log: the runs' output. Exit status 1 when a
# run failed or found a wrong result.
set -u
BUDGET_S=${BUDGET_S:-150}
. "$(dirname "$0")/lib.sh"
bench_out "${1:?usage: bench/coloc_bandwidth_gpu.sh OUTDIR}"
export CUDA_VISIBLE_DEVICES=${COLOC_GPU:-0} NCCL_NVLS_ENABLE=0
B=./tools/allreduce_bench
RUNNER=./shmddp-nccl-run
TSV="$OUT/coloc_bw_1xh200.tsv"
bench_header "co-located bandwidth: ranks sharing GPU $CUDA_VISIBLE_DEVICES" OUTDIR
[ -x "$B" ] || { note "$B is missing: build the tree first (make -j)"; exit 1; }
MODES="plain"
if [ -x "$RUNNER" ] && command -v nvidia-cuda-mps-control >/dev/null; then
  MODES="plain mps"
else
  note "no MPS runs: $RUNNER (a CUDA build) and nvidia-cuda-mps-control on PATH are needed"
  FAILED=1
fi
ARGS="--device cuda -b 1M -e 64M -f 2 -n 20 -w 5 -c 1 --copy-bw"
{
  echo "# all-reduce, f32 sum, out-of-place, ranks sharing one GPU; busbw = algbw * 2(n-1)/n; rows 'memcpy': a device-to-device copy of 64 MiB in the same run"
  echo "# command: [SHMDDP_NCCL_LIB=/dev/null $RUNNER --mps] env SHMDDP_COLOC_WAIT=W $B --nproc N $ARGS --tsv FILE"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $COMMIT"
  nvidia-smi -L 2>/dev/null | sed 's/^/# gpu: /'
} > "$TSV"
: > "$OUT/bw.log"
n=0
for mode in $MODES; do
  wrap=
  [ "$mode" = mps ] && wrap="env SHMDDP_NCCL_LIB=/dev/null $RUNNER --mps"
  for ranks in 2 4; do
    for w in ${BW_WAITS:-host leader stream}; do
      n=$((n + 1))
      left=$((BUDGET_S - ($(date +%s) - T_START)))
      limit=$((left < 40 ? left : 40))
      if [ "$limit" -lt 10 ]; then FAILED=1; note "$mode $ranks ranks $w waits: skipped (budget spent)"; continue; fi
      echo "+ $wrap env SHMDDP_COLOC_WAIT=$w $B --nproc $ranks $ARGS --tsv t$n.tsv" >> "$OUT/bw.log"
      timeout -k 5 "$limit" $wrap env SHMDDP_COLOC_WAIT=$w $B --nproc "$ranks" $ARGS \
        --tsv "$OUT/t$n.tsv" >> "$OUT/bw.log" 2>&1 ||
        { FAILED=1; note "$mode $ranks ranks $w waits: failed (see bw.log)"; }
      [ -f "$OUT/t$n.tsv" ] || continue
      awk -v m="$mode" -v r="$ranks" -v w="$w" -v first="$n" \
        'NR == 1 { if (first == 1) print "mps\tranks\twaits\t" $0; next } { print m "\t" r "\t" w "\t" $0 }' \
        "$OUT/t$n.tsv" >> "$TSV"
      rm -f "$OUT/t$n.tsv"
    done
  done
done
grep -m2 "transport" "$OUT/bw.log" | tee -a "$SUM"
# columns: mps ranks waits bytes count dtype op algo time_us algbw busbw errors ...
awk -F'\t' '
  /^#/ || $2 == "ranks" { next }
  { k = $1 " " $2 " ranks, " $3 " waits" }
  $8 == "memcpy" { copy[k] = $10; next }
  { t[k, $4] = $9; bus[k, $4] = $11; algo[k, $4] = $8; keys[k] = $2; if ($12 + 0 > 0) bad++ }
  END {
    M = 67108864; H = 33554432
    for (k in keys) {
      r = keys[k]; bound = 2 * (r - 1) / (r * r)
      ratio = copy[k] > 0 ? bus[k, M] / copy[k] : 0
      slope = (t[k, M] > t[k, H]) ? (M - H) / ((t[k, M] - t[k, H]) * 1e3) : 0 # GB/s of algbw
      fixed = slope > 0 ? t[k, M] - M / (slope * 1e3) : 0
      printf "%s: 64 MiB (%s) %.1f us, busbw %.1f GB/s, copy %.1f GB/s: busbw/copy %.3f, bound %.3f: %.2f of it; streaming: memory traffic %.0f GB/s vs the copy %.0f (%.2f); fixed cost per call %.1f us\n", \
        k, algo[k, M], t[k, M], bus[k, M], copy[k], ratio, bound, (bound > 0 ? ratio / bound : 0), \
        slope * 2 * r, copy[k] * 2, (copy[k] > 0 ? slope * r / copy[k] : 0), fixed
    }
    if (bad) printf "%d rows with wrong results\n", bad
  }' "$TSV" | sort | tee -a "$SUM"
awk -F'\t' '!/^#/ && $2 != "ranks" && $12 + 0 > 0 { bad = 1 } END { exit bad }' "$TSV" || FAILED=1
left=$(pgrep -u "$(id -u)" -f 'nvidia-cuda-mps-(control|server)' | tr '\n' ' ')
[ -z "$left" ] || { FAILED=1; note "LEFT BEHIND: MPS processes [$left]"; }
note "took $(($(date +%s) - T_START)) s; $([ $FAILED -eq 0 ] && echo "every run passed" || echo "some run FAILED (see bw.log)")"
exit $FAILED
