#!/usr/bin/env bash
# it_cpu_trainer.sh: the trainer with --trace-cpu on the CPU backend (issue
# 24; docs/trace-format.md, "CPU capture"). Its trace must hold: meta
# cpu_mode perf with the default period, cpu_lost_records, cpu_samples equal
# to cpu_threads' sum and to the samples decoded; one cpu_threads row per
# registered thread; cpu_chunks that decode (the 'P' encoding, read here in
# Python) with switch records on every thread and samples on the target and
# drafter threads, at least 80 % of the target thread's samples in its
# forward stage (the tiny model's target thread does little else); the
# stacks of those samples naming the CPU kernels (k_matmul ...) through
# cpu_symbols; cpu_maps with the trainer's own file and its build-id. The
# analyzer's other figures do not move with the new tables: analyze summary
# prints the same with and without them (the tables dropped from a copy)
# but for its four on-CPU columns, which only the trace with them has. As root, the same run as
# nobody (setpriv) records perf events too where perf_event_paranoid <= 2.
# With --trace-cpu-user-stack 16384 (docs/cpu.md, "DWARF unwinding") the same checks hold, meta
# cpu_unwind is dwarf (fp with a reason naming libdw in a build without it) and every sample with
# a stack copy is counted as unwound or kept; a trace without the flag has no cpu_unwind keys;
# a size out of range, or the flag without --trace-cpu, is one line and exit 2.
#
#   bash tests/it_cpu_trainer.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
TRAINER="$BUILD/trainer"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$TRAINER" ] || { echo "SKIP: $TRAINER is not built"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the records"; exit 0; }

it_enter_tmp
# nobody's trace goes where nobody can reach (ST_TEST_TMP may be private)
N=$(mktemp -d /tmp/it_cpu_trainer_nobody.XXXXXX)
chmod 0777 "$N"
trap 'rm -rf "$T" "$N"' EXIT

train() { # NAME DIR [PREFIX...]: the trainer with --trace-cpu into DIR/NAME.sqlite, copied here
    local name=$1 dir=$2; shift 2
    "$@" "$TRAINER" --steps 200 --trace "$dir/$name.sqlite" --trace-cpu --overwrite ${TRAIN_EXTRA:-} >"$name.log" 2>&1 ||
        fail "trainer $name: $(tail -5 "$name.log")"
    [ "$dir" = "$T" ] || cp "$dir/$name.sqlite" "$T/$name.sqlite"
    ok
}

check() { # NAME: the checks of the top on NAME.sqlite
    ST_TRACE="$1.sqlite" ST_SANITIZED="$SANITIZED" ST_USER_STACK="${TRAIN_EXTRA:+16384}" py "check $1" <<'EOF'
import os, sqlite3
db = sqlite3.connect(os.environ["ST_TRACE"])
meta = dict(db.execute("select key, value from meta"))
if meta.get("cpu_mode") != "perf":
    raise SystemExit("cpu_mode %r (%s)" % (meta.get("cpu_mode"), meta.get("cpu_reason")))
assert meta["status"] == "complete", meta["status"]
assert meta["cpu_period_ns"] == "5025126", meta["cpu_period_ns"]
assert "cpu_lost_records" in meta and float(meta["cpu_sample_hz"]) > 0

def varint(b, i):
    v = s = 0
    while True:
        x = b[i]; i += 1; v |= (x & 0x7F) << s; s += 7
        if not x & 0x80: return v, i
def unzig(z): return (z >> 1) ^ -(z & 1)

threads = {i: n for i, n in db.execute("select id, name from threads")}
cpu_threads = {r[0]: r for r in db.execute("select thread, status, samples, switches, lost from cpu_threads")}
assert set(cpu_threads) == set(threads), (cpu_threads, threads)
assert all(r[1] == "perf" for r in cpu_threads.values())
stages = dict(db.execute("select id, name from stages"))
syms = dict(db.execute("select addr, name from cpu_symbols"))
stacks = {}
for sid, n, data in db.execute("select id, n_frames, data from cpu_stacks"):
    frames, prev, i = [], 0, 0
    for _ in range(n):
        z, i = varint(data, i); prev = (prev + unzig(z)) & (2**64 - 1); frames.append(prev)
    assert i == len(data)
    # cpu_symbols.addr is a signed 64-bit integer: kernel frames (>= 2^63) are negative there
    frames = [f - 2**64 if f >= 2**63 else f for f in frames]
    stacks[sid] = frames
    assert all(f in syms for f in frames), "a frame without a cpu_symbols row"
samples, switches = {}, {}
in_stage = {}
kernel_named = 0
wait_stacks = 0
for th, n, data, t0, t1 in db.execute("select thread, n_records, data, t0_ns, t1_ns from cpu_chunks order by id"):
    assert data[0] == 0x50
    i, ts = 1, 0
    for _ in range(n):
        kind = data[i]; i += 1
        z, i = varint(data, i); ts += unzig(z)
        assert t0 <= ts <= t1
        if kind in (0, 1, 2):
            switches[th] = switches.get(th, 0) + 1
        elif kind == 8:  # a blocked switch-out with its wait stack (proc+stacks)
            sid, i = varint(data, i)
            assert sid in stacks
            switches[th] = switches.get(th, 0) + 1
            wait_stacks += 1
        elif kind == 9:  # the same with the sched_switch sample: kernel frames first, task state (proc+sched)
            sid, i = varint(data, i)
            nk, i = varint(data, i)
            state, i = varint(data, i)
            assert sid in stacks and nk <= len(stacks[sid]), (sid, nk)
            assert all(f < 0 for f in stacks[sid][:nk]) and chr(state).isalpha(), (nk, state)
            switches[th] = switches.get(th, 0) + 1
            wait_stacks += 1
        elif kind in (3, 4, 6, 7):
            sid, i = varint(data, i)
            stage = None
            if kind in (3, 6):
                st, i = varint(data, i)
                stage = stages[st - 1] if st else ""
            if kind in (6, 7):
                fl, i = varint(data, i)
                assert fl in (0, 1, 3), fl
            samples[th] = samples.get(th, 0) + 1
            in_stage[(threads[th], stage)] = in_stage.get((threads[th], stage), 0) + 1
            if any(syms[f].startswith("k_") for f in stacks[sid]): kernel_named += 1
        elif kind == 5:
            _, i = varint(data, i)
        else:
            raise SystemExit("bad kind %d" % kind)
    assert i == len(data), "bytes left in a chunk"
assert sum(samples.values()) == int(meta["cpu_samples"]) == sum(r[2] for r in cpu_threads.values())
assert wait_stacks == int(meta["cpu_wait_stacks"]), (wait_stacks, meta["cpu_wait_stacks"])
assert (wait_stacks > 0) == (meta["cpu_block_reasons"] in ("proc+stacks", "proc+sched")), (wait_stacks, meta["cpu_block_reasons"])
for th, r in cpu_threads.items():
    assert samples.get(th, 0) == r[2] and switches.get(th, 0) == r[3], (th, r, samples, switches)
    assert r[3] > 0, "no switch records on thread %s" % threads[th]
target = sum(v for (t, s), v in in_stage.items() if t == "target0")
forward = in_stage.get(("target0", "forward"), 0)
drafter = sum(v for (t, s), v in in_stage.items() if t == "drafter0")
print("samples per thread and stage:", sorted(in_stage.items()), "kernels named in", kernel_named)
assert target >= 20 and drafter >= 10, (target, drafter)
assert forward >= 0.8 * target, (forward, target)
# In a sanitizer build most samples land in the sanitizer's runtime, whose functions keep no
# frame pointer: the frame-pointer walk then skips the kernel that called it, so only the
# stage attribution above is asserted there, and a few named kernels.
if os.environ.get("ST_SANITIZED"):
    assert kernel_named >= 1, kernel_named
else:
    assert kernel_named >= 0.5 * sum(samples.values()), kernel_named
own = db.execute("select build_id from cpu_maps where path like '%/trainer'").fetchall()
assert own and all(len(b) >= 16 for (b,) in own), own
user_stack = os.environ.get("ST_USER_STACK")
if not user_stack:
    assert not any(k.startswith("cpu_unwind") or k == "cpu_user_stack" for k in meta), "unwind keys with the option off"
else:
    assert meta["cpu_user_stack"] == user_stack, meta["cpu_user_stack"]
    if meta["cpu_unwind"] == "fp":
        assert "libdw" in meta["cpu_unwind_reason"], meta["cpu_unwind_reason"]
    else:
        assert meta["cpu_unwind"] == "dwarf" and "cpu_unwind_reason" not in meta, meta
        dwarf, fp = int(meta["cpu_unwind_dwarf_samples"]), int(meta["cpu_unwind_fp_samples"])
        print("unwound by DWARF %d, kept their chain %d, of %s samples; %s ns unwinding"
              % (dwarf, fp, meta["cpu_samples"], meta["cpu_unwind_ns"]))
        # a sample without a copy (the kernel found no user registers) counts in neither
        assert 0.9 * int(meta["cpu_samples"]) <= dwarf + fp <= int(meta["cpu_samples"]), (dwarf, fp)
        assert int(meta["cpu_unwind_ns"]) > 0
EOF
}

# a trainer built with a sanitizer (make SAN=...) links its runtime
SANITIZED=$(ldd "$TRAINER" 2>/dev/null | grep -Eo 'lib(a|t|ub)san' | head -1 || true)
train plain "$T"
check plain
# The CPU tables add summary's on-CPU columns (the last four) and change nothing else.
cp plain.sqlite bare.sqlite
sqlite3 bare.sqlite "drop table cpu_threads; drop table cpu_chunks; drop table cpu_stacks; drop table cpu_maps;
                     drop table cpu_symbols; delete from meta where key like 'cpu%';"
expect_ok sum_plain "$A" summary --format csv plain.sqlite
expect_ok sum_bare "$A" summary --format csv bare.sqlite
head -1 sum_plain.out | grep -q ',on_cpu_ms,on_cpu_pct,preempted_pct,blocked_pct$' || fail "summary: no on-CPU columns: $(head -1 sum_plain.out)"
sed 's/plain\.sqlite/X/' sum_plain.out | cut -d, -f1-17 >a.txt
sed 's/bare\.sqlite/X/' sum_bare.out >b.txt
diff a.txt b.txt >/dev/null || fail "analyze summary differs with the CPU tables: $(diff a.txt b.txt | head)"
ok
# info's cpu capture line: mode, sampler, and the counts of meta, exactly.
expect_ok info_plain "$A" info plain.sqlite
want=$(sqlite3 plain.sqlite "select printf('  cpu capture: perf (sampler %s), %s samples at %s Hz, %s switch records, %s records lost',
    (select value from meta where key = 'cpu_sampler'), (select value from meta where key = 'cpu_samples'),
    (select value from meta where key = 'cpu_sample_hz'), (select value from meta where key = 'cpu_switches'),
    (select value from meta where key = 'cpu_lost_records'))")
grep -qxF "$want" info_plain.out || fail "info: no '$want' in $(cat info_plain.out)"
expect_ok info_bare "$A" info bare.sqlite
grep -q 'cpu capture' info_bare.out && fail "info: a cpu capture line without the CPU capture"
ok

# DWARF unwinding of the same run's samples; its refusals
TRAIN_EXTRA="--trace-cpu-user-stack 16384" train dwarf "$T"
TRAIN_EXTRA="--trace-cpu-user-stack 16384" check dwarf
for bad in "--trace-cpu --trace-cpu-user-stack 4096" "--trace-cpu --trace-cpu-user-stack 65537" \
    "--trace-cpu-user-stack 16384"; do
    run bad_stack "$TRAINER" --steps 1 --trace bad.sqlite --overwrite $bad
    [ $rc -eq 2 ] && [ "$(wc -l <bad_stack.err)" -eq 1 ] && grep -q '^trainer: --trace-cpu-user-stack' bad_stack.err ||
        fail "trainer $bad: exit $rc: $(cat bad_stack.err)"
    ok
done

if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
    [ "$(cat /proc/sys/kernel/perf_event_paranoid)" -le 2 ]; then
    train nobody "$N" setpriv --reuid=nobody --regid=nogroup --clear-groups
    check nobody
fi
echo "it_cpu_trainer: $n_checks checks passed"
