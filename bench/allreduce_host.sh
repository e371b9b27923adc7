#!/bin/sh
# bench/allreduce_host.sh [BUILD_DIR] [OUT_TSV] — the host collectives (CPU ranks, host buffers):
# all-reduce 8 B..64 MiB with 2 and 4 ranks, direct and ring, every result checked. CPU only.
# Writes OUT_TSV (default bench/results/allreduce_host_<host>.tsv; bench/results/allreduce_host_cpu.tsv).
set -eu
build=${1:-.}
out=${2:-bench/results/allreduce_host_$(hostname -s).tsv}
bench="$build/tools/allreduce_bench"
[ -x "$bench" ] || { echo "build first: $bench not found" >&2; exit 1; }
tmp=$(mktemp)
{
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# commit: ${COMMIT:-$(sh "$(dirname "$0")/tree_name.sh" "$(dirname "$0")/..")}"
  echo "# machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), no GPU used"
  for n in 2 4; do
    for algo in direct ring; do
      cmd="$bench --device cpu --nproc $n -b 8 -e 64M -f 8 -n 50 -w 5 -c 1 --algo $algo --tsv $tmp"
      echo "# command: $cmd"
      $cmd >/dev/null
      sed "s/^/$n\t/" "$tmp" | sed "1s/^$n\t/nranks\t/"
    done
  done
} > "$out.new"
mv "$out.new" "$out"
rm -f "$tmp"
echo "wrote $out"
