#!/usr/bin/env bash
# it_ranks.sh: integration test of rank sets (docs/analyze.md, "Rank sets"):
# traces of a multi-process run written by `tracegen --ranks` (tests/traces.c,
# write_rank_set) with known answers. A rank whose clock is shifted by a known
# amount (and says so in meta) gives the same windows as the unshifted run;
# a rank made slow on purpose is named by `stragglers` and the limiting role by
# `bottleneck`; a missing rank and a killed one are reported by `info` and
# warned about; inputs as files, directories and glob patterns; one line and
# exit 2 for sets that are not one run.
#
#   bash tests/it_ranks.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$GEN" ] || { echo "SKIP: $GEN is not built (make tests)"; exit 0; }

it_enter_tmp

mkdir plain shifted late broken target
"$GEN" --ranks plain 4 --slow 3
"$GEN" --ranks shifted 4 --slow 3 --shift 2:-7000000123 # rank 2's host clock 7 s behind... and back
"$GEN" --ranks late 4 --slow 2 --missing 1 --killed 3
"$GEN" --ranks target 4 --target-bound --slow 3

# a shifted clock, mapped, lines up: the same windows, thread by thread
expect_ok iv_plain "$A" intervals --every 5 plain
expect_ok iv_shift "$A" intervals --every 5 shifted
cmp iv_plain.out iv_shift.out || fail "the shifted rank does not line up after mapping: $(diff iv_plain.out iv_shift.out | head)"
ok
grep -q '^  r2/drafter0  drafter      allreduce 50.0% 25.0ms' iv_plain.out || fail "intervals: $(head -5 iv_plain.out)"
ok
# without its offset in meta the same rank is 7 s away: the windows differ
cp -r shifted unmapped
sqlite3 unmapped/rank2.sqlite "UPDATE meta SET value = '0' WHERE key IN ('clock_offset_ns', 'clock_offset_close_ns')" 2>/dev/null ||
    python3 -c "import sqlite3; c = sqlite3.connect('unmapped/rank2.sqlite'); c.execute(\"UPDATE meta SET value = '0' WHERE key IN ('clock_offset_ns', 'clock_offset_close_ns')\"); c.commit()"
run iv_unmapped "$A" intervals --every 5 unmapped
! cmp -s iv_plain.out iv_unmapped.out || fail "the offset in meta changes nothing"
ok
# the Chrome export on rank 0's clock: rank 2's first forward starts with rank 3's
expect_ok chrome "$A" export --chrome shifted.json shifted
python3 - <<'PY' || fail "chrome: shifted rank not aligned"
import json
ev = json.load(open("shifted.json"))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
first = {}
for e in ev:
    if e.get("name") == "forward" and e.get("ph") in ("X", "B"):
        n = names[e["tid"]]
        first.setdefault(n, e["ts"])
assert first["r2/drafter0"] == first["r3/drafter0"], first
PY
ok
# one process per rank, "rank N (host)", its pid the rank's own (meta pid, distinct here), each
# thread and its events under its rank's process
python3 - <<'PY' || fail "chrome: a process per rank"
import json, sqlite3
ev = json.load(open("shifted.json"))["traceEvents"]
meta = {}
for r in range(4):
    c = sqlite3.connect("file:shifted/rank%d.sqlite?mode=ro" % r, uri=True)
    meta[r] = dict(c.execute("SELECT key, value FROM meta WHERE key IN ('pid', 'host')").fetchall())
    c.close()
procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"}
want = {int(meta[r]["pid"]): "rank %d (%s)" % (r, meta[r]["host"]) for r in range(4)}
assert procs == want, (procs, want)
order = {e["pid"]: e["args"]["sort_index"] for e in ev if e.get("name") == "process_sort_index"}
assert order == {int(meta[r]["pid"]): r * 1001 for r in range(4)}, order
threads = {e["tid"]: (e["pid"], e["args"]["name"]) for e in ev if e.get("name") == "thread_name"}
for tid, (pid, name) in threads.items():
    r = int(name.split("/")[0][1:])
    assert pid == int(meta[r]["pid"]), (tid, pid, name)
for e in ev:
    if e.get("ph") in ("X", "B", "E", "C", "i"):
        assert e["pid"] == threads[e["tid"]][0], e
PY
ok
# report on a set: a Ranks section, a bar per rank, the stragglers table of `stragglers`
expect_ok report_set "$A" report --html set.html shifted
expect_ok strag_csv "$A" stragglers --format csv shifted
python3 - <<'PY' || fail "report: ranks section"
import csv, re
h = open("set.html").read()
sec = h[h.index('<section id="ranks">'):]
sec = sec[:sec.index('</section>')]
assert re.findall(r'<g class="rank" data-rank="(\d+)"', sec) == ["0", "1", "2", "3"], sec[:400]
rows = re.findall(r'<tr><td>([^<]*)</td><td class="n">(\d+)</td><td class="n">(\d+)</td><td class="n">(\d+)</td>', sec)
lines = open("strag_csv.out").read().split("\n\n")[0].splitlines()
want = [(r["stage"], r["instances"], r["ranks"], r["last_rank"]) for r in csv.DictReader(lines)]
assert rows and rows == want, (rows, want)
PY
ok
expect_ok report_one "$A" report --html one.html shifted/rank0.sqlite
! grep -q 'id="ranks"' one.html || fail "report: a ranks section for one file"
ok
# ranks that recorded the same pid (two hosts): the later ranks' processes are 1000000000 + rank
cp -r shifted samepid
for r in 0 1 2 3; do
    python3 -c "import sqlite3; c = sqlite3.connect('samepid/rank$r.sqlite'); c.execute(\"UPDATE meta SET value = '4242' WHERE key = 'pid'\"); c.commit()"
done
expect_ok chrome_samepid "$A" export --chrome samepid.json samepid
python3 - <<'PY' || fail "chrome: ranks with one pid"
import json
ev = json.load(open("samepid.json"))["traceEvents"]
procs = sorted(e["pid"] for e in ev if e.get("name") == "process_name")
assert procs == [4242, 1000000001, 1000000002, 1000000003], procs
PY
ok

# inputs: a directory, a glob pattern, a list of files: the same answer
expect_ok bn_dir "$A" bottleneck plain
expect_ok bn_glob "$A" bottleneck 'plain/rank*.sqlite'
expect_ok bn_list "$A" bottleneck plain/rank3.sqlite plain/rank1.sqlite plain/rank0.sqlite plain/rank2.sqlite
cmp bn_dir.out bn_glob.out && cmp bn_dir.out bn_list.out || fail "inputs differ"
ok
grep -q '^Bottleneck: drafter (2 threads)' bn_dir.out || fail "bottleneck: $(head -3 bn_dir.out)"
ok
grep -q '^target -> drafter  put   target   queue_put   wait_output  60.0%' bn_dir.out || fail "queue: $(cat bn_dir.out)"
ok
grep -qx 'Limiting rank: rank 3 of drafter, its own work 60.0% of its time.' bn_dir.out || fail "limiting rank: $(cat bn_dir.out)"
ok
# the straggler line right after it: the collective of `stragglers` whose late rank costs the most
expect_ok strag_plain "$A" stragglers --format csv plain
python3 - <<'PY' || fail "bottleneck: stragglers line"
import csv
lines = open("bn_dir.out").read().splitlines()
at = lines.index("Limiting rank: rank 3 of drafter, its own work 60.0% of its time.")
rows = list(csv.DictReader(open("strag_plain.out").read().split("\n\n")[0].splitlines()))
assert rows, "no collectives"
best = max(rows, key=lambda r: float(r["mean_wait_ms"]) * int(r["instances"]))
want = "Stragglers: rank %s is late most often at %s (last in %s of %s instances%s); the others wait %s ms for it on average." % (
    best["last_rank"], best["stage"], best["times_last"], best["instances"],
    ", every time" if best["every_time"] == "yes" else "", "%.3f" % float(best["mean_wait_ms"]))
assert lines[at + 1] == want, (lines[at + 1], want)
PY
ok
expect_ok bn_csv "$A" bottleneck --format csv plain
grep -qx 'drafter,3,1,60,6.000000,yes' bn_csv.out && grep -qx 'drafter,2,1,40,4.000000,-' bn_csv.out || fail "ranks csv: $(cat bn_csv.out)"
ok
expect_ok bn_target "$A" bottleneck target
grep -q '^Bottleneck: target (2 threads)' bn_target.out || fail "target-bound: $(head -3 bn_target.out)"
ok

# the straggler is named, every time, with the others' wait
expect_ok st "$A" stragglers plain
grep -q '^Straggler at allreduce: rank 3 arrives last in 20 of 20 instances (every time); the others wait 2.000 ms for it on average.$' st.out ||
    fail "stragglers: $(cat st.out)"
ok
grep -q '^Slowest rank in work: rank 3 in backward (drafter), 66.7% over the median of 2 ranks.$' st.out || fail "slowest: $(cat st.out)"
ok
expect_ok st_csv "$A" stragglers --format csv plain
grep -qx 'allreduce,20,2,3,20,100,yes,2.000000,2.000000' st_csv.out || fail "stragglers csv: $(head -3 st_csv.out)"
ok
expect_usage st_one "$A" stragglers plain/rank0.sqlite

# a missing rank and a killed one: reported by info, warned by the others, still analysed
expect_ok info_late "$A" info late
grep -qx '  missing ranks: 1' info_late.out || fail "info: $(tail -5 info_late.out)"
ok
grep -qx '  incomplete ranks: 3 (running)' info_late.out || fail "info: $(tail -5 info_late.out)"
ok
run st_late "$A" stragglers late
[ $rc -eq 0 ] || fail "stragglers on a set with a missing rank: exit $rc"
grep -qx 'analyze: warning: run 1700000000-500: 1 of 4 ranks have no trace (missing rank 1); analysing the 3 present' st_late.err ||
    fail "missing rank not warned: $(cat st_late.err)"
grep -q 'rank3.sqlite is incomplete (status running' st_late.err || fail "killed rank not warned: $(cat st_late.err)"
grep -q '^Straggler at allreduce: rank 2 arrives last in 10 of 10 instances' st_late.out || fail "$(cat st_late.out)"
ok
run bn_late "$A" bottleneck late
[ $rc -eq 0 ] && grep -q 'missing rank 1' bn_late.err || fail "bottleneck on a set with a missing rank: $rc $(cat bn_late.err)"
ok

# not one run: one line naming the odd file
mkdir other dup
"$GEN" --ranks other 2 --run-id 1700000000-501
expect_usage mixed "$A" bottleneck plain/rank0.sqlite other/rank1.sqlite
grep -q "other/rank1.sqlite: run_id '1700000000-501' is not the run_id '1700000000-500' of plain/rank0.sqlite" mixed.err || fail "$(cat mixed.err)"
ok
"$GEN" --ranks dup 4 --world-size 8
expect_usage ws "$A" intervals --every 5 plain/rank0.sqlite dup/rank1.sqlite
grep -q 'dup/rank1.sqlite: world_size 8 is not the world_size 4 of plain/rank0.sqlite' ws.err || fail "$(cat ws.err)"
ok
expect_usage twice "$A" bottleneck plain/rank1.sqlite shifted/rank1.sqlite
grep -q 'rank 1 is also the rank of' twice.err || fail "$(cat twice.err)"
ok
expect_usage nomatch "$A" bottleneck 'plain/nothing*.sqlite'
grep -qx "analyze: plain/nothing\*.sqlite: the pattern matches no file" nomatch.err || fail "$(cat nomatch.err)"
ok
mkdir empty
expect_usage emptydir "$A" summary empty
grep -qx "analyze: empty: the directory holds no \*.sqlite file" emptydir.err || fail "$(cat emptydir.err)"
ok

# diff of two sets, one directory each
expect_ok diff "$A" diff plain target
grep -q '^== diff: A = run 1700000000-500, B = run 1700000000-500' diff.out || fail "diff: $(head -2 diff.out)"
ok

# GPU records in rank files (tracegen --gpu: a kernel per step on each rank's device 0, launched 100 us
# into the forward, correlation ids from 1 on every rank): merged on rank 0's clock, device r*1000+d
mkdir gplain gshift
"$GEN" --ranks gplain 4 --gpu
"$GEN" --ranks gshift 4 --gpu --shift 2:-7000000123
expect_ok gpu_plain "$A" gpu gplain
expect_ok gpu_shift "$A" gpu gshift
cmp gpu_plain.out gpu_shift.out || fail "gpu: the shifted rank's GPU records do not line up: $(diff gpu_plain.out gpu_shift.out | head)"
ok
for d in "     0  fwd_gemm" "  1000  fwd_gemm" "  2000  draft_gemm" "  3000  draft_gemm"; do
    grep -Eq "^$d +20 +12.000" gpu_plain.out || fail "gpu: no row '$d': $(head -12 gpu_plain.out)"
done
grep -q '^  2000  r2/drafter0  forward ' gpu_plain.out || grep -q '^r2/drafter0  forward    2000 ' gpu_plain.out ||
    fail "gpu: rank 2's kernels not launched from r2/drafter0's forward: $(cat gpu_plain.out)"
ok
expect_ok gpu_bn "$A" bottleneck gshift
grep -q 'GPU 2000 busy 6.0%' gpu_bn.out || fail "bottleneck: no GPU idle split for rank 2's device: $(grep 'GPU idle' gpu_bn.out)"
ok
# without the offset in meta, rank 2's GPU records are 7 s away: the tables differ
cp -r gshift gunmapped
python3 -c "import sqlite3; c = sqlite3.connect('gunmapped/rank2.sqlite'); c.execute(\"UPDATE meta SET value = '0' WHERE key IN ('clock_offset_ns', 'clock_offset_close_ns')\"); c.commit()"
run gpu_unmapped "$A" gpu gunmapped
! cmp -s gpu_plain.out gpu_unmapped.out || fail "gpu: the offset in meta changes nothing"
ok
# export: a GPU process per rank and device, right after the rank's own; kernels where the
# unshifted run has them; one flow per (rank, correlation)
expect_ok gchrome "$A" export --chrome gshift.json gshift
expect_ok gchrome_plain "$A" export --chrome gplain.json gplain
python3 - <<'PY' || fail "chrome: per-rank GPU processes"
import json
ev = json.load(open("gshift.json"))["traceEvents"]
procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"}
order = {e["pid"]: e["args"]["sort_index"] for e in ev if e.get("name") == "process_sort_index"}
for r in range(4):
    assert procs[1000000 + 1000 * r] == "GPU 0 (rank %d)" % r, procs
    assert order[1000000 + 1000 * r] == r * 1001 + 1, order
    assert order[100 + r] == r * 1001, order
kern = sorted((e["pid"], e["ts"]) for e in ev if e.get("cat") == "kernel")
plain = sorted((e["pid"], e["ts"]) for e in json.load(open("gplain.json"))["traceEvents"] if e.get("cat") == "kernel")
assert kern == plain and len(kern) == 80, (kern[:4], plain[:4])
starts = [e for e in ev if e.get("cat") == "ac2g" and e["ph"] == "s"]
assert len(starts) == 80 and len({e["id"] for e in starts}) == 80, len(starts)
for e in starts:
    assert e["pid"] == 100 + (e["id"] >> 32), e
PY
ok

# hostile clock measurements at the limits of int64 (docs/trace-format.md, "Ranks on one
# clock"): every command maps exactly or stops with one line and exit 2; never a crash (run
# with the sanitizer build, where undefined behaviour aborts)
MIN=-9223372036854775808 MAX=9223372036854775807
hostile_clock() { # DIR SYNC OFFSET SYNC_CLOSE OFFSET_CLOSE: rank 1 of a 2-rank set gets them
    mkdir "$1"
    "$GEN" --ranks "$1" 2 --gpu
    python3 - "$@" <<'PY'
import sqlite3, sys
d, keys = sys.argv[1], ["clock_sync_ns", "clock_offset_ns", "clock_sync_close_ns", "clock_offset_close_ns"]
c = sqlite3.connect(d + "/rank1.sqlite")
for k, v in zip(keys, sys.argv[2:]):
    c.execute("UPDATE meta SET value = ? WHERE key = ?", (v, k))
c.execute("UPDATE meta SET value = '9223372036854775807' WHERE key LIKE 'clock_uncertainty%'")
c.commit()
PY
}
hostile_clock hc_twice "$MIN" "$MIN" "$MAX" "$MAX"          # map(t) = 2t: exact, in range
hostile_clock hc_steep $((MAX - 1)) "$MIN" "$MAX" "$MAX"    # a product past 2^127
hostile_clock hc_equal 5 "$MAX" 5 "$MIN"                    # equal sync points: offset alone
hostile_clock hc_back "$MIN" 1 0 "$MIN"                     # rank 0's clock backwards
hostile_clock hc_flat "$MIN" "$MAX" "$MAX" "$MAX"           # the widest span, no drift
for d in hc_twice hc_steep hc_equal hc_back hc_flat; do
    for cmd in info summary "intervals --every 5" bottleneck gpu stragglers "export --chrome $d.json"; do
        name="${d}_${cmd%% *}"
        # shellcheck disable=SC2086
        run "$name" "$A" $cmd "$d"
        case $rc in
        0) ;;
        2) [ "$(grep -vc '^analyze: warning: ' "$name.err")" -eq 1 ] || fail "$name: $(cat "$name.err")" ;;
        *) fail "$name: exit $rc: $(tail -5 "$name.err")" ;;
        esac
    done
done
ok
run hc_back_iv "$A" bottleneck hc_back
[ $rc -eq 2 ] && grep -q "^analyze: run 1700000000-500: rank 1: meta 'clock_sync_close_ns' + 'clock_offset_close_ns' is before 'clock_sync_ns' + 'clock_offset_ns'" hc_back_iv.err ||
    fail "a clock that runs backwards: exit $rc: $(cat hc_back_iv.err)"
ok
run hc_steep_b "$A" bottleneck hc_steep
[ $rc -eq 2 ] && grep -q "^analyze: run 1700000000-500: rank 1: time [0-9]* does not map onto rank 0's clock within 0..9223372036854775807 ns$" hc_steep_b.err ||
    fail "a steep clock: exit $rc: $(cat hc_steep_b.err)"
ok

echo "it_ranks: $n_checks checks passed"
