#!/usr/bin/env bash
# it_signals.sh: a signal during a command that writes a file leaves nothing
# behind (docs/analyze.md, "export", "Signals"). On a trace big enough
# that each export takes seconds (tracegen --big, 3 M ranges), the command is
# started, and as soon as its temporary file or directory exists it is sent
# SIGINT (or SIGTERM, SIGHUP): it must die of that signal (status 130, 143,
# 129), with no *.tmp* left and no destination. With stderr on a terminal
# (a pty), the progress line it drew is erased: the last bytes it wrote are
# "\r\033[K".
#
#   bash tests/it_signals.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$GEN" ] || { echo "SKIP: $GEN is not built (make tests)"; exit 0; }

it_enter_tmp
# Job control: without it, bash starts background commands with SIGINT ignored,
# and analyze leaves an ignored signal ignored.
set -m

"$GEN" --big big.sqlite 3000000

# interrupt SIG STATUS TMP_GLOB DEST CMD...: starts CMD, waits for TMP_GLOB to exist,
# sends SIG, and checks the status, that no *.tmp* is left, and that DEST does not exist.
interrupt() {
    local sig=$1 want=$2 tmp=$3 dest=$4; shift 4
    "$@" >sig.out 2>sig.err &
    local pid=$! i=0
    # shellcheck disable=SC2086
    until compgen -G "$tmp" >/dev/null; do
        i=$((i + 1))
        [ $i -lt 2000 ] || { kill -KILL $pid; fail "$*: $tmp never appeared"; }
        kill -0 $pid 2>/dev/null || fail "$*: ended before $tmp appeared: $(cat sig.err)"
        sleep 0.01
    done
    kill "-$sig" $pid
    set +e
    wait $pid
    local rc=$?
    set -e
    [ $rc -eq "$want" ] || fail "$* (SIG$sig): exit $rc, wanted $want (stderr: $(cat sig.err))"
    local left
    left=$(find . -name '*.tmp*')
    [ -z "$left" ] || fail "$* (SIG$sig): left behind: $left"
    [ ! -e "$dest" ] || fail "$* (SIG$sig): $dest exists"
    ok
}

interrupt INT 130 'big.json.tmp*' big.json "$A" export --chrome big.json big.sqlite
interrupt TERM 143 'big.json.tmp*' big.json "$A" export --chrome big.json big.sqlite
interrupt HUP 129 'big.json.tmp*' big.json "$A" export --chrome big.json big.sqlite
interrupt INT 130 'csvdir.tmp*/ranges.csv.tmp*' csvdir "$A" export --csv csvdir big.sqlite
interrupt INT 130 'rows.sqlite.tmp*' rows.sqlite "$A" export --rows rows.sqlite big.sqlite
interrupt INT 130 'big.html.tmp*' big.html "$A" report --html big.html big.sqlite
# into an existing directory: its staging directory inside it goes, the directory stays as it was
mkdir keep
interrupt INT 130 'keep/.csv.tmp*/ranges.csv.tmp*' keep/ranges.csv "$A" export --csv keep big.sqlite
[ -d keep ] && [ -z "$(ls -A keep)" ] || fail "export --csv into keep/: left $(ls -A keep)"
ok

# a finished export is unaffected: the handler has nothing left to remove
expect_ok done "$A" export --chrome small.json "$ROOT/samples/traces/$(ls "$ROOT/samples/traces" | grep -m1 '\.sqlite$')"
[ -s small.json ] || fail "no small.json"
ok

# stderr on a terminal: the progress line is drawn, then erased by the signal
python3 - "$A" <<'PY' || fail "progress line not erased on SIGINT"
import os, pty, signal, subprocess, sys, time
a = sys.argv[1]
master, slave = pty.openpty()
p = subprocess.Popen([a, "export", "--chrome", "tty.json", "big.sqlite"], stdout=subprocess.DEVNULL,
                     stderr=slave, start_new_session=True)
os.close(slave)
got = b""
deadline = time.time() + 20
while b"analyze: export" not in got:
    assert time.time() < deadline and p.poll() is None, ("no progress line", got)
    got += os.read(master, 4096)
p.send_signal(signal.SIGINT)
rc = p.wait()
try:
    while True:
        chunk = os.read(master, 4096)
        if not chunk:
            break
        got += chunk
except OSError:
    pass
assert rc == -signal.SIGINT, rc
assert got.endswith(b"\r\033[K"), got[-80:]
assert not [f for f in os.listdir(".") if ".tmp" in f], os.listdir(".")
assert not os.path.exists("tty.json")
PY
ok
echo "it_signals: $n_checks checks passed"
