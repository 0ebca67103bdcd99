#!/usr/bin/env bash
# it_analyze2.sh: integration test of `analyze bottleneck` and `analyze diff`.
# First on traces with exactly known answers, written by `tracegen DIR`
# (the numbers are worked out in tests/traces.c, the model set): exact
# values, golden files for text, CSV and JSON (tests/golden/analyze2/), one
# line and exit 2 for every bad flag or input. Then on real trainer runs (CPU
# backend, a tiny model, well under a second each): a run made drafter-bound
# (--drafter-delay-us) is named drafter-bound, a target-bound one
# (--target-delay-us) target-bound, and diff of --queue-depth 1 against 60
# shows the target blocked in queue_put with depth 1.
#
#   bash tests/it_analyze2.sh BUILD_DIR
#   ST_UPDATE_GOLDEN=1 bash tests/it_analyze2.sh build   # rewrite the golden files
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
TRAINER="$BUILD/trainer"
GOLDEN="$ROOT/tests/golden/analyze2"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$GEN" ] || { echo "SKIP: $GEN is not built (make tests)"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check JSON and CSV"; exit 0; }

it_enter_tmp
"$GEN" "$T" >/dev/null

# ---- help and bad flags -----------------------------------------------------------------
expect_ok help "$A" --help
for c in bottleneck diff report; do
    grep -q "^  $c " help.out || fail "analyze --help does not list $c"
    expect_ok "help_$c" "$A" "$c" --help
    grep -q "^usage: analyze $c" "help_$c.out" || fail "$c --help: no usage line"
done
grep -q 'What-if' help_bottleneck.out || fail "bottleneck --help explains the what-if model"
grep -q 'Mann-Whitney' help_diff.out || fail "diff --help states the test"
printf 'not a trace\n' >bad.sqlite
: >zero.sqlite
expect_usage b_nofile "$A" bottleneck
expect_usage b_twofiles "$A" bottleneck target.sqlite target.sqlite
expect_usage b_speedup "$A" bottleneck --speedup 0.5 target.sqlite
expect_usage b_speedup2 "$A" bottleneck --speedup x target.sqlite
expect_usage b_every "$A" bottleneck --every 0 target.sqlite
expect_usage b_format "$A" bottleneck --format xml target.sqlite
expect_usage b_skip "$A" bottleneck --skip-steps 20 target.sqlite
expect_usage b_bad "$A" bottleneck bad.sqlite
expect_usage b_zero "$A" bottleneck zero.sqlite
expect_usage b_missing "$A" bottleneck nonexistent.sqlite
expect_usage d_onefile "$A" diff diff_a.sqlite
expect_usage d_alpha "$A" diff --alpha 2 diff_a.sqlite diff_b.sqlite
expect_usage d_top "$A" diff --top x diff_a.sqlite diff_b.sqlite
expect_usage d_nosteps "$A" diff diff_a.sqlite nosteps.sqlite
grep -q 'fewer than two step marks' d_nosteps.err || fail "diff without steps: $(cat d_nosteps.err)"
expect_usage d_bad "$A" diff diff_a.sqlite bad.sqlite

# ---- bottleneck on the target-bound pipeline ------------------------------------------------
expect_ok b_text "$A" bottleneck target.sqlite
golden bottleneck.txt b_text.out
expect_ok b_csv "$A" bottleneck --format csv target.sqlite
golden bottleneck.csv b_csv.out
expect_ok b_json "$A" bottleneck --format json target.sqlite
golden bottleneck.json b_json.out
grep -q '^Bottleneck: target (1 thread), busy 90.0% of its time' b_text.out || fail "verdict line"
grep -q '^GPU idle: no GPU activity in this trace.$' b_text.out || fail "GPU line"
expect_ok b_json4 "$A" bottleneck --format json --speedup 4 target.sqlite
py "bottleneck values" <<'EOF'
import json
d = json.load(open("b_json.out"))
v = d["verdict"][0]
want = dict(bottleneck="target", stage="forward", threads=1, busy_pct=90, work_pct=90, saturated=1,
            downstream="drafter", downstream_wait_input_pct=60, upstream="loader", upstream_wait_output_pct=90,
            steps=20, step_first=1, step_last=20, tokens_per_s=100000, speedup=2, need_ms_per_step=9,
            need_ms_per_step_after=5, whatif_limit="target", whatif_step_ms=5, whatif_factor=2,
            whatif_tokens_per_s=200000, moved=0, role_order="trainer", gpu="no GPU activity in this trace",
            stage_pct=80, stage_ms_per_step=8, bottleneck_device=None, device_busy_pct=None)
for k, x in want.items():
    assert v[k] == x, (k, v[k], x)
roles = {r["role"]: r for r in d["roles"]}
assert [r["role"] for r in d["roles"]] == ["loader", "target", "drafter", "main"]
assert roles["drafter"]["threads"] == 2 and roles["drafter"]["wait_input_pct"] == 60 and roles["drafter"]["busy_pct"] == 35
assert roles["drafter"]["idle_pct"] == 5 and roles["loader"]["wait_output_pct"] == 90
assert roles["target"]["bottleneck"] == "yes" and roles["drafter"]["bottleneck"] is None
assert abs(roles["target"]["capacity_tokens_per_s"] - 111111.1) < 0.1
q = {(r["queue"], r["side"], r["stage"]): r for r in d["queues"]}
assert q[("target -> drafter", "put", "queue_put")]["pct"] == 5
assert q[("target -> drafter", "get", "queue_wait")]["pct"] == 60
assert q[("target -> drafter", "get", "queue_wait")]["ms_per_step"] == 6
assert q[("loader -> target", "put", "queue_put")]["pct"] == 90
qd = d["queue_depth"][0]
assert (qd["counter"], qd["samples"], qd["mean"], qd["max"], qd["at_max_pct"], qd["at_zero_pct"]) == ("queue_depth", 40, 1.5, 3, 50, 50), qd
assert len(d["windows"]) == 2 and all(w["bottleneck"] == "target" for w in d["windows"])
v4 = json.load(open("b_json4.out"))["verdict"][0]
# forward 4x faster: target needs 3 ms, the drafters 3.5 ms: 10 / 3.5 = 2.857x
assert v4["whatif_limit"] == "drafter" and v4["need_ms_per_step_after"] == 3 and v4["whatif_step_ms"] == 3.5, v4
assert abs(v4["whatif_factor"] - 10 / 3.5) < 1e-6 and abs(v4["whatif_tokens_per_s"] - 1e6 / 3.5) < 1e-3, v4
EOF

# ---- the bottleneck moves half way ----------------------------------------------------------
expect_ok b_moves "$A" bottleneck --every 5 --format csv moves.sqlite
golden bottleneck_moves.csv b_moves.out
expect_ok b_moves_text "$A" bottleneck moves.sqlite
grep -q 'Per window of 5 steps: the bottleneck moved: target in steps 1-10, drafter in steps 11-20.' b_moves_text.out \
    || fail "moved line: $(cat b_moves_text.out)"
ok
py "windows" <<'EOF'
import csv
text = open("b_moves.out").read().split("\n\n")
windows = [t for t in text if t.startswith("window,")][0]
rows = list(csv.DictReader(windows.splitlines()))
assert [r["bottleneck"] for r in rows] == ["target", "target", "drafter", "drafter"], rows
assert [r["moved"] for r in rows] == ["", "", "*", ""]
assert [float(r["busy_pct"]) for r in rows] == [90, 90, 95, 95]
assert [float(r["drafter_wait_pct"]) for r in rows] == [60, 60, 5, 5]
assert [float(r["target_wait_pct"]) for r in rows] == [10, 10, 65, 65]
v = list(csv.DictReader(text[0].splitlines()))[0]
assert v["moved"] == "1" and v["bottleneck"] == "drafter", v
EOF

# ---- inferred role order ---------------------------------------------------------------------
expect_ok b_inferred "$A" bottleneck --format json inferred.sqlite
py "inferred order" <<'EOF'
import json
d = json.load(open("b_inferred.out"))
assert [r["role"] for r in d["roles"]] == ["producer", "zeta", "consumer", "main"]
v = d["verdict"][0]
assert v["role_order"] == "inferred" and v["bottleneck"] == "consumer" and v["upstream"] == "zeta", v
EOF
expect_ok b_nosteps "$A" bottleneck nosteps.sqlite
grep -q 'whole trace' b_nosteps.out || fail "no steps: $(head -3 b_nosteps.out)"

# ---- diff -----------------------------------------------------------------------------------------
expect_ok d_text "$A" diff diff_a.sqlite diff_b.sqlite
golden diff.txt d_text.out
expect_ok d_csv "$A" diff --format csv diff_a.sqlite diff_b.sqlite
golden diff.csv d_csv.out
expect_ok d_json "$A" diff --format json diff_a.sqlite diff_b.sqlite
golden diff.json d_json.out
grep -q 'Count per step changed: worker/check 1.00 -> 2.00 ranges per step per thread (x2.00: work done twice?)' d_text.out \
    || fail "count line"
ok
py "diff values" <<'EOF'
import json
d = json.load(open("d_json.out"))
st = {(r["role"], r["stage"]): r for r in d["stages"]}
c = st[("worker", "compute")]
# 4 ms -> 8 ms (+-0.2 ms of noise): +100% within a few percent, far beyond noise
assert abs(c["change_pct"] - 100) < 5 and c["significant"] == "yes" and c["p_value"] < 1e-6, c
assert (c["threads_a"], c["threads_b"]) == (1, 2)
l = st[("worker", "log")]
assert l["significant"] == "no" and l["p_value"] > 0.05 and abs(l["change_pct"]) < 5, l
k = st[("worker", "check")]
assert (k["count_a"], k["count_b"], k["count_ratio"]) == (1, 2, 2) and k["significant"] == "no", k
assert k["median_a_ms"] == k["median_b_ms"] == 0.5
t = d["throughput"][0]
pa, pb = (int(open(f"diff_{x}.period_ns").read()) for x in "ab")
assert abs(t["tokens_per_s_a"] - 40000 / (pa / 1e9)) < 0.1 and abs(t["tokens_per_s_b"] - 40000 / (pb / 1e9)) < 0.1, t
assert abs(t["ratio"] - pa / pb) < 1e-4 and t["significant"] == "yes", t
top = d["top_changes"]
assert [ (x["role"], x["stage"]) for x in top[:2] ] == [("main", "step_wait"), ("worker", "compute")], top
assert abs(top[1]["mean_change_ms"] - (c["mean_b_ms"] - c["mean_a_ms"])) < 1e-3
runs = d["runs"]
assert runs[0]["threads"] == "worker 1, main 1" and runs[1]["threads"] == "worker 2, main 1"
EOF
# Same trace twice: nothing significant.
expect_ok d_same "$A" diff --format json diff_a.sqlite diff_a.sqlite
python3 -c 'import json; d=json.load(open("d_same.out")); assert all(r["significant"] == "no" and r["p_value"] == 1 for r in d["stages"])' \
    || fail "a trace against itself"
ok

# ---- gpu: the steady-state window and the host_wait table (gpu_steps.sqlite, tests/traces.c) ----
expect_ok g_default "$A" gpu gpu_steps.sqlite
grep -q '^devices and host_wait over steps 2-20 (0.010-0.200 s, the first step left out as start-up), 190.000 ms$' g_default.out \
    || fail "gpu default window: $(head -3 g_default.out)"
grep -Eq '^ +0 +57 +136\.800 +72\.0% +53\.200 +43\.600 +0\.000 +9\.600 +target0 +postprocess +19\.000 +0\.000$' g_default.out \
    || fail "gpu default devices row"
grep -Eq '^ +0 +target0 +postprocess +19\.000 +43\.6%$' g_default.out || fail "gpu host_wait postprocess"
grep -q '(no stage)' g_default.out && fail "gpu default window counts the start-up"
ok
expect_ok g_steps "$A" gpu --steps 0:20 gpu_steps.sqlite
grep -Eq '^ +0 +59 +140\.000 +70\.0% +60\.000 +48\.300 +0\.000 +11\.700 +target0 +postprocess +20\.000 +0\.000$' g_steps.out \
    || fail "gpu --steps 0:20 devices row: $(cat g_steps.out)"
grep -Eq '^ +0 +target0 +\(no stage\) +3\.000 +6\.2%$' g_steps.out || fail "gpu --steps 0:20 no-stage host wait"
ok
expect_usage g_both "$A" gpu --steps 0:20 --time 0:1 gpu_steps.sqlite
expect_usage g_badstep "$A" gpu --steps 0:99 gpu_steps.sqlite
expect_ok g_bneck "$A" bottleneck gpu_steps.sqlite
grep -q '^GPU idle: over steps 2-20 (0.010-0.200 s, start-up left out): GPU 0 busy 72.0%, idle 53.200 ms: host wait 43.600 ms' g_bneck.out \
    || fail "bottleneck GPU idle line: $(grep 'GPU idle' g_bneck.out)"
ok

# ---- bottleneck with GPU activity: a shared GPU as the limit (gpu_shared.sqlite, tests/traces.c) ----
expect_ok g_shared "$A" bottleneck --format json gpu_shared.sqlite
py "bottleneck on a shared GPU" <<'EOF'
import json
d = json.load(open("g_shared.out"))
v = d["verdict"][0]
assert (v["bottleneck_device"], v["device_busy_pct"], v["bottleneck"], v["stage"]) == (0, 80, "target", "forward"), v
assert (v["whatif_limit"], v["whatif_factor"], v["need_ms_per_step"], v["need_ms_per_step_after"]) == ("GPU 0", 2, 8, 5), v
roles = {r["role"]: r for r in d["roles"]}
assert (roles["target"]["host_pct"], roles["target"]["gpu_pct"], roles["target"]["need_ms_per_step"]) == (10, 60, 6)
assert roles["target"]["busy_pct"] == 90 and roles["target"]["bottleneck"] == "its GPU"
assert (roles["drafter"]["gpu_pct"], roles["drafter"]["top_gpu_stage"]) == (40, "forward")
dev = {(r["device"], r["role"]): r for r in d["devices"]}
assert dev[(0, "*")]["busy_pct"] == 80 and dev[(0, "*")]["bottleneck"] == "yes"
assert dev[(0, "target")]["busy_pct"] == 60 and dev[(0, "drafter")]["busy_pct"] == 40
assert dev[(1, "*")]["busy_pct"] == 45 and dev[(1, "drafter")]["ms_per_step"] == 4
assert [w["device"] for w in d["windows"]] == [0, 0]
EOF
ok

expect_ok g_info "$A" info gpu_shared.sqlite
grep -qx '  gpu activity: 50 records on devices 0, 1 (kernels, copies, memsets, syncs), 70 API calls' g_info.out \
    || fail "info GPU line: $(grep 'gpu activity' g_info.out)"
expect_ok g_info_json "$A" info --format json gpu_shared.sqlite
py "info GPU columns" <<'EOF'
import json
r = json.load(open("g_info_json.out"))["info"][0]
assert (r["gpu_devices"], r["gpu_records"], r["gpu_api_calls"], r["gpu_dropped_records"]) == ("0, 1", 50, 70, None), r
EOF

# ---- gpu: host time in CUDA API calls (gpu_shared.sqlite: named calls; gpu_steps.sqlite: unnamed) ----
expect_ok g_api "$A" gpu --format json gpu_shared.sqlite
py "gpu api table" <<'EOF'
import json
rows = json.load(open("g_api.out"))["api"]
got = [(r["thread"], r["stage"], r["function"], r["api"], r["count"], r["total_ms"], r["max_ms"], r["share_pct"])
       for r in rows]
assert got == [
    ("target0", "stream_sync", "cudaStreamSynchronize", "runtime", 9, 72, 8, 80),
    ("target0", "forward", "cudaLaunchKernel", "runtime", 9, 0.045, 0.005, 0.05),
    ("drafter0", "forward", "cudaLaunchKernel", "runtime", 9, 0.045, 0.005, 0.05),
    ("drafter1", "forward", "cudaLaunchKernel", "runtime", 9, 0.045, 0.005, 0.05),
    ("drafter1", "forward", "cuEventRecord", "driver", 9, 0.018, 0.002, 0.02),
    ("(untraced tid 9999)", None, "cudaLaunchKernel", "runtime", 9, 0.09, 0.01, 0.1),
], got
EOF
expect_ok g_api_top "$A" gpu --format csv --top 1 --steps 2:4 gpu_shared.sqlite
py "gpu api --top 1 --steps 2:4" <<'EOF'
import csv
text = open("g_api_top.out").read()
api = text[text.index("thread,stage,function,api,"):]
rows = list(csv.DictReader(api.splitlines()))
assert [(r["thread"], r["function"], r["count"]) for r in rows] == [
    ("target0", "cudaStreamSynchronize", "2"), ("drafter0", "cudaLaunchKernel", "2"),
    ("drafter1", "cudaLaunchKernel", "2"), ("(untraced tid 9999)", "cudaLaunchKernel", "2")], rows
EOF
expect_ok g_api_old "$A" gpu --format json gpu_steps.sqlite
py "gpu api table without stored names" <<'EOF'
import json
rows = json.load(open("g_api_old.out"))["api"]
assert {r["function"] for r in rows} == {"cbid 0"} and {r["thread"] for r in rows} == {"target0"}, rows
# steps 1-19: the memcpy and kernel A launched in forward, kernel C in queue_put
assert [(r["stage"], r["count"]) for r in rows] == [("forward", 38), ("queue_put", 19)], rows
EOF

# ---- diff with GPU activity: busy per step per device and role, kernels per step (gpu_*.sqlite) ----
expect_ok d_gpu_twice "$A" diff gpu_shared.sqlite gpu_twice.sqlite
grep -qx 'Kernel launches per step changed: target_fwd 1.00 -> 2.00 (x2.00), GPU 6.000 -> 6.000 ms per step: launched twice?' \
    d_gpu_twice.out || fail "diff: the doubled launches: $(grep -i kernel d_gpu_twice.out)"
grep -qx 'GPU 0 busy per step: median 8.000 ms in A, 8.000 ms in B (0.0%, within noise, p = 1).' d_gpu_twice.out \
    || fail "diff: GPU 0 line: $(grep '^GPU' d_gpu_twice.out)"
ok
expect_ok d_gpu_split "$A" diff --format json gpu_shared.sqlite gpu_split.sqlite
py "diff gpu_busy and kernels" <<'EOF'
import json
d = json.load(open("d_gpu_split.out"))
g = {(r["device"], r["role"]): r for r in d["gpu_busy"]}
assert sorted(g) == [(0, "*"), (0, "drafter"), (0, "target"), (1, "*"), (1, "drafter")], sorted(g)
assert (g[(0, "*")]["median_a_ms"], g[(0, "*")]["median_b_ms"], g[(0, "*")]["change_pct"]) == (8, 6, -25)
assert g[(0, "*")]["significant"] == "yes" and g[(0, "target")]["significant"] == "no" and g[(0, "target")]["p_value"] == 1
assert (g[(1, "drafter")]["median_a_ms"], g[(1, "drafter")]["median_b_ms"]) == (4, 7)
k = [(r["kernel"], r["launches_per_step_a"], r["launches_per_step_b"], r["ms_per_step_a"], r["ms_per_step_b"]) for r in d["kernels"]]
assert k == [("drafter_fwd", 2, 2, 8, 8), ("target_fwd", 1, 1, 6, 6), ("untracked", 1, 1, 0.5, 0.5)], k
EOF
expect_ok d_gpu_top "$A" diff --format json --top 1 gpu_shared.sqlite gpu_twice.sqlite
py "diff kernels --top 1" <<'EOF'
import json
k = json.load(open("d_gpu_top.out"))["kernels"]
assert [(r["rank"], r["kernel"], r["launch_ratio"]) for r in k] == [(1, "drafter_fwd", 1)], k
EOF
# GPU activity in one trace only: said, and no GPU tables
expect_ok d_gpu_one "$A" diff target.sqlite gpu_shared.sqlite
grep -qx 'GPU activity is only in B: GPUs are not compared.' d_gpu_one.out || fail "diff: one-sided GPU activity"
! grep -q '^gpu_busy' d_gpu_one.out || fail "diff: gpu_busy table without GPU activity in A"
ok

# ---- GPU analyses read in time slices: one record per slice gives the same output ----
for f in gpu_shared gpu_steps gpu_twice; do
    for c in "gpu --format json" "bottleneck --format json" "report --html -"; do
        expect_ok "slice_$f" "$A" $c $f.sqlite
        mv "slice_$f.out" "slice_$f.default"
        ST_GPU_SLICE_RECORDS=1 expect_ok "slice_$f" "$A" $c $f.sqlite
        cmp -s "slice_$f.default" "slice_$f.out" || fail "$c $f: slices of one record differ: $(diff "slice_$f.default" "slice_$f.out" | head -5)"
    done
done
expect_ok slice_diff_default "$A" diff --format json gpu_shared.sqlite gpu_split.sqlite
ST_GPU_SLICE_RECORDS=1 expect_ok slice_diff "$A" diff --format json gpu_shared.sqlite gpu_split.sqlite
cmp -s slice_diff_default.out slice_diff.out || fail "diff: slices of one record differ"
ok
for bad in 0 -1 x 4294967296; do
    ST_GPU_SLICE_RECORDS=$bad expect_usage "slice_bad" "$A" gpu gpu_shared.sqlite
done

# ---- real trainer runs (CPU backend) -------------------------------------------------------------
if [ ! -x "$TRAINER" ]; then
    echo "trainer not built: trainer checks skipped"
    echo "it_analyze2: $n_checks checks passed"
    exit 0
fi
SMALL=(--steps 30 --vocab 256 --dim 16 --heads 2 --ffn 32 --target-layers 2 --seq-len 16 --batch 1
       --block-size 4 --anchors 2 --profile-interval 10 --overwrite)
train() { # NAME FLAGS...
    local name=$1; shift
    set +e
    "$TRAINER" "${SMALL[@]}" --trace "$name.sqlite" "$@" >"$name.log" 2>&1
    local trc=$?
    set -e
    if [ $trc -eq 2 ]; then
        echo "SKIP: the trainer refused the flags of this test: $(tail -1 "$name.log")"; exit 0
    fi
    [ $trc -eq 0 ] || fail "trainer $name: exit $trc: $(tail -5 "$name.log")"
}
# The delays are set from an undelayed run, so that they dominate whatever
# the build (sanitizers make the model's compute many times slower).
train baseline --steps 8
expect_ok t_base "$A" bottleneck --format json baseline.sqlite
delay_us=$(python3 -c '
import json
roles = {r["role"]: r for r in json.load(open("t_base.out"))["roles"]}
need = max(roles[r]["busy_ms_per_step"] for r in ("target", "drafter"))
print(int(1000 * (3 * need + 2)))')
quarter_us=$((delay_us / 4))
# A queue of 2: the target, three times as fast, waits in queue_put from the third step on.
train drafterbound --drafter-delay-us "$delay_us" --queue-depth 2 --steps 20
train targetbound --target-delay-us "$delay_us" --steps 20
# The target about four times as fast as the drafter: in 20 steps it never
# fills a queue of 60, and with a queue of 1 it waits for the drafter every
# step, about three quarters of the drafter's delay (at least 1.5 ms).
train depth1 --target-delay-us "$quarter_us" --drafter-delay-us "$delay_us" --queue-depth 1 --steps 20
train depth60 --target-delay-us "$quarter_us" --drafter-delay-us "$delay_us" --queue-depth 60 --steps 20
expect_ok t_drafter "$A" bottleneck --format json drafterbound.sqlite
expect_ok t_target "$A" bottleneck --format json targetbound.sqlite
expect_ok t_diff "$A" diff --format json depth60.sqlite depth1.sqlite
expect_ok t_text "$A" bottleneck drafterbound.sqlite
py "trainer runs" <<'EOF'
import json
v = json.load(open("t_drafter.out"))["verdict"][0]
assert v["bottleneck"] == "drafter" and v["stage"] == "forward" and v["saturated"] == 1, v
assert v["upstream"] == "target" and v["upstream_wait_output_pct"] > 10, v
v = json.load(open("t_target.out"))["verdict"][0]
assert v["bottleneck"] == "target" and v["stage"] == "forward", v
assert v["downstream"] == "drafter" and v["downstream_wait_input_pct"] > 10, v
d = json.load(open("t_diff.out"))
st = {(r["role"], r["stage"]): r for r in d["stages"]}
put = st[("target", "queue_put")]
# depth 60: the items of 20 steps never fill the queue; depth 1: the target waits for the drafter every step
assert put["median_b_ms"] > put["median_a_ms"] + 0.75 and put["significant"] == "yes", put
EOF
echo "it_analyze2: $n_checks checks passed"
