"""pytest fixtures for the stagetrace package: where the build is (ST_BUILD,
default build/), the analyze program, and a trace path per test."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("ST_BUILD", "build"))
if os.path.isdir(os.path.join(BUILD, "python")) and os.path.join(BUILD, "python") not in sys.path:
    sys.path.insert(0, os.path.join(BUILD, "python"))


@pytest.fixture
def analyze():
    exe = os.path.join(BUILD, "analyze")
    if not os.access(exe, os.X_OK):
        pytest.skip("%s is not built" % exe)

    def run(*args):
        out = subprocess.run([exe, *args], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout
    return run


@pytest.fixture
def tracegen():
    exe = os.path.join(BUILD, "tests", "tracegen")
    if not os.access(exe, os.X_OK):
        pytest.skip("%s is not built" % exe)
    return exe


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "run.sqlite")


@pytest.fixture(autouse=True)
def no_trace_left_open():
    import stagetrace
    yield
    t = stagetrace.current()
    if t is not None:
        t.close()
        pytest.fail("the test left a trace open")
