"""What the scripts of the NCCL-interface suite (bench/nccl/) share.

Standard library only at import time: compare.py and the launchers (kill_worker.py,
cupy_allreduce.py) import it without torch; init_process_group imports torch when called.
The scripts find it next to themselves:

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import common
"""
import ctypes
import json
import os


def nccl_provider():
    """Which library serves ncclAllReduce here: the preloaded one when it is mapped, else NCCL."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return "unknown"
    for p in filter(None, os.environ.get("LD_PRELOAD", "").replace(":", " ").split()):
        if os.path.basename(p) in maps and "nccl" in os.path.basename(p):
            return "shmddp" if "shmddp" in p else os.path.basename(p)
    return "nccl" if "libnccl" in maps else "none"


def init_process_group(timeout_s):
    """This torchrun worker's GPU (local rank modulo the GPU count: ranks may share one), made
    current, and the default NCCL process group bound to it. -> (device, rank, world size)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev, timeout=timedelta(seconds=timeout_s))
    return dev, dist.get_rank(), dist.get_world_size()


def hash_tensor(h, t):
    """Feeds a tensor's bytes (moved to the CPU) to the hashlib object h, without needing
    numpy; returns h."""
    t = t.detach().contiguous().cpu()
    nbytes = t.numel() * t.element_size()
    if nbytes:
        # The buffer only views t's memory: t stays referenced until the bytes are hashed.
        buf = (ctypes.c_ubyte * nbytes).from_address(t.data_ptr())
        h.update(buf)
        del buf
    return h


def load_json(path):
    """The JSON value in path, or None when the file is missing or not valid JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def report(result, out="", saved=None):
    """The end of a test: --out (when given) gets `saved` (default: result) as indented JSON,
    then the one line `RESULT {json}` that clients_gpu.sh and compare.py read."""
    if out:
        with open(out, "w") as f:
            json.dump(result if saved is None else saved, f, indent=1)
    print_result(result)


def print_result(result):
    """The line `RESULT {json}` (keys sorted)."""
    print("RESULT " + json.dumps(result, sort_keys=True), flush=True)
