"""stagetrace: record where time goes in a multi-threaded (PyTorch) training loop.

The same traces as libstagetrace's C programs, read by the same `analyze`.
The C extension (_stagetrace) does the recording; this module adds the
launcher environment (torchrun, mpirun), signals, the argparse helper and
the NumPy/pandas views of a trace read back. python/README.md is the
reference.
"""
import atexit as _atexit
import functools as _functools
import inspect as _inspect
import logging as _logging
import os as _os
import re as _re
import signal as _signal
import sys as _sys
import threading as _threading
import time as _time

from . import _stagetrace
from . import distributed as _distributed

__all__ = [
    "Error", "Trace", "Stage", "Thread", "TraceData", "open", "open_disabled", "open_from_args",
    "add_arguments", "thread", "current", "read", "rank_from_env", "gpu_available", "KINDS",
    "sync_clocks", "collectives",
    "PYTHON_STACKS", "frame_pointers", "__version__",
]

Error = _stagetrace.Error
sync_clocks = _distributed.sync_clocks
collectives = _distributed.collectives
Trace = _stagetrace.Trace
Stage = _stagetrace.Stage
Thread = _stagetrace.Thread
NoOp = _stagetrace.NoOp
gpu_available = _stagetrace.gpu_available
KINDS = ("work", "wait_input", "wait_output", "sync", "comm", "copy")
library_version = _stagetrace.library_version
__version__ = library_version  # the C library's ST_VERSION_STRING (a trace's tool_version)

_log = _logging.getLogger("stagetrace")
_LOG_LEVELS = {1: _logging.ERROR, 2: _logging.WARNING, 3: _logging.INFO}


def _decorate(stage, fn):
    """`@stage`: the function's every call is one range of the stage."""
    if _inspect.iscoroutinefunction(fn) or _inspect.isgeneratorfunction(fn) or \
            _inspect.isasyncgenfunction(fn):
        raise TypeError("a stage cannot decorate a generator or coroutine function "
                        "(the range would end when it is created): use `with stage:` inside it")

    @_functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with stage:
            return fn(*args, **kwargs)
    return wrapper


_stagetrace._set_decorator(_decorate)


def _default_log(level, msg):
    _log.log(_LOG_LEVELS.get(level, _logging.WARNING), "%s", msg)


def _window_callback(on_window):
    if on_window is None:
        return None
    if callable(on_window):
        return on_window
    info = getattr(on_window, "info", None)
    if callable(info):  # a logging.Logger (or anything with .info): one record per line
        def log_window(window, info=info):
            for line in window["text"].splitlines():
                info("%s", line)
        return log_window
    raise TypeError("on_window must be a callable or a logger (an object with .info)")


_RUN_ID_BAD = _re.compile(r"[^A-Za-z0-9._-]")


def _env_int(env, name):
    value = env.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise Error("environment variable %s=%r is not an integer" % (name, value)) from None


def rank_from_env(env=None):
    """The process's place in a multi-process run, from its launcher's environment.

    Returns a dict with rank, world_size, local_rank and run_id (None when the
    environment has none): torchrun's RANK, WORLD_SIZE, LOCAL_RANK and
    TORCHELASTIC_RUN_ID, else Open MPI's OMPI_COMM_WORLD_RANK, _SIZE,
    _LOCAL_RANK (run id from PMIX_NAMESPACE); STAGETRACE_RUN_ID overrides the
    run id. Without either launcher: rank 0 of 1.
    """
    env = _os.environ if env is None else env
    out = {"rank": 0, "world_size": 1, "local_rank": 0, "run_id": None}
    if env.get("RANK") is not None and env.get("WORLD_SIZE") is not None:
        out["rank"] = _env_int(env, "RANK")
        out["world_size"] = _env_int(env, "WORLD_SIZE")
        local = _env_int(env, "LOCAL_RANK")
        out["local_rank"] = 0 if local is None else local
        out["run_id"] = env.get("TORCHELASTIC_RUN_ID") or None
    elif env.get("OMPI_COMM_WORLD_RANK") is not None and env.get("OMPI_COMM_WORLD_SIZE") is not None:
        out["rank"] = _env_int(env, "OMPI_COMM_WORLD_RANK")
        out["world_size"] = _env_int(env, "OMPI_COMM_WORLD_SIZE")
        local = _env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK")
        out["local_rank"] = 0 if local is None else local
        out["run_id"] = env.get("PMIX_NAMESPACE") or None
    if env.get("STAGETRACE_RUN_ID"):
        out["run_id"] = env["STAGETRACE_RUN_ID"]
    if out["run_id"] is not None:
        # the trace format's run id: 1..64 bytes of [A-Za-z0-9._-]
        out["run_id"] = _RUN_ID_BAD.sub("_", out["run_id"])[:64]
    if out["world_size"] < 1 or not 0 <= out["rank"] < out["world_size"]:
        raise Error("rank %d is not in 0..world_size-1 (world_size %d) in the launcher's environment"
                    % (out["rank"], out["world_size"]))
    return out


class _Signals:
    """SIGINT/SIGTERM while a trace is open: flush it (marked interrupted), then
    do what the previous handler did (SIGINT: KeyboardInterrupt). A signal
    that is ignored (SIG_IGN: `trap '' INT`, nohup) when the handlers are
    installed stays ignored: no handler, no flush, the trace not interrupted."""

    def __init__(self):
        self.saved = {}

    def install(self):
        # Once installed, the handlers stay until exit: with no trace open
        # they only pass the signal on.
        if self.saved or _threading.current_thread() is not _threading.main_thread():
            return
        for sig in (_signal.SIGINT, _signal.SIGTERM):
            try:
                if _signal.getsignal(sig) == _signal.SIG_IGN:
                    continue  # stays ignored, as the C library's handlers do
                self.saved[sig] = _signal.signal(sig, self.handler)
            except (ValueError, OSError):  # not the main interpreter, ...
                pass

    def restore(self):
        saved, self.saved = self.saved, {}
        if _threading.current_thread() is not _threading.main_thread():
            return
        for sig, old in saved.items():
            try:
                if _signal.getsignal(sig) == self.handler:
                    _signal.signal(sig, old)
            except (ValueError, OSError):
                pass

    def handler(self, signum, frame):
        _stagetrace._signal_flush(5000)
        old = self.saved.get(signum, _signal.SIG_DFL)
        if callable(old):
            return old(signum, frame)
        if old == _signal.SIG_IGN:
            return None
        # SIG_DFL: die of the signal, as without us (the trace is flushed).
        self.restore()
        _signal.signal(signum, _signal.SIG_DFL)
        _os.kill(_os.getpid(), signum)
        return None


_signals = _Signals()


def open(path, program=None, profile_interval=0, on_window=None, *, gpu=False, gpu_every=None,
         gpu_records=None, overwrite=False,
         on_log=None, main_thread="main", handle_signals=True, rank=None, world_size=None,
         local_rank=None, run_id=None, device=-1, ring_records=0, block_when_full=False,
         commit_ms=0, nvtx=None, argv=None, cpu=False, cpu_period_ns=0, cpu_user_stack=0,
         python_stacks="auto", clock_sync=True, python_hz=100):
    """Opens the process's trace at `path` (see python/README.md for every argument)."""
    if path is None:
        raise ValueError("stagetrace.open needs a path (stagetrace.open_disabled() records nothing)")
    if python_stacks not in PYTHON_STACKS:
        raise ValueError("python_stacks must be one of %s, not %r" % (", ".join(PYTHON_STACKS), python_stacks))
    records = gpu_records_spec(gpu_every, gpu_records)
    if records is not None and not gpu:
        raise ValueError("gpu_every and gpu_records choose what GPU recording does: they need gpu=True")
    env = rank_from_env()
    rank = env["rank"] if rank is None else rank
    world_size = env["world_size"] if world_size is None else world_size
    local_rank = env["local_rank"] if local_rank is None else local_rank
    run_id = env["run_id"] if run_id is None else run_id
    if isinstance(python_hz, bool) or not isinstance(python_hz, int) or not 1 <= python_hz <= 1000:
        raise ValueError("python_hz must be an integer from 1 to 1000 (samples per second), not %r" % (python_hz,))
    trace = Trace(
        _os.fspath(path),
        program=program or _program_name(),
        profile_interval=int(profile_interval),
        on_window=_window_callback(on_window),
        on_log=_default_log if on_log is None else on_log,
        overwrite=bool(overwrite),
        enabled=True,
        rank=int(rank), world_size=int(world_size), local_rank=int(local_rank),
        device=int(device), run_id=run_id,
        ring_records=int(ring_records), block_when_full=bool(block_when_full),
        commit_ms=int(commit_ms), nvtx=-1 if nvtx is None else int(bool(nvtx)),
        argv=list(_sys.argv if argv is None else argv),
        main_thread=main_thread,
        cpu=bool(cpu), cpu_period_ns=int(cpu_period_ns), cpu_user_stack=int(cpu_user_stack),
    )
    if cpu:
        try:
            _python_stacks_start(trace, python_stacks, python_hz)
        except BaseException:
            trace.close()
            raise
    if gpu:
        try:
            trace.gpu_start(records)
        except BaseException:
            trace.close()
            raise
    if handle_signals:
        _signals.install()
    if world_size > 1 and clock_sync:
        try:
            _distributed.auto(trace)
        except BaseException:
            trace.close()
            raise
    return trace


def gpu_records_spec(gpu_every=None, gpu_records=None):
    """The record-set spec open(gpu=True) hands st_gpu_start_with: gpu_records (else
    STAGETRACE_GPU_RECORDS) with ",every_steps=N" for gpu_every=N ("every_steps=N" alone
    without either: the sampled capture's own kinds); None when neither is given
    (st_gpu_start's own choice)."""
    if gpu_records is not None and not isinstance(gpu_records, str):
        raise TypeError("gpu_records must be a record-set string such as 'kernel,memcpy', not %r" % (gpu_records,))
    if gpu_every is None:
        return gpu_records
    if isinstance(gpu_every, bool) or not isinstance(gpu_every, int) or not 1 <= gpu_every <= 1000000:
        raise ValueError("gpu_every must be a whole number from 1 to 1000000 (one step in N recorded), not %r"
                         % (gpu_every,))
    base = gpu_records if gpu_records is not None else _os.environ.get("STAGETRACE_GPU_RECORDS") or ""
    return "%s%severy_steps=%d" % (base, "," if base else "", gpu_every)


# ---- Python frames in the CPU capture's stacks (docs/cpu.md, "Python") -------

PYTHON_STACKS = ("auto", "perf", "frames", "off")
_FRAME_POINTER_FLAG = "-fno-omit-frame-pointer"
# Functions of the interpreter that every Python call goes through, for the
# prologue check below.
_PROLOGUE_FUNCTIONS = ("_PyEval_EvalFrameDefault", "PyObject_Vectorcall", "PyObject_Call",
                       "PyEval_EvalCode", "_PyObject_MakeTpCall", "_PyFunction_Vectorcall",
                       "PyObject_GetAttr", "PyNumber_Add")


def frame_pointers():
    """Whether this interpreter keeps frame pointers, which the kernel's
    frame-pointer walk needs to pass through the interpreter's C frames up
    to the perf trampolines: ("yes" | "no" | "unknown", one line of evidence).

    First the build flags (sysconfig: -fno-omit-frame-pointer in CFLAGS and
    the like: yes); else, on x86-64, the first bytes of a few interpreter
    functions: with frame pointers each begins with push %rbp; mov %rsp,%rbp
    (after an endbr64), without them hardly any does.
    """
    import sysconfig
    for var in ("CFLAGS", "CONFIGURE_CFLAGS", "PY_CFLAGS", "PY_CFLAGS_NODIST", "CFLAGS_NODIST", "OPT"):
        value = sysconfig.get_config_var(var) or ""
        if _FRAME_POINTER_FLAG in str(value).split():
            return "yes", "sysconfig %s has %s" % (var, _FRAME_POINTER_FLAG)
    import platform
    if platform.machine() not in ("x86_64", "AMD64"):
        return "unknown", "no %s in sysconfig's flags, and no prologue check on %s" % (
            _FRAME_POINTER_FLAG, platform.machine())
    try:
        import ctypes
    except ImportError:
        return "unknown", "no %s in sysconfig's flags, and no ctypes for the prologue check" % _FRAME_POINTER_FLAG
    seen = with_fp = 0
    for name in _PROLOGUE_FUNCTIONS:
        try:
            fn = getattr(ctypes.pythonapi, name)
        except AttributeError:
            continue
        code = ctypes.string_at(ctypes.cast(fn, ctypes.c_void_p).value, 32)
        seen += 1
        with_fp += b"\x55\x48\x89\xe5" in code[:16]
    if seen == 0:
        return "unknown", "no %s in sysconfig's flags, and no interpreter function found" % _FRAME_POINTER_FLAG
    evidence = "no %s in sysconfig's flags; %d of %d interpreter functions begin with " \
               "push %%rbp; mov %%rsp,%%rbp" % (_FRAME_POINTER_FLAG, with_fp, seen)
    if 2 * with_fp >= seen:
        return "yes", evidence
    return ("no" if with_fp == 0 else "unknown"), evidence


_FRAMES_HOW = "the package's sampler thread reads every registered thread's Python frames " \
              "(sys._current_frames) at python_hz, stored apart from the kernel's samples"


def _python_stacks_plan(mode):
    """(turn the trampoline on?, meta python_stacks, its reason) for `mode`:
    python_stacks 'perf-trampoline', 'frames' (the sampler thread) or 'none'."""
    version = "%s %d.%d" % ("Python" if _sys.implementation.name == "cpython" else _sys.implementation.name,
                            _sys.version_info[0], _sys.version_info[1])
    if mode == "off":
        return False, "none", "python_stacks='off'"
    if mode == "frames":
        return False, "frames", "python_stacks='frames': " + _FRAMES_HOW
    if not hasattr(_sys, "activate_stack_trampoline"):
        if _sys.implementation.name == "cpython" and _sys.version_info < (3, 12):
            why = "%s has no perf trampoline (sys.activate_stack_trampoline is 3.12 and later)" % version
        else:
            why = "%s has no perf trampoline on this platform" % version
        if mode == "auto":
            return False, "frames", why + ": " + _FRAMES_HOW
        return False, "none", why + ": the stacks hold the interpreter's C frames only"
    if _sys.is_stack_trampoline_active():
        return False, "perf-trampoline", "the perf trampoline was already on (python -X perf, " \
                                         "PYTHONPERFSUPPORT or the program); left on at close"
    if mode == "auto" and _FRAME_POINTERS[0] == "no":
        return False, "frames", "libpython is built without frame pointers (%s): the kernel's walk of " \
                                "the stack would not reach the trampolines, so %s; python_stacks='perf' " \
                                "turns the trampoline on anyway" % (_FRAME_POINTERS[1], _FRAMES_HOW)
    return True, "perf-trampoline", "turned on by stagetrace.open and off at close"


_FRAME_POINTERS = None


# Codes of st_cpu_sample_add (stagetrace.h) that _cpu_sample returns.
_ST_OK, _ST_LOST, _ST_EINVAL, _ST_ESTATE = 0, 1, -1, -5


class _FrameSampler:
    """python_stacks 'frames': a daemon thread that, python_hz times a second,
    reads sys._current_frames() and hands each other thread's Python stack
    (innermost first: co_qualname, co_filename, the line) to the library
    with the thread's native id (st_cpu_sample_add, which stamps it on the
    trace clock and places it in the stage open on that thread). Threads
    that are not registered with the trace are skipped (asked again once a
    second). At close it stops first and stores meta python_frames_hz (the
    rounds achieved per second), python_frames_rounds and
    python_frames_sampler_ns (its own time spent sampling)."""

    MAX_FRAMES = 256

    def __init__(self, trace, hz):
        self.trace = trace
        self.period = 1.0 / hz
        self.stopping = False
        self.rounds = self.samples = self.lost = self.busy_ns = 0
        self.codes = {}    # code object -> (qualname bytes, file bytes)
        self.native = {}   # threading ident -> native id
        self.refused = {}  # native id -> when the library last refused it (not registered)
        self.thread = _threading.Thread(target=self._run, name="stagetrace-frames", daemon=True)
        self.t0 = self.t1 = None

    def start(self):
        self.t0 = _time.monotonic()
        self.thread.start()

    def stop(self):
        self.stopping = True
        if self.thread.is_alive():
            self.thread.join(5.0)
        self.t1 = _time.monotonic()
        elapsed = self.t1 - self.t0
        hz = self.rounds / elapsed if elapsed > 0 else 0.0
        self.trace._meta_set("python_frames_hz", "%.1f" % hz)
        self.trace._meta_set("python_frames_rounds", str(self.rounds))
        self.trace._meta_set("python_frames_sampler_ns", str(self.busy_ns))
        self.trace = None

    @staticmethod
    def _names(code):
        qualname = getattr(code, "co_qualname", None) or code.co_name
        return (qualname.encode("utf-8", "replace"), code.co_filename.encode("utf-8", "replace"))

    def _native_id(self, ident, now):
        nid = self.native.get(ident)
        if nid is None:
            self.native = {t.ident: t.native_id for t in _threading.enumerate() if t.native_id is not None}
            nid = self.native.get(ident)
        if nid is None or now - self.refused.get(nid, -2.0) < 1.0:
            return None
        return nid

    def _run(self):
        me = _threading.get_ident()
        current_frames = _sys._current_frames
        sample = self.trace._cpu_sample
        codes, names, limit = self.codes, self._names, self.MAX_FRAMES
        clock, sleep, ns = _time.monotonic, _time.sleep, _time.perf_counter_ns
        next_t = clock()
        while not self.stopping:
            t0 = ns()
            now = clock()
            frames = current_frames()
            for ident, f in frames.items():
                if ident == me:
                    continue
                nid = self._native_id(ident, now)
                if nid is None:
                    continue
                stack = []
                while f is not None and len(stack) < limit:
                    code = f.f_code
                    n = codes.get(code)
                    if n is None:
                        if len(codes) > 65536:
                            codes.clear()
                        n = codes[code] = names(code)
                    stack.append((n[0], n[1], f.f_lineno or 0))
                    f = f.f_back
                rc = sample(nid, stack)
                if rc == _ST_OK:
                    self.samples += 1
                elif rc == _ST_LOST:
                    self.lost += 1
                elif rc == _ST_EINVAL:
                    self.refused[nid] = now
                elif rc == _ST_ESTATE:
                    self.stopping = True
            frames = f = None
            self.rounds += 1
            self.busy_ns += ns() - t0
            next_t += self.period
            delay = next_t - clock()
            if delay > 0:
                sleep(delay)
            else:
                next_t = clock()  # behind (a loaded machine): no burst to catch up


def _python_stacks_start(trace, mode, hz=100):
    """With cpu=True: turns CPython's perf trampoline on when it can (and
    off again at close), and says in meta what the stacks' Python frames
    came from: python_stacks, python_stacks_reason, python_frame_pointers
    (and its evidence), python_version."""
    global _FRAME_POINTERS
    if _FRAME_POINTERS is None:
        _FRAME_POINTERS = frame_pointers()
    turn_on, method, reason = _python_stacks_plan(mode)
    if turn_on:
        try:
            _sys.activate_stack_trampoline("perf")
            trace._own_trampoline()
        except (ValueError, OSError, RuntimeError) as e:
            method, reason = "none", "sys.activate_stack_trampoline('perf') failed: %s" % e
    trace._meta_set("python_stacks", method)
    trace._meta_set("python_stacks_reason", reason)
    if method == "frames":
        trace._meta_set("python_frames_hz_asked", str(hz))
        sampler = _FrameSampler(trace, hz)
        trace._set_on_close_sampler(sampler.stop)
        sampler.start()
    trace._meta_set("python_frame_pointers", _FRAME_POINTERS[0])
    trace._meta_set("python_frame_pointers_evidence", _FRAME_POINTERS[1])
    import platform
    trace._meta_set("python_version", "%s %s" % (platform.python_implementation(), platform.python_version()))


def open_disabled(main_thread="main"):
    """A trace that records nothing: its stages, steps and counters cost almost nothing."""
    return Trace(None, enabled=False, main_thread=main_thread)


def _program_name():
    name = _os.path.basename(_sys.argv[0]) if _sys.argv and _sys.argv[0] else ""
    if name.endswith(".py"):
        name = name[:-3]
    return name if name and name not in ("-c", "-m") else "python"


def add_arguments(parser):
    """Adds --profile-interval N (default 0: off) and --trace PATH to an argparse parser."""
    def non_negative(text):
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0 or value > 0xFFFFFFFF:
            import argparse
            raise argparse.ArgumentTypeError("'%s' is not a number of steps (0 or more)" % text)
        return value
    group = parser.add_argument_group("stagetrace")
    group.add_argument("--profile-interval", type=non_negative, default=0, metavar="N",
                       help="log where each thread's time went every N steps (0: off)")
    group.add_argument("--trace", default=None, metavar="PATH",
                       help="record a stagetrace trace at PATH (analyze it with `analyze`)")
    return parser


def _default_trace_path():
    _os.makedirs("runs", exist_ok=True)
    return _os.path.join("runs", "%s-%d.sqlite" % (_time.strftime("%Y%m%d-%H%M%S"), _os.getpid()))


def open_from_args(args, program=None, on_window=None, **kwargs):
    """The trace that add_arguments' flags ask for, or a disabled one.

    --trace PATH records to PATH; --profile-interval N > 0 without --trace
    records to runs/<YYYYmmdd-HHMMSS>-<pid>.sqlite (as the C trainer does);
    neither: open_disabled(). on_window defaults to the "stagetrace" logger
    when profile_interval > 0.
    """
    path = getattr(args, "trace", None)
    interval = int(getattr(args, "profile_interval", 0) or 0)
    if path is None and interval == 0:
        return open_disabled(main_thread=kwargs.get("main_thread", "main"))
    if path is None:
        path = _default_trace_path()
        print("stagetrace: recording to %s (--trace PATH chooses the file)" % path, file=_sys.stderr)
    if on_window is None and interval > 0:
        on_window = _log
    return open(path, program=program, profile_interval=interval, on_window=on_window, **kwargs)


def current():
    """The open trace, or None."""
    return _stagetrace._current()


def thread(name, role="other", device=-1, rank=None):
    """Registers the calling thread with the open trace; `with` unregisters it at exit."""
    trace = _stagetrace._current()
    if trace is None:
        raise Error("stagetrace.thread('%s'): no trace is open" % name)
    return trace.thread(name, role, device, rank)


def _close_at_exit():
    try:
        _stagetrace._shutdown()
    finally:
        _signals.restore()


_atexit.register(_close_at_exit)


# ---- reading ----------------------------------------------------------------

def _dtypes():
    import numpy as np
    sizes = _stagetrace._layouts()
    ranges = np.dtype({"names": ["start_ns", "dur_ns", "thread", "stage", "depth"],
                       "formats": ["<i8", "<i8", "<u4", "<u2", "<u2"],
                       "offsets": [0, 8, 16, 20, 22], "itemsize": sizes["ranges"]})
    counters = np.dtype({"names": ["ts_ns", "value", "thread", "counter"],
                         "formats": ["<i8", "<f8", "<u4", "<u4"],
                         "offsets": [0, 8, 16, 20], "itemsize": sizes["counters"]})
    steps = np.dtype({"names": ["step", "ts_ns", "tokens"], "formats": ["<u8", "<i8", "<u8"],
                      "offsets": [0, 8, 16], "itemsize": sizes["steps"]})
    gpu = np.dtype({"names": ["start_ns", "dur_ns", "bytes", "launch_ns", "thread", "stage", "device",
                              "stream", "kind", "name", "copy_kind", "src_mem", "dst_mem", "correlation",
                              "launch_tid"],
                    "formats": ["<i8", "<i8", "<u8", "<i8", "<i8", "<i8", "<i4",
                                "<u4", "<u4", "<u4", "<u4", "<u4", "<u4", "<u4", "<i8"],
                    "offsets": [0, 8, 16, 24, 32, 40, 48, 52, 56, 60, 64, 68, 72, 76, 80],
                    "itemsize": sizes["gpu"]})
    cpu = np.dtype({"names": ["ts_ns", "stack", "thread", "stage", "gil"],
                    "formats": ["<i8", "<u8", "<u4", "<i4", "i1"],
                    "offsets": [0, 8, 16, 20, 24], "itemsize": sizes["cpu"]})
    return {"ranges": ranges, "counters": counters, "steps": steps, "gpu": gpu, "cpu": cpu}


def _categorical(pd, ids, names):
    """A Categorical of names[id] per id, built from codes (no per-row lookup);
    an id without a name, or a negative one (unknown, none), is missing (NaN)."""
    import numpy as np
    categories = sorted(set(names.values()))
    code_of = {name: i for i, name in enumerate(categories)}
    size = max([int(ids.max()) + 1 if len(ids) else 0] + [k + 1 for k in names])
    lut = np.full(size + 1, -1, dtype=np.int32)  # lut[size]: the negative ids
    for k, name in names.items():
        lut[k] = code_of[name]
    codes = lut[np.where(ids >= 0, ids, size)] if len(ids) else np.zeros(0, dtype=np.int32)
    return pd.Categorical.from_codes(codes, categories=categories)


GPU_KINDS = {1: "kernel", 2: "memcpy", 3: "memset", 4: "sync", 5: "api"}


class TraceData:
    """A trace read back (stagetrace.read): NumPy structured arrays and small tables.

    ranges    start_ns, dur_ns, thread, stage, depth (each completed range once)
    counters  ts_ns, value, thread, counter
    steps     step, ts_ns, tokens
    gpu       start_ns, dur_ns, bytes, launch_ns, thread, stage, device, stream,
              kind, name, copy_kind, src_mem, dst_mem, correlation, launch_tid (the
              launching call's OS thread, 0 unknown)
    cpu       ts_ns, stack, thread, stage, gil (the CPU capture's samples; stage
              -1: none open; gil 1 held, 0 not, -1 unknown)
    cpu_python  the Python-frame samples (python_stacks 'frames'), as cpu (gil -1):
              each stands for 1 / meta python_frames_hz s of wall time, apart
              from cpu's
    threads, stages, counter_names: lists of dicts; meta: dict; marks: list of
    (thread, ts_ns, text); gpu_names: {name id: kernel name}; gpu_threads: {OS
    thread id: name} of the launching threads (the trace's gpu_threads); cpu_stacks:
    {stack id: tuple of frame labels, innermost first}.
    """

    def __init__(self, path, raw):
        import numpy as np
        dt = _dtypes()
        self.path = path
        self.meta = raw["meta"]
        self.threads = raw["threads"]
        self.stages = raw["stages"]
        self.counter_names = raw["counter_names"]
        self.marks = raw["marks"]
        self.gpu_names = raw["gpu_names"]
        self.gpu_threads = raw.get("gpu_threads", {})
        self.cpu_stacks = raw.get("cpu_stacks", {})
        self.steps = np.frombuffer(raw["steps"], dtype=dt["steps"])
        empty = bytearray()
        self.ranges = np.frombuffer(raw.get("ranges", empty), dtype=dt["ranges"])
        self.counters = np.frombuffer(raw.get("counters", empty), dtype=dt["counters"])
        self.gpu = np.frombuffer(raw.get("gpu", empty), dtype=dt["gpu"])
        self.cpu = np.frombuffer(raw.get("cpu", empty), dtype=dt["cpu"])
        self.cpu_python = np.frombuffer(raw.get("cpu_python", empty), dtype=dt["cpu"])

    def __repr__(self):
        return "<stagetrace.TraceData '%s': %d threads, %d stages, %d ranges, %d counter samples, " \
               "%d steps, %d GPU records>" % (self.path, len(self.threads), len(self.stages),
                                              len(self.ranges), len(self.counters), len(self.steps),
                                              len(self.gpu))

    def range_steps(self):
        """Per range, the step whose window holds its start: the first step whose
        mark is after start_ns, -1 when none (the `ranges` SQL table's `step`)."""
        import numpy as np
        ts = self.steps["ts_ns"]
        idx = np.searchsorted(ts, self.ranges["start_ns"], side="right")
        step = np.full(len(self.ranges), -1, dtype=np.int64)
        ok = idx < len(ts)
        step[ok] = self.steps["step"][idx[ok]].astype(np.int64)
        return step

    def to_dataframe(self, table="ranges"):
        """One table as a pandas DataFrame, names joined in (ranges, counters, steps, gpu)."""
        import numpy as np
        import pandas as pd
        if table == "ranges":
            r = self.ranges
            df = pd.DataFrame({"thread": r["thread"], "stage": r["stage"], "start_ns": r["start_ns"],
                               "dur_ns": r["dur_ns"], "end_ns": r["start_ns"] + r["dur_ns"],
                               "depth": r["depth"], "step": self.range_steps()})
            self._join_threads(df, pd)
            df["stage_name"] = _categorical(pd, r["stage"], {s["id"]: s["name"] for s in self.stages})
            df["kind"] = _categorical(pd, r["stage"], {s["id"]: s["kind"] for s in self.stages})
            return df
        if table == "counters":
            c = self.counters
            df = pd.DataFrame({"thread": c["thread"], "counter": c["counter"], "ts_ns": c["ts_ns"],
                               "value": c["value"]})
            self._join_threads(df, pd)
            df["counter_name"] = _categorical(pd, c["counter"], {x["id"]: x["name"] for x in self.counter_names})
            df["unit"] = _categorical(pd, c["counter"], {x["id"]: x["unit"] for x in self.counter_names})
            return df
        if table == "steps":
            s = self.steps
            return pd.DataFrame({"step": s["step"], "ts_ns": s["ts_ns"], "tokens": s["tokens"]})
        if table == "gpu":
            g = self.gpu
            df = pd.DataFrame({name: g[name] for name in g.dtype.names})
            df["kind"] = pd.Categorical(df["kind"].map(GPU_KINDS))
            df["name"] = df["name"].map(lambda i: self.gpu_names.get(int(i)) if i else None)
            df["end_ns"] = df["start_ns"] + df["dur_ns"]
            self._join_threads(df, pd)
            df["stage_name"] = _categorical(pd, g["stage"], {x["id"]: x["name"] for x in self.stages})
            for col in ("thread", "stage"):
                df[col] = df[col].where(df[col] >= 0).astype("Int64")
            df["launch_ns"] = df["launch_ns"].where(df["launch_ns"] != np.iinfo(np.int64).min).astype("Int64")
            df["launch_tid"] = df["launch_tid"].where(df["launch_tid"] > 0).astype("Int64")
            df["launch_thread"] = pd.Categorical(pd.Series(g["launch_tid"]).map(self.gpu_threads))
            return df
        if table == "cpu":
            c = self.cpu
            df = pd.DataFrame({"thread": c["thread"], "ts_ns": c["ts_ns"], "stage": c["stage"],
                               "stack": c["stack"], "gil": c["gil"]})
            self._join_threads(df, pd)
            names = {s["id"]: s["name"] for s in self.stages}
            df["stage_name"] = pd.Categorical([names.get(int(i)) for i in c["stage"]])
            df["gil"] = df["gil"].where(df["gil"] >= 0).astype("Int64")
            df["stage"] = df["stage"].where(df["stage"] >= 0).astype("Int64")
            return df
        raise ValueError("unknown table '%s' (ranges, counters, steps, gpu, cpu)" % table)

    def _join_threads(self, df, pd):
        ids = df["thread"].to_numpy()
        df["thread_name"] = _categorical(pd, ids, {t["id"]: t["name"] for t in self.threads})
        df["role"] = _categorical(pd, ids, {t["id"]: t["role"] for t in self.threads})

    def as_pandas(self):
        """Every table as a DataFrame: {"ranges", "counters", "steps", "gpu", "cpu", "threads",
        "stages", "counter_names"}."""
        import pandas as pd
        out = {t: self.to_dataframe(t) for t in ("ranges", "counters", "steps", "gpu", "cpu")}
        out["threads"] = pd.DataFrame(self.threads, columns=["id", "os_tid", "name", "role", "device",
                                                             "rank", "dropped"])
        out["stages"] = pd.DataFrame(self.stages, columns=["id", "name", "kind"])
        out["counter_names"] = pd.DataFrame(self.counter_names, columns=["id", "name", "unit"])
        return out


def read(path, ranges=True, counters=True, gpu=True, cpu=True):
    """Reads a trace file through libstagetrace's C reader into a TraceData."""
    raw = _stagetrace._read(_os.fspath(path), bool(ranges), bool(counters), bool(gpu), bool(cpu))
    return TraceData(_os.fspath(path), raw)
