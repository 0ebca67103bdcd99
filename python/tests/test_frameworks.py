"""stagetrace.lightning.Profiler and stagetrace.transformers.Callback driven as their frameworks
drive them, against stand-ins for Lightning's Profiler base and transformers' TrainerCallback
(the calls and events in the order Lightning 2 and transformers 5 make them), so the mapping of
actions and events to stages, kinds and step marks is checked without either package;
tests/it_frameworks.sh runs the real ones."""
import contextlib
import importlib
import os
import sys
import time
import types

import pytest

import stagetrace


@pytest.fixture
def fake_modules():
    saved = {k: sys.modules.get(k) for k in ("lightning", "lightning.pytorch", "lightning.pytorch.profilers",
                                             "transformers", "transformers.utils", "stagetrace.lightning",
                                             "stagetrace.transformers")}

    class Profiler:
        def __init__(self, dirpath=None, filename=None):
            self.dirpath, self.filename = dirpath, filename

        def setup(self, stage, local_rank=None, log_dir=None):
            self._stage, self._local_rank = stage, local_rank
            self.dirpath = self.dirpath or log_dir

        def teardown(self, stage):
            pass

        @contextlib.contextmanager
        def profile(self, action_name):
            try:
                self.start(action_name)
                yield action_name
            finally:
                self.stop(action_name)

    profilers = types.ModuleType("lightning.pytorch.profilers")
    profilers.Profiler = Profiler
    pl = types.ModuleType("lightning.pytorch")
    pl.profilers = profilers
    top = types.ModuleType("lightning")
    top.pytorch = pl

    class TrainerCallback:
        pass

    tf = types.ModuleType("transformers")
    tf.TrainerCallback = TrainerCallback
    tf.utils = types.ModuleType("transformers.utils")
    tf.utils.logging = types.SimpleNamespace(get_logger=lambda name: __import__("logging").getLogger(name))
    sys.modules.update({"lightning": top, "lightning.pytorch": pl, "lightning.pytorch.profilers": profilers,
                        "transformers": tf, "transformers.utils": tf.utils})
    sys.modules.pop("stagetrace.lightning", None)
    sys.modules.pop("stagetrace.transformers", None)
    yield
    for k, v in saved.items():
        if v is None:
            sys.modules.pop(k, None)
        else:
            sys.modules[k] = v


def stage_totals(path):
    data = stagetrace.read(path)
    df = data.to_dataframe("ranges")
    out = {}
    for name, kind in zip(df["stage_name"].astype(str), df["kind"].astype(str)):
        out.setdefault(name, [kind, 0])[1] += 1
    return out, data


def test_stage_names_of_lightning_actions(fake_modules):
    lt = importlib.import_module("stagetrace.lightning")
    assert lt.stage_of("[_TrainingEpochLoop].train_dataloader_next") == ("data_fetch", "wait_input")
    assert lt.stage_of("[_EvaluationLoop].val_next") == ("val_fetch", "wait_input")
    assert lt.stage_of("[Strategy]DDPStrategy.training_step") == ("training_step", "work")
    assert lt.stage_of("[Strategy]SingleDeviceStrategy.backward") == ("backward", "work")
    assert lt.stage_of("[LightningModule]GPT.optimizer_step") == ("optimizer_step", "work")
    assert lt.stage_of("[LightningModule]GPT.optimizer_zero_grad") == ("zero_grad", "work")
    assert lt.stage_of("[Callback]TQDMProgressBar.on_train_batch_end") == ("callbacks", "work")
    assert lt.stage_of("[LightningModule]GPT.on_before_backward") == ("hooks", "work")
    assert lt.stage_of("run_training_batch") == ("training_batch", "work")
    assert lt.stage_of("run_training_epoch") == ("training_epoch", "work")
    assert lt.stage_of("something.else") == ("else", "work")


def test_lightning_profiler_records_a_fit(fake_modules, tmp_path):
    lt = importlib.import_module("stagetrace.lightning")

    class Also:
        def __init__(self):
            self.calls = []

        def setup(self, stage, local_rank=None, log_dir=None):
            self.calls.append(("setup", stage))

        def start(self, a):
            self.calls.append(("start", a))

        def stop(self, a):
            self.calls.append(("stop", a))

        def summary(self):
            return "also's summary"

        def teardown(self, stage):
            self.calls.append(("teardown", stage))

    also = Also()
    prof = lt.Profiler(tokens_per_step=128, also=also)
    prof.setup("fit", local_rank=0, log_dir=str(tmp_path))
    path = prof.path
    assert path == os.path.join(str(tmp_path), "stagetrace", "fit", "rank0.sqlite")
    with prof.profile("run_training_epoch"):
        for _ in range(5):
            with prof.profile("[_TrainingEpochLoop].train_dataloader_next"):
                time.sleep(0.002)
            with prof.profile("run_training_batch"):
                with prof.profile("[LightningModule]M.optimizer_step"):
                    with prof.profile("[Strategy]SingleDeviceStrategy.training_step"):
                        time.sleep(0.001)
                    with prof.profile("[Strategy]SingleDeviceStrategy.backward"):
                        time.sleep(0.001)
                with prof.profile("[Callback]ModelCheckpoint.on_train_batch_end"):
                    pass
    assert "stagetrace: %s (5 optimizer steps)" % path in prof.summary()
    assert prof.summary().startswith("also's summary")
    prof.teardown("fit")
    assert prof.trace is None
    starts = [c for c in also.calls if c[0] == "start"]
    assert len(starts) == 1 + 5 * 6 and also.calls[0] == ("setup", "fit") and also.calls[-1] == ("teardown", "fit")
    totals, data = stage_totals(path)
    assert totals == {"training_epoch": ["work", 1], "data_fetch": ["wait_input", 5], "training_batch": ["work", 5],
                      "optimizer_step": ["work", 5], "training_step": ["work", 5], "backward": ["work", 5],
                      "callbacks": ["work", 5]}, totals
    steps = data.to_dataframe("steps")
    assert list(steps["step"]) == [0, 1, 2, 3, 4, 5] and list(steps["tokens"]) == [0] + [128] * 5


def test_transformers_callback_records_steps(fake_modules, tmp_path):
    tf = importlib.import_module("stagetrace.transformers")
    cb = tf.Callback()
    args = types.SimpleNamespace(output_dir=str(tmp_path), process_index=0, world_size=1, local_process_index=0)
    state = types.SimpleNamespace(global_step=0, num_input_tokens_seen=0)
    control = object()
    cb.on_train_begin(args, state, control)
    path = cb.path
    assert path == os.path.join(str(tmp_path), "stagetrace", "rank0.sqlite")
    for step in range(1, 4):
        time.sleep(0.002)                      # the next batch
        cb.on_step_begin(args, state, control)
        time.sleep(0.002)                      # forward and backward, two substeps
        cb.on_step_begin(args, state, control) # transformers calls it once per step: a second call changes nothing
        cb.on_pre_optimizer_step(args, state, control)
        cb.on_optimizer_step(args, state, control)
        state.global_step = step
        state.num_input_tokens_seen += 256 * step
        cb.on_step_end(args, state, control)
    cb.on_train_end(args, state, control)
    assert cb.trace is None
    totals, data = stage_totals(path)
    assert totals == {"data_fetch": ["wait_input", 4], "forward_backward": ["work", 3], "optimizer": ["work", 3],
                      "post_step": ["work", 3]}, totals
    steps = data.to_dataframe("steps")
    assert list(steps["step"]) == [0, 1, 2, 3] and list(steps["tokens"]) == [0, 256, 512, 768]
    fb = data.to_dataframe("ranges")
    fb = fb[fb["stage_name"].astype(str) == "forward_backward"]
    assert (fb["dur_ns"] >= 2_000_000).all(), fb
