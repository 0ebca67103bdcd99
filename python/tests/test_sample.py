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
