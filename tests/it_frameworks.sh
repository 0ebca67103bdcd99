#!/usr/bin/env bash
# it_frameworks.sh: stagetrace.lightning.Profiler under a real Lightning Trainer (40 steps of a
# small module; SimpleProfiler on the same run through `also=`: the stage totals of training_step,
# backward, optimizer_step, data_fetch and training_batch within 5 % + 1 ms of its durations of
# the same actions, 41 step marks) and stagetrace.transformers.Callback under a real
# transformers.Trainer (30 steps of a 2-layer GPT-2 built from GPT2Config: 31 step marks, 30 x 8 x
# 128 tokens, all four stages recorded); `analyze bottleneck` reads both traces
# (tests/frameworks_check.py). Each part is skipped, with the reason, when $PY (default python3)
# lacks torch, Lightning or transformers.
#
#   PY=/opt/torch/.venv/bin/python bash tests/it_frameworks.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
PY=${PY:-python3}
"$PY" -c "import torch" 2>/dev/null || { echo "SKIP: $PY has no torch (on the GPU machine PY=/opt/torch/.venv/bin/python)"; exit 0; }
[ -d "$BUILD/python/stagetrace" ] || { echo "SKIP: $BUILD/python is not built (make python)"; exit 0; }
it_enter_tmp
export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
ran=0
if "$PY" -c "import lightning.pytorch" 2>/dev/null || "$PY" -c "import pytorch_lightning" 2>/dev/null; then
    run lt "$PY" "$ROOT/tests/frameworks_check.py" lightning "$T"
    cat lt.out
    [ $rc -eq 0 ] || fail "lightning: exit $rc: $(tail -15 lt.err)"
    expect_ok lt_bn "$BUILD/analyze" bottleneck "$T/lightning/fit/rank0.sqlite"
    head -2 lt_bn.out
    ran=$((ran + 1))
else
    echo "it_frameworks: no Lightning for $PY: its part skipped"
fi
if "$PY" -c "import transformers" 2>/dev/null; then
    run hf "$PY" "$ROOT/tests/frameworks_check.py" transformers "$T"
    cat hf.out
    [ $rc -eq 0 ] || fail "transformers: exit $rc: $(tail -15 hf.err)"
    expect_ok hf_bn "$BUILD/analyze" bottleneck "$T/hf/stagetrace/rank0.sqlite"
    head -2 hf_bn.out
    ran=$((ran + 1))
else
    echo "it_frameworks: no transformers for $PY: its part skipped"
fi
[ $ran -gt 0 ] || { echo "SKIP: $PY has neither Lightning nor transformers"; exit 0; }
echo "it_frameworks: $n_checks checks passed"
