"""stagetrace as a Hugging Face transformers callback: Trainer(..., callbacks=[stagetrace.transformers.Callback()]).

Importing this module imports transformers. A TrainerCallback sees the loop's events, not its
calls, so each interval between two events becomes a range of a stage on the training thread
(python/README.md, "transformers"):

    on_step_end (or on_train_begin) .. on_step_begin     data_fetch       wait_input (the next
                                                                          batch, and the callbacks
                                                                          and logging of the step)
    on_step_begin .. on_pre_optimizer_step               forward_backward work (every gradient
                                                                          accumulation substep)
    on_pre_optimizer_step .. on_optimizer_step           optimizer        work
    on_optimizer_step .. on_step_end                     post_step        work (the scheduler,
                                                                          zero_grad)
    on_evaluate's evaluation is not seen (it runs between two events of another kind)

A step mark at every on_step_end, with the tokens seen since the last one when the trainer
counts them (TrainingArguments.include_num_input_tokens_seen), else tokens_per_step. One trace
per process (args.process_index of args.world_size, the ranks on one clock when
torch.distributed is up), opened at on_train_begin under `path` (default:
args.output_dir/stagetrace/), closed at on_train_end; profile lines go to the transformers logger.
"""
import os

import transformers

import stagetrace

_STAGES = (("data_fetch", "wait_input"), ("forward_backward", "work"), ("optimizer", "work"), ("post_step", "work"))


class Callback(transformers.TrainerCallback):
    """transformers' callback interface over a stagetrace trace per process."""

    def __init__(self, path=None, profile_interval=0, tokens_per_step=0, program=None, **open_kwargs):
        self.path_arg = path
        self.profile_interval = int(profile_interval)
        self.tokens_per_step = int(tokens_per_step)
        self.program = program
        self.open_kwargs = open_kwargs
        self.trace = None
        self.path = None
        self._stage = None  # the stage whose range is open
        self._tokens_seen = 0

    def _switch(self, name):
        """Ends the open range and begins one of stage `name` (None: none)."""
        if self._stage is not None:
            self._stage.__exit__(None, None, None)
            self._stage = None
        if name is not None and self.trace is not None:
            self._stage = self._stages[name]
            self._stage.__enter__()

    def on_train_begin(self, args, state, control, **kwargs):
        if self.trace is not None:
            return
        where = self.path_arg or os.path.join(args.output_dir or ".", "stagetrace") + os.sep
        if str(where).endswith(os.sep):
            os.makedirs(where, exist_ok=True)
        opts = dict(self.open_kwargs)
        opts.setdefault("rank", args.process_index)
        opts.setdefault("world_size", args.world_size)
        opts.setdefault("local_rank", max(args.local_process_index, 0))
        opts.setdefault("overwrite", True)
        if str(where).endswith(os.sep) and int(opts["world_size"]) == 1:
            where = os.path.join(where, "rank0.sqlite")  # as the ranks of a set are named
        log = transformers.utils.logging.get_logger("transformers.stagetrace")
        self.trace = stagetrace.open(where, program=self.program or "transformers",
                                     profile_interval=self.profile_interval,
                                     on_window=log if self.profile_interval else None, **opts)
        self.path = self.trace.path
        self._stages = {name: self.trace.stage(name, kind) for name, kind in _STAGES}
        self._tokens_seen = getattr(state, "num_input_tokens_seen", 0) or 0
        self.trace.step(state.global_step)
        self._switch("data_fetch")

    def on_step_begin(self, args, state, control, **kwargs):
        if self._stage is None or self._stage is self._stages["data_fetch"]:
            self._switch("forward_backward")

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._switch("optimizer")

    def on_optimizer_step(self, args, state, control, **kwargs):
        self._switch("post_step")

    def on_step_end(self, args, state, control, **kwargs):
        if self.trace is None:
            return
        self._switch(None)
        seen = getattr(state, "num_input_tokens_seen", 0) or 0
        tokens = seen - self._tokens_seen if seen > self._tokens_seen else self.tokens_per_step
        self._tokens_seen = seen
        self.trace.step(state.global_step, tokens)
        self._switch("data_fetch")

    def on_train_end(self, args, state, control, **kwargs):
        if self.trace is None:
            return
        self._switch(None)
        self.trace.close()
        self.trace = None
