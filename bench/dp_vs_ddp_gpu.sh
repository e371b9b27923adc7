#!/bin/sh
# bench/dp_vs_ddp_gpu.sh BUILD_DIR OUT_DIR [MODES] — DataParallel against DDP on the GPUs of this
# machine (GPU machine, 2 GPUs), through tools/compare: the reference configuration
# (bench/README.md: U-Net 64..1024, 256x256, batch 6 per GPU, 4 classes, SGD; here in bf16) and
# an imbalance configuration as users meet it (512x512, 150 classes, AdamW, fp32: DataParallel's
# gathered logits and optimizer state on GPU 0), each in dp, ddp and ddp-syncbn. MODES default
# dp,ddp,ddp-syncbn.
# Writes 4 files: OUT_DIR/dp_vs_ddp.tsv (machine header, then the table;
# bench/results/dp_vs_ddp_2xh200.tsv) and OUT_DIR/{throughput,step_time,memory}.svg. The runs' own output goes to a temporary folder;
# the log of a failed run is printed. Six runs of 38 steps, each killed after 60 s; before
# them the DP-vs-DDP equivalence test on the GPUs (tests/check_dp, if built), after them
# PyTorch's nn.DataParallel on both cases as the anchor (10 timed steps, where torch exists).
set -u
. "$(dirname "$0")/lib.sh"
build_and_out "$@"
MODES=${3:-dp,ddp,ddp-syncbn}
here=$(cd "$(dirname "$0")" && pwd)
check="not run (tests/check_dp not built: configure found no Check)"
[ -f "$B/Makefile" ] && make -C "$B" tests/check_dp >/dev/null 2>&1
if [ -x "$B/tests/check_dp" ]; then
  if (cd "$B" && CK_DEFAULT_TIMEOUT=120 timeout -s KILL 150 ./tests/check_dp); then
    check=PASS; else check=FAIL; fi
fi
work=$(mktemp -d /tmp/dp_vs_ddp.XXXXXX)
ngpu=$(nvidia-smi -L | wc -l)
[ "$ngpu" -ge 2 ] || echo "dp_vs_ddp_gpu.sh: only $ngpu GPU(s) visible; DataParallel runs on 1"
n=$([ "$ngpu" -ge 2 ] && echo 2 || echo 1)
common="--device cuda --nproc $n --widths reference --batch-size 6 --steps 38 --timing-warmup 8 \
--warmup-steps 1 --train-size 1200 --val-size 12 --workers 6 --log-every 10 --timeout 60"
ref="$common --image-size 256 --classes 4 --optimizer sgd --momentum 0.9 --lr 0.01 --precision bf16"
imb="$common --image-size 512 --classes 150 --optimizer adamw --lr 0.0001 --precision fp32"
export COMMIT
"$B/tools/compare" --train "$B/train" --out "$work/out" --work "$work/runs" \
  --table dp_vs_ddp.tsv --modes "$MODES" --skip 8 --run-timeout 60 --title "DataParallel vs DDP, $n x $(nvidia-smi \
  --query-gpu=name --format=csv,noheader | head -1)" \
  --case "reference=$ref" --case "imbalance=$imb"
rc=$?
anchor() { # name size classes precision optimizer
  BENCH_DIR="$here" timeout -s KILL 60 python3 - "$@" <<'PY' 2>&1 | tail -n 1
import os, sys, torch, torch.nn as nn, torch.nn.functional as F
sys.path.insert(0, os.environ["BENCH_DIR"])
from torch_unet import UNet
name, size, classes, prec, optim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
n = torch.cuda.device_count()
torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
torch.manual_seed(1)
cl = torch.channels_last
model = nn.DataParallel(UNet([64, 128, 256, 512, 1024], classes=classes).cuda().to(memory_format=cl))
opt = (torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if optim == "sgd"
       else torch.optim.AdamW(model.parameters(), lr=1e-4))
x = torch.randn(6 * n, 3, size, size, device="cuda:0").to(memory_format=cl)
y = torch.randint(0, classes, (6 * n, size, size), device="cuda:0")
dt = torch.bfloat16 if prec == "bf16" else None
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=dt or torch.float32, enabled=dt is not None):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
for _ in range(3): step()
for d in range(n): torch.cuda.synchronize(d); torch.cuda.reset_peak_memory_stats(d)
t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
t0.record()
for _ in range(10): step()
t1.record()
for d in range(n): torch.cuda.synchronize(d)
ms = t0.elapsed_time(t1)
peaks = ",".join(f"{torch.cuda.max_memory_allocated(d) / 2**20:.0f}" for d in range(n))
print(f"torch DataParallel {name}: gpus={n} img_s={6 * n * 10 / (ms / 1000):.1f} "
      f"step_ms={ms / 10:.2f} peak_mib={peaks}")
PY
}
a_ref=$(anchor reference 256 4 bf16 sgd)
a_imb=$(anchor imbalance 512 150 fp32 adamw)
{
  record_header "bench/dp_vs_ddp_gpu.sh BUILD_DIR OUT_DIR $MODES"
  echo "# reference: $ref"
  echo "# imbalance: $imb"
  echo "# tests/check_dp (DP equals DDP without SyncBN, on these GPUs): $check"
  echo "# anchor, same run (torch.nn.DataParallel, 10 steps after 3, max_memory_allocated per GPU):"
  echo "#   ${a_ref:-torch anchor failed or missing}"
  echo "#   ${a_imb:-torch anchor failed or missing}"
  cat "$work/out/dp_vs_ddp.tsv" 2>/dev/null
} > "$O/dp_vs_ddp.tsv"
cp "$work"/out/*.svg "$O"/ 2>/dev/null
for d in "$work"/runs/*; do # what DP printed (its per-device ledger), and any failure
  if [ "${d##*-}" = dp ] || ! grep -q '^result:' "$d/train.log" 2>/dev/null; then
    echo "== $(basename "$d")"; tail -n 16 "$d/train.log" 2>/dev/null
  fi
done
grep -v '^#' "$O/dp_vs_ddp.tsv" | cut -f1-12
rm -rf "$work"
exit $rc
