#!/usr/bin/env bash
# it_python: the Python package's pytest suite (python/tests) against the
# extension that `make python` built into $BUILD/python. Skips, with the
# reason, when python3, its headers (so no extension), numpy or pytest are
# missing: .ci/run installs them.
set -u
BUILD=${1:-build}
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "SKIP: skipped: no $PY"; exit 0; }
[ -e "$BUILD/python/stagetrace/_stagetrace.abi3.so" ] ||
    { echo "SKIP: skipped: $BUILD/python has no extension (python3 headers missing? apt-get install python3-dev; then make python)"; exit 0; }
"$PY" -c "import numpy" 2>/dev/null || { echo "SKIP: skipped: numpy is not installed for $PY (pip install numpy)"; exit 0; }
"$PY" -c "import pytest" 2>/dev/null || { echo "SKIP: skipped: pytest is not installed for $PY (pip install pytest)"; exit 0; }
cd "$(dirname "$0")/../python/tests" || exit 1
ST_BUILD=$BUILD exec "$PY" -m pytest -q -p no:cacheprovider . 2>&1
