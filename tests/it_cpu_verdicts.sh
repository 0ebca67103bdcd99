#!/usr/bin/env bash
# it_cpu_verdicts.sh: summary, bottleneck and diff on real CPU recordings of
# known behaviour (tests/test_cpu_verdict.c --scene; docs/analyze.md
# "summary", "bottleneck", "diff"):
#  - blocked: the worker's compute stage is a 5 ms usleep: summary says
#    compute is at least 80 % blocked and its on + preempted + blocked is its
#    total; bottleneck names worker, its work "blocked, not compute-bound",
#    cpu_verdict blocked;
#  - starved: four threads pinned to one core spin 10 ms of CPU each per step:
#    their work is more than 50 % preempted: "CPU-starved, not
#    compute-bound", cpu_verdict CPU-starved;
#  - burn: burn() of 2000 rounds a step in two runs, 4000 in a third: diff
#    of the first and third names burn as grown (ratio 1.3 to 3: on this shared VM a round's CPU time varies with the load) and
#    compute's on-CPU time as changed; diff of the two equal runs names no
#    function;
#  - the trace without its CPU tables: no on-CPU columns, no CPU lines or
#    tables in any of the three.
#
#   bash tests/it_cpu_verdicts.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
REC="$BUILD/tests/test_cpu_verdict"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$REC" ] || { echo "SKIP: $REC is not built (libcmocka-dev)"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the tables"; exit 0; }
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 is needed to read meta"; exit 0; }

it_enter_tmp

for s in blocked starved locked; do
    expect_ok "rec_$s" "$REC" --scene "$s" "$s.sqlite"
done
[ "$(sqlite3 blocked.sqlite "select value from meta where key = 'cpu_mode'")" = perf ] ||
    { echo "SKIP: perf events refused here: $(sqlite3 blocked.sqlite "select value from meta where key = 'cpu_reason'")"; exit 0; }
expect_ok rec_a1 "$REC" --scene burn a1.sqlite 2000
expect_ok rec_a2 "$REC" --scene burn a2.sqlite 2000
expect_ok rec_b "$REC" --scene burn b.sqlite 4000

# ---- blocked ----
expect_ok sum_blocked "$A" summary --format csv blocked.sqlite
py "summary blocked" <<'EOF'
import csv
rows = list(csv.DictReader(open("sum_blocked.out")))
c = [r for r in rows if r["stage"] == "compute"][0]
assert float(c["blocked_pct"]) >= 80, c
parts = float(c["on_cpu_pct"]) + float(c["preempted_pct"]) + float(c["blocked_pct"])
assert abs(parts - 100) < 1e-6, parts
idle = [r for r in rows if r["stage"] == "idle"][0]
assert idle["on_cpu_ms"] == "", idle
EOF
expect_ok bn_blocked "$A" bottleneck blocked.sqlite
grep -q "^CPU: worker's work is .* blocked, not compute-bound: its threads gave up the CPU" bn_blocked.out ||
    fail "blocked: $(grep '^CPU' bn_blocked.out)"
ok
expect_ok bnc_blocked "$A" bottleneck --format csv blocked.sqlite
py "bottleneck csv blocked" <<'EOF'
import csv, io
blocks = open("bnc_blocked.out").read().strip().split("\n\n")
verdict = list(csv.DictReader(io.StringIO(blocks[0])))[0]
assert verdict["bottleneck"] == "worker" and verdict["cpu_verdict"] == "blocked", verdict
cpu = [b for b in blocks if b.startswith("role,threads,cpu_threads")][0]
w = [r for r in csv.DictReader(io.StringIO(cpu)) if r["role"] == "worker"][0]
assert float(w["work_blocked_pct"]) >= 80 and w["bottleneck"] == "yes", w
EOF

# ---- locked: compute waits on a mutex another thread holds ----
expect_ok bn_locked "$A" bottleneck locked.sqlite
grep -q "^CPU: worker's work is .* lock-bound, not compute-bound: .* in futex waits" bn_locked.out ||
    fail "locked: $(grep '^CPU' bn_locked.out)"
ok
expect_ok bnc_locked "$A" bottleneck --format csv locked.sqlite
py "bottleneck csv locked" <<'EOF'
import csv, io
blocks = open("bnc_locked.out").read().strip().split("\n\n")
verdict = list(csv.DictReader(io.StringIO(blocks[0])))[0]
assert verdict["cpu_verdict"] == "lock-bound", verdict
EOF
expect_ok cpu_locked "$A" cpu --format csv locked.sqlite
grep -q "futex" cpu_locked.out || fail "locked: no futex reason in analyze cpu"
ok

# ---- starved ----
expect_ok bn_starved "$A" bottleneck starved.sqlite
grep -q "^CPU: worker's work is .* on 4 threads): CPU-starved, not compute-bound" bn_starved.out ||
    fail "starved: $(grep '^CPU' bn_starved.out)"
ok
expect_ok bnc_starved "$A" bottleneck --format csv starved.sqlite
py "bottleneck csv starved" <<'EOF'
import csv, io
blocks = open("bnc_starved.out").read().strip().split("\n\n")
verdict = list(csv.DictReader(io.StringIO(blocks[0])))[0]
assert verdict["cpu_verdict"] == "CPU-starved", verdict
cpu = [b for b in blocks if b.startswith("role,threads,cpu_threads")][0]
w = [r for r in csv.DictReader(io.StringIO(cpu)) if r["role"] == "worker"][0]
assert w["cpu_threads"] == "4" and float(w["work_preempted_pct"]) > 50, w
assert float(w["work_preempted_pct"]) >= float(w["work_blocked_pct"]), w
EOF

# ---- burn: 2x grows, equal runs do not ----
expect_ok diff_ab "$A" diff --format csv a1.sqlite b.sqlite
py "diff grown" <<'EOF'
import csv, io
blocks = open("diff_ab.out").read().strip().split("\n\n")
stages = [b for b in blocks if "on_cpu_pct_a" in b.split("\n")[0]][0]
c = [r for r in csv.DictReader(io.StringIO(stages)) if r["stage"] == "compute"][0]
assert c["significant"] == "yes" and 1.3 <= float(c["mean_b_ms"]) / float(c["mean_a_ms"]) <= 3, c
fns = [b for b in blocks if b.startswith("role,stage,rank,function")][0]
grew = [r for r in csv.DictReader(io.StringIO(fns)) if r["grew"] == "yes"]
assert [r["function"] for r in grew] == ["burn"], grew
assert 1.3 <= float(grew[0]["ratio"]) <= 3 and grew[0]["stage"] == "compute", grew
EOF
expect_ok diff_ab_text "$A" diff a1.sqlite b.sqlite
grep -q '^  worker/compute: burn (test_cpu_verdict) ' diff_ab_text.out || fail "diff: burn not named: $(cat diff_ab_text.out | head -12)"
ok
expect_ok diff_aa "$A" diff a1.sqlite a2.sqlite
grep -q "^No function's CPU time grew beyond sampling noise" diff_aa.out || fail "equal runs: $(head -12 diff_aa.out)"
ok
expect_ok diff_aa_csv "$A" diff --format csv a1.sqlite a2.sqlite
py "equal runs" <<'EOF'
import csv, io
blocks = open("diff_aa_csv.out").read().strip().split("\n\n")
fns = [b for b in blocks if b.startswith("role,stage,rank,function")][0]
assert not [r for r in csv.DictReader(io.StringIO(fns)) if r["grew"] == "yes"], fns
EOF

# ---- without the CPU tables: nothing of the above ----
for f in blocked a1; do
    cp "$f.sqlite" "no_$f.sqlite"
    sqlite3 "no_$f.sqlite" "drop table cpu_threads; drop table cpu_chunks; drop table cpu_stacks; drop table cpu_maps; drop table cpu_symbols"
done
expect_ok sum_no "$A" summary --format csv no_blocked.sqlite
expect_ok bn_no "$A" bottleneck no_blocked.sqlite
expect_ok bnc_no "$A" bottleneck --format json no_blocked.sqlite
expect_ok diff_no "$A" diff no_a1.sqlite b.sqlite
! grep -q on_cpu sum_no.out || fail "summary: on-CPU columns without the CPU tables"
! grep -qE '^(CPU|spinning):|^cpu:' bn_no.out || fail "bottleneck: CPU lines without the CPU tables"
! grep -q '"cpu_verdict"' bnc_no.out || fail "bottleneck json: cpu_verdict without the CPU tables"
grep -q '^The CPU capture is only in B: on-CPU time and functions are not compared.$' diff_no.out ||
    fail "diff: $(head -8 diff_no.out)"
! grep -q cpu_stages diff_no.out || fail "diff: CPU tables with the capture in one trace"
ok
echo "it_cpu_verdicts: $n_checks checks passed"
