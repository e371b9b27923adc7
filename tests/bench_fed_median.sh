#!/bin/sh
# bench/fed_median.py, the rate the benchmarks report for our trainer: the median of the runs
# that did not wait for their batches (1 % of the step or more), the others listed and left out;
# no figure where every run waited. Fed with speed_anchor_gpu.sh's and step_ab_gpu.sh's tables.
set -u
src=${srcdir:-.}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { grep -qF -- "$2" "$1" || bad "$3: no '$2' in: $(cat "$1")"; }
hasnt() { if grep -qF -- "$2" "$1"; then bad "$3: '$2' in: $(cat "$1")"; fi; }
fm() { python3 "$src/bench/fed_median.py" "$@"; }
command -v python3 > /dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }

# speed_anchor_gpu.sh's speed.tsv: three runs of ours, one waited (17 %); PyTorch eager and compiled
T=$(printf '\t')
hdr="date${T}commit${T}impl${T}precision${T}variant${T}images_per_s${T}peak_mib${T}graph${T}compile_s${T}data_wait_pct"
ours() { echo "d${T}c${T}shmddp${T}$1${T}engine auto ($2)${T}$3${T}1084${T}graph${T}-${T}$4"; }
torch() { echo "d${T}-${T}torch${T}$1${T}$2${T}$3${T}1318${T}-${T}31.7${T}-"; }
{
  echo "$hdr"
  ours bf16 before 1132.76 0.0
  torch bf16 "channels-last autocast" 670.1
  torch bf16 "channels-last autocast, torch.compile(max-autotune)" 933.7
  ours bf16 after 1002.35 17.0
  ours bf16 after 1137.0 0.0
} > "$tmp/speed.tsv"
fm anchor "$tmp/speed.tsv" > "$tmp/a.out" || bad "anchor: exit $?"
# the median of 1132.76 and 1137.0, against 933.7: 1.215 x (with the waited run: 1132.76, 1.213 x)
has "$tmp/a.out" "1134.9 img/s (median of 2 of 3 runs, 1 left out (waited for data))" anchor
has "$tmp/a.out" "torch.compile(max-autotune) 933.7 img/s, 1318 MiB (compile 31.7 s) = 1.215 x speed" anchor
has "$tmp/a.out" "1002.4 (waited 17.0 %)" "anchor: the run left out is listed"
# every run waited (or gave no wait figure, which shows nothing): no ratio at all
{
  echo "$hdr"
  ours fp32 before 500.0 3.0
  torch fp32 "channels-last TF32" 423.1
  ours fp32 after 510.0 -
} > "$tmp/waited.tsv"
fm anchor "$tmp/waited.tsv" > "$tmp/w.out" || bad "anchor, all waited: exit $?"
has "$tmp/w.out" "every run waited for data: no ratio" "anchor, all waited"
hasnt "$tmp/w.out" "x speed" "anchor, all waited"

# step_ab_gpu.sh's runs: A 1000, 1010 and one that waited (1200 at 5 %); B 1020 and one at 3 %
{
  printf 'A\t1000.0\t0.0\nB\t1020.0\t0.4\nA\t1010.0\t0.2\nB\t900.0\t3.0\nA\t1200.0\t5.0\n'
  printf 'C\tfailed(1)\t-\nC\t990.0\t9.0\n'
} > "$tmp/runs.tsv"
fm ab "$tmp/runs.tsv" bf16 > "$tmp/b.out" || bad "ab: exit $?"
has "$tmp/b.out" "trainer A bf16: median of 2 runs that did not wait 1005.0 img/s (1 left out: waited for data)" ab
has "$tmp/b.out" "trainer B bf16: median of 1 runs that did not wait 1020.0 img/s, +1.5 % against A (1 left out" ab
has "$tmp/b.out" "trainer C bf16: every run waited for data (1 runs): no figure" "ab: a failed run is no run"
fm nonsense > /dev/null 2>&1 && bad "a wrong mode was accepted"

[ $fails -eq 0 ] && echo "ok: the benchmarks' median leaves out the runs that waited for data"
[ $fails -eq 0 ]
