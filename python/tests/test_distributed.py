"""stagetrace.sync_clocks and stagetrace.collectives against a stand-in for torch.distributed:
two processes joined by pipes, whose send/recv carry the probes as the gloo group would, so
that the exchange, the meta it leaves and the automatic measurements at open (right after
init_process_group) and at close are checked without torch. Rank 1 runs with its clock
shifted by 5 s (ST_TEST_CLOCK_SHIFT_NS): its stored offsets must give the shift back within
their stated uncertainty. tests/it_torchrun.sh does the same under torchrun with real torch."""
import multiprocessing
import os
import sqlite3
import sys
import time
import types

import pytest

import stagetrace

SHIFT_NS = 5_000_000_000


class _Buf(list):
    pass


def _fake_torch(rank, world, conns, calls):
    torch = types.ModuleType("torch")
    torch.int64 = "int64"
    torch.zeros = lambda n, dtype=None: _Buf([0] * n)
    dist = types.ModuleType("torch.distributed")
    state = {"up": False}
    dist.is_available = lambda: True
    dist.is_initialized = lambda: state["up"]
    dist.get_rank = lambda group=None: rank
    dist.get_world_size = lambda group=None: world
    dist.get_backend = lambda group=None: "gloo"

    def init_process_group(backend=None, **kwargs):
        state["up"] = True

    def destroy_process_group(group=None):
        state["up"] = False

    def send(buf, dst, group=None):
        conns[dst].send(list(buf))

    def recv(buf, src, group=None):
        buf[:] = conns[src].recv()

    def all_reduce(buf, op=None, group=None, async_op=False):
        calls.append(("all_reduce", stagetrace.current() is not None))
        time.sleep(0.002)

    dist.init_process_group, dist.destroy_process_group = init_process_group, destroy_process_group
    dist.send, dist.recv, dist.all_reduce = send, recv, all_reduce
    torch.distributed = dist
    return torch


def _rank(rank, world, path, conns, errors, destroy_before_close):
    try:
        os.environ["ST_TEST_CLOCK_SHIFT_NS"] = "1:%d" % SHIFT_NS
        calls = []
        torch = _fake_torch(rank, world, conns, calls)
        sys.modules["torch"], sys.modules["torch.distributed"] = torch, torch.distributed
        trace = stagetrace.open(path, rank=rank, world_size=world, run_id="fake-run", handle_signals=False)
        # opened before init_process_group: the measurement comes right after it
        torch.distributed.init_process_group("gloo")
        with stagetrace.collectives(trace):
            for _ in range(3):
                torch.distributed.all_reduce(torch.zeros(4))
        assert torch.distributed.all_reduce.__name__ == "all_reduce"
        if destroy_before_close:
            torch.distributed.destroy_process_group()
        trace.close()
        assert len(calls) == 3
    except BaseException as e:  # reported by the parent
        errors.put("rank %d: %r" % (rank, e))
        raise


def _run(tmp_path, destroy_before_close=False):
    ctx = multiprocessing.get_context("fork")
    a, b = ctx.Pipe()
    errors = ctx.Queue()
    path = str(tmp_path / "run.sqlite")
    procs = [ctx.Process(target=_rank, args=(0, 2, path, {1: a}, errors, destroy_before_close)),
             ctx.Process(target=_rank, args=(1, 2, path, {0: b}, errors, destroy_before_close))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert errors.empty(), errors.get()
    assert [p.exitcode for p in procs] == [0, 0]
    metas = []
    for r in range(2):
        db = sqlite3.connect(str(tmp_path / ("run.rank%d.sqlite" % r)))
        metas.append(dict(db.execute("SELECT key, value FROM meta")))
        db.close()
    return metas


def test_sync_clocks_at_open_and_close(tmp_path):
    m0, m1 = _run(tmp_path)
    assert m0["clock_offset_ns"] == "0" and m0["clock_uncertainty_ns"] == "0"
    assert m0["clock_offset_close_ns"] == "0" and m0["clock_uncertainty_close_ns"] == "0"
    assert "clock_map_error_ns" in m0 and int(m0["clock_map_half_bracket_ns"]) >= 0
    assert m1["python_clock_sync"] == "torch.distributed (gloo)" and m0["python_clock_sync"] == m1["python_clock_sync"]
    for at in ("", "_close"):
        offset, unc = int(m1["clock_offset%s_ns" % at]), int(m1["clock_uncertainty%s_ns" % at])
        print("rank 1%s: offset %d ns +- %d (shift -%d)" % (at, offset, unc, SHIFT_NS))
        assert 0 < unc < 50_000_000, m1
        assert abs(offset + SHIFT_NS) <= unc, (offset, unc)
        assert int(m1["clock_map_half_bracket%s_ns" % at]) >= 0
    assert int(m1["clock_sync_close_ns"]) > int(m1["clock_sync_ns"])


def test_collectives_are_comm_ranges(tmp_path, analyze):
    _run(tmp_path)
    for r in range(2):
        out = analyze("sql", "--format", "csv", str(tmp_path / ("run.rank%d.sqlite" % r)),
                      "SELECT s.kind, count(*) FROM ranges r JOIN stages s ON s.id = r.stage "
                      "WHERE s.name = 'all_reduce' GROUP BY s.kind")
        assert out.strip().split("\n")[1:] == ["comm,3"], out


def test_close_after_destroy_is_skipped_and_said(tmp_path):
    m0, m1 = _run(tmp_path, destroy_before_close=True)
    for m in (m0, m1):
        assert "clock_offset_close_ns" not in m
        assert m["python_clock_sync_close"] == "skipped: torch.distributed was no longer initialized at close"
    assert abs(int(m1["clock_offset_ns"]) + SHIFT_NS) <= int(m1["clock_uncertainty_ns"])


def test_sync_clocks_refuses_without_torch_distributed():
    saved = sys.modules.pop("torch.distributed", None)
    try:
        with pytest.raises(stagetrace.Error, match="torch.distributed is not initialized"):
            stagetrace.sync_clocks()
    finally:
        if saved is not None:
            sys.modules["torch.distributed"] = saved
