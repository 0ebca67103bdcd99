#!/usr/bin/env bash
# it_flow.sh: integration test of flows on real trainer runs (CPU backend,
# a tiny model): every batch a drafter trained on pairs up through every
# handoff (loader -> target [-> post] -> drafter), each residence (in - out)
# is >= 0, every out lies inside its producer's queue_put range (the trainer
# records it in its put) and every in right after its consumer's wait range
# (batch_wait, handoff_wait, queue_wait) ended, before the next range begins;
# then `analyze flow` agrees with the raw records read through SQL: counts,
# item latencies and queue residences (nearest-rank p50 and max), and each
# step's critical path covers the step exactly.
#
#   bash tests/it_flow.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
TRAINER="$BUILD/trainer"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$TRAINER" ] || { echo "SKIP: $TRAINER is not built"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the records"; exit 0; }

it_enter_tmp

SMALL=(--steps 40 --vocab 256 --dim 16 --heads 2 --ffn 32 --target-layers 2 --seq-len 16 --batch 1
       --block-size 4 --anchors 2 --overwrite)
train() { # NAME FLAGS...
    local name=$1; shift
    "$TRAINER" "${SMALL[@]}" --trace "$name.sqlite" "$@" >"$name.log" 2>&1 ||
        fail "trainer $name: $(tail -5 "$name.log")"
}
train sync --queue-depth 2
train async --postprocess async --target-gpus 2 --drafter-gpus 2 --queue-depth 4
train slow --drafter-delay-us 3000 --queue-depth 2

for name in sync async slow; do
    expect_ok "raw_$name" "$A" sql --format csv "$name.sqlite" \
        "SELECT f.thread, t.role, f.ts_ns, f.dir, f.id FROM flows f JOIN threads t ON t.id = f.thread"
    expect_ok "ranges_$name" "$A" sql --format csv "$name.sqlite" \
        "SELECT thread, stage_name, kind, start_ns, end_ns FROM ranges_v WHERE depth = 0 ORDER BY thread, start_ns"
    expect_ok "steps_$name" "$A" sql --format csv "$name.sqlite" "SELECT step, ts_ns FROM steps ORDER BY step"
    expect_ok "flow_$name" "$A" flow --format json "$name.sqlite"
    NAME=$name py "flow checks on $name" <<'EOF'
import csv, json, os, bisect
name = os.environ["NAME"]
rows = list(csv.DictReader(open(f"raw_{name}.out")))
ranges = list(csv.DictReader(open(f"ranges_{name}.out")))
steps = [(int(r["step"]), int(r["ts_ns"])) for r in csv.DictReader(open(f"steps_{name}.out"))]
rep = json.load(open(f"flow_{name}.out"))
async_ = name == "async"
by_id = {}
for r in rows:
    by_id.setdefault(int(r["id"]), []).append(r)
def fail(msg):
    raise SystemExit(f"{name}: {msg}")
# every batch a drafter received came through every hop, once each way
drafter_ins = [int(r["id"]) for r in rows if r["role"] == "drafter"]
assert all(i & 0xffff == 2 for i in drafter_ins), "drafters receive only hop 2"
n_drafters = len({r["thread"] for r in rows if r["role"] == "drafter"})
if len(drafter_ins) != 40 * n_drafters: fail(f"{len(drafter_ins)} drafter ins, wanted {40 * n_drafters}")
hops = [0, 1, 2] if async_ else [0, 2]
res = {}
for i in drafter_ins:
    b = i >> 16
    for h in hops:
        recs = by_id.get(b << 16 | h, [])
        dirs = sorted(r["dir"] for r in recs)
        if dirs != ["in", "out"]: fail(f"batch {b} hop {h}: records {dirs}")
        o = next(r for r in recs if r["dir"] == "out"); n = next(r for r in recs if r["dir"] == "in")
        d = int(n["ts_ns"]) - int(o["ts_ns"])
        if d < 0: fail(f"batch {b} hop {h}: residence {d} < 0")
        res.setdefault((o["role"], n["role"]), []).append(d)
if not async_ and any(i & 0xffff == 1 for i in by_id): fail("hop 1 without a post thread")
# outs inside the producer's queue_put; ins after a wait range ended, before the next range
per_thread = {}
for g in ranges:
    per_thread.setdefault(g["thread"], []).append((int(g["start_ns"]), int(g["end_ns"]), g["stage_name"], g["kind"]))
for r in rows:
    rs = per_thread[r["thread"]]
    ts = int(r["ts_ns"])
    k = bisect.bisect_right([x[0] for x in rs], ts) - 1
    if r["dir"] == "out" and r["role"] != "target":
        if k < 0 or not (rs[k][0] <= ts <= rs[k][1] and rs[k][2] == "queue_put"):
            fail(f"out {r['id']} at {ts} not inside a queue_put of thread {r['thread']}")
    if r["dir"] == "out" and r["role"] == "target" and not async_:
        if k < 0 or not (rs[k][0] <= ts <= rs[k][1] and rs[k][2] == "queue_put"):
            fail(f"target out {r['id']} not inside queue_put")
    if r["dir"] == "in":
        # the last range that ended at or before the in is a wait for input
        ends = [x for x in rs if x[1] <= ts]
        if not ends or ends[-1][3] != "wait_input": fail(f"in {r['id']} at {ts} not after a wait_input range")
        later = [x for x in rs if x[0] >= ends[-1][1] and x[0] < ts]
        if later: fail(f"in {r['id']} at {ts} recorded after the next range began")
# analyze flow agrees
counts = rep["flow"][0]
if counts["records"] != len(rows): fail(f"records {counts['records']} != {len(rows)}")
for k in ("in_only", "repeated", "in_before_out"):
    if counts[k] != 0: fail(f"{k} = {counts[k]}")
if counts["items"] != len(drafter_ins): fail(f"items {counts['items']} != {len(drafter_ins)}")
def rank(v, p):
    v = sorted(v); import math
    return v[max(1, math.ceil(p * len(v) / 1000)) - 1]
for q in rep["queues"]:
    v = res.get((q["from"], q["to"]))
    if v is None: fail(f"queue {q['from']} -> {q['to']} not among the pairs")
    if q["n"] != len(v): fail(f"queue {q['from']}->{q['to']}: n {q['n']} != {len(v)}")
    if abs(q["p50_ms"] - rank(v, 500) / 1e6) > 1e-9 or abs(q["max_ms"] - max(v) / 1e6) > 1e-9:
        fail(f"queue {q['from']}->{q['to']}: p50/max {q['p50_ms']}/{q['max_ms']} vs {rank(v, 500)}/{max(v)}")
if len(rep["queues"]) != len(res): fail("queue groups differ")
lat = []
for i in drafter_ins:
    b = i >> 16
    o = next(r for r in by_id[b << 16] if r["dir"] == "out"); n = next(r for r in by_id[i] if r["dir"] == "in")
    lat.append(int(n["ts_ns"]) - int(o["ts_ns"]))
L = rep["latency"][0]
if L["n"] != len(lat) or abs(L["p99_ms"] - rank(lat, 990) / 1e6) > 1e-9: fail(f"latency {L} vs {rank(lat, 990)}")
# each step's critical path covers the step, to the nanosecond
per_step = {}
for s in rep["critical_path_steps"]:
    per_step[s["step"]] = per_step.get(s["step"], 0) + round(s["ms"] * 1e6)
for (s0, t0), (s1, t1) in zip(steps, steps[1:]):
    if per_step.get(s1) != t1 - t0: fail(f"step {s1}: path {per_step.get(s1)} ns, step {t1 - t0} ns")
EOF
done
# the drafter-bound run (3 ms a forward, far above the tiny model's other work even on a loaded
# host): the path runs mostly through the drafter
python3 - <<'EOF' || fail "slow: critical path"
import json
rep = json.load(open("flow_slow.out"))
share = sum(r["share"] for r in rep["critical_path"] if r["role"] == "drafter")
assert share > 80, share
EOF
ok
# export --chrome: one arrow per handoff, out to in
expect_ok chrome "$A" export async.sqlite --chrome async.json
python3 - <<'EOF' || fail "chrome flow arrows"
import json
d = json.load(open("async.json"))
rep = json.load(open("flow_async.out"))
ev = [e for e in d["traceEvents"] if e.get("cat") == "flow"]
s = {e["id"]: e for e in ev if e["ph"] == "s"}
f = {e["id"]: e for e in ev if e["ph"] == "f"}
assert len(s) == len(f) == rep["flow"][0]["handoffs"], (len(s), len(f))
assert set(s) == set(f) == set(range(1, len(s) + 1))
assert all(f[i]["ts"] >= s[i]["ts"] for i in s)
assert all("bp" not in e for e in ev)
assert [s[i]["ts"] for i in sorted(s)] == sorted(s[i]["ts"] for i in s)
EOF
ok
for f in text csv; do expect_ok "fmt_$f" "$A" flow --format $f sync.sqlite; done
grep -q "^critical path of each step" fmt_text.out || fail "text output has no critical path heading"
expect_usage flow_noargs "$A" flow
expect_usage flow_two "$A" flow sync.sqlite async.sqlite
expect_usage flow_badfmt "$A" flow --format xml sync.sqlite
expect_usage flow_missing "$A" flow missing.sqlite
# a trace without flows, and a window without any: one line each, no tables
"$BUILD/tests/tracegen" gen >/dev/null
expect_usage flow_none "$A" flow gen/gen.sqlite
[ "$(cat flow_none.err)" = "analyze: flow: gen/gen.sqlite has no flow records (the program did not call st_flow_out/st_flow_in)" ] ||
    fail "flow_none: $(cat flow_none.err)"
[ ! -s flow_none.out ] || fail "flow_none printed: $(head -3 flow_none.out)"
ok
# a program that records one id's in before its out (st_flow_out called too late) and one
# handoff, 3 steps; its flows all lie in step 0
cat > late.c <<'C'
#include <stagetrace.h>
#include <time.h>
static void pause_ms(int ms) { struct timespec ts = {0, ms * 1000000L}; nanosleep(&ts, NULL); }
int main(int argc, char **argv) {
    st_options o; st_options_init(&o);
    o.path = argv[1]; o.overwrite = 1; o.nvtx = 0;
    st_trace *t;
    if (argc != 2 || st_open(&t, &o) != ST_OK) return 1;
    int w = st_stage_register(t, "work", ST_WORK);
    st_thread_register(t, "main", "main", -1, 0);
    st_step(0, 0);
    st_flow_out(1); pause_ms(1); st_flow_in(1);  /* a handoff */
    st_flow_in(2); pause_ms(1); st_flow_out(2);  /* in before out */
    for (int s = 1; s <= 3; s++) { st_begin(w); pause_ms(5); st_end(w); st_step(s, 1); }
    return st_close(t);
}
C
cc -I"$ROOT/tracer/include" late.c -o late "$BUILD/libstagetrace.a" $ST_STATIC_LIBS || fail "late.c does not build"
expect_ok late ./late late.sqlite
expect_ok flow_late "$A" flow late.sqlite
grep -q '^in_before_out 1: ids whose in was recorded before their out (left out of every figure below)\.$' flow_late.out ||
    fail "flow_late: no in_before_out note: $(head -8 flow_late.out)"
grep -q 'call st_flow_out$' flow_late.out && grep -q '^before releasing the lock (docs/tracer.md, "Flows")\.$' flow_late.out ||
    fail "flow_late: the note does not say what to do: $(head -8 flow_late.out)"
ok
expect_ok flow_late_csv "$A" flow --format csv late.sqlite
grep -q 'in_before_out' flow_late_csv.out && ! grep -q 'left out of every figure' flow_late_csv.out || fail "flow csv: $(head -3 flow_late_csv.out)"
ok
expect_usage flow_window "$A" flow --steps 1:3 late.sqlite
grep -Eq '^analyze: flow: late\.sqlite has no flow record in the window given \(its 4 flow records lie from [0-9.]+ s to [0-9.]+ s of --time\)$' flow_window.err ||
    fail "flow_window: $(cat flow_window.err)"
[ ! -s flow_window.out ] || fail "flow_window printed tables"
ok
echo "it_flow: $n_checks checks passed"
