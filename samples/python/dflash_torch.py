"""dflash_torch.py: a small DFlash-style drafter-training pipeline in PyTorch,
instrumented with stagetrace (the Python twin of the C trainer's roles).

  target  a frozen small transformer runs forward on token batches and taps the
          hidden states of a few layers (stages load, forward; with
          --postprocess sync also postprocess (packing) and d2h, on its own thread)
  post    with --postprocess async: packs the taps and copies them to the host
          on a side CUDA stream (stages postprocess, d2h, stream_sync), off the
          target's critical path
  queue   bounded (--queue-depth) between target/post and the drafters: queue_put
          (wait_output) when full, queue_wait (wait_input) when empty; counter
          hidden_queue_depth
  drafter one or more (--drafters): h2d, forward (fc over the concatenated taps,
          a transformer layer, the target's frozen LM head), loss (against the
          target's next-token predictions), backward, optimizer (AdamW)
  main    marks a step per batch trained (step_wait while it waits)

  python3 samples/python/dflash_torch.py --steps 40 --profile-interval 10 --trace run.sqlite
  build/analyze bottleneck run.sqlite

--trace-cpu adds the CPU capture (cpu=True): `build/analyze cpu run.sqlite`, and
samples/python/cpu_check.py's summary of its Python frames and GIL state.

--slow-target-ms / --slow-drafter-ms add that much time to each target /
drafter forward (a sleep inside the stage), so that `analyze bottleneck` has a
known answer. Runs on CPU torch (--device cpu) and on CUDA (--device cuda).
Importing this file needs no torch; running it does.

--gpu-alternate N (with --trace-gpu) measures what GPU recording costs inside one
process: after the warm-up, GPU recording is paused and resumed every N steps
(trace.gpu_pause / gpu_resume, st_gpu_pause), in pairs of blocks whose order
alternates (on-paused, paused-on, ...); each block's first --alternate-settle
steps are left out, so the queue drains the other state's work first. It
prints the paired rate ratio (recorded / paused) with a 95 % interval: far
tighter than comparing separate processes, whose rates spread by about 15 %.
With --torch-profiler instead of --trace-gpu, the same blocks start and stop
torch.profiler (CPU and CUDA activity, record_function per stage): its cost
measured the same way; PATH then receives the last recorded block's trace.
"""
import argparse
import contextlib
import os
import queue
import sys
import threading
import time

try:
    import torch
except ImportError:  # the module stays importable (tests, --help); main() says what is missing
    torch = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import alternation  # noqa: E402 (samples/python/alternation.py, beside this file)

try:
    import stagetrace
except ImportError:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "build", "python"))
    import stagetrace


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="DFlash-style drafter training in PyTorch, traced by stagetrace")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--steps", type=int, default=40, help="batches trained (one step mark each)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--target-layers", type=int, default=4)
    ap.add_argument("--taps", default="1,2,3", help="target layers whose hidden states the drafter reads")
    ap.add_argument("--drafters", type=int, default=1)
    ap.add_argument("--queue-depth", type=int, default=4)
    ap.add_argument("--postprocess", choices=("sync", "async"), default="sync")
    ap.add_argument("--slow-target-ms", type=float, default=0.0)
    ap.add_argument("--slow-drafter-ms", type=float, default=0.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="intra-op threads per torch call on CPU (default 1: the roles run side by side)")
    ap.add_argument("--trace-gpu", action="store_true", help="also record GPU activity (CUPTI builds)")
    ap.add_argument("--trace-cpu", action="store_true",
                    help="also record the CPU capture (stagetrace.open(cpu=True): on/off-CPU time, sampled "
                         "stacks with Python frames where the perf trampoline can be used; docs/cpu.md)")
    ap.add_argument("--python-stacks", choices=stagetrace.PYTHON_STACKS, default="auto",
                    help="with --trace-cpu: Python frames from CPython's perf trampoline or sampled from "
                         "the interpreter (default auto: the trampoline on 3.12+ with a frame-pointer "
                         "libpython, else frames; perf: always the trampoline on 3.12+; frames: the "
                         "interpreter's frames at python_hz; off)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loss-item", action="store_true",
                    help="read the loss with .item() inside the loss stage each step (a host sync there)")
    ap.add_argument("--warmup-steps", type=int, default=20,
                    help="steps left out of the steady rate printed at the end (default 20)")
    ap.add_argument("--torch-profiler", metavar="PATH",
                    help="instead of stagetrace, profile with torch.profiler (record_function per stage, "
                         "CPU and CUDA activity) and write its Chrome trace to PATH: for comparison")
    ap.add_argument("--gpu-alternate", type=int, default=0, metavar="N",
                    help="with --trace-gpu: pause and resume GPU recording every N steps after the warm-up "
                         "and print the paired cost ratio (0, the default: never pause); with "
                         "--torch-profiler: stop and start torch.profiler the same way")
    ap.add_argument("--alternate-settle", type=int, default=10, metavar="K",
                    help="steps left out at the start of each --gpu-alternate block (default 10)")
    ap.add_argument("--gpu-every", type=int, default=0, metavar="N",
                    help="with --trace-gpu: sampled GPU capture, one step in N recorded "
                         "(stagetrace.open(gpu_every=N); 0, the default: every step)")
    stagetrace.add_arguments(ap)
    args = ap.parse_args(argv)
    args.taps = [int(x) for x in args.taps.split(",") if x]
    for name in ("steps", "batch", "seq_len", "vocab", "dim", "heads", "target_layers", "drafters",
                 "queue_depth", "torch_threads"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name.replace("_", "-"))
    if args.dim % args.heads:
        ap.error("--dim must be a multiple of --heads")
    if not args.taps or any(t < 0 or t >= args.target_layers for t in args.taps):
        ap.error("--taps must name layers in 0..%d" % (args.target_layers - 1))
    if args.slow_target_ms < 0 or args.slow_drafter_ms < 0:
        ap.error("--slow-*-ms must be 0 or more")
    if args.gpu_alternate < 0 or args.alternate_settle < 0:
        ap.error("--gpu-alternate and --alternate-settle must be 0 or more")
    if args.gpu_alternate and not (args.trace_gpu or args.torch_profiler):
        ap.error("--gpu-alternate needs --trace-gpu or --torch-profiler (it pauses and resumes the recording)")
    if args.gpu_alternate and args.alternate_settle >= args.gpu_alternate:
        ap.error("--alternate-settle must be less than --gpu-alternate")
    if args.gpu_every and (args.gpu_every < 0 or args.gpu_every > 1000000 or not args.trace_gpu):
        ap.error("--gpu-every needs --trace-gpu and a number of steps from 1 to 1000000 (0: every step)")
    return args


def build_models(args, device):
    nn = torch.nn

    class Target(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(args.vocab, args.dim)
            self.layers = nn.ModuleList(
                nn.TransformerEncoderLayer(args.dim, args.heads, 4 * args.dim, dropout=0.0,
                                           batch_first=True, norm_first=True)
                for _ in range(args.target_layers))
            self.norm = nn.LayerNorm(args.dim)
            self.lm_head = nn.Linear(args.dim, args.vocab, bias=False)

        def forward(self, tokens, mask):
            h = self.embed(tokens)
            taps = []
            for i, layer in enumerate(self.layers):
                h = layer(h, src_mask=mask, is_causal=True)
                if i in args.taps:
                    taps.append(h)
            return taps, self.lm_head(self.norm(h))

    class Drafter(nn.Module):
        def __init__(self, lm_head):
            super().__init__()
            self.fc = nn.Linear(len(args.taps) * args.dim, args.dim)
            self.layer = nn.TransformerEncoderLayer(args.dim, args.heads, 4 * args.dim, dropout=0.0,
                                                    batch_first=True, norm_first=True)
            self.norm = nn.LayerNorm(args.dim)
            self.lm_head = lm_head  # shared with the target, frozen

        def forward(self, hidden, mask):
            h = self.layer(self.fc(hidden), src_mask=mask, is_causal=True)
            return self.lm_head(self.norm(h))

    torch.manual_seed(args.seed)
    target = Target().to(device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    drafters = []
    for _ in range(args.drafters):
        d = Drafter(target.lm_head).to(device)
        opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=args.lr)
        drafters.append((d, opt))
    return target, drafters


class Pipeline:
    def __init__(self, args, trace):
        self.args = args
        self.trace = trace
        self.device = torch.device(args.device)
        self.target, self.drafters = build_models(args, self.device)
        self.mask = torch.nn.Transformer.generate_square_subsequent_mask(args.seq_len, device=self.device)
        self.hidden = queue.Queue(maxsize=args.queue_depth)
        self.to_post = queue.Queue(maxsize=2)
        self.done = queue.Queue()
        self.stop = threading.Event()
        self.errors = []
        st = trace.stage
        self.s_load = st("load")
        self.s_forward = st("forward")
        self.s_post = st("postprocess")
        self.s_d2h = st("d2h", kind="copy")
        self.s_h2d = st("h2d", kind="copy")
        self.s_sync = st("stream_sync", kind="sync")
        self.s_put = st("queue_put", kind="wait_output")
        self.s_wait = st("queue_wait", kind="wait_input")
        self.s_loss = st("loss")
        self.s_backward = st("backward")
        self.s_optimizer = st("optimizer")
        self.s_step_wait = st("step_wait", kind="wait_input")
        self.cuda = self.device.type == "cuda"
        self.side_stream = torch.cuda.Stream() if self.cuda else None

    # -- helpers --------------------------------------------------------------
    def put(self, q, item):
        with self.s_put:
            while not self.stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
        if q is self.hidden:
            self.trace.counter("hidden_queue_depth", q.qsize(), "items")

    def get(self, q):
        with self.s_wait:
            while True:
                try:
                    item = q.get(timeout=0.1)
                    break
                except queue.Empty:
                    if self.stop.is_set():
                        return None
        if q is self.hidden:
            self.trace.counter("hidden_queue_depth", q.qsize(), "items")
        return item

    def pack_and_copy(self, taps, predictions):
        """The postprocess: concatenate the taps and bring them to the host."""
        with self.s_post:
            packed = torch.cat(taps, dim=-1)
        with self.s_d2h:
            if self.cuda:
                host = torch.empty(packed.shape, dtype=packed.dtype, pin_memory=True)
                host.copy_(packed, non_blocking=True)
                preds = predictions.to("cpu", non_blocking=True)
            else:
                host, preds = packed.clone(), predictions.clone()
        return host, preds

    def thread(self, name, role, device):
        """Registers the calling thread with the trace (a no-op under --torch-profiler)."""
        if isinstance(self.trace, TorchProfilerTrace):
            return contextlib.nullcontext()
        return stagetrace.thread(name, role, device=device)

    def run_thread(self, fn, *args):
        try:
            if self.cuda:  # each role on its own stream (torch's current stream is per thread)
                with torch.cuda.stream(torch.cuda.Stream()):
                    fn(*args)
            else:
                fn(*args)
        except BaseException as e:  # reported by main, which stops the run
            self.errors.append(e)
            self.stop.set()

    # -- roles ------------------------------------------------------------------
    def target_loop(self):
        a = self.args
        g = torch.Generator().manual_seed(a.seed + 1)
        with self.thread("target0", "target", device=0 if self.cuda else -1):
            while not self.stop.is_set():
                with self.s_load:
                    tokens = torch.randint(0, a.vocab, (a.batch, a.seq_len), generator=g).to(self.device)
                with self.s_forward, torch.no_grad():
                    taps, logits = self.target(tokens, self.mask)
                    predictions = logits.argmax(-1)
                    if a.slow_target_ms:
                        time.sleep(a.slow_target_ms / 1000)
                if a.postprocess == "sync":
                    with torch.no_grad():
                        host, preds = self.pack_and_copy(taps, predictions)
                    if self.cuda:
                        with self.s_sync:
                            torch.cuda.current_stream().synchronize()
                    self.put(self.hidden, (host, preds))
                else:
                    event = None
                    if self.cuda:
                        event = torch.cuda.Event()
                        event.record()
                    self.put(self.to_post, (taps, predictions, event))

    def post_loop(self):
        with self.thread("post0", "post", device=0 if self.cuda else -1):
            while True:
                item = self.get(self.to_post)
                if item is None:
                    return
                taps, predictions, event = item
                with torch.no_grad():
                    if self.cuda:
                        with torch.cuda.stream(self.side_stream):
                            self.side_stream.wait_event(event)
                            host, preds = self.pack_and_copy(taps, predictions)
                        with self.s_sync:
                            self.side_stream.synchronize()
                    else:
                        host, preds = self.pack_and_copy(taps, predictions)
                self.put(self.hidden, (host, preds))

    def drafter_loop(self, index):
        a = self.args
        model, opt = self.drafters[index]
        loss_fn = torch.nn.CrossEntropyLoss()
        with self.thread("drafter%d" % index, "drafter", device=0 if self.cuda else -1):
            while True:
                item = self.get(self.hidden)
                if item is None:
                    return
                host, preds = item
                with self.s_h2d:
                    hidden = host.to(self.device, non_blocking=True)
                    labels = preds.to(self.device, non_blocking=True)
                with self.s_forward:
                    logits = model(hidden, self.mask)
                    if a.slow_drafter_ms:
                        time.sleep(a.slow_drafter_ms / 1000)
                with self.s_loss:
                    # the drafter predicts what the target predicts one token later
                    loss = loss_fn(logits[:, :-1].reshape(-1, a.vocab), labels[:, 1:].reshape(-1))
                    if a.loss_item:
                        # a per-step host sync inside the stage, as many loops read their loss
                        loss_value = loss.item()
                with self.s_backward:
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                with self.s_optimizer:
                    opt.step()
                    if self.cuda:
                        with self.s_sync:
                            torch.cuda.current_stream().synchronize()
                self.done.put((loss_value if a.loss_item else float(loss.detach())) if index == 0 else None)

    # -- main -------------------------------------------------------------------
    def run(self):
        a = self.args
        threads = [threading.Thread(target=self.run_thread, args=(self.target_loop,), name="target0")]
        if a.postprocess == "async":
            threads.append(threading.Thread(target=self.run_thread, args=(self.post_loop,), name="post0"))
        threads += [threading.Thread(target=self.run_thread, args=(self.drafter_loop, i), name="drafter%d" % i)
                    for i in range(a.drafters)]
        tokens_per_step = a.batch * a.seq_len
        warmup = min(a.warmup_steps, a.steps - 1) if a.steps > 1 else 0
        t0 = time.perf_counter()
        t_warm, cpu_warm = t0, time.process_time()
        self.trace.step(0)
        for t in threads:
            t.start()
        last_loss = None
        alternate = Alternation(a.gpu_alternate, a.alternate_settle, warmup, self.trace) if a.gpu_alternate else None
        try:
            for step in range(1, a.steps + 1):
                with self.s_step_wait:
                    while True:
                        try:
                            loss = self.done.get(timeout=0.1)
                            break
                        except queue.Empty:
                            if self.errors:
                                raise self.errors[0]
                if loss is not None:
                    last_loss = loss
                self.trace.step(step, tokens_per_step)
                if step == warmup:
                    t_warm, cpu_warm = time.perf_counter(), time.process_time()
                if alternate:
                    alternate.at_step(step)
            t_end, cpu_end = time.perf_counter(), time.process_time()
            # The steady rate: the steps after the warm-up, between their step marks.
            self.steady_tokens_per_s = (a.steps - warmup) * tokens_per_step / max(t_end - t_warm, 1e-9)
            self.steady_cpu_s_per_step = (cpu_end - cpu_warm) / max(a.steps - warmup, 1)
        finally:
            self.stop.set()
            for t in threads:
                t.join()
        elapsed = time.perf_counter() - t0
        if self.errors:
            raise self.errors[0]
        self.alternation = alternate
        return a.steps * tokens_per_step / elapsed, last_loss




class Alternation(alternation.Alternation):
    """--gpu-alternate: GPU recording on (trace.gpu_resume) and paused (trace.gpu_pause) in
    blocks of `block` steps after the warm-up (samples/python/alternation.py)."""

    def __init__(self, block, settle, warmup, trace):
        super().__init__(block, settle, warmup, trace.gpu_resume, trace.gpu_pause, "gpu-alternate")


class TorchProfilerTrace:
    """What the pipeline needs of a trace, with torch.profiler's record_function
    in place of stagetrace's stages (--torch-profiler). Under --gpu-alternate it
    owns the profiler: gpu_pause stops it (its events dropped), gpu_resume
    starts a new one."""
    enabled = False
    path = None

    def __init__(self, activities=None):
        self.activities = activities
        self.prof = None
        if activities is not None:
            self.gpu_resume()

    def gpu_resume(self):
        self.prof = torch.profiler.profile(activities=self.activities)
        self.prof.start()

    def gpu_pause(self):
        self.prof.stop()
        self.prof = None

    def finish(self, path):
        """Stops a running profiler and writes its trace to path (the last recorded block)."""
        if self.prof is not None:
            self.prof.stop()
            self.prof.export_chrome_trace(path)
            self.prof = None
            self.path = path

    def stage(self, name, kind="work"):
        return _RecordFunction(name)

    def step(self, step, tokens=0):
        pass

    def counter(self, name, value, unit=""):
        pass

    def mark(self, text):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _RecordFunction:
    def __init__(self, name):
        self.name = name
        self.stack = threading.local()

    def __enter__(self):
        rf = torch.profiler.record_function(self.name)
        rf.__enter__()
        self.stack.__dict__.setdefault("items", []).append(rf)
        return self

    def __exit__(self, *exc):
        self.stack.items.pop().__exit__(*exc)
        return False


def main(argv=None):
    args = parse_args(argv)
    if torch is None:
        print("dflash_torch: this sample needs PyTorch (pip install torch)", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("dflash_torch: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    if args.device == "cpu":
        torch.set_num_threads(args.torch_threads)
    if args.torch_profiler:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if args.device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        if args.gpu_alternate:
            trace = TorchProfilerTrace(activities)
            pipe = Pipeline(args, trace)
            tokens_per_s, loss = pipe.run()
            trace.finish(args.torch_profiler)
        else:
            trace = TorchProfilerTrace()
            with torch.profiler.profile(activities=activities) as prof:
                pipe = Pipeline(args, trace)
                tokens_per_s, loss = pipe.run()
            prof.export_chrome_trace(args.torch_profiler)
            trace.path = args.torch_profiler
    else:
        cpu = {"cpu": True, "python_stacks": args.python_stacks} if args.trace_cpu else {}
        trace = stagetrace.open_from_args(args, program="dflash_torch", **cpu)
        if args.trace_gpu and trace.enabled:
            trace.gpu_start(stagetrace.gpu_records_spec(args.gpu_every or None))
        with trace:
            pipe = Pipeline(args, trace)
            tokens_per_s, loss = pipe.run()
    print("dflash_torch: %s, %d drafter%s, queue depth %d, postprocess %s: %d steps, %.1f tokens/s, "
          "last loss %.3f%s" % (args.device, args.drafters, "s" if args.drafters > 1 else "", args.queue_depth,
                                args.postprocess, args.steps, tokens_per_s, loss if loss is not None else float("nan"),
                                ", trace %s" % trace.path if trace.path else ""))
    print("dflash_torch: steady %.1f tokens/s after %d warm-up steps, %.3f ms CPU (process) per step"
          % (pipe.steady_tokens_per_s, min(args.warmup_steps, max(args.steps - 1, 0)),
             pipe.steady_cpu_s_per_step * 1e3))
    if getattr(pipe, "alternation", None):
        print("dflash_torch: " + pipe.alternation.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
