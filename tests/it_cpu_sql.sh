#!/usr/bin/env bash
# it_cpu_sql.sh: the CPU capture through SQL and the exports, on a real
# --trace-cpu run of the trainer (CPU backend, 40 steps, profile lines every
# 10 steps; docs/trace-format.md "Row views", docs/analyze.md "sql",
# "export", "intervals"):
#  - analyze sql: per thread, the rows of cpu_samples, cpu_switches and
#    cpu_lost add up to cpu_threads' samples, switches and lost; a time
#    window pushed down gives the rows (by rowid) that SQLite's own filter
#    (+ts_ns, never pushed) gives; every sample's stack has its cpu_stack_text
#    row, and cpu_samples_v names the target's forward functions (k_*);
#  - the loadable extension in the sqlite3 shell counts the same rows;
#  - export --csv and --rows: the CPU files and tables hold the rows analyze
#    sql gives; a trace without the CPU tables gets none of them;
#  - a damaged cpu chunk: analyze sql and export fail with one line naming
#    cpu_chunks, exit 2;
#  - cpu_ranges: each range's on-CPU + preempted + blocked is its span, and
#    the sums agree with analyze cpu's stages (leaf stages exactly; per
#    thread, the depth-0 ranges against all stages but (none));
#  - the trainer's own profile lines (oncpu shares included) are what
#    analyze intervals prints from the trace, byte for byte.
#
#   bash tests/it_cpu_sql.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
TRAINER="$BUILD/trainer"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$TRAINER" ] || { echo "SKIP: $TRAINER is not built"; exit 0; }
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 is needed"; exit 0; }

it_enter_tmp

run tr "$TRAINER" --steps 40 --profile-interval 10 --trace run.sqlite --trace-cpu --overwrite
[ $rc -eq 0 ] || fail "trainer: exit $rc: $(tail -5 tr.err)"
[ "$(sqlite3 run.sqlite "select value from meta where key = 'cpu_mode'")" = perf ] ||
    { echo "SKIP: perf events refused here: $(sqlite3 run.sqlite "select value from meta where key = 'cpu_reason'")"; exit 0; }
ok

q() { "$A" sql --format csv run.sqlite "$1" | tail -n +2; }
bad=$(q "SELECT count(*) FROM cpu_threads t WHERE t.samples != (SELECT count(*) FROM cpu_samples s WHERE s.thread = t.thread)
         OR t.switches != (SELECT count(*) FROM cpu_switches s WHERE s.thread = t.thread)
         OR t.lost != (SELECT coalesce(sum(n), 0) FROM cpu_lost s WHERE s.thread = t.thread)")
[ "$bad" = 0 ] || fail "cpu_threads' counts differ from the rows for $bad threads"
n_samples=$(q "SELECT count(*) FROM cpu_samples")
[ "$n_samples" = "$(sqlite3 run.sqlite "select sum(samples) from cpu_threads")" ] || fail "samples: $n_samples"
[ "$n_samples" -gt 0 ] || fail "no samples"
ok
for t in cpu_samples cpu_switches; do
    # the thread with the most rows of this table (a thread of the CPU backend can take no
    # sample at all when a sanitizer build leaves it little CPU time), and a window that starts
    # at its middle row, so that it holds at least that row however sparse the rows are
    th=$(q "SELECT thread FROM $t GROUP BY thread ORDER BY count(*) DESC, thread LIMIT 1")
    [ -n "$th" ] || fail "$t: no rows"
    mid=$(q "SELECT ts_ns FROM $t WHERE +thread = $th ORDER BY +ts_ns LIMIT 1 OFFSET (SELECT count(*) / 2 FROM $t WHERE +thread = $th)")
    [ -n "$mid" ] || fail "$t: no rows of thread $th"
    a=$(q "SELECT count(*), sum(rowid) FROM $t WHERE ts_ns >= $mid AND ts_ns < $mid + 100000000 AND thread = $th")
    b=$(q "SELECT count(*), sum(rowid) FROM $t WHERE +ts_ns >= $mid AND +ts_ns < $mid + 100000000 AND +thread = $th")
    [ "$a" = "$b" ] || fail "$t: window pushed down $a, filtered $b"
    case "$a" in 0,*) fail "$t: empty window" ;; esac
done
ok
[ "$(q "SELECT count(*) FROM cpu_samples s LEFT JOIN cpu_stack_text x ON x.stack = s.stack WHERE x.stack IS NULL")" = 0 ] ||
    fail "samples without their stack's row"
q "SELECT DISTINCT leaf FROM cpu_samples_v WHERE thread_name = 'target0' AND stage_name = 'forward'" | grep -q '^k_' ||
    fail "no k_ function in target0's forward samples"
ok

# the loadable extension in the shell
if ext=$(sqlite3 -batch run.sqlite ".load $BUILD/stagetrace_ext" "SELECT count(*) FROM cpu_samples_v" 2>&1); then
    [ "$ext" = "$n_samples" ] || fail "extension: $ext samples, analyze sql $n_samples"
    ok
elif grep -qE "runtime does not come first|libtsan|libasan" <<<"$ext"; then
    echo "it_cpu_sql: the sanitizer build's extension cannot load into the sqlite3 shell: that check skipped"
else
    fail "sqlite3 .load: $ext"
fi

# exports
expect_ok csv "$A" export run.sqlite --csv out --rows rows.sqlite
for t in cpu_samples cpu_switches cpu_lost cpu_stack_text cpu_frames cpu_threads cpu_windows cpu_blocks; do
    [ -f "out/$t.csv" ] || fail "export --csv: no $t.csv"
    n_csv=$(($(wc -l < "out/$t.csv") - 1))
    n_sql=$(q "SELECT count(*) FROM $t")
    [ "$n_csv" = "$n_sql" ] || fail "$t.csv: $n_csv rows, analyze sql $n_sql"
    [ "$(sqlite3 rows.sqlite "select count(*) from $t")" = "$n_sql" ] || fail "--rows $t"
done
[ "$(head -1 out/cpu_samples.csv)" = "thread,ts_ns,stage,stack,stage_from_ranges" ] || fail "cpu_samples.csv header"
[ "$(sqlite3 rows.sqlite "select count(*), sum(length(frames)) from cpu_samples_v")" = \
  "$(q "SELECT count(*), sum(length(frames)) FROM cpu_samples_v" | tr , '|')" ] || fail "--rows cpu_samples_v"
ok
cp run.sqlite nocpu.sqlite
sqlite3 nocpu.sqlite "drop table cpu_threads; drop table cpu_chunks; drop table cpu_stacks; drop table cpu_maps;
                      drop table cpu_symbols; drop table cpu_windows; drop table cpu_blocks"
expect_ok nocsv "$A" export nocpu.sqlite --csv noout --rows norows.sqlite
[ "$(ls noout | grep -c '^cpu_')" = 0 ] || fail "CPU files for a trace without the capture: $(ls noout)"
[ "$(sqlite3 norows.sqlite "select count(*) from sqlite_schema where name like 'cpu%'")" = 0 ] || fail "CPU tables in --rows"
ok

# cpu_ranges: each range's own on-CPU, preempted and blocked time adds up
# to its span, and agrees with analyze cpu's per-stage figures (self time):
# exactly for a stage whose ranges never hold another range, and, per
# thread, the depth-0 ranges' sums are the stages' sums without (none)
"$A" sql --format csv run.sqlite "SELECT thread, stage, start_ns, dur_ns, depth, on_cpu_ns, preempted_ns, blocked_ns
                                  FROM cpu_ranges" > cpu_ranges.csv
expect_ok cpustages "$A" cpu --format csv --table stages run.sqlite
python3 - cpu_ranges.csv cpustages.out "$("$A" sql --format csv run.sqlite "SELECT id, name FROM threads" | tail -n +2 | tr '\n' ' ')" \
    "$("$A" sql --format csv run.sqlite "SELECT id, name FROM stages" | tail -n +2 | tr '\n' ' ')" <<'PY' ||
import csv, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
assert rows, "no cpu_ranges rows"
for r in rows:
    for k in r: r[k] = int(r[k])
    assert r["on_cpu_ns"] + r["preempted_ns"] + r["blocked_ns"] == r["dur_ns"], r
    assert min(r["on_cpu_ns"], r["preempted_ns"], r["blocked_ns"]) >= 0, r
tname = dict(x.split(",", 1) for x in sys.argv[3].split())
sname = dict(x.split(",", 1) for x in sys.argv[4].split())
stages = {(s["thread"], s["stage"]): s for s in csv.DictReader(open(sys.argv[2]))}
# a stage holds another range when a range of depth d + 1 starts inside one of its ranges
by_thread = collections.defaultdict(list)
for r in rows: by_thread[r["thread"]].append(r)
parents = set()
for t, rs in by_thread.items():
    rs.sort(key=lambda r: (r["start_ns"], r["depth"]))
    open_ = []
    for r in rs:
        while open_ and (open_[-1]["start_ns"] + open_[-1]["dur_ns"] <= r["start_ns"] or open_[-1]["depth"] >= r["depth"]):
            open_.pop()
        if open_: parents.add((t, open_[-1]["stage"]))
        open_.append(r)
sums = collections.defaultdict(lambda: [0, 0, 0])
top = collections.defaultdict(lambda: [0, 0, 0])
for r in rows:
    k = (r["thread"], r["stage"])
    for i, c in enumerate(("on_cpu_ns", "preempted_ns", "blocked_ns")):
        sums[k][i] += r[c]
        if r["depth"] == 0: top[r["thread"]][i] += r[c]
def ns(ms): return round(float(ms) * 1e6)
leaf = 0
for (t, s), v in sums.items():
    if (t, s) in parents: continue
    a = stages[(tname[str(t)], sname[str(s)])]
    on, wall = ns(a["on_cpu_ms"]), ns(a["wall_ms"])
    pre = round(float(a["preempted_pct"]) / 100 * wall)
    assert abs(on - v[0]) <= 1, (t, s, on, v)
    assert abs(pre - v[1]) <= max(2, wall * 1e-9), (t, s, pre, v)
    leaf += 1
for t, v in top.items():
    on = sum(ns(a["on_cpu_ms"]) for (tn, sn), a in stages.items() if tn == tname[str(t)] and sn != "(none)")
    n_rows = sum(1 for (tn, sn) in stages if tn == tname[str(t)])
    assert abs(on - v[0]) <= n_rows, (t, on, v)
print("cpu_ranges: %d ranges; %d leaf stages agree with analyze cpu, and the depth-0 sums of %d threads" % (len(rows), leaf, len(top)))
assert leaf > 0
PY
    fail "cpu_ranges against analyze cpu"
ok

# a damaged chunk
cp run.sqlite bad.sqlite
sqlite3 bad.sqlite "UPDATE cpu_chunks SET data = x'5003' WHERE id = (SELECT min(id) FROM cpu_chunks)"
expect_usage badsql "$A" sql bad.sqlite "SELECT count(*) FROM cpu_switches"
grep -q "trace table 'cpu_chunks'" badsql.err || fail "badsql: $(cat badsql.err)"
[ "$(wc -l < badsql.err)" = 1 ] || fail "badsql: not one line: $(cat badsql.err)"
expect_usage badcsv "$A" export bad.sqlite --csv badout
grep -q "trace table 'cpu_chunks'" badcsv.err || fail "badcsv: $(cat badcsv.err)"
[ ! -e badout ] || fail "a failed --csv left badout"
ok

# online = offline: the profile lines, on-CPU shares included
grep -E '^(profile|  )' tr.out > online.txt
grep -q '  oncpu [0-9]*\.[0-9]%$' online.txt || fail "no on-CPU share in the profile lines: $(head -3 online.txt)"
expect_ok intervals "$A" intervals run.sqlite
cmp -s online.txt intervals.out || fail "analyze intervals differs from the profile lines: $(diff online.txt intervals.out | head -5)"
expect_ok intervals_every "$A" intervals --every 20 run.sqlite
grep -q oncpu intervals_every.out && fail "--every 20 (not the trace's 10) shows shares"
ok
echo "it_cpu_sql: $n_checks checks passed"
