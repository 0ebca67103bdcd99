#!/usr/bin/env bash
# it_hostile.sh: integration test of `analyze` on malformed and hostile
# traces (docs/trace-format.md, "What a reader checks"). Each is made from a
# good trace (`tracegen DIR`) with Python's sqlite3, and every
# command must refuse it with exit status 2 and the one line that names the
# table, row and column: wrongly typed values, duplicate keys, names over the
# limit, generated columns, views in place of tables, a FIFO or a device
# given as the trace. `summary --jobs N` must print the same bytes (or the
# same error line) for N = 1, 2, 3, 8 on every input, odd ones included.
# Nothing here is timed: a command that blocked would end the test by the
# `timeout` around it (exit 124, not 2).
#
#   bash tests/it_hostile.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$GEN" ] || { echo "SKIP: $GEN is not built (make tests)"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to write hostile traces"; exit 0; }

it_enter_tmp
"$GEN" "$T" >/dev/null

python3 - <<'EOF'
import shutil, sqlite3

def make(name, sql):
    shutil.copy("gen.sqlite", name)
    db = sqlite3.connect(name)
    db.executescript(sql)
    db.commit()
    db.close()

def loosen(t):  # the table without declared types or constraints, rows in order
    return f"CREATE TABLE loose AS SELECT * FROM {t} ORDER BY rowid; DROP TABLE {t}; ALTER TABLE loose RENAME TO {t};"

make("blobversion.sqlite", "UPDATE meta SET value = CAST('1' AS BLOB) WHERE key = 'schema_version'")
make("startabc.sqlite", "UPDATE meta SET value = 'abc' WHERE key = 'start_ns'")
make("dupmeta.sqlite", loosen("meta") + "INSERT INTO meta VALUES ('program', 'again')")
make("nullname.sqlite", loosen("threads") + "UPDATE threads SET name = NULL WHERE id = 1")
make("dupthread.sqlite", loosen("threads") + "INSERT INTO threads SELECT * FROM threads WHERE id = 1")
make("dupstage.sqlite", loosen("stages") + "INSERT INTO stages VALUES (0, 'again', 'work')")
make("dupcounter.sqlite", loosen("counter_names") + "INSERT INTO counter_names VALUES (0, 'again', '')")
make("dupstep.sqlite", loosen("steps") + "INSERT INTO steps SELECT * FROM steps WHERE step = 1")
make("textstep.sqlite", "UPDATE steps SET tokens = 'many' WHERE step = 2")
make("nullchunk.sqlite", loosen("range_chunks") + "UPDATE range_chunks SET thread = NULL WHERE id = 2")
make("t0abc.sqlite", "UPDATE range_chunks SET t0_ns = 'abc' WHERE id = 3")
make("strangerchunk.sqlite", "UPDATE range_chunks SET thread = 42 WHERE id = 2")
make("hugename.sqlite", "UPDATE stages SET name = printf('%.*c', 10000000, 's') WHERE id = 1")
make("hugethread.sqlite", "UPDATE threads SET name = printf('%.*c', 10000000, 't') WHERE id = 0")
make("generated.sqlite",
     "CREATE TABLE x AS SELECT id, os_tid, role, device, rank, dropped FROM threads; DROP TABLE threads; "
     "CREATE TABLE threads(id INTEGER PRIMARY KEY, os_tid, name TEXT GENERATED ALWAYS AS "
     "(printf('%.*c', 100000000, 'x')), role, device, rank, dropped); "
     "INSERT INTO threads(id, os_tid, role, device, rank, dropped) SELECT * FROM x; DROP TABLE x")
make("viewthreads.sqlite", "ALTER TABLE threads RENAME TO t; CREATE VIEW threads AS SELECT * FROM t")
# flow_chunks (optional): its rows are checked at open, its data when flows are read
FLOWS = ("CREATE TABLE flow_chunks(id INTEGER PRIMARY KEY, thread INTEGER NOT NULL, t0_ns INTEGER NOT NULL, "
         "t1_ns INTEGER NOT NULL, n_records INTEGER NOT NULL, data BLOB NOT NULL);")
LOOSE_FLOWS = "CREATE TABLE flow_chunks(id, thread, t0_ns, t1_ns, n_records, data);"
make("flowstranger.sqlite", FLOWS + "INSERT INTO flow_chunks VALUES (1, 42, 5, 5, 1, x'46050007')")
make("flowtext.sqlite", LOOSE_FLOWS + "INSERT INTO flow_chunks VALUES (1, 0, 5, 5, 1, 'F')")
make("flowview.sqlite", "CREATE VIEW flow_chunks AS SELECT 1 AS id")
make("flowdir.sqlite", FLOWS + "INSERT INTO flow_chunks VALUES (1, 0, 5, 5, 1, x'46050207')")
make("flowtrunc.sqlite", FLOWS + "INSERT INTO flow_chunks VALUES (1, 0, 5, 5, 1, x'46050080')")
make("flowcount.sqlite", FLOWS + "INSERT INTO flow_chunks VALUES (1, 0, 5, 5, 2, x'46050007')")
EOF
mkfifo fifo.sqlite

# ---- every command: exit 2, the one line ----------------------------------------------------
check() { # NAME MESSAGE: every command on NAME.sqlite refuses it with MESSAGE
    local f=$1 msg=$2
    for c in info summary intervals bottleneck gpu sql export report diff flow; do
        case $c in
        sql) args=(sql "$f.sqlite" "SELECT count(*) FROM ranges") ;;
        export) args=(export "$f.sqlite" --chrome "$f.json") ;;
        report) args=(report "$f.sqlite" --html "$f.html") ;;
        diff) args=(diff gen.sqlite "$f.sqlite") ;;
        *) args=("$c" "$f.sqlite") ;;
        esac
        expect_usage "${c}_$f" timeout 60 "$A" "${args[@]}"
        grep -qF -- "$msg" "${c}_$f.err" || fail "$c $f: wanted '$msg', got: $(cat "${c}_$f.err")"
    done
    [ ! -e "$f.json" ] && [ ! -e "$f.html" ] || fail "$f: an export or report of a refused trace was left behind"
}
check blobversion "blobversion.sqlite: trace table 'meta': row 1 (key 'schema_version'): column 'value' is a blob, not text"
check startabc "startabc.sqlite: trace table 'meta': row 7 (key 'start_ns'): value 'abc' is not an integer"
check dupmeta "dupmeta.sqlite: trace table 'meta': row 20: key 'program' is also in row 3 (keys must be unique)"
check nullname "nullname.sqlite: trace table 'threads': row 2 (id 1): column 'name' is null, not text"
check dupthread "dupthread.sqlite: trace table 'threads': row 5: id 1 is also in row 2 (ids must be unique)"
check dupstage "dupstage.sqlite: trace table 'stages': row 9: id 0 is also in row 1 (ids must be unique)"
check dupcounter "dupcounter.sqlite: trace table 'counter_names': row 3: id 0 is also in row 1 (ids must be unique)"
check dupstep "dupstep.sqlite: trace table 'steps': row 10: step 1 is also in row 2 (steps must be unique)"
check textstep "textstep.sqlite: trace table 'steps': row 3 (step 2): column 'tokens' is text, not an integer"
check nullchunk "nullchunk.sqlite: trace table 'range_chunks': row 2 (id 2): column 'thread' is null, not an integer"
check t0abc "t0abc.sqlite: trace table 'range_chunks': chunk 3: column 't0_ns' is text, not an integer"
check strangerchunk "strangerchunk.sqlite: trace table 'range_chunks': chunk 2 names unknown thread 42"
check hugename "hugename.sqlite: trace table 'stages': row 2 (id 1): column 'name' is 10000000 bytes long, more than 256"
check hugethread "hugethread.sqlite: trace table 'threads': row 1 (id 0): column 'name' is 10000000 bytes long, more than 256"
check generated "generated.sqlite: trace table 'threads': column 'name' is generated, not a stored column"
check viewthreads "viewthreads.sqlite: trace table 'threads': it is a view, not a plain table"
check fifo "cannot open trace 'fifo.sqlite': it is not a regular file (a FIFO)"
check flowstranger "flowstranger.sqlite: trace table 'flow_chunks': chunk 1 names unknown thread 42"
check flowtext "flowtext.sqlite: trace table 'flow_chunks': row 1 (id 1): column 'data' is text, not a blob"
check flowview "flowview.sqlite: trace table 'flow_chunks': it is a view, not a plain table"
# Flow data that does not decode: the commands that read flows (flow, sql's flows, export
# --chrome) refuse it; the others do not read it.
for f in flowdir flowtrunc flowcount; do
    msg="$f.sqlite: trace table 'flow_chunks': chunk 1 (thread 0) is corrupt or truncated"
    expect_usage "flow_$f" timeout 60 "$A" flow "$f.sqlite"
    grep -qF -- "$msg" "flow_$f.err" || fail "flow $f: wanted '$msg', got: $(cat "flow_$f.err")"
    expect_usage "sqlflows_$f" timeout 60 "$A" sql "$f.sqlite" "SELECT count(*) FROM flows"
    grep -qF -- "chunk 1 (thread 0) is corrupt or truncated" "sqlflows_$f.err" ||
        fail "sql flows $f: $(cat "sqlflows_$f.err")"
    expect_usage "chrome_$f" timeout 60 "$A" export "$f.sqlite" --chrome "$f.json"
    grep -qF -- "$msg" "chrome_$f.err" || fail "export $f: $(cat "chrome_$f.err")"
    [ ! -e "$f.json" ] || fail "export $f: a partial file was left behind"
    expect_ok "summary_$f" timeout 60 "$A" summary "$f.sqlite"
done
# A trace without flows: analyze flow says so, in one line.
expect_usage flow_none "$A" flow gen.sqlite
grep -qF "flow: gen.sqlite has no flow records" flow_none.err || fail "flow on gen: $(cat flow_none.err)"

for c in info summary sql; do
    case $c in sql) args=(sql /dev/zero "SELECT 1") ;; *) args=("$c" /dev/zero) ;; esac
    expect_usage "${c}_devzero" timeout 60 "$A" "${args[@]}"
    grep -qF "cannot open trace '/dev/zero': it is not a regular file (a character device)" "${c}_devzero.err" ||
        fail "$c /dev/zero: $(cat "${c}_devzero.err")"
done

# ---- summary --jobs N: the same bytes for every N ---------------------------------------------
for f in gen many outer rank0 nullchunk dupthread strangerchunk t0abc corruptchunk unknownstage; do
    for n in 1 2 3 8; do
        run "jobs${n}_$f" timeout 60 "$A" summary --jobs "$n" --format csv "$f.sqlite"
        echo "$rc" >"jobs${n}_$f.rc"
        if [ "$n" != 1 ]; then
            cmp -s "jobs1_$f.out" "jobs${n}_$f.out" && cmp -s "jobs1_$f.err" "jobs${n}_$f.err" &&
                cmp -s "jobs1_$f.rc" "jobs${n}_$f.rc" ||
                fail "summary --jobs $n on $f differs from --jobs 1: $(diff "jobs1_$f.out" "jobs${n}_$f.out" | head -5; cat "jobs1_$f.err" "jobs${n}_$f.err")"
        fi
        ok
    done
done
# ... and with a thread filter, which reads thread by thread.
for n in 1 2 3 8; do
    run "jobsrole$n" "$A" summary --jobs "$n" --role worker t0abc.sqlite
    echo "$rc" >"jobsrole$n.rc"
    cat "jobsrole$n.err" >>"jobsrole$n.out"
    cmp -s jobsrole1.out "jobsrole$n.out" && cmp -s jobsrole1.rc "jobsrole$n.rc" || fail "summary --jobs $n --role"
    ok
done
echo "it_hostile: $n_checks checks passed"
