#!/usr/bin/env bash
# it_cpu_firefox.sh: `analyze export --firefox` (docs/analyze.md, "export")
# on recorded CPU traces: the recorder of tests/test_cpu_record.c (stages
# spin, sleep and burn, where burn() runs only in stage burn; step marks)
# and the trainer (four threads, 60 steps), both with the CPU capture on.
# On each export, python3's json module parses it and the checks are:
#  - the file starts with {"meta" (what Perfetto sniffs), meta holds the
#    processed-format version 65, the categories (Other, the six kinds,
#    step) and the stage and step marker schemas;
#  - every table of `shared` has all its columns `length` long, every
#    stack's frame and every frame's function exist, every prefix is null
#    or an earlier stack (so chains end), every string index and resource
#    index is valid, stage root frames have their kind's category;
#  - per thread: the columns `length` long, every sample's stack exists, its
#    times never decrease and lie in [profilingStartTime, profilingEndTime),
#    the sample count equals `analyze cpu --format csv`'s samples (the same
#    window), markers: as many as `analyze sql` counts ranges of the thread
#    (in the window: overlapping it, as docs/analyze.md says), plus the step
#    marks on the main thread; each range marker named after its stage with
#    its kind's category, intervals with start <= end;
#  - the recorder: >= 90 % of the samples rooted in stage:burn have a frame
#    "burn", and their count equals `analyze cpu`'s samples of stage burn;
#  - a window (--time 0.2:0.6, --steps 1:2) gives the counts of the window;
#  - Python-frame samples (test_cpu_pysample --record-py, variant mixed),
#    whole and --steps 2:5: each thread's on an entry "NAME (Python)" right
#    after its own (tid 2100000000 + id, not the main thread, no markers),
#    as many as `analyze cpu`'s python table counts, frames stage: and py::
#    only; the thread's own entry keeps the kernel's count;
#  - a rank set of the trainer under mpirun (2 ranks): a pid per rank, the
#    samples per thread as `analyze cpu` counts them on the set, a range
#    marker per range of each rank;
#  - the trace without its CPU tables: markers as before, no samples, exit 0;
#  - an unwritable path, --steps without --firefox: one line, exit 2.
#
#   bash tests/it_cpu_firefox.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
REC="$BUILD/tests/test_cpu_record"
TRAINER="$BUILD/trainer"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$REC" ] || { echo "SKIP: $REC is not built"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the JSON"; exit 0; }
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 is needed to drop the tables"; exit 0; }

it_enter_tmp

run rec "$REC" --record rec.sqlite
[ $rc -eq 0 ] || fail "recorder: exit $rc: $(tail -5 rec.err)"
[ "$(sqlite3 rec.sqlite "select value from meta where key = 'cpu_mode'")" = perf ] ||
    { echo "SKIP: perf events refused here: $(sqlite3 rec.sqlite "select value from meta where key = 'cpu_reason'")"; exit 0; }
ok

# check TRACE EXPORT.json [WINDOW_ARGS...]: the checks above; BURN=1 adds the burn ones
check() {
    local trace=$1 out=$2
    shift 2
    "$A" cpu --format csv --top 0 "$@" "$trace" >"$out.cpu" || fail "analyze cpu $*: exit $?"
    "$A" sql --format csv "$trace" "select id, os_tid, name, role from threads" >"$out.threads"
    "$A" sql --format csv "$trace" "select thread, stage, start_ns, end_ns from ranges" >"$out.ranges"
    "$A" sql --format csv "$trace" "select step, ts_ns from steps" >"$out.steps"
    "$A" sql --format csv "$trace" "select id, name, kind from stages" >"$out.stages"
    ST_OUT="$out" ST_WINDOW="$*" ST_BURN="${BURN:-0}" ST_START_NS="$(sqlite3 "$trace" "select value from meta where key = 'start_ns'")" \
        py "check $out $*" <<'EOF'
import csv, io, json, os
out = os.environ["ST_OUT"]
window = os.environ["ST_WINDOW"].split()
raw = open(out, "rb").read()
assert raw.startswith(b'{"meta"'), raw[:20]
d = json.loads(raw)
meta, shared, threads = d["meta"], d["shared"], d["threads"]
assert meta["preprocessedProfileVersion"] == 65 and meta["version"] > 0
assert meta["symbolicated"] is True and d["libs"] == []
cats = [c["name"] for c in meta["categories"]]
kinds = ["work", "wait_input", "wait_output", "sync", "comm", "copy"]
assert cats == ["Other"] + kinds + ["step"], cats
assert meta["categories"][0]["color"] == "grey"  # the default category
assert {s["name"] for s in meta["markerSchema"]} == {"stage", "step"}
strings = shared["stringArray"]
assert all(isinstance(s, str) for s in strings)

def table(t, cols):
    n = t["length"]
    for c in cols:
        assert len(t[c]) == n, (c, len(t[c]), n)
    return n

n_stack = table(shared["stackTable"], ["frame", "prefix"])
n_frame = table(shared["frameTable"], ["address", "inlineDepth", "category", "subcategory", "func",
                                       "nativeSymbol", "innerWindowID", "line", "column", "originalLocation"])
n_func = table(shared["funcTable"], ["name", "isJS", "relevantForJS", "resource", "source", "lineNumber",
                                     "columnNumber", "originalLocation"])
n_res = table(shared["resourceTable"], ["lib", "name", "host", "type"])
st, fr, fn, rs = shared["stackTable"], shared["frameTable"], shared["funcTable"], shared["resourceTable"]
for i in range(n_stack):
    assert 0 <= st["frame"][i] < n_frame
    p = st["prefix"][i]
    assert p is None or 0 <= p < i, (i, p)  # parents first: every chain ends at a root
for i in range(n_frame):
    assert 0 <= fr["func"][i] < n_func
    c = fr["category"][i]
    assert c is None or 0 <= c < len(cats)
    assert (c is None) == (fr["subcategory"][i] is None)
for i in range(n_func):
    assert 0 <= fn["name"][i] < len(strings)
    assert fn["resource"][i] == -1 or 0 <= fn["resource"][i] < n_res
for i in range(n_res):
    assert 0 <= rs["name"][i] < len(strings) and rs["type"][i] == 1

def frame_name(f):
    return strings[fn["name"][fr["func"][f]]]

def chain(s):  # frame names, root first
    names = []
    while s is not None:
        names.append(frame_name(st["frame"][s]))
        s = st["prefix"][s]
    return names[::-1]

stages = {int(r["id"]): r for r in csv.DictReader(open(out + ".stages"))}
for f in range(n_frame):
    name = frame_name(f)
    if name.startswith("stage:"):
        kind = next(r["kind"] for r in stages.values() if "stage:" + r["name"] == name)
        assert fr["category"][f] == 1 + kinds.index(kind), (name, fr["category"][f])

# the window in trace ns, as analyze resolves it
t0_ms, t1_ms = meta["profilingStartTime"], meta["profilingEndTime"]
origin = int(os.environ["ST_START_NS"])
t0, t1 = origin + round(t0_ms * 1e6), origin + round(t1_ms * 1e6)
windowed = bool(window)
tinfo = list(csv.DictReader(open(out + ".threads")))
ranges = list(csv.DictReader(open(out + ".ranges")))
steps = list(csv.DictReader(open(out + ".steps")))
blocks = open(out + ".cpu").read().strip().split("\n\n")
cpu_threads = {r["thread"]: int(r["samples"]) for r in csv.DictReader(io.StringIO(blocks[0]))}
cpu_stages = {(r["thread"], r["stage"]): int(r["samples"]) for r in csv.DictReader(io.StringIO(blocks[1]))}
# Python-frame samples: each on an entry "NAME (Python)" right after its thread's, checked against
# analyze cpu's python table, then set aside
py_block = [b for b in blocks if b.startswith("thread,role,stage,kind,samples,pct,wall_ms")]
py_want = {}
for r in (csv.DictReader(io.StringIO(py_block[0])) if py_block else []):
    py_want[r["thread"]] = py_want.get(r["thread"], 0) + int(r["samples"])
own = []
for th in threads:
    if not th["name"].endswith(" (Python)"):
        own.append(th)
        continue
    info = tinfo[len(own) - 1]
    base = info["name"] if info["name"] == info["role"] else "%s (%s)" % (info["name"], info["role"])
    assert th["name"] == base + " (Python)" and own[-1]["name"] == base, (th["name"], own[-1]["name"])
    assert th["tid"] == 2100000000 + int(info["id"]) and th["pid"] == own[-1]["pid"] and th["isMainThread"] is False
    s = th["samples"]
    n = table(s, ["stack", "time"])
    assert n == py_want.pop(info["name"], 0) and n > 0, (info["name"], n)
    assert all(x is not None and 0 <= x < n_stack for x in s["stack"])
    assert all(a <= b for a, b in zip(s["time"], s["time"][1:])), "Python sample times decrease"
    assert all(t0_ms <= x < t1_ms for x in s["time"]), "a Python sample outside the window"
    assert all(all(f.startswith(("stage:", "py::")) for f in chain(x)) for x in s["stack"])
    assert table(th["markers"], ["data", "name", "startTime", "endTime", "phase", "category"]) == 0
assert not py_want, ("threads with Python-frame samples but no entry", py_want)
threads = own
assert len(threads) == len(tinfo)
main_index = next((i for i, r in enumerate(tinfo) if r["role"] == "main"), 0)
total_samples = 0
for i, (th, info) in enumerate(zip(threads, tinfo)):
    want = info["name"] if info["name"] == info["role"] else "%s (%s)" % (info["name"], info["role"])
    assert th["name"] == want, (th["name"], want)
    assert th["tid"] == int(info["os_tid"]) and th["pid"].isdigit()
    assert th["isMainThread"] == (i == main_index)
    s = th["samples"]
    n = table(s, ["stack", "time"])
    assert s["weightType"] == "samples" and s["weight"] is None
    assert all(x is not None and 0 <= x < n_stack for x in s["stack"])
    assert all(a <= b for a, b in zip(s["time"], s["time"][1:])), "sample times decrease"
    assert all(t0_ms <= x < t1_ms for x in s["time"]), "a sample outside the window"
    assert n == cpu_threads.get(info["name"], 0), (info["name"], n, cpu_threads.get(info["name"]))
    total_samples += n
    m = th["markers"]
    nm = table(m, ["data", "name", "startTime", "endTime", "phase", "category"])
    mine = [r for r in ranges if int(r["thread"]) == int(info["id"])]
    if windowed:
        mine = [r for r in mine if int(r["start_ns"]) < t1 and (int(r["end_ns"]) > t0 or int(r["start_ns"]) >= t0)]
    want_steps = [x for x in steps if not windowed or t0 <= int(x["ts_ns"]) < t1] if i == main_index else []
    assert nm == len(mine) + len(want_steps), (info["name"], nm, len(mine), len(want_steps))
    got = sorted((strings[m["name"][k]], round(m["startTime"][k], 6)) for k in range(nm) if m["phase"][k] == 1)
    exp = sorted((stages[int(r["stage"])]["name"], round((int(r["start_ns"]) - origin) / 1e6, 6)) for r in mine)
    assert got == exp, (got[:3], exp[:3])
    for k in range(nm):
        assert 0 <= m["name"][k] < len(strings) and m["phase"][k] in (0, 1)
        assert m["startTime"][k] <= m["endTime"][k]
        data = m["data"][k]
        if data["type"] == "stage":
            assert m["category"][k] == 1 + kinds.index(data["kind"]) and m["phase"][k] == 1
        else:
            assert data["type"] == "step" and m["category"][k] == len(cats) - 1 and m["phase"][k] == 0
            assert strings[m["name"][k]] == "step %d" % data["step"]
    if os.environ["ST_BURN"] == "1":
        burn = [chain(x) for x in s["stack"] if chain(x)[0] == "stage:burn"]
        assert len(burn) == cpu_stages.get((info["name"], "burn"), 0), (len(burn), cpu_stages)
        assert len(burn) >= 20, len(burn)
        named = sum("burn" in c[1:] for c in burn)
        assert named >= 0.9 * len(burn), (named, len(burn))
        print("%s: %d samples, %d in stage burn, %d of them with burn(); %d markers" % (out, n, len(burn), named, nm))
assert total_samples > 0 or "nocpu" in out
EOF
}

expect_ok whole "$A" export rec.sqlite --firefox rec.json
BURN=1 check rec.sqlite rec.json
expect_ok win "$A" export rec.sqlite --firefox win.json --time 0.2:0.6
BURN=1 check rec.sqlite win.json --time 0.2:0.6
expect_ok steps "$A" export rec.sqlite --firefox steps.json --steps 1:2
check rec.sqlite steps.json --steps 1:2
# Python-frame samples beside the kernel's (test_cpu_pysample's recorder, variant mixed), whole
# and in a window
if [ -x "$BUILD/tests/test_cpu_pysample" ]; then
    run pyrec "$BUILD/tests/test_cpu_pysample" --record-py py.sqlite mixed
    [ $rc -eq 0 ] || fail "Python-frames recorder: exit $rc: $(tail -5 pyrec.err)"
    expect_ok py "$A" export py.sqlite --firefox py.json
    check py.sqlite py.json
    expect_ok pywin "$A" export py.sqlite --firefox pywin.json --steps 2:5
    check py.sqlite pywin.json --steps 2:5
fi
# stdout, and the same bytes as the file
expect_ok stdout "$A" export rec.sqlite --firefox -
cmp -s stdout.out rec.json || fail "--firefox - differs from the file"
ok

# the trainer: four threads (main, target0, loader, drafter0), each with its samples and markers
if [ -x "$TRAINER" ]; then
    run tr "$TRAINER" --steps 60 --trace tr.sqlite --trace-cpu --overwrite
    [ $rc -eq 0 ] || fail "trainer: exit $rc: $(tail -5 tr.err)"
    expect_ok trainer "$A" export tr.sqlite --firefox tr.json
    check tr.sqlite tr.json
fi

# a rank set under mpirun (skipped without mpirun or an MPI trainer): a process per rank, the
# samples per thread as analyze cpu counts them on the set, a range marker per range of each rank
if [ -x "$TRAINER" ] && command -v mpirun >/dev/null && "$TRAINER" --version | grep -q 'multi-process: mpi'; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    run mpi timeout 120 mpirun --oversubscribe -np 2 "$TRAINER" --steps 40 --layout targets=1,drafters=1 \
        --trace set/ --trace-cpu --overwrite
    [ $rc -eq 0 ] || fail "mpirun: exit $rc: $(tail -5 mpi.err)"
    expect_ok set "$A" export set/ --firefox set.json
    "$A" cpu --format csv --top 0 set/ >set.cpu
    ST_RANGES="$("$A" sql --format csv set/rank0.sqlite "select count(*) from ranges" | tail -1) $("$A" sql --format csv set/rank1.sqlite "select count(*) from ranges" | tail -1)" \
        py "set" <<'EOF2'
import csv, io, json, os
d = json.load(open("set.json"))
cpu = {r["thread"]: int(r["samples"]) for r in csv.DictReader(io.StringIO(open("set.cpu").read().split("\n\n")[0]))}
threads = d["threads"]
by_rank = {}
for t in threads:
    rank = t["name"].split("/")[0]
    by_rank.setdefault(rank, set()).add(t["pid"])
    assert t["processName"].startswith("trainer %s " % rank.replace("r", "rank ")), t["processName"]
    assert t["samples"]["length"] == cpu[t["name"].split(" ")[0]], (t["name"], cpu)
    assert all(0 <= x < d["shared"]["stackTable"]["length"] for x in t["samples"]["stack"])
assert set(by_rank) == {"r0", "r1"} and all(len(p) == 1 for p in by_rank.values())
assert by_rank["r0"] != by_rank["r1"], by_rank
assert sum(1 for t in threads if t["isMainThread"]) == 2
want = [int(x) for x in os.environ["ST_RANGES"].split()]
for rank, n in zip(("r0", "r1"), want):
    got = sum(t["markers"]["phase"].count(1) for t in threads if t["name"].startswith(rank + "/"))
    assert got == n, (rank, got, n)
EOF2
else
    echo "it_cpu_firefox: mpirun or an MPI trainer missing: the rank set part skipped"
fi

# without the CPU tables: the markers alone
cp rec.sqlite nocpu.sqlite
sqlite3 nocpu.sqlite "drop table cpu_threads; drop table cpu_chunks; drop table cpu_stacks; drop table cpu_maps; drop table cpu_symbols"
expect_ok nocpu "$A" export nocpu.sqlite --firefox nocpu.json
py "nocpu" <<'EOF'
import json
a, b = json.load(open("nocpu.json")), json.load(open("rec.json"))
assert [t["samples"]["length"] for t in a["threads"]] == [0] * len(a["threads"])
assert a["shared"]["stackTable"]["length"] == 0 and a["shared"]["frameTable"]["length"] == 0
for x, y in zip(a["threads"], b["threads"]):
    assert x["markers"]["length"] == y["markers"]["length"] > 0
    assert x["markers"]["startTime"] == y["markers"]["startTime"]
EOF

# errors: one line, exit 2, nothing written
expect_usage unwritable "$A" export rec.sqlite --firefox /nonexistent-dir/out.json
expect_usage exists "$A" export rec.sqlite --firefox rec.json
expect_usage window_other "$A" export rec.sqlite --chrome c.json --time 0:1
[ ! -e c.json ] || fail "--time with --chrome wrote c.json"
ok
expect_usage badwin "$A" export rec.sqlite --firefox w.json --steps 7:9
[ ! -e w.json ] || fail "a bad window left w.json"
ok
echo "it_cpu_firefox: $n_checks checks passed"
