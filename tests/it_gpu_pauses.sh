#!/usr/bin/env bash
# it_gpu_pauses.sh: the gpu_pauses table (st_gpu_pause; docs/trace-format.md
# "gpu_pauses", docs/analyze.md "gpu") as every analysis reads it, on the GPU
# sample h200-sync with pauses added by hand, relative to its step 1 mark (the
# start of `analyze gpu`'s window, steps 2-10):
#   A [s1+100 ms, s1+150 ms), B [s1-10 ms, s1+5 ms), C = A again.
# In the window: A 50 ms + B's last 5 ms = 55 ms, 3 pauses meet it (C
# overlaps A and counts once); over the trace the union is 65 ms, and the
# pauses run from s1-10 ms to s1+150 ms. `analyze gpu` says so under its
# window line; paused time is neither busy nor idle: the devices table puts
# the 55 ms in unrecorded_ms and busy + idle + unrecorded is the window;
# every analysis warns once on stderr; bottleneck's GPU idle line names the
# paused time of its window and its devices say they are estimated from the
# recorded share. A sampled capture (meta gpu_every_steps) is named by info
# and gpu. A row with t1_ns < t0_ns, a
# text time and a table of the wrong shape are refused in one line, exit 2.
#
#   bash tests/it_gpu_pauses.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
S="$ROOT/samples/traces/h200-sync.sqlite"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -f "$S" ] || { echo "SKIP: no sample trace $S"; exit 0; }
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 is needed"; exit 0; }
it_enter_tmp

cp "$S" p.sqlite
s1=$(sqlite3 p.sqlite "select ts_ns from steps where step = 1")
sqlite3 p.sqlite "CREATE TABLE gpu_pauses(id INTEGER PRIMARY KEY, t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL);
  INSERT INTO gpu_pauses(t0_ns, t1_ns) VALUES ($s1 + 100000000, $s1 + 150000000), ($s1 - 10000000, $s1 + 5000000),
                                              ($s1 + 100000000, $s1 + 150000000)"

run gpu "$A" gpu p.sqlite
[ $rc -eq 0 ] || fail "gpu: exit $rc: $(cat gpu.err)"
grep -q '^devices and host_wait over steps 2-10 ' gpu.out || fail "gpu: window line: $(sed -n 2p gpu.out)"
[ "$(sed -n 3p gpu.out)" = "GPU recording was paused for 55.000 ms of this window (3 pauses): that time is neither busy nor idle: devices and host_wait are of the 1464.940 ms recorded (a pause stops the kernel records; copies, memsets and API calls are recorded throughout)" ] ||
    fail "gpu: pause line: $(sed -n 3p gpu.out)"
[ "$(wc -l < gpu.err)" = 1 ] || fail "gpu: not one warning: $(cat gpu.err)"
grep -q "GPU recording was paused 3 times, 0.065 s in all, between " gpu.err || fail "gpu: warning: $(cat gpu.err)"
ok
# the same line from the trace without pauses is absent; the whole-trace tables agree
"$A" gpu "$S" > plain.out 2>/dev/null
grep -q "GPU recording was paused" plain.out && fail "a trace without pauses says it was paused"
"$A" gpu --format csv --table kernels "$S" > k0.csv 2>/dev/null
"$A" gpu --format csv --table kernels p.sqlite > k1.csv 2>/dev/null
cmp -s k0.csv k1.csv || fail "gpu: the kernels table changed"
ok
# devices: the paused 55 ms out of busy and idle alike
"$A" gpu --format csv --table devices "$S" > d0.csv 2>/dev/null
"$A" gpu --format csv --table devices p.sqlite > d1.csv 2>/dev/null
[ "$(head -1 d1.csv | tr , '\n' | tail -1)" = unrecorded_ms ] || fail "devices: no unrecorded_ms column: $(head -1 d1.csv)"
awk -F, 'NR == 2 { if ($12 != "0.000000") { print "plain unrecorded " $12; exit 1 } }' d0.csv || fail "plain trace: unrecorded"
paste -d, d0.csv d1.csv | awk -F, 'NR == 2 {
    b0 = $3; i0 = $5; b1 = $15; i1 = $17; u1 = $24; pct1 = $16
    if (u1 != "55.000000") { print "unrecorded " u1; exit 1 }
    d = (b0 + i0) - (b1 + i1 + u1); if (d < -0.000002 || d > 0.000002) { print "busy+idle+unrecorded " d; exit 1 }
    d = b1 + i1 + u1 - 1519.940; if (d < -0.001 || d > 0.001) { print "not the window: " b1 + i1 + u1; exit 1 }
    d = pct1 - 100 * b1 / (b1 + i1); if (d < -1e-9 || d > 1e-9) { print "busy_pct " pct1; exit 1 }
    if (!(b1 < b0)) { print "busy not smaller"; exit 1 } }' || fail "devices: $(cat d0.csv d1.csv)"
ok
for cmd in summary bottleneck info; do
    run "$cmd" "$A" "$cmd" p.sqlite
    [ $rc -eq 0 ] || fail "$cmd: exit $rc: $(cat "$cmd.err")"
    grep -q "paused 3 times, 0.065 s in all" "$cmd.err" "$cmd.out" || fail "$cmd: no pause warning"
done
grep -q "GPU recording paused for [0-9.]* ms of it" bottleneck.out || fail "bottleneck: no paused time in its GPU line"
grep -q "not recorded 55.000 ms (GPU recording paused: busy and idle are shares of the 1464.940 ms recorded)" bottleneck.out ||
    fail "bottleneck: GPU idle line: $(grep 'GPU idle' bottleneck.out)"
grep -q "these figures are estimated from the recorded [0-9.]* % of it" bottleneck.out || fail "bottleneck: devices estimate"
"$A" bottleneck "$S" > plain_b.out 2>/dev/null
grep -q "estimated from the recorded" plain_b.out && fail "bottleneck: estimate line without pauses"
[ "$(awk -F, 'NR == 2 { print $NF }' <("$A" info --format csv p.sqlite 2>/dev/null))" = 1 ] || fail "info: gpu_every_steps not 1"
ok
# export --chrome: each pause as a "paused" and a "resumed" instant; none without pauses
"$A" export p.sqlite --chrome p.json 2>/dev/null || fail "export p"
"$A" export "$S" --chrome plain.json 2>/dev/null || fail "export plain"
[ "$(grep -c '"name":"GPU recording paused","cat":"gpu_recording","ph":"i","s":"p"' p.json)" = 3 ] || fail "export: paused events"
[ "$(grep -c '"name":"GPU recording resumed","cat":"gpu_recording"' p.json)" = 3 ] || fail "export: resumed events"
grep -q 'gpu_recording' plain.json && fail "export: pause events without pauses"
python3 - p.json "$s1" "$(sqlite3 p.sqlite "select value from meta where key = 'start_ns'")" <<'PY' || fail "export: pause times"
import json, sys
d = json.load(open(sys.argv[1]))
s1, origin = int(sys.argv[2]), int(sys.argv[3])
ev = [e for e in d["traceEvents"] if e.get("cat") == "gpu_recording"]
got = sorted((e["ts"], e["name"]) for e in ev)
want = sorted([((s1 - 10000000 - origin) / 1e3, "GPU recording paused"), ((s1 + 5000000 - origin) / 1e3, "GPU recording resumed")]
              + 2 * [((s1 + 100000000 - origin) / 1e3, "GPU recording paused"), ((s1 + 150000000 - origin) / 1e3, "GPU recording resumed")])
assert len(got) == 6 and all(abs(a[0] - b[0]) < 0.002 and a[1] == b[1] for a, b in zip(got, want)), (got, want)
PY
ok
# a sampled capture (st_gpu_start with every_steps=3): named by info and gpu
cp p.sqlite every.sqlite
sqlite3 every.sqlite "INSERT INTO meta VALUES ('gpu_every_steps', '3')"
"$A" info every.sqlite > every_info.out 2>/dev/null
grep -q "gpu recording: sampled, one step in 3 (every_steps): paused 3 times, 0.065 s in all" every_info.out ||
    fail "info: $(grep 'gpu recording' every_info.out)"
[ "$(awk -F, 'NR == 2 { print $NF }' <("$A" info --format csv every.sqlite 2>/dev/null))" = 3 ] || fail "info: gpu_every_steps"
"$A" gpu every.sqlite > every_gpu.out 2> every_gpu.err
grep -q "(3 pauses; sampled capture: one step in 3 recorded): that time is neither busy nor idle" every_gpu.out ||
    fail "gpu: $(sed -n 3p every_gpu.out)"
grep -q "(sampled capture, every_steps)" every_gpu.err || fail "gpu: warning: $(cat every_gpu.err)"
ok

# hostile rows and shapes
cp "$S" bad1.sqlite
sqlite3 bad1.sqlite "CREATE TABLE gpu_pauses(id INTEGER PRIMARY KEY, t0_ns INTEGER NOT NULL, t1_ns INTEGER NOT NULL);
  INSERT INTO gpu_pauses VALUES (7, 200, 100)"
expect_usage bad1 "$A" gpu bad1.sqlite
grep -q "trace table 'gpu_pauses': row 7: t0_ns and t1_ns must be times with t0_ns <= t1_ns" bad1.err || fail "bad1: $(cat bad1.err)"
[ "$(wc -l < bad1.err)" = 1 ] || fail "bad1: not one line"
cp "$S" bad2.sqlite
sqlite3 bad2.sqlite "CREATE TABLE gpu_pauses(id INTEGER PRIMARY KEY, t0_ns, t1_ns); INSERT INTO gpu_pauses VALUES (1, 'x', 5)"
expect_usage bad2 "$A" summary bad2.sqlite
grep -q "gpu_pauses" bad2.err || fail "bad2: $(cat bad2.err)"
[ "$(wc -l < bad2.err)" = 1 ] || fail "bad2: not one line"
cp "$S" bad3.sqlite
sqlite3 bad3.sqlite "CREATE TABLE gpu_pauses(id INTEGER PRIMARY KEY, t0_ns INTEGER)"
expect_usage bad3 "$A" info bad3.sqlite
grep -q "gpu_pauses" bad3.err || fail "bad3: $(cat bad3.err)"
for v in x 1 1000001 -3; do
    cp every.sqlite bad4.sqlite
    sqlite3 bad4.sqlite "UPDATE meta SET value = '$v' WHERE key = 'gpu_every_steps'"
    expect_usage bad4 "$A" gpu bad4.sqlite
    grep -q "gpu_every_steps" bad4.err || fail "bad4 $v: $(cat bad4.err)"
    [ "$(wc -l < bad4.err)" = 1 ] || fail "bad4 $v: not one line: $(cat bad4.err)"
done
ok
echo "it_gpu_pauses: $n_checks checks passed"
