#!/bin/sh
# shmddp-allreduce-bench on host buffers (CPU ranks): every collective, out of place and (where
# it has one) in place, on 2 and 3 ranks, checked (-c 1) over a size sweep: exit status 0 and
# no wrong element in any row. In place, all_gather receives every rank's block into the send
# buffer, which must be as large as the receive buffer. The --tsv table is written as a fresh
# private file renamed into place: a symlink planted under its name is replaced, its target
# left as it was.
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
echo precious > "$tmp/target"
ln -s "$tmp/target" "$tmp/table.tsv"
"$bench" -p 2 -b 8 -e 64 -n 2 -w 1 --tsv "$tmp/table.tsv" > "$tmp/out" 2>&1
rc=$?
check "--tsv over a planted symlink: exit 0, the target untouched, a private table of 4 rows" \
  '[ $rc -eq 0 ] && [ "$(cat "$tmp/target")" = precious ] && [ ! -L "$tmp/table.tsv" ] &&
   [ "$(stat -c %a "$tmp/table.tsv")" = 600 ] && [ "$(grep -c "^[0-9]" "$tmp/table.tsv")" = 4 ]' ||
  { tail -3 "$tmp/out"; ls -la "$tmp"; }
exit $fail
