#!/usr/bin/env bash
# it_cpu_analyze.sh: `analyze cpu` on real --trace-cpu runs of the trainer
# (CPU backend; docs/analyze.md, "cpu"):
#  - one process, 200 steps: exit 0, nothing on stderr; every stages row has
#    on + preempted + blocked = 100 %, and per thread the stages' wall adds
#    up to the thread's (exact in CSV); the compute stages (work, 100 ms or
#    more) are at most 10 % blocked (on-CPU, or preempted by the other work
#    of this 2-core host); the queue waits (the loader's queue_put, the
#    drafter's queue_wait, main's step_wait) at least 80 % blocked; the target
#    thread's forward samples name the CPU kernels (k_matmul) as self
#    functions; each stage's block reasons add up to its blocked time (100 %
#    of it), its libraries' self samples to at most its samples; the
#    os_threads table lists registered threads by name and at least one the
#    trainer did not register (the writer), and the windows table
#    (--windows) adds up to it per thread; --stage forward keeps forward
#    only; text, csv and json all
#    print; the trace without its CPU tables: one line, exit 2; hostile CPU
#    tables (a chunk that does not decode or miscounts, a stack that does
#    not, samples naming stacks that are gone, an unknown thread or map, a
#    mistyped status, a view, a table missing beside the others, a block
#    seen before it began, a window row naming an unknown thread): exit 2
#    and the one line naming the table;
#  - tests/test_cpu_record's recorder (usleep, a condition-variable wait, a
#    pipe read fed by the unregistered thread "feeder", 20-60 ms blocks):
#    spin and burn never blocked (on-CPU or preempted: >= 99 %), the waits at
#    most 5 % on-CPU; >= 90 % of the sleep and nap stages' blocked time is
#    clock_nanosleep/nanosleep, of cond's futex, of pipe's read (a loaded
#    host can hold the writer off past a block: then the recording is made
#    once more), under 10 % another reason; burn's library by self samples
#    is the recorder's own file (>= 90 %); os_threads: main's on-CPU time is
#    cpu_windows' sum for its os_tid and within 2 % of its CPU clock
#    (written beside the trace), the windows table adds up to it, "feeder"
#    is there unregistered; --steps 1:2 keeps the window to mark 2;
#  - under mpirun (2 processes, skipped without mpirun or an MPI trainer):
#    the rank set's threads r0/... and r1/..., each rank's compute mostly
#    unblocked, its frames named.
#
#   bash tests/it_cpu_analyze.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
TRAINER="$BUILD/trainer"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$TRAINER" ] || { echo "SKIP: $TRAINER is not built"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the tables"; exit 0; }
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 is needed to drop the tables"; exit 0; }

it_enter_tmp

run tr "$TRAINER" --steps 200 --trace run.sqlite --trace-cpu --overwrite
[ $rc -eq 0 ] || fail "trainer: exit $rc: $(tail -5 tr.err)"
[ "$(sqlite3 run.sqlite "select value from meta where key = 'cpu_mode'")" = perf ] ||
    { echo "SKIP: perf events refused here: $(sqlite3 run.sqlite "select value from meta where key = 'cpu_reason'")"; exit 0; }
ok
expect_ok text "$A" cpu run.sqlite
grep -q '^== run.sqlite: CPU per thread and stage over ' text.out || fail "text: no heading: $(head -2 text.out)"
ok
expect_ok csv "$A" cpu --format csv --top 5 --windows run.sqlite
expect_ok json "$A" cpu --format json run.sqlite
python3 -c 'import json,sys; d=json.load(open("json.out")); assert list(d) == ["threads","stages","functions","blocks","libraries","os_threads"], d.keys()' ||
    fail "json: not the six tables"
ok

# check CSV [SET]: the invariants and the shares, on the tables of CSV
check() {
    ST_CSV="$1" ST_SET="${2:-}" py "check $1" <<'EOF'
import csv, io, os
text = open(os.environ["ST_CSV"]).read()
blocks = [b for b in text.strip().split("\n\n")]
threads, stages, functions, reasons, libraries, os_threads, windows = (list(csv.DictReader(io.StringIO(b))) for b in blocks)
is_set = bool(os.environ["ST_SET"])
assert threads and stages and functions and reasons and libraries and os_threads and windows
wall = {}
for s in stages:
    w = float(s["wall_ms"])
    wall[s["thread"]] = wall.get(s["thread"], 0) + w
    if w > 0:
        tot = float(s["on_cpu_pct"]) + float(s["preempted_pct"]) + float(s["blocked_pct"])
        assert abs(tot - 100) < 1e-6, (s, tot)
    name = s["thread"].split("/")[-1]
    if s["kind"] == "work" and w >= 100:
        assert float(s["blocked_pct"]) <= 10, ("a compute stage blocked", s)
    if (name, s["stage"]) in {("loader", "queue_put"), ("drafter0", "queue_wait"), ("main", "step_wait")} and w >= 100:
        assert float(s["blocked_pct"]) >= 80, ("a queue wait not blocked", s)
for t in threads:
    if t["status"] != "perf":
        continue
    assert abs(wall.get(t["thread"], 0) - float(t["wall_ms"])) < 1e-5, (t, wall.get(t["thread"]))
blocked, share, lib_self = {}, {}, {}
for b in reasons:
    k = (b["thread"], b["stage"])
    blocked[k] = blocked.get(k, 0) + float(b["blocked_ms"])
    share[k] = share.get(k, 0) + float(b["pct"])
for s in stages:
    k = (s["thread"], s["stage"])
    want = float(s["wall_ms"]) * float(s["blocked_pct"] or 0) / 100
    if want > 0.01:
        assert abs(blocked.get(k, 0) - want) < 1e-3 * max(1, want), (s, blocked.get(k))
        assert abs(share[k] - 100) < 1e-6, (k, share[k])
    for l in libraries:
        if (l["thread"], l["stage"]) == k:
            lib_self[k] = lib_self.get(k, 0) + int(l["self"])
            assert int(l["self"]) <= int(l["inclusive"]) <= int(s["samples"]), (l, s)
    assert lib_self.get(k, 0) <= int(s["samples"])
names = {t["thread"] for t in threads}
registered = {o["thread"] for o in os_threads if o["registered"] == "yes"}
assert registered and registered <= names, (registered, names)
assert any(o["registered"] == "no" for o in os_threads), os_threads
per_thread = {}
for w in windows:
    k = (w["thread"], w["os_tid"])
    per_thread[k] = per_thread.get(k, 0) + float(w["on_cpu_ms"])
for o in os_threads:
    got = per_thread.get((o["thread"], o["os_tid"]), 0)
    assert abs(got - float(o["on_cpu_ms"])) < 1e-5 * max(1, int(o["windows"])), (o, got)
fwd = [f for f in functions if f["thread"].split("/")[-1] == "target0" and f["stage"] == "forward" and f["by"] == "self"]
assert fwd and any(f["function"].startswith("k_") for f in fwd), fwd
# a call through the PLT is "[plt]", never the sizeless _init before it (docs/trace-format.md)
assert not any(f["function"] == "_init" for f in fwd), fwd
assert len([f for f in fwd]) <= 5  # --top 5: a sanitizer build puts its runtime and the PLT first
if is_set:
    ranks = {t["thread"].split("/")[0] for t in threads}
    assert ranks == {"r0", "r1"}, ranks
EOF
}
check csv.out

expect_ok stage "$A" cpu --format csv --stage forward run.sqlite
python3 - <<'EOF' || fail "--stage forward: other stages shown"
import csv, io
blocks = open("stage.out").read().strip().split("\n\n")
for b in blocks[1:5]:
    rows = list(csv.DictReader(io.StringIO(b)))
    assert all(r["stage"] == "forward" for r in rows), rows
assert list(csv.DictReader(io.StringIO(blocks[1]))), "no forward row"
EOF
ok

cp run.sqlite nocpu.sqlite
sqlite3 nocpu.sqlite "drop table cpu_threads; drop table cpu_chunks; drop table cpu_stacks; drop table cpu_maps; drop table cpu_symbols"
expect_usage nocpu "$A" cpu nocpu.sqlite
grep -q 'has no CPU capture (record with --trace-cpu / st_options.cpu)' nocpu.err || fail "nocpu: $(cat nocpu.err)"
ok

# ---- hostile CPU tables: exit 2 and the one line naming the table ------------------------
python3 - <<'PYEOF'
import shutil, sqlite3
def make(name, sql):
    shutil.copy("run.sqlite", name)
    db = sqlite3.connect(name)
    db.executescript(sql)
    db.commit()
    db.close()
make("h_chunk.sqlite", "UPDATE cpu_chunks SET data = x'5003' WHERE id = (SELECT min(id) FROM cpu_chunks)")
make("h_count.sqlite", "UPDATE cpu_chunks SET n_records = n_records + 1 WHERE id = (SELECT min(id) FROM cpu_chunks)")
make("h_stack.sqlite", "UPDATE cpu_stacks SET n_frames = n_frames + 1 WHERE id = 0")
make("h_nostack.sqlite", "DELETE FROM cpu_stacks")
make("h_thread.sqlite", "UPDATE cpu_chunks SET thread = 99 WHERE id = (SELECT min(id) FROM cpu_chunks)")
make("h_status.sqlite", "UPDATE cpu_threads SET status = x'00' WHERE thread = 0")
make("h_map.sqlite", "UPDATE cpu_symbols SET map = 9999 WHERE addr = (SELECT min(addr) FROM cpu_symbols WHERE map >= 0)")
make("h_view.sqlite", "DROP TABLE cpu_maps; CREATE VIEW cpu_maps AS SELECT 0 AS id, 0 AS start, 0 AS end, 0 AS file_offset, '' AS path, '' AS build_id")
make("h_missing.sqlite", "DROP TABLE cpu_symbols")
make("h_block.sqlite", "INSERT INTO cpu_blocks(thread, t_ns, seen_ns, syscall, name, arg0, arg1, wchan) "
     "SELECT thread, 5000, 1000, 0, 'read', 0, 0, '' FROM cpu_threads WHERE status = 'perf' LIMIT 1")
make("h_window.sqlite", "UPDATE cpu_windows SET thread = 99 WHERE rowid = (SELECT min(rowid) FROM cpu_windows)")
PYEOF
for h in chunk:cpu_chunks count:cpu_chunks stack:cpu_stacks nostack:cpu_chunks thread:cpu_chunks status:cpu_threads \
    map:cpu_symbols view:cpu_maps missing:cpu_symbols block:cpu_blocks window:cpu_windows; do
    name=${h%%:*} table=${h#*:}
    expect_usage "h_$name" timeout 60 "$A" cpu "h_$name.sqlite"
    grep -q "trace table '$table'" "h_$name.err" || fail "h_$name: $(cat "h_$name.err")"
    ok
done

# ---- block reasons, libraries and schedstat windows of test_cpu_record's recorder ---------
REC="$BUILD/tests/test_cpu_record"
if [ -x "$REC" ]; then
    for attempt in 1 2; do
        run rec "$REC" --record rec.sqlite
        [ $rc -eq 0 ] || fail "recorder: exit $rc: $(cat rec.err)"
        expect_ok reccsv "$A" cpu --format csv --windows --top 10 rec.sqlite
        set +e
        python3 - <<'EOF' > reccheck.out 2>&1
import csv, io, sqlite3
blocks = open("reccsv.out").read().strip().split("\n\n")
threads, stages, functions, reasons, libraries, os_threads, windows = (list(csv.DictReader(io.StringIO(b))) for b in blocks)
want = {"sleep": ("clock_nanosleep:", "nanosleep:"), "nap": ("clock_nanosleep:", "nanosleep:"),
        "cond": ("futex:",), "pipe": ("read:",)}
late = []
for stage, prefixes in want.items():
    rows = [r for r in reasons if r["thread"] == "main" and r["stage"] == stage]
    right = sum(float(r["pct"]) for r in rows if r["reason"].startswith(prefixes))
    wrong = sum(float(r["pct"]) for r in rows if not r["reason"].startswith(prefixes) and r["reason"] != "(short/unexamined)")
    print(f"{stage}: {right:.1f} % of the blocked time {prefixes}, {wrong:.1f} % other reasons")
    assert wrong < 10, (stage, rows)  # a reason that is not the stage's: wrong whatever the load
    if right < 90:
        late.append(stage)
# the spins are on the CPU whenever they are not preempted (this 2-core host is shared, so a spin
# may wait for a core), never blocked; the waits are off it
for r in stages:
    if r["thread"] != "main" or r["stage"] == "(none)":
        continue
    on, pre, blk = float(r["on_cpu_pct"]), float(r["preempted_pct"]), float(r["blocked_pct"])
    print(f"{r['stage']}: on-CPU {on:.1f} %, preempted {pre:.1f} %, blocked {blk:.1f} %")
    if r["stage"] in ("spin", "burn"):
        assert blk <= 1 and on + pre >= 99, r
    else:
        assert on <= 5, r
burn = [l for l in libraries if l["thread"] == "main" and l["stage"] == "burn"]
assert burn and burn[0]["library"].endswith("/test_cpu_record") and float(burn[0]["self_pct"]) >= 90, burn
print(f"burn: {burn[0]['self_pct']} % of its samples' leaf frames in {burn[0]['library']}")
db = sqlite3.connect("rec.sqlite")
tid = db.execute("SELECT os_tid FROM cpu_threads WHERE thread = 0").fetchone()[0]
total = db.execute("SELECT sum(oncpu_ns) FROM cpu_windows WHERE os_tid = ?", (tid,)).fetchone()[0]
main = [o for o in os_threads if o["thread"] == "main"]
assert len(main) == 1 and main[0]["registered"] == "yes" and int(main[0]["os_tid"]) == tid, main
assert abs(float(main[0]["on_cpu_ms"]) - total / 1e6) < 2e-6, (main, total)
cpu = [int(x) for x in open("rec.sqlite.cpu").read().split()]  # at marks 0..3, end, before st_open, after it
print(f"main on-CPU {total / 1e6:.3f} ms (schedstat) vs {(cpu[4] - cpu[6]) / 1e6:.3f}-{(cpu[4] - cpu[5]) / 1e6:.3f} ms (CPU clock)")
assert 0.98 * (cpu[4] - cpu[1]) <= total <= 1.02 * (cpu[4] - cpu[5]), (total, cpu)
mine = sum(float(w["on_cpu_ms"]) for w in windows if w["thread"] == "main")
assert abs(mine - total / 1e6) < 1e-5 * len(windows), (mine, total)
assert any(o["thread"] == "feeder" and o["registered"] == "no" for o in os_threads), os_threads
assert late == [], ("the writer came late to", late)
EOF
        rcheck=$?
        set -e
        cat reccheck.out
        [ $rcheck -eq 0 ] && break
        { grep -q "the writer came late to" reccheck.out && [ $attempt -eq 1 ]; } || fail "recorder's trace: $(tail -3 reccheck.out)"
        echo "it_cpu_analyze: the writer missed blocks (a loaded host): recording once more"
    done
    ok
    # --lines: burn_leaf's self line is in its body where the trace has lines (cpu_lines libdw);
    # without --lines the output is the same but for the functions table's line column
    expect_ok reclines "$A" cpu --format csv --top 10 --lines rec.sqlite
    expect_ok recnolines "$A" cpu --format csv --top 10 rec.sqlite
    export CPU_LINES=$(sqlite3 rec.sqlite "select value from meta where key = 'cpu_lines'")
    export LEAF_FIRST=$(grep -n '^__attribute__((noinline, noclone)) static uint64_t burn_leaf' "$ROOT/tests/test_cpu_record.c" | cut -d: -f1)
    export LEAF_LAST=$(awk -v a="$LEAF_FIRST" 'NR > a && /^}/ { print NR; exit }' "$ROOT/tests/test_cpu_record.c")
    python3 - <<'EOF' || fail "--lines: burn_leaf's line"
import csv, io, os
with_lines = [list(csv.DictReader(io.StringIO(b))) for b in open("reclines.out").read().strip().split("\n\n")]
without = [list(csv.DictReader(io.StringIO(b))) for b in open("recnolines.out").read().strip().split("\n\n")]
fns = with_lines[2]
assert [{k: v for k, v in r.items() if k != "line"} for r in fns] == without[2]
assert with_lines[:2] + with_lines[3:] == without[:2] + without[3:]
leaf = [r for r in fns if r["stage"] == "burn" and r["by"] == "self" and r["function"] == "burn_leaf"]
assert leaf, fns
if os.environ["CPU_LINES"] == "libdw":
    path, line = leaf[0]["line"].rsplit(":", 1)
    assert path.endswith("/tests/test_cpu_record.c"), leaf
    assert int(os.environ["LEAF_FIRST"]) <= int(line) <= int(os.environ["LEAF_LAST"]), leaf
    print("burn_leaf's hottest line:", leaf[0]["line"])
else:
    assert leaf[0]["line"] == "", leaf
    print("no cpu_lines in this build: line empty")
EOF
    ok
    # --steps 1:2: the one window that ends at mark 2 (its midpoint inside)
    expect_ok recsteps "$A" cpu --format csv --windows --steps 1:2 rec.sqlite
    python3 - <<'EOF' || fail "--steps 1:2: not the window to mark 2"
import csv, io
blocks = open("recsteps.out").read().strip().split("\n\n")
windows = list(csv.DictReader(io.StringIO(blocks[6])))
assert windows and {w["step"] for w in windows} == {"2"}, windows
EOF
    ok
else
    echo "it_cpu_analyze: $REC not built: the recorder part skipped"
fi

# ---- a rank set under mpirun -------------------------------------------------------------
# ---- the signal sampler: the recorder under a seccomp filter refusing perf_event_open --------
if [ -x "$REC" ]; then
    run refused "$REC" --record-refused refused.sqlite
    [ $rc -eq 0 ] || fail "recorder under seccomp: exit $rc: $(cat refused.err)"
    mode=$(sqlite3 refused.sqlite "SELECT value FROM meta WHERE key = 'cpu_mode'")
    [ "$mode" = timer ] || fail "under seccomp: cpu_mode '$mode', not timer"
    ok
    expect_ok refcsv "$A" cpu --format csv --top 5 refused.sqlite
    expect_ok reftxt "$A" cpu refused.sqlite
    grep -q "^no switch records for main: sampled by the signal sampler (timer)" reftxt.out ||
        fail "under seccomp: no line saying the split is unknown: $(tail -3 reftxt.out)"
    ok
    python3 - <<'PY' || fail "analyze cpu of a timer-mode trace"
import csv, io
blocks = open("refcsv.out").read().strip().split("\n\n")
threads, stages, functions = (list(csv.DictReader(io.StringIO(b))) for b in blocks[:3])
main = [t for t in threads if t["thread"] == "main"][0]
assert main["status"] == "timer" and main["on_cpu_ms"] == "" and main["on_cpu_pct"] == "", main
burn = [s for s in stages if s["thread"] == "main" and s["stage"] == "burn"][0]
assert int(burn["samples"]) >= 20 and burn["on_cpu_ms"] == "" and burn["blocked_pct"] == "", burn
incl = [f for f in functions if f["thread"] == "main" and f["stage"] == "burn" and f["by"] == "inclusive" and f["function"] == "burn"]
assert incl and float(incl[0]["pct"]) >= 90, incl
print("timer mode: burn", burn["samples"], "samples,", incl[0]["pct"], "% with burn")
PY
    ok
    expect_ok reffold "$A" export refused.sqlite --folded refused.folded
    n=$(awk '$0 ~ /^main;burn;/ { s += $NF } END { print s + 0 }' refused.folded)
    [ "$n" -ge 20 ] || fail "under seccomp: folded burn samples $n"
    ok
fi

if command -v mpirun >/dev/null && "$TRAINER" --version | grep -q 'multi-process: mpi'; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    run mpi timeout 120 mpirun --oversubscribe -np 2 "$TRAINER" --steps 100 --layout targets=1,drafters=1 \
        --trace set/ --trace-cpu --overwrite
    [ $rc -eq 0 ] || fail "mpirun: exit $rc: $(tail -5 mpi.err)"
    ok
    run setcsv "$A" cpu --format csv --top 5 --windows set/
    [ $rc -eq 0 ] || fail "analyze cpu set/: exit $rc: $(cat setcsv.err)"
    ok
    # the target rank's thread is r0/target0 (rank 0 holds the targets)
    check setcsv.out set
else
    echo "it_cpu_analyze: mpirun or an MPI trainer missing: the rank set part skipped"
fi
echo "it_cpu_analyze: $n_checks checks passed"
