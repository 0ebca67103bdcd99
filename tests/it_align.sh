#!/usr/bin/env bash
# it_align.sh: `--align` on rank sets without clock offsets in meta (docs/analyze.md, "Clock
# alignment").
#  - generated sets (tracegen --ranks --no-clock): every command that reads a set takes --align
#    (a bad value: exit 2, one line); auto fits rank 3 to rank 2 (the lowest with a comm range)
#    and leaves ranks 0 and 1 (targets, no comm range) on their own clocks, as `info` says rank by
#    rank; `stragglers` names the same straggler with the fitted clock as with the generator's
#    clock keys, where --align none finds 7 s waits; too few collectives: --align collectives
#    exits 2 with one line, auto notes it in one line and aligns nothing; a set where one rank
#    lost its clock keys: --align meta exits 2 naming it, auto notes that it fits every rank;
#  - the trainer under mpirun (3 processes: 1 target, 2 drafters; rank 2's clock shifted by 5 s
#    with ST_TEST_CLOCK_SHIFT_NS and its forward slowed by 3 ms, an MPMD launch): with the
#    clock_* keys deleted, rank 2's fitted offset to rank 1 is the true -5 s, and the MPI
#    ping-pong's measured one (meta, rank 2's minus rank 1's), within the stated uncertainty (the
#    measured one's own uncertainties added), and `stragglers` names the same last rank as with
#    the measured offsets. Skipped without mpirun or an MPI trainer.
#
#   bash tests/it_align.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
TR="$BUILD/trainer"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$GEN" ] || { echo "SKIP: $GEN is not built (make tests)"; exit 0; }
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 is needed to delete the clock keys"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to read the JSON"; exit 0; }

it_enter_tmp
run_id=1700000000-500

# ---- generated sets ------------------------------------------------------------------------
mkdir fit meta few mixed
"$GEN" --ranks fit 4 --steps 40 --slow 3 --no-clock --shift 3:-7000000000 --drift 3:50000 --jitter 20000
"$GEN" --ranks meta 4 --steps 40 --slow 3 --shift 3:-7000000000 --drift 3:50000 --jitter 20000
"$GEN" --ranks few 4 --steps 5 --no-clock
"$GEN" --ranks mixed 4 --steps 40 --slow 3
sqlite3 mixed/rank3.sqlite "DELETE FROM meta WHERE key LIKE 'clock_%'"

# every command that reads a set takes the option
for cmd in bottleneck "cpu" "diff fit" export "flow" gpu info "intervals --every 5" \
    "report --html x.html --overwrite" stragglers; do
    name=${cmd%% *}
    # shellcheck disable=SC2086
    run "opt_$name" "$A" $cmd --align none fit
    ! grep -q "unknown option" "opt_$name.err" || fail "$name does not take --align: $(cat "opt_$name.err")"
done
expect_ok opt_export_chrome "$A" export --align collectives --chrome chrome.json fit
ok
run bad "$A" stragglers --align sometimes fit
[ $rc -eq 2 ] || fail "--align sometimes: exit $rc"
[ "$(cat bad.err)" = "analyze: stragglers: --align must be auto, meta, collectives or none, not 'sometimes' (see: analyze stragglers --help)" ] ||
    fail "--align sometimes: $(cat bad.err)"
ok

# auto on a set without clock keys: fitted, rank by rank
expect_ok info_fit "$A" info fit
sed -n '/^  clock: /,$p' info_fit.out >info_fit.clock
grep -qx '  clock: fitted from collectives, within [0-9]* ns (align collectives)' info_fit.clock ||
    fail "info: $(cat info_fit.clock)"
grep -qx '  rank 0 clock: none (its own clock, as recorded)' info_fit.clock || fail "info rank 0: $(cat info_fit.clock)"
grep -qx '  rank 1 clock: none (its own clock, as recorded)' info_fit.clock || fail "info rank 1: $(cat info_fit.clock)"
grep -qx '  rank 2 clock: reference (the others'"'"' collectives are fitted to it)' info_fit.clock ||
    fail "info rank 2: $(cat info_fit.clock)"
grep -qx '  rank 3 clock: collectives (fitted to rank 2 from 40 instances, 36 kept, their ends within [0-9]* ns), within [0-9]* ns' info_fit.clock ||
    fail "info rank 3: $(cat info_fit.clock)"
[ ! -s info_fit.err ] || fail "info on a set without clock keys: $(cat info_fit.err)"
expect_ok info_fit_json "$A" info --format json --table rank_clocks fit
python3 - <<'PY' || fail "rank_clocks: $(cat info_fit_json.out)"
import json
rows = {r["rank"]: r for r in json.load(open("info_fit_json.out"))["rank_clocks"]}
assert [rows[r]["method"] for r in range(4)] == ["none", "none", "reference", "collectives"], rows
r3 = rows[3]
assert r3["reference_rank"] == 2 and r3["instances"] == 40 and r3["kept"] == 36, r3
# the generator's offset at the end of step k's allreduce: off - P k d (tests/traces.h)
off, P, d, t0 = -7e9, 1e7, 50000e-9, 1e9
for x, o in ((r3["sync_ns"], r3["offset_ns"]), (r3["sync_close_ns"], r3["offset_close_ns"])):
    k = round((x - (t0 - off) - 9.5e6) / (P * (1 + d)))
    want = off - P * k * d
    assert abs(o - want) <= r3["spread_ns"] <= r3["uncertainty_ns"], (x, o, want, r3)
PY
ok

# the straggler: the same with the fitted clock as with the generator's clock keys
for set in fit meta; do
    expect_ok "st_$set" "$A" stragglers --format json "$set"
done
last() { python3 -c 'import json,sys; c=[r for r in json.load(open(sys.argv[1]))["collectives"] if r["stage"]=="allreduce"][0]; print(c["last_rank"], c["times_last"], c["instances"])' "$1"; }
[ "$(last st_fit.out)" = "3 40 40" ] || fail "stragglers, fitted: $(last st_fit.out)"
[ "$(last st_meta.out)" = "3 40 40" ] || fail "stragglers, meta: $(last st_meta.out)"
expect_ok st_none "$A" stragglers --align none --format json fit
python3 -c 'import json; c=json.load(open("st_none.out"))["collectives"][0]; assert c["mean_wait_ms"] > 6000, c' ||
    fail "stragglers --align none: $(head -c 300 st_none.out)"
ok

# too few collectives
run few_coll "$A" stragglers --align collectives few
[ $rc -eq 2 ] || fail "--align collectives on 5 instances: exit $rc"
[ "$(cat few_coll.err)" = "analyze: run $run_id: --align collectives: rank 3 shares 5 collective instances with rank 2, fewer than the 8 needed" ] ||
    fail "--align collectives on 5 instances: $(cat few_coll.err)"
[ ! -s few_coll.out ] || fail "--align collectives refused, yet printed: $(head -3 few_coll.out)"
run few_auto "$A" stragglers few
[ $rc -eq 0 ] || fail "auto on 5 instances: exit $rc"
[ "$(grep -c . few_auto.err)" = 1 ] &&
    [ "$(cat few_auto.err)" = "analyze: note: run $run_id: ranks 0, 1, 2, 3 have no clock offsets in meta and rank 3 shares 5 collective instances with rank 2, fewer than the 8 needed: the ranks are not aligned (each on its own clock; --align none)" ] ||
    fail "auto on 5 instances: $(cat few_auto.err)"
run few_info "$A" info few
[ $rc -eq 0 ] || fail "info on 5 instances: exit $rc: $(cat few_info.err)"
grep -qx '  clock: not aligned (align none)' few_info.out || fail "info on 5 instances: $(tail -6 few_info.out)"
run few_info_coll "$A" info --align collectives few
[ $rc -eq 2 ] || fail "info --align collectives on 5 instances: exit $rc"
ok

# one rank without clock keys among ranks with them
run mixed_meta "$A" stragglers --align meta mixed
[ $rc -eq 2 ] || fail "--align meta, rank 3 without keys: exit $rc"
[ "$(cat mixed_meta.err)" = "analyze: run $run_id: --align meta: rank 3 has no clock offsets in meta (clock_offset_ns); give --align collectives or none" ] ||
    fail "--align meta, rank 3 without keys: $(cat mixed_meta.err)"
run mixed_auto "$A" stragglers mixed
[ $rc -eq 0 ] || fail "auto, rank 3 without keys: exit $rc"
[ "$(cat mixed_auto.err)" = "analyze: note: run $run_id: rank 3 has no clock offsets in meta: every rank is aligned from its collectives, the offsets that ranks 0, 1, 2 measured left unused" ] ||
    fail "auto, rank 3 without keys: $(cat mixed_auto.err)"
run mixed_info "$A" info --format csv --table rank_clocks mixed
[ $rc -eq 0 ] || fail "info on the mixed set: exit $rc"
[ "$(cut -d, -f2,3 mixed_info.out | tr '\n' ' ')" = "rank,method 0,none 1,none 2,reference 3,collectives " ] ||
    fail "info on the mixed set: $(cat mixed_info.out)"
ok

# ---- the trainer under mpirun --------------------------------------------------------------
if ! command -v mpirun >/dev/null || [ ! -x "$TR" ] || ! "$TR" --version | grep -q 'multi-process: mpi'; then
    echo "it_align: no mpirun or MPI trainer: the multi-process run is skipped"
    echo "it_align: $n_checks checks passed"
    exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ST_TEST_CLOCK_SHIFT_NS=2:5000000000
mkdir run
args=(--steps 60 --log-every 20 --layout targets=1,drafters=2 --trace run/)
# MPMD: ranks 0 and 1 as given, rank 2 (a drafter) 3 ms slower in each forward
run mpi timeout 180 mpirun --oversubscribe -x ST_TEST_CLOCK_SHIFT_NS -np 2 "$TR" "${args[@]}" : \
    -np 1 "$TR" "${args[@]}" --drafter-delay-us 3000
unset ST_TEST_CLOCK_SHIFT_NS
[ $rc -eq 0 ] || fail "mpirun: exit $rc: $(tail -5 mpi.err)"
cp -r run stripped
for f in stripped/*.sqlite; do sqlite3 "$f" "DELETE FROM meta WHERE key LIKE 'clock_%'"; done
expect_ok mpi_clocks "$A" info --format json --table rank_clocks stripped
for r in 1 2; do
    sqlite3 -separator ' ' "run/rank$r.sqlite" "SELECT (SELECT value FROM meta WHERE key = 'clock_sync_ns'),
        (SELECT value FROM meta WHERE key = 'clock_offset_ns'), (SELECT value FROM meta WHERE key = 'clock_uncertainty_ns'),
        (SELECT value FROM meta WHERE key = 'clock_sync_close_ns'), (SELECT value FROM meta WHERE key = 'clock_offset_close_ns'),
        (SELECT value FROM meta WHERE key = 'clock_uncertainty_close_ns')" >"meta$r.txt"
done
python3 - <<'PY' || fail "the fitted offset against the measured one: $(cat mpi_clocks.out) $(cat meta1.txt meta2.txt)"
import json
rows = {r["rank"]: r for r in json.load(open("mpi_clocks.out"))["rank_clocks"]}
assert rows[0]["method"] == "none" and rows[1]["method"] == "reference", rows
f = rows[2]
assert f["method"] == "collectives" and f["reference_rank"] == 1 and f["instances"] == 60, f
def line(s0, o0, s1, o1):
    return lambda x: o0 + (o1 - o0) * (x - s0) / (s1 - s0) if s1 > s0 else o0
m1 = [int(v) for v in open("meta1.txt").read().split()]
m2 = [int(v) for v in open("meta2.txt").read().split()]
to0_1, to0_2 = line(m1[0], m1[1], m1[3], m1[4]), line(m2[0], m2[1], m2[3], m2[4])
meas_u = max(m1[2], m1[5]) + max(m2[2], m2[5])
fit = line(f["sync_ns"], f["offset_ns"], f["sync_close_ns"], f["offset_close_ns"])
for x in (f["sync_ns"], f["sync_close_ns"]):
    # rank 2 -> rank 0 measured, then rank 0 -> rank 1 (rank 1's own offset, nearly constant)
    y0 = x + to0_2(x)
    measured = to0_2(x) - to0_1(y0 - to0_1(y0))
    print(f"rank 2 at {x}: fitted {fit(x):.0f}, measured {measured:.0f} (+-{meas_u}), true -5000000000; "
          f"uncertainty {f['uncertainty_ns']}, ends' spread {f['spread_ns']}")
    assert abs(fit(x) + 5e9) <= f["uncertainty_ns"], "not the true shift"
    assert abs(fit(x) - measured) <= f["uncertainty_ns"] + meas_u, "not the measured offset"
PY
ok
expect_ok mpi_st_meta "$A" stragglers --format json run
expect_ok mpi_st_fit "$A" stragglers --format json stripped
lr() { python3 -c 'import json,sys; print([r for r in json.load(open(sys.argv[1]))["collectives"] if r["stage"]=="allreduce"][0]["last_rank"])' "$1"; }
[ "$(lr mpi_st_meta.out)" = 2 ] || fail "stragglers with the measured offsets: last rank $(lr mpi_st_meta.out), not the slowed 2"
[ "$(lr mpi_st_fit.out)" = "$(lr mpi_st_meta.out)" ] ||
    fail "stragglers: last rank $(lr mpi_st_fit.out) fitted, $(lr mpi_st_meta.out) measured"
ok
echo "it_align: $n_checks checks passed"
