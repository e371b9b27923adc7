#!/bin/sh
# bench/graph_timeline.py, the idle time between a graph-replayed step's kernels: on a made-up
# Nsight Systems GPU trace of two replays of four operations (two of them overlapping, as the
# step's two streams do; a kernel name with template arguments and commas), the span, the time
# some operation runs, the idle gaps with their neighbours and the per-kernel medians; traces
# that are not whole replays of one graph refused.
set -u
src=${srcdir:-.}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { grep -qF -- "$2" "$1" || bad "$3: no '$2' in: $(cat "$1")"; }
gt() { python3 "$src/bench/graph_timeline.py" "$@"; }
command -v python3 > /dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }

# replay 0: k1 [1000, 3000], k2 [3500, 4500], memset [4000, 6000], k1 [7000, 8000] ns:
#   span 7000, running 5500 (k2 and the memset overlap), idle 1500 in gaps of 500 and 1000;
# replay 1: k1 [11000, 13000], k2 [16000, 17000], memset [17000, 18000], k1 [18000, 19000]:
#   span 8000, running 5000, idle 3000 in one gap.
k1='void k1<int, 2>(float *, int)'
{
  echo 'Generating SQLite file tl.sqlite'
  echo '"Start (ns)","Duration (ns)","CorrId","Strm","Name"'
  echo "1000,2000,1,13,\"$k1\""
  echo '3500,1000,2,13,"k2"'
  echo '4000,2000,3,14,"[CUDA memset]"'
  echo "7000,1000,4,13,\"$k1\""
  echo "11000,2000,5,13,\"$k1\""
  echo '16000,1000,6,13,"k2"'
  echo '17000,1000,7,14,"[CUDA memset]"'
  echo "18000,1000,8,13,\"$k1\""
} > "$tmp/t.csv"
gt "$tmp/t.csv" 2 > "$tmp/o.md" || bad "exit $?"
has "$tmp/o.md" "2 replays of 4 operations each" header
has "$tmp/o.md" "| 0 | 7.0 | 5.5 | 1.5 | 21.4 | 2 |" "replay 0"
has "$tmp/o.md" "| 1 | 8.0 | 5.0 | 3.0 | 37.5 | 1 |" "replay 1"
has "$tmp/o.md" "The replay of median span is 0: 7.0 us, of which 1.5 us (21.4 %)" median
has "$tmp/o.md" "| under 1 us | 1 | 0.5 |" "gaps under 1 us"
has "$tmp/o.md" "| 1 to 2 us | 1 | 1.0 |" "gaps of 1 to 2 us"
# the largest gap first; after it the operation that ended last (the memset, not k2)
has "$tmp/o.md" "| 1.00 | [CUDA memset] | k1 | 6.0 |" "largest gap"
has "$tmp/o.md" "| 0.50 | k1 | k2 | 2.5 |" "second gap"
# medians per position: k1 2000 + 1000 ns running, idle before the second one 1000 and 0 -> 500;
# k2 idle before 500 and 3000 -> 1750; the memset 2000 and 1000 -> 1500
has "$tmp/o.md" "| k1 | 2 | 3.0 | 0.5 | 0.25 |" "k1"
has "$tmp/o.md" "| k2 | 1 | 1.0 | 1.8 | 1.75 |" "k2"
has "$tmp/o.md" "| [CUDA memset] | 1 | 1.5 | 0.0 | 0.00 |" memset
has "$tmp/o.md" "Totals: 5.5 us running" totals

# not whole replays: 8 operations in 3; replays of other operations; no table; a bad count
refused() { # what, expected message, args...
  w=$1 m=$2
  shift 2
  if gt "$@" > "$tmp/r.out" 2>&1; then bad "$w: accepted"; else has "$tmp/r.out" "$m" "$w"; fi
}
refused "3 replays" "8 operations do not split into 3 replays" "$tmp/t.csv" 3
sed 's/"k2"$/"k3"/;t' "$tmp/t.csv" | awk 'NR == 4 { sub(/k3/, "k2") } { print }' > "$tmp/other.csv"
refused "other operations" "replay 1 runs other operations than replay 0" "$tmp/other.csv" 2
echo 'a,b,c' > "$tmp/none.csv"
refused "no table" "has no header with Start, Duration and Name columns" "$tmp/none.csv" 2
refused "a bad count" "REPLAYS must be a count" "$tmp/t.csv" x
refused "no file" "cannot read" "$tmp/missing.csv" 2

[ "$fails" = 0 ] && echo "ok: graph_timeline.py on a made-up trace of two replays" && exit 0
exit 1
