"""Ranks of a torch.distributed job on one clock, and their collectives as comm ranges.

sync_clocks() measures this rank's trace clock against rank 0's over the job's own
torch.distributed (a CPU ping-pong on a gloo group: the default group when its backend is
gloo, else one made for it), keeps the probe with the smallest round trip, widens its
uncertainty by both ends' clock map errors, and stores it in meta exactly as the MPI trainer
does (docs/trace-format.md, "Ranks on one clock"). stagetrace.open() calls it by itself in a
job of more than one rank: at open when torch.distributed is initialized then, else right after
init_process_group returns; and again when the trace closes.

collectives() runs torch.distributed's collectives called on a registered thread inside a
`comm` stage named after the call (all_reduce, broadcast, ...), so that `analyze stragglers`
sees each rank's wait in it.
"""
import contextlib
import datetime
import functools
import os
import sys

from . import _stagetrace

CLOCK_PROBES = 32
# How long a rank waits for the others in the exchange (seconds; STAGETRACE_CLOCK_TIMEOUT_S).
CLOCK_TIMEOUT_S = 60

_groups = {}
_patched = {}
_synced_traces = set()  # id() of the traces measured at open (a closed one is never measured again)


def _dist():
    """torch.distributed when it is imported and usable, else None (never imports torch)."""
    mod = sys.modules.get("torch.distributed")
    if mod is None or not mod.is_available():
        return None
    return mod


def _gloo_group(dist):
    if dist.get_backend() == "gloo":
        return None  # the default group
    key = id(dist.distributed_c10d._get_default_group())
    if key not in _groups:
        timeout = float(os.environ.get("STAGETRACE_CLOCK_TIMEOUT_S", CLOCK_TIMEOUT_S))
        _groups[key] = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout))
    return _groups[key]


def _larger(a, b):
    """Of two map measurements, the one with the larger |error| + half bracket."""
    return b if abs(b[0]) + b[1] > abs(a[0]) + a[1] else a


def sync_clocks(trace=None, at="open", probes=CLOCK_PROBES):
    """Measures this rank's clock offset to rank 0 over torch.distributed and stores it in the
    trace's meta (at "open" or "close"). Collective: every rank of the default group calls it.
    Returns (offset_ns, uncertainty_ns); rank 0 stores and returns (0, 0)."""
    dist = _dist()
    if dist is None or not dist.is_initialized():
        raise _stagetrace.Error("sync_clocks: torch.distributed is not initialized")
    import torch  # only here: importing this module never imports torch
    if at not in ("open", "close"):
        raise ValueError("sync_clocks: at must be 'open' or 'close', not %r" % (at,))
    if not 1 <= int(probes) <= 4096:
        raise ValueError("sync_clocks: probes must be in 1..4096, not %r" % (probes,))
    if trace is None:
        trace = _stagetrace._current()
        if trace is None:
            raise _stagetrace.Error("sync_clocks: no trace is open")
    where = 0 if at == "open" else 1
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        return trace._clock_record(where, None, _stagetrace._clock_map(), None)
    group = _gloo_group(dist)
    buf = torch.zeros(2, dtype=torch.int64)
    now = _stagetrace._now_ns
    if rank == 0:
        own = (0, 0)
        for peer in range(1, world):
            before = _stagetrace._clock_map()
            for _ in range(probes):
                dist.recv(buf, src=peer, group=group)
                buf[0] = now()
                dist.send(buf, dst=peer, group=group)
            own = _larger(before, _stagetrace._clock_map())
            buf[0], buf[1] = own
            dist.send(buf, dst=peer, group=group)
        return trace._clock_record(where, None, own, None)
    kept = []
    before = _stagetrace._clock_map()
    for _ in range(probes):
        send = now()
        buf[0] = send
        dist.send(buf, dst=0, group=group)
        dist.recv(buf, src=0, group=group)
        recv = now()
        kept.append((send, int(buf[0]), recv))
    own = _larger(before, _stagetrace._clock_map())
    dist.recv(buf, src=0, group=group)
    return trace._clock_record(where, kept, own, (int(buf[0]), int(buf[1])))


def _at_close(trace):
    dist = _dist()
    if dist is None or not dist.is_initialized():
        trace._meta_set("python_clock_sync_close", "skipped: torch.distributed was no longer initialized at close")
        return
    sync_clocks(trace, "close")


def _synced(trace):
    """Once torch.distributed is up in a job of several ranks: the open measurement now, the
    close one when the trace closes."""
    dist = _dist()
    if trace.closed or id(trace) in _synced_traces or dist.get_world_size() < 2:
        return
    _synced_traces.add(id(trace))
    sync_clocks(trace, "open")
    trace._meta_set("python_clock_sync", "torch.distributed (gloo)")
    trace._set_on_close(functools.partial(_at_close, trace))


def auto(trace):
    """What stagetrace.open() does: sync now when torch.distributed is initialized, or right
    after init_process_group when it is imported and not yet initialized. Without
    torch.distributed imported, nothing (sync_clocks() can be called later)."""
    dist = _dist()
    if dist is None or not trace.enabled:
        return
    if dist.is_initialized():
        _synced(trace)
        return
    if "init_process_group" in _patched:
        return
    original = dist.init_process_group
    _patched["init_process_group"] = original

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        out = original(*args, **kwargs)
        current = _stagetrace._current()
        if current is not None:
            _synced(current)
        return out

    dist.init_process_group = init_process_group


_COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "reduce", "gather", "scatter",
                "barrier")


@contextlib.contextmanager
def collectives(trace=None, names=_COLLECTIVES):
    """Within it, each torch.distributed collective in `names` called on a thread registered
    with the trace runs inside a `comm` stage of its name (an asynchronous call, async_op=True,
    only for its launch: wrap its wait in a stage of your own). Restored on exit."""
    dist = _dist()
    if dist is None:
        raise _stagetrace.Error("collectives(): torch.distributed is not imported")
    if trace is None:
        trace = _stagetrace._current()
        if trace is None:
            raise _stagetrace.Error("collectives(): no trace is open")
    saved = {}
    try:
        for name in names:
            fn = getattr(dist, name, None)
            if fn is None:
                continue
            saved[name] = fn
            stage = trace.stage(name, "comm")

            def wrapped(*args, _fn=fn, _stage=stage, **kwargs):
                with _stage:
                    return _fn(*args, **kwargs)

            setattr(dist, name, functools.wraps(fn)(wrapped))
        yield trace
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)
