"""Tests of the stagetrace Python package against the C library's own tools:
what Python records is read back by `analyze` and by stagetrace.read, and
the two must agree."""
import argparse
import csv
import io
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import stagetrace
from conftest import BUILD, ROOT


def sql_rows(analyze, path, query):
    text = analyze("sql", "--format", "csv", path, query)
    rows = list(csv.reader(io.StringIO(text)))
    return rows[0], rows[1:]


def record_loop(trace, steps=6, inner=3):
    forward = trace.stage("forward")
    wait = trace.stage("queue_wait", kind="wait_input")
    trace.step(0)
    for i in range(steps):
        with forward:
            for _ in range(inner):
                with wait:
                    pass
        trace.counter("depth", i, "items")
        trace.step(i + 1, 100)


# ---- recording ---------------------------------------------------------------

def test_nesting_and_counts(path):
    with stagetrace.open(path, program="pytest") as trace:
        record_loop(trace, steps=4, inner=3)
    data = stagetrace.read(path)
    assert data.meta["status"] == "complete"
    assert data.meta["program"] == "pytest"
    names = {s["id"]: (s["name"], s["kind"]) for s in data.stages}
    assert sorted(names.values()) == [("forward", "work"), ("queue_wait", "wait_input")]
    by_name = {v[0]: k for k, v in names.items()}
    r = data.ranges
    outer = r[r["stage"] == by_name["forward"]]
    inner = r[r["stage"] == by_name["queue_wait"]]
    assert len(outer) == 4 and len(inner) == 12
    assert set(outer["depth"]) == {0} and set(inner["depth"]) == {1}
    # every inner range lies inside an outer one
    for x in inner:
        assert ((outer["start_ns"] <= x["start_ns"]) &
                (outer["start_ns"] + outer["dur_ns"] >= x["start_ns"] + x["dur_ns"])).any()
    assert list(data.steps["step"]) == [0, 1, 2, 3, 4]
    assert list(data.steps["tokens"]) == [0, 100, 100, 100, 100]
    assert list(data.counters["value"]) == [0.0, 1.0, 2.0, 3.0]
    assert data.counter_names == [{"id": 0, "name": "depth", "unit": "items"}]
    assert [t["name"] for t in data.threads] == ["main"]


def test_threads_register_and_unregister(path):
    n_threads, n_ranges = 3, 200
    handles = {}
    with stagetrace.open(path) as trace:
        work = trace.stage("work")

        def body(i):
            with stagetrace.thread("worker%d" % i, "worker", device=-1) as th:
                handles[i] = th
                for _ in range(n_ranges):
                    with work:
                        pass
            assert not th.registered

        threads = [threading.Thread(target=body, args=(i,)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # a thread of the trace records nothing once unregistered
        assert all(not h.registered for h in handles.values())
    data = stagetrace.read(path)
    workers = {t["id"]: t for t in data.threads if t["role"] == "worker"}
    assert sorted(t["name"] for t in workers.values()) == ["worker0", "worker1", "worker2"]
    for tid in workers:
        assert (data.ranges["thread"] == tid).sum() == n_ranges
    assert data.threads[0]["rank"] == 0


def test_thread_registered_twice_and_unregistered_elsewhere(path):
    with stagetrace.open(path, main_thread=None) as trace:
        th = stagetrace.thread("main", "main")
        with pytest.raises(stagetrace.Error, match="already registered"):
            stagetrace.thread("again", "main")
        errors = []

        def other():
            try:
                th.unregister()
            except stagetrace.Error as e:
                errors.append(str(e))
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert errors and "registered it" in errors[0]
        th.unregister()
        th.unregister()  # again: nothing
        stagetrace.thread("main2", "main").unregister()


def test_exception_inside_with_ends_the_range(path):
    with stagetrace.open(path) as trace:
        outer = trace.stage("outer")
        failing = trace.stage("failing")
        after = trace.stage("after")
        for _ in range(3):
            with pytest.raises(ZeroDivisionError):
                with outer:
                    with failing:
                        1 / 0
        with after:
            pass
    data = stagetrace.read(path)
    ids = {s["name"]: s["id"] for s in data.stages}
    r = data.ranges
    assert (r["stage"] == ids["failing"]).sum() == 3
    assert (r["stage"] == ids["outer"]).sum() == 3
    assert set(r[r["stage"] == ids["failing"]]["depth"]) == {1}
    # nothing was left open: the next range is outermost again
    assert list(r[r["stage"] == ids["after"]]["depth"]) == [0]


def test_decorator(path):
    with stagetrace.open(path) as trace:
        forward = trace.stage("forward")

        @forward
        def f(x, y=1):
            "adds"
            if x < 0:
                raise ValueError("negative")
            return x + y

        class Model:
            @forward
            def step(self, x):
                return x * 2

        assert f.__name__ == "f" and f.__doc__ == "adds" and f.__wrapped__ is not None
        assert f(1, y=2) == 3
        assert Model().step(4) == 8
        with pytest.raises(ValueError):
            f(-1)
        with pytest.raises(TypeError, match="generator"):
            @forward
            def gen():
                yield 1
        with pytest.raises(TypeError):
            forward(1, 2)
    data = stagetrace.read(path)
    assert len(data.ranges) == 3
    assert set(data.ranges["depth"]) == {0}


def test_stage_registered_once_and_kinds(path):
    with stagetrace.open(path) as trace:
        a = trace.stage("x", kind="sync")
        assert trace.stage("x", kind="sync") is a
        assert (a.name, a.kind) == ("x", "sync")
        with pytest.raises(ValueError, match="already registered with kind sync"):
            trace.stage("x", kind="work")
        with pytest.raises(ValueError, match="unknown stage kind"):
            trace.stage("y", kind="busy")
        with pytest.raises(TypeError):
            stagetrace.Stage()
    assert [s["kind"] for s in stagetrace.read(path).stages] == ["sync"]


def test_disabled_trace_records_nothing(tmp_path):
    os.chdir(tmp_path)
    trace = stagetrace.open_disabled()
    assert not trace.enabled and trace.path is None
    s = trace.stage("forward")
    with trace.stage("inner"):
        pass
    for i in range(100):
        with s:
            pass
        trace.step(i, 10)
        trace.counter("c", i)
        trace.mark("m")

    def body():
        with stagetrace.thread("worker", "worker"):
            with s:
                pass
    t = threading.Thread(target=body)
    t.start()
    t.join()
    trace.close()
    assert os.listdir(tmp_path) == []
    with pytest.raises(stagetrace.Error, match="closed"):
        with s:
            pass


def _per_range_ns(cm, n=200000, repeats=5):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            with cm:
                pass
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e9


def test_disabled_costs_about_a_c_noop():
    trace = stagetrace.open_disabled()
    try:
        stage = trace.stage("x")
        noop = stagetrace.NoOp()
        # interleaved, best of several: the disabled stage is the no-op's
        # price plus a compare (the benchmark, bench/bench_python.py, has the
        # figures); the bound is loose because the machine is shared.
        disabled = bare = float("inf")
        for _ in range(4):  # alternating, so that a busy neighbour slows both alike
            disabled = min(disabled, _per_range_ns(stage, repeats=2))
            bare = min(bare, _per_range_ns(noop, repeats=2))
        assert disabled < bare * 1.5 + 30, (disabled, bare)
    finally:
        trace.close()


def test_profile_windows_equal_analyze_intervals(path, analyze):
    windows = []
    with stagetrace.open(path, profile_interval=2, on_window=windows.append) as trace:
        work = trace.stage("work")
        idle_wait = trace.stage("wait", kind="wait_input")

        def worker():
            with stagetrace.thread("worker", "worker"):
                for _ in range(50):
                    with work:
                        time.sleep(0.0002)
        t = threading.Thread(target=worker)
        t.start()
        trace.step(0)
        for i in range(6):
            with idle_wait:
                time.sleep(0.002)
            trace.step(i + 1, 10)
        t.join()
    assert [w["index"] for w in windows] == [0, 1, 2]
    text = "".join(w["text"] for w in windows)
    assert text == analyze("intervals", path)
    for w in windows:
        assert (w["step_first"], w["step_last"]) == (2 * w["index"] + 1, 2 * w["index"] + 2)
        assert w["tokens"] == 20
        for th in w["threads"]:
            assert sum(th["stage_ns"].values()) + th["idle_ns"] == w["t1_ns"] - w["t0_ns"]
        assert w["stages"] == ["work", "wait"] and w["kinds"] == ["work", "wait_input"]


def test_window_to_a_logger_and_a_failing_callback(path, caplog, monkeypatch):
    logger = logging.getLogger("test.profile")
    with caplog.at_level(logging.INFO, logger="test.profile"):
        with stagetrace.open(path, profile_interval=1, on_window=logger) as trace:
            record_loop(trace, steps=2)
    lines = [r.getMessage() for r in caplog.records if r.name == "test.profile"]
    assert lines[0].startswith("profile steps 1-1") and lines[2].startswith("profile steps 2-2")
    assert len(lines) == 4

    def boom(window):
        raise RuntimeError("callback failed")
    path2 = path + ".2"
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(str(u.exc_value)))
    with stagetrace.open(path2, profile_interval=1, on_window=boom) as trace:
        record_loop(trace, steps=3)
    # reported as an unraisable exception (sys.unraisablehook), each time; the writer goes on
    assert unraisable == ["callback failed"] * 3
    assert stagetrace.read(path2).meta["status"] == "complete"
    with pytest.raises(TypeError):
        stagetrace.open(path + ".3", on_window=42)


def test_callback_cannot_close_or_flush(path):
    seen = []

    def cb(window):
        for f in (trace.close, trace.flush):
            try:
                f()
            except stagetrace.Error as e:
                seen.append(str(e))
    with stagetrace.open(path, profile_interval=1, on_window=cb) as trace:
        record_loop(trace, steps=1)
        time.sleep(0.3)  # the window arrives online (100 ms behind), not at close
    assert seen == ["close() cannot be called from a window or log callback",
                    "flush() cannot be called from a window or log callback"]


# ---- argparse ----------------------------------------------------------------

def test_add_arguments_and_open_from_args(tmp_path, capsys):
    os.chdir(tmp_path)
    parser = stagetrace.add_arguments(argparse.ArgumentParser(prog="train"))
    args = parser.parse_args([])
    assert (args.profile_interval, args.trace) == (0, None)
    trace = stagetrace.open_from_args(args, program="train")
    assert not trace.enabled
    trace.close()
    assert os.listdir(tmp_path) == []

    args = parser.parse_args(["--trace", "t.sqlite", "--profile-interval", "5"])
    assert (args.profile_interval, args.trace) == (5, "t.sqlite")
    with stagetrace.open_from_args(args, program="train") as trace:
        assert trace.enabled and trace.path == "t.sqlite"
    meta = stagetrace.read("t.sqlite").meta
    assert (meta["program"], meta["profile_interval"]) == ("train", "5")

    # --profile-interval alone records to runs/<stamp>-<pid>.sqlite, as the trainer does
    capsys.readouterr()
    with stagetrace.open_from_args(parser.parse_args(["--profile-interval", "2"])) as trace:
        assert trace.path.startswith("runs" + os.sep) and trace.path.endswith("-%d.sqlite" % os.getpid())
    assert os.path.exists(trace.path)
    # ... and says where, one line on stderr
    assert capsys.readouterr().err == "stagetrace: recording to %s (--trace PATH chooses the file)\n" % trace.path
    with stagetrace.open_from_args(parser.parse_args(["--trace", "u.sqlite", "--profile-interval", "2"])):
        pass
    assert capsys.readouterr().err == ""

    for bad in (["--profile-interval", "-1"], ["--profile-interval", "x"], ["--trace"]):
        with pytest.raises(SystemExit) as e:
            parser.parse_args(bad)
        assert e.value.code == 2


# ---- reading -------------------------------------------------------------------

def test_read_equals_analyze_sql(path, analyze):
    with stagetrace.open(path) as trace:
        record_loop(trace, steps=5, inner=2)

        def worker():
            with stagetrace.thread("worker", "worker"):
                s = trace.stage("side", kind="copy")
                for i in range(30):
                    with s:
                        trace.counter("bytes", i * 1.5, "B")
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        trace.mark("done")
    data = stagetrace.read(path)
    _compare_with_sql(data, path, analyze)
    assert data.marks[0][2] == "done"


def _compare_with_sql(data, path, analyze):
    _, rows = sql_rows(analyze, path, "SELECT thread, stage, start_ns, dur_ns, depth, "
                                      "coalesce(step, -1) FROM ranges")
    want = sorted(tuple(int(x) for x in row) for row in rows)
    r = data.ranges
    got = sorted(zip(r["thread"].tolist(), r["stage"].tolist(), r["start_ns"].tolist(),
                     r["dur_ns"].tolist(), r["depth"].tolist(), data.range_steps().tolist()))
    assert got == want and len(got) > 0
    _, rows = sql_rows(analyze, path, "SELECT thread, counter, ts_ns, value FROM counters")
    want = sorted((int(a), int(b), int(c), float(d)) for a, b, c, d in rows)
    c = data.counters
    got = sorted(zip(c["thread"].tolist(), c["counter"].tolist(), c["ts_ns"].tolist(),
                     c["value"].tolist()))
    assert got == want
    _, rows = sql_rows(analyze, path, "SELECT step, ts_ns, tokens FROM steps ORDER BY step")
    assert [tuple(int(x) for x in row) for row in rows] == \
        list(zip(*(data.steps[k].tolist() for k in ("step", "ts_ns", "tokens"))))
    _, rows = sql_rows(analyze, path, "SELECT id, name, role, device, rank FROM threads ORDER BY id")
    assert [[str(t[k]) for k in ("id", "name", "role", "device", "rank")] for t in data.threads] == rows


def test_read_generated_traces_equal_sql(tracegen, analyze, tmp_path):
    subprocess.run([tracegen, str(tmp_path)], check=True, capture_output=True)
    for name in ("gen.sqlite", "dense.sqlite", "unended.sqlite"):
        p = str(tmp_path / name)
        _compare_with_sql(stagetrace.read(p), p, analyze)
    # GPU records: equal to the gpu table
    for name in ("gpu_steps.sqlite", "gpu_shared.sqlite"):
        p = str(tmp_path / name)
        data = stagetrace.read(p)
        _, rows = sql_rows(analyze, p, "SELECT device, stream, start_ns, dur_ns, bytes, "
                                       "coalesce(thread, -1), coalesce(stage, -1), correlation FROM gpu")
        want = sorted(tuple(int(x) for x in row) for row in rows)
        g = data.gpu
        got = sorted(zip(*(g[k].tolist() for k in ("device", "stream", "start_ns", "dur_ns", "bytes",
                                                    "thread", "stage", "correlation"))))
        assert got == want and len(got) > 0


def test_gpu_frame_has_thread_and_stage_names(tracegen, analyze, tmp_path):
    pytest.importorskip("pandas")
    subprocess.run([tracegen, str(tmp_path)], check=True, capture_output=True)
    for name in ("gpu_steps.sqlite", "gpu_shared.sqlite"):
        p = str(tmp_path / name)
        g = stagetrace.read(p).to_dataframe("gpu")
        _, rows = sql_rows(analyze, p, "SELECT g.start_ns, g.device, g.stream, coalesce(t.name, ''), "
                                       "coalesce(t.role, ''), coalesce(s.name, '') FROM gpu g "
                                       "LEFT JOIN threads t ON t.id = g.thread LEFT JOIN stages s ON s.id = g.stage")
        want = sorted(tuple(row) for row in rows)
        got = sorted(zip(g["start_ns"].astype(str), g["device"].astype(str), g["stream"].astype(str),
                         g["thread_name"].astype(object).fillna("").astype(str),
                         g["role"].astype(object).fillna("").astype(str),
                         g["stage_name"].astype(object).fillna("").astype(str)))
        assert got == want and len(got) > 0
        # named where known, missing where the thread or stage is unknown
        assert g["thread_name"].notna().any() and g["stage_name"].notna().any()
        assert (g["thread_name"].isna() == g["thread"].isna()).all()
        assert (g["stage_name"].isna() == g["stage"].isna()).all()


def test_gpu_launch_threads(analyze, tmp_path):
    """launch_tid is the SQL gpu table's, and gpu_threads names it (the trace's gpu_threads
    table, added here to a sample trace that predates it) in gpu_threads and the DataFrame."""
    import shutil
    import sqlite3
    p = str(tmp_path / "t.sqlite")
    shutil.copy(os.path.join(ROOT, "samples", "traces", "h200-sync.sqlite"), p)
    _, rows = sql_rows(analyze, p, "SELECT start_ns, device, stream, coalesce(launch_tid, 0) FROM gpu")
    want = sorted(tuple(int(x) for x in row) for row in rows)
    tids = sorted({w[3] for w in want if w[3]})
    assert tids
    db = sqlite3.connect(p)
    db.execute("CREATE TABLE gpu_threads(os_tid INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    db.execute("INSERT INTO gpu_threads VALUES (?, 'worker_x')", (tids[0],))
    db.commit()
    db.close()
    data = stagetrace.read(p)
    g = data.gpu
    got = sorted(zip(*(g[k].tolist() for k in ("start_ns", "device", "stream", "launch_tid"))))
    assert got == want
    assert data.gpu_threads == {tids[0]: "worker_x"}
    pd = pytest.importorskip("pandas")
    df = data.to_dataframe("gpu")
    named = df["launch_thread"].astype(object) == "worker_x"
    assert named.sum() == sum(1 for w in want if w[3] == tids[0]) > 0
    assert (df.loc[named, "launch_tid"] == tids[0]).all()
    assert df.loc[~named, "launch_thread"].isna().all()
    assert df["launch_tid"].isna().sum() == sum(1 for w in want if not w[3])


def test_sample_gpu_frame_names_as_the_ranges_frame(analyze):
    """On a sample trace with GPU activity, the GPU DataFrame's thread_name, role and stage_name
    are the ranges DataFrame's: the same categorical columns, the same name for each thread and
    stage id, and per role as many GPU records as the SQL gpu table joined to threads has."""
    pd = pytest.importorskip("pandas")
    p = os.path.join(ROOT, "samples", "traces", "h200-2x2-async.sqlite")
    data = stagetrace.read(p)
    g, r = data.to_dataframe("gpu"), data.to_dataframe("ranges")
    assert len(g) > 0 and len(r) > 0
    for col in ("thread_name", "role", "stage_name"):
        assert isinstance(g[col].dtype, pd.CategoricalDtype) and isinstance(r[col].dtype, pd.CategoricalDtype), col
    for key, cols in (("thread", ["thread_name", "role"]), ("stage", ["stage_name"])):
        named = g[g[key].notna()]
        got = {int(k): tuple(str(v[c]) for c in cols) for k, v in named.groupby(key).first().iterrows()}
        want = {int(k): tuple(str(v[c]) for c in cols) for k, v in r.groupby(key, observed=True).first().iterrows()}
        assert got and all(want[k] == v for k, v in got.items()), (key, got, want)
    _, rows = sql_rows(analyze, p, "SELECT t.role, count(*) FROM gpu g JOIN threads t ON t.id = g.thread GROUP BY t.role")
    assert {role: int(n) for role, n in rows} == g["role"].value_counts()[lambda n: n > 0].to_dict()
    _, rows = sql_rows(analyze, p, "SELECT s.name, count(*) FROM gpu g JOIN stages s ON s.id = g.stage GROUP BY s.name")
    assert {name: int(n) for name, n in rows} == g["stage_name"].value_counts()[lambda n: n > 0].to_dict()


def test_version():
    import re
    header = open(os.path.join(os.path.dirname(__file__), "..", "..", "tracer", "include", "stagetrace.h")).read()
    want = re.search(r'#define ST_VERSION_STRING "([^"]+)"', header).group(1)
    assert stagetrace.__version__ == want == stagetrace.library_version


def test_version_is_the_traces_and_analyzes(path, analyze):
    """__version__ is what a trace the package writes records as tool_version, and the version
    `analyze --version` prints."""
    with stagetrace.open(path) as trace:
        record_loop(trace, steps=2, inner=1)
    assert stagetrace.read(path).meta["tool_version"] == stagetrace.__version__
    assert analyze("--version").startswith("analyze (stagetrace) %s," % stagetrace.__version__)


def test_read_refuses_what_is_not_a_trace(tmp_path, tracegen):
    with pytest.raises(stagetrace.Error, match="cannot open|No such|not"):
        stagetrace.read(str(tmp_path / "missing.sqlite"))
    subprocess.run([tracegen, str(tmp_path)], check=True, capture_output=True)
    for name in ("notsqlite.sqlite", "badversion.sqlite", "corruptchunk.sqlite"):
        with pytest.raises(stagetrace.Error):
            stagetrace.read(str(tmp_path / name))


def test_pandas(path):
    pd = pytest.importorskip("pandas")
    with stagetrace.open(path) as trace:
        record_loop(trace, steps=3)
    frames = stagetrace.read(path).as_pandas()
    r = frames["ranges"]
    assert isinstance(r, pd.DataFrame)
    assert sorted(r["stage_name"].astype(str).unique()) == ["forward", "queue_wait"]
    assert (r["end_ns"] == r["start_ns"] + r["dur_ns"]).all()
    assert set(r["thread_name"].astype(str)) == {"main"}
    assert list(frames["counters"]["counter_name"].astype(str).unique()) == ["depth"]
    assert len(frames["steps"]) == 4 and len(frames["gpu"]) == 0


# ---- lifetime --------------------------------------------------------------------

def test_use_after_close_raises(path):
    trace = stagetrace.open(path)
    stage = trace.stage("x")
    trace.close()
    trace.close()  # again: nothing
    assert trace.closed
    for call in (lambda: stage.__enter__(), lambda: trace.step(1), lambda: trace.counter("c", 1),
                 lambda: trace.mark("m"), lambda: trace.stage("y"), lambda: trace.flush(),
                 lambda: stagetrace.thread("t", "r"), lambda: trace.thread("t")):
        with pytest.raises(stagetrace.Error, match="closed|no trace is open"):
            call()
    with pytest.raises(stagetrace.Error, match="is closed"):
        with trace:
            pass


def test_one_trace_at_a_time_and_existing_files(path):
    with stagetrace.open(path):
        with pytest.raises(stagetrace.Error, match="already open"):
            stagetrace.open(path + ".b")
        with pytest.raises(stagetrace.Error, match="already open"):
            stagetrace.open_disabled()
    with pytest.raises(stagetrace.Error, match="cannot open the trace"):
        stagetrace.open(path)  # exists, no overwrite
    with stagetrace.open(path, overwrite=True):
        pass
    with pytest.raises(ValueError):
        stagetrace.open(None)


def test_thread_outliving_its_trace(path):
    """A thread still registered when the trace closes, recording again under the next trace."""
    go, done = threading.Event(), threading.Event()
    trace = stagetrace.open(path)
    s1 = trace.stage("s1")
    box = {}

    def worker():
        stagetrace.thread("worker", "worker")  # never unregistered
        with s1:
            pass
        go.wait()
        t2 = box["trace"]
        with t2.stage("s2"):  # the old ring is gone: this thread is not registered here
            pass
        with stagetrace.thread("worker2", "worker"):
            with t2.stage("s2"):
                pass
        done.set()
    t = threading.Thread(target=worker)
    t.start()
    time.sleep(0.05)
    trace.close()
    box["trace"] = stagetrace.open(path + ".2")
    go.set()
    done.wait(10)
    t.join()
    box["trace"].close()
    d2 = stagetrace.read(path + ".2")
    assert len(d2.ranges) == 1 and [x["name"] for x in d2.threads] == ["main", "worker2"]


def test_sigint_flushes(tmp_path):
    path = str(tmp_path / "int.sqlite")
    child = textwrap.dedent("""
        import os, sys, time
        sys.path.insert(0, %r)
        import stagetrace
        trace = stagetrace.open(%r, commit_ms=60000)
        s = trace.stage("loop")
        trace.step(0)
        n = 0
        try:
            while True:
                with s:
                    n += 1
                if n == 1000:
                    print("ready", flush=True)
                if n %% 1000 == 0:
                    time.sleep(0.001)
        except KeyboardInterrupt:
            print(n, flush=True)
            os._exit(130)  # no close: what is in the file came from the flush
    """) % (os.path.join(BUILD, "python"), path)
    # SIGINT at its default action in the child, whatever this process has
    # (a background job starts with it ignored, and an ignored SIGINT stays so)
    p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 130
    n = int(out.strip())
    data = stagetrace.read(path)
    assert data.meta["status"] == "interrupted"
    # the flush took everything recorded before the handler ran
    assert n - 1 <= len(data.ranges) <= n


def test_ignored_sigint_stays_ignored(tmp_path):
    # (trap '' INT; exec python3 train.py): SIGINT is ignored when the trace
    # opens, so it must change nothing: every step done, exit 0, "complete".
    path = str(tmp_path / "ignored.sqlite")
    child = textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        import stagetrace
        trace = stagetrace.open(%r)
        s = trace.stage("loop")
        trace.step(0)
        for i in range(1000):
            with s:
                pass
        print("ready", flush=True)
        sys.stdin.readline()  # the parent has sent SIGINT and SIGTERM
        for step in range(1, 4):
            with s:
                pass
            trace.step(step)
        trace.close()
        print("done", flush=True)
    """) % (os.path.join(BUILD, "python"), path)

    def ignore():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    p = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, preexec_fn=ignore)
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGINT)
    p.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    out, _ = p.communicate("go\n", timeout=30)
    assert p.returncode == 0
    assert out.strip() == "done"
    data = stagetrace.read(path)
    assert data.meta["status"] == "complete"
    assert len(data.ranges) == 1003
    assert list(data.steps["step"]) == [0, 1, 2, 3]


def test_exit_closes_the_trace(tmp_path):
    path = str(tmp_path / "exit.sqlite")
    child = textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        import stagetrace
        windows = []
        trace = stagetrace.open(%r, profile_interval=1, on_window=lambda w: print(w["index"]))
        s = trace.stage("loop")
        trace.step(0)
        for i in range(3):
            with s:
                pass
            trace.step(i + 1)
        # no close: the interpreter's exit does it (windows still delivered)
    """) % (os.path.join(BUILD, "python"), path)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "2"]
    assert stagetrace.read(path).meta["status"] == "complete"


def test_unregistered_thread_is_reported(path, caplog):
    with caplog.at_level(logging.WARNING, logger="stagetrace"):
        with stagetrace.open(path) as trace:
            s = trace.stage("x")
            t = threading.Thread(target=lambda: s.__enter__())
            t.start()
            t.join()
    assert any("not registered" in r.getMessage() for r in caplog.records)


# ---- ranks and GPU ------------------------------------------------------------------

def test_rank_from_env():
    assert stagetrace.rank_from_env({}) == {"rank": 0, "world_size": 1, "local_rank": 0, "run_id": None}
    torchrun = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "job 7/a"}
    assert stagetrace.rank_from_env(torchrun) == {"rank": 3, "world_size": 8, "local_rank": 1,
                                                  "run_id": "job_7_a"}
    mpi = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_RANK": "0", "PMIX_NAMESPACE": "prterun-host-123@1"}
    assert stagetrace.rank_from_env(mpi) == {"rank": 2, "world_size": 4, "local_rank": 0,
                                             "run_id": "prterun-host-123_1"}
    assert stagetrace.rank_from_env(dict(mpi, STAGETRACE_RUN_ID="x" * 80))["run_id"] == "x" * 64
    with pytest.raises(stagetrace.Error, match="not an integer"):
        stagetrace.rank_from_env({"RANK": "a", "WORLD_SIZE": "2"})
    with pytest.raises(stagetrace.Error, match="not in 0..world_size-1"):
        stagetrace.rank_from_env({"RANK": "2", "WORLD_SIZE": "2"})


def test_gpu_without_cupti(path):
    if stagetrace.gpu_available():
        pytest.skip("this build has CUPTI")
    with pytest.raises(stagetrace.Error, match="GPU recording is not available in this build"):
        stagetrace.open(path, gpu=True)
    assert stagetrace.current() is None


def test_gpu_records_spec(monkeypatch):
    """gpu_every and gpu_records into the spec st_gpu_start_with gets."""
    monkeypatch.delenv("STAGETRACE_GPU_RECORDS", raising=False)
    assert stagetrace.gpu_records_spec() is None
    assert stagetrace.gpu_records_spec(None, "kernel") == "kernel"
    assert stagetrace.gpu_records_spec(10) == "every_steps=10"
    assert stagetrace.gpu_records_spec(3, "kernel,memcpy") == "kernel,memcpy,every_steps=3"
    monkeypatch.setenv("STAGETRACE_GPU_RECORDS", "kernel,buffer_kb=64")
    assert stagetrace.gpu_records_spec(1000000) == "kernel,buffer_kb=64,every_steps=1000000"
    for bad in (0, -1, 1000001, True, 2.0, "3"):
        with pytest.raises(ValueError, match="gpu_every must be a whole number from 1 to 1000000"):
            stagetrace.gpu_records_spec(bad)
    with pytest.raises(TypeError, match="gpu_records must be a record-set string"):
        stagetrace.gpu_records_spec(None, 5)


def test_gpu_every_needs_gpu(path):
    """gpu_every / gpu_records without gpu=True, or a bad value: refused before
    anything is opened; a spec that does not parse: the tracer's message."""
    with pytest.raises(ValueError, match="they need gpu=True"):
        stagetrace.open(path, gpu_every=10)
    with pytest.raises(ValueError, match="gpu_every must be"):
        stagetrace.open(path, gpu=True, gpu_every=0)
    assert stagetrace.current() is None
    assert not os.path.exists(path)
    if stagetrace.gpu_available():
        with pytest.raises(stagetrace.Error, match="GPU records 'kernels,every_steps=5': unknown item 'kernels'"):
            stagetrace.open(path, gpu=True, gpu_every=5, gpu_records="kernels", overwrite=True)
        assert stagetrace.current() is None
        with pytest.raises(stagetrace.Error, match="every_steps=5 cannot record memcpy, memset or sync"):
            stagetrace.open(path, gpu=True, gpu_every=5, gpu_records="default", overwrite=True)
        assert stagetrace.current() is None


def test_gpu_pause_needs_gpu_recording(path):
    """gpu_pause / gpu_resume without GPU recording on: stagetrace.Error, the
    trace goes on; on a disabled trace both do nothing."""
    with stagetrace.open(path) as trace:
        for call in (trace.gpu_pause, trace.gpu_resume):
            with pytest.raises(stagetrace.Error,
                               match="GPU tracing is not on" if stagetrace.gpu_available()
                               else "GPU recording is not available in this build"):
                call()
        with trace.stage("work"):
            pass
    data = stagetrace.read(path)
    assert len(data.ranges["stage"]) == 1
    off = stagetrace.open_disabled()
    assert off.gpu_pause() is None and off.gpu_resume() is None
    off.close()


def test_ranks_under_torchrun_and_mpirun(tmp_path):
    """Each rank writes its own file of one run (st_rank_path), rank and run id in meta."""
    child = textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        import stagetrace
        with stagetrace.open(sys.argv[1], device=0) as trace:
            print(trace.path)
            with trace.stage("work"):
                pass
    """) % os.path.join(BUILD, "python")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "RANK", "WORLD_SIZE",
                                                                     "LOCAL_RANK", "TORCHELASTIC",
                                                                     "STAGETRACE_"))}
    launchers = {
        "torchrun": lambda r: {"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r),
                               "TORCHELASTIC_RUN_ID": "job-42"},
        "mpirun": lambda r: {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": "2",
                             "OMPI_COMM_WORLD_LOCAL_RANK": str(r), "PMIX_NAMESPACE": "prterun-x-1@1"},
    }
    for launcher, env_of in launchers.items():
        path = str(tmp_path / ("%s.sqlite" % launcher))
        for rank in (0, 1):
            out = subprocess.run([sys.executable, "-c", child, path], env=dict(base, **env_of(rank)),
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            want = str(tmp_path / ("%s.rank%d.sqlite" % (launcher, rank)))
            assert out.stdout.strip() == want
            meta = stagetrace.read(want).meta
            assert (meta["rank"], meta["world_size"], meta["local_rank"], meta["device"]) == \
                (str(rank), "2", str(rank), "0")
            assert meta["run_id"] == ("job-42" if launcher == "torchrun" else "prterun-x-1_1")
