"""sm90_protocol_model.py — what the barrier-protocol models of the Hopper convolution kernels
(dev/conv_sm90_protocol.py, dev/conv_sm90_wide_protocol.py, dev/conv_sm90_wgrad_protocol.py)
share: an mbarrier modelled by its phase (arrival count and transaction bytes), and the random
interleaving of the roles (generators: each `next` is one step) with the copy engine's pending
operations."""

class Bar:
    def __init__(s, count): s.count, s.arr, s.tx, s.phase = count, 0, 0, 0
    def _chk(s):
        if s.arr == s.count and s.tx == 0:
            s.phase += 1; s.arr = 0
    def arrive(s, n=1): s.arr += n; assert s.arr <= s.count; s._chk()
    def expect_tx(s, b): s.tx += b; s.arr += 1; assert s.arr <= s.count; s._chk()
    def complete_tx(s, b): s.tx -= b; assert s.tx >= 0; s._chk()
    def done(s, parity): return (s.phase & 1) != parity

def interleave(rnd, actors, engine, complete, engine_weight=1):
    """Runs the roles in `actors` (name -> generator) and completes the copy engine's pending
    operations (list `engine`, each handed to `complete` when done) in a random order until all
    are done; the engine is picked with `engine_weight` times a role's chance. Returns the steps
    taken; raises RuntimeError after 10^6 (a deadlock)."""
    steps = 0
    while actors or engine:
        steps += 1
        if steps > 10**6: raise RuntimeError("deadlock")
        a = rnd.choice(list(actors) + (['T'] * engine_weight if engine else []))
        if a == 'T':
            complete(engine.pop(rnd.randrange(len(engine))))
            continue
        try: next(actors[a])
        except StopIteration: del actors[a]
    return steps
