#!/usr/bin/env bash
# it_export_gpu.sh: `analyze export --chrome` of the GPU sample traces (samples/traces/)
# as Kineto writes them, so that Perfetto and Holistic Trace Analysis read them: the JSON
# parses; on every track (pid, tid) the complete events nest (two slices are disjoint or
# one holds the other: Perfetto drops a slice that overlaps another in part); GPU records
# carry args device, stream, correlation and External id on one process per GPU, sorted
# after the CPU process; syncs sit on tracks of their own; each launching API call is a
# cuda_runtime / cuda_driver slice on its thread with a flow (ac2g) to the record it
# launched. export --csv and --rows hold the GPU records and API calls. Then, where `holistictraceanalysis` imports, HTA's temporal, idle-time and
# kernel breakdowns and kernel launch statistics run on the export of h200-async, whose
# GPU busy time must match `analyze gpu` within 1%.
#
#   bash tests/it_export_gpu.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
S="$ROOT/samples/traces"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check JSON"; exit 0; }
ls "$S"/*.sqlite >/dev/null 2>&1 || { echo "SKIP: no sample traces in $S"; exit 0; }

it_enter_tmp

# nest.py FILE.json: the JSON parses and, on every track (pid, tid), complete events nest
cat >nest.py <<'PYEOF'
import collections, json, sys
d = json.load(open(sys.argv[1]))
def ns(x): return round(float(x) * 1000)  # exact for 3 decimals
tracks = collections.defaultdict(list)
for e in d["traceEvents"]:
    if e.get("ph") == "X":
        assert float(e["dur"]) >= 0, e
        tracks[(e["pid"], e["tid"])].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"]))
bad = 0
for key, sl in tracks.items():
    sl.sort(key=lambda s: (s[0], -s[1]))
    stack = []
    for s in sl:
        while stack and stack[-1][1] <= s[0]:
            stack.pop()
        if stack and s[1] > stack[-1][1]:
            bad += 1
            if bad <= 3:
                print("partial overlap on track", key, stack[-1], s)
        stack.append(s)
assert bad == 0, f"{sys.argv[1]}: {bad} complete events overlap another in part"
PYEOF

for trace in "$S"/*.sqlite; do
    name=$(basename "$trace" .sqlite)
    expect_ok "$name.export" "$A" export "$trace" --chrome "$name.json"
    python3 nest.py "$name.json" || fail "$name: slices do not nest"
    ok
    sqlite3 "$trace" "SELECT count(*) FROM gpu_chunks WHERE device >= 0" >"$name.n_gpu" 2>/dev/null || echo 0 >"$name.n_gpu"
    NAME=$name py "$name: Chrome export" <<'PYEOF'
import json, os, collections
name = os.environ["NAME"]
d = json.load(open(name + ".json"))
ev = d["traceEvents"]
def us(x): return round(float(x) * 1000)  # ns
# 2. Kineto's shape of the GPU records
gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
assert gpu, f"{name}: no GPU records exported"
cpu_pid = next(e["pid"] for e in ev if e.get("ph") == "X" and e.get("cat") == "work")
for e in gpu:
    a = e["args"]
    assert {"device", "stream", "correlation", "External id"} <= a.keys(), e
    assert e["pid"] == 1000000 + a["device"] and e["tid"] == a["stream"], e
    assert a["stream"] != 4294967295, e
    if e["cat"] == "gpu_memcpy": assert e["name"].startswith("Memcpy "), e
    # kernels demangled as PyTorch's profiler writes them, the recorded name in args.mangled
    assert not e["name"].startswith("_Z"), e
    if "mangled" in a: assert e["cat"] == "kernel" and a["mangled"].startswith("_Z") and e["name"] != a["mangled"], e
    if e["cat"] == "gpu_memset": assert e["name"].startswith("Memset "), e
assert any("mangled" in e["args"] for e in gpu), f"{name}: no kernel was demangled"
syncs = [e for e in ev if e.get("cat") == "cuda_sync"]
assert syncs, f"{name}: no sync records"
stream_tracks = {(e["pid"], e["tid"]) for e in gpu}
for e in syncs:
    assert "stream" not in e["args"] and (e["pid"], e["tid"]) not in stream_tracks, e
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
ctx = [e for e in syncs if e["args"]["synced_stream"] == 4294967295]
assert ctx and all(names[(e["pid"], e["tid"])].startswith("context sync") for e in ctx), name
assert not any("4294967295" in n for n in names.values()), name
sort = {e["pid"]: e["args"]["sort_index"] for e in ev if e.get("name") == "process_sort_index"}
assert all(sort[e["pid"]] > sort[cpu_pid] for e in gpu), sort
assert d["distributedInfo"]["rank"] == int(d["otherData"]["rank"]), d["distributedInfo"]
# as Kineto writes it, spaced so that HTA's "rank":\s+(\d+) finds it
di = [l for l in open(name + ".json") if l.startswith('"distributedInfo"')]
assert di == ['"distributedInfo": {"backend": "nccl", "rank": %s, "world_size": %s},\n'
              % (d["otherData"]["rank"], d["otherData"]["world_size"])], di
# 3. API calls on the CPU threads, flows from launch to record
api = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
assert api and all(e["pid"] == cpu_pid and "correlation" in e["args"] for e in api), name
launch = {(e["args"]["correlation"], e["tid"], us(e["ts"])) for e in api}
starts = {e["id"]: e for e in ev if e.get("ph") == "s"}
ends = {e["id"]: e for e in ev if e.get("ph") == "f"}
assert starts and starts.keys() == ends.keys(), name
by_corr = {}
for e in gpu: by_corr.setdefault(e["args"]["correlation"], e)
for i, s in starts.items():
    f = ends[i]
    assert s["cat"] == f["cat"] == "ac2g" and f["bp"] == "e", (s, f)
    assert (i, s["tid"], us(s["ts"])) in launch, s
    assert i in by_corr and f["pid"] == by_corr[i]["pid"], f
n_corr = len({e["args"]["correlation"] for e in gpu if "thread" in e["args"]})
assert len(starts) == n_corr, (len(starts), n_corr)
# 4. step marks are instant events
assert any(e.get("ph") == "i" and e.get("cat") == "step" for e in ev), name
# 5. tracks as a user reads them: the CPU threads' tids 1, 2, ... in pipeline order (as their
# thread_sort_index), none 0; stream tracks "GPU d stream s"; counter series by unit
order = ["loader", "target", "post", "drafter", "main"]
cpu = sorted((e["tid"], e["args"]["name"]) for e in ev if e.get("name") == "thread_name" and e["pid"] == cpu_pid
             and not e["args"]["name"].startswith("os thread "))
assert [t for t, _ in cpu] == list(range(1, len(cpu) + 1)), cpu
roles = [next(r for r in order if n.startswith(r)) for _, n in cpu]
assert roles == sorted(roles, key=order.index) and roles[-1] == "main", roles
assert all(e["tid"] != 0 for e in ev if e.get("ph") != "M" or e["name"].startswith("thread_")), name
for e in gpu:
    assert names[(e["pid"], e["tid"])] == f'GPU {e["args"]["device"]} stream {e["args"]["stream"]}', e
qd = [e for e in ev if e.get("ph") == "C" and e["name"] == "queue_depth"]
assert qd and all(list(e["args"]) == ["(items)"] for e in qd), qd[:1]
print(name, len(gpu), "GPU records,", len(syncs), "syncs,", len(api), "API calls,", len(starts), "flows")
PYEOF
done

# A damaged GPU trace: records of a stream that overlap in part, one stored out of start order, 70
# nested ones; 50 overlapping syncs on a stream and on the context; API calls that straddle a
# range's begin and end on their thread, and a call that outlasts the one it starts in. The
# export still nests on every track, and the launch flows start at the calls.
cp "$S/h200-async.sqlite" hostile.sqlite
expect_ok hostile.rows "$A" export hostile.sqlite --rows hostile.rows.sqlite
py "a damaged GPU trace" <<'PYEOF'
import sqlite3
def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)
def zz(v): return (v << 1) ^ (v >> 63)
def chunk(recs):  # chunk version 1: (kind, start, dur, corr, os_tid, copy_kind)
    data, prev = bytearray(b"G"), 0
    for kind, start, dur, corr, os_tid, copy in recs:
        data += varint(kind) + varint(zz(start - prev)) + varint(dur) + varint(0) + varint(0) + varint(copy)
        data += varint(0) + varint(0) + varint(corr) + varint(zz(os_tid))
        prev = start
    return (min(r[1] for r in recs), max(r[1] + r[2] for r in recs), len(recs), bytes(data))
rows = sqlite3.connect("hostile.rows.sqlite")
s, e = rows.execute("SELECT start_ns, end_ns FROM ranges WHERE thread = 1 AND dur_ns > 1000000 ORDER BY start_ns LIMIT 1").fetchone()
os_tid = rows.execute("SELECT os_tid FROM threads WHERE id = 1").fetchone()[0]
T = s + 100000
api = [(5, s - 5000, 10000, 900001, os_tid, 211), (5, e - 5000, 10000, 900002, os_tid, 211),
       (5, s + 1000, 2000, 900003, os_tid, 211)]
drv = [(5, s + 2000, 2000, 900004, os_tid, 307)]
k = [(1, T, 1000, 900001, 0, 0), (1, T + 500, 1000, 900002, 0, 0), (1, T + 200, 100, 900003, 0, 0)]
k += [(1, T + 10000 + i, 10000 - 2 * i, 900004, 0, 0) for i in range(70)]
sy = [(4, T + 10 * i, 1000, 0, 0, 3) for i in range(50)]
db = sqlite3.connect("hostile.sqlite")
for dev, stream, recs in [(-1, 0, api), (-1, 1, drv), (0, 99, k), (0, 99, sy), (0, 4294967295, sy)]:
    db.execute("INSERT INTO gpu_chunks(device, stream, t0_ns, t1_ns, n_records, data) VALUES (?, ?, ?, ?, ?, ?)",
               (dev, stream) + chunk(recs))
db.commit()
PYEOF
expect_ok hostile.export "$A" export hostile.sqlite --chrome hostile.json
python3 nest.py hostile.json || fail "the damaged trace's export does not nest"
ok
py "the damaged trace's tracks" <<'PYEOF'
import json
ev = json.load(open("hostile.json"))["traceEvents"]
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
mine = [e for e in ev if e.get("args", {}).get("correlation", 0) >= 900001]
k = [e for e in mine if e.get("cat") == "kernel"]
assert len(k) == 73 and all(e["tid"] == 99 for e in k), len(k)
calls = [e for e in mine if e.get("cat") in ("cuda_runtime", "cuda_driver")]
assert len(calls) == 4 and all(names[(e["pid"], e["tid"])] == "drafter0" for e in calls), calls
flows = {e["id"]: e for e in ev if e.get("ph") == "s" and e["id"] >= 900001}
assert sorted(flows) == [900001, 900002, 900003, 900004], sorted(flows)
for c in calls:
    if c["cat"] == "cuda_runtime": assert flows[c["args"]["correlation"]]["ts"] == c["ts"], c
syncs = [e for e in ev if e.get("cat") == "cuda_sync" and e["pid"] == 1000000]
lanes = {names[(e["pid"], e["tid"])] for e in syncs}
assert {"sync", "sync 2", "context sync", "context sync 2"} <= lanes and 99 not in {e["tid"] for e in syncs}, lanes
PYEOF

# gpu_shared (tests/traces.c): API calls of a thread that is not in `threads` go to an
# "os thread N" track whose tid is no traced thread's; the record without a launching call
# (U) has no flow.
GEN="$BUILD/tests/tracegen"
if [ -x "$GEN" ]; then
    mkdir gen
    "$GEN" gen >/dev/null
    expect_ok gpu_shared.export "$A" export gen/gpu_shared.sqlite --chrome gpu_shared.json
    python3 nest.py gpu_shared.json || fail "gpu_shared: slices do not nest"
    py "gpu_shared's export" <<'PYEOF'
import json
ev = json.load(open("gpu_shared.json"))["traceEvents"]
cpu = next(e["pid"] for e in ev if e.get("name") == "process_name" and e["pid"] < 1000000)
names = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name" and e["pid"] == cpu}
os_tracks = [t for t, n in names.items() if n.startswith("os thread ")]
assert len(os_tracks) == 1 and os_tracks[0] > max(t for t, n in names.items() if not n.startswith("os thread ")), names
calls = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
untraced = [e for e in calls if e["tid"] == os_tracks[0]]
assert len(untraced) == 10 and all(e["name"] == "cudaLaunchKernel" and e["dur"] == 10 for e in untraced), untraced
k = [e for e in ev if e.get("cat") == "kernel"]
flows = [e for e in ev if e.get("ph") == "f"]
assert len(flows) == sum(1 for e in k if "thread" in e["args"]) == len(k) - 10, (len(flows), len(k))
PYEOF
fi

# export --csv and --rows hold the GPU records (gpu) and API calls (gpu_api): the same rows as
# the extension's gpu table and the API chunks, and gpu_v joins the names in as the extension's.
EXT="$BUILD/stagetrace_ext"
for trace in "$S"/*.sqlite; do
    name=$(basename "$trace" .sqlite)
    expect_ok "$name.rows" "$A" export "$trace" --csv "$name.csv" --rows "$name.rows.sqlite"
    q="SELECT device, stream, kind, name, count(*), sum(dur_ns), sum(start_ns), sum(bytes), sum(correlation),
       count(thread), sum(thread), count(stage), sum(stage) FROM gpu GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
    qv="SELECT thread_name, role, stage_name, stage_kind, kind, count(*), sum(end_ns - start_ns) FROM gpu_v
        GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5"
    qn="SELECT name, raw_name, count(*) FROM gpu_v GROUP BY 1, 2 ORDER BY 1, 2"
    if [ -e "$EXT.so" ] && sqlite3 :memory: ".load $EXT" "SELECT 1" >/dev/null 2>&1; then
        sqlite3 "$trace" ".load $EXT" "$q" >"$name.gpu.ext"
        sqlite3 "$trace" ".load $EXT" "$qv" >"$name.gpu_v.ext"
        sqlite3 "$name.rows.sqlite" "$q" >"$name.gpu.rows"
        sqlite3 "$name.rows.sqlite" "$qv" >"$name.gpu_v.rows"
        sqlite3 "$trace" ".load $EXT" "$qn" >"$name.names.ext"
        sqlite3 "$name.rows.sqlite" "$qn" >"$name.names.rows"
        cmp -s "$name.names.ext" "$name.names.rows" || fail "$name: --rows gpu_v names differ from the SQL view's: $(diff "$name.names.ext" "$name.names.rows" | head -5)"
        grep -q '^void rope_kernel<0>(__nv_bfloat16\*, __nv_bfloat16 const\*, int const\*, int, int, int, float)|_Z11rope_kernelILi0EEvP13__nv_bfloat16PKS0_PKiiiif|' "$name.names.ext" ||
            fail "$name: gpu_v does not demangle rope_kernel<0>"
        [ -s "$name.gpu.ext" ] || fail "$name: the extension's gpu table is empty"
        cmp -s "$name.gpu.ext" "$name.gpu.rows" || fail "$name: --rows gpu differs from the SQL table: $(diff "$name.gpu.ext" "$name.gpu.rows" | head -5)"
        cmp -s "$name.gpu_v.ext" "$name.gpu_v.rows" || fail "$name: --rows gpu_v differs from the SQL view: $(diff "$name.gpu_v.ext" "$name.gpu_v.rows" | head -5)"
        ok
    fi
    # No GPU record moves and none loses time: each kernel, copy and memset of the export has
    # its trace start (ts = start_ns - meta start_ns) and its whole duration, record for record
    # (CUPTI delivers some start-up records after later ones of their stream).
    NAME=$name py "$name: GPU records at their trace times" <<'PYEOF'
import collections, json, os, sqlite3
name = os.environ["NAME"]
ev = json.load(open(name + ".json"))["traceEvents"]
db = sqlite3.connect(f"file:{name}.rows.sqlite?mode=ro", uri=True)
origin = int(db.execute("SELECT value FROM meta WHERE key = 'start_ns'").fetchone()[0])
def ns(x): return round(float(x) * 1000)
got = collections.Counter((e["args"]["device"], e["args"]["stream"], e["args"]["correlation"], ns(e["ts"]), ns(e["dur"]))
                          for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
want = collections.Counter((d, s, c, t - origin, max(u, 0)) for d, s, c, t, u in
                           db.execute("SELECT device, stream, correlation, start_ns, dur_ns FROM gpu WHERE kind != 'sync'"))
assert sum(want.values()) > 1000, sum(want.values())
moved = want - got
assert not moved, f"{name}: {sum(moved.values())} of {sum(want.values())} GPU records moved or cut, e.g. {list(moved)[:3]}"
assert got == want, (sum(got.values()), sum(want.values()))
lost = sum(k[4] * n for k, n in want.items()) - sum(k[4] * n for k, n in got.items())
assert lost == 0 and min(k[4] for k in got) >= 0, lost
print(name, sum(got.values()), "GPU records,", sum(k[4] * n for k, n in got.items()) / 1e6, "ms of GPU time, none moved")
PYEOF
    n_api=$(sqlite3 "$trace" "SELECT sum(n_records) FROM gpu_chunks WHERE device = -1")
    NAME=$name N_API=$n_api py "$name: gpu and gpu_api in --csv and --rows" <<'PYEOF'
import csv, os, sqlite3
name, n_api = os.environ["NAME"], int(os.environ["N_API"])
db = sqlite3.connect(f"file:{name}.rows.sqlite?mode=ro", uri=True)
gpu = list(csv.DictReader(open(f"{name}.csv/gpu.csv")))
api = list(csv.DictReader(open(f"{name}.csv/gpu_api.csv")))
assert list(gpu[0]) == ["device", "stream", "kind", "name", "start_ns", "dur_ns", "bytes", "correlation", "thread", "stage",
                        "launch_tid", "launch_thread"]
assert list(api[0]) == ["thread", "os_tid", "api", "name", "cbid", "start_ns", "dur_ns", "correlation", "stage"]
assert len(api) == n_api == db.execute("SELECT count(*) FROM gpu_api").fetchone()[0], (len(api), n_api)
assert len(gpu) == db.execute("SELECT count(*) FROM gpu").fetchone()[0]
key = lambda r: tuple("" if v is None else str(v) for v in r)
rows = sorted(key(r) for r in db.execute("SELECT * FROM gpu_api"))
assert rows == sorted(key(r.values()) for r in api)
rows = sorted(key(r) for r in db.execute("SELECT * FROM gpu"))
assert rows == sorted(key(r.values()) for r in gpu)
assert {r["api"] for r in api} == {"runtime", "driver"} and all(r["name"] for r in api)
# every launch joins its API call by correlation, on the same thread
launched = {(r["correlation"], r["thread"]) for r in api if r["thread"]}
assert all((r["correlation"], r["thread"]) in launched for r in gpu if r["thread"])
# and by OS thread: a launched record's launch_tid is its call's os_tid (these sample traces
# predate gpu_threads, so launch_thread is empty)
calls = {(r["correlation"], r["os_tid"]) for r in api}
assert all((r["correlation"], r["launch_tid"]) in calls for r in gpu if r["launch_tid"])
assert sum(1 for r in gpu if r["launch_tid"]) >= sum(1 for r in gpu if r["thread"]) > 0
assert not any(r["launch_thread"] for r in gpu)
try:
    import pandas as pd  # the example of docs/analyze.md
except ImportError:
    pd = None
if pd is not None:
    db = sqlite3.connect(f"{name}.rows.sqlite")
    g = pd.read_sql("SELECT * FROM gpu_v", db)
    print(name, g.groupby(["role", "kind"])["dur_ns"].sum().div(1e6).round(1).to_dict())
    assert len(g) == len(gpu)
PYEOF
done

# Holistic Trace Analysis, where it is installed (pip install holistictraceanalysis). `analyze
# gpu` counts from the first range event, HTA from the first GPU record: the export is cut to
# the trace's span (first to last range event or step mark) before HTA reads it.
if ! python3 -c 'import hta.trace_analysis' 2>/dev/null; then
    echo "SKIP: holistictraceanalysis is not installed (python3 -m pip install holistictraceanalysis psutil); the Chrome export checks above ran"
    exit 0
fi
expect_ok gpu "$A" gpu "$S/h200-async.sqlite" --format json --time 0:1000000
py "HTA on the export of h200-async" <<'PYEOF'
import json, logging, os, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
d = json.load(open("h200-async.json"))
ev = d["traceEvents"]
def ns(x): return round(float(x) * 1000)
span = [ns(e["ts"]) for e in ev if e.get("cat") == "step"]
span += [t for e in ev if e.get("ph") == "X" and e.get("pid") < 1000000 and e.get("cat") not in ("cuda_runtime", "cuda_driver")
         for t in (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))]
t0, t1 = min(span), max(span)
kept = []
for e in ev:
    if e.get("ph") == "X" and e["pid"] >= 1000000:
        s, f = max(ns(e["ts"]), t0), min(ns(e["ts"]) + ns(e["dur"]), t1)
        if f <= s: continue
        e = dict(e, ts=s / 1000, dur=(f - s) / 1000)
    kept.append(e)
d["traceEvents"] = kept
os.mkdir("hta")
json.dump(d, open("hta/rank0.json", "w"))
import contextlib, io
from hta.trace_analysis import TraceAnalysis
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    t = TraceAnalysis(trace_dir="hta")
    tb = t.get_temporal_breakdown(visualize=False)
    idle = t.get_idle_time_breakdown(visualize=False)
    kb = t.get_gpu_kernel_breakdown(visualize=False)
    ls = t.get_cuda_kernel_launch_stats(visualize=False)
dev = json.load(open("gpu.out"))["devices"][0]
busy_ms = (tb["compute_time(us)"][0] + tb["non_compute_time(us)"][0]) / 1000
err = abs(busy_ms - dev["busy_ms"]) / dev["busy_ms"]
print(f"GPU busy: HTA {busy_ms:.3f} ms, analyze gpu {dev['busy_ms']:.3f} ms ({100 * err:.3f}%)")
assert err < 0.01, (busy_ms, dev["busy_ms"])
kb_ms = kb[0]["sum"].sum() / 1000
assert abs(kb_ms - dev["busy_ms"]) / dev["busy_ms"] < 0.01, (kb_ms, dev["busy_ms"])
idle_df = idle[0] if isinstance(idle, tuple) else idle
streams = {e["args"]["stream"] for e in kept if e.get("cat") == "kernel"}
assert streams <= set(idle_df["stream"]), (streams, set(idle_df["stream"]))
n_launched = len({e["args"]["correlation"] for e in kept if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and "thread" in e["args"]})
assert 0.5 * n_launched < len(ls[0]) <= n_launched, (len(ls[0]), n_launched)
print(f"HTA: {len(idle_df)} idle rows, kernel breakdown {kb_ms:.3f} ms, {len(ls[0])} launches of {n_launched}")
PYEOF

# HTA's rank of each file: a directory of one export per rank file reads as those ranks (its
# create_rank_to_trace_dict takes the first line matching "rank":\s+(\d+), which only
# distributedInfo has). Before, "rank":0 without a space never matched, and HTA filed every
# file as rank 0, keeping one.
[ -x "$BUILD/tests/tracegen" ] || { echo "SKIP: $BUILD/tests/tracegen is not built: HTA's ranks not checked"; exit 0; }
"$BUILD/tests/tracegen" gen >/dev/null
mkdir ranks
for k in 0 1; do expect_ok rank$k "$A" export gen/rank$k.sqlite --chrome ranks/trace$k.json; done
py "HTA's rank of each export" <<'PYEOF'
import logging, re
logging.disable(logging.CRITICAL)
from hta.common.trace_file import create_rank_to_trace_dict_from_dir
ok, ranks = create_rank_to_trace_dict_from_dir("ranks")
assert ok and {k: v.split("/")[-1] for k, v in ranks.items()} == {0: "trace0.json", 1: "trace1.json"}, ranks
for k in (0, 1):
    lines = [l for l in open(f"ranks/trace{k}.json") if re.search(r'"rank":\s+(\d+)', l)]
    assert len(lines) == 1 and lines[0] == '"distributedInfo": {"backend": "mpi", "rank": %d, "world_size": 2},\n' % k, lines
print("HTA ranks:", sorted(ranks))
PYEOF
