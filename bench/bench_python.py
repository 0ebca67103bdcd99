"""bench_python.py: the cost of one range from Python, side by side in one run.

    PYTHONPATH=build/python python3 bench/bench_python.py [--n 1000000] [--repeats 7]
        [--read build/tests/tracegen]

Each repeat times every method once, in a rotated order (interleaved, so that
a noisy neighbour hits all of them alike), over --n iterations of a loop whose
body is one range around nothing:
  loop           `for _ in range(n): pass` (what the loop itself costs)
  noop_c         `with noop:`, stagetrace.NoOp, a context manager written in C
                 that does nothing (the floor for any `with`)
  nullcontext    `with contextlib.nullcontext():`-style, the Python-level no-op
  disabled       `with stage:` of a disabled trace (stagetrace.open_disabled)
  stage          `with stage:` of an open trace, recording
  perf_counter   t0 = perf_counter(); ...; acc[name] += perf_counter() - t0
                 (the approach stagetrace replaces: an accumulator per name)
  nvtx           `with nvtx.annotate(name):` (the nvtx package), when importable
Per method: the median and the best per-iteration ns over the repeats, the loop
included (subtract `loop` for the body alone). The goals: stage <= 2x
perf_counter and <= 300 ns; disabled <= noop_c.

--read TRACEGEN also times stagetrace.read on a 10 M-range trace that
`TRACEGEN --big` writes (wall and CPU seconds, best of 3).
"""
import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

import stagetrace


def loop_empty(n, cm):
    for _ in range(n):
        pass


def loop_with(n, cm):
    for _ in range(n):
        with cm:
            pass


def loop_perf_counter(n, acc):
    pc = time.perf_counter
    for _ in range(n):
        t0 = pc()
        acc["forward"] += pc() - t0


def loop_nvtx(n, annotate):
    for _ in range(n):
        with annotate("forward"):
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--read", metavar="TRACEGEN", help="also time stagetrace.read on a 10 M-range trace")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench_python.")

    methods = [("loop", loop_empty, None), ("noop_c", loop_with, stagetrace.NoOp()),
               ("nullcontext", loop_with, contextlib.nullcontext())]
    try:
        import nvtx
        methods.append(("nvtx", loop_nvtx, nvtx.annotate))
        try:
            from importlib.metadata import version
            nvtx_note = "nvtx %s" % version("nvtx")
        except Exception:
            nvtx_note = "nvtx (version unknown)"
    except ImportError:
        nvtx_note = "nvtx: not importable here (pip install nvtx): left out"
    acc = {"forward": 0.0}
    methods.append(("perf_counter", loop_perf_counter, acc))

    results = {}
    dropped = 0
    for r in range(args.repeats):
        # disabled and enabled traces alternate within the repeat: one trace open at a time
        order = methods + [("disabled", None, None), ("stage", None, None)]
        k = r % len(order)
        order = order[k:] + order[:k]
        for name, fn, arg in order:
            if name == "disabled":
                trace = stagetrace.open_disabled()
                stage = trace.stage("forward")
                t0 = time.perf_counter()
                loop_with(args.n, stage)
                dt = time.perf_counter() - t0
                trace.close()
            elif name == "stage":
                path = os.path.join(tmp, "r%d.sqlite" % r)
                trace = stagetrace.open(path, program="bench_python")
                stage = trace.stage("forward")
                t0 = time.perf_counter()
                loop_with(args.n, stage)
                dt = time.perf_counter() - t0
                dropped += trace.dropped
                trace.close()
                os.unlink(path)
            else:
                t0 = time.perf_counter()
                fn(args.n, arg)
                dt = time.perf_counter() - t0
            results.setdefault(name, []).append(dt / args.n * 1e9)

    print("python %s, %d x %d iterations, interleaved; ns per iteration (loop included)"
          % (sys.version.split()[0], args.repeats, args.n))
    print("%-14s %9s %9s %14s" % ("method", "median", "best", "/perf_counter"))
    pc = statistics.median(results["perf_counter"])
    for name in ("loop", "noop_c", "nullcontext", "disabled", "stage", "perf_counter", "nvtx"):
        if name not in results:
            continue
        med = statistics.median(results[name])
        print("%-14s %9.1f %9.1f %14.2f" % (name, med, min(results[name]), med / pc))
    print(nvtx_note)
    stage_med = statistics.median(results["stage"])
    print("stage: %.2fx perf_counter (goal <= 2), %.0f ns (goal <= 300); disabled - noop_c: %+.1f ns "
          "(goal <= 0 within noise); %d events dropped"
          % (stage_med / pc, stage_med, statistics.median(results["disabled"]) -
             statistics.median(results["noop_c"]), dropped))

    if args.read:
        big = os.path.join(tmp, "big.sqlite")
        subprocess.run([args.read, "--big", big, "10000000"], check=True, stdout=subprocess.DEVNULL)
        walls, cpus = [], []
        for _ in range(3):
            w, c = time.perf_counter(), time.process_time()
            data = stagetrace.read(big)
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
            n = len(data.ranges)
            del data
        print("stagetrace.read, %d ranges: best wall %.3f s, best CPU %.3f s (goal: about 1 s)"
              % (n, min(walls), min(cpus)))
        os.unlink(big)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
