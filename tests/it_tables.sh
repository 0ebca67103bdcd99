#!/usr/bin/env bash
# it_tables.sh: `--format csv --table NAME` of every multi-table command, read with pandas
# (docs/analyze.md, "One table: --table NAME"). tests/tables_pandas.py reads each table that a
# command's --help lists with pandas.read_csv and checks it against the same run's JSON (columns,
# every value) and text output (the header line and the first rows' cells), `--format json
# --table NAME` against the full JSON, a listed table the run does not print (exit 2, nothing on
# stdout), and that the CSV without --table is the tables' CSVs joined by empty lines. Inputs:
# the H200 sample traces (info, summary, bottleneck, gpu; diff of h200-async and h200-sync), a
# trainer run with the CPU capture (cpu --windows, flow, bottleneck with its cpu table, whatif)
# and a generated 4-rank set (stragglers, summary and bottleneck with ranks, info with
# rank_sets). Then values against the SQL tables and the text where the text shows no table:
# info's counts, gpu's kernel counts, summary's range counts, the verdict, whatif's measured
# rate. And the usage errors: an unknown name, --table with text output, a command without
# --table. Skipped, saying so, without pandas.
#
#   bash tests/it_tables.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
TR="$BUILD/trainer"
GEN="$BUILD/tests/tracegen"
S="$ROOT/samples/traces"
for x in "$A" "$TR" "$GEN"; do [ -x "$x" ] || { echo "SKIP: $x is not built"; exit 0; }; done
command -v python3 >/dev/null || { echo "SKIP: python3 is needed"; exit 0; }
python3 -c 'import pandas' 2>/dev/null || { echo "SKIP: pandas is not installed (python3 -m pip install pandas)"; exit 0; }

it_enter_tmp

expect_ok cpu.train "$TR" --steps 10 --log-every 5 --trace-cpu --trace cpu.sqlite
mkdir set
expect_ok set.gen "$GEN" --ranks set 4 --steps 10

H="$S/h200-2x2-async.sqlite"
run pandas python3 "$ROOT/tests/tables_pandas.py" "$A" \
    "info $H" "summary $H" "bottleneck $H" "gpu $H" "diff $S/h200-async.sqlite $S/h200-sync.sqlite" \
    "cpu --windows cpu.sqlite" "flow cpu.sqlite" "bottleneck cpu.sqlite" "whatif cpu.sqlite" \
    "stragglers set" "summary set" "bottleneck set" "info set"
cat pandas.out
[ $rc -eq 0 ] || fail "pandas: $(tail -3 pandas.out) $(tail -3 pandas.err)"
[ "$(grep -c ' tables read ' pandas.out)" -eq 13 ] || fail "not every case ran: $(cat pandas.out)"
ok

A="$A" H="$H" py "values against the SQL tables and the text" <<'PYEOF'
import io, os, subprocess
import pandas as pd
A, H = os.environ["A"], os.environ["H"]

def out(*args):
    p = subprocess.run([A, *args], capture_output=True, text=True)
    assert p.returncode == 0, (args, p.stderr)
    return p.stdout

def table(cmd, name, *args, path=H):
    return pd.read_csv(io.StringIO(out(cmd, "--format", "csv", "--table", name, *args, path)))

def sql(query, path=H):
    return pd.read_csv(io.StringIO(out("sql", "--format", "csv", path, query)))

# info: the counts are the trace's rows
info = table("info", "info").iloc[0]
for col, query in (("ranges", "SELECT count(*) AS n FROM ranges"), ("last_step", "SELECT max(step) AS n FROM steps"),
                   ("gpu_records", "SELECT count(*) AS n FROM gpu"), ("threads", "SELECT count(*) AS n FROM threads")):
    assert info[col] == sql(query)["n"][0] > 0, (col, info[col], sql(query))
# gpu kernels (all of them): each device's kernel launches
k = table("gpu", "kernels", "--top", "0").groupby("device")["count"].sum().to_dict()
want = sql("SELECT device, count(*) AS n FROM gpu WHERE kind = 'kernel' GROUP BY device").set_index("device")["n"].to_dict()
assert k == want and min(want.values()) > 0, (k, want)
# summary: per thread and stage, the ranges counted
s = table("summary", "summary")
s = s[(s["scope"] == "thread") & s["count"].notna()]
got = {(r.thread, r.stage): int(r["count"]) for _, r in s.iterrows()}
want = {(r.thread, r.stage): int(r.n) for _, r in sql(
    "SELECT t.name AS thread, s.name AS stage, count(*) AS n FROM ranges r JOIN threads t ON t.id = r.thread "
    "JOIN stages s ON s.id = r.stage GROUP BY 1, 2").iterrows()}
assert got == want and len(got) > 10, (got, want)
# bottleneck verdict: as the text tells it
v = table("bottleneck", "verdict").iloc[0]
text = out("bottleneck", H)
assert f"Bottleneck: GPU {v['bottleneck_device']}, busy {v['device_busy_pct']:.1f}%" in text, (dict(v), text[:300])
assert f"its largest user is {v['bottleneck']}, whose stage {v['stage']}" in text, (dict(v), text[:300])
# whatif: the measured rate the text states (JSON only)
import json
w = json.loads(out("whatif", "--format", "json", "--table", "whatif", "cpu.sqlite"))["whatif"]
assert list(json.loads(out("whatif", "--format", "json", "--table", "whatif", "cpu.sqlite"))) == ["whatif"]
measured = next(r for r in w if r["config"] == "measured")
assert f"measured: {measured['tokens_per_s']} tokens/s" in out("whatif", "cpu.sqlite")
print("info, gpu kernels, summary counts as in SQL; the verdict and whatif's measured rate as in the text")
PYEOF

expect_usage unknown "$A" gpu --format csv --table nope "$H"
grep -q -- "--table must be one of kernels, copies, devices, host_wait, stages, api, not 'nope'" unknown.err ||
    fail "unknown table: $(cat unknown.err)"
[ ! -s unknown.out ] || fail "unknown table: stdout: $(cat unknown.out)"
expect_usage text "$A" bottleneck --table roles "$H"
grep -q -- "--table roles needs --format csv or json" text.err || fail "--table with text: $(cat text.err)"
expect_usage absent "$A" bottleneck --format csv --table cpu "$H"
grep -q "no table cpu in this output (its tables: verdict, roles, devices, queues, queue_depth, windows)" absent.err ||
    fail "absent table: $(cat absent.err)"
[ ! -s absent.out ] || fail "absent table: stdout: $(cat absent.out)"
expect_usage one-table "$A" intervals --format csv --table intervals "$H"
grep -q "unknown option '--table'" one-table.err || fail "intervals --table: $(cat one-table.err)"

echo "it_tables: $n_checks checks passed"
