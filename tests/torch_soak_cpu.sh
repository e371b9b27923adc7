#!/bin/sh
# The checks of bench/torch_soak.py (the PyTorch soak of the NCCL front end), run on the CPU with
# gloo, two ranks, across a resize (new sizes, new models): correct results pass, and one result
# corrupted by --inject-error in each of several kinds is counted as exactly one error of that
# kind, nowhere else, with exit status 1; a kind that does not exist is refused before anything
# starts (exit 2).
# SKIP (77) where no python3 imports torch (Debian: apt-get install python3-torch, as .ci/run does).
set -u
. "${srcdir:-.}/tests/lib.sh"
soak=${srcdir:-.}/bench/torch_soak.py
if ! torch_python 'import torch.distributed as d; assert d.is_available(); import torch; print(torch.__version__)'; then
  echo "SKIP: no python3 here imports torch with torch.distributed (apt-get install python3-torch)"
  exit 77
fi
echo "torch_soak_cpu: PyTorch $v ($py3)"
export PYTHONDONTWRITEBYTECODE=1
bad() { echo "FAIL: $*"; fail=1; }
run() { # NAME ARGS...: the soak on 2 gloo ranks; its output in $tmp/NAME.log, the table in NAME.txt
  n=$1
  shift
  timeout 300 "$py3" "$soak" --backend gloo --device cpu --spawn 2 --max-mib 0.0625 --timeout 60 \
    --table "$tmp/$n.txt" "$@" > "$tmp/$n.log" 2>&1
}
# row KIND FILE: "calls errors" of KIND's row in a table.
row() { awk -v k="$1" '$1 == k { print $2, $3 }' "$2"; }
# Every kind the soak counts; fsdp2 only where this PyTorch has fully_shard (the table says so).
kinds="all_reduce.sum all_reduce.avg all_reduce.min all_reduce.max all_reduce.product reduce
  broadcast all_gather_into_tensor all_gather reduce_scatter_tensor reduce_scatter
  all_to_all_single.even all_to_all_single.uneven gather scatter send_recv.ring send_recv.pair
  barrier ddp setup"

# One run of 4 steps (new sizes and models after 2) with one result corrupted, from step 1 on,
# in each of several kinds: every kind must be called, each corrupted kind must count exactly one
# error (its other calls pass: correct results are accepted), every other kind none; exit 1.
inject="all_reduce.product reduce all_gather_into_tensor reduce_scatter_tensor"
inject="$inject all_to_all_single.uneven gather scatter send_recv.ring barrier ddp fsdp2"
run soak --steps 4 --resize-every 2 --inject-step 1 --inject-error "$(echo "$inject" | tr ' ' ,)"
rc=$?
[ "$rc" = 1 ] || bad "exit status $rc, not 1"
if [ -f "$tmp/soak.txt" ]; then
  if grep -q '^# fsdp2: skipped' "$tmp/soak.txt"; then
    inject=${inject% fsdp2}
    echo "torch_soak_cpu: $(grep '^# fsdp2: skipped' "$tmp/soak.txt" | cut -c3-)"
  else
    kinds="$kinds fsdp2"
  fi
  for k in $kinds; do
    want=0
    case " $inject " in *" $k "*) want=1 ;; esac
    # shellcheck disable=SC2046 # the row's two numbers as $1 and $2
    set -- $(row "$k" "$tmp/soak.txt")
    if [ $# -ne 2 ] || [ "$1" -le "$want" ] || [ "$2" != "$want" ]; then
      bad "kind $k: calls/errors '$*', want more calls than errors and $want error(s)"
    fi
  done
  # 6 dtypes a step for each collective; each model built twice and stepped 4 times.
  [ "$(row all_to_all_single.uneven "$tmp/soak.txt")" = "24 1" ] ||
    bad "all_to_all_single.uneven '$(row all_to_all_single.uneven "$tmp/soak.txt")', want 24 calls, 1 error"
  [ "$(row ddp "$tmp/soak.txt")" = "6 1" ] || bad "ddp '$(row ddp "$tmp/soak.txt")', want 6 calls, 1 error"
  n=$(echo "$inject" | wc -w)
  tail -n 1 "$tmp/soak.txt" | grep -qE "^soak: [0-9]+ calls, $n errors\$" ||
    bad "last line '$(tail -n 1 "$tmp/soak.txt")', want $n errors"
else
  bad "the soak wrote no table"
fi

# What gloo lacks is emulated exactly: the integers through float64, whose 53 bits hold the
# soak's values (up to 2^46; float32 would round them), averages through sums. --gloo-lacks
# makes these emulations run whatever this PyTorch's gloo serves: 0 errors, exit 0.
lacks="all_reduce.sum:int64 all_reduce.max:int64 all_reduce.avg:int64 reduce.sum:int64
  reduce.avg:int32 reduce_scatter_tensor.sum:int64 broadcast:int64 all_gather:int64
  all_gather_into_tensor:int32 all_to_all_single:int64 gather:int64 scatter:int64
  send_recv.ring:int64 send_recv.pair:int32"
run emulated --steps 2 --resize-every 1 --gloo-lacks "$(echo $lacks | tr ' ' ,)"
rc=$?
[ "$rc" = 0 ] || bad "--gloo-lacks: exit status $rc, not 0"
if [ -f "$tmp/emulated.txt" ]; then
  grep -q 'named by --gloo-lacks' "$tmp/emulated.txt" || bad "--gloo-lacks: the header does not name the emulated calls"
  tail -n 1 "$tmp/emulated.txt" | grep -qE '^soak: [1-9][0-9]* calls, 0 errors$' ||
    bad "--gloo-lacks: last line '$(tail -n 1 "$tmp/emulated.txt")', want 0 errors"
else
  bad "--gloo-lacks: the soak wrote no table"
fi

# A kind that does not exist: refused, naming it, before any rank starts.
"$py3" "$soak" --backend gloo --device cpu --spawn 2 --inject-error no_such_kind > "$tmp/bad.log" 2>&1
rc=$?
[ "$rc" = 2 ] || bad "--inject-error no_such_kind: exit status $rc, not 2"
grep -q 'no_such_kind: not a kind' "$tmp/bad.log" || bad "--inject-error no_such_kind: message: $(tail -n 1 "$tmp/bad.log")"

[ $fail -eq 0 ] || { tail_logs 40; exit 1; }
echo "ok: $(tail -n 1 "$tmp/soak.txt"): one in each of the $(echo "$inject" | wc -w) kinds corrupted"
