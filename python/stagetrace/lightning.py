"""stagetrace as a PyTorch Lightning profiler: Trainer(profiler=stagetrace.lightning.Profiler()).

Importing this module imports Lightning (`lightning.pytorch`, else `pytorch_lightning`). Lightning
calls a profiler's start(action) and stop(action) around what its loops do; this one records each
action as a range of a stage on the calling thread (python/README.md, "Lightning"):

    [_TrainingEpochLoop].train_dataloader_next   data_fetch      wait_input
    run_training_epoch, run_training_batch       training_epoch, training_batch  work (the others nest in them)
    [Strategy]<S>.training_step                  training_step   work
    [Strategy]<S>.backward                       backward        work
    [LightningModule]<M>.optimizer_step          optimizer_step  work
    [LightningModule]<M>.optimizer_zero_grad     zero_grad       work
    [Strategy]<S>.validation_step, ...           validation_step, ... work
    [_EvaluationLoop].val_next, ...              val_fetch, ...  wait_input
    [Callback]<C>.<hook>                         callbacks       work
    [LightningModule]<M>.<hook>, [LightningDataModule]<D>.<hook>   hooks  work
    anything else                                its last dotted part, work

and marks a step at the end of every optimizer_step (tokens_per_step tokens each). One trace per
rank, opened at setup() (once torch.distributed is up: its rank and world size, and the ranks on
one clock) under `dirpath` (default: Lightning's log_dir/stagetrace), closed at teardown(). With
`also=` another Lightning profiler (e.g. SimpleProfiler()) gets every call too, so both measure
the same run.
"""
import logging
import os
import re

try:
    from lightning.pytorch.profilers import Profiler as _Base
except ImportError:  # Lightning 1.x's package name
    from pytorch_lightning.profilers import Profiler as _Base

import stagetrace

_FETCH = re.compile(r"^\[_(\w+)Loop\]\.(\w+)_next$")
_OWNER = re.compile(r"^\[(\w+)\](?:[\w.]*\.)?(\w+)$")
_NAMES = {"train_dataloader": ("data_fetch", "wait_input"), "run_training_batch": ("training_batch", "work"),
          "run_training_epoch": ("training_epoch", "work"), "optimizer_zero_grad": ("zero_grad", "work")}


def stage_of(action):
    """(stage name, kind) of a Lightning action name."""
    m = _FETCH.match(action)
    if m:
        what = m.group(2)
        if what in _NAMES:
            return _NAMES[what]
        return (what.replace("_dataloader", "") + "_fetch", "wait_input")
    if action in _NAMES:
        return _NAMES[action]
    m = _OWNER.match(action)
    if m:
        owner, method = m.group(1), m.group(2)
        if owner == "Callback":
            return ("callbacks", "work")
        if method in _NAMES:
            return _NAMES[method]
        if owner in ("LightningModule", "LightningDataModule") and method.startswith("on_"):
            return ("hooks", "work")
        return (method, "work")
    return (action.rsplit(".", 1)[-1] or action, "work")


class Profiler(_Base):
    """Lightning's profiler interface over a stagetrace trace per rank."""

    def __init__(self, dirpath=None, profile_interval=0, tokens_per_step=0, also=None, program=None, **open_kwargs):
        super().__init__(dirpath=dirpath)
        self.user_dirpath = dirpath  # Lightning's setup() fills dirpath in with its log_dir
        self.profile_interval = int(profile_interval)
        self.tokens_per_step = int(tokens_per_step)
        self.also = also
        self.program = program
        self.open_kwargs = open_kwargs
        self.trace = None
        self.path = None
        self._stages = {}
        self._open = {}   # action -> the stage entered for it, in start order
        self._steps = 0
        self._log = logging.getLogger("lightning.pytorch.profilers.stagetrace")

    def setup(self, stage, local_rank=None, log_dir=None):
        super().setup(stage, local_rank=local_rank, log_dir=log_dir)
        if self.also is not None:
            self.also.setup(stage, local_rank=local_rank, log_dir=log_dir)
        if self.trace is not None:
            return
        base = self.user_dirpath or os.path.join(log_dir or ".", "stagetrace")
        stage_name = getattr(stage, "value", stage) or "run"  # TrainerFn.FITTING is "fit"
        where = os.path.join(str(base), str(stage_name)) + os.sep
        os.makedirs(where, exist_ok=True)
        kwargs = dict(self.open_kwargs)
        dist = stagetrace.distributed._dist()
        if dist is not None and dist.is_initialized():
            kwargs.setdefault("rank", dist.get_rank())
            kwargs.setdefault("world_size", dist.get_world_size())
        if local_rank is not None:
            kwargs.setdefault("local_rank", local_rank)
        kwargs.setdefault("overwrite", True)
        if int(kwargs.get("world_size", stagetrace.rank_from_env()["world_size"])) == 1:
            where = os.path.join(where, "rank0.sqlite")  # as the ranks of a set are named
        self.trace = stagetrace.open(where, program=self.program or "lightning", profile_interval=self.profile_interval,
                                     on_window=self._log if self.profile_interval else None, **kwargs)
        self.path = self.trace.path
        self._steps = 0
        self.trace.step(0)

    def _stage_for(self, action):
        st = self._stages.get(action)
        if st is None:
            name, kind = stage_of(action)
            st = self._stages[action] = self.trace.stage(name, kind)
        return st

    def start(self, action_name):
        if self.also is not None:
            self.also.start(action_name)
        if self.trace is None or self.trace.closed:
            return
        st = self._stage_for(action_name)
        st.__enter__()
        self._open.setdefault(action_name, []).append(st)

    def stop(self, action_name):
        if self.trace is not None and not self.trace.closed:
            entered = self._open.get(action_name)
            if entered:
                entered.pop().__exit__(None, None, None)
                if action_name.endswith(".optimizer_step"):
                    self._steps += 1
                    self.trace.step(self._steps, self.tokens_per_step)
        if self.also is not None:
            self.also.stop(action_name)

    def summary(self):
        text = self.also.summary() if self.also is not None else ""
        if self.path:
            text += ("\n" if text else "") + "stagetrace: %s (%d optimizer steps): analyze bottleneck %s" % (
                self.path, self._steps, os.path.dirname(self.path) + os.sep)
        return text

    def teardown(self, stage):
        if self.trace is not None:
            self.trace.close()
            self.trace = None
            self._stages, self._open = {}, {}
        if self.also is not None:
            self.also.teardown(stage)
        super().teardown(stage)
