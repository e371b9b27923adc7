#!/usr/bin/env python3
"""predict.py [MPI_GBPS [ALPHA_US]] — the step time the hierarchical design predicts for N nodes of 8 H200
with 400 Gb/s per GPU between nodes, from figures measured on 2 x H200 (bench/results/) and the
bandwidth the inter-node path reaches per GPU (GB/s; default: both bounds below). Arithmetic only;
bench/results/multinode_prediction.md explains every term."""
import sys

PARAMS = 31_037_828            # reference U-Net (train_1xh200.tsv)
GRAD = PARAMS * 4              # f32 gradients, bytes per step
BATCH = 6                      # per GPU
# DDP 2 x H200 bf16, --cuda-graph off (ddp_2xh200.tsv, the graph-off row)
STEP_GRAPH_OFF_MS = 2 * BATCH / 1226.08 * 1e3
STEP_GRAPH_ON_MS = 2 * BATCH / 1650.3 * 1e3    # DDP 2 x H200 bf16 (README table)
NVL_BUSBW = 317.55             # GB/s, 2-GPU all-reduce of 64 MiB, shmddp two-shot (allreduce_2xh200_auto.txt)
L = 8                          # GPUs (ranks) per node
PIECE = 4 << 20                # inter.c's pipeline piece
PCIE = 50.0                    # GB/s, assumed host link per H200 (PCIe 5 x16: about 55 GB/s one way)
LAST_BUCKET = 25 << 20         # DDP's bucket size: the last one is exposed after backward
NIC_LINE = 50.0                # GB/s, 400 Gb/s
ALPHA_US = 10.0                # per MPI_Sendrecv step between nodes (an assumption; not measured)


def comm_ms(nodes, net_gbps, size=GRAD, alpha_us=ALPHA_US):
    intra = 2 * size * (L - 1) / L / (NVL_BUSBW * 1e9) * 1e3          # reduce-scatter + all-gather
    shard = size / L
    pieces = -(-shard // PIECE)
    inter = 2 * (nodes - 1) / nodes * shard / (net_gbps * 1e9) * 1e3  # ring between nodes
    inter += 2 * (nodes - 1) * pieces * alpha_us * 1e-3               # its 2(N-1) steps per piece
    staging = 2 * min(PIECE, shard) / (PCIE * 1e9) * 1e3               # first piece down, last up
    return intra, inter, staging


def main():
    global ALPHA_US
    bws = [float(sys.argv[1])] if len(sys.argv) > 1 else [46.0, 20.0]
    if len(sys.argv) > 2:
        ALPHA_US = float(sys.argv[2])
    print("| nodes x 8 H200 | inter-node GB/s per GPU | all-reduce of %.0f MB: intra + inter + staging (ms) | exposed (last 25 MB bucket, ms) | predicted step (ms) | images/s |" % (GRAD / 1e6))
    print("|---|---|---|---|---|---|")
    for nodes in (4, 16):
        for bw in bws:
            a, b, c = comm_ms(nodes, bw, GRAD, ALPHA_US)
            la, lb, lc = comm_ms(nodes, bw, LAST_BUCKET, ALPHA_US)
            exposed = la + lb + lc
            total = a + b + c
            # the buckets overlap backward (~2/3 of the step) as on one node; what does not fit is exposed too
            backward = STEP_GRAPH_OFF_MS * 2 / 3
            extra = max(0.0, total - backward)
            step = STEP_GRAPH_OFF_MS + exposed + extra
            print("| %d x 8 | %.0f | %.2f + %.2f + %.2f = %.2f | %.2f | %.2f | %.0f |" % (
                nodes, bw, a, b, c, total, exposed, step, nodes * L * BATCH / step * 1e3))


if __name__ == "__main__":
    main()
