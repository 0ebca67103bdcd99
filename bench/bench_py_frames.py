"""bench_py_frames.py: the cost of python_stacks='frames' (python/README.md,
docs/cpu.md "Python frames"): the package's sampler thread reads
sys._current_frames() python_hz times a second and hands each registered
thread's stack to st_cpu_sample_add.

Two figures, interleaved repeats (the medians printed):
  - the sampler's own time per sample (meta python_frames_sampler_ns /
    python_frames_samples), for registered threads that each sit DEPTH
    Python frames deep in a busy loop, 1 and 4 threads, depth 5 and 50;
  - what a busy pure-Python thread loses: the time of a fixed amount of
    work with cpu=True and python_stacks 'off', 'frames' at 100 Hz and at
    1000 Hz, the ratio to 'off'.

    PYTHONPATH=build/python python3 bench/bench_py_frames.py [--repeats N]
"""
import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time

import stagetrace


def nest(depth, fn):
    if depth <= 1:
        return fn()
    return nest(depth - 1, fn)


def busy(seconds):
    until = time.monotonic() + seconds
    x = 0
    while time.monotonic() < until:
        for i in range(200):
            x += i
    return x


def work(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def meta(path):
    return dict(sqlite3.connect(path).execute("SELECT key, value FROM meta"))


def per_sample(path, threads, depth, seconds=0.6):
    with stagetrace.open(path, program="bench_py_frames", cpu=True, cpu_period_ns=2 ** 64 - 1,
                         python_stacks="frames", python_hz=200, overwrite=True) as trace:
        stage = trace.stage("busy")

        def body(name):
            with stagetrace.thread(name):
                with stage:
                    nest(depth, lambda: busy(seconds))

        ts = [threading.Thread(target=body, args=("w%d" % i,)) for i in range(threads - 1)]
        for t in ts:
            t.start()
        with stage:
            nest(depth, lambda: busy(seconds))
        for t in ts:
            t.join()
    m = meta(path)
    return int(m["python_frames_sampler_ns"]) / max(1, int(m["python_frames_samples"])), float(m["python_frames_hz"])


def work_time(path, mode, hz, n=20_000_000):
    with stagetrace.open(path, program="bench_py_frames", cpu=True, python_stacks=mode, python_hz=hz,
                         overwrite=True) as trace:
        with trace.stage("work"):
            t0 = time.perf_counter()
            nest(20, lambda: work(n))
            return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    path = os.path.join(tempfile.mkdtemp(), "bench.sqlite")
    print("sampler time per sample (python_hz 200, median of %d)" % args.repeats)
    print("%8s %6s %14s %12s" % ("threads", "depth", "ns/sample", "achieved_hz"))
    for threads in (1, 4):
        for depth in (5, 50):
            v = [per_sample(path, threads, depth) for _ in range(args.repeats)]
            print("%8d %6d %14.0f %12.1f" % (threads, depth, statistics.median(x[0] for x in v),
                                             statistics.median(x[1] for x in v)))
    print()
    print("a busy Python thread (20 M iterations 20 frames deep), median of %d, interleaved" % args.repeats)
    modes = [("off", 100), ("frames", 100), ("frames", 1000)]
    times = {m: [] for m in modes}
    for _ in range(args.repeats):
        for m in modes:
            times[m].append(work_time(path, *m))
    base = statistics.median(times[modes[0]])
    print("%8s %6s %10s %8s" % ("stacks", "hz", "s", "ratio"))
    for m in modes:
        t = statistics.median(times[m])
        print("%8s %6d %10.4f %8.4f" % (m[0], m[1], t, t / base))


if __name__ == "__main__":
    sys.exit(main())
