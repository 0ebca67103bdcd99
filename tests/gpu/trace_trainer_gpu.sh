#!/usr/bin/env bash
# tests/gpu/trace_trainer_gpu.sh: GPU activity on a real trainer run (run by tests/run_gpu.sh; needs a GPU, a CUDA build with
# CUPTI, and python3). The small preset on GPU 0 (target and drafter co-located), traced with
# GPU activity, once with --postprocess sync and once async. Checks: CUPTI dropped nothing;
# kernels, copies and syncs are recorded; each stage that launches GPU work (forward, loss,
# backward, optimizer; postprocess and d2h/h2d copies) has projected GPU time > 0; most kernels
# know their launching thread and stage; GPU idle time attributed to the host (host wait)
# shrinks from sync to async. Prints "SKIP: ..." and exits 0 without a GPU.
set -u
BUILD=${ST_BUILD:-${1:-build}}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no GPU"; exit 0
fi
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 0; }
TMP=$(mktemp -d /tmp/stagetrace-gpu-trace.XXXXXX)
for mode in sync async; do
    "$BUILD/trainer" --device cuda --preset small --steps 60 --log-every 60 --postprocess $mode \
        --target-gpus 0, --drafter-gpus 0, --trace "$TMP/$mode.sqlite" --overwrite \
        >"$TMP/$mode.log" 2>&1 || { echo "trainer ($mode) failed:"; tail -20 "$TMP/$mode.log"; exit 1; }
    grep -q "no GPU activity" "$TMP/$mode.log" && { cat "$TMP/$mode.log"; exit 1; }
    "$BUILD/analyze" gpu --format json --top 0 "$TMP/$mode.sqlite" >"$TMP/$mode.json" \
        || { echo "analyze gpu ($mode) failed"; exit 1; }
    "$BUILD/analyze" gpu "$TMP/$mode.sqlite" | head -40
done
python3 - "$TMP" <<'PY'
import json, sqlite3, sys
tmp = sys.argv[1]
fail = []
host = {}
for mode in ("sync", "async"):
    db = sqlite3.connect(f"{tmp}/{mode}.sqlite")
    dropped = dict(db.execute("select key, value from meta")).get("gpu_dropped_records")
    if dropped != "0": fail.append(f"{mode}: gpu_dropped_records = {dropped}")
    d = json.load(open(f"{tmp}/{mode}.json"))
    proj = {}
    for row in d["stages"]:
        proj[row["stage"]] = proj.get(row["stage"], 0) + row["gpu_ms"]
    need = ["forward", "loss", "backward", "optimizer"] + (["postprocess"] if mode == "sync" else [])
    for s in need:
        if proj.get(s, 0) <= 0: fail.append(f"{mode}: stage {s} has no projected GPU time ({proj})")
    known = sum(r["records"] for r in d["stages"] if r["stage"] != "(none)" and r["thread"] != "(unknown)")
    total = sum(r["records"] for r in d["stages"])
    if total == 0 or known < 0.9 * total: fail.append(f"{mode}: only {known} of {total} records have a stage")
    if not d["kernels"]: fail.append(f"{mode}: no kernels")
    if not any(c["direction"] == "DtoH" for c in d["copies"]): fail.append(f"{mode}: no DtoH copies")
    host[mode] = sum(r["host_wait_ms"] for r in d["devices"])
    print(f"{mode}: projected GPU ms per stage {proj}; host wait {host[mode]:.3f} ms; devices {d['devices']}")
if not host["async"] < host["sync"]:
    fail.append(f"host wait did not shrink with async: sync {host['sync']:.3f} ms, async {host['async']:.3f} ms")
for f in fail: print("FAILED: " + f)
print("[  PASSED  ] gpu trace checks" if not fail else "gpu trace checks FAILED")
sys.exit(1 if fail else 0)
PY
rc=$?
[ $rc -eq 0 ] && rm -rf "$TMP"
exit $rc
