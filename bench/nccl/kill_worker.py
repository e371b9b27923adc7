#!/usr/bin/env python3
"""What the survivor's collective does when its peer dies: 2 ranks loop an all-reduce of a
64 MiB float32 tensor; at step --kill-step rank 1 writes the wall time to a file and SIGKILLs
itself; rank 0 keeps issuing the all-reduce and waiting for it. Measured: the time from rank
1's kill to the moment rank 0 learns of it (a Python exception, or its process ending when
PyTorch's watchdog tears it down), and how.

Run it plainly (it is its own launcher; no torchrun, whose agent would tear the group down as
soon as a worker dies and so hide what the collective itself does):

    [LD_PRELOAD=libshmddp-nccl.so] python3 kill_worker.py --out k.json

The launcher starts `kill_worker.py --rank r --world 2` twice with MASTER_ADDR/MASTER_PORT
(the TCP store lives in rank 0), watches rank 0 and kills everything after --hard-timeout
seconds past the kill. With real NCCL rank 0 is expected to block until the process-group
timeout (--timeout, 60 s) fires in PyTorch's watchdog; a library that notices the dead peer
should end the collective with an error well before that. Prints `RESULT {json}`; exit status
1 when no error ever reached rank 0 (hung past the hard timeout, or the all-reduce "completed"
without its peer) or the run did not get as far as the kill.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402 - bench/nccl/common.py, found next to this script


def log_event(f, event, **kw):
    f.write(json.dumps(dict(t=time.time(), event=event, **kw)) + "\n")
    f.flush()


# ---------------------------------------------------------------- worker (one rank)

def worker(args):
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    rank, world = args.rank, args.world
    ev = open(os.path.join(args.dir, f"rank{rank}.events"), "w")
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=timedelta(seconds=args.timeout))
    log_event(ev, "init", lib=common.nccl_provider(), device=dev.index)
    x = torch.empty(args.mib * 2**20 // 4, dtype=torch.float32, device=dev)

    for step in range(args.steps):
        if rank == 1 and step == args.kill_step:
            with open(os.path.join(args.dir, "kill_time"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        x.fill_(1.0)
        t_issue = time.time()
        try:
            work = dist.all_reduce(x, async_op=True)
        except Exception as e:  # noqa: BLE001 - the error is the measurement
            log_event(ev, "exception", where="all_reduce call", step=step, error=repr(e)[:3000])
            return after_error(args, ev, x, dist, torch)
        # Poll rather than block in C++, so this thread stays free to notice and record things.
        last_note = t_issue
        while not work.is_completed():
            time.sleep(0.0005)
            if time.time() - last_note > 5:
                last_note = time.time()
                log_event(ev, "still_waiting", step=step, waited_s=round(last_note - t_issue, 1))
        try:
            work.wait()
            value = x[0].item()          # synchronises with the collective's result
        except Exception as e:  # noqa: BLE001
            log_event(ev, "exception", where="wait/synchronize", step=step, error=repr(e)[:3000])
            return after_error(args, ev, x, dist, torch)
        if value != float(world):
            # Completed, but not with every rank's contribution: the peer's death went unseen.
            log_event(ev, "wrong_value", step=step, value=value)
            return 4
        log_event(ev, "step_done", step=step, ms=round(1000 * (time.time() - t_issue), 3))
    log_event(ev, "finished")
    dist.destroy_process_group()
    return 0


def after_error(args, ev, x, dist, torch):
    """Does the next call fail at once too (a communicator that knows it is broken)?"""
    t = time.time()
    try:
        dist.all_reduce(x)
        torch.cuda.synchronize()
        log_event(ev, "next_call", outcome="returned", s=round(time.time() - t, 3))
    except Exception as e:  # noqa: BLE001
        log_event(ev, "next_call", outcome="raised", s=round(time.time() - t, 3),
                  error=repr(e)[:3000])
    ev.close()
    os._exit(3)   # skip interpreter teardown: destroying a broken group can block


# ---------------------------------------------------------------- launcher

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_events(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def tail(path, n):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()[-n:]
    except OSError:
        return []


def describe_rc(rc):
    if rc is not None and rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


def launch(args):
    work_dir = tempfile.mkdtemp(prefix="kill_worker.")
    port = free_port()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2",
               TORCH_NCCL_ASYNC_ERROR_HANDLING=os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                                              "1"),
               # A timeout makes PyTorch dump its flight recorder first; that is not what is
               # measured here and only delays the teardown.
               TORCH_NCCL_DUMP_ON_TIMEOUT="0",
               NCCL_NVLS_ENABLE=os.environ.get("NCCL_NVLS_ENABLE", "0"))
    procs, logs = [], []
    for r in range(2):
        logs.append(os.path.join(work_dir, f"rank{r}.log"))
        cmd = [sys.executable, os.path.abspath(__file__), "--rank", str(r), "--world", "2",
               "--dir", work_dir, "--timeout", str(args.timeout), "--steps", str(args.steps),
               "--kill-step", str(args.kill_step), "--mib", str(args.mib)]
        with open(logs[-1], "w") as lf:
            procs.append(subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                                          stdout=lf, stderr=subprocess.STDOUT))
    print(f"kill_worker: ranks {procs[0].pid} and {procs[1].pid}, store port {port}, "
          f"pg timeout {args.timeout} s, files in {work_dir}", flush=True)

    t_launch = time.time()
    kill_time, rank0_end, hung, exc_seen = None, None, False, None
    kill_file = os.path.join(work_dir, "kill_time")
    events0 = os.path.join(work_dir, "rank0.events")
    while True:
        now = time.time()
        if kill_time is None and os.path.exists(kill_file):
            try:
                kill_time = float(open(kill_file).read())
            except ValueError:
                pass            # created but not yet written: read it next round
        if rank0_end is None and procs[0].poll() is not None:
            rank0_end = now
        if exc_seen is None and kill_time is not None:
            exc_seen = next((e["t"] for e in read_events(events0) if e["event"] == "exception"),
                            None)
        if procs[1].poll() is not None and kill_time is None and not os.path.exists(kill_file):
            break               # rank 1 died on its own before the kill: nothing to measure
        if rank0_end is not None and (procs[1].poll() is not None or kill_time is None):
            break
        # Startup (imports, CUDA, rendezvous) has its own allowance; after the kill, the hard
        # timeout bounds the wait for rank 0 to hear of it; once it has (an exception), the
        # follow-up call gets 10 s.
        if exc_seen is not None:
            limit = exc_seen + 10
        elif kill_time is not None:
            limit = kill_time + args.hard_timeout
        else:
            limit = t_launch + args.startup_timeout
        if now > limit:
            hung = rank0_end is None and exc_seen is None
            break
        time.sleep(0.01)
    for p in procs:              # whatever is still running has had its chance
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()
    if rank0_end is None:
        rank0_end = time.time()

    ev0 = read_events(events0)
    log0 = tail(logs[0], 4000)
    lib = next((e.get("lib") for e in ev0 if e["event"] == "init"), "unknown")
    exc = next((e for e in ev0 if e["event"] == "exception"), None)
    wrong = next((e for e in ev0 if e["event"] == "wrong_value"), None)
    nxt = next((e for e in ev0 if e["event"] == "next_call"), None)
    steps_done = sum(1 for e in ev0 if e["event"] == "step_done")
    watchdog = any("Watchdog caught collective operation timeout" in l for l in log0)
    rc0 = procs[0].returncode

    result = {"test": "kill_worker", "lib": lib, "timeout_s": args.timeout,
              "hard_timeout_s": args.hard_timeout, "steps_before_kill": steps_done,
              "rank0_rc": rc0, "watchdog_in_log": watchdog}
    if kill_time is None:
        result.update(outcome="no_kill", latency_s=None,
                      summary=f"never reached the kill (rank 0 rc {rc0}, {steps_done} steps)")
    elif wrong:
        result.update(outcome="completed_without_peer", latency_s=round(wrong["t"] - kill_time, 3),
                      summary=f"all-reduce completed without its peer (value {wrong['value']})")
    elif hung:
        result.update(outcome="hung", latency_s=None,
                      summary=f"no error {args.hard_timeout} s after the kill: killed")
    elif exc is None and steps_done and kill_time and rank0_end < kill_time:
        result.update(outcome="no_kill", latency_s=None, summary="rank 0 ended before the kill")
    else:
        t_err = exc["t"] if exc else rank0_end
        latency = t_err - kill_time
        how = f"exception in {exc['where']}" if exc else f"process ended ({describe_rc(rc0)})"
        blocked = latency >= 0.9 * args.timeout
        outcome = "watchdog" if blocked else "error"
        summary = (f"blocked until watchdog ({latency:.1f} s, timeout {args.timeout} s)" if blocked
                   else f"error after {latency:.2f} s")
        result.update(outcome=outcome, latency_s=round(latency, 3), how=how, summary=summary,
                      exception=exc["error"] if exc else None,
                      next_call=(nxt and {k: nxt.get(k) for k in ("outcome", "s", "error")})
                      or ("blocked (killed after 10 s)" if exc else None))
    # The first lines that look like the error, for the log reader.
    interesting = [l for l in log0 if any(k in l for k in ("rror", "shmddp", "Watchdog", "abort",
                                                            "Abort", "Timeout", "timed out"))]
    result["log_excerpt"] = interesting[:8]
    print(f"kill_worker ({lib}): {result['summary']}", flush=True)
    if exc:
        # PyTorch's message starts generic; the library's own words follow "Last error:".
        err = exc["error"].replace("\\n", "\n")
        last = err.split("Last error:", 1)[-1].strip() if "Last error:" in err else err
        print(f"  rank 0 exception: {err.splitlines()[0][:200]}")
        print(f"  library's last error: {last[:400]}")
    if nxt:
        print(f"  next all_reduce after the error: {nxt.get('outcome')} in {nxt.get('s')} s")
    for l in interesting[:8]:
        print(f"  log: {l[:300]}")
    print("  rank 0 log tail:")
    for l in log0[-12:]:
        print(f"    {l[:300]}")
    common.report(result, args.out)
    return 0 if result["outcome"] in ("error", "watchdog") else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--timeout", type=int, default=60, help="process-group (watchdog) timeout, s")
    ap.add_argument("--hard-timeout", type=int, default=100,
                    help="seconds after the kill before the launcher gives up on rank 0")
    ap.add_argument("--startup-timeout", type=int, default=90)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--kill-step", type=int, default=20)
    ap.add_argument("--mib", type=int, default=64, help="all-reduce size in MiB")
    # worker mode (set by the launcher)
    ap.add_argument("--rank", type=int, default=-1)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--dir", default="")
    args = ap.parse_args()
    if args.rank >= 0:
        sys.exit(worker(args))
    sys.exit(launch(args))


if __name__ == "__main__":
    main()
