#!/usr/bin/env bash
# it_cpu_python.sh: the Python-frame samples (python_stacks 'frames') in the
# CPU views beside `analyze cpu` and --folded (docs/analyze.md, "export"
# --pprof/--firefox, "report", "diff"), on traces whose samples are known
# exactly: tests/test_cpu_pysample.c's recorder (`--record-py PATH VARIANT`,
# 12 steps; per step 2 samples read_batch < <module> in stage load, in stage
# fwd HOT samples hot < Model.forward < <module> (4 in a and mixed, 12 in
# b), 3 cold < Model.forward < <module> and 1 of a function named
# 'we"ird\<b>' + a control byte (stored as '?') in '/app/q"uote.py'; in
# step 0's fwd one sample with no frame; meta python_frames_hz 100.0). So a
# has 24 samples in load and 12 x 8 + 1 = 97 in fwd, and no kernel samples
# (only Python ones); mixed has the kernel's samples too; the recorder of
# tests/test_cpu_record.c gives a trace with none.
#  - --pprof: sample types samples/count, cpu/nanoseconds, python_samples/
#    count, python_wall/nanoseconds; a Python sample's values [0, 0, n,
#    n x 10^7] with labels thread, stage, role and source=python-frames, a
#    kernel one's [n, n x period, 0, 0] without source; per stage the sums
#    of `analyze cpu` (24 and 97; the kernel's as its samples column); the
#    frame-less sample a Sample without locations; py::hot's Location has no
#    mapping and one Line: function py::hot:/app/model.py, file
#    /app/model.py, line 10; the odd name as recorded; default_sample_type
#    python_wall with only Python samples, cpu with both; the trace with none:
#    the two kernel types only; where Go is installed, `go tool pprof -top`
#    shows the kernel's CPU time by default, -sample_index=python_samples
#    the 121 Python samples with their names as recorded (py::<module>:...),
#    -tagfocus=stage=load the 24 of read_batch;
#  - --firefox: after each thread with Python samples an entry
#    "main (Python)", tid 2100000000 + its id, not the main thread, no
#    markers, its stacks exactly the recorder's (stage:fwd alone for the
#    frame-less one), times in order within the profile; the thread's own
#    entry keeps the kernel's samples only (`analyze cpu`'s count) and its
#    markers; no such entry without Python samples;
#  - report --html: under "Python stacks (sampled from the interpreter at
#    100.0 Hz)" a graph per stage, "main · fwd (Python): 97 samples" and
#    "main · load (Python): 24 samples", the odd name escaped;
#    --cpu-stage load: the load graphs only; none without Python samples;
#  - diff a b: hot grew (44 -> 132 samples over the 11 step windows,
#    40.000 -> 120.000 ms per step) in the Python block and table
#    cpu_python_functions, tested at alpha / 4; cold (33 -> 33) is not
#    listed; diff a a: no Python function grew; diff against the trace
#    without Python samples: one line says they are only in one;
#  - a hostile meta python_frames_hz ('<b>"'): the report escapes it, pprof
#    and diff run (no rate: no wall time, no Python function tested);
#  - a hostile name (cpu_symbols edited: a newline, a tab, \x01, a stray
#    byte \xff, a quote, </svg><script>): pprof's strings stay valid UTF-8
#    (U+FFFD for the stray byte), the JSON parses with the name as it is,
#    the report escapes it ('?' for control bytes), --folded as its rules.
#
#   bash tests/it_cpu_python.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
PYREC="$BUILD/tests/test_cpu_pysample"
REC="$BUILD/tests/test_cpu_record"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$PYREC" ] && [ -x "$REC" ] || { echo "SKIP: $PYREC or $REC is not built (cmocka missing?)"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the outputs"; exit 0; }

it_enter_tmp

for v in a b mixed; do
    run "rec.$v" "$PYREC" --record-py "$v.sqlite" "$v"
    [ $rc -eq 0 ] || fail "recorder $v: exit $rc: $(cat "rec.$v.err")"
done
run rec.none "$REC" --record none.sqlite
[ $rc -eq 0 ] || fail "recorder: exit $rc: $(cat rec.none.err)"
ok

for v in a mixed none; do
    expect_ok "cpu.$v" "$A" cpu --format csv --top 0 "$v.sqlite"
    expect_ok "pprof.$v" "$A" export "$v.sqlite" --pprof "$v.pb.gz"
    expect_ok "firefox.$v" "$A" export "$v.sqlite" --firefox "$v.json"
    expect_ok "report.$v" "$A" report "$v.sqlite" --html "$v.html"
    "$A" sql --format csv "$v.sqlite" "select id, name from threads" >"$v.threads"
done
expect_ok report.load "$A" report a.sqlite --html a_load.html --cpu-stage load

# ---- pprof ------------------------------------------------------------------------------------
py "pprof" <<'EOF'
import csv, gzip, io

def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7f) << s; s += 7
        if c < 0x80:
            return v, i

def msg(b):
    i, d = 0, {}
    while i < len(b):
        key, i = varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        else:
            assert wt == 2, wt
            n, i = varint(b, i)
            v = b[i:i + n]; i += n
        d.setdefault(f, []).append((wt, v))
    return d

def one(d, f, default=0):
    return d[f][-1][1] if f in d else default

def ints(d, f):
    out = []
    for wt, v in d.get(f, []):
        if wt == 0:
            out.append(v)
            continue
        i = 0
        while i < len(v):
            x, i = varint(v, i)
            out.append(x)
    return out

def cpu_samples(name):
    blocks = open(f"cpu.{name}.out").read().strip().split("\n\n")
    return {r["stage"]: int(r["samples"]) for r in csv.DictReader(io.StringIO(blocks[1])) if int(r["samples"])}

def load(name):
    data = open(f"{name}.pb.gz", "rb").read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    prof = msg(data)
    S = [v.decode() for wt, v in prof.get(6, [])]
    assert S[0] == ""
    types = [(S[one(m, 1)], S[one(m, 2)]) for m in (msg(v) for wt, v in prof[1])]
    fns = {one(m, 1): m for m in (msg(v) for wt, v in prof.get(5, []))}
    locs = {one(m, 1): m for m in (msg(v) for wt, v in prof.get(4, []))}
    samples = []
    for wt, v in prof.get(2, []):
        s = msg(v)
        labels = {S[one(msg(l), 1)]: S[one(msg(l), 2)] for wt2, l in s.get(3, [])}
        ids = ints(s, 1)
        assert all(i in locs for i in ids), ids
        names = [S[one(fns[one(msg(ln), 1)], 2)] for i in ids for wt2, ln in locs[i].get(4, [])]
        samples.append((ints(s, 2), labels, names))
    default = S[one(prof, 14)] if 14 in prof else None
    return S, types, fns, locs, samples, default

KERNEL = [("samples", "count"), ("cpu", "nanoseconds")]
PY = [("python_samples", "count"), ("python_wall", "nanoseconds")]
odd = 'py::we"ird\\<b>?:/app/q"uote.py'

for name in ("a", "mixed"):
    S, types, fns, locs, samples, default = load(name)
    assert types == KERNEL + PY, types
    py_sums, k_sums, empty = {}, {}, 0
    for vals, labels, names in samples:
        assert len(vals) == 4, vals
        if labels.get("source") == "python-frames":
            assert set(labels) == {"thread", "stage", "role", "source"}, labels
            assert vals[0] == vals[1] == 0 and vals[3] == vals[2] * 10000000, vals
            py_sums[labels["stage"]] = py_sums.get(labels["stage"], 0) + vals[2]
            assert all(n.startswith("py::") for n in names), names
            if not names:
                empty += vals[2]
                assert labels["stage"] == "fwd", labels
        else:
            assert set(labels) == {"thread", "stage", "role"}, labels
            assert vals[2] == vals[3] == 0 and vals[1] == vals[0] * 1000000, vals
            k_sums[labels["stage"]] = k_sums.get(labels["stage"], 0) + vals[0]
            assert not any(n.startswith("py::") for n in names), names
    assert py_sums == {"load": 24, "fwd": 97}, py_sums
    assert empty == 1, empty
    assert k_sums == cpu_samples(name), (k_sums, cpu_samples(name))
    assert default == ("python_wall" if name == "a" else "cpu"), default
    if name == "mixed":
        assert sum(k_sums.values()) >= 5, k_sums  # 240 ms of spinning at 1 ms
    hot = [f for f in fns.values() if S[one(f, 2)] == "py::hot:/app/model.py"]
    assert len(hot) == 1 and S[one(hot[0], 4)] == "/app/model.py" and one(hot[0], 3) == 0, hot  # no system_name
    hot_id = one(hot[0], 1)
    hot_locs = [l for l in locs.values() if any(one(msg(ln), 1) == hot_id for wt, ln in l.get(4, []))]
    assert hot_locs and all(one(l, 2) == 0 and len(l[4]) == 1 and one(msg(l[4][0][1]), 2) == 10 for l in hot_locs)
    assert odd in S and any(S[one(f, 4)] == '/app/q"uote.py' for f in fns.values()), "the odd name"

S, types, fns, locs, samples, default = load("none")
assert types == KERNEL and default is None, (types, default)
assert not any(l.get("source") for v, l, n in samples)
EOF

# go tool pprof itself, where Go is installed: the kernel's CPU time by default (with only Python
# samples, their wall time), the Python samples by -sample_index, names as recorded
if command -v go >/dev/null && HOME=$T go tool pprof -h >/dev/null 2>&1; then
    gp() { HOME=$T GOFLAGS= go tool pprof "$@" 2>/dev/null; }
    gp -top mixed.pb.gz >gp.mixed || fail "go tool pprof -top mixed: $(cat gp.mixed)"
    grep -q '^Type: cpu$' gp.mixed || fail "mixed: default type: $(head -5 gp.mixed)"
    ! grep -q 'py::' gp.mixed || fail "mixed: Python frames in the CPU time: $(cat gp.mixed)"
    gp -top a.pb.gz >gp.a || fail "go tool pprof -top a"
    grep -q '^Type: python_wall$' gp.a && grep -q 'Total samples = 1210ms' gp.a || fail "a: $(head -5 gp.a)"
    gp -top -sample_index=python_samples mixed.pb.gz >gp.py || fail "go tool pprof python_samples"
    grep -q 'Total samples = 121 *$' gp.py || fail "python_samples: $(head -5 gp.py)"
    grep -Eq '^ +48 .* py::hot:/app/model.py$' gp.py && grep -Eq ' 120 .* py::<module>:/app/train.py$' gp.py &&
        grep -Fq 'py::we"ird\<b>?:/app/q"uote.py' gp.py || fail "python_samples: $(cat gp.py)"
    gp -top -sample_index=python_samples -tagfocus=stage=load mixed.pb.gz >gp.load || fail "tagfocus"
    grep -Eq '^ +24 .* py::read_batch:/app/data.py$' gp.load || fail "tagfocus stage=load: $(cat gp.load)"
    ok
else
    echo "it_cpu_python: no go tool pprof here: the profile is checked by the decoder above only"
fi

# ---- firefox ----------------------------------------------------------------------------------
py "firefox" <<'EOF'
import collections, csv, io, json

for name in ("a", "mixed", "none"):
    d = json.load(open(f"{name}.json"))
    sh = d["shared"]
    S, st, fr, fn = sh["stringArray"], sh["stackTable"], sh["frameTable"], sh["funcTable"]
    ids = {r["name"]: int(r["id"]) for r in csv.DictReader(open(f"{name}.threads"))}
    blocks = open(f"cpu.{name}.out").read().strip().split("\n\n")
    kernel = sum(int(r["samples"]) for r in csv.DictReader(io.StringIO(blocks[0])))
    names = [t["name"] for t in d["threads"]]
    def stacks(t):
        c = collections.Counter()
        for s in t["samples"]["stack"]:
            path = []
            while s is not None:
                path.append(S[fn["name"][fr["func"][st["frame"][s]]]])
                s = st["prefix"][s]
            c[";".join(reversed(path))] += 1
        return c
    if name == "none":
        assert not any(n.endswith("(Python)") for n in names), names
        continue
    assert names == ["main", "main (Python)"], names
    own, pyt = d["threads"]
    assert own["samples"]["length"] == kernel, (own["samples"]["length"], kernel)
    assert own["markers"]["length"] == 36, own["markers"]["length"]  # 24 ranges, 12 step marks
    assert not any("py::" in k for k in stacks(own)), stacks(own)
    assert pyt["tid"] == 2100000000 + ids["main"] and pyt["isMainThread"] is False and own["isMainThread"] is True
    assert pyt["pid"] == own["pid"] and pyt["markers"]["length"] == 0 and pyt["markers"]["name"] == []
    sm = pyt["samples"]
    assert sm["length"] == len(sm["stack"]) == len(sm["time"]) == 121, sm["length"]
    assert sm["time"] == sorted(sm["time"])
    assert all(d["meta"]["profilingStartTime"] <= x < d["meta"]["profilingEndTime"] for x in sm["time"])
    want = {
        "stage:load;py::<module>:/app/train.py;py::read_batch:/app/data.py": 24,
        "stage:fwd;py::<module>:/app/train.py;py::Model.forward:/app/model.py;py::hot:/app/model.py": 48,
        "stage:fwd;py::<module>:/app/train.py;py::Model.forward:/app/model.py;py::cold:/app/model.py": 36,
        'stage:fwd;py::<module>:/app/train.py;py::we"ird\\<b>?:/app/q"uote.py': 12,
        "stage:fwd": 1,
    }
    assert stacks(pyt) == want, stacks(pyt)
EOF

# ---- report -----------------------------------------------------------------------------------
py "report" <<'EOF'
import re
for name in ("a", "mixed"):
    h = open(f"{name}.html").read()
    i = h.index("<h3>Python stacks (sampled from the interpreter at 100.0 Hz)</h3>")
    assert i > h.index("<h3>Flame graphs</h3>"), "the Python graphs come after the kernel's"
    heads = re.findall(r"<h3>([^<]*\(Python\)[^<]*)</h3>", h)
    assert heads == ["main \u00b7 fwd (Python): 97 samples", "main \u00b7 load (Python): 24 samples"], heads
    assert h.count('<svg class="flame" data-source="python-frames"') == 2
    assert "py::we&quot;ird\\&lt;b&gt;?:/app/q&quot;uote.py: 12 samples" in h
    assert "ird\\<b>" not in h
h = open("a_load.html").read()
heads = re.findall(r"<h3>([^<]*\(Python\)[^<]*)</h3>", h)
assert heads == ["main \u00b7 load (Python): 24 samples"], heads
assert "Python stacks" not in open("none.html").read()
EOF

# ---- diff -------------------------------------------------------------------------------------
expect_ok diff.ab "$A" diff a.sqlite b.sqlite
expect_ok diff.ab_csv "$A" diff a.sqlite b.sqlite --format csv --table cpu_python_functions
expect_ok diff.aa "$A" diff a.sqlite a.sqlite
expect_ok diff.anone "$A" diff a.sqlite none.sqlite
grep -q '^Python functions whose sampled wall time grew beyond sampling noise (Python-frame samples, innermost frame; binomial test at alpha / 4 functions):$' diff.ab.out ||
    fail "diff a b: no Python block: $(cat diff.ab.out)"
grep -q '^  main/fwd: py::hot:/app/model.py (/app/model.py) 40.000 -> 120.000 ms per step (44 -> 132 samples, p = ' diff.ab.out ||
    fail "diff a b: hot not named: $(grep -A3 Python diff.ab.out)"
! grep -q 'py::cold' diff.ab.out || fail "diff a b: cold did not grow"
ok
py "diff table" <<'EOF'
import csv
rows = list(csv.DictReader(open("diff.ab_csv.out")))
assert [(r["stage"], r["function"], r["file"], r["samples_a"], r["samples_b"], r["ms_per_step_a"], r["ms_per_step_b"], r["grew"])
        for r in rows] == [("fwd", "py::hot:/app/model.py", "/app/model.py", "44", "132", "40.000", "120.000", "yes")], rows
assert float(rows[0]["p_value"]) < 0.01 / 4
EOF
grep -q "^No Python function's sampled wall time grew beyond sampling noise (4 functions, binomial test at alpha / 4)\.$" diff.aa.out ||
    fail "diff a a: $(grep -i python diff.aa.out)"
ok
grep -q '^Python-frame samples are only in A: Python functions are not compared\.$' diff.anone.out ||
    fail "diff a none: $(cat diff.anone.out | head -20)"
ok

# ---- a hostile rate: meta python_frames_hz '<b>"' ---------------------------------------------
command -v sqlite3 >/dev/null || { echo "it_cpu_python: $n_checks checks passed (no sqlite3: the hostile rate is not checked)"; exit 0; }
cp a.sqlite bad.sqlite
sqlite3 bad.sqlite "update meta set value = '<b>\"' where key = 'python_frames_hz'"
expect_ok pprof.bad "$A" export bad.sqlite --pprof bad.pb.gz
expect_ok report.bad "$A" report bad.sqlite --html bad.html
expect_ok diff.bad "$A" diff bad.sqlite b.sqlite
grep -q '<h3>Python stacks (sampled from the interpreter at &lt;b&gt;&quot; Hz)</h3>' bad.html || fail "report: the rate is not escaped"
grep -q "^No Python function's sampled wall time grew beyond sampling noise (0 functions" diff.bad.out ||
    fail "diff with no rate: $(grep -i python diff.bad.out)"
ok
py "pprof without a rate" <<'EOF'
import gzip
data = open("bad.pb.gz", "rb").read()
data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
assert b"python_wall" in data and b"python-frames" in data
EOF

# ---- a hostile name: py::hot renamed with a newline, a tab, a control byte, a stray byte, a quote, tags
cp a.sqlite name.sqlite
sqlite3 name.sqlite "update cpu_symbols set name = cast(X'70793a3a680a0901ff223c2f7376673e3c7363726970743e3a2f6170702f6d6f64656c2e7079' as text)
    where name = 'py::hot:/app/model.py'"
expect_ok pprof.name "$A" export name.sqlite --pprof name.pb.gz
expect_ok firefox.name "$A" export name.sqlite --firefox name.json
expect_ok report.name "$A" report name.sqlite --html name.html
expect_ok folded.name "$A" export name.sqlite --folded name.txt
py "a hostile name" <<'EOF'
import gzip, json
data = open("name.pb.gz", "rb").read()
data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7f) << s; s += 7
        if c < 0x80:
            return v, i
strings, i = [], 0
while i < len(data):  # the top-level fields: string_table (6) is length-delimited
    key, i = varint(data, i)
    if key & 7 == 0:
        v, i = varint(data, i)
        continue
    n, i = varint(data, i)
    if key >> 3 == 6:
        strings.append(data[i:i + n].decode("utf-8"))  # strict: every string valid UTF-8
    i += n
# the stray byte as U+FFFD, the control bytes kept inside the string
assert 'py::h\n\t\x01\ufffd"</svg><script>:/app/model.py' in strings, [x for x in strings if "py::h" in x]
d = json.load(open("name.json"))
assert 'py::h\n\t\x01\ufffd"</svg><script>:/app/model.py' in d["shared"]["stringArray"]
h = open("name.html", "rb").read()
assert b"<script>" not in h and b"\x01" not in h and b"\xff" not in h
assert b"py::h???&#xFFFD;&quot;&lt;/svg&gt;&lt;script&gt;:/app/model.py: 48 samples" in h
lines = open("name.txt", "rb").read().split(b"\n")
assert any(l.endswith(b";py::h?_?\xff\"</svg><script>:/app/model.py 48") for l in lines), lines
EOF

echo "it_cpu_python: $n_checks checks passed"
