#!/usr/bin/env bash
# it_analyze.sh: integration test of the `analyze` program on traces with
# exactly known contents, written by `tracegen DIR` (tests/tracegen.c: SQLite
# + the chunk encoder, exact timestamps; the expected numbers are worked out
# in tests/traces.c, trace_main). Checks exact values of every subcommand,
# the output formats against golden files (tests/golden/analyze/), Chrome
# JSON well-formedness, CSV and plain-rows exports against the SQL tables,
# and that every bad input or flag gives exit status 2 and one line on stderr.
#
#   bash tests/it_analyze.sh BUILD_DIR
#   ST_UPDATE_GOLDEN=1 bash tests/it_analyze.sh build   # rewrite the golden files
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
GOLDEN="$ROOT/tests/golden/analyze"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$GEN" ] || { echo "SKIP: $GEN is not built (make tests)"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check JSON and CSV"; exit 0; }

it_enter_tmp # relative file names: outputs do not depend on where the test runs
"$GEN" "$T" >/dev/null

# ---- help, version, bad flags -----------------------------------------------------------
expect_ok help "$A" --help
for c in info summary intervals sql export; do
    grep -q "^  $c " help.out || fail "analyze --help does not list $c"
    expect_ok "help_$c" "$A" "$c" --help
    grep -q "^usage: analyze $c" "help_$c.out" || fail "$c --help: no usage line"
done
expect_ok version "$A" --version
grep -q 'trace schema version 1' version.out || fail "--version: $(cat version.out)"

expect_usage noargs "$A"
expect_usage badcmd "$A" frobnicate gen.sqlite
expect_usage badopt "$A" summary --frobnicate gen.sqlite
expect_usage nofile "$A" summary
expect_usage badfmt "$A" summary --format xml gen.sqlite
expect_usage badsort "$A" summary --sort speed gen.sqlite
expect_usage badsteps "$A" summary --steps 5 gen.sqlite
expect_usage backsteps "$A" summary --steps 5:2 gen.sqlite
expect_usage nosuchstep "$A" summary --steps 3:99 gen.sqlite
expect_usage twowindows "$A" summary --steps 1:2 --time 0:1 gen.sqlite
expect_usage badtime "$A" summary --time abc gen.sqlite
expect_usage outsidetime "$A" summary --time 5:6 gen.sqlite
expect_usage badrole "$A" summary --role nobody gen.sqlite
expect_usage badthread "$A" summary --thread nobody gen.sqlite
expect_usage badstage "$A" summary --stage nothing gen.sqlite
# each says which names exist
[ "$(cat badrole.err)" = "analyze: --role nobody: no thread of gen.sqlite has that role (roles: main, loader, worker)" ] || fail "badrole: $(cat badrole.err)"
[ "$(cat badthread.err)" = "analyze: --thread nobody: gen.sqlite has no thread of that name or id (threads: main, loader, worker0, worker1)" ] || fail "badthread: $(cat badthread.err)"
[ "$(cat badstage.err)" = "analyze: --stage nothing: gen.sqlite has no stage of that name (stages: log, load, h2d, queue_put, queue_wait, compute, allreduce, stream_sync)" ] || fail "badstage: $(cat badstage.err)"
ok
# 17 stages: the first 12, then how many more
expect_usage manystages "$A" summary --stage zz "$ROOT/samples/traces/h200-async.sqlite"
grep -q '(stages: step_wait, load, batch_wait, forward, postprocess, queue_put, handoff, handoff_wait, queue_wait, h2d, loss, backward ... and 5 more)$' manystages.err || fail "manystages: $(cat manystages.err)"
ok
expect_usage badevery "$A" intervals --every 0 gen.sqlite
expect_usage everyval "$A" intervals --every
expect_usage twofiles "$A" intervals gen.sqlite gen.sqlite
expect_usage sqlargs "$A" sql gen.sqlite
expect_usage exportnothing "$A" export gen.sqlite
expect_usage flagvalue "$A" info --verify=yes gen.sqlite

# ---- bad input: exit 2, one line --------------------------------------------------------
head -c 60000 many.sqlite >truncated.sqlite
for f in zero notsqlite badversion missingtable badtypes badkind viewtrap truncated nonexistent; do
    expect_usage "info_$f" "$A" info "$f.sqlite"
done
grep -q "schema version 7" info_badversion.err || fail "unknown version: $(cat info_badversion.err)"
grep -q "not a SQLite file" info_notsqlite.err || fail "not sqlite: $(cat info_notsqlite.err)"
grep -q "table 'steps' is missing" info_missingtable.err || fail "missing table: $(cat info_missingtable.err)"
grep -q "trace table 'stages': it is a view, not a plain table" info_viewtrap.err || fail "a view is not the table: $(cat info_viewtrap.err)"
grep -q "stage 3 has unknown kind 'bogus'" info_badkind.err || fail "unknown kind: $(cat info_badkind.err)"
for f in zero notsqlite badversion missingtable corruptchunk badtypes badkind unknownthread unknownstage viewtrap truncated nonexistent; do
    expect_usage "summary_$f" "$A" summary "$f.sqlite"
    expect_usage "intervals_$f" "$A" intervals --every 2 "$f.sqlite"
    expect_usage "sql_$f" "$A" sql "$f.sqlite" "SELECT count(*), sum(dur_ns) FROM ranges"
    expect_usage "export_$f" "$A" export "$f.sqlite" --chrome "$f.json"
    [ ! -e "$f.json" ] || fail "export of a bad trace left $f.json behind"
    expect_usage "verify_$f" "$A" info --verify "$f.sqlite"
done
grep -q "chunk 3 (thread 0) is corrupt" summary_corruptchunk.err || fail "corrupt chunk: $(cat summary_corruptchunk.err)"
grep -q "unknown thread 99" summary_unknownthread.err || fail "unknown thread: $(cat summary_unknownthread.err)"
# Several files: the good one is shown, the bad one named, exit 2.
run info_mixed "$A" info gen.sqlite zero.sqlite
[ $rc -eq 2 ] && [ "$(wc -l <info_mixed.err)" -eq 1 ] && grep -q '^gen.sqlite$' info_mixed.out || fail "info of a good and a bad file"
ok
# Lying chunk headers only change the hints; decoded data is right.
expect_ok summary_liar "$A" summary --format csv liar.sqlite
run verify_liar "$A" info --verify liar.sqlite
[ $rc -eq 0 ] && grep -q 'chunk headers count 281 ranges' verify_liar.err || fail "verify of lying headers"
ok

# ---- info ---------------------------------------------------------------------------------
expect_ok info "$A" info gen.sqlite
golden info.txt info.out
grep -qx '  status: complete' info.out || fail "info status"
run info_running "$A" info running.sqlite
grep -qx '  status: running (the run did not finish: incomplete trace)' info_running.out || fail "running status: $(cat info_running.out)"
ok
expect_ok info_json "$A" info --format json gen.sqlite empty.sqlite running.sqlite
golden info.json info_json.out
py "info values" <<'EOF'
import json
rows = json.load(open("info_json.out"))["info"]
g, e, r = rows
want = dict(file="gen.sqlite", program="gen", rank=0, world_size=1, schema_version=1, status="complete",
            threads=4, threads_by_role="loader 1, main 1, worker 2", stages=8, ranges=284, counters=2,
            counter_samples=16, steps=8, first_step=0, last_step=8, tokens=8000, dropped_events=0,
            duration_s=0.8, tokens_per_s=10000.0, profile_interval=2,
            stages_by_kind="work 3, wait_input 1, wait_output 1, sync 1, comm 1, copy 1")
for k, v in want.items():
    assert g[k] == v, (k, g[k], v)
assert e["threads"] == 0 and e["ranges"] == 0 and e["steps"] == 0 and e["first_step"] is None
assert e["tokens_per_s"] is None and e["duration_s"] == 0
assert r["status"] == "running" and r["ranges"] == 284
EOF
expect_ok info_csv "$A" info --format csv gen.sqlite running.sqlite
[ "$(wc -l <info_csv.out)" -eq 3 ] || fail "info csv rows"
ok
expect_ok info_verify "$A" info --verify gen.sqlite
grep -qx '  ranges: 284 (every chunk decoded)' info_verify.out || fail "info --verify"
ok

# ---- summary ------------------------------------------------------------------------------
expect_ok summary "$A" summary gen.sqlite
golden summary.txt summary.out
expect_ok summary_csv "$A" summary --format csv gen.sqlite
golden summary.csv summary_csv.out
expect_ok summary_json "$A" summary --format json gen.sqlite
golden summary.json summary_json.out
py "summary values" <<'EOF'
import csv, json
rows = list(csv.DictReader(open("summary_csv.out")))
def row(scope, who, stage):
    key = "thread" if scope == "thread" else "role"
    found = [r for r in rows if r["scope"] == scope and r[key] == who and r["stage"] == stage]
    assert len(found) == 1, (scope, who, stage, found)
    return found[0]
def num(r, k):
    return float(r[k])
# The loader's load stage: exactly 62.5% of the thread's wall time, 50% self.
r = row("thread", "loader", "load")
assert (num(r, "total_ms"), num(r, "total_pct"), num(r, "self_ms"), num(r, "self_pct"), int(r["count"])) == (500, 62.5, 400, 50, 8), r
assert num(r, "mean_ms") == num(r, "p50_ms") == num(r, "p99_ms") == num(r, "max_ms") == 62.5
r = row("thread", "worker0", "compute")
assert (num(r, "total_ms"), int(r["count"]), num(r, "mean_ms"), num(r, "p50_ms"), num(r, "p95_ms"), num(r, "p99_ms"), num(r, "max_ms")) \
    == (505, 100, 5.05, 5.0, 9.5, 9.9, 10.0), r
r = row("thread", "worker1", "allreduce")
assert (num(r, "total_ms"), num(r, "self_ms"), num(r, "total_pct"), num(r, "self_pct")) == (200, 190, 25, 23.75), r
r = row("thread", "loader", "idle")
assert num(r, "total_ms") == 220 and r["count"] == "" and r["kind"] == "", r
r = row("role", "worker", "compute")
assert (num(r, "total_ms"), int(r["count"]), int(r["threads"]), num(r, "total_pct"), num(r, "p50_ms"), num(r, "p95_ms"), num(r, "p99_ms")) \
    == (705, 150, 2, 44.0625, 4.0, 9.3, 9.9), r
assert not [r for r in rows if r["scope"] == "role" and r["role"] in ("main", "loader")]  # one-thread roles
# Self times and idle add up to the wall time of every thread.
for t in ("main", "loader", "worker0", "worker1"):
    assert abs(sum(num(r, "self_ms") for r in rows if r["scope"] == "thread" and r["thread"] == t) - 800) < 1e-9, t
# JSON: the same numbers, as numbers.
j = json.load(open("summary_json.out"))["summary"]
assert len(j) == len(rows)
jr = [x for x in j if x["thread"] == "loader" and x["stage"] == "load"][0]
assert jr["total_pct"] == 62.5 and jr["count"] == 8 and jr["p95_ms"] == 62.5
assert [x for x in j if x["stage"] == "idle"][0]["count"] is None
EOF

# Windows: steps 2:4 is [200, 400) ms; --time 0.1:0.175 is [100, 175) ms.
expect_ok summary_steps "$A" summary --format csv --steps 2:4 --thread worker1 gen.sqlite
expect_ok summary_time "$A" summary --format csv --time 0.1:0.175 --stage allreduce,log gen.sqlite
expect_ok summary_role "$A" summary --format csv --role worker --sort name gen.sqlite
expect_ok summary_sort "$A" summary --format csv --sort count gen.sqlite
expect_ok summary_open "$A" summary --format csv --steps 6: --stage compute gen.sqlite
py "summary windows and filters" <<'EOF'
import csv
def rows(f):
    return list(csv.DictReader(open(f)))
r = {x["stage"]: x for x in rows("summary_steps.out")}
assert set(r) == {"allreduce", "stream_sync", "idle"}, r.keys()     # compute starts at 400: outside
assert (float(r["allreduce"]["total_ms"]), float(r["allreduce"]["self_ms"]), float(r["allreduce"]["total_pct"])) == (150, 140, 75), r
assert float(r["idle"]["total_ms"]) == 50
t = rows("summary_time.out")
assert {(x["thread"], x["stage"]): float(x["total_ms"]) for x in t if x["scope"] == "thread"} == {("main", "log"): 10, ("worker1", "allreduce"): 25}, t
role = [x for x in t if x["scope"] == "role"]          # worker: 25 ms of 2 x 75 ms
assert len(role) == 1 and (role[0]["stage"], float(role[0]["total_ms"]), round(float(role[0]["total_pct"]), 9)) == ("allreduce", 25, 16.666666667), role
assert not [x for x in t if x["stage"] == "idle"]        # no idle rows under --stage
ro = rows("summary_role.out")
assert {x["thread"] for x in ro if x["scope"] == "thread"} == {"worker0", "worker1"}
assert [x["stage"] for x in ro if x["thread"] == "worker1"] == ["allreduce", "compute", "stream_sync", "idle"]
o = rows("summary_open.out")
w0 = [x for x in o if x["thread"] == "worker0"][0]
# steps 6: is [600, 800) ms: worker0's ranges there (i = 89..100 partly) clipped.
# worker1's compute ranges [400 + 8j, 404 + 8j] overlap it for j = 25..49: 100 ms.
assert 0 < float(w0["total_ms"]) < 200 and [x for x in o if x["thread"] == "worker1"][0]["total_ms"] == "100.000000"
EOF
py "sort" <<'EOF'
import csv
rows = list(csv.DictReader(open("summary_sort.out")))
order = lambda t: [x["stage"] for x in rows if x["scope"] == "thread" and x["thread"] == t]
# By count, largest first; ties by stage id (queue_wait was declared before compute); idle last.
assert order("worker1") == ["compute", "allreduce", "stream_sync", "idle"], order("worker1")
assert order("worker0") == ["queue_wait", "compute", "idle"], order("worker0")
EOF

# Several files: ranks of one run (one run_id, 1700000000-100, ranks 0 and 1) get the ranks table.
expect_ok summary_ranks "$A" summary rank0.sqlite rank1.sqlite
golden summary_ranks.txt summary_ranks.out
expect_ok summary_ranks_json "$A" summary --format json rank0.sqlite rank1.sqlite
py "ranks" <<'EOF'
import json
d = json.load(open("summary_ranks_json.out"))
r = [x for x in d["ranks"] if x["role"] == "worker" and x["stage"] == "compute"][0]
assert (r["total_ms"], r["count"], r["rank0_ms"], r["rank1_ms"], r["slowest_rank"], r["p50_ms"], r["p95_ms"]) == (130, 20, 50, 80, 1, 5, 8), r
assert abs(r["slowest_vs_mean_pct"] - 100 * 15 / 65) < 1e-9
assert {x["file"] for x in d["summary"]} == {"rank0.sqlite", "rank1.sqlite"}
EOF
expect_ok summary_two_runs "$A" summary --format json gen.sqlite rank0.sqlite
python3 -c 'import json,sys; d=json.load(open("summary_two_runs.out")); assert "ranks" not in d and len({x["file"] for x in d["summary"]}) == 2' || fail "different runs are not merged"
ok
expect_ok summary_merge "$A" summary --merge --format json gen.sqlite rank0.sqlite
python3 -c 'import json,sys; d=json.load(open("summary_merge.out")); assert "ranks" in d' || fail "--merge"
ok
expect_ok summary_separate "$A" summary --separate --format json rank0.sqlite rank1.sqlite
python3 -c 'import json,sys; d=json.load(open("summary_separate.out")); assert "ranks" not in d' || fail "--separate"
ok

# An unfinished run: analysed, with one warning line; an empty one: a warning.
run summary_running "$A" summary --format csv running.sqlite
[ $rc -eq 0 ] && [ "$(wc -l <summary_running.err)" -eq 1 ] && grep -q 'incomplete' summary_running.err || fail "running trace: $(cat summary_running.err)"
ok
# The running trace is the complete one plus worker1's allreduce begun at 798 ms that never
# ended: it counts up to the trace's end at 800 ms (2 ms more, out of idle), every other row alike.
py "the running trace counts its unended range up to the trace's end" <<'EOF'
import csv
run = {(r["scope"], r["thread"], r["role"], r["stage"]): r for r in csv.DictReader(open("summary_running.out"))}
done = {(r["scope"], r["thread"], r["role"], r["stage"]): r for r in csv.DictReader(open("summary_csv.out"))}
assert run.keys() == done.keys()
strip = lambda r: {c: v for c, v in r.items() if c != "file"}
changed = {k for k in run if strip(run[k]) != strip(done[k])}
assert changed == {("thread", "worker1", "worker", "allreduce"), ("thread", "worker1", "worker", "idle"),
                   ("role", "", "worker", "allreduce"), ("role", "", "worker", "idle")}, changed
a = run[("thread", "worker1", "worker", "allreduce")]
assert (a["total_ms"], a["self_ms"], a["count"], a["p50_ms"], a["max_ms"]) == ("202.000000", "192.000000", "2", "2.000000", "200.000000"), a
assert run[("thread", "worker1", "worker", "idle")]["self_ms"] == "398.000000"
EOF
run summary_empty "$A" summary empty.sqlite
[ $rc -eq 0 ] && grep -q 'no ranges' summary_empty.err || fail "empty trace summary"
ok

# Exact percentiles past the in-memory limit: 40000 ranges of (i % 7 + 1) us.
expect_ok summary_many "$A" summary --format csv many.sqlite
py "exact percentiles on a large group" <<'EOF'
import csv
r = [x for x in csv.DictReader(open("summary_many.out")) if x["stage"] == "work"][0]
assert (int(r["count"]), r["p50_ms"], r["p95_ms"], r["p99_ms"], r["max_ms"]) == (40000, "0.004000", "0.007000", "0.007000", "0.007000"), r
EOF

# ---- intervals ----------------------------------------------------------------------------
expect_ok intervals "$A" intervals gen.sqlite
cmp intervals.out gen.intervals.txt || fail "intervals text differs from st_window_format fed directly"
ok
golden intervals.txt intervals.out
expect_ok intervals_csv "$A" intervals --format csv gen.sqlite
golden intervals.csv intervals_csv.out
expect_ok intervals_json "$A" intervals --format json gen.sqlite
golden intervals.json intervals_json.out
py "intervals values" <<'EOF'
import csv, json
rows = list(csv.DictReader(open("intervals_csv.out")))
def get(w, thread, stage):
    f = [r for r in rows if r["window"] == str(w) and r["thread_name"] == thread and r["stage"] == stage]
    assert len(f) == 1, (w, thread, stage, f)
    return f[0]
# allreduce [150, 350] ms, split by hand at the 200 ms boundary: 50 ms, then 150 - 10 (sync) = 140 ms.
r = get(0, "worker1", "allreduce")
assert (int(r["ns"]), float(r["share_pct"]), int(r["count"])) == (50_000_000, 25.0, 1), r
r = get(1, "worker1", "allreduce")
assert (int(r["ns"]), int(r["count"])) == (140_000_000, 0), r          # counted where it begins
assert int(get(1, "worker1", "stream_sync")["ns"]) == 10_000_000
assert (r["tokens"], r["tokens_per_s"], r["window_ms"], r["step_first"], r["step_last"]) == ("2000", "10000.000", "200.000000", "3", "4")
for w in range(4):
    for t in ("main", "loader", "worker0", "worker1"):
        assert sum(int(x["ns"]) for x in rows if x["window"] == str(w) and x["thread_name"] == t) == 200_000_000, (w, t)
assert get(2, "loader", "idle")["count"] == ""
j = json.load(open("intervals_json.out"))["intervals"]
assert len(j) == len(rows) and j[0]["window"] == 0 and isinstance(j[0]["ns"], int)
EOF
expect_ok intervals_every "$A" intervals --every 4 gen.sqlite
[ "$(grep -c '^profile steps' intervals_every.out)" -eq 2 ] && grep -q '^profile steps 5-8  window 0.400 s  tokens 4000  tokens/s 10000$' intervals_every.out || fail "--every 4: $(cat intervals_every.out)"
ok
expect_usage intervals_noprofile "$A" intervals empty.sqlite
grep -q 'pass --every N' intervals_noprofile.err || fail "no profile interval message"
run intervals_few "$A" intervals --every 50 gen.sqlite
[ $rc -eq 0 ] && [ ! -s intervals_few.out ] && grep -q 'no complete window of 50 steps' intervals_few.err || fail "no complete window"
ok

# ---- sql ----------------------------------------------------------------------------------
expect_ok sql "$A" sql --format csv gen.sqlite "SELECT stage_name, count(*) AS n, sum(dur_ns) AS ns FROM ranges_v GROUP BY 1 ORDER BY 1"
expect_ok sql_json "$A" sql --format json gen.sqlite "SELECT counter_name, value FROM counters_v WHERE ts_ns >= 1100000000 ORDER BY ts_ns, counter LIMIT 2"
expect_ok sql_text "$A" sql gen.sqlite "SELECT count(*) AS n, 1.5 AS x, NULL AS z FROM ranges WHERE thread = 2"
py "sql" <<'EOF'
import csv, json
r = {x["stage_name"]: (int(x["n"]), int(x["ns"])) for x in csv.DictReader(open("sql.out"))}
assert r == {"allreduce": (1, 200_000_000), "compute": (150, 705_000_000), "h2d": (8, 100_000_000),
             "load": (8, 500_000_000), "log": (8, 80_000_000), "queue_put": (8, 80_000_000),
             "queue_wait": (100, 100_000_000), "stream_sync": (1, 10_000_000)}, r
j = json.load(open("sql_json.out"))["rows"]
assert j == [{"counter_name": "lr", "value": 0.25}, {"counter_name": "queue_depth", "value": 1}], j
t = open("sql_text.out").read().split("\n")
assert t[0].split() == ["n", "x", "z"] and t[1].split() == ["200", "1.5", "-"], t
EOF
for q in "DELETE FROM meta" "INSERT INTO meta VALUES ('a', 'b')" "CREATE TABLE x(a)" "PRAGMA journal_mode=WAL" \
    "SELECT 1; SELECT 2" "ATTACH 'other.sqlite' AS o" "SELECT nope" ""; do
    expect_usage sql_refused "$A" sql gen.sqlite "$q"
done
grep -q 'ATTACH' <("$A" sql gen.sqlite "ATTACH 'x' AS y" 2>&1) || fail "attach message"
ok

# ---- export -------------------------------------------------------------------------------
expect_ok export "$A" export gen.sqlite --chrome gen.json --csv csv --rows rows.sqlite
expect_usage export_exists "$A" export gen.sqlite --chrome gen.json
expect_ok export_overwrite "$A" export gen.sqlite --chrome gen.json --overwrite
expect_ok export_outer "$A" export outer.sqlite --chrome outer.json
run export_running "$A" export running.sqlite --chrome running.json
[ $rc -eq 0 ] || fail "export of a running trace"
ok
py "chrome trace JSON" <<'EOF'
import json
def check(path, n_x, n_c, n_steps):
    d = json.load(open(path))
    ev = d["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = [e for e in ev if e["ph"] == "M" and e["name"] == "process_name"]
    assert len(procs) == 1 and procs[0]["args"]["name"].endswith("(rank 0)"), procs
    last = {}
    for e in ev:
        assert isinstance(e["name"], str) and e["name"] and e["ph"] in "MXBECi", e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] == "M":
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if e["ph"] in "XBE":
            assert e["tid"] in names, e                        # every thread is named
            assert e["ts"] >= last.get(e["tid"], 0), (e, last.get(e["tid"]))  # start order per thread
            last[e["tid"]] = e["ts"]
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["cat"] in ("work", "wait_input", "wait_output", "sync", "comm", "copy"), e
            assert isinstance(e["args"]["depth"], int), e
    count = lambda ph: sum(1 for e in ev if e["ph"] == ph)
    assert (count("X"), count("C"), count("i")) == (n_x, n_c, n_steps), (path, count("X"), count("C"), count("i"))
    assert count("B") >= count("E")
    return d, ev
d, ev = check("gen.json", 284, 16, 9)
assert d["otherData"]["program"] == "gen" and d["otherData"]["status"] == "complete"
load = [e for e in ev if e["ph"] == "X" and e["name"] == "load"][1]
assert (load["ts"], load["dur"], load["cat"], load["args"], load["tid"]) == (105000.0, 62500.0, "work", {"depth": 0, "step": 2}, 1), load
h2d = [e for e in ev if e["ph"] == "X" and e["name"] == "h2d"][0]
assert h2d["args"]["depth"] == 1 and h2d["ts"] == 20000.0 and h2d["dur"] == 12500.0
w0 = [e for e in ev if e["ph"] == "X" and e["tid"] == 2 and e["name"] == "compute"][0]
assert w0["dur"] == 0.1 * 1000 and abs(w0["ts"] - 11000.0) < 1e-9, w0   # 100 us, ns precision decimals
sort = {e["tid"]: e["args"]["sort_index"] for e in ev if e["ph"] == "M" and e["name"] == "thread_sort_index"}
# tids 1, 2, ... in role order (loader, then the role "worker" of the trainer's none, main last),
# the sort index alike; no thread's track is tid 0
names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert sort == {1: 1, 2: 2, 3: 3, 4: 4} and names == {1: "loader", 2: "worker0", 3: "worker1", 4: "main"}, (sort, names)
c = [e for e in ev if e["ph"] == "C" and e["name"] == "queue_depth"]
assert [x["args"] for x in c][:2] == [{"(items)": 0}, {"(items)": 1}], c[:2]  # the series is the unit
assert [x["args"]["(items)"] for x in c] == [0, 1, 2, 0, 1, 2, 0, 1]
assert [x["args"] for x in ev if x["ph"] == "C" and x["name"] == "lr"][0].keys() == {"value"}  # no unit
st = [e for e in ev if e["ph"] == "i"]
assert st[3]["name"] == "step 3" and st[3]["ts"] == 300000.0 and st[3]["args"] == {"step": 3, "tokens": 1000}
d, ev = check("outer.json", 70001, 0, 2)
b = [e for e in ev if e["ph"] in "BE"]
assert [(e["ph"], e["name"], e["ts"]) for e in b] == [("B", "epoch", 0.0), ("E", "epoch", 700001.0)], b
d, ev = check("running.json", 284, 16, 9)
u = [e for e in ev if e["ph"] == "B"]
assert len(u) == 1 and u[0]["args"].get("unfinished") is True and u[0]["name"] == "allreduce" and u[0]["ts"] == 798000.0, u
EOF
py "CSV and plain-rows exports" <<'EOF'
import csv, sqlite3
def rows(name):
    return list(csv.DictReader(open(f"csv/{name}.csv")))
r = rows("ranges")
assert len(r) == 284 and list(r[0]) == ["thread", "stage", "start_ns", "dur_ns", "end_ns", "depth", "step"]
assert all(int(x["end_ns"]) - int(x["start_ns"]) == int(x["dur_ns"]) >= 0 for x in r)
assert sum(int(x["dur_ns"]) for x in r if x["stage"] == "5") == 705_000_000
assert len(rows("counters")) == 16 and len(rows("threads")) == 4 and len(rows("stages")) == 8 and len(rows("steps")) == 9
assert {x["key"]: x["value"] for x in rows("meta")}["schema_version"] == "1"
assert [x["name"] for x in rows("counter_names")] == ["queue_depth", "lr"]
db = sqlite3.connect("file:rows.sqlite?mode=ro", uri=True)
got = dict(db.execute("SELECT stage_name, sum(dur_ns) FROM ranges_v GROUP BY 1"))
want = {}
for x in r:
    want[int(x["stage"])] = want.get(int(x["stage"]), 0) + int(x["dur_ns"])
names = {int(x["id"]): x["name"] for x in rows("stages")}
assert got == {names[k]: v for k, v in want.items()}, (got, want)
n, total = db.execute("SELECT count(*), sum(value) FROM counters").fetchone()
assert n == 16 and abs(total - (7 + sum(0.5 / (k + 1) for k in range(8)))) < 1e-12, (n, total)
assert db.execute("SELECT count(*) FROM ranges WHERE step IS NULL").fetchone() == (0,)
assert db.execute("SELECT value FROM meta WHERE key = 'status'").fetchone() == ("complete",)
# no GPU activity: gpu.csv and gpu_api.csv hold their header only, the tables and gpu_v no row
assert open("csv/gpu.csv").read().split() == ["device,stream,kind,name,start_ns,dur_ns,bytes,correlation,thread,stage,launch_tid,launch_thread"]
assert open("csv/gpu_api.csv").read().split() == ["thread,os_tid,api,name,cbid,start_ns,dur_ns,correlation,stage"]
assert db.execute("SELECT (SELECT count(*) FROM gpu) + (SELECT count(*) FROM gpu_api) + (SELECT count(*) FROM gpu_v)").fetchone() == (0,)
EOF
expect_ok export_stdout "$A" export gen.sqlite --chrome -
python3 -c 'import json,sys; json.load(open("export_stdout.out"))' || fail "--chrome - is not JSON"
ok
# A FIFO (like /dev/null or /dev/stdout) is written to, never replaced by a rename.
mkfifo pipe.json
timeout 20 cat pipe.json >from_pipe.json &
reader=$!
expect_ok export_fifo "$A" export gen.sqlite --chrome pipe.json
wait $reader || fail "reading the FIFO"
[ -p pipe.json ] || fail "export replaced the FIFO with a file"
cmp -s from_pipe.json gen.json || fail "export to a FIFO"
ok
expect_usage export_rows_fifo "$A" export gen.sqlite --rows pipe.json
expect_usage export_dir "$A" export gen.sqlite --chrome csv
expect_ok export_csv_again "$A" export gen.sqlite --csv csv --overwrite
expect_usage export_csv_exists "$A" export gen.sqlite --csv csv
expect_usage export_rows_exists "$A" export gen.sqlite --rows rows.sqlite

# A failed --csv export leaves nothing behind: no new directory, no staging
# directory, and an existing directory exactly as it was. A damaged counter
# chunk fails counters.csv, the last file, after the others were written.
python3 - <<'EOF'
import shutil, sqlite3
shutil.copy("gen.sqlite", "badcounters.sqlite")
db = sqlite3.connect("badcounters.sqlite")
db.execute("UPDATE counter_chunks SET data = substr(data, 1, 3) WHERE id = (SELECT max(id) FROM counter_chunks)")
db.commit()
EOF
expect_usage export_csv_fails "$A" export badcounters.sqlite --csv failed_csv
grep -q 'counter_chunks' export_csv_fails.err || fail "export_csv_fails: $(cat export_csv_fails.err)"
[ ! -e failed_csv ] || fail "a failed --csv export left failed_csv: $(ls -A failed_csv)"
! ls -d failed_csv.* 2>/dev/null || fail "a failed --csv export left a staging directory"
ok
cp -r csv kept_csv
echo "not the exporter's" >kept_csv/notes.txt
echo "an older export" >kept_csv/ranges.csv
listing() { (cd "$1" && ls -A && cat ./* | cksum); }
before=$(listing kept_csv)
expect_usage export_csv_fails_existing "$A" export badcounters.sqlite --csv kept_csv --overwrite
[ "$(listing kept_csv)" = "$before" ] || fail "a failed --csv export changed kept_csv: $(ls -A kept_csv)"
ok
# Success into the existing directory: the exporter's files replaced, others kept.
expect_ok export_csv_existing "$A" export gen.sqlite --csv kept_csv/ --overwrite
[ "$(ls -A kept_csv | tr '\n' ' ')" = "counter_names.csv counters.csv gpu.csv gpu_api.csv meta.csv notes.txt ranges.csv stages.csv steps.csv threads.csv " ] ||
    fail "export into kept_csv: $(ls -A kept_csv)"
cmp -s kept_csv/ranges.csv csv/ranges.csv || fail "kept_csv/ranges.csv was not replaced"
expect_ok export_csv_slash "$A" export gen.sqlite --csv new_csv/
[ "$(ls -A new_csv | wc -l)" -eq 9 ] && ! ls -d new_csv.* 2>/dev/null || fail "export into new_csv/: $(ls -A)"
ok

echo "it_analyze: $n_checks checks passed"
