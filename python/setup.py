"""`pip install ./python` (from the repository's root): the extension is built
by the repository's Makefile (`make python`, the one recipe for it: the same
flags, libstagetrace.a and CUPTI half as `make`), in a build directory of its
own under setuptools' build_temp, and copied into the wheel. The version is
libstagetrace's, ST_VERSION_STRING in tracer/include/stagetrace.h.

Needs make, a C compiler and the SQLite headers (libsqlite3-dev). CUDA_HOME
picks the CUDA toolkit (NVTX headers, CUPTI) as for `make`;
STAGETRACE_CUPTI=0 leaves GPU activity out (the Makefile's NO_CUDA=1).
"""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HEADER = os.path.join(ROOT, "tracer", "include", "stagetrace.h")
if not os.path.isfile(os.path.join(ROOT, "Makefile")) or not os.path.isfile(HEADER):
    raise SystemExit("stagetrace: build from the repository (pip install ./python): "
                     "the Makefile and the library's sources are expected in %s" % ROOT)


def library_version():
    with open(HEADER) as f:
        m = re.search(r'^#define ST_VERSION_STRING "([^"]+)"', f.read(), re.M)
    if not m:
        raise SystemExit("stagetrace: no ST_VERSION_STRING in %s" % HEADER)
    return m.group(1)


class MakeBuildExt(build_ext):
    """Runs `make python` and takes its _stagetrace.abi3.so."""

    def build_extension(self, ext):
        build = os.path.abspath(os.path.join(self.build_temp, "make"))
        cmd = ["make", "-C", ROOT, "BUILD=" + build, "PYTHON=" + sys.executable, "python"]
        if os.environ.get("STAGETRACE_CUPTI", "1") == "0":
            cmd.append("NO_CUDA=1")
        subprocess.check_call(cmd)
        built = os.path.join(build, "python", "stagetrace", "_stagetrace.abi3.so")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


setup(
    version=library_version(),
    # The sources are named for the record; MakeBuildExt compiles nothing itself.
    ext_modules=[Extension("stagetrace._stagetrace", py_limited_api=True,
                           sources=["stagetrace/_stagetrace.c", "stagetrace/_reader.c"],
                           depends=["stagetrace/_stagetrace.h"])],
    cmdclass={"build_ext": MakeBuildExt},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
