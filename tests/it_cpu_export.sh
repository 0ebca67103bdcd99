#!/usr/bin/env bash
# it_cpu_export.sh: the CPU capture's stacks as exports and in the report
# (docs/analyze.md, "export" --folded/--pprof, "report" CPU section), on a
# real recording with known stacks: tests/test_cpu_record.c's recorder
# (`test_cpu_record --record PATH`: stages spin, sleep and burn, three
# rounds, 1 ms sample period; burn() calls burn_step, which calls burn_leaf).
#  - --folded: every line 'THREAD;STAGE;FRAMES COUNT'; the counts per
#    thread and stage add up to `analyze cpu`'s samples column exactly; of
#    stage burn's samples >= 90 % have burn in the stack; --folded-weight ns
#    gives the same lines with COUNT x period_ns; a symbol renamed 'a;b c'
#    reads 'a:b_c' and the line still parses;
#  - --pprof: gzipped (zlib here) or plain, decoded by the protobuf reader
#    below: sample types samples/count and cpu/nanoseconds, period type
#    cpu/nanoseconds and period 1000000, string_table[0] == "", every
#    location, function and mapping id a sample or location names exists,
#    values [n, n x 1000000], labels thread/stage/role, per stage the same
#    sums as `analyze cpu`, burn_leaf a function with the recorder's file as
#    its mapping;
#  - report --html: a CPU section with a bar per stage and a flame graph of
#    burn naming burn and burn_leaf; --cpu-stage spin: the spin graph only;
#    an unknown --cpu-stage: one line, exit 2; the same trace without its
#    CPU tables: the report is byte for byte the CPU trace's without the
#    CPU section;
#  - errors: --folded/--pprof on a trace without the CPU tables: one line,
#    exit 2, no file; an unwritable path: one line; a bad --folded-weight:
#    exit 2; hostile CPU tables (a stack that does not decode, a symbol of
#    an unknown map): the reader's line naming the table, exit 2, no file,
#    for --folded, --pprof and report.
#
#   bash tests/it_cpu_export.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
REC="$BUILD/tests/test_cpu_record"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$REC" ] || { echo "SKIP: $REC is not built (cmocka missing?)"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the outputs"; exit 0; }
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 is needed to edit the trace"; exit 0; }

it_enter_tmp

mkdir cpu nocpu
run rec "$REC" --record cpu/run.sqlite
[ $rc -eq 0 ] || fail "recorder: exit $rc: $(cat rec.err)"
[ "$(sqlite3 cpu/run.sqlite "select value from meta where key = 'cpu_mode'")" = perf ] ||
    { echo "SKIP: perf events refused here: $(sqlite3 cpu/run.sqlite "select value from meta where key = 'cpu_reason'")"; exit 0; }
ok
cp cpu/run.sqlite nocpu/run.sqlite
sqlite3 nocpu/run.sqlite "drop table cpu_threads; drop table cpu_chunks; drop table cpu_stacks; drop table cpu_maps;
    drop table cpu_symbols; drop table cpu_blocks; drop table cpu_windows"

expect_ok cpucsv "$A" cpu --format csv --top 0 cpu/run.sqlite
expect_ok folded "$A" export cpu/run.sqlite --folded folded.txt
expect_ok folded_ns "$A" export cpu/run.sqlite --folded folded_ns.txt --folded-weight ns
expect_ok pprof "$A" export cpu/run.sqlite --pprof prof.pb.gz

py "folded" <<'EOF'
import csv, io
blocks = open("cpucsv.out").read().strip().split("\n\n")
stages = list(csv.DictReader(io.StringIO(blocks[1])))
want = {(s["thread"], s["stage"]): int(s["samples"]) for s in stages if int(s["samples"])}
assert want.get(("main", "burn"), 0) >= 10, want  # 300 ms of burn at 1 ms, fewer on a loaded host
got, burn_total, burn_with = {}, 0, 0
lines = open("folded.txt").read().splitlines()
texts = [l.rsplit(" ", 1)[0] for l in lines]
assert texts == sorted(texts, key=str.encode), "lines not in byte order"
assert len(set(texts)) == len(texts), "a stack on two lines"
for l in lines:
    stack, count = l.rsplit(" ", 1)
    count = int(count)
    assert count > 0
    frames = stack.split(";")
    assert len(frames) >= 2, l
    key = (frames[0], frames[1])
    got[key] = got.get(key, 0) + count
    if key == ("main", "burn"):
        burn_total += count
        burn_with += count * ("burn" in frames[2:])
assert got == want, (got, want)
assert burn_with >= 0.9 * burn_total, (burn_with, burn_total)
ns = open("folded_ns.txt").read().splitlines()
assert len(ns) == len(lines)
for a, b in zip(lines, ns):
    sa, ca = a.rsplit(" ", 1)
    sb, cb = b.rsplit(" ", 1)
    assert sa == sb and int(cb) == int(ca) * 1000000, (a, b)
EOF

# ---- pprof ------------------------------------------------------------------------------------
# burn_leaf's body, for the lines of its location where the trace has them (cpu_lines libdw)
export CPU_LINES=$(sqlite3 cpu/run.sqlite "select value from meta where key = 'cpu_lines'")
export LEAF_FIRST=$(grep -n '^__attribute__((noinline, noclone)) static uint64_t burn_leaf' "$ROOT/tests/test_cpu_record.c" | cut -d: -f1)
export LEAF_LAST=$(awk -v a="$LEAF_FIRST" 'NR > a && /^}/ { print NR; exit }' "$ROOT/tests/test_cpu_record.c")
py "pprof" <<'EOF'
import csv, gzip, io, os
data = open("prof.pb.gz", "rb").read()
if data[:2] == b"\x1f\x8b":
    data = gzip.decompress(data)

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7f) << s; s += 7
        if c < 0x80:
            return v, i

def fields(b):
    """(field, wire type, value) of a message: ints for varints, bytes for length-delimited."""
    i, out = 0, []
    while i < len(b):
        key, i = varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 2:
            n, i = varint(b, i)
            v = b[i:i + n]; i += n
            assert len(v) == n, "truncated"
        else:
            raise AssertionError("wire type %d" % wt)
        out.append((f, wt, v))
    assert i == len(b)
    return out

def packed(wt, v):
    if wt == 0:
        return [v]
    i, out = 0, []
    while i < len(v):
        x, i = varint(v, i)
        out.append(x)
    return out

def msg(b):
    d = {}
    for f, wt, v in fields(b):
        d.setdefault(f, []).append((wt, v))
    return d

def one(d, f, default=0):
    return d[f][-1][1] if f in d else default

prof = msg(data)
strings = [v.decode() for wt, v in prof.get(6, [])]
assert strings and strings[0] == "", strings[:3]
S = lambda i: strings[i]
types = [(S(one(m, 1)), S(one(m, 2))) for m in (msg(v) for wt, v in prof[1])]
assert types == [("samples", "count"), ("cpu", "nanoseconds")], types
pt = msg(one(prof, 11))
assert (S(one(pt, 1)), S(one(pt, 2))) == ("cpu", "nanoseconds")
assert one(prof, 12) == 1000000, one(prof, 12)
mappings = {one(m, 1): m for m in (msg(v) for wt, v in prof.get(3, []))}
functions = {one(m, 1): m for m in (msg(v) for wt, v in prof.get(5, []))}
locations = {one(m, 1): m for m in (msg(v) for wt, v in prof.get(4, []))}
assert mappings and functions and locations
assert 0 not in mappings and 0 not in functions and 0 not in locations
for lid, l in locations.items():
    mid = one(l, 2)
    assert mid == 0 or mid in mappings, (lid, mid)
    for wt, line in l.get(4, []):
        assert one(msg(line), 1) in functions
fn_name = {fid: S(one(f, 2)) for fid, f in functions.items()}
loc_fns = {lid: [fn_name[one(msg(line), 1)] for wt, line in l.get(4, [])] for lid, l in locations.items()}
leaf = [l for lid, l in locations.items() if loc_fns[lid] == ["burn_leaf"]]
assert leaf, "no location of burn_leaf"
m = mappings[one(leaf[0], 2)]
assert S(one(m, 5)).endswith("test_cpu_record"), S(one(m, 5))
assert one(m, 2) <= one(leaf[0], 3) <= one(m, 3), "the address is outside its mapping"
# Function.filename: the source file and Line.line a line of burn_leaf with lines, else the mapping's path
first, last = int(os.environ["LEAF_FIRST"]), int(os.environ["LEAF_LAST"])
for l in leaf:
    lines = [msg(v) for wt, v in l.get(4, [])]
    f = functions[one(lines[0], 1)]
    if os.environ["CPU_LINES"] == "libdw":
        assert S(one(f, 4)).endswith("/tests/test_cpu_record.c"), S(one(f, 4))
        assert first <= one(lines[0], 2) <= last, (one(lines[0], 2), first, last)
    else:
        assert S(one(f, 4)).endswith("test_cpu_record") and one(lines[0], 2) == 0, S(one(f, 4))
sums, burn_total, burn_with = {}, 0, 0
for wt, v in prof[2]:
    s = msg(v)
    ids = [x for wt2, v2 in s.get(1, []) for x in packed(wt2, v2)]
    vals = [x for wt2, v2 in s.get(2, []) for x in packed(wt2, v2)]
    assert all(i in locations for i in ids), ids
    assert len(vals) == 2 and vals[1] == vals[0] * 1000000, vals
    labels = {}
    for wt2, lv in s.get(3, []):
        lm = msg(lv)
        labels[S(one(lm, 1))] = S(one(lm, 2))
    assert set(labels) == {"thread", "stage", "role"}, labels
    assert labels["role"] == "worker", labels
    key = (labels["thread"], labels["stage"])
    sums[key] = sums.get(key, 0) + vals[0]
    if key == ("main", "burn"):
        burn_total += vals[0]
        burn_with += vals[0] * any("burn" in loc_fns[i] for i in ids)
blocks = open("cpucsv.out").read().strip().split("\n\n")
want = {(r["thread"], r["stage"]): int(r["samples"]) for r in csv.DictReader(io.StringIO(blocks[1])) if int(r["samples"])}
assert sums == want, (sums, want)
assert burn_with >= 0.9 * burn_total, (burn_with, burn_total)
EOF

# ---- names made safe ---------------------------------------------------------------------------
cp cpu/run.sqlite renamed.sqlite
sqlite3 renamed.sqlite "update cpu_symbols set name = 'a;b c' where name = 'burn_leaf'"
expect_ok renamed "$A" export renamed.sqlite --folded renamed.txt
grep -q '^main;burn;.*;a:b_c [0-9][0-9]*$' renamed.txt || fail "renamed: no 'a:b_c' leaf: $(head -3 renamed.txt)"
ok

# ---- the report -------------------------------------------------------------------------------
(cd cpu && "$A" report run.sqlite --html ../cpu.html >../rep.out 2>../rep.err) || fail "report: $(cat rep.err)"
[ ! -s rep.err ] || fail "report: stderr: $(cat rep.err)"
(cd nocpu && "$A" report run.sqlite --html ../nocpu.html 2>../rep2.err) || fail "report nocpu: $(cat rep2.err)"
ok
py "report" <<'EOF'
import re
html = open("cpu.html").read()
i = html.index('<section id="cpu">')
j = html.index("</section>\n", i) + len("</section>\n")
sec = html[i:j]
bars = re.findall(r'<g class="cpu-bar" data-thread="main" data-stage="([^"]+)">', sec)
assert {"spin", "sleep", "burn"} <= set(bars), bars
flames = re.findall(r'<svg class="flame" data-thread="([^"]+)" data-stage="([^"]+)"', sec)
assert ("main", "burn") in flames and len(flames) <= 3, flames
k = sec.index('data-stage="burn" width')
graph = sec[k:sec.index("</svg>", k)]
assert re.search(r"<title>burn: \d+ samples, \d+\.\d%</title>", graph), "no burn frame"
assert re.search(r"<title>burn_leaf: \d+ samples", graph), "no burn_leaf frame"
assert "http://" not in html and "<script" not in html
# without the CPU tables: the same page, the CPU section left out
assert '<section id="cpu">' not in open("nocpu.html").read()
assert html[:i] + html[j:] == open("nocpu.html").read(), "the non-CPU report differs beyond the CPU section"
EOF
expect_ok spin "$A" report cpu/run.sqlite --html spin.html --cpu-stage spin
grep -q '<svg class="flame" data-thread="main" data-stage="spin"' spin.html || fail "--cpu-stage spin: no spin graph"
[ "$(grep -c '<svg class="flame"' spin.html)" -eq 1 ] || fail "--cpu-stage spin: other graphs"
ok
expect_ok two "$A" report cpu/run.sqlite --html two.html --cpu-stage spin,burn
[ "$(grep -c '<svg class="flame"' two.html)" -eq 2 ] || fail "--cpu-stage spin,burn: not two graphs"
ok
expect_usage badstage "$A" report cpu/run.sqlite --html bad.html --cpu-stage nosuch
grep -q "has no stage 'nosuch'" badstage.err || fail "badstage: $(cat badstage.err)"
[ ! -e bad.html ] || fail "badstage: wrote a file"
ok
expect_usage nocpustage "$A" report nocpu/run.sqlite --html bad.html --cpu-stage spin
grep -q 'has no CPU capture' nocpustage.err || fail "nocpustage: $(cat nocpustage.err)"
ok

# ---- errors -----------------------------------------------------------------------------------
expect_usage nofolded "$A" export nocpu/run.sqlite --folded x.txt
grep -q 'has no CPU capture (record with --trace-cpu / st_options.cpu): --folded needs one' nofolded.err ||
    fail "nofolded: $(cat nofolded.err)"
expect_usage nopprof "$A" export nocpu/run.sqlite --pprof x.pb.gz --chrome x.json
[ ! -e x.txt ] && [ ! -e x.pb.gz ] && [ ! -e x.json ] || fail "a failed export left a file"
ok
run unwritable "$A" export cpu/run.sqlite --folded /nonexistent/dir/f.txt
[ $rc -ne 0 ] && [ "$(wc -l <unwritable.err)" -eq 1 ] || fail "unwritable: exit $rc: $(cat unwritable.err)"
grep -q '^analyze: export: cannot write /nonexistent/dir/f.txt' unwritable.err || fail "unwritable: $(cat unwritable.err)"
ok
expect_usage weight "$A" export cpu/run.sqlite --folded w.txt --folded-weight us
expect_usage weight2 "$A" export cpu/run.sqlite --chrome w.json --folded-weight ns
# hostile CPU tables: the reader's one line naming the table, exit 2, no file
cp cpu/run.sqlite h_stack.sqlite
sqlite3 h_stack.sqlite "update cpu_stacks set n_frames = n_frames + 1"
cp cpu/run.sqlite h_map.sqlite
sqlite3 h_map.sqlite "update cpu_symbols set map = 9999 where addr = (select min(addr) from cpu_symbols where map >= 0)"
for h in stack:cpu_stacks map:cpu_symbols; do
    name=${h%%:*} table=${h#*:}
    for fmt in folded pprof; do
        expect_usage "h_${name}_$fmt" "$A" export "h_$name.sqlite" --$fmt "h_$name.$fmt"
        grep -q "trace table '$table'" "h_${name}_$fmt.err" || fail "h_${name}_$fmt: $(cat "h_${name}_$fmt.err")"
        [ ! -e "h_$name.$fmt" ] || fail "h_${name}_$fmt: left a file"
    done
    expect_usage "h_${name}_report" "$A" report "h_$name.sqlite" --html "h_$name.html"
    [ ! -e "h_$name.html" ] || fail "h_${name}_report: left a file"
done
ok
echo "it_cpu_export: $n_checks checks passed"
