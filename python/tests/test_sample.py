"""The PyTorch sample (samples/python/dflash_torch.py): importable without
torch; with torch, `analyze bottleneck` names the role made slow on purpose."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT

SAMPLE = os.path.join(ROOT, "samples", "python", "dflash_torch.py")


def load_sample():
    spec = importlib.util.spec_from_file_location("dflash_torch", SAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sample_imports_and_parses_without_torch(capsys):
    sample = load_sample()
    args = sample.parse_args(["--trace", "x.sqlite", "--profile-interval", "5", "--postprocess", "async",
                              "--queue-depth", "8", "--slow-target-ms", "3"])
    assert (args.trace, args.profile_interval, args.postprocess, args.queue_depth, args.taps) == \
        ("x.sqlite", 5, "async", 8, [1, 2, 3])
    with pytest.raises(SystemExit):
        sample.parse_args(["--taps", "9"])
    if sample.torch is None:
        assert sample.main(["--steps", "2"]) == 2
        assert "needs PyTorch" in capsys.readouterr().err


@pytest.mark.parametrize("slow, role", [("--slow-target-ms", "target"), ("--slow-drafter-ms", "drafter")])
def test_sample_bottleneck_names_the_slow_role(tmp_path, analyze, slow, role):
    pytest.importorskip("torch")
    path = str(tmp_path / "run.sqlite")
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
    out = subprocess.run([sys.executable, SAMPLE, "--steps", "16", "--dim", "64", "--seq-len", "64",
                          "--profile-interval", "4", "--trace", path, slow, "40"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    verdict = json.loads(analyze("bottleneck", "--format", "json", "--skip-steps", "2", path))["verdict"][0]
    assert verdict["bottleneck"] == role
    assert verdict["stage"] == "forward"


def test_gpu_alternation_pairs_blocks_and_times_their_settled_steps(monkeypatch):
    """--gpu-alternate: after 2 warm-up steps, blocks of 4 steps alternate
    on/paused in pairs whose order flips (on-paused, paused-on, ...), each
    timed over its last 3 steps. A fake clock makes a recorded step take 1.1 s
    and a paused one 1.0 s: every pair's rate ratio is 1.0 / 1.1."""
    sample = load_sample()
    calls = []

    class FakeTrace:
        def gpu_pause(self):
            calls.append("pause")

        def gpu_resume(self):
            calls.append("resume")

    clock = {"t": 0.0}

    class FakeTime:
        @staticmethod
        def perf_counter():
            return clock["t"]

        @staticmethod
        def process_time():
            return clock["t"] / 2

    monkeypatch.setattr(sample.alternation, "time", FakeTime)
    alt = sample.Alternation(4, 1, 2, FakeTrace())
    states = []
    for step in range(1, 2 + 4 * 6 + 1):
        clock["t"] += 1.0 if alt.paused else 1.1  # the step that ends now ran in the current state
        alt.at_step(step)
        states.append(alt.paused)
    # blocks 0..5 start at steps 2, 6, 10, ...: on, paused | paused, on | on, paused
    assert [b[0] for b in alt.blocks] == [True, False, False, True, True, False]
    # pause at block 1, resume at block 3, pause at block 5; block 6 (step 26) stays paused
    assert calls == ["pause", "resume", "pause"]
    assert states[-1] is True
    for on, s_per_step, cpu in alt.blocks:
        assert s_per_step == pytest.approx(1.1 if on else 1.0)
        assert cpu == pytest.approx(s_per_step / 2)
    text = alt.summary()
    assert "3 block pairs of 4 steps (3 timed)" in text
    assert "mean %.4f, 95%% interval [%.4f, %.4f]" % (1 / 1.1, 1 / 1.1, 1 / 1.1) in text
    with pytest.raises(SystemExit):
        sample.parse_args(["--gpu-alternate", "50"])  # needs --trace-gpu
    with pytest.raises(SystemExit):
        sample.parse_args(["--trace-gpu", "--gpu-alternate", "10", "--alternate-settle", "10"])


def test_ddp_sample_parses_its_alternation_and_device_flags():
    spec = importlib.util.spec_from_file_location("ddp_torch", os.path.join(ROOT, "samples", "python", "ddp_torch.py"))
    ddp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ddp)
    a = ddp.parse_args(["--alternate", "40", "--alternate-settle", "8", "--device", "cuda", "--backend", "gloo"])
    assert (a.alternate, a.alternate_settle, a.warmup, a.device, a.backend) == (40, 8, 20, "cuda", "gloo")
    for bad in (["--alternate", "5"],  # settle 5 of 5
                ["--alternate", "10", "--no-trace"], ["--device", "cpu", "--backend", "nccl"], ["--warmup", "-1"]):
        with pytest.raises(SystemExit):
            ddp.parse_args(bad)
    # its alternation switches a flag, not the GPU capture: blocks of 2 steps after 1 warm-up
    # step, on, off | off, on; steps 1..8 end blocks 0..2
    state = []
    alt = ddp.alternation.Alternation(2, 0, 1, lambda: state.append("on"), lambda: state.append("off"),
                                      "alternate", "recorded", "not recorded")
    for step in range(1, 9):
        alt.at_step(step)
    assert state == ["off", "on"] and [b[0] for b in alt.blocks] == [True, False, False]
    assert alt.summary().startswith("alternate: 1 block pair: too few")
