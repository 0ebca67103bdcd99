"""ddp_torch.py: a small data-parallel training loop for torchrun, traced with stagetrace.

    torchrun --nproc-per-node 2 samples/python/ddp_torch.py --trace runs/ddp/ [--slow-rank 1]
    build/analyze stragglers runs/ddp/
    build/analyze bottleneck runs/ddp/

Each rank trains the same MLP on its own random batches: stages `load`, `forward`, `backward`,
the gradient all-reduce (one flat buffer per step, `torch.distributed.all_reduce` called on the
thread inside stagetrace.collectives(), so it is a `comm` range named `all_reduce`) and
`optimizer`, and a step mark per step. The ranks share rank 0's clock: stagetrace.open, called
before init_process_group, measures each rank's offset right after it and again at close
(python/README.md, "Ranks on one clock"). --slow-rank R adds --slow-ms of work to rank R's
forward each step (a busy loop, so it is CPU time like a heavier forward), so that `stragglers`
finds R last at every all-reduce and `bottleneck` names its forward. gloo on CPU (the default
without CUDA, --backend gloo), NCCL when each rank has its own GPU (--backend nccl, or auto with
as many GPUs as local ranks). --ddp instead wraps the model in DistributedDataParallel, whose
all-reduces run inside backward from autograd hooks (no comm range: the waits then fall in
`backward`).

--device cuda puts every rank on a GPU (local rank modulo the GPUs there: two ranks share GPU 0 on
a one-GPU host) with either backend; gloo then all-reduces CUDA tensors through host copies.
--alternate N measures what the recording costs inside the job: after --warmup steps, blocks of N
steps alternate between recording (stages, the all-reduce's comm range, step marks) and calling
none of it (the trace stays open, its writer running), in pairs whose order flips; each block is
timed after its first --alternate-settle steps, and rank 0 prints the paired rate ratio, recorded
/ not, with its 95 % interval (samples/python/alternation.py). Every rank switches at the same
steps, since they step in lockstep.
"""
import argparse
import contextlib
import os
import sys
import time

try:
    import torch
    import torch.distributed as dist
except ImportError:  # the message below, not a traceback
    torch = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import alternation  # noqa: E402 (samples/python/alternation.py, beside this file)
try:
    import stagetrace
except ImportError:  # run from a checkout: the package built beside it
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "python"))
    import stagetrace


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="auto (the default): CUDA with NCCL, the CPU with gloo")
    ap.add_argument("--slow-rank", type=int, default=-1, metavar="R",
                    help="this rank's forward does --slow-ms more work each step (-1, the default: none)")
    ap.add_argument("--slow-ms", type=float, default=20.0)
    ap.add_argument("--ddp", action="store_true", help="DistributedDataParallel instead of the explicit all-reduce")
    ap.add_argument("--trace", default="runs/ddp/", metavar="PATH",
                    help="the traces: PATH/rank<r>.sqlite for a directory (default runs/ddp/)")
    ap.add_argument("--no-trace", action="store_true", help="record nothing (stagetrace.open_disabled): for on/off")
    ap.add_argument("--alternate", type=int, default=0, metavar="N",
                    help="recording on and off in blocks of N steps, the paired rate ratio printed (0: off)")
    ap.add_argument("--alternate-settle", type=int, default=5, metavar="K",
                    help="steps left out at the start of each --alternate block (default 5)")
    ap.add_argument("--warmup", type=int, default=20, metavar="W", help="steps before the first block (default 20)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or args.dim < 1 or args.layers < 1:
        ap.error("--steps, --batch, --dim and --layers must be at least 1")
    if args.slow_ms < 0:
        ap.error("--slow-ms must be 0 or more")
    if args.alternate < 0 or args.alternate_settle < 0 or args.warmup < 0:
        ap.error("--alternate, --alternate-settle and --warmup must be 0 or more")
    if args.alternate and args.alternate_settle >= args.alternate:
        ap.error("--alternate-settle must be less than --alternate")
    if args.alternate and args.no_trace:
        ap.error("--alternate switches the recording itself: leave out --no-trace")
    if args.device == "cpu" and args.backend == "nccl":
        ap.error("--backend nccl needs --device cuda (or auto)")
    return args


def busy(ms):
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def main(argv=None):
    args = parse_args(argv)
    if torch is None:
        print("ddp_torch: this sample needs PyTorch (pip install torch)", file=sys.stderr)
        return 2
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("ddp_torch: start it with torchrun (RANK and WORLD_SIZE are not set)", file=sys.stderr)
        return 2
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = args.backend
    if backend == "auto":
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= local_world else "gloo"
    on_cuda = args.device == "cuda" or (args.device == "auto" and backend == "nccl")
    if on_cuda and not torch.cuda.is_available():
        print("ddp_torch: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if on_cuda else torch.device("cpu")
    if on_cuda:
        torch.cuda.set_device(device)
    if args.no_trace:
        trace = stagetrace.open_disabled()
    else:
        if args.trace.endswith("/"):
            os.makedirs(args.trace, exist_ok=True)
        # opened before init_process_group: stagetrace measures the clock offset right after it
        trace = stagetrace.open(args.trace, program="ddp_torch", device=device.index if on_cuda else -1,
                                overwrite=True)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)  # the same initial weights on every rank
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.dim, args.dim), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(device)
    if args.ddp:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if on_cuda else None)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=1e-3)
    gen = torch.Generator().manual_seed(100 + rank)
    s_load, s_forward = trace.stage("load", "wait_input"), trace.stage("forward")
    s_backward, s_opt = trace.stage("backward"), trace.stage("optimizer")
    # --alternate: in its off blocks no stagetrace call is made (the stages are null contexts, the
    # all-reduce is torch's own, no step mark)
    recording = {"on": True}
    off = contextlib.nullcontext()
    raw_all_reduce = dist.all_reduce
    alt = None
    if args.alternate:
        alt = alternation.Alternation(args.alternate, args.alternate_settle, min(args.warmup, args.steps - 1),
                                      lambda: recording.update(on=True), lambda: recording.update(on=False),
                                      "alternate", "recorded", "not recorded")
    t0 = time.perf_counter()
    with stagetrace.collectives(trace, names=("all_reduce",)):
        traced_all_reduce = dist.all_reduce
        trace.step(0)
        for step in range(1, args.steps + 1):
            on = recording["on"]
            with s_load if on else off:
                x = torch.randn(args.batch, args.dim, generator=gen).to(device)
            with s_forward if on else off:
                loss = model(x).pow(2).mean()
                if rank == args.slow_rank:
                    busy(args.slow_ms)
            with s_backward if on else off:
                opt.zero_grad(set_to_none=False)
                loss.backward()
            if not args.ddp:
                flat = torch.cat([p.grad.reshape(-1) for p in params])
                (traced_all_reduce if on else raw_all_reduce)(flat)
                flat /= world
                at = 0
                for p in params:
                    p.grad.copy_(flat[at:at + p.numel()].view_as(p))
                    at += p.numel()
            with s_opt if on else off:
                opt.step()
                if device.type == "cuda":
                    torch.cuda.synchronize()
            if on:
                trace.step(step, args.batch)
            if alt:
                alt.at_step(step)
    elapsed = time.perf_counter() - t0
    path = trace.path
    trace.close()  # before destroy_process_group: the close-time clock measurement is collective
    dist.destroy_process_group()
    print("ddp_torch: rank %d of %d (%s): %d steps in %.2f s (%.1f steps/s), last loss %.4f, trace %s"
          % (rank, world, backend, args.steps, elapsed, args.steps / elapsed, float(loss), path))
    if alt and rank == 0:
        print("ddp_torch: " + alt.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
