#!/usr/bin/env bash
# it_report.sh: integration test of `analyze report --html`. On the traces of
# `tracegen DIR` (and a short trainer run when the trainer is
# built) it checks the HTML structurally: every <svg> block is well-formed XML,
# the expected sections and chart titles are there, nothing is loaded from
# anywhere (no http:// or https://, no script, no external font or
# stylesheet), every string from the trace is escaped, the timeline's
# rectangles stay bounded on a trace of dense tiny ranges; the output-file
# rules (an existing file needs --overwrite, a failed report leaves nothing
# behind; on success the one line on stdout is the path written). On a
# recorded H200 sample (samples/traces) and tracegen's GPU trace, the top-kernels
# tables against `analyze gpu --format json`'s kernels and busy figures; on
# every page, the verdict before the run's metadata, the window labels, the
# one line of a role that only waits (exactly the roles under 1% busy in the
# roles table), and the timeline's export command, run as printed (quoted for
# the shell). Then it renders the pages in headless Chromium and checks that the
# screenshot is a PNG that is not blank (a small pure-Python PNG decoder
# counts its colours). Without chromium the rendering part is skipped
# (SKIP line: install Debian's `chromium` package to run it).
#
#   bash tests/it_report.sh BUILD_DIR     (ST_REPORT_KEEP=DIR keeps the HTML and PNG files there)
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
TRAINER="$BUILD/trainer"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$GEN" ] || { echo "SKIP: $GEN is not built (make tests)"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the HTML"; exit 0; }

it_enter_tmp
"$GEN" "$T" >/dev/null

# A trace whose names need escaping: a role and a stage with markup in them.
python3 - <<'EOF'
import shutil, sqlite3
shutil.copy("target.sqlite", "evil.sqlite")
db = sqlite3.connect("evil.sqlite")
db.execute("UPDATE threads SET role = '<b>drafter</b>&amp;' WHERE role = 'drafter'")
db.execute("UPDATE stages SET name = 'fwd\"><script>alert(1)</script>' WHERE name = 'forward'")
db.execute("UPDATE meta SET value = 'gen2 ''quoted'' \x01' WHERE key = 'program'")
db.commit()
EOF

# ---- flags and output files ---------------------------------------------------------------
expect_usage r_nohtml "$A" report target.sqlite
expect_usage r_nofile "$A" report --html x.html
expect_usage r_badsteps "$A" report target.sqlite --html bad.html --steps 5:99
[ ! -e bad.html ] || fail "a failed report left bad.html"
: >zero.sqlite
expect_usage r_zero "$A" report zero.sqlite --html bad.html
[ ! -e bad.html ] && [ -z "$(ls bad.html.tmp* 2>/dev/null)" ] || fail "a failed report left files"
ok
expect_ok r_target "$A" report target.sqlite --html target.html
expect_usage r_exists "$A" report target.sqlite --html target.html
grep -q 'exists (pass --overwrite' r_exists.err || fail "existing output: $(cat r_exists.err)"
# success prints the path written, one line on stdout; a refusal prints nothing there
[ "$(cat r_target.out)" = "target.html" ] && [ "$(wc -l <r_target.out)" -eq 1 ] || fail "report's stdout: '$(cat r_target.out)'"
[ ! -s r_exists.out ] || fail "a refused report printed: $(cat r_exists.out)"
expect_ok r_overwrite "$A" report target.sqlite --html target.html --overwrite --steps 5:8 --every 5
expect_ok r_stdout "$A" report moves.sqlite --html -
[ -s r_stdout.out ] || fail "report to stdout"
# with '-' stdout is the page and nothing else: it ends with the document
[ "$(tail -n 1 r_stdout.out)" = "</html>" ] && [ "$(head -n 1 r_stdout.out)" = "<!DOCTYPE html>" ] || fail "report to stdout: more than the page"
cp r_stdout.out moves.html
expect_ok r_dense "$A" report dense.sqlite --html dense.html
expect_ok r_evil "$A" report evil.sqlite --html evil.html
expect_ok r_nosteps "$A" report nosteps.sqlite --html nosteps.html
expect_ok r_inferred "$A" report inferred.sqlite --html inferred.html
pages="target.html moves.html dense.html evil.html nosteps.html inferred.html"
if [ -x "$TRAINER" ]; then
    set +e
    "$TRAINER" --steps 30 --vocab 256 --dim 16 --heads 2 --ffn 32 --target-layers 2 --seq-len 16 --batch 1 \
        --block-size 4 --anchors 2 --drafter-delay-us 3000 --postprocess async --drafter-gpus 2 \
        --profile-interval 5 --trace trainer.sqlite --overwrite >trainer.log 2>&1
    trc=$?
    set -e
    if [ $trc -eq 0 ]; then
        expect_ok r_trainer "$A" report trainer.sqlite --html trainer.html
        pages="$pages trainer.html"
        # the trainer records flows: the report shows analyze flow's latency breakdown, verbatim
        expect_ok r_trainer_flow "$A" flow trainer.sqlite
        python3 - trainer.html r_trainer_flow.out <<'EOF' || fail "flow section"
import html, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
sec = re.search(r'<section id="flow">.*?</section>', page, flags=re.S).group(0)
pre = html.unescape(re.search(r'<pre class="flow">(.*?)</pre>', sec, flags=re.S).group(1))
assert pre == open(sys.argv[2], encoding="utf-8").read(), "the flow text differs from analyze flow's"
for part in ("end-to-end latency per item", "p50_ms", "p95_ms", "p99_ms", "queue residence per handoff",
             "latency breakdown: mean time per item in each role, by outermost stage"):
    assert part in pre, part
print("flow section ok")
EOF
        ok
    elif [ $trc -ne 2 ]; then
        fail "trainer: exit $trc: $(tail -3 trainer.log)"
    fi
fi

# ---- structure ---------------------------------------------------------------------------------
python3 - $pages <<'EOF' || fail "HTML structure"
import re, sys
import xml.etree.ElementTree as ET
for name in sys.argv[1:]:
    html = open(name, encoding="utf-8").read()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>"), name
    low = html.lower()
    for bad in ("http://", "https://", "<script", "<link", "@import", "url(", "<img", "<iframe", "@font-face"):
        assert bad not in low, (name, bad)
    svgs = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    assert len(svgs) >= 2, (name, len(svgs))
    for s in svgs:
        ET.fromstring(s)  # well-formed
    for title in ("<h2>Run</h2>", "<h2>Bottleneck</h2>", "Where each role&#39;s time went", "<h2>Timeline",
                  "<h2>Queue depth over time</h2>", "<h2>Tokens/s per window", "<h2>Summary</h2>",
                  "GPU idle: no GPU activity in this trace."):
        assert title in html, (name, title)
    # the page as a whole is well-formed XML too once the doctype is gone
    ET.fromstring(html.replace("<!DOCTYPE html>", "", 1))
t = open("target.html").read()
assert "Bottleneck: target (1 thread), busy 90.0% of its time" in t
# loader, target and drafter get a chart; main only waits (step_wait 100%): one line instead
assert "share of time per stage, per window" in t and t.count("share of time per stage, per window</h3>") == 3
assert ('<p class="wait-only" data-role="main"><b>main</b> (1 thread): no chart, it only waits: busy 0.0% of its '
        'time; step_wait 100.0% (wait_input).</p>') in t
assert "main (1 thread): share of time" not in t
assert "queue depth: queue_depth (items)" in t and "Timeline of steps 6-8" in t
m = open("moves.html").read()
assert "the bottleneck moved: target in steps 1-10, drafter in steps 11-20." in m
# Stage colours: one colour per stage, the same in every chart of a page.
for name in ("target.html", "moves.html"):
    html = open(name).read()
    seen = {}
    for colour, stage in re.findall(r'fill="(#[0-9a-f]{6})"><title>([^,<]+?)(?:,| [0-9.]+ ms)', html):
        assert seen.setdefault(stage, colour) == colour, (name, stage, colour, seen[stage])
    assert len(set(seen.values())) == len(seen), seen
e = open("evil.html").read()
assert "<b>drafter" not in e and "&lt;b&gt;drafter&lt;/b&gt;&amp;amp;" in e
assert "<script>" not in e and "fwd&quot;&gt;&lt;script&gt;" in e
assert "\x01" not in e
d = open("dense.html").read()
tl = re.search(r'<section id="timeline">.*?</section>', d, flags=re.S).group(0)
rects = tl.count("<rect")
# 2 lanes x 2 depths, 1060 pixel columns: merged, not 10800 ranges
assert 100 < rects < 2 * 2 * 1100 + 50, rects
assert "ranges, mostly kernel" in tl
print("structure ok:", ", ".join(sys.argv[1:]), "; dense timeline rects:", rects)
EOF
ok

# ---- reading order: the verdict first in plain words, evidence under it, the rest folded;
# the summary in role order; step labels that never overlap ---------------------------------
expect_ok r_allsteps "$A" report target.sqlite --html allsteps.html --steps 0:20
python3 - target.html moves.html allsteps.html $pages <<'EOF' || fail "reading order"
import re, sys
t = open("target.html", encoding="utf-8").read()
v = re.search(r'<div class="verdict">.*?</div>', t, flags=re.S).group(0)
head = re.search(r'<p class="headline">([^<]*)</p>', v).group(1)
assert head.startswith("The target role sets the pace: over steps 1-20 its threads are busy 90% of the time. Making "), head
# the headline first, then the story's verdict and evidence, then the folded rest
assert v.index('class="headline"') < v.index("<p>Bottleneck: target") < v.index("<p>Evidence:") < v.index("<details>")
det = re.search(r"<details>.*?</details>", v, flags=re.S).group(0)
assert "<summary>" in det and "Role order:" in det and "GPU idle:" in det and "Evidence:" not in det
# summary rows in role order (the bottleneck's role order), threads by name within a role
order = re.search(r"Role order: ([^<]*) \(", t).group(1).replace("&gt;", ">").split(" -> ")
summ = re.search(r'<section id="summary">.*?</section>', t, flags=re.S).group(0)
roles = re.findall(r'<tr(?: class="idle")?><td>[^<]*</td><td>([^<]*)</td>', summ)
seen = []
for r in roles:
    if not seen or seen[-1] != r: seen.append(r)
assert seen == [r for r in order if r in seen], (seen, order)
# step labels: none overlaps the next (6.5 px a character, centred), on every page
for name in sys.argv[3:]:
    h = open(name, encoding="utf-8").read()
    labels = [(float(x), len(txt)) for x, txt in re.findall(r'<text class="step-label" x="([0-9.]+)"[^>]*>([^<]*)</text>', h)]
    for (x0, n0), (x1, n1) in zip(labels, labels[1:]):
        assert x1 - n1 * 3.25 >= x0 + n0 * 3.25 + 4, (name, x0, x1)
a = open("allsteps.html", encoding="utf-8").read()
tl = re.search(r'<section id="timeline">.*?</section>', a, flags=re.S).group(0)
lines = tl.count('stroke-dasharray="4 3"')
shown = len(re.findall(r'class="step-label"', tl))
assert lines == 21 and 2 <= shown < lines, (lines, shown)
print("reading order ok; step labels on the 21 marks:", shown)
EOF
ok

# ---- GPU activity: lanes per device/stream and the GPU table (gpu_steps.sqlite, tests/traces.c) ----
expect_ok r_gpu "$A" report gpu_steps.sqlite --html gpu.html
python3 - gpu.html $pages <<'EOF' || fail "GPU lanes"
import re, sys
import xml.etree.ElementTree as ET
g = open(sys.argv[1], encoding="utf-8").read()
assert g.startswith("<!DOCTYPE html>")
ET.fromstring(g.replace("<!DOCTYPE html>", "", 1))
tl = re.search(r'<section id="timeline">.*?</section>', g, flags=re.S).group(0)
for s in re.findall(r"<svg\b.*?</svg>", tl, flags=re.S):
    ET.fromstring(s)
lanes = re.findall(r'class="gpu-lane"[^>]*>(GPU \d+) <tspan[^>]*>\((stream \d+)\)</tspan>', tl)
assert lanes == [("GPU 0", "stream 7"), ("GPU 0", "stream 8")], lanes
# each GPU lane says who launched its work
launchers = re.findall(r'class="gpu-launcher"[^>]*>([^<]*)</text>', tl)
assert launchers == ["by target0 (target)", "by target0 (target)"], launchers
# one busy figure per GPU per window, each table naming its window
assert "<caption>GPU idle split over steps 2-20 (0.010-0.200 s, start-up left out)</caption>" in g
gpu_rects = re.findall(r'<rect class="gpu"[^>]*fill="(#[0-9a-f]{6})"[^>]*><title>([a-z]+)', tl)
kinds = {k for _, k in gpu_rects}
assert kinds == {"kernel", "memcpy"}, kinds
assert len({c for c, k in gpu_rects if k == "kernel"}) == 1 and len({c for c, k in gpu_rects if k == "memcpy"}) == 1
assert len({c for c, _ in gpu_rects}) == 2, gpu_rects
# the timeline's default window (steps 8-10): 3 x (fwd_gemm, sample_tail) on stream 7, 3 memcpys on stream 8
assert len(gpu_rects) == 9, len(gpu_rects)
assert "<title>kernel fwd_gemm 7.000 ms</title>" in tl and "<title>memcpy HtoD 1048576 bytes 1.000 ms</title>" in tl
row = re.search(r'<table class="data" id="gpu-table">.*?</table>', g, flags=re.S).group(0)
assert ('<td class="n">0</td><td class="n">57</td><td class="n">72.0%</td><td class="n">136.800</td>'
        '<td class="n">53.200</td><td class="n">43.600</td><td class="n">0.000</td><td class="n">9.600</td>'
        '<td>target0 / postprocess (19.000 ms)</td>') in row, row
assert "GPU idle: over steps 2-20 (0.010-0.200 s, start-up left out): GPU 0 busy 72.0%" in g
# two windows on one page, each figure labelled: the headline and roles name the verdict's, a note names both
assert ('<p class="note window-note">Windows: the verdict, the GPU-per-role and the roles tables cover steps 1-20; '
        'the GPU idle table and line cover steps 2-20 (0.010-0.200 s, start-up left out)') in g
assert '<caption>Roles over steps 1-20 (the verdict&#39;s window)' in g
assert re.search(r'<p class="headline">[^<]* over steps 1-20 ', g), "the headline names no window"
# traces without flow records: no flow section
for name in sys.argv[1:]:
    if name != "trainer.html":
        assert 'id="flow"' not in open(name, encoding="utf-8").read(), name
# CPU-only pages: nothing GPU
for name in sys.argv[2:]:
    h = open(name, encoding="utf-8").read()
    assert 'class="gpu' not in h and 'id="gpu-table"' not in h and "GPU: <span>" not in h, name
print("GPU lanes ok")
EOF
ok

# ---- GPU-aware verdict: a shared GPU as the bottleneck, the roles' host/GPU columns (gpu_shared.sqlite) ----
expect_ok r_gpu_shared "$A" report gpu_shared.sqlite --html gpu_shared.html
python3 - gpu_shared.html target.html <<'EOF' || fail "GPU-aware verdict in the report"
import re, sys
g = open(sys.argv[1], encoding="utf-8").read()
assert "<p>Bottleneck: GPU 0, busy 80.0% of the time, shared by 2 roles: target 60.0%, drafter 40.0%" in g
assert '<p class="headline">GPU 0 sets the pace: over steps 1-10 it is busy 80% of the time, most of it with work launched by target.' in g
assert "<caption>GPU busy per launching role over steps 1-10 (the verdict&#39;s window)</caption>" in g
roles = re.search(r'<table class="data" id="roles-table">.*?</table>', g, flags=re.S).group(0)
assert "<th>host (busy - sync)</th><th>GPU work</th>" in roles and "<th>need ms/step</th>" in roles
row = re.search(r'<tr class="hot"><td>target</td>.*?</tr>', roles).group(0)
assert ('<td class="n">10.0%</td><td class="n">60.0%</td><td class="n">9.000</td><td class="n">6.000</td>'
        '<td>forward</td><td>forward</td></tr>') in row, row
dev = re.search(r'<table class="data" id="device-roles-table">.*?</table>', g, flags=re.S).group(0)
rows = re.findall(r'<tr( class="hot")?><td class="n">(\d+)</td><td>([^<]+)</td><td class="n">([0-9.]+%)</td>'
                  r'<td class="n">([0-9.]+)</td></tr>', dev)
assert rows == [(' class="hot"', "0", "all (union)", "80.0%", "8.000"), ("", "0", "target", "60.0%", "6.000"),
                ("", "0", "drafter", "40.0%", "4.000"), ("", "1", "all (union)", "45.0%", "4.500"),
                ("", "1", "drafter", "40.0%", "4.000")], rows
# without GPU activity the table has no GPU columns, and no per-role GPU table
t = open(sys.argv[2], encoding="utf-8").read()
assert "need ms/step" not in t and "GPU work" not in t and "device-roles-table" not in t
print("GPU-aware verdict ok")
EOF
ok

# ---- top kernels per GPU: the rows are analyze gpu's kernel totals (a recorded H200 sample and gpu_steps) ----
SAMPLE="$ROOT/samples/traces/h200-2x2-async.sqlite"
kernel_pages="gpu.html"
expect_ok r_gpu_json "$A" gpu --format json --top 0 gpu_steps.sqlite
expect_ok r_gpu_all "$A" gpu --format json --time 0:1000 gpu_steps.sqlite
kernel_args="gpu.html r_gpu_json.out r_gpu_all.out"
if [ -f "$SAMPLE" ]; then
    expect_ok r_sample "$A" report "$SAMPLE" --html sample.html
    expect_ok r_sample_json "$A" gpu --format json --top 0 "$SAMPLE"
    expect_ok r_sample_all "$A" gpu --format json --time 0:1000 "$SAMPLE"
    kernel_args="$kernel_args sample.html r_sample_json.out r_sample_all.out"
    pages="$pages sample.html"
else
    echo "SKIP: $SAMPLE is absent (the kernels check runs on gpu_steps.sqlite only)"
fi
python3 - $kernel_args target.html <<'EOF' || fail "top kernels"
import html, json, re, sys
args = sys.argv[1:-1]
for page_name, kernels_json, whole_json in zip(args[0::3], args[1::3], args[2::3]):
    page = open(page_name, encoding="utf-8").read()
    sec = re.search(r'<section id="kernels">.*?</section>', page, flags=re.S).group(0)
    gpu = json.load(open(kernels_json))["kernels"]
    # busy over the whole trace: analyze gpu's devices table over a window holding every record
    busy = {d["device"]: d["busy_ms"] for d in json.load(open(whole_json))["devices"]}
    devices = sorted({k["device"] for k in gpu})
    tables = re.findall(r'<table class="data kernels" id="kernels-gpu-(\d+)" data-device="\d+"><caption>(.*?)</caption>(.*?)</table>', sec, flags=re.S)
    assert [int(d) for d, _, _ in tables] == devices, (page_name, [d for d, _, _ in tables], devices)
    for dev, caption, body in tables:
        dev = int(dev)
        mine = [k for k in gpu if k["device"] == dev]  # analyze gpu's order: total, largest first
        assert caption == f"GPU {dev}: top {min(10, len(mine))} of {len(mine)} kernel{'s' if len(mine) != 1 else ''} by device time, over the whole trace (busy {busy[dev]:.3f} ms: kernels, copies and memsets)", caption
        rows = re.findall(r'<tr><td class="kname">([^<]*)</td><td class="n">(\d+)</td><td class="n">([0-9.]+)</td>'
                          r'<td class="n">([0-9.]+)%</td><td class="n">([0-9.]+)</td></tr>', body)
        assert len(rows) == min(10, len(mine)), (page_name, dev, len(rows))
        for (name, count, total, share, mean), k in zip(rows, mine):
            assert html.unescape(name) == k["kernel"] and int(count) == k["count"], (name, k)
            assert total == f'{k["total_ms"]:.3f}' and mean == f'{k["mean_ms"]:.3f}', (total, mean, k)
            assert abs(float(share) - 100 * k["total_ms"] / busy[dev]) < 0.051, (share, k, busy[dev])
        rest = mine[10:]
        other = re.search(r'<tr class="idle"><td>(\d+) other kernels?</td><td class="n">(\d+)</td><td class="n">([0-9.]+)</td>', body)
        if rest:
            assert other and int(other.group(1)) == len(rest) and int(other.group(2)) == sum(k["count"] for k in rest), other
            assert abs(float(other.group(3)) - sum(k["total_ms"] for k in rest)) < 0.002, other.group(3)
        else:
            assert not other, body
    print(f"top kernels ok: {page_name}, {len(tables)} GPUs, {len(gpu)} kernel rows of analyze gpu")
# no GPU activity: no kernels section
assert 'id="kernels"' not in open(sys.argv[-1], encoding="utf-8").read()
EOF
ok

# ---- the timeline says how to see the other steps: its export command, quoted for the shell, runs ----
cp target.sqlite "my run's 1.sqlite"
expect_ok r_quoted "$A" report "my run's 1.sqlite" --html "$T/quoted.html"
[ "$(cat r_quoted.out)" = "$T/quoted.html" ] || fail "report's stdout: '$(cat r_quoted.out)', not the path given"
python3 - target.html quoted.html >rest_cmds.txt <<'EOF' || fail "timeline: the rest"
import html, re, sys
for name, steps, cmd in ((sys.argv[1], "It shows steps 6-8 of the run&#39;s 1-20. ", "analyze export target.sqlite --chrome target.json"),
                         (sys.argv[2], "It shows steps 9-11 of the run&#39;s 1-20. ",
                          "analyze export 'my run'\\''s 1.sqlite' --chrome 'my run'\\''s 1.json'")):
    page = open(name, encoding="utf-8").read()
    tl = re.search(r'<section id="timeline">.*?</section>', page, flags=re.S).group(0)
    rest = re.search(r'<p class="note timeline-rest">(.*?)</p>', tl).group(1)
    assert rest.startswith(steps), rest
    code = html.unescape(re.search(r"<code>(analyze export [^<]*)</code>", rest).group(1))
    assert code == cmd, (code, cmd)
    print(code)
EOF
while read -r line; do
    bash -c "$A ${line#analyze }" >/dev/null 2>rest.err || fail "the timeline's command failed: $line: $(cat rest.err)"
done <rest_cmds.txt
python3 -c 'import json, sys; [json.load(open(p)) for p in sys.argv[1:]]' target.json "my run's 1.json" || fail "exported JSON"
ok

# ---- a role that only waits gets one line, not a chart: exactly the roles the roles table shows under 1% busy ----
python3 - $pages gpu.html <<'EOF' || fail "wait-only roles"
import html, re, sys
lines = 0
for name in sys.argv[1:]:
    h = open(name, encoding="utf-8").read()
    roles = re.search(r'<table class="data" id="roles-table">.*?</table>', h, flags=re.S).group(0)
    busy = {html.unescape(r): float(b) for r, b in
            re.findall(r'<tr(?: class="hot")?><td>([^<]*)</td><td class="n">\d+</td><td class="n">([0-9.]+)%</td>', roles)}
    brk = re.search(r'<section id="breakdown">.*?</section>', h, flags=re.S).group(0)
    charts = {html.unescape(r) for r in re.findall(r'<h3>(.*?) \(\d+ threads?\): share of time per stage, per window</h3>', brk)}
    waits = {html.unescape(r): float(b) for r, b in
             re.findall(r'<p class="wait-only" data-role="([^"]*)"><b>[^<]*</b> \(\d+ threads?\): no chart, it only waits: '
                        r'busy ([0-9.]+)% of its time; [^<]*\.</p>', brk)}
    assert not charts & set(waits), (name, charts, waits)
    for role, pct in busy.items():
        if pct < 1.0: assert role in waits and abs(waits[role] - pct) < 0.051, (name, role, pct, waits)
        elif pct > 1.0: assert role in charts, (name, role, pct, charts)
    lines += len(waits)
if "sample.html" in sys.argv:
    s = open("sample.html", encoding="utf-8").read()
    assert ('<p class="wait-only" data-role="main"><b>main</b> (1 thread): no chart, it only waits: busy 0.0% of its '
            'time; step_wait 100.0% (wait_input).</p>') in s
print("wait-only roles ok:", lines, "lines")
EOF
ok

# ---- a first reader's order: the verdict before the run's metadata, which is one line and a folded table ----
python3 - $pages gpu.html <<'EOF' || fail "verdict before metadata"
import re, sys
for name in sys.argv[1:]:
    h = open(name, encoding="utf-8").read()
    v, r = h.index('<section id="verdict">'), h.index('<section id="run">')
    assert v < r, (name, "the run's metadata comes before the verdict")
    # the first section of the body is the verdict, its headline before the run's metadata
    assert h.index("<section") == v and h.index('<p class="headline">') < r, name
    run = re.search(r'<section id="run">.*?</section>', h, flags=re.S).group(0)
    assert re.search(r'<p class="run-line">[^<]+ in [0-9]+\.[0-9]{3} s(, [0-9.]+ tokens/s)?, status [a-z]+\.</p>', run), (name, run[:300])
    det = re.search(r'<details><summary>Run metadata[^<]*</summary>\s*<table class="meta">(.*?)</table>\s*</details>', run, flags=re.S)
    assert det and det.group(1).count("<tr>") >= 14, name
t = open("target.html", encoding="utf-8").read()
assert '<p class="run-line">gen2, 20 steps (1-20) in 0.200 s, 100000.0 tokens/s, status complete.</p>' in t, \
    re.search(r'<p class="run-line">.*?</p>', t).group(0)
print("verdict before metadata ok")
EOF
ok

# ---- rendering in headless Chromium --------------------------------------------------------------
CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$CHROME" ]; then
    echo "it_report: $n_checks checks passed"
    echo "SKIP: chromium not installed"
    exit 0
fi
render() { # HTML PNG [WIDTH]
    timeout 90 "$CHROME" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$T/chrome-profile" \
        --screenshot="$T/$2" --window-size="${3:-1400}",2400 "file://$T/$1" >"$2.log" 2>&1 || true
    [ -s "$2" ] || fail "chromium wrote no $2: $(tail -3 "$2.log")"
}
# two widths: a wide screen and a narrow window (the charts keep their size; the page scrolls)
shots="target.png target-narrow.png gpu.png gpu-narrow.png"
render target.html target.png
render target.html target-narrow.png 800
render gpu_shared.html gpu.png
render gpu_shared.html gpu-narrow.png 800
if [ -e trainer.html ]; then render trainer.html trainer.png; shots="$shots trainer.png"; fi
if [ -e sample.html ]; then render sample.html sample.png; shots="$shots sample.png"; fi
python3 - $shots <<'EOF' || fail "screenshots"
import struct, sys, zlib
def decode(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride, prev, rows, i = w * bpp, bytearray(w * bpp), [], 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + b) & 255
            elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows
for path in sys.argv[1:]:
    w, h, bpp, rows = decode(path)
    colours, non_white, total = set(), 0, 0
    for y in range(0, h, 3):
        r = rows[y]
        for x in range(0, w, 3):
            px = r[x * bpp:x * bpp + 3]
            colours.add(px)
            total += 1
            non_white += px != b"\xff\xff\xff"
    print(f"{path}: {w}x{h}, {len(colours)} colours, {100 * non_white / total:.1f}% not white")
    assert len(colours) >= 20 and non_white / total > 0.03, path
EOF
ok
if [ -n "${ST_REPORT_KEEP:-}" ]; then mkdir -p "$ST_REPORT_KEEP" && cp ./*.html ./*.png "$ST_REPORT_KEEP"/; fi
echo "it_report: $n_checks checks passed"
