#!/bin/sh
# bench/record_gpu.sh OUT_DIR — a commit's record on a GPU machine (1 GPU; 2 add the loss curve
# of --grad-comm), in one run (~6 min): build (in b/), the GPU suites (ops, model, memory plan,
# the conversion kernels, DDP with two ranks sharing the GPU, --grad-comm bf16 included), the
# trainer against PyTorch in bf16 and fp32 (bench/train_speed_gpu.sh: images/s and the memory
# ledger), the step's per-category breakdown (dev/ops_cuda_bench), one step against PyTorch in
# float64 at each precision (dev/torch_check + dev/torch_crosscheck.py), and, where two GPUs
# are, --grad-comm bf16 against f32 (bench/grad_comm.sh: the loss curve; ./train runs one rank
# per GPU). From the tree's root: COMMIT=<commit> sh bench/record_gpu.sh OUT_DIR
# Prints the summary; OUT_DIR/record.tgz holds every log.
set -u
O=${1:?usage: bench/record_gpu.sh OUT_DIR}; mkdir -p "$O"; W=${TMPDIR:-/tmp}/record; rm -rf "$W"; mkdir -p "$W"
t0=$(date +%s); el() { echo "[$(($(date +%s) - t0)) s]"; }
echo "# record: commit ${COMMIT:-unknown}, $(date -u +%Y-%m-%dT%H:%M:%SZ)"; nvidia-smi -L | sed 's/^/# /'
{ [ -x configure ] || ./autogen.sh > /dev/null 2>&1; } && mkdir -p b && cd b &&
  ../configure -q --with-cuda-arch=90 > "$W/configure.log" 2>&1 && make -j16 > "$W/make.log" 2>&1 &&
  make -j16 check TESTS= > "$W/make_check.log" 2>&1 || { echo "FAIL: build"; tail -20 "$W/make.log"; exit 1; }
cd ..
echo "build ok $(el)"
for t in check_ops_cuda check_model_cuda check_plan check_ddp; do
  timeout 300 b/tests/$t > "$W/$t.log" 2>&1
  echo "$t: rc $? $(grep -E '^[0-9]+%: Checks' "$W/$t.log" | tail -1) $(grep -c ':F:\|:E:' "$W/$t.log") failures listed"
done
CK_RUN_CASE=reduce_kernel timeout 120 b/tests/check_cuda_collectives > "$W/check_cuda_collectives.log" 2>&1
echo "check_cuda_collectives (reduce_kernel case): rc $? $(grep -E '^[0-9]+%: Checks' "$W/check_cuda_collectives.log")"
grep -h "differ from one rank" "$W/check_ddp.log"
grep -h ":F:\|:E:" "$W"/check_*.log | head -10
echo "suites done $(el)"
COMMIT=${COMMIT:-unknown} sh bench/train_speed_gpu.sh b "$W/train" "bf16 fp32" > /dev/null 2>&1
cut -f1-9 "$W/train/train.tsv" | grep -v '^#'
grep -A12 "memory ledger\|peak per category" "$W/train/train.log" | head -30
echo "train done $(el)"
timeout 90 b/dev/ops_cuda_bench -p bf16 -t 0 > "$W/ops_bf16.txt" 2>&1
sed -n '1,24p' "$W/ops_bf16.txt"
echo "ops done $(el)"
for p in fp32 bf16; do
  timeout 150 b/dev/torch_check --device cuda --widths 64,128,256,512,1024 --size 128 --batch 2 \
    --precision $p --out "$W/cc_$p" > "$W/cc_$p.log" 2>&1 &&
    timeout 150 python3 dev/torch_crosscheck.py "$W/cc_$p" --floor 2>&1 | grep crosscheck
done
echo "crosscheck done $(el)"
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  timeout 200 sh bench/grad_comm.sh b/train "$W/gc" --nproc 2 --steps 1000 --log-every 100 \
    --timeout 60 > /dev/null 2>&1; cat "$W/gc/grad_comm.txt" 2>/dev/null || tail -5 "$W/gc/runs.log"
  echo "grad-comm done $(el)"
fi
rm -rf "$W"/cc_*/ "$W"/train/run_* "$W"/gc/f32/*.ckpt "$W"/gc/bf16/*.ckpt 2>/dev/null
tar -C "$W" -czf "$O/record.tgz" . && echo "logs: record.tgz $(du -h "$O/record.tgz" | cut -f1)"
