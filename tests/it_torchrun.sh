#!/usr/bin/env bash
# it_torchrun.sh: ranks started by torchrun, without MPI, on one clock, and their collectives
# in the rank analysis. samples/python/ddp_torch.py runs as 2 processes under torchrun
# (--standalone, gloo on CPU, 30 steps, rank 1's forward 30 ms slower each step); rank 1's
# command runs under `unshare --time --monotonic=3 --fork` when that works (root), so that its
# CLOCK_MONOTONIC is 3 s ahead. Checks: both rank files; meta python_clock_sync `torch.distributed
# (gloo)` on both; rank 0 offset 0 +- 0; rank 1's stored offset, at open and at close, within
# its stated uncertainty of the true one (-3 s shifted, 0 else), the uncertainty under 10 ms;
# the set without its clock keys fitted from its all-reduces (--align collectives) within the
# fit's stated uncertainty of the true offset too;
# `analyze stragglers`: rank 1 last at the all_reduce in at least 90 % of the instances, and
# the slowest in forward; `analyze bottleneck` on the set names rank 1 in its Stragglers line.
# Skipped with the reason when
# $PY (default python3) has no torch.
#
#   PY=/opt/torch/.venv/bin/python bash tests/it_torchrun.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
PY=${PY:-python3}
A="$BUILD/analyze"
"$PY" -c "import torch, torch.distributed" 2>/dev/null ||
    { echo "SKIP: $PY has no torch (pip install torch; on the GPU machine PY=/opt/torch/.venv/bin/python)"; exit 0; }
[ -d "$BUILD/python/stagetrace" ] || { echo "SKIP: $BUILD/python is not built (make python)"; exit 0; }
it_enter_tmp
export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
meta() { "$PY" -c 'import sqlite3, sys
r = sqlite3.connect(sys.argv[1]).execute("select value from meta where key = ?", (sys.argv[2],)).fetchone()
print("" if r is None else r[0])' "$1" "$2"; }

shift_s=0
if [ "$(id -u)" -eq 0 ] && unshare --time --monotonic=3 --fork true 2>/dev/null; then shift_s=3; fi
echo "rank 1's CLOCK_MONOTONIC shifted by ${shift_s} s"
wrap='if [ "$LOCAL_RANK" = 1 ] && [ "$SHIFT" != 0 ]; then exec unshare --time --monotonic="$SHIFT" --fork "$@"; else exec "$@"; fi'
SHIFT=$shift_s run ddp env SHIFT=$shift_s "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 --no-python \
    bash -c "$wrap" _ "$PY" "$ROOT/samples/python/ddp_torch.py" --steps 30 --slow-rank 1 --slow-ms 30 \
    --backend gloo --dim 128 --trace ddp/
[ $rc -eq 0 ] || fail "torchrun: exit $rc: $(tail -5 ddp.err)"
[ -f ddp/rank0.sqlite ] && [ -f ddp/rank1.sqlite ] || fail "no rank files: $(ls ddp)"
ok
for r in 0 1; do
    [ "$(meta ddp/rank$r.sqlite python_clock_sync)" = "torch.distributed (gloo)" ] || fail "rank $r: python_clock_sync"
done
[ "$(meta ddp/rank0.sqlite clock_offset_ns)" = 0 ] && [ "$(meta ddp/rank0.sqlite clock_uncertainty_ns)" = 0 ] ||
    fail "rank 0 does not store offset 0 +- 0"
ok
want=$((-shift_s * 1000000000))
for at in "" _close; do
    off=$(meta ddp/rank1.sqlite "clock_offset${at}_ns")
    unc=$(meta ddp/rank1.sqlite "clock_uncertainty${at}_ns")
    [ -n "$off" ] && [ -n "$unc" ] || fail "rank 1: no clock_offset${at}_ns"
    err=$((off - want))
    echo "rank 1${at:-_open}: offset $off ns +- $unc, error ${err} ns"
    [ ${err#-} -le "$unc" ] || fail "rank 1${at}: offset $off is $err ns from $want, outside +- $unc"
    [ "$unc" -lt 10000000 ] || fail "rank 1${at}: uncertainty $unc ns"
done
ok
# the same set without its clock keys, aligned from its all-reduces (analyze --align collectives):
# rank 1's fitted offset to rank 0 within its stated uncertainty of the true one
mkdir fit
for r in 0 1; do
    "$PY" -c 'import sqlite3, sys
src = sqlite3.connect(sys.argv[1]); dst = sqlite3.connect(sys.argv[2]); src.backup(dst)
dst.execute("DELETE FROM meta WHERE substr(key, 1, 6) = ?", ("clock_",)); dst.commit()' ddp/rank$r.sqlite fit/rank$r.sqlite
done
expect_ok fitinfo "$A" info --align collectives --format json --table rank_clocks fit
WANT=$want "$PY" - <<'EOF' || fail "the fit from collectives: $(cat fitinfo.out)"
import json, os
rows = {r["rank"]: r for r in json.load(open("fitinfo.out"))["rank_clocks"]}
r1, want = rows[1], int(os.environ["WANT"])
assert rows[0]["method"] == "reference" and r1["method"] == "collectives", rows
for at in ("offset_ns", "offset_close_ns"):
    print("fit: rank 1 %s %d, error %d ns, uncertainty %d ns" % (at, r1[at], r1[at] - want, r1["uncertainty_ns"]))
    assert abs(r1[at] - want) <= r1["uncertainty_ns"], (at, r1, want)
EOF
ok
expect_ok str "$A" stragglers --format csv --table collectives ddp/
"$PY" - <<'EOF' || fail "stragglers: rank 1 is not the straggler: $(cat str.out)"
import csv
rows = [r for r in csv.DictReader(open("str.out")) if r["stage"] == "all_reduce"]
assert len(rows) == 1 and rows[0]["last_rank"] == "1" and float(rows[0]["last_pct"]) >= 90, rows
assert int(rows[0]["instances"]) == 30, rows
print("all_reduce: rank 1 last in %s %% of %s instances, the others wait %s ms on average"
      % (rows[0]["last_pct"], rows[0]["instances"], rows[0]["mean_wait_ms"]))
EOF
ok
expect_ok stg "$A" stragglers --format csv --table stages ddp/
"$PY" - <<'EOF' || fail "stragglers: forward's slowest rank is not 1: $(cat stg.out)"
import csv
rows = [r for r in csv.DictReader(open("stg.out")) if r["stage"] == "forward"]
assert rows and rows[0]["slowest_rank"] == "1", rows
EOF
ok
expect_ok bn "$A" bottleneck ddp/
cat bn.out
grep -q "^Stragglers: rank 1 is late most often at all_reduce" bn.out || fail "bottleneck does not name rank 1 as the straggler"
ok
echo "it_torchrun: $n_checks checks passed"
