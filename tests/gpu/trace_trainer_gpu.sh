#!/usr/bin/env bash
# tests/gpu/trace_trainer_gpu.sh: GPU activity on a real trainer run (run by tests/run_gpu.sh; needs a GPU, a CUDA build with
# CUPTI, and python3). The small preset on GPU 0 (target and drafter co-located), traced with
# GPU activity, once with --postprocess sync and once async. Checks: CUPTI dropped nothing;
# kernels, copies and syncs are recorded; each stage that launches GPU work (forward, loss,
# backward, optimizer; postprocess and d2h/h2d copies) has projected GPU time > 0; most kernels
# know their launching thread and stage. Then, with 2 GPUs, the h200 preset split (target on
# GPU 0, drafter on GPU 1), sync and async: with sync postprocess the target GPU's idle time is
# attributed to the host while the target thread is in its postprocess path, and with async
# that host wait shrinks. (Co-located small runs are launch-bound, so their host wait says
# little about postprocess.) Prints "SKIP: ..." and exits 0 without a GPU.
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
NGPU=$(nvidia-smi -L | grep -c '^GPU ')
if [ "$NGPU" -ge 2 ]; then
    for mode in sync async; do
        "$BUILD/trainer" --device cuda --preset h200 --steps 16 --log-every 16 --postprocess $mode \
            --target-gpus 0, --drafter-gpus 1, --queue-depth 4 --trace "$TMP/split-$mode.sqlite" \
            --overwrite >"$TMP/split-$mode.log" 2>&1 ||
            { echo "trainer (split, $mode) failed:"; tail -20 "$TMP/split-$mode.log"; exit 1; }
        "$BUILD/analyze" gpu --format json --top 0 "$TMP/split-$mode.sqlite" >"$TMP/split-$mode.json" \
            || { echo "analyze gpu (split, $mode) failed"; exit 1; }
    done
fi
python3 - "$TMP" "$NGPU" <<'PY'
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
    # CUDA API calls: named functions, launches from the target's forward, the host's polling syncs
    api = d["api"]
    unnamed = [r for r in api if r["function"].startswith("cbid ")]
    if unnamed: fail.append(f"{mode}: API calls without a function name: {unnamed[:3]}")
    launches = sum(r["count"] for r in api if r["thread"] == "target0" and r["stage"] == "forward"
                   and r["function"] in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx"))
    if launches <= 0: fail.append(f"{mode}: no kernel launches by target0 in forward: {api[:5]}")
    polls = sum(r["count"] for r in api if r["function"] in ("cudaStreamQuery", "cudaEventQuery"))
    if polls <= 0: fail.append(f"{mode}: no polling syncs (cudaStreamQuery / cudaEventQuery) in the api table")
    if any(r["share_pct"] > 100 for r in api): fail.append(f"{mode}: an API share over 100%")
    print(f"{mode}: api: {len(api)} rows, target0 forward launches {launches}, polls {polls}; "
          f"top {[(r['thread'], r['stage'], r['function'], r['count'], r['total_ms']) for r in api[:4]]}")
    host[mode] = sum(r["host_wait_ms"] for r in d["devices"])
    print(f"{mode}: projected GPU ms per stage {proj}; host wait {host[mode]:.3f} ms; devices {d['devices']}")
if int(sys.argv[2]) >= 2:
    split = {}
    for mode in ("sync", "async"):
        d = json.load(open(f"{tmp}/split-{mode}.json"))
        dev0 = [r for r in d["devices"] if r["device"] == 0]
        if not dev0:
            fail.append(f"split {mode}: no activity on device 0"); continue
        split[mode] = dev0[0]
        print(f"split {mode}: device 0 {dev0[0]}")
    if len(split) == 2:
        s, a = split["sync"], split["async"]
        post_path = ("postprocess", "d2h", "stream_sync", "event_sync", "queue_put")
        d = json.load(open(f"{tmp}/split-sync.json"))
        waits = [r for r in d.get("host_wait", []) if r["device"] == 0]
        post_share = sum(r["share_pct"] for r in waits
                         if r["thread"] == "target0" and r["stage"] in post_path)
        print(f"split sync: device 0 host wait by stage {waits}")
        if post_share < 25:
            fail.append(f"split sync: only {post_share:.1f}% of the target GPU's host wait is in the "
                        f"target's postprocess path")
        if not a["host_wait_ms"] < s["host_wait_ms"]:
            fail.append(f"split: host wait on the target GPU did not shrink with async: "
                        f"sync {s['host_wait_ms']:.3f} ms, async {a['host_wait_ms']:.3f} ms")
else:
    print("(1 GPU: the split sync/async check needs 2 GPUs and was not run)")
for f in fail: print("FAILED: " + f)
print("[  PASSED  ] gpu trace checks" if not fail else "gpu trace checks FAILED")
sys.exit(1 if fail else 0)
PY
rc=$?
[ $rc -eq 0 ] && rm -rf "$TMP"
exit $rc
