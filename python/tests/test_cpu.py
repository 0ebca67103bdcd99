"""The CPU capture from Python (stagetrace.open(..., cpu=True)): a spin
stage recorded with it has the cpu_* tables of docs/trace-format.md, "CPU
capture", read back with sqlite3 (the C library's readers do not decode
them here). The perf records are checked where the kernel allows perf
events (skipped with its reason otherwise); the schedstat windows in every
case."""
import sqlite3
import time

import pytest

import stagetrace


def spin(seconds):
    until = time.monotonic() + seconds
    x = 0
    while time.monotonic() < until:
        x += 1
    return x


def record(path):
    with stagetrace.open(path, program="pytest_cpu", cpu=True, cpu_period_ns=1000000,
                         profile_interval=1) as trace:
        work = trace.stage("spin")
        for i in range(3):
            trace.step(i)
            with work:
                spin(0.1)
        trace.step(3)


def meta(db):
    return dict(db.execute("SELECT key, value FROM meta"))


def test_cpu_windows(path):
    record(path)
    db = sqlite3.connect(path)
    m = meta(db)
    assert m["status"] == "complete"
    assert m["cpu_mode"] in ("perf", "timer", "refused", "unsupported", "nomem", "error")
    assert m["cpu_window_source"] == "schedstat"
    tid, = db.execute("SELECT os_tid FROM cpu_threads WHERE thread = 0").fetchone()
    # the main thread spun 0.1 s between each two marks
    rows = db.execute("SELECT step, oncpu_ns FROM cpu_windows WHERE os_tid = ? AND thread = 0 "
                      "AND step BETWEEN 1 AND 3 ORDER BY step", (tid,)).fetchall()
    assert [r[0] for r in rows] == [1, 2, 3]
    for _, on in rows:
        assert 0.01e9 < on <= 0.11e9
    db.close()


def test_cpu_perf_records(path):
    record(path)
    db = sqlite3.connect(path)
    m = meta(db)
    if m["cpu_mode"] != "perf":
        pytest.skip("perf events refused: %s" % m.get("cpu_reason", m["cpu_mode"]))
    assert db.execute("SELECT count(*) FROM cpu_threads WHERE status = 'perf'").fetchone()[0] == 1
    n_chunks, n_records = db.execute("SELECT count(*), sum(n_records) FROM cpu_chunks").fetchone()
    assert n_chunks >= 1 and n_records >= 10
    assert int(m["cpu_samples"]) >= 10  # 0.3 s of spinning at 1 kHz
    assert db.execute("SELECT count(*) FROM cpu_stacks").fetchone()[0] >= 1
    db.close()
