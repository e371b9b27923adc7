#!/bin/sh
# SIGKILL one rank of a long allreduce_bench run: the run must end within 2 s, non-zero, with a
# message naming the rank, and leave nothing in /dev/shm.
set -u
bench=${top_builddir:-.}/tools/allreduce_bench
out=$(mktemp)
"$bench" --device cpu --nproc 4 -n 1000000 -b 1M -e 1M >"$out" 2>&1 &
launcher=$!
ranks=""
for _ in $(seq 50); do
  ranks=$(pgrep -P "$launcher" | sort -n)
  [ "$(echo "$ranks" | wc -w)" -eq 4 ] && break
  sleep 0.1
done
sleep 1
victim=$(echo "$ranks" | sed -n 2p)
[ -n "$victim" ] || { echo "FAIL: ranks not found"; cat "$out"; exit 1; }
t0=$(date +%s%N)
kill -9 "$victim"
wait "$launcher"
rc=$?
t1=$(date +%s%N)
ms=$(( (t1 - t0) / 1000000 ))
echo "exit status $rc after ${ms} ms"; cat "$out"
fail=0
[ "$rc" -ne 0 ] || { echo "FAIL: exit status 0"; fail=1; }
[ "$ms" -lt 2000 ] || { echo "FAIL: took ${ms} ms"; fail=1; }
grep -q "rank 1 (pid $victim) was killed by signal 9" "$out" || { echo "FAIL: rank not named"; fail=1; }
if ls /dev/shm | grep -q "^shmddp-$launcher-"; then echo "FAIL: segment left in /dev/shm"; fail=1; fi
rm -f "$out"
exit $fail
