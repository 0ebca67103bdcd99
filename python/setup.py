"""Builds the stagetrace extension with libstagetrace's sources compiled in
(tracer/ beside this directory), on the stable ABI: `pip install ./python`
from the repository's root. Needs the SQLite headers (libsqlite3-dev).

NVTX ranges are compiled in when the NVTX headers are found (CUDA_HOME, or
/usr/local/cuda); GPU activity (st_gpu_start, CUPTI) when CUPTI's header and
library are found there too (CUPTI is then loaded at run time, when a trace
asks for GPU activity), or STAGETRACE_CUPTI=0 turns it off.
"""
import glob
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TRACER = os.path.join(ROOT, "tracer")
if not os.path.isfile(os.path.join(TRACER, "include", "stagetrace.h")):
    raise SystemExit("stagetrace: build from the repository (pip install ./python): "
                     "the library's sources are expected in %s" % TRACER)

sources = [os.path.relpath(p, HERE) for p in sorted(glob.glob(os.path.join(TRACER, "*.c")))
           if os.path.basename(p) != "gpu_cupti.c"]
sources.insert(0, "stagetrace/_stagetrace.c")
define_macros = [("_GNU_SOURCE", None), ("Py_LIMITED_API", "0x03090000")]
include_dirs = [os.path.join(TRACER, "include"), TRACER]
extra_compile_args = ["-std=c11", "-fvisibility=hidden", "-pthread", "-Wno-unused-parameter",
                      "-Wno-cast-function-type"]
extra_link_args = ["-pthread"]
libraries = ["sqlite3", "m", "dl"]
library_dirs = []

cuda = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
if os.path.isfile(os.path.join(cuda, "include", "nvtx3", "nvToolsExt.h")):
    define_macros.append(("ST_HAVE_NVTX", None))
    extra_compile_args += ["-isystem", os.path.join(cuda, "include")]
cupti_inc = [d for d in (os.path.join(cuda, "include"), os.path.join(cuda, "extras", "CUPTI", "include"))
             if os.path.isfile(os.path.join(d, "cupti.h"))]
cupti_lib = [d for d in (os.path.join(cuda, "lib64"), os.path.join(cuda, "targets", "x86_64-linux", "lib"),
                         os.path.join(cuda, "extras", "CUPTI", "lib64"))
             if os.path.isfile(os.path.join(d, "libcupti.so"))]
if cupti_inc and cupti_lib and os.environ.get("STAGETRACE_CUPTI", "1") != "0":
    sources.append(os.path.relpath(os.path.join(TRACER, "gpu_cupti.c"), HERE))
    # CUPTI is loaded lazily (dlopen in st_gpu_start), never linked: the
    # package imports where CUPTI is absent, and open(gpu=True) says so.
    define_macros += [("ST_WITH_CUPTI", None), ("STP_HAVE_CUPTI", None), ("ST_CUPTI_DLOPEN", None),
                      ("ST_CUPTI_LIBDIR", '"%s"' % cupti_lib[0])]
    include_dirs.append(cupti_inc[0])

setup(
    ext_modules=[Extension(
        "stagetrace._stagetrace", sources=sources, include_dirs=include_dirs,
        define_macros=define_macros, extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args, libraries=libraries, library_dirs=library_dirs,
        py_limited_api=True)],
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
