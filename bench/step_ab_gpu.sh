#!/bin/sh
# bench/step_ab_gpu.sh PATCH OUT_DIR [PATCH2 [PATCH3]] — A/B of changes to the training step, in
# one run on the GPU machine (1 GPU): A is this tree, B (and C, D: up to three candidates) is
# this tree with a patch applied (`git diff main BRANCH > PATCH` or `git format-patch -1 COMMIT
# --stdout > PATCH`; the tree need not be a git checkout). For each: the per-category cost
# inside the graph-replayed step (dev/ops_cuda_bench's ablation), the trainer's images/s (bf16,
# 68 steps, TRAIN_ROUNDS times, interleaved A B C A B C) and the default job (./train's defaults, 8000 steps)
# with its per-step losses compared with A's; each candidate's GPU test suites first. Each
# trainer line also gives the % of the step the run waited for its batches (data_wait): a run
# that waited measured the host's loader, not the step, and is no evidence either way. ~3 min for
# one candidate, ~1.5 min more for each further one; the builds (bA in the tree's root, the
# patched candidates' in copies of it) run side by side. From the tree's root:
#   sh bench/step_ab_gpu.sh X.patch OUT_DIR
# A candidate may carry environment settings for its runs (suites, ops table, trainer, default
# job): PATCH:VAR=value[,VAR=value...], e.g. X.patch:SHMDDP_HEAD_FUSED=forward; and "-" for the
# patch is this tree unchanged (-:VAR=value measures a setting alone, on A's build). A candidate
# may be several patches applied in order, joined by "+" (X.patch+Y.patch: a variant of X kept as
# a small patch on top of it).
# Environment: PARTS (default "tests ops train default"), CONFIGURE_FLAGS (default
# --with-cuda-arch=90), PRECS (the trainer's precisions, default bf16; e.g. "bf16 fp32"),
# OPS_PRECS (the precisions of the in-graph category table, default bf16; e.g. "bf16 fp32"),
# TRAIN_ROUNDS (the trainer's runs of each variant, interleaved, default 2; each precision's
# summary line per variant is the median of its runs that did not wait for data),
# TEST_VARIANTS (the candidates whose GPU suites run, default all; e.g. "B" where C and D are
# B's patch with other settings), TEST_SUITES (the suites they run, each up to 120 s, default
# "check_ops_cuda check_model_cuda check_plan"; SUITE:CASE runs one test case of a suite, e.g.
# check_ddp:gpu).
# Writes OUT_DIR/ab.txt (the summary; bench/results/ab_*_1xh200.txt) and OUT_DIR/{A,B,...}_*
# logs.
set -u
. "$(dirname "$0")/lib.sh"
first=${1:?usage: bench/step_ab_gpu.sh PATCH OUT_DIR [PATCH2 [PATCH3]]}
O=${2:?usage: bench/step_ab_gpu.sh PATCH OUT_DIR [PATCH2 [PATCH3]]}
shift 2
PARTS=${PARTS:-"tests ops train default"}
PRECS=${PRECS:-bf16}
OPS_PRECS=${OPS_PRECS:-bf16}
TRAIN_ROUNDS=${TRAIN_ROUNDS:-2}
case $TRAIN_ROUNDS in '' | *[!0-9]* | 0) echo "step_ab_gpu: TRAIN_ROUNDS must be a count, 1 or more" >&2; exit 2 ;; esac
TEST_VARIANTS=${TEST_VARIANTS:-"B C D"}
TEST_SUITES=${TEST_SUITES:-"check_ops_cuda check_model_cuda check_plan"}
flags=${CONFIGURE_FLAGS:---with-cuda-arch=90}
mkdir -p "$O"
sum="$O/ab.txt"
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
say() { echo "$*" >> "$sum"; }
src=$(pwd)
abs() { case $1 in /*) echo "$1" ;; *) echo "$src/$1" ;; esac; }
# the candidates: letter and patch
set -- "$first" "$@"
[ $# -le 3 ] || { echo "step_ab_gpu: at most 3 patches per run" >&2; exit 2; }
variants=""
for p in "$@"; do
  case $variants in "") v=B ;; B) v=C ;; "B C") v=D ;; esac
  variants="${variants:+$variants }$v"
  case $p in *:*) pe=${p#*:} p=${p%%:*} ;; *) pe="" ;; esac
  eval "env_$v=\$(echo \"\$pe\" | tr ',' ' ')"
  if [ "$p" = - ]; then
    eval "patch_$v=-"
  else
    ps=""
    for q in $(echo "$p" | tr '+' ' '); do
      q=$(abs "$q")
      [ -r "$q" ] || { echo "step_ab_gpu: cannot read $q" >&2; exit 2; }
      ps="${ps:+$ps+}$q"
    done
    eval "patch_$v=\$ps"
  fi
done
all="A $variants"
pname() { if [ "$1" = - ]; then echo nothing; else for q in $(echo "$1" | tr '+' ' '); do basename "$q"; done | paste -sd+ -; fi; }
say "# step A/B: $(date -u +%Y-%m-%dT%H:%M:%SZ); A = this tree ($COMMIT)$(for v in $variants; do eval "printf ', %s = A + %s%s' $v \"\$(pname \"\$patch_$v\")\" \"\${env_$v:+ with \$env_$v}\""; done)"
nvidia-smi -L | sed 's/^/# /' >> "$sum"
build() { # tree dir
  (cd "$1" && { [ -x configure ] || ./autogen.sh > /dev/null 2>&1; } && mkdir -p "$2" && cd "$2" &&
    ../configure -q $flags > /dev/null 2>&1 && make -j$jobs > /dev/null 2>&1 &&
    make -j$jobs $(for t in $TEST_SUITES; do echo "tests/${t%%:*}"; done) > /dev/null 2>&1)
}
# a "-" candidate (settings only) runs A's build; each patched one gets a copy of the tree and a
# build of its own, side by side
tree_A=$src bdir_A=bA builds=A
for v in $variants; do
  eval "p=\$patch_$v"
  if [ "$p" = - ]; then
    eval "tree_$v=\$src bdir_$v=bA"
    continue
  fi
  t=${TMPDIR:-/tmp}/step_ab_$v
  rm -rf "$t"
  mkdir -p "$t"
  tar --exclude=./bA --exclude=./bB --exclude=./bC --exclude=./bD --exclude=./b --exclude=./.git \
    -cf - . | tar -C "$t" -xf -
  for q in $(echo "$p" | tr '+' ' '); do
    if ! (cd "$t" && patch -p1 -s < "$q") >> "$sum" 2>&1; then
      say "FAIL: $q does not apply"; cat "$sum"; exit 1
    fi
    # a patch that changes the build description gets a fresh configure (autogen.sh in build())
    if grep -Eq '^\+\+\+ b/(configure\.ac|.*Makefile\.am|.*local\.mk)' "$q"; then
      rm -f "$t/configure"
    fi
  done
  eval "tree_$v=\$t bdir_$v=b$v"
  builds="$builds $v"
done
set -- $builds
jobs=$((16 / $#))
pids=""
for v in $builds; do
  eval "build \"\$tree_$v\" \$bdir_$v" &
  pids="$pids $!"
done
line="builds:"; ok=1; set -- $builds
for pid in $pids; do
  wait "$pid"; rc=$?
  line="$line $1 rc $rc,"; [ $rc = 0 ] || ok=0
  shift
done
say "$line ($(el) s)"
[ $ok = 1 ] || { cat "$sum"; exit 1; }
for v in $all; do eval "$v=\$tree_$v/\$bdir_$v"; done
if has tests; then
  for v in $variants; do
    case " $TEST_VARIANTS " in *" $v "*) ;; *) continue ;; esac
    eval b=\$$v e=\${env_$v:-}
    for t in $TEST_SUITES; do
      c=""
      case $t in *:*) c=${t#*:} t=${t%%:*} ;; esac
      lg="$O/${v}_$t${c:+_$c}.log" # a log per suite and case: two cases of one suite keep theirs
      env $e ${c:+CK_RUN_CASE=$c} timeout 120 "$b/tests/$t" > "$lg" 2>&1
      say "$v $t${c:+ ($c)}: rc $? $(grep -E 'Checks|SKIP' "$lg" | tail -1)"
    done
  done
fi
if has ops; then
 for prec in $OPS_PRECS; do
  files=""
  for v in $all; do
    eval b=\$$v e=\${env_$v:-}
    env $e timeout 90 "$b/dev/ops_cuda_bench" -p $prec -t 0 > "$O/${v}_ops_$prec.txt" 2>&1
    files="$files $O/${v}_ops_$prec.txt"
  done
  say "## inside the CUDA graph, $prec (ms): category, $(echo $all | sed 's/ /, /g')"
  python3 - $files >> "$sum" 2>&1 <<'EOF'
import re, sys
def table(p):
    out, on, step = {}, False, None
    for line in open(p):
        m = re.match(r"in the CUDA graph \(step ([0-9.]+) ms\)", line)
        if m: on, step = True, float(m.group(1)); continue
        if on:
            f = line.split()
            if len(f) >= 3 and f[0] == "sum": break
            if len(f) >= 4:
                try: out[" ".join(f[:-3])] = float(f[-2])
                except ValueError: pass
    return step, out
tabs = [table(p) for p in sys.argv[1:]]
nan = float("nan")
print(f"{'step (graph)':16s}" + "".join(f" {s if s else nan:8.3f}" for s, _ in tabs))
keys = list(tabs[0][1]) + [k for _, t in tabs[1:] for k in t if k not in tabs[0][1]]
for k in keys:
    print(f"{k:16s}" + "".join(f" {t.get(k, nan):8.3f}" for _, t in tabs))
EOF
 done
fi
if has train; then
  common="--device cuda $REF_FLAGS --batch-size 6 --steps 68 --workers 8 --nproc 1"
  rounds=""
  i=0
  while [ $i -lt "$TRAIN_ROUNDS" ]; do rounds="$rounds $all"; i=$((i + 1)); done
  for prec in $PRECS; do
    : > "$O/train_$prec.tsv"
    for v in $rounds; do
      eval b=\$$v e=\${env_$v:-}
      env $e timeout 60 "$b/train" $common --precision $prec --out "$O/run_$v" > "$O/${v}_train.log" 2>&1
      lg="$O/${v}_train.log"
      ips=$(log_value images_per_s "$lg") peak=$(log_value peak_mib "$lg") wait=$(data_wait "$lg")
      printf '%s\t%s\t%s\n' "$v" "${ips:--}" "${wait:--}" >> "$O/train_$prec.tsv"
      say "trainer $v $prec: images_per_s=${ips:--} peak_mib=${peak:--} data_wait=${wait:--}%"
      rm -rf "$O/run_$v"
    done
    # per variant, the median of the runs whose step did not wait for its batch, against A's
    python3 "$src/bench/fed_median.py" ab "$O/train_$prec.tsv" "$prec" >> "$sum"
  done
fi
if has default; then
  for v in $all; do
    eval b=\$$v e=\${env_$v:-}
    env $e timeout 150 "$b/train" --out "$O/${v}_default" > "$O/${v}_default.log" 2>&1
    say "default job $v: rc $? $(grep -o 'val_miou=[0-9.]*\|images_per_s=[0-9.]*' "$O/${v}_default.log" | tail -2 | tr '\n' ' ')data_wait=$(data_wait "$O/${v}_default.log")%"
  done
  for v in $variants; do
    python3 "$src/bench/compare_losses.py" "$O/A_default/log.jsonl" "$O/${v}_default/log.jsonl" \
      "of the default job, A vs $v" >> "$sum" 2>&1
  done
  for v in $all; do gzip -f "$O/${v}_default/log.jsonl" 2>/dev/null; done
fi
say "done in $(el) s"
cat "$sum"
