#!/bin/sh
# shmddp-allreduce-bench on host buffers (CPU ranks): every collective, out of place and (where
# it has one) in place, on 2 and 3 ranks, checked (-c 1) over a size sweep: exit status 0 and
# no wrong element in any row. In place, all_gather receives every rank's block into the send
# buffer, which must be as large as the receive buffer.
set -u
. "${srcdir:-.}/tests/lib.sh"
bench=${top_builddir:-.}/shmddp-allreduce-bench
for p in 2 3; do
  for c in all_reduce reduce_scatter all_gather broadcast all_to_all gather scatter; do
    for inplace in "" -I; do
      case $c in all_to_all | gather | scatter) [ -z "$inplace" ] || continue ;; esac
      name="-p $p -C $c $inplace"
      "$bench" -p $p -C $c $inplace -b 8 -e 256K -f 4 -n 2 -w 1 -c 1 > "$tmp/out" 2>&1
      rc=$?
      check "$name: exit 0, 8 sizes checked, none wrong" \
        '[ $rc -eq 0 ] && [ "$(awk "/^ *[0-9]/ { n++; if (\$9 != 0) bad++ } END { print n + 0, bad + 0 }" "$tmp/out")" = "8 0" ]' ||
        tail -3 "$tmp/out"
    done
  done
done
exit $fail
