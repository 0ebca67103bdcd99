#!/usr/bin/env python3
"""tables_pandas.py ANALYZE CASE...: `analyze CMD --format csv --table NAME` read with
pandas.read_csv, for every table that CMD's --help lists, checked against the same run's JSON and
text output (docs/analyze.md, "One table: --table NAME").

A CASE is one argument: the command and its arguments, separated by spaces ("gpu run.sqlite").
For each case:
  - the tables --help lists ("--table NAME ... only the table NAME ...: a, b, c") hold every
    key of the JSON output, in the same order;
  - each printed table, read by pandas.read_csv from `--format csv --table NAME`, has the JSON
    rows' columns and values (numbers equal, strings equal, empty = null), and its first rows
    are the text output's: the text holds a line of the table's column names, and the lines
    after it (blank lines between row groups skipped) show the same cells as text does
    (milliseconds with 3 decimals, shares as tenths of a percent, `-` for no value);
  - `--format json --table NAME` is {NAME: the full JSON's rows};
  - a listed table that this run does not print is refused: exit 2, "no table NAME in this
    output", nothing on stdout;
  - `--format csv` without --table is the tables' --table CSVs in the JSON's order, each
    separated from the next by one empty line, byte for byte.
Prints one line per case; exits 1 on the first failure, 3 without pandas (the caller skips).
"""
import io, json, math, re, subprocess, sys

try:
    import pandas as pd
except ImportError:
    print("SKIP: pandas is not installed (python3 -m pip install pandas)")
    sys.exit(3)


def run(analyze, args, want_rc=0):
    p = subprocess.run([analyze, *args], capture_output=True, text=True)
    assert p.returncode == want_rc, f"analyze {' '.join(args)}: exit {p.returncode}, want {want_rc}: {p.stderr.strip()}"
    return p.stdout, p.stderr


def help_tables(analyze, cmd):
    text, _ = run(analyze, [cmd, "--help"])
    m = re.search(r"--table NAME\s+only the table NAME[^:]*: ([a-z_, \n]+?)\n(?!\s+[a-z_]+[,\n])", text + "\n")
    assert m, f"{cmd} --help lists no tables for --table"
    return [t.strip() for t in m.group(1).replace("\n", " ").split(",") if t.strip()]


def text_cell(value, csv_text):
    """How text output shows the cell whose CSV text is csv_text (value: what pandas read)."""
    if csv_text == "":
        return {"-"}
    ms = set()
    if re.fullmatch(r"-?\d+\.\d{6}", csv_text):  # milliseconds: 3 decimals, rounded half up
        ns = int(csv_text.replace(".", ""))
        q, r = divmod(abs(ns), 1000)
        q += r >= 500
        ms = {("-" if ns < 0 and q else "") + f"{q // 1000}.{q % 1000:03d}"}
    try:
        v = float(csv_text)
    except ValueError:
        return {re.sub(r"[\x00-\x1f\x7f]", "?", csv_text)}
    if not math.isfinite(v):
        return {csv_text}
    tenths = math.floor(abs(v) * 10 + 0.5) * (1 if v >= 0 else -1)
    shown = {f"{'-' if tenths < 0 else ''}{abs(tenths) // 10}.{abs(tenths) % 10}%"}  # a share
    for dec in range(0, 7):  # a real with its column's decimals
        shown.add(f"{v:.{dec}f}")
    return shown | ms | {csv_text}  # an integer, a real as printed, a string that reads as a number


def check_text(name, cols, csv_rows, text):
    """The first rows of table name in the text output: the header line, then the same cells."""
    lines = text.split("\n")
    # the header line: the columns, or the last of them (CSV leads with columns that text
    # shows in a heading: summary's file, scope, threads)
    heads = [(i, len(cols) - len(h)) for i, h in ((i, re.split(r"\s{2,}", l.strip())) for i, l in enumerate(lines))
             if len(h) >= 2 and h == cols[len(cols) - len(h):]]
    if not heads:
        return False
    for h, skip in heads:  # a text output may show a table twice (per file); one of them must match
        # the first rows of one section (same leading columns: one file's, one scope's)
        first = [r for r in csv_rows[:5]]
        first = first[:next((i for i, r in enumerate(first) if r[:skip] != first[0][:skip]), len(first))]
        body = [l for l in lines[h + 1:h + 1 + 3 * len(csv_rows) + 20] if l.strip()][:len(first)]
        ok = len(body) == len(first)
        for line, row in zip(body, first):
            cells, want = re.split(r"\s{2,}", line.strip()), row[skip:]
            if len(cells) < len(want):  # an empty string (not "-": no value) leaves no cell in text
                want = [r for r in want if r != ""]
            if len(cells) != len(want) or any(c not in text_cell(None, r) for c, r in zip(cells, want)):
                ok = False
                break
        if ok:
            return True
    raise AssertionError(f"{name}: the text output's rows differ from the CSV's: {csv_rows[:5]}")


def same(a, b):
    if a is None or (isinstance(a, float) and math.isnan(a)):  # an empty CSV field: null or ""
        return b is None or b == ""
    if isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, (int, float)):
        return a == b or abs(a - b) <= 1e-9 * max(1.0, abs(b))
    return str(a) == str(b)


def check_case(analyze, case):
    args = case.split(" ")
    cmd = args[0]
    listed = help_tables(analyze, cmd)
    full_json = json.loads(run(analyze, [*args, "--format", "json"])[0])
    printed = list(full_json)
    assert printed and [t for t in listed if t in printed] == printed, \
        f"{cmd}: prints {printed}, its --help lists {listed} (in that order)"
    text = run(analyze, args)[0]
    csv_parts, n_text, n_rows = [], 0, 0
    for name in listed:
        if name not in printed:
            out, err = run(analyze, [*args, "--format", "json", "--table", name], want_rc=2)
            assert out == "" and f"no table {name} in this output" in err, (cmd, name, out, err)
            continue
        rows = full_json[name]
        one = json.loads(run(analyze, [*args, "--format", "json", "--table", name])[0])
        assert one == {name: rows}, f"{cmd} --table {name}: the JSON differs from the full output's"
        if cmd == "whatif":  # JSON only
            n_rows += len(rows)
            continue
        csv = run(analyze, [*args, "--format", "csv", "--table", name])[0]
        csv_parts.append(csv)
        df = pd.read_csv(io.StringIO(csv), keep_default_na=False, na_values=[""], dtype=None)
        raw = pd.read_csv(io.StringIO(csv), keep_default_na=False, dtype=str)
        cols = list(df.columns)
        if rows:
            assert cols == list(rows[0]), f"{cmd} {name}: CSV columns {cols}, JSON {list(rows[0])}"
        assert len(df) == len(rows), f"{cmd} {name}: {len(df)} CSV rows, {len(rows)} JSON rows"
        for i, (r, j) in enumerate(zip(df.itertuples(index=False), rows)):
            for c, a in zip(cols, r):
                assert same(a.item() if hasattr(a, "item") else a, j[c]), f"{cmd} {name} row {i} {c}: CSV {a!r}, JSON {j[c]!r}"
        n_rows += len(df)
        if len(df) and cmd != "info" and check_text(f"{cmd} {name}", cols, raw.values.tolist(), text):
            n_text += 1
    if cmd != "whatif":
        full_csv = run(analyze, [*args, "--format", "csv"])[0]
        assert full_csv == "\n".join(csv_parts), f"{cmd}: the CSV without --table is not its tables' CSVs joined by empty lines"
    return printed, n_text, n_rows


def main():
    analyze, cases = sys.argv[1], sys.argv[2:]
    try:
        for case in cases:
            printed, n_text, n_rows = check_case(analyze, case)
            how = "from JSON (whatif has no CSV)" if case.startswith("whatif ") else "with pandas"
            print(f"{case.split(' ')[0]} ({case.split(' ', 1)[1].rsplit('/', 1)[-1]}): {len(printed)} tables read "
                  f"{how} ({n_rows} rows: {', '.join(printed)}), {n_text} matched in the text output")
    except AssertionError as e:
        print(f"FAIL: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
