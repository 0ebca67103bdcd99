"""hta_check.py: Holistic Trace Analysis (HTA) on `analyze export --chrome` files, against
`analyze gpu`. Two commands:

  hta_check.py cut IN.json OUT.json --device D [--time T0:T1] [OUT2.json --device D2 ...]
      The GPU records of device D (pid 1000000 + D) of an export, with the GPU process's
      metadata and the file's top-level members, clipped to T0..T1 seconds from the trace start
      (the export's time 0, as `analyze gpu --time` counts) as `analyze gpu` clips records to
      its window; records outside it are left out. HTA's temporal breakdown reads GPU records
      only, so on OUT.json it gives the device's busy time over the window (docs/analyze.md,
      "Comparing with HTA"). Several outputs, each with its options, share one read of IN.json.

  hta_check.py check DIR SAMPLE... --set SETDIR STEPS
      The checks of tests/it_hta.sh, on the files it wrote in DIR (see there).

Times: the export writes microseconds with nanosecond decimals; `ns()` reads them back exactly.
"""
import contextlib
import io
import json
import logging
import math
import os
import sys
import time
import warnings

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")


def ns(x):
    return round(float(x) * 1000)


def parse_window(text):
    a, b = text.split(":")
    return round(float(a) * 1e9), round(float(b) * 1e9)


def cut(d, dst, device, window=None):
    pid = 1000000 + device
    kept = []
    for e in d["traceEvents"]:
        if e.get("pid") != pid or e.get("ph") not in ("X", "M"):
            continue
        if e["ph"] == "X":
            if e.get("cat") not in GPU_CATS:
                continue
            if window:
                s, f = max(ns(e["ts"]), window[0]), min(ns(e["ts"]) + ns(e["dur"]), window[1])
                if f <= s:
                    continue
                e = dict(e, ts=s / 1000, dur=(f - s) / 1000)
        kept.append(e)
    with open(dst, "w") as f:
        json.dump(dict(d, traceEvents=kept), f)


def quiet():
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)


def load(**kw):
    from hta.trace_analysis import TraceAnalysis
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return TraceAnalysis(**kw)


def run_all(ta, ranks):
    """The five analyses of the issue, on every rank; none may raise."""
    with contextlib.redirect_stdout(io.StringIO()):
        return {
            "temporal": ta.get_temporal_breakdown(visualize=False).set_index("rank"),
            "idle": ta.get_idle_time_breakdown(ranks=ranks, visualize=False)[0],
            "kernels": ta.get_gpu_kernel_breakdown(visualize=False, num_kernels=10**6, duration_ratio=1.0)[1],
            "launch": ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False),
            "overlap": ta.get_comm_comp_overlap(visualize=False).set_index("rank"),
        }


def busy_idle_ms(row):
    """HTA's temporal breakdown row: (busy, idle, window) in ms; busy = window - idle."""
    return ((row["kernel_time(us)"] - row["idle_time(us)"]) / 1000, row["idle_time(us)"] / 1000,
            row["kernel_time(us)"] / 1000)


def device(gpu_json, dev):
    return next(x for x in json.load(open(gpu_json))["devices"] if x["device"] == dev)


def close(a, b, tol, what):
    assert abs(a - b) <= tol, f"{what}: {a} against {b} (tolerance {tol})"


def check_sample(dir_, name, log):
    """HTA as a user runs it (default settings, timestamps rounded to microseconds) on the whole
    export: every analysis runs, and its figures are analyze's within the rounding's bound."""
    path = os.path.join(dir_, name, "rank0.json")
    ev = json.load(open(path))["traceEvents"]
    gpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    devices = sorted({e["args"]["device"] for e in gpu})
    ta = load(trace_dir=os.path.join(dir_, name))
    r = run_all(ta, [0])
    # HTA's rounding (ts up, end down to whole microseconds) takes < 2 us from each record
    bound_ms = 2e-3 * len(gpu)
    busy, idle, span = busy_idle_ms(r["temporal"].loc[0])
    lo = min(ns(e["ts"]) for e in gpu)
    hi = max(ns(e["ts"]) + ns(e["dur"]) for e in gpu)
    close(span, (hi - lo) / 1e6, 2e-3, f"{name}: HTA's window, first to last GPU record")
    per_dev = [device(os.path.join(dir_, f"{name}.d{d}.gpu.json"), d)["busy_ms"] for d in devices]
    if len(devices) == 1:  # HTA's rank is the device: its busy time over HTA's window
        assert per_dev[0] - bound_ms <= busy <= per_dev[0] + 1e-6, (name, busy, per_dev, bound_ms)
    else:  # HTA merges a process's devices: the union of their busy times
        assert max(per_dev) - bound_ms <= busy <= sum(per_dev) + 1e-6, (name, busy, per_dev)
    # idle breakdown: one row set per stream that ran records
    streams = {e["args"]["stream"] for e in gpu}
    assert set(r["idle"]["stream"]) == streams, (name, set(r["idle"]["stream"]), streams)
    assert (r["idle"]["idle_time"] >= 0).all(), name
    # kernel breakdown: every kernel name of analyze gpu's kernels table, its total summed over
    # the process's devices (HTA's rank), within the rounding's bound
    k = r["kernels"]
    k = k[k["rank"] == 0]
    mine = {}
    for d in devices:
        for row in json.load(open(os.path.join(dir_, f"{name}.d{d}.gpu.json")))["kernels"]:
            if row["device"] == d:
                t, n = mine.get(row["kernel"], (0.0, 0))
                mine[row["kernel"]] = (t + row["total_ms"], n + row["count"])
    hta_k = {row["name"]: row["sum (us)"] / 1000 for _, row in k.iterrows()
             if row["kernel_type"] in ("COMPUTATION", "COMMUNICATION")}
    assert set(hta_k) == set(mine), (name, set(hta_k) ^ set(mine))
    for kname, (total, count) in mine.items():
        assert total - 2e-3 * count <= hta_k[kname] <= total + 1e-6, (name, kname, hta_k[kname], total)
    # launch stats: one row per (launching call, record) pair that shares a correlation id, the
    # call named as HTA looks for launches
    launch = r["launch"][0]
    corr_l = {e["args"]["correlation"] for e in ev if e.get("ph") == "X" and e["name"] in LAUNCHES}
    n_cpu, n_gpu = {}, {}
    for e in ev:
        c = e.get("args", {}).get("correlation") if e.get("ph") == "X" else None
        if c in corr_l:
            side = n_gpu if "stream" in e["args"] else n_cpu
            side[c] = side.get(c, 0) + 1
    want = sum(n * n_gpu.get(c, 0) for c, n in n_cpu.items())
    assert want > 1000 and len(launch) == want, (name, len(launch), want)
    assert (launch["launch_delay"] >= 0).all(), name
    # comm/comp overlap: a share where NCCL kernels ran, none (NaN) where none did
    ov = r["overlap"].loc[0, "comp_comm_overlap_pctg"]
    if any(e["name"].startswith("nccl") for e in gpu):
        assert 0 <= ov <= 100, (name, ov)
    else:
        assert math.isnan(ov), (name, ov)
    log(f"{name}: HTA (default rounding) {len(gpu)} GPU records, busy {busy:.3f} ms of {span:.3f} "
        f"({100 * idle / span:.2f} % idle), analyze gpu busy {per_dev} over the same window; "
        f"{len(hta_k)} kernels, {len(launch)} launches, {len(r['idle'])} idle rows, overlap {ov}")


def check_cuts(dir_, samples, log):
    """HTA_DISABLE_NS_ROUNDING=1 on the cut files (one device, one window each), loaded as the
    ranks of one analysis (HTA computes each rank's breakdown from that rank's file alone):
    (a) HTA's default window, first to last GPU record: busy and idle equal analyze gpu --time
    over that window; (b) the steady window (analyze gpu's default): busy equals, and analyze's
    idle is HTA's plus the window's edges before the first and after the last record."""
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    files, want = {}, {}
    for name in samples:
        for f in sorted(os.listdir(dir_)):
            if f.startswith(name + ".d") and f.endswith(".cut.json"):
                d, kind = f[len(name) + 2:].split(".")[:2]
                files[len(files)] = os.path.abspath(os.path.join(dir_, f))
                base = os.path.join(dir_, f"{name}.d{d}")
                win = parse_window(open(f"{base}.{kind}.window").read().strip())
                gpu_json = f"{base}.gpu.json" if kind == "all" else os.path.join(dir_, f"{name}.steady.json")
                want[len(files) - 1] = (name, int(d), kind, win, device(gpu_json, int(d)))
    ta = load(trace_files=files)
    tb = ta.get_temporal_breakdown(visualize=False).set_index("rank")
    # float64 microseconds: equal to the nanosecond
    tol = 1e-6
    for rank, (name, d, kind, (w0, w1), dev) in want.items():
        busy, idle, span = busy_idle_ms(tb.loc[rank])
        what = f"{name} GPU {d} {'first-to-last record' if kind == 'all' else 'steady'} window"
        close(busy, dev["busy_ms"], tol, f"{what}: HTA busy ms, analyze gpu busy_ms")
        w_ms = (w1 - w0) / 1e6
        close(dev["busy_ms"] + dev["idle_ms"], w_ms, tol, f"{what}: analyze's busy + idle, the window")
        if kind == "all":
            close(span, w_ms, tol, f"{what}: HTA's window")
            close(idle, dev["idle_ms"], tol, f"{what}: HTA idle, analyze gpu idle_ms")
        else:
            assert span <= w_ms + tol, (what, span, w_ms)
            close(idle + (w_ms - span), dev["idle_ms"], tol, f"{what}: HTA idle + the edges, analyze idle_ms")
            close(100 * busy / w_ms, dev["busy_pct"], 1e-6, f"{what}: HTA busy over the window, busy_pct")
        log(f"{what}: busy {busy:.6f} ms (analyze {dev['busy_ms']:.6f}), idle {100 * idle / span:.3f} % of "
            f"HTA's {span:.3f} ms, analyze {100 * dev['idle_ms'] / w_ms:.3f} % of {w_ms:.3f} ms")
    del os.environ["HTA_DISABLE_NS_ROUNDING"]


def check_set(dir_, setdir, steps, log):
    """The tracegen rank set (tests/traces.h, write_rank_set, --nccl): world 4, ranks 0-1
    targets, 2-3 drafters; 10 ms steps; per step one 600 us kernel on stream 7, launched by a
    5 us call 100 us into the thread's forward, starting 200 us into it; a drafter also launches
    the NCCL all-reduce 50 us after that, on stream 8, 600 us from 300 us after its other
    kernel's start. Correlation ids from 1 (the all-reduces from steps + 1)."""
    PERIOD, K_AT, K_DUR, CALL_AT, CALL_DUR, AR_CALL, AR_AFTER, AR_DUR = 10000, 200, 600, 100, 5, 50, 300, 600
    world = 4
    drafters = {2, 3}
    ta = load(trace_dir=setdir)
    # (d) every rank under its own rank, with its own process and kernels
    assert {r: os.path.basename(p) for r, p in ta.t.trace_files.items()} == \
        {r: f"rank{r}.pt.trace.json" for r in range(world)}, ta.t.trace_files
    sym = ta.t.symbol_table.get_sym_table()
    for rank in range(world):
        df = ta.t.get_trace(rank)
        pids = set(df["pid"])
        assert 100 + rank in pids and 1000000 in pids, (rank, pids)  # tracegen's pid 100 + rank
        names = {sym[n] for n in df[df["stream"].ge(0)]["name"]}
        want = {"draft_gemm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"} \
            if rank in drafters else {"fwd_gemm"}
        assert names == want, (rank, names)
    # the export holds the construction (so the figures below follow from it)
    for rank in drafters:
        ev = json.load(open(os.path.join(setdir, f"rank{rank}.pt.trace.json")))["traceEvents"]
        k = sorted(ns(e["ts"]) for e in ev if e.get("name") == "draft_gemm")
        ar = sorted(ns(e["ts"]) for e in ev if e.get("name", "").startswith("ncclDevKernel"))
        assert len(k) == len(ar) == steps and all(b - a == AR_AFTER * 1000 for a, b in zip(k, ar)), rank
    r = run_all(ta, list(range(world)))
    # (c) comm/comp overlap: the share of each all-reduce that runs over the compute kernel
    overlap = max(0, min(K_DUR, AR_AFTER + AR_DUR) - AR_AFTER)
    for rank in range(world):
        got = r["overlap"].loc[rank, "comp_comm_overlap_pctg"]
        if rank in drafters:
            close(got, 100 * overlap / AR_DUR, 1e-9, f"rank {rank}: comm/comp overlap %")
        else:
            assert math.isnan(got), (rank, got)
    # temporal: per rank, first record to last; compute = the compute kernels, non-compute =
    # the all-reduce's part outside them
    for rank in range(world):
        row = r["temporal"].loc[rank]
        last = AR_AFTER + AR_DUR if rank in drafters else K_DUR
        assert row["kernel_time(us)"] == (steps - 1) * PERIOD + last, (rank, row)
        assert row["compute_time(us)"] == steps * K_DUR, (rank, row)
        assert row["non_compute_time(us)"] == (steps * (AR_DUR - overlap) if rank in drafters else 0), (rank, row)
        busy, idle, span = busy_idle_ms(row)
        dev = device(os.path.join(dir_, f"set.r{rank}.gpu.json"), rank * 1000)  # (a) on the set
        close(busy, dev["busy_ms"], 1e-6, f"rank {rank}: HTA busy, analyze gpu SET --time")
        close(idle, dev["idle_ms"], 1e-6, f"rank {rank}: HTA idle, analyze gpu SET --time")
    # idle breakdown: each launch comes after the stream's previous record ended: all host wait
    idle = r["idle"]
    for rank in range(world):
        mine = idle[idle["rank"] == rank]
        assert set(mine["stream"]) == ({7, 8} if rank in drafters else {7}), (rank, mine)
        for s, g in mine.groupby("stream"):
            by = dict(zip(g["idle_category"], g["idle_time"]))
            assert by.get("host_wait") == (steps - 1) * (PERIOD - K_DUR), (rank, s, by)
            assert sum(v for c, v in by.items() if c != "host_wait") == 0, (rank, s, by)
    # kernel breakdown: each kernel's total
    k = r["kernels"]
    for _, row in k.iterrows():
        assert row["sum (us)"] == steps * K_DUR and row["mean (us)"] == K_DUR, row
    assert len(k) == world + len(drafters), k  # one kernel per target, two per drafter
    # launch stats: one row per launch; the delay from the call's end to the kernel's start
    for rank in range(world):
        ls = r["launch"][rank]
        assert len(ls) == (2 if rank in drafters else 1) * steps, (rank, len(ls))
        delays = dict(zip(ls["correlation"], ls["launch_delay"]))
        assert all(delays[c] == K_AT - CALL_AT - CALL_DUR for c in range(1, steps + 1)), rank
        if rank in drafters:
            ar_delay = K_AT + AR_AFTER - (CALL_AT + AR_CALL) - CALL_DUR
            assert all(delays[c] == ar_delay for c in range(steps + 1, 2 * steps + 1)), rank
        assert (ls["cpu_duration"] == CALL_DUR).all() and (ls["gpu_duration"] == K_DUR).all(), rank
    log(f"rank set: ranks {sorted(ta.t.trace_files)}, comm/comp overlap "
        f"{r['overlap']['comp_comm_overlap_pctg'].tolist()}, idle "
        f"{r['temporal']['idle_time_pctg'].tolist()} %")


def main(argv):
    if len(argv) >= 3 and argv[0] == "cut":
        jobs, args = [], argv[2:]
        while args:  # OUT.json --device D [--time T0:T1]
            dst, opts, args = args[0], {}, args[1:]
            while len(args) >= 2 and args[0] in ("--device", "--time"):
                opts[args[0]], args = args[1], args[2:]
            if "--device" not in opts:
                sys.exit("usage: hta_check.py cut IN.json OUT.json --device D [--time T0:T1] [OUT2.json ...]")
            jobs.append((dst, int(opts["--device"]), parse_window(opts["--time"]) if "--time" in opts else None))
        if not jobs:
            sys.exit("usage: hta_check.py cut IN.json OUT.json --device D [--time T0:T1] [OUT2.json ...]")
        d = json.load(open(argv[1]))
        for dst, dev, window in jobs:
            cut(d, dst, dev, window)
        return 0
    if len(argv) >= 5 and argv[0] == "check" and argv[-3] == "--set":
        quiet()
        dir_, samples, setdir, steps = argv[1], argv[2:-3], argv[-2], int(argv[-1])
        t0 = time.time()
        log = lambda s: print(f"[{time.time() - t0:5.1f} s] {s}", flush=True)
        import hta.trace_analysis  # noqa: F401 (timed with the rest)
        log("HTA imported")
        for name in samples:
            check_sample(dir_, name, log)
        check_cuts(dir_, samples, log)
        check_set(dir_, setdir, steps, log)
        return 0
    sys.exit("usage: hta_check.py cut IN.json OUT.json --device D [--time T0:T1] | "
             "hta_check.py check DIR SAMPLE... --set SETDIR STEPS")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
