"""cpu_check.py: what the CPU capture sees of a Python program (docs/cpu.md,
"Python"): how many samples carry Python frames (py:: frames from CPython's
perf trampoline), which Python functions each stage spends its samples in,
and how often the sampled thread held the GIL.

  python3.12 samples/python/cpu_check.py                 # records its own busy loops
  python3.12 samples/python/cpu_check.py --trace run.sqlite   # or reads a trace (dflash_torch --trace-cpu)

Recording, it runs three stages on the main thread for --seconds each:
  python_loop  pure Python arithmetic (holds the GIL: py:: frames expected)
  hashlib      sha256 of 8 MiB blocks (C code that releases the GIL)
  torch_matmul a CPU matmul (torch releases the GIL; skipped without torch)
while a second registered thread, "contender", runs pure Python too, so that
the main thread's Python stages also wait for the GIL at times.

Per stage it prints the samples, the share with at least one py:: frame,
the share taken while the thread held the GIL (1), did not (0) or is not
known (-1: no GIL probe in this build, or the perf sampler, which cannot
ask the sampled thread), and the top py:: functions by samples whose
innermost py:: frame they are. A py:: share near 0 with python_stacks
perf-trampoline means the kernel's frame-pointer walk does not get through
the interpreter (libpython without frame pointers: meta python_frame_pointers).
"""
import argparse
import collections
import hashlib
import os
import sys
import threading
import time

try:
    import stagetrace
except ImportError:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "build", "python"))
    import stagetrace


def python_loop(seconds):
    def inner(n):
        x = 0
        for i in range(n):
            x += i * i % 7
        return x
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        inner(5000)


def hash_blocks(seconds):
    block = os.urandom(8 << 20)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        hashlib.sha256(block).digest()


def torch_matmul(torch, seconds):
    a = torch.randn(512, 512)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        a = torch.matmul(a, a).clamp_(-1, 1)


def contender(stop):
    with stagetrace.thread("contender", "other"):
        x = 0
        while not stop.is_set():
            for i in range(1000):
                x += i


def record(path, seconds, period_ns, python_stacks):
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    stop = threading.Event()
    with stagetrace.open(path, program="cpu_check", cpu=True, cpu_period_ns=period_ns, overwrite=True,
                         python_stacks=python_stacks) as trace:
        other = threading.Thread(target=contender, args=(stop,))
        other.start()
        try:
            with trace.stage("python_loop"):
                python_loop(seconds)
            with trace.stage("hashlib"):
                hash_blocks(seconds)
            if torch is not None:
                with trace.stage("torch_matmul"):
                    torch_matmul(torch, seconds)
        finally:
            stop.set()
            other.join()
    if torch is None:
        print("cpu_check: no torch here: stage torch_matmul left out")


def share(n, total):
    return "%5.1f %%" % (100.0 * n / total) if total else "    - "


def report(path, top):
    data = stagetrace.read(path, ranges=False, counters=False, gpu=False)
    m = data.meta
    print("trace %s" % path)
    print("  %s; cpu_mode %s, %s samples at %s Hz" % (m.get("python_version", "python ?"), m.get("cpu_mode", "?"),
                                                      m.get("cpu_samples", "0"), m.get("cpu_sample_hz", "?")))
    print("  python_stacks %s: %s" % (m.get("python_stacks", "(not recorded)"), m.get("python_stacks_reason", "")))
    print("  frame pointers %s: %s" % (m.get("python_frame_pointers", "?"),
                                       m.get("python_frame_pointers_evidence", "")))
    print("  perf map: %s, %s entries, %s frames named from it; GIL probe: %s" % (
        m.get("cpu_perf_map", "none"), m.get("cpu_perf_map_entries", "0"), m.get("cpu_perf_map_frames", "0"),
        m.get("python_gil_probe", "?")))
    if m.get("cpu_mode") != "perf" and not len(data.cpu):
        print("  no samples: %s" % m.get("cpu_reason", "the CPU capture was off"))
        return 1
    stage_names = {s["id"]: s["name"] for s in data.stages}
    thread_names = {t["id"]: t["name"] for t in data.threads}
    rows = collections.defaultdict(lambda: {"n": 0, "py": 0, "gil": collections.Counter(),
                                            "funcs": collections.Counter()})
    total = {"n": 0, "py": 0}
    for s in data.cpu:
        key = (thread_names.get(int(s["thread"]), "?"), stage_names.get(int(s["stage"]), "(none)"))
        frames = data.cpu_stacks.get(int(s["stack"]), ())
        py = [f for f in frames if f.startswith("py::")]
        r = rows[key]
        r["n"] += 1
        r["gil"][int(s["gil"])] += 1
        total["n"] += 1
        if py:
            r["py"] += 1
            total["py"] += 1
            r["funcs"][py[0]] += 1
    print("  samples with a py:: frame: %d of %d (%s)" % (total["py"], total["n"], share(total["py"], total["n"]).strip()))
    print()
    print("  %-12s %-14s %7s %8s %9s %8s %9s" % ("thread", "stage", "samples", "py::", "GIL held", "not held",
                                                 "unknown"))
    for (thread, stage), r in sorted(rows.items(), key=lambda kv: -kv[1]["n"]):
        print("  %-12s %-14s %7d %8s %9s %8s %9s" % (thread, stage, r["n"], share(r["py"], r["n"]),
                                                    share(r["gil"][1], r["n"]), share(r["gil"][0], r["n"]),
                                                    share(r["gil"][-1], r["n"])))
        for func, n in r["funcs"].most_common(top):
            print("      %6d  %s" % (n, func))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="the CPU capture's Python frames and GIL state, per stage")
    ap.add_argument("--trace", metavar="PATH", help="read this trace instead of recording one")
    ap.add_argument("--out", default="cpu_check.sqlite", metavar="PATH", help="where to record (default %(default)s)")
    ap.add_argument("--seconds", type=float, default=2.0, help="per stage (default %(default)s)")
    ap.add_argument("--period-ns", type=int, default=1000000, help="sample period (default 1 ms)")
    ap.add_argument("--python-stacks", choices=stagetrace.PYTHON_STACKS, default="auto")
    ap.add_argument("--top", type=int, default=5, help="py:: functions per stage (default %(default)s)")
    args = ap.parse_args(argv)
    path = args.trace
    if path is None:
        path = args.out
        record(path, args.seconds, args.period_ns, args.python_stacks)
    return report(path, args.top)


if __name__ == "__main__":
    sys.exit(main())
