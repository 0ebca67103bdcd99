#!/usr/bin/env bash
# it_clock_ns.sh: ranks whose CLOCK_MONOTONIC really differs (Linux time namespaces) recover
# the difference within their stated uncertainty. The trainer runs as 3 processes under
# mpirun (CPU backend, 1 target and 2 drafter ranks, 300 steps); each rank's command is
# wrapped so that, chosen by $OMPI_COMM_WORLD_RANK, it runs under
# `unshare --time --monotonic=S --fork` with S one of +3 s and -4 s, or unshifted. Four trials
# move the shifts around the ranks (rank 0 shifted in two of them). The expected offset of
# rank k is S(rank 0) - S(rank k) seconds, since a namespace's CLOCK_MONOTONIC is the host's
# plus S, and the TSC all of them read is one. In every trial, for every rank > 0, at open and
# at close: |clock_offset_ns - expected| <= clock_uncertainty_ns (the same with _close_), which
# the stated uncertainty must guarantee: half the best round trip, plus both ends' TSC map
# errors and half brackets (docs/trace-format.md, "Ranks on one clock"). Also: rank 0 stores
# offset 0 and uncertainty 0 and, like every rank, its map errors with half brackets >= 0
# (> 0 on the TSC). Then each trial's set without its clock keys, aligned from its collectives
# (analyze --align collectives): drafter rank 2's fitted offset to drafter rank 1 within its
# stated uncertainty of the true difference of their shifts. The figures are printed.
# Root only (unshare --time); skipped with the reason when not root, when the kernel refuses
# time namespaces, or when mpirun or an MPI trainer is missing.
#
#   bash tests/it_clock_ns.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
TR="$BUILD/trainer"
[ -x "$TR" ] || { echo "SKIP: $TR is not built"; exit 0; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: not root: time namespaces (unshare --time) need root"; exit 0; }
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 0; }
"$TR" --version | grep -q 'multi-process: mpi' ||
    { echo "SKIP: $TR was built without MPI (make printed ✗ MPI)"; exit 0; }
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 is needed to read meta"; exit 0; }
unshare --time --monotonic=-4 --fork true 2>/dev/null ||
    { echo "SKIP: unshare --time --monotonic=-4 refused here (no time namespaces: kernel < 5.6, or a container forbids them)"; exit 0; }

it_enter_tmp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
meta() { sqlite3 "$1" "select value from meta where key = '$2'"; }

# Each trial: the monotonic shift in seconds of ranks 0, 1 and 2.
trials=("0 3 -4" "3 0 -4" "-4 3 0" "3 -4 0")
# The rank's command under its shift: ST_SHIFTS holds the three, indexed by the rank.
wrap='shifts=($ST_SHIFTS); s=${shifts[$OMPI_COMM_WORLD_RANK]}
if [ "$s" = 0 ]; then exec "$@"; else exec unshare --time --monotonic="$s" --fork "$@"; fi'

printf '%-6s %-5s %-6s %-5s %16s %10s %12s %10s\n' trial rank shift at offset_ns error_ns uncertainty map_err
checked=0
for i in "${!trials[@]}"; do
    read -r -a s <<<"${trials[$i]}"
    dir=t$i
    mkdir "$dir"
    ST_SHIFTS="${trials[$i]}" run "$dir/train" timeout 60 mpirun --oversubscribe -np 3 -x ST_SHIFTS \
        bash -c "$wrap" _ "$TR" --device cpu --steps 300 --log-every 100 \
        --layout targets=1,drafters=2 --trace "$dir/run.sqlite"
    [ $rc -eq 0 ] || fail "trial $i (shifts ${trials[$i]}): mpirun: exit $rc: $(tail -5 "$dir/train.err")"
    clock=$(meta "$dir/run.rank0.sqlite" clock)
    for r in 0 1 2; do
        f=$dir/run.rank$r.sqlite
        [ "$(meta "$f" status)" = complete ] || fail "$f: status $(meta "$f" status)"
        expected=$(( (s[0] - s[r]) * 1000000000 ))
        for at in "" _close; do
            off=$(meta "$f" "clock_offset${at}_ns")
            unc=$(meta "$f" "clock_uncertainty${at}_ns")
            map=$(meta "$f" "clock_map_error${at}_ns")
            half=$(meta "$f" "clock_map_half_bracket${at}_ns")
            [ -n "$off" ] && [ -n "$unc" ] || fail "$f: no clock_offset${at}_ns or clock_uncertainty${at}_ns"
            [ -n "$map" ] && [ -n "$half" ] ||
                fail "$f: no clock_map_error${at}_ns or clock_map_half_bracket${at}_ns"
            [ "$half" -ge 0 ] || fail "$f: clock_map_half_bracket${at}_ns is $half"
            if [ "$clock" = tsc ]; then
                [ "$half" -gt 0 ] || fail "$f: clock_map_half_bracket${at}_ns is $half on the TSC"
            else
                [ "$map" = 0 ] && [ "$half" = 0 ] ||
                    fail "$f: the clock is $clock, and its map error is $map +- $half, not 0 +- 0"
            fi
            err=$((off - expected))
            printf '%-6s %-5s %-6s %-5s %16s %10s %12s %10s\n' "$i" "$r" "${s[$r]}" "${at:-_open}" \
                "$off" "$err" "$unc" "$map±$half"
            if [ "$r" -eq 0 ]; then
                [ "$off" = 0 ] && [ "$unc" = 0 ] || fail "$f: rank 0 stores offset $off +- $unc, not 0 +- 0"
            else
                [ "${err#-}" -le "$unc" ] ||
                    fail "trial $i (shifts ${trials[$i]}): rank $r's clock_offset${at}_ns is $off, $err ns from the expected $expected, outside its uncertainty $unc ns"
                checked=$((checked + 1))
            fi
            ok
        done
    done
done
[ $checked -eq $(( ${#trials[@]} * 2 * 2 )) ] || fail "checked $checked offsets"

# The same sets with their clock keys removed, aligned from the drafters' all-reduces
# (analyze --align collectives; docs/analyze.md, "Clock alignment"): the fitted offset of
# drafter rank 2 to the reference (drafter rank 1: the target, rank 0, has no collective) must
# fall within its stated uncertainty of the true S(1) - S(2) seconds, at both ends of the fit.
fitted=0
for i in "${!trials[@]}"; do
    read -r -a s <<<"${trials[$i]}"
    mkdir "fit$i"
    for r in 0 1 2; do
        sqlite3 "t$i/run.rank$r.sqlite" ".backup fit$i/run.rank$r.sqlite"
        sqlite3 "fit$i/run.rank$r.sqlite" "DELETE FROM meta WHERE key LIKE 'clock\_%' ESCAPE '\\'"
    done
    expect_ok "fit$i" "$BUILD/analyze" info --align collectives --format json --table rank_clocks "fit$i"
    EXPECTED=$(( (s[1] - s[2]) * 1000000000 )) python3 - "fit$i.out" <<'PY' || fail "trial $i: the fit: $(cat "fit$i.out")"
import json, os, sys
rows = {r["rank"]: r for r in json.load(open(sys.argv[1]))["rank_clocks"]}
r2, want = rows[2], int(os.environ["EXPECTED"])
assert rows[1]["method"] == "reference" and r2["method"] == "collectives" and r2["reference_rank"] == 1, rows
for at in ("offset_ns", "offset_close_ns"):
    err = r2[at] - want
    print("fit: rank 2 %s %d, error %d ns, uncertainty %d ns (spread %d)" % (at, r2[at], err, r2["uncertainty_ns"], r2["spread_ns"]))
    assert abs(err) <= r2["uncertainty_ns"], (at, r2, want)
PY
    fitted=$((fitted + 1))
done
echo "it_clock_ns: $checked offsets within their uncertainty, $fitted fits from collectives within theirs ($n_checks checks)"
