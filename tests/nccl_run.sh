#!/bin/sh
# nccl_run.sh — shmddp-nccl-run runs its command with the NCCL front end preloaded (before any
# LD_PRELOAD already set), refuses to run without the library, and says how to use it.
set -u
top_builddir=${top_builddir:-.}
run="$top_builddir/shmddp-nccl-run"
lib="$top_builddir/.libs/libshmddp-nccl.so.0"
[ -x "$run" ] || { echo "SKIP: $run not built (CUDA build only)"; exit 77; }
fail=0
got=$(SHMDDP_NCCL_LIB="$lib" LD_PRELOAD= "$run" sh -c 'printf %s "$LD_PRELOAD"')
[ "$got" = "$lib" ] || { echo "FAIL: LD_PRELOAD is '$got', not '$lib'"; fail=1; }
other=$(cd "$top_builddir/.libs" && pwd)/libshmddp-nccl.so
got=$(SHMDDP_NCCL_LIB="$lib" LD_PRELOAD="$other" "$run" sh -c 'printf %s "$LD_PRELOAD"')
[ "$got" = "$lib:$other" ] || { echo "FAIL: an existing LD_PRELOAD gives '$got'"; fail=1; }
SHMDDP_NCCL_LIB=/nonexistent/libshmddp-nccl.so.0 "$run" true 2> /dev/null
[ $? = 2 ] || { echo "FAIL: a missing library is not refused"; fail=1; }
"$run" > /dev/null 2>&1
[ $? = 2 ] || { echo "FAIL: no command is not refused"; fail=1; }
grep -q "^lib=.*/libshmddp-nccl.so.0" "$run" || { echo "FAIL: no installed library path in $run"; fail=1; }
[ $fail = 0 ] && echo "PASS: shmddp-nccl-run preloads the library"
exit $fail
