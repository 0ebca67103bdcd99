#!/usr/bin/env bash
# it_invariants.sh: what must hold between the numbers of the analysis
# commands, on the generated traces of `tracegen DIR` (tests/traces.c):
#  - per thread, the self times plus idle are the wall time, in `summary`
#    (every thread, whole trace and windows), in `intervals` (every thread in
#    every window) and in `bottleneck` (every role's shares add up to 100%),
#    also on traces with ranges that never ended;
#  - `bottleneck`'s windows are `intervals`' windows (partial first and last
#    windows left out) with the same figures;
#  - hostile values near the int64 limits give one error line and exit 2, or
#    a correct value (the checks of docs/analyze.md, "Values out of range").
#
#   bash tests/it_invariants.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$GEN" ] || { echo "SKIP: $GEN is not built (make tests)"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check JSON and CSV"; exit 0; }

it_enter_tmp
"$GEN" "$T" >/dev/null

# ---- self + idle = wall ---------------------------------------------------------------------
check_summary() { # NAME FILE ARGS...: per thread, self times + idle = the wall time of the heading
    local name=$1 file=$2
    shift 2
    run "${name}_text" "$A" summary "$@" "$file"
    [ $rc -eq 0 ] || fail "$name: exit $rc: $(cat "${name}_text.err")"
    run "$name" "$A" summary --format csv "$@" "$file"
    [ $rc -eq 0 ] || fail "$name: exit $rc: $(cat "$name.err")"
    WALL=$(sed -n 's/.*wall time \([0-9.]*\) ms per thread$/\1/p' "${name}_text.out") NAME=$name py "$name: self + idle != wall" <<'EOF'
import csv, os
from decimal import Decimal
wall = Decimal(os.environ["WALL"])
rows = [r for r in csv.DictReader(open(os.environ["NAME"] + ".out")) if r["scope"] == "thread"]
assert rows
sums = {}
for r in rows:
    sums[r["thread"]] = sums.get(r["thread"], Decimal(0)) + Decimal(r["self_ms"])
    assert Decimal(r["self_ms"]) <= Decimal(r["total_ms"]) <= wall, r
for thread, s in sums.items():
    # the heading rounds to 3 decimals, the rows are exact
    assert abs(s - wall) <= Decimal("0.0005"), (thread, s, wall)
EOF
}

check_intervals() { # NAME FILE EVERY: every thread in every window: stages + idle = the window
    run "$1" "$A" intervals --every "$3" --format csv "$2"
    [ $rc -eq 0 ] || fail "$1: exit $rc: $(cat "$1.err")"
    NAME=$1 py "$1: a window's self + idle != its length" <<'EOF'
import csv, os
per = {}
for r in csv.DictReader(open(os.environ["NAME"] + ".out")):
    key = (r["window"], r["thread"])
    win_ns = round(float(r["window_ms"]) * 1e6)
    per.setdefault(key, [win_ns, 0])[1] += int(r["ns"])
assert per
for key, (win, s) in per.items():
    assert s == win, (key, s, win)
EOF
}

check_bottleneck() { # NAME FILE: every role's shares add up to 100%
    run "$1" "$A" bottleneck --format json "$2"
    [ $rc -eq 0 ] || fail "$1: exit $rc: $(cat "$1.err")"
    NAME=$1 py "$1: a role's shares do not add up" <<'EOF'
import json, os
d = json.load(open(os.environ["NAME"] + ".out"))
for r in d["roles"]:
    parts = ["work_pct", "sync_pct", "comm_pct", "copy_pct", "wait_input_pct", "wait_output_pct", "idle_pct"]
    total = sum(r[p] for p in parts)
    assert abs(total - 100) < 1e-9, (r["role"], total)
    assert abs(r["busy_pct"] - (r["work_pct"] + r["sync_pct"] + r["comm_pct"] + r["copy_pct"])) < 1e-9, r
EOF
}

for f in gen.sqlite running.sqlite unended.sqlite rank0.sqlite outer.sqlite; do
    b=${f%.sqlite}
    check_summary "sum_$b" "$f"
    check_summary "sum_${b}_steps" "$f" --steps :1
    check_summary "sum_${b}_jobs" "$f" --jobs 3
done
check_summary sum_unended_late unended.sqlite --time 0.3:0.4
check_summary sum_running_end running.sqlite --time 0.79:
for f in target.sqlite moves.sqlite partial.sqlite dense.sqlite inferred.sqlite; do
    check_summary "sum_${f%.sqlite}" "$f"
done
for f in gen.sqlite running.sqlite unended.sqlite; do check_intervals "iv_${f%.sqlite}" "$f" 1; done
for f in target.sqlite moves.sqlite partial.sqlite; do check_intervals "iv_${f%.sqlite}" "$f" 5; done
for f in gen.sqlite running.sqlite unended.sqlite target.sqlite moves.sqlite partial.sqlite inferred.sqlite; do
    check_bottleneck "bn_${f%.sqlite}" "$f"
done

# A range that never ended: summary, intervals and bottleneck give it the same self time
# (outer [120, 400] holding inner [150, 250]: 180 ms of 400, 45%).
py "unended: summary, intervals and bottleneck disagree" <<'EOF'
import csv, json
s = {(r["thread"], r["stage"]): r for r in csv.DictReader(open("sum_unended.out")) if r["scope"] == "thread"}
assert (s[("worker", "outer")]["self_ms"], s[("worker", "outer")]["total_ms"], s[("worker", "outer")]["count"]) == ("180.000000", "280.000000", "1")
assert s[("worker", "idle")]["self_ms"] == "80.000000"
iv = sum(int(r["ns"]) for r in csv.DictReader(open("iv_unended.out")) if r["thread_name"] == "worker" and r["stage"] == "outer")
assert iv == 180000000, iv
b = {r["role"]: r for r in json.load(open("bn_unended.out"))["roles"]}
assert b["worker"]["top_stage"] == "outer" and abs(b["worker"]["top_stage_pct"] - 45) < 1e-9, b["worker"]
assert abs(b["worker"]["idle_pct"] - 20) < 1e-9, b["worker"]
EOF

# ---- bottleneck's windows are intervals' --------------------------------------------------
# partial.sqlite: marks of steps 3..22, windows of 5: only 6-10, 11-15, 16-20 are whole.
run bn_partial_win "$A" bottleneck --every 5 --format json partial.sqlite
[ $rc -eq 0 ] || fail "bottleneck partial: $(cat bn_partial_win.err)"
py "bottleneck's windows are not intervals'" <<'EOF'
import csv, json
b = json.load(open("bn_partial_win.out"))["windows"]
iv = {}
for r in csv.DictReader(open("iv_partial.out")):
    w = iv.setdefault(int(r["window"]), {"first": int(r["step_first"]), "last": int(r["step_last"]),
                                          "tps": float(r["tokens_per_s"]), "ns": float(r["window_ms"]) * 1e6, "roles": {}})
    if r["kind"] in ("wait_input", "wait_output"):
        w["roles"].setdefault(r["role"], {}).setdefault(r["thread"], 0)
        w["roles"][r["role"]][r["thread"]] += int(r["ns"])
    else:
        w["roles"].setdefault(r["role"], {}).setdefault(r["thread"], 0)
assert [(x["window"], x["step_first"], x["step_last"]) for x in b] == [(k, v["first"], v["last"]) for k, v in sorted(iv.items())] == [(1, 6, 10), (2, 11, 15), (3, 16, 20)], (b, iv)
for x in b:
    w = iv[x["window"]]
    assert abs(x["tokens_per_s"] - w["tps"]) < 1e-3, (x, w)
    for role, threads in w["roles"].items():
        pct = 100.0 * sum(threads.values()) / (w["ns"] * len(threads))
        assert abs(x[role + "_wait_pct"] - pct) < 1e-9, (role, x, pct)
EOF
# Fewer steps than a window: no window (and the report says so).
run bn_nowin "$A" bottleneck --every 100 --format csv partial.sqlite
[ $rc -eq 0 ] && [ "$(sed -n '/^window,/,$p' bn_nowin.out | wc -l)" -eq 1 ] || fail "bottleneck --every 100: $(cat bn_nowin.out bn_nowin.err)"
ok
run report_nowin "$A" report partial.sqlite --every 100 --html report_nowin.html
[ $rc -eq 0 ] && grep -q 'No complete window of 100 steps' report_nowin.html || fail "report with no window: $(cat report_nowin.err)"
ok

# ---- values out of range ------------------------------------------------------------------
# Copies of gen.sqlite with one hostile value each (python's sqlite3 writes them as the
# integers they are).
hostile() { # NAME SQL
    cp gen.sqlite "$1.sqlite"
    NAME=$1 SQL=$2 python3 -c 'import os, sqlite3; db = sqlite3.connect(os.environ["NAME"] + ".sqlite"); db.executescript(os.environ["SQL"]); db.commit()' || fail "hostile $1"
}
I64=9223372036854775807
hostile neg_dropped "UPDATE meta SET value = '-4' WHERE key = 'dropped_events'"
hostile over_dropped "UPDATE meta SET value = '9223372036854775808' WHERE key = 'dropped_events'"
hostile neg_errors "INSERT INTO meta VALUES ('rejected_steps', '-1')"
hostile neg_start "UPDATE meta SET value = '-1' WHERE key = 'start_ns'"
hostile end_first "UPDATE meta SET value = '5' WHERE key = 'end_ns'"
hostile neg_step_ts "UPDATE steps SET ts_ns = -5 WHERE step = 0"
hostile min_step_ts "UPDATE steps SET ts_ns = -9223372036854775808 WHERE step = 0"
hostile tokens_past "UPDATE steps SET tokens = $I64 WHERE step IN (7, 8)"
hostile threads_dropped "DELETE FROM meta WHERE key = 'dropped_events'; UPDATE threads SET dropped = $I64"
hostile max_dropped "UPDATE meta SET value = '$I64' WHERE key = 'dropped_events'"
hostile tokens_max "UPDATE steps SET tokens = $I64 - 7000 WHERE step = 8"
hostile step_max "UPDATE steps SET step = $I64 WHERE step = 8"
hostile header_liar "UPDATE range_chunks SET t0_ns = -9223372036854775808 WHERE id = 1"

commands=(info summary "intervals --every 1" bottleneck "diff gen.sqlite" "export --chrome -" report)
run_all() { # NAME: every command on NAME.sqlite; each exits 0, or 2 with one line
    local c
    for c in "${commands[@]}"; do
        local out="$1_${c%% *}"
        case "$c" in
        report) run "$out" "$A" report "$1.sqlite" --html "$out.html" ;;
        "diff gen.sqlite") run "$out" "$A" diff "$1.sqlite" gen.sqlite ;;
        *) run "$out" "$A" $c "$1.sqlite" ;;
        esac
        if [ $rc -eq 2 ]; then
            [ "$(wc -l <"$out.err")" -eq 1 ] && grep -q '^analyze: ' "$out.err" || fail "$out: exit 2 without one line: $(cat "$out.err")"
        else
            [ $rc -eq 0 ] || fail "$out: exit $rc: $(cat "$out.err")"
        fi
        echo "$rc" >"$out.rc"
        ok
    done
}
rejected() { # NAME PATTERN: every command refuses the trace with a line matching PATTERN
    run_all "$1"
    local c
    for c in "${commands[@]}"; do
        local out="$1_${c%% *}"
        [ "$(cat "$out.rc")" = 2 ] && grep -q "$2" "$out.err" || fail "$out: not refused with '$2': rc $(cat "$out.rc"), $(cat "$out.err")"
    done
    ok
}
rejected neg_dropped "trace table 'meta': key 'dropped_events' is '-4', not a count"
rejected over_dropped "key 'dropped_events' is '9223372036854775808', not a count"
rejected neg_errors "key 'rejected_steps' is '-1'"
rejected neg_start "key 'start_ns' is '-1', not a time"
rejected end_first "end_ns 5 is before start_ns 1000000000"
rejected neg_step_ts "trace table 'steps': step 0: ts_ns -5 is negative"
rejected min_step_ts "step 0: ts_ns -9223372036854775808 is negative"
rejected tokens_past "trace table 'steps': step 7: the tokens of the steps up to it add up past $I64"
run_all threads_dropped
[ "$(cat threads_dropped_info.rc)" = 2 ] && grep -q "trace table 'threads': the dropped counts add up past" threads_dropped_info.err || fail "threads' dropped counts: $(cat threads_dropped_info.err)"
ok
run_all max_dropped
grep -q "^  dropped events: $I64 " max_dropped_info.out || fail "dropped events at INT64_MAX: $(cat max_dropped_info.out)"
ok
run_all tokens_max
grep -q "^  tokens: $I64, " tokens_max_info.out || fail "tokens at INT64_MAX: $(cat tokens_max_info.out)"
run tokens_max_json "$A" diff --format json gen.sqlite tokens_max.sqlite
py "diff: the throughput ratio of a trace with INT64_MAX tokens" <<'EOF'
import json
d = json.load(open("tokens_max_json.out"))["throughput"][0]
b = 9223372036854775807 / 0.8
assert d["tokens_per_s_a"] == 10000 and abs(d["tokens_per_s_b"] - b) / b < 1e-12, d
assert abs(d["ratio"] - b / 10000) / (b / 10000) < 1e-12, d
EOF
run_all step_max
grep -q "^  steps: 8 (marks of steps 0-$I64)" step_max_info.out || fail "step INT64_MAX: $(cat step_max_info.out)"
ok
run_all header_liar
grep -q "^  duration: 0.800 s" header_liar_info.out || fail "a chunk header with t0 INT64_MIN: $(cat header_liar_info.out)"
ok
# Times at the limit: a range of INT64_MAX - 1 ns fits everywhere it is printed; nested three
# deep in itself, its inclusive time does not, and summary says so. bottleneck and diff refuse a
# period that long (their per-step sums are over every thread).
run_all huge
grep -q '^main    main  work   work  9223372036854.776     100.0%  9223372036854.776' huge_summary.out || fail "huge summary: $(cat huge_summary.out)"
grep -q 'work 100.0% 9223372036854.8ms' huge_intervals.out || fail "huge intervals: $(cat huge_intervals.out)"
grep -q '"dur":9223372036854775.806' huge_export.out || fail "huge export"
grep -q 'the trace spans more time than any run can' huge_bottleneck.err || fail "huge bottleneck: $(cat huge_bottleneck.err)"
ok
run_all huge_nested
grep -q 'times summed over a thread.s or a role.s ranges pass' huge_nested_summary.err || fail "huge_nested summary: $(cat huge_nested_summary.err)"
ok
# gpu on a trace with GPU activity and a negative count.
cp gpu_steps.sqlite neg_gpu.sqlite
python3 -c 'import sqlite3; db = sqlite3.connect("neg_gpu.sqlite"); db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", ("gpu_dropped_records", "-3")); db.commit()'
expect_usage neg_gpu "$A" gpu neg_gpu.sqlite
grep -q "key 'gpu_dropped_records' is '-3', not a count" neg_gpu.err || fail "gpu: $(cat neg_gpu.err)"
ok
# Records the trace says it lost outside the ranges (CUPTI's gpu_dropped_records, the kernel's
# cpu_lost_records) are warned about by every command but info, one line each, in that order.
cp gpu_steps.sqlite losses.sqlite
python3 -c 'import sqlite3; db = sqlite3.connect("losses.sqlite"); db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [("gpu_dropped_records", "7"), ("cpu_lost_records", "5")]); db.commit()'
for c in summary "intervals --every 1" bottleneck gpu "export --chrome -"; do
    out="losses_${c%% *}"
    run "$out" "$A" $c losses.sqlite
    [ $rc -eq 0 ] || fail "$out: exit $rc: $(cat "$out.err")"
    [ "$(grep -c 'warning' "$out.err")" = 2 ] || fail "$out: not two warnings: $(cat "$out.err")"
    sed -n 1p "$out.err" | grep -q '^analyze: warning: losses.sqlite: 7 GPU records were dropped by CUPTI (no buffer space); GPU busy time may be undercounted$' ||
        fail "$out: $(cat "$out.err")"
    sed -n 2p "$out.err" | grep -q '^analyze: warning: losses.sqlite: 5 CPU capture records were lost by the kernel (full perf rings); samples and off-CPU time may be undercounted$' ||
        fail "$out: $(cat "$out.err")"
    ok
done
# report puts the same lines on its page, above the verdict (and on stderr).
run losses_report "$A" report losses.sqlite --html losses.html
[ $rc -eq 0 ] || fail "report: exit $rc: $(cat losses_report.err)"
[ "$(grep -c 'warning' losses_report.err)" = 2 ] || fail "report: $(cat losses_report.err)"
grep -q '^<p class="warn">warning: losses.sqlite: 7 GPU records were dropped by CUPTI (no buffer space); GPU busy time may be undercounted</p>$' losses.html ||
    fail "report page: no GPU dropped warning"
grep -q '^<p class="warn">warning: losses.sqlite: 5 CPU capture records were lost by the kernel (full perf rings); samples and off-CPU time may be undercounted</p>$' losses.html ||
    fail "report page: no CPU lost warning"
[ "$(grep -n 'class="warn"' losses.html | head -1 | cut -d: -f1)" -lt "$(grep -n 'id="verdict"' losses.html | cut -d: -f1)" ] ||
    fail "report page: the warnings are not above the verdict"
run gen_report "$A" report gen.sqlite --html gen.html
grep -q 'class="warn"' gen.html && fail "report page: warnings on a trace without losses"
ok
python3 -c 'import sqlite3; db = sqlite3.connect("losses.sqlite"); db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", ("cpu_lost_records", "x5")); db.commit()'
expect_usage neg_cpu "$A" summary losses.sqlite
grep -q "key 'cpu_lost_records' is 'x5', not a count" neg_cpu.err || fail "summary: $(cat neg_cpu.err)"
ok

echo "it_invariants: $n_checks checks passed"
