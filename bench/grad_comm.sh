#!/bin/sh
# bench/grad_comm.sh TRAIN OUT_DIR [train flags ...] — --grad-comm bf16 against f32: the same DDP
# job twice (same seed, data and initialisation), the
# gradients all-reduced in f32 and in bf16, and what it does to the loss curve: the per-step
# losses side by side (means over windows), their largest difference, and each run's final
# validation loss and mIoU, images/s and peak memory.
# TRAIN: a built ./train. CPU or GPU machine (2 GPUs for one rank per GPU):
#   CPU: bench/grad_comm.sh b/train /tmp/gc --device cpu --nproc 2 --steps 200
#   GPU: bench/grad_comm.sh b/train /tmp/gc --nproc 2 --steps 1000
# Writes OUT_DIR/{f32,bf16}/ (the runs) and OUT_DIR/grad_comm.txt (the comparison;
# bench/results/grad_comm_cpu.txt).
set -u
T=$1; O=$2; shift 2
mkdir -p "$O"
for w in f32 bf16; do
  echo "+ $T $* --grad-comm $w --out $O/$w" >> "$O/runs.log"
  "$T" "$@" --grad-comm $w --out "$O/$w" >> "$O/runs.log" 2>&1 || {
    echo "grad_comm: the $w run failed (see $O/runs.log)"; tail -5 "$O/runs.log"; exit 1; }
done
python3 - "$O" "$*" > "$O/grad_comm.txt" <<'PY'
import json, sys
O, flags = sys.argv[1], sys.argv[2]
def load(w):
    steps = {}
    for line in open(f"{O}/{w}/log.jsonl"):
        r = json.loads(line)
        if r.get("type") == "step": steps[r["step"]] = r["loss"]
    return steps, json.load(open(f"{O}/{w}/summary.json"))
(a, sa), (b, sb) = load("f32"), load("bf16")
common = sorted(set(a) & set(b))
print(f"# --grad-comm f32 vs bf16, flags: {flags}")
print(f"# {len(common)} common steps; largest per-step |loss difference| "
      f"{max(abs(a[s] - b[s]) for s in common):.3g}")
n = len(common)
win = max(1, n // 10)
print(f"{'steps':>13} {'mean loss f32':>14} {'bf16':>10} {'bf16/f32':>9}")
for i in range(0, n, win):
    ss = common[i:i + win]
    ma = sum(a[s] for s in ss) / len(ss); mb = sum(b[s] for s in ss) / len(ss)
    print(f"{ss[0]:>6}-{ss[-1]:<6} {ma:>14.6f} {mb:>10.6f} {mb / ma:>9.4f}")
def get(s, *keys):
    for k in keys:
        if k in s: return s[k]
        for v in s.values():
            if isinstance(v, dict) and k in v: return v[k]
    return float("nan")
for w, s in (("f32", sa), ("bf16", sb)):
    print(f"{w:>5}: val_loss={get(s, 'val_loss')} val_miou={get(s, 'val_miou')} "
          f"images_per_s={get(s, 'images_per_s')} peak_mib_per_rank={get(s, 'peak_mib_per_rank')}")
PY
cat "$O/grad_comm.txt"
