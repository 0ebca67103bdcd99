"""The CPU capture from Python (stagetrace.open(..., cpu=True)): a spin
stage recorded with it has the cpu_* tables of docs/trace-format.md, "CPU
capture", read back with sqlite3 and with stagetrace.read (its cpu array
and cpu_stacks). The perf records are checked where the kernel allows perf
events (skipped with its reason otherwise); the schedstat windows in every
case. Python frames (docs/cpu.md, "Python"): the meta keys python_stacks,
python_stacks_reason, python_frame_pointers, python_version and
python_gil_probe on this Python (3.11: no trampoline, said so), with
python_stacks="off", without cpu=True (none written) and with a bad value;
on 3.12 and later the trampoline is on during the trace only (and one
already on stays on); with a frame-pointer libpython, at least half of a
busy Python loop's samples have a py:: frame, its function's among them
(skipped elsewhere, with the reason). DWARF unwinding (cpu_user_stack,
docs/cpu.md "DWARF unwinding"): the perf event takes the samples despite
the GIL probe (their GIL state unknown), and at least 90 % of a busy
Python loop's stacks reach Py_RunMain through the interpreter's C frames,
whether or not libpython keeps frame pointers (measured with pyenv's 3.11,
which keeps none: 298 of 298; without the option, none of the signal
sampler's 30 samples of the same loop did); a size out of range is
stagetrace.Error. The perf map's parsing is tested in
C (tests/test_cpu_symbols.c)."""
import platform
import sqlite3
import sys
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


# ---- Python frames (docs/cpu.md, "Python") and the reader's CPU arrays -----

HAS_TRAMPOLINE = hasattr(sys, "activate_stack_trampoline")


def busy_python(seconds):
    """A pure-Python loop: its samples are in the interpreter, with py::
    frames where the trampoline is on and reachable."""
    def inner(n):
        x = 0
        for i in range(n):
            x += i * i
        return x
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        inner(2000)


def record_python(path, **kwargs):
    with stagetrace.open(path, program="pytest_cpu", cpu=True, cpu_period_ns=1000000, **kwargs) as trace:
        with trace.stage("busy"):
            busy_python(0.3)
    return meta(sqlite3.connect(path))


def test_python_stacks_meta(path):
    m = record_python(path)
    assert m["python_version"] == "%s %s" % (platform.python_implementation(), platform.python_version())
    assert m["python_frame_pointers"] in ("yes", "no", "unknown")
    assert m["python_frame_pointers_evidence"]
    assert m["python_stacks"] in ("perf-trampoline", "frames")
    if not HAS_TRAMPOLINE and sys.version_info < (3, 12):
        assert m["python_stacks"] == "frames"  # auto: the sampler thread instead
        assert m["python_stacks_reason"].startswith(
            "Python %d.%d has no perf trampoline" % sys.version_info[:2])
    elif m["python_frame_pointers"] == "no":
        assert m["python_stacks"] == "frames"  # auto: the walk would not reach the trampolines
        assert m["python_stacks_reason"].startswith("libpython is built without frame pointers")
    assert m["python_gil_probe"] == "PyGILState_Check" or m["python_gil_probe"].startswith("none: ")


def test_python_stacks_off(path):
    m = record_python(path, python_stacks="off")
    assert m["python_stacks"] == "none"
    assert m["python_stacks_reason"] == "python_stacks='off'"
    if HAS_TRAMPOLINE:
        assert not sys.is_stack_trampoline_active()


def test_python_stacks_without_cpu_writes_nothing(path):
    with stagetrace.open(path, program="pytest_cpu", python_stacks="perf"):
        if HAS_TRAMPOLINE:
            assert not sys.is_stack_trampoline_active()  # only with cpu=True
    m = meta(sqlite3.connect(path))
    assert not [k for k in m if k.startswith("python_")]


def test_python_stacks_bad_value(path):
    with pytest.raises(ValueError, match="python_stacks must be one of auto, perf, frames, off"):
        stagetrace.open(path, cpu=True, python_stacks="yes")
    assert stagetrace.current() is None


@pytest.mark.skipif(not HAS_TRAMPOLINE, reason="Python %d.%d has no perf trampoline "
                    "(sys.activate_stack_trampoline is 3.12 and later)" % sys.version_info[:2])
def test_trampoline_on_during_the_trace_only(path):
    assert not sys.is_stack_trampoline_active()
    with stagetrace.open(path, program="pytest_cpu", cpu=True, python_stacks="perf"):
        assert sys.is_stack_trampoline_active()
        busy_python(0.05)
    assert not sys.is_stack_trampoline_active()
    m = meta(sqlite3.connect(path))
    assert m["python_stacks"] == "perf-trampoline"
    assert m["python_stacks_reason"] == "turned on by stagetrace.open and off at close"
    assert m["cpu_perf_map"] == "used"  # the trampoline wrote /tmp/perf-PID.map
    assert int(m["cpu_perf_map_entries"]) >= 2
    # one that was on already stays on
    sys.activate_stack_trampoline("perf")
    try:
        with stagetrace.open(path, program="pytest_cpu", cpu=True, overwrite=True):
            pass
        assert sys.is_stack_trampoline_active()
        assert meta(sqlite3.connect(path))["python_stacks_reason"].startswith("the perf trampoline was already on")
    finally:
        sys.deactivate_stack_trampoline()


@pytest.mark.skipif(not HAS_TRAMPOLINE or stagetrace.frame_pointers()[0] != "yes",
                    reason="needs Python 3.12+ with a frame-pointer libpython (Ubuntu 24.04's "
                           "/usr/bin/python3.12): here %s, frame pointers %s"
                           % (platform.python_version(), stagetrace.frame_pointers()[0]))
def test_py_frames_in_stacks(path):
    m = record_python(path)
    if m.get("cpu_mode") != "perf":
        pytest.skip("perf events refused: %s" % m.get("cpu_reason", m.get("cpu_mode")))
    assert m["python_stacks"] == "perf-trampoline"
    data = stagetrace.read(path, ranges=False, counters=False, gpu=False)
    with_py = [any(f.startswith("py::") for f in data.cpu_stacks[int(s)]) for s in data.cpu["stack"]]
    assert len(with_py) >= 50
    assert sum(with_py) >= 0.5 * len(with_py)
    names = {f for s in data.cpu["stack"] for f in data.cpu_stacks[int(s)] if f.startswith("py::")}
    assert any(n.startswith("py::busy_python.<locals>.inner:") for n in names)


def test_reader_cpu_arrays(path):
    m = record_python(path)
    data = stagetrace.read(path)
    assert data.cpu.dtype.names == ("ts_ns", "stack", "thread", "stage", "gil")
    if m.get("cpu_mode") != "perf":
        assert len(data.cpu) == 0
        return
    busy = [s["id"] for s in data.stages if s["name"] == "busy"][0]
    assert len(data.cpu) == int(m["cpu_samples"])
    assert (data.cpu["stage"] == busy).sum() >= 0.9 * len(data.cpu)
    assert set(int(s) for s in data.cpu["stack"]) <= set(data.cpu_stacks)
    if m["python_gil_probe"] == "PyGILState_Check" and m.get("cpu_sampler") not in (None, "perf"):
        # the signal sampler asks the probe on the sampled thread: a pure-Python loop holds the GIL
        assert (data.cpu["gil"] == 1).sum() >= 0.9 * len(data.cpu)
    else:
        assert set(int(g) for g in data.cpu["gil"]) <= {-1, 0, 1}
    df = data.to_dataframe("cpu")
    assert list(df["stage_name"].dropna().unique()) == ["busy"]
    assert len(stagetrace.read(path, cpu=False).cpu) == 0


def hash_released(seconds):
    """C code with the GIL released: hashlib drops it for data over 2 KiB."""
    import hashlib
    data = b"x" * (8 << 20)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        hashlib.sha256(data).digest()


def test_gil_released_thread_still_sampled(path):
    # A stage that releases the GIL into C is sampled as often as one that
    # holds it (its samples are CPU time, not GIL time: it never vanishes as
    # under py-spy --gil), and with the GIL probe its samples say gil 0.
    with stagetrace.open(path, program="pytest_cpu", cpu=True, cpu_period_ns=1000000) as trace:
        with trace.stage("hold"):
            busy_python(0.5)
        with trace.stage("released"):
            hash_released(0.5)
    m = meta(sqlite3.connect(path))
    if m.get("cpu_mode") not in ("perf", "timer") or m.get("cpu_sampler") == "none":
        pytest.skip("no sampler ran: %s" % m.get("cpu_reason", m.get("cpu_mode")))
    data = stagetrace.read(path, ranges=False, counters=False, gpu=False)
    ids = {s["name"]: s["id"] for s in data.stages}
    hold = data.cpu[data.cpu["stage"] == ids["hold"]]
    released = data.cpu[data.cpu["stage"] == ids["released"]]
    # both stages ran about 0.5 s on the CPU (less on a loaded machine; the signal
    # sampler takes at most one sample a scheduler tick): neither has under a
    # third of the other's samples
    assert len(hold) >= 10 and len(released) >= 10, (len(hold), len(released))
    assert len(released) >= len(hold) / 3 and len(hold) >= len(released) / 3, (len(hold), len(released))
    if m["python_gil_probe"] == "PyGILState_Check" and m.get("cpu_sampler") != "perf":
        assert (hold["gil"] == 1).sum() >= 0.9 * len(hold), hold["gil"]
        assert (released["gil"] == 0).sum() >= 0.8 * len(released), released["gil"]
        assert int(m["cpu_gil_samples"]) == int((data.cpu["gil"] >= 0).sum())
    else:
        assert set(int(g) for g in data.cpu["gil"]) == {-1}


def test_dwarf_unwinding_reaches_the_interpreter_entry(path):
    with pytest.raises(stagetrace.Error, match="cpu_user_stack 100 bytes is out of range"):
        record_python(path, cpu_user_stack=100)
    m = record_python(path, cpu_user_stack=16384)
    if m.get("cpu_mode") != "perf":
        pytest.skip("perf events refused: %s" % m.get("cpu_reason", m.get("cpu_mode")))
    assert m["cpu_user_stack"] == "16384"
    if m["cpu_unwind"] != "dwarf":
        pytest.skip("no DWARF unwinding: %s" % m["cpu_unwind_reason"])
    # only the perf event's samples carry stack copies: they win over the GIL probe
    assert m["cpu_sampler"] == "perf"
    data = stagetrace.read(path)
    assert len(data.cpu) >= 30  # 0.3 s at 1 kHz
    assert set(int(g) for g in data.cpu["gil"]) == {-1}
    reach = sum(1 for s in data.cpu["stack"] if "Py_RunMain" in data.cpu_stacks[int(s)])
    print("%d of %d samples reach Py_RunMain; %s unwound by DWARF" % (reach, len(data.cpu),
                                                                     m["cpu_unwind_dwarf_samples"]))
    assert reach >= 0.9 * len(data.cpu)


# ---- python_stacks='frames': the package's sampler thread (docs/cpu.md, "Python frames") ----
# A stage `burn` runs the pure-Python hot_loop() for 0.5 s and a stage `sleep`
# sleeps 0.3 s in napper() (time.sleep is C: its caller is the innermost
# Python frame). At 100 Hz the sampler takes about 50 and 30 samples of the
# main thread; each is placed in the stage open at its time, so (allowing
# for the samples at the stages' edges and a loaded machine) >= 80 % of
# burn's Python-frame samples have hot_loop in their stack and >= 80 % of
# sleep's have napper as their innermost frame. The achieved rate is the
# sampler's rounds per second of the trace: within [0.5, 1.05] of the rate
# asked (a loaded 2-core VM delays rounds, never adds any).


def hot_loop(seconds):
    until = time.monotonic() + seconds
    x = 0
    while time.monotonic() < until:
        for i in range(500):
            x += i * i
    return x


def napper(seconds):
    time.sleep(seconds)


def record_frames(path, **kwargs):
    with stagetrace.open(path, program="pytest_cpu", cpu=True, overwrite=True, **kwargs) as trace:
        with trace.stage("burn"):
            hot_loop(0.5)
        with trace.stage("sleep"):
            napper(0.3)
    return meta(sqlite3.connect(path))


def frames_rows(analyze, path):
    import csv
    import io
    out = analyze("sql", "--format", "csv", path,
                  "SELECT stage_name, frames, leaf FROM cpu_samples_v WHERE source = 'python-frames'")
    return [(r["stage_name"], r["frames"].split(";"), r["leaf"]) for r in csv.DictReader(io.StringIO(out))]


def check_frames_trace(analyze, path, m, hz):
    assert m["python_stacks"] == "frames"
    assert m["python_frames_hz_asked"] == str(hz)
    achieved = float(m["python_frames_hz"])
    assert 0.5 * hz <= achieved <= 1.05 * hz, achieved
    rows = frames_rows(analyze, path)
    assert int(m["python_frames_samples"]) == len(rows)
    assert int(m["python_frames_lost"]) == 0
    burn = [r for r in rows if r[0] == "burn"]
    sleep = [r for r in rows if r[0] == "sleep"]
    assert len(burn) >= 0.5 * 0.5 * hz * 0.8 and len(sleep) >= 0.3 * 0.5 * hz * 0.8, (len(burn), len(sleep))
    in_hot = [r for r in burn if any(f.startswith("py::hot_loop:") for f in r[1])]
    assert len(in_hot) >= 0.8 * len(burn), (len(in_hot), len(burn))
    assert all(f.endswith("test_cpu.py") for r in in_hot for f in r[1] if f.startswith("py::hot_loop:"))
    in_nap = [r for r in sleep if r[2].startswith("py::napper:")]
    assert len(in_nap) >= 0.8 * len(sleep), (len(in_nap), len(sleep))
    # stagetrace.read: the same samples in cpu_python, the kernel's alone in cpu
    data = stagetrace.read(path, ranges=False, counters=False, gpu=False)
    assert len(data.cpu_python) == len(rows)
    assert len(data.cpu) == int(m.get("cpu_samples", 0))
    ids = {s["name"]: s["id"] for s in data.stages}
    burn_py = data.cpu_python[data.cpu_python["stage"] == ids["burn"]]
    assert len(burn_py) == len(burn)
    assert sum(1 for s in burn_py["stack"] if any(f.startswith("py::hot_loop:") for f in data.cpu_stacks[int(s)])) \
        == len(in_hot)
    # the kernel's samples keep their own count: python frames are not among them
    assert int(m.get("cpu_samples", 0)) == int(subprocess_count(analyze, path, "source <> 'python-frames'"))
    return burn, sleep


def subprocess_count(analyze, path, where):
    out = analyze("sql", "--format", "csv", path, "SELECT count(*) AS n FROM cpu_samples WHERE " + where)
    return int(out.split()[1])


def test_frames_explicit(analyze, path):
    m = record_frames(path, python_stacks="frames")
    assert m["python_stacks_reason"].startswith("python_stacks='frames': ")
    check_frames_trace(analyze, path, m, 100)


@pytest.mark.skipif(HAS_TRAMPOLINE and stagetrace.frame_pointers()[0] != "no",
                    reason="auto picks the perf trampoline here (Python %s, frame pointers %s)"
                    % (platform.python_version(), stagetrace.frame_pointers()[0]))
def test_frames_auto_without_trampoline(analyze, path):
    m = record_frames(path, python_hz=200)
    check_frames_trace(analyze, path, m, 200)


def test_frames_analyze_cpu_block(analyze, path):
    import json
    record_frames(path, python_stacks="frames")
    assert "Python stacks (sampled from the interpreter at " in analyze("cpu", path)
    doc = json.loads(analyze("cpu", "--format", "json", path))
    stages = {r["stage"]: r for r in doc["python"]}
    assert stages["burn"]["samples"] >= 20 and stages["sleep"]["samples"] >= 12
    top_self = [r for r in doc["python_functions"] if r["stage"] == "burn" and r["by"] == "self" and r["rank"] == 1]
    assert top_self[0]["function"].startswith("py::hot_loop:") and top_self[0]["file"].endswith("test_cpu.py")
    # the kernel's samples (if any) are not summed with them
    kernel = sum(r["samples"] for r in doc["stages"])
    assert kernel == int(meta(sqlite3.connect(path)).get("cpu_samples", 0))


def test_frames_in_exports_and_report(analyze, path, tmp_path):
    """export --firefox, --pprof and report --html carry the Python-frame
    samples apart from the kernel's (docs/analyze.md, "export", "report")."""
    import gzip
    import json
    record_frames(path, python_stacks="frames")
    # the views' time is the trace's span, as analyze cpu's (a sample before the first range is outside it)
    cpu = json.loads(analyze("cpu", "--format", "json", path))
    n_py = sum(r["samples"] for r in cpu["python"])
    burn = [r for r in frames_rows(analyze, path) if r[0] == "burn"]
    assert sum(r["samples"] for r in cpu["python"] if r["stage"] == "burn") == len(burn)
    # firefox: a "NAME (Python)" entry after the sampled thread, holding exactly its Python-frame samples
    out = str(tmp_path / "ff.json")
    analyze("export", path, "--firefox", out)
    doc = json.load(open(out))
    sh = doc["shared"]
    py_threads = [t for t in doc["threads"] if t["name"].endswith(" (Python)")]
    assert len(py_threads) == 1, [t["name"] for t in doc["threads"]]
    t = py_threads[0]
    own = doc["threads"][doc["threads"].index(t) - 1]
    assert t["name"] == own["name"] + " (Python)" and t["markers"]["length"] == 0
    assert t["samples"]["length"] == n_py
    assert own["samples"]["length"] == sum(r["samples"] for r in cpu["stages"] if r["thread"] == own["name"].split(" (")[0])

    def names(s):
        out = []
        while s is not None:
            out.append(sh["stringArray"][sh["funcTable"]["name"][sh["frameTable"]["func"][sh["stackTable"]["frame"][s]]]])
            s = sh["stackTable"]["prefix"][s]
        return out[::-1]
    stacks = [names(s) for s in t["samples"]["stack"]]
    ff_burn = [n for n in stacks if n[0] == "stage:burn"]
    assert len(ff_burn) == len(burn)
    assert sum(1 for n in ff_burn if any(f.startswith("py::hot_loop:") for f in n)) >= 0.8 * len(ff_burn)
    # pprof: the Python sample types and the source label are there
    prof = str(tmp_path / "p.pb.gz")
    analyze("export", path, "--pprof", prof)
    data = open(prof, "rb").read()
    data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    for s in (b"python_samples", b"python_wall", b"python-frames", b"py::hot_loop:"):
        assert s in data, s
    # report: a Python flame graph of burn with hot_loop in it
    html = str(tmp_path / "r.html")
    analyze("report", path, "--html", html)
    text = open(html).read()
    assert "<h3>Python stacks (sampled from the interpreter at " in text
    assert "\u00b7 burn (Python): %d samples</h3>" % len(burn) in text
    assert "py::hot_loop:" in text


def test_frames_off_and_perf_write_no_frames(path):
    m = record_python(path, python_stacks="off")
    assert "python_frames_samples" not in m and "python_frames_hz" not in m


@pytest.mark.parametrize("hz", [0, 1001, -5, 2.5, "100", True])
def test_python_hz_bad(path, hz):
    with pytest.raises(ValueError, match=r"^python_hz must be an integer from 1 to 1000 \(samples per second\), not "):
        stagetrace.open(path, cpu=True, python_hz=hz)
    assert stagetrace.current() is None


def test_frames_other_threads(analyze, path):
    # a registered worker thread is sampled too, under its own stage; an
    # unregistered one is skipped (the library refuses its tid)
    import threading
    done = threading.Event()

    def worker():
        with stagetrace.thread("worker", role="other"):
            with stagetrace.current().stage("work"):
                hot_loop(0.3)
        done.set()

    def stray():
        hot_loop(0.3)

    with stagetrace.open(path, program="pytest_cpu", cpu=True, python_stacks="frames", overwrite=True):
        ts = [threading.Thread(target=worker), threading.Thread(target=stray)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    rows = frames_rows(analyze, path)
    work = [r for r in rows if r[0] == "work"]
    assert len(work) >= 10
    assert sum(1 for r in work if any(f.startswith("py::hot_loop:") for f in r[1])) >= 0.8 * len(work)
    assert not any("stray" in f for r in rows for f in r[1])
