#!/bin/sh
# A/B of a change to the training step on the GPU machine, in one call: A is this tree, B is this
# tree with PATCH applied (`git format-patch -1 COMMIT --stdout > PATCH` on the CPU machine; the
# device copy has no git history). For each: the per-category cost inside the graph-replayed step
# (bench/ops_cuda_bench's ablation), the trainer's images/s (bf16, 68 steps, twice, interleaved
# A B A B) and the default job (./train's defaults, 8000 steps) with its per-step losses compared;
# B's GPU test suites first. Issue 17's "measure each, keep what wins" in one device call (~5 min).
# Usage: bench/run_step_ab_gpu.sh PATCH OUT_DIR     (bench/ab/ holds changes waiting for this)
# On the device: run(carry [".device"]) `source .device/env.sh && sh bench/run_step_ab_gpu.sh
# bench/ab/X.patch $OUT/ab` (the two builds run side by side, -j8 each). Tried on the CPU machine
# up to the GPU parts (patch, both builds, B's CPU-runnable suite).
# Environment: PARTS (default
# "tests ops train default"), CONFIGURE_FLAGS (default --with-cuda-arch=90).
# Writes OUT_DIR/ab.txt (the summary) and OUT_DIR/{A,B}_* logs.
set -u
patch_file=$1; O=$2
PARTS=${PARTS:-"tests ops train default"}
flags=${CONFIGURE_FLAGS:---with-cuda-arch=90}
mkdir -p "$O"
sum="$O/ab.txt"
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
say() { echo "$*" >> "$sum"; }
src=$(pwd)
case $patch_file in /*) ;; *) patch_file=$src/$patch_file ;; esac
[ -r "$patch_file" ] || { echo "run_step_ab_gpu: cannot read $patch_file" >&2; exit 2; }
treeB=${TMPDIR:-/tmp}/step_ab_B
rm -rf "$treeB"
mkdir -p "$treeB"
tar --exclude=./bA --exclude=./bB --exclude=./b --exclude=./.git -cf - . | tar -C "$treeB" -xf -
say "# step A/B: $(date -u +%Y-%m-%dT%H:%M:%SZ); A = this tree, B = A + $(basename "$patch_file")"
nvidia-smi -L | sed 's/^/# /' >> "$sum"
if ! (cd "$treeB" && patch -p1 -s < "$patch_file") >> "$sum" 2>&1; then
  say "FAIL: $patch_file does not apply"; cat "$sum"; exit 1
fi
build() { # tree dir
  (cd "$1" && { [ -x configure ] || ./autogen.sh > /dev/null 2>&1; } && mkdir -p "$2" && cd "$2" &&
    ../configure -q $flags > /dev/null 2>&1 && make -j8 > /dev/null 2>&1 &&
    make -j8 tests/check_ops_cuda tests/check_model_cuda tests/check_plan > /dev/null 2>&1)
}
build "$src" bA & pa=$!
build "$treeB" bB & pb=$!
wait $pa; ra=$?; wait $pb; rb=$?
say "builds: A rc $ra, B rc $rb ($(el) s)"
[ $ra = 0 ] && [ $rb = 0 ] || { cat "$sum"; exit 1; }
A=$src/bA; B=$treeB/bB
if has tests; then
  for t in check_ops_cuda check_model_cuda check_plan; do
    timeout 120 "$B/tests/$t" > "$O/B_$t.log" 2>&1
    say "B $t: rc $? $(grep -E 'Checks|SKIP' "$O/B_$t.log" | tail -1)"
  done
fi
if has ops; then
  for v in A B; do
    eval b=\$$v
    timeout 90 "$b/bench/ops_cuda_bench" -p bf16 -t 0 > "$O/${v}_ops.txt" 2>&1
  done
  say "## inside the CUDA graph (ms): category, A, B"
  python3 - "$O/A_ops.txt" "$O/B_ops.txt" >> "$sum" 2>&1 <<'EOF'
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
sa, a = table(sys.argv[1]); sb, b = table(sys.argv[2])
print(f"step (graph)      {sa if sa else float('nan'):8.3f} {sb if sb else float('nan'):8.3f}")
for k in a:
    print(f"{k:16s} {a[k]:8.3f} {b.get(k, float('nan')):8.3f}")
EOF
fi
if has train; then
  common="--device cuda --widths reference --batch-size 6 --image-size 256 --classes 4 \
--optimizer sgd --momentum 0.9 --lr 0.01 --warmup-steps 1 --steps 68 --timing-warmup 8 \
--train-size 1200 --val-size 12 --workers 8 --log-every 10 --timeout 60 --nproc 1 --precision bf16"
  for v in A B A B; do
    eval b=\$$v
    timeout 60 "$b/train" $common --out "$O/run_$v" > "$O/${v}_train.log" 2>&1
    say "trainer $v bf16: $(grep -o 'images_per_s=[0-9.]*\|peak_mib=[0-9]*' "$O/${v}_train.log" | tr '\n' ' ')"
  done
  rm -rf "$O"/run_A "$O"/run_B
fi
if has default; then
  for v in A B; do
    eval b=\$$v
    timeout 150 "$b/train" --out "$O/${v}_default" > "$O/${v}_default.log" 2>&1
    say "default job $v: rc $? $(grep -o 'val_miou=[0-9.]*\|images_per_s=[0-9.]*' "$O/${v}_default.log" | tail -2 | tr '\n' ' ')"
  done
  python3 - "$O/A_default/log.jsonl" "$O/B_default/log.jsonl" >> "$sum" 2>&1 <<'EOF'
import json, sys
def losses(p):
    out = {}
    for line in open(p):
        try: r = json.loads(line)
        except ValueError: continue
        if r.get("type") == "step": out[r["step"]] = r["loss"]
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
steps = sorted(set(a) & set(b))
same = sum(1 for s in steps if a[s] == b[s])
d = max((abs(a[s] - b[s]) for s in steps), default=0)
last = steps[-500:]
mean = lambda xs: sum(xs) / max(len(xs), 1)
print(f"default job losses: {len(steps)} common steps, {same} identical, max |diff| {d:.3g}; "
      f"mean of the last 500: A {mean([a[s] for s in last]):.6f} B {mean([b[s] for s in last]):.6f}")
EOF
  gzip -f "$O"/A_default/log.jsonl "$O"/B_default/log.jsonl 2>/dev/null
fi
say "done in $(el) s"
cat "$sum"
