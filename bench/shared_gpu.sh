#!/usr/bin/env bash
# bench/shared_gpu.sh OUTDIR [PARTS...] — many ranks on one GPU (the co-located path), on
# the GPU machine, from a configured and built CUDA tree (run in its root; nothing is built here:
# `make -j && make -j check TESTS=` first, so the test programs exist). Every rank uses GPU 0.
#
# PARTS (default: all of them, in this order, which needs about 9 minutes: give them in three
# runs, `handoff tests sweep` (about 3.5 min), `trainer`, `torch`, each under the budget):
#   handoff dev/coloc_handoff: one hand-over between 2 and 4 processes under each way of waiting
#           for the peers' events (stream, host, per-rank kernels, mixed, driver)   < 1 min
#           -> OUTDIR/handoff.tsv and handoff.log
#   tests   check_coloc_cuda (every collective, 2-4 processes and threads, reuse, graphs) under
#           each wait of TEST_WAITS (default "host leader"; host is the default, leader mixes
#           host and stream waits), and tests/kill_rank_gpu.sh (a SIGKILLed rank sharing the
#           GPU, member and leader: the co-located path under host and stream waits, and
#           under MPS the in-kernel path of small calls too)                   ~1.5 min
#   sweep   all-reduce 8 B..64 MiB, 2 and 4 ranks, under each wait of SWEEP_WAITS (default
#           "host stream leader"), the device-to-device copy in the same run, and the
#           in-kernel path (-a direct) at small sizes beside the co-located one  ~1 min
#           -> OUTDIR/shared_gpu_1xh200.tsv (header: commit, commands) and sweep.log
#   trainer ./train --nproc 1, 2, 4 on GPU 0 at one global batch (24), --sync-bn off and on  ~2 min
#   torch   PyTorch DDP through libshmddp-nccl.so: 1 process (batch 12 and 24) and 2 and 4
#           ranks (batch 6 each), with and without SyncBatchNorm; a SIGKILLed worker  ~3 min
# TORCH_RANKS (default "1 2 4"): the torch part's rank counts (1: batch 12 and 24; 2, 4: batch 6
# each), e.g. "2 4" to repeat only the shared runs under another SHMDDP_COLOC_WAIT; TORCH_KILL
# (default 1; 0 leaves the killed worker out).
# MPS=1: every part runs under a private MPS daemon started by the programs themselves, as a user
# would: ./train --mps on, and `shmddp-nccl-run --mps` around torchrun, the tests and the sweep
# (SHMDDP_NCCL_LIB=/dev/null there: the wrapper's daemon without the NCCL preload; ld.so warns
# once per process and goes on). The sweep then runs auto (the choice under MPS), and coloc and
# direct forced up to 16 MiB (what captured calls take, against the co-located path), and the
# small sizes without MPS in the same run for the ratio; the trainer part adds a run without
# the CUDA graph and a stopped (SIGTERM) and a broken (a rank SIGKILLed) job; the handoff part is
# left out. After each part: no daemon, no folder of ours left. Budget 470 s by default; about
# 9 minutes in two runs:
#   MPS=1 bench/shared_gpu.sh OUTDIR/a tests sweep trainer     (~6 min)
#   MPS=1 bench/shared_gpu.sh OUTDIR/b torch                   (~3 min)
# Writes OUTDIR/summary.txt (what each part showed, and how long it took) and one log per part.
# Every part has its own time limit, cut to what is left of BUDGET_S (default 235 s) from the
# start; a part that finds less than 10 s left is skipped and says so. The exit status is 1 when
# any part failed or was skipped.
set -u
OUTARG=${1:?usage: bench/shared_gpu.sh OUTDIR [handoff tests sweep trainer torch]}
shift
MPS=${MPS:-0}
TORCH_RANKS=${TORCH_RANKS:-1 2 4}
TORCH_KILL=${TORCH_KILL:-1}
if [ "$MPS" = 1 ]; then
  PARTS=${*:-tests sweep trainer torch}
  BUDGET_S=${BUDGET_S:-470}
else
  PARTS=${*:-handoff tests sweep trainer torch}
  BUDGET_S=${BUDGET_S:-235}
fi
. "$(dirname "$0")/lib.sh"
bench_out "$OUTARG"
# OUT stays small (< 2 MiB): the trainer's run folders (checkpoints, predictions) go to a scratch
# folder removed at the end, and long logs keep their head, their error lines and their tail
# (trim_logs).
SCR=$(mktemp -d "${TMPDIR:-/tmp}/shared_gpu.XXXXXX")
trap 'rm -rf "$SCR"' EXIT
trim_logs() {
  local f n
  for f in "$OUT"/*.log; do
    [ -f "$f" ] && [ "$(wc -c < "$f")" -gt 65536 ] || continue
    n=$(wc -l < "$f")
    { head -n 30 "$f"
      echo "... [$n lines in all: the first 30, the lines with errors, the last 200] ..."
      grep -nE 'FAIL|:F:|:E:|[Ee]rror|Traceback' "$f" | head -n 60
      echo "..."
      tail -n 200 "$f"; } | cut -c1-400 > "$f.cut" && mv "$f.cut" "$f"
  done
}
export CUDA_VISIBLE_DEVICES=${COLOC_GPU:-0} NCCL_NVLS_ENABLE=0
has_part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
bench_header "shared GPU: ranks sharing GPU ${CUDA_VISIBLE_DEVICES} (co-located path)$([ "$MPS" = 1 ] && echo ", under private MPS daemons")" OUTDIR "$PARTS"
note "# environment: MPS=$MPS SHMDDP_COLOC_WAIT=${SHMDDP_COLOC_WAIT:-(default)} SHMDDP_ALGO=${SHMDDP_ALGO:-(default)}"

# left_s: seconds left of the budget.
left_s() { echo $((BUDGET_S - $(elapsed))); }

# sweep_head COLUMN: the sweep table's header lines (COLUMN: what its second column says).
sweep_head() {
  echo "# all-reduce, f32 sum, out-of-place, ranks sharing one GPU (CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES); busbw = algbw * 2(n-1)/n"
  echo "# column $1"
  echo "# rows 'memcpy': a device-to-device cudaMemcpyAsync of 64 MiB in the same run (rank 0, the others idle)"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $COMMIT"
  nvidia-smi -L 2>/dev/null | sed 's/^/# gpu: /'
}

# MPS=1: $MPSRUN CMD... runs CMD under the wrapper's private daemon, without its preload;
# mps_left NAME notes whatever of ours is left (a daemon, a folder), which must be nothing.
RUNNER=./shmddp-nccl-run
mps_left() {
  [ "$MPS" = 1 ] || return 0
  local procs dirs
  procs=$(pgrep -u "$(id -u)" -f 'nvidia-cuda-mps-(control|server)' | tr '\n' ' ')
  dirs=$(ls -d "${XDG_RUNTIME_DIR:-/nonexistent}"/shmddp-mps-* "${TMPDIR:-/tmp}"/shmddp-mps-* /tmp/shmddp-mps-* 2>/dev/null | sort -u | tr '\n' ' ')
  if [ -n "$procs$dirs" ]; then
    FAILED=1
    note "$1: LEFT BEHIND: MPS processes [$procs] folders [$dirs]"
  else
    note "$1: nothing left (no MPS daemon, no folder)"
  fi
}
MPSRUN=
if [ "$MPS" = 1 ]; then
  if [ ! -x "$RUNNER" ] || ! command -v nvidia-cuda-mps-control >/dev/null; then
    note "MPS=1: $RUNNER (a CUDA build) and nvidia-cuda-mps-control on PATH are needed"
    exit 1
  fi
  MPSRUN="env SHMDDP_NCCL_LIB=/dev/null $RUNNER --mps"
  note "# compute mode before: $(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | head -1)"
fi

if has_part handoff && [ "$MPS" = 1 ]; then
  note "handoff: left out under MPS=1 (dev/coloc_handoff measures the ways of waiting; see the README)"
elif has_part handoff; then
  if [ -x dev/coloc_handoff ]; then
    part handoff 60 dev/coloc_handoff -r 2,4 -n 200 -w 20 -o "$OUT/handoff.tsv"
    sed -n '/^strategy/,$p' "$OUT/handoff.log" | sed 's/^/handoff: /' | tee -a "$SUM"
  else
    note "handoff: dev/coloc_handoff is missing (a build without CUDA?)"
    FAILED=1
  fi
fi

if has_part tests; then
  for p in tests/check_coloc_cuda tools/allreduce_bench; do
    [ -x "$p" ] || { note "tests: $p is missing: build with 'make -j && make -j check TESTS='"; FAILED=1; }
  done
  for w in ${TEST_WAITS:-host leader}; do
    part check_coloc_cuda_$w 100 $MPSRUN env SHMDDP_COLOC_WAIT=$w CK_VERBOSITY=normal tests/check_coloc_cuda
    grep -E "^[0-9]+%: Checks|:F:|:E:" "$OUT/check_coloc_cuda_$w.log" | head -20 | sed "s/^/  ($w waits) /" | tee -a "$SUM"
  done
  part kill_rank_gpu 120 $MPSRUN env srcdir=. top_builddir=. KILL_WAITS="host stream" sh tests/kill_rank_gpu.sh
  grep -E "path, victim rank|FAIL|note: not under MPS" "$OUT/kill_rank_gpu.log" | tee -a "$SUM"
  mps_left tests
fi

if has_part sweep && [ "$MPS" = 1 ]; then
  B=./tools/allreduce_bench
  TSV="$OUT/shared_gpu_mps_1xh200.tsv"
  {
    sweep_head "mode: mps-auto (the library's choice under a private MPS daemon), mps-coloc / mps-direct (forced, for the size limit), plain-auto (no MPS, the same run)"
    echo "# command: SHMDDP_NCCL_LIB=/dev/null ./shmddp-nccl-run --mps $B --device cuda --nproc N [-a ALGO] -b 8 -e 64M|16M -f 2 -n 20 -w 5 -c 1 [--copy-bw] --tsv FILE"
    echo "# command (plain-auto): $B --device cuda --nproc N -b 8 -e 64K -f 8 -n 10 -w 2 -c 1 --tsv FILE"
  } > "$TSV"
  : > "$OUT/sweep.log"
  n=0
  for run in "mps-auto|2|-b 8 -e 64M -f 2 -n 20 -w 5 --copy-bw" "mps-auto|4|-b 8 -e 64M -f 2 -n 20 -w 5 --copy-bw" \
             "mps-coloc|2|-a coloc -b 8 -e 16M -f 4 -n 20 -w 5" "mps-direct|2|-a direct -b 8 -e 16M -f 4 -n 20 -w 5" \
             "mps-coloc|4|-a coloc -b 8 -e 16M -f 4 -n 20 -w 5" "mps-direct|4|-a direct -b 8 -e 16M -f 4 -n 20 -w 5" \
             "plain-auto|2|-b 8 -e 64K -f 8 -n 10 -w 2" "plain-auto|4|-b 8 -e 64K -f 8 -n 10 -w 2"; do
    n=$((n + 1))
    IFS='|' read -r mode ranks args <<< "$run"
    limit=$(left_s)
    [ "$limit" -gt 60 ] && limit=60
    if [ "$limit" -lt 10 ]; then FAILED=1; note "sweep: $mode $ranks ranks skipped: the budget is spent"; continue; fi
    wrap=; [ "${mode%%-*}" = mps ] && wrap=$MPSRUN
    echo "+ $wrap $B --device cuda --nproc $ranks $args -c 1 --tsv $OUT/t$n.tsv" >> "$OUT/sweep.log"
    timeout -k 10 "$limit" $wrap $B --device cuda --nproc "$ranks" $args -c 1 --tsv "$OUT/t$n.tsv" \
      >> "$OUT/sweep.log" 2>&1 || { FAILED=1; note "sweep: $mode $ranks ranks failed (see sweep.log)"; }
    [ -f "$OUT/t$n.tsv" ] || continue
    awk -v r="$ranks" -v m="$mode" -v first="$n" 'NR == 1 { if (first == 1) print "ranks\tmode\t" $0; next } { print r "\t" m "\t" $0 }' \
      "$OUT/t$n.tsv" >> "$TSV"
    rm -f "$OUT/t$n.tsv"
  done
  grep -m2 "transport" "$OUT/sweep.log" | sed 's/^/sweep: /' | tee -a "$SUM"
  awk -F'\t' '
    /^#/ || $1 == "ranks" { next }
    $7 == "memcpy" { copy[$1] = $9; next }
    $3 <= 65536 { k = $1 "," $2; if ($8 > worst[k]) worst[k] = $8 }
    $2 == "mps-auto" && $3 == 67108864 { big_bus[$1] = $10 }
    $2 != "plain-auto" { t[$1 "," $2 "," $3] = $8; sz[$3] = 1 }
    END {
      for (r = 2; r <= 4; r += 2) {
        printf "sweep: %d ranks, 8 B..64 KiB, slowest: under MPS %.1f us (target %d), without %.1f us: %.1fx faster\n", r, worst[r ",mps-auto"], (r == 2 ? 50 : 100), worst[r ",plain-auto"], (worst[r ",mps-auto"] > 0 ? worst[r ",plain-auto"] / worst[r ",mps-auto"] : 0)
        printf "sweep: %d ranks, 64 MiB under MPS: busbw %.1f GB/s, copy %.1f GB/s: busbw/copy %.2f (target 0.5)\n", r, big_bus[r], copy[r], (copy[r] > 0 ? big_bus[r] / copy[r] : 0)
        line = ""
        for (b in sz) if (t[r ",mps-coloc," b] && t[r ",mps-direct," b]) line = line sprintf(" %s:%s/%s", b, t[r ",mps-direct," b], t[r ",mps-coloc," b])
        printf "sweep: %d ranks, bytes:direct/coloc us under MPS (the size limit):%s\n", r, line
      }
    }' "$TSV" | tee -a "$SUM"
  awk -F'\t' '!/^#/ && $1 != "ranks" && $11 + 0 > 0 { bad++ } END { if (bad) print "sweep: " bad " rows with wrong results" }' "$TSV" | tee -a "$SUM"
  mps_left sweep
elif has_part sweep; then
  B=./tools/allreduce_bench
  TSV="$OUT/shared_gpu_1xh200.tsv"
  WAITS=${SWEEP_WAITS:-host stream leader}
  C2="$B --device cuda --nproc 2 -b 8 -e 64M -f 2 -n 20 -w 5 -c 1 --copy-bw"
  C4="$B --device cuda --nproc 4 -b 8 -e 64M -f 2 -n 20 -w 5 -c 1 --copy-bw"
  C0="$B --device cuda --nproc 2 -a direct -b 8 -e 64K -f 8 -n 5 -w 2 -c 1"
  {
    sweep_head "waits: SHMDDP_COLOC_WAIT of the run (host: the default; '-': the in-kernel path)"
    echo "# command (ranks 2, each of: $WAITS): SHMDDP_COLOC_WAIT=W $C2 --tsv FILE"
    echo "# command (ranks 4, each of: $WAITS): SHMDDP_COLOC_WAIT=W $C4 --tsv FILE"
    echo "# command (ranks 2, the in-kernel path, beside the co-located one): $C0 --tsv FILE"
  } > "$TSV"
  : > "$OUT/sweep.log"
  n=0
  runs=()
  for w in $WAITS; do runs+=("$w|$C2" "$w|$C4"); done
  runs+=("-|$C0")
  for run in "${runs[@]}"; do
    n=$((n + 1))
    w=${run%%|*}
    c=${run#*|}
    ranks=$(echo "$c" | sed 's/.*--nproc \([0-9]*\).*/\1/')
    limit=$(left_s)
    [ "$limit" -gt 60 ] && limit=60
    if [ "$limit" -lt 10 ]; then
      FAILED=1
      note "sweep: '$c' ($w waits) skipped: the budget of $BUDGET_S s is spent"
      continue
    fi
    echo "+ SHMDDP_COLOC_WAIT=$w $c --tsv $OUT/t$n.tsv" >> "$OUT/sweep.log"
    t0=$(date +%s)
    SHMDDP_COLOC_WAIT=$([ "$w" = - ] && echo host || echo "$w") timeout -k 10 "$limit" $c \
      --tsv "$OUT/t$n.tsv" >> "$OUT/sweep.log" 2>&1 || { FAILED=1; note "sweep: '$c' ($w waits) failed (see sweep.log)"; }
    echo "# ($(($(date +%s) - t0)) s)" >> "$OUT/sweep.log"
    [ -f "$OUT/t$n.tsv" ] || continue
    awk -v r="$ranks" -v w="$w" -v first="$n" 'NR == 1 { if (first == 1) print "ranks\twaits\t" $0; next } { print r "\t" w "\t" $0 }' \
      "$OUT/t$n.tsv" >> "$TSV"
    rm -f "$OUT/t$n.tsv"
  done
  # The targets, read back from the table: small sizes (8 B..64 KiB) and 64 MiB against the copy.
  awk -F'\t' '
    /^#/ || $1 == "ranks" { next }
    $7 == "memcpy" { copy[$1 "," $2] = $9; next }
    $7 == "coloc" && $3 <= 65536 { k = $1 "," $2; if ($8 > worst[k]) worst[k] = $8 }
    $7 == "coloc" && $3 == 4194304 { mid[$1 "," $2] = $8 }
    $7 == "direct" && $3 <= 65536 { if ($8 > old[$1]) old[$1] = $8 }
    $7 == "coloc" && $3 == 67108864 { big_alg[$1 "," $2] = $9; big_bus[$1 "," $2] = $10 }
    END {
      for (k in worst) { split(k, a, ","); printf "sweep: %s ranks, %s waits, 8 B..64 KiB: slowest %.1f us (target %d); 4 MiB: %.1f us\n", a[1], a[2], worst[k], (a[1] == 2 ? 50 : 100), mid[k] }
      for (r in old) printf "sweep: %s ranks, the in-kernel path, 8 B..64 KiB: slowest %.1f us\n", r, old[r]
      for (k in big_alg) { split(k, a, ","); printf "sweep: %s ranks, %s waits, 64 MiB: algbw %.1f GB/s, busbw %.1f GB/s; copy %.1f GB/s: busbw/copy %.2f (target 0.5)\n", a[1], a[2], big_alg[k], big_bus[k], copy[k], (copy[k] > 0 ? big_bus[k] / copy[k] : 0) }
    }' "$TSV" | sort | tee -a "$SUM"
  awk -F'\t' '!/^#/ && $1 != "ranks" && $11 + 0 > 0 { bad++ } END { if (bad) print "sweep: " bad " rows with wrong results" }' "$TSV" | tee -a "$SUM"
fi

if has_part trainer; then
  # One global batch of 24 images: 1 rank x 24, 2 x 12, 4 x 6 (the reference U-Net, bf16).
  common="--device cuda --widths reference --image-size 256 --classes 4 --optimizer sgd \
--momentum 0.9 --lr 0.01 --warmup-steps 1 --steps 38 --timing-warmup 8 --train-size 1200 \
--val-size 12 --workers 8 --log-every 10 --timeout 60 --precision bf16"
  printf 'nproc\tbatch_per_rank\tsyncbn\timages_per_s\tpeak_mib\n' > "$OUT/trainer.tsv"
  for sb in off on; do
    for np in 1 2 4; do
      bs=$((24 / np))
      name=train_np${np}_sb${sb}
      part "$name" 150 ./train $common --nproc $np --batch-size $bs --sync-bn $sb $([ "$MPS" = 1 ] && echo --mps on) --out "$SCR/$name"
      ips=$(grep -o 'images_per_s=[0-9.]*' "$OUT/$name.log" | tail -1 | cut -d= -f2)
      peak=$(grep -o 'peak_mib=[0-9,]*' "$OUT/$name.log" | tail -1 | cut -d= -f2)
      grep -m2 -iE "share|MPS:" "$OUT/$name.log" | sed 's/^/  start line: /' | tee -a "$SUM"
      printf '%s\t%s\t%s\t%s\t%s\n' "$np" "$bs" "$sb" "${ips:-failed}" "${peak:-}" >> "$OUT/trainer.tsv"
    done
  done
  # Under MPS the step is replayed as a CUDA graph (captured collectives take the in-kernel
  # algorithms at every size): one run without, for the trade-off.
  if [ "$MPS" = 1 ]; then
    name=train_np2_sbon_nograph
    part "$name" 150 ./train $common --nproc 2 --batch-size 12 --sync-bn on --mps on --cuda-graph off --out "$SCR/$name"
    note "trainer: --nproc 2 --sync-bn on --cuda-graph off: $(grep -o 'images_per_s=[0-9.]*' "$OUT/$name.log" | tail -1) (graph on: the table)"
  fi
  # Under MPS: the daemon is stopped and its folder removed when the job is stopped (SIGTERM to
  # the launcher; a background job of a script ignores SIGINT) or loses a rank (SIGKILL): started,
  # waited for until its log has steps.
  if [ "$MPS" = 1 ]; then
    for how in TERM KILL; do
      name=train_stop_$how
      ./train $common --nproc 2 --batch-size 12 --sync-bn on --mps on --steps 100000 --log-every 1 \
        --out "$SCR/$name" > "$OUT/$name.log" 2>&1 &
      tp=$!
      i=0
      while [ $i -lt 600 ] && kill -0 $tp 2>/dev/null && ! grep -q '"step"' "$SCR/$name/log.jsonl" 2>/dev/null; do
        sleep 0.1; i=$((i + 1))
      done
      if [ "$how" = TERM ]; then
        kill -TERM $tp
      else # a rank: a child of the launcher that is not the daemon
        victim=$(for c in $(pgrep -P $tp); do grep -qa mps "/proc/$c/cmdline" || echo "$c"; done | tail -1)
        kill -KILL "$victim" 2>/dev/null
      fi
      t0=$(date +%s)
      timeout 60 tail --pid=$tp -f /dev/null || { note "trainer: $how: still running after 60 s: killed"; kill -KILL $tp; }
      wait $tp
      rc=$?
      note "trainer: SIG$how test: exit status $rc after $(($(date +%s) - t0)) s; $(grep -m1 -E 'MPS:' "$OUT/$name.log")"
      mps_left "trainer after $how"
    done
  fi
  # Too many ranks for the GPU's memory: refused before any rank starts (exit status 2).
  ./train $common --nproc 8 --batch-size 512 --sync-bn off --out "$SCR/train_too_big" \
    > "$OUT/train_too_big.log" 2>&1
  rc=$?
  note "trainer: 8 ranks x batch 512 on one GPU: exit status $rc (want 2): $(grep -m1 'need about' "$OUT/train_too_big.log" | cut -c1-200)"
  [ "$rc" -eq 2 ] || FAILED=1
  mps_left trainer
  awk -F'\t' 'NR > 1 { ips[$1 "," $3] = $4 } END {
      split("off on", sbs, " ")
      for (i = 1; i <= 2; i++) { b = ips["1," sbs[i]]
        for (n = 2; n <= 4; n *= 2) printf "trainer: --nproc %d --sync-bn %s: %s img/s vs --nproc 1 %s: %.2f (target %s)\n", n, sbs[i], ips[n "," sbs[i]], b, (b > 0 ? ips[n "," sbs[i]] / b : 0), (sbs[i] == "on" ? "0.85" : "0.9") }
    }' "$OUT/trainer.tsv" | tee -a "$SUM"
fi

if has_part torch; then
  LIB=$(ls .libs/libshmddp-nccl.so 2>/dev/null | head -1)
  if [ -z "$LIB" ] || ! python3 -c "import torch" 2>/dev/null; then
    note "torch: SKIP (no .libs/libshmddp-nccl.so or no PyTorch)"
  else
    LIB=$(readlink -f "$LIB")
    export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
    PRE="env LD_PRELOAD=$LIB"
    [ "$MPS" = 1 ] && PRE="env SHMDDP_NCCL_LIB=$LIB $RUNNER --mps"
    D="bench/nccl/ddp_train.py --steps 40 --warmup 15"
    printf 'ranks\tbatch_per_rank\tsyncbn\timages_per_s\n' > "$OUT/torch.tsv"
    for sbn in "" --syncbn; do
      for cfg in "1 12" "1 24" "2 6" "4 6"; do
        set -- $cfg
        case " $TORCH_RANKS " in *" $1 "*) ;; *) continue ;; esac
        name=torch_r$1_b$2${sbn:+_syncbn}
        part "$name" 150 $PRE python3 -m torch.distributed.run --standalone \
          --nproc-per-node "$1" $D --batch "$2" $sbn --out "$OUT/$name.json"
        ips=$(grep -o '"img_s": [0-9.]*' "$OUT/$name.json" 2>/dev/null | cut -d' ' -f2)
        printf '%s\t%s\t%s\t%s\n' "$1" "$2" "${sbn:-none}" "${ips:-failed}" >> "$OUT/torch.tsv"
      done
    done
    # the ratios need the one-process runs (TORCH_RANKS without 1: the table only)
    case " $TORCH_RANKS " in *" 1 "*) ;; *) false ;; esac && awk -F'\t' 'NR > 1 { ips[$1 "," $2 "," $3] = $4 } END {
        split("none --syncbn", s, " ")
        for (i = 1; i <= 2; i++) {
          printf "torch: 2 ranks x 6 %s: %s img/s vs 1 x 12 %s: %.2f (target %s)\n", s[i], ips["2,6," s[i]], ips["1,12," s[i]], (ips["1,12," s[i]] > 0 ? ips["2,6," s[i]] / ips["1,12," s[i]] : 0), (i == 1 ? "0.9" : "0.8")
          printf "torch: 4 ranks x 6 %s: %s img/s vs 1 x 24 %s: %.2f (target %s)\n", s[i], ips["4,6," s[i]], ips["1,24," s[i]], (ips["1,24," s[i]] > 0 ? ips["4,6," s[i]] / ips["1,24," s[i]] : 0), (i == 1 ? "0.9" : "0.8")
        }
      }' "$OUT/torch.tsv" | tee -a "$SUM"
    if [ "$TORCH_KILL" = 1 ]; then
      part torch_kill 120 $PRE python3 bench/nccl/kill_worker.py --timeout 60 \
        --hard-timeout 60 --out "$OUT/torch_kill.json"
      grep -a '^RESULT ' "$OUT/torch_kill.log" | tail -1 | cut -c1-300 | sed 's/^/torch kill: /' | tee -a "$SUM"
    fi
    grep -m1 "MPS: private daemon" "$OUT/torch_r2_b6.log" | sed 's/^/torch: /' | tee -a "$SUM"
    mps_left torch
  fi
fi
[ "$MPS" = 1 ] && note "# compute mode after: $(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | head -1)"
trim_logs
note "OUTDIR: $(du -sk "$OUT" | cut -f1) KiB"
note "done: $([ $FAILED -eq 0 ] && echo "every part passed" || echo "some part FAILED (see the logs)")"
exit $FAILED
