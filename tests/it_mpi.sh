#!/usr/bin/env bash
# it_mpi.sh: the trainer as several processes under mpirun (CPU backend, tiny preset).
#  - 2 processes (1 target rank, 1 drafter rank) print the same loss lines as the
#    single-process run with one target and one drafter: the same batches, anchors and
#    weights, so the same bits;
#  - 4 processes (--layout targets=2,drafters=2, --trace run.sqlite): exit 0, the loss falls,
#    run.rank0..3.sqlite are complete, share one run_id, and say rank r of 4 with local
#    rank r (one host); `analyze info` reads each;
#  - clocks: with ST_TEST_CLOCK_SHIFT_NS=1:5000000000 rank 1's trace measures its offset to
#    rank 0's clock as -5 s within its stated uncertainty, at open and at close;
#  - a rank killed mid-run (--test-die-at 2:60, SIGKILL): mpirun stops the job, every rank's
#    trace stays readable (`analyze info`), the killed rank's says running, the others
#    interrupted or complete;
#  - the depth bound: with a slow drafter and --queue-depth 4, the drafter rank's step lines
#    show at most 4/4 queued and its queue_depth counter peaks at exactly 4 (it showed 5);
#  - one role slowed on purpose (--drafter-delay-us / --target-delay-us): `analyze bottleneck`
#    on the slowed rank's own trace names that role, and the other rank's trace shows it
#    waiting on the channel (queue_put on the target, queue_wait on the drafter);
#  - launch mistakes: a layout for another number of processes (mpirun -np 1 included),
#    torchrun's environment without an MPI launcher (RANK=0 or 1): exit 2 and one line;
#  - --trace DIR/: mpirun -np 1 writes DIR/rank0.sqlite; 4 processes over a directory of 8
#    older ranks stop without --overwrite (one line naming rank4..7, nothing changed) and
#    with it remove rank4..7 (and say so), leaving rank0..3 of the new run and the user's
#    other files, which `analyze bottleneck DIR/` reads as one run without a warning.
# Skipped when mpirun is missing or the trainer was built without MPI.
#
#   bash tests/it_mpi.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
TR="$BUILD/trainer"
for x in "$A" "$TR"; do
    [ -x "$x" ] || { echo "SKIP: $x is not built"; exit 0; }
done
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 0; }
"$TR" --version | grep -q 'multi-process: mpi' ||
    { echo "SKIP: $TR was built without MPI (make printed ✗ MPI)"; exit 0; }
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 is needed to read meta"; exit 0; }

it_enter_tmp

# Open MPI refuses root unless told; CI runs as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# mpirun -np N ARGS...: the trainer as N processes on this host (the suite runs on 2 cores)
mpi() {
    local n=$1; shift
    timeout 120 mpirun --oversubscribe -np "$n" -x ST_TEST_CLOCK_SHIFT_NS "$@"
}
export ST_TEST_CLOCK_SHIFT_NS=${ST_TEST_CLOCK_SHIFT_NS:-}
[ -n "$ST_TEST_CLOCK_SHIFT_NS" ] || unset ST_TEST_CLOCK_SHIFT_NS
meta() { sqlite3 "$1" "select value from meta where key = '$2'"; }
losses() { awk '$1 == "step" { print $2, $4 }' "$1"; }

# ---- 1 + 1 processes: the single-process run's losses, bit for bit -----------------------
args=(--steps 20 --log-every 5 --seed 7)
run single "$TR" "${args[@]}"
[ $rc -eq 0 ] || fail "single-process run: exit $rc: $(cat single.err)"
run pair mpi 2 "$TR" "${args[@]}" --layout targets=1,drafters=1
[ $rc -eq 0 ] || fail "2 processes: exit $rc: $(tail -5 pair.err)"
[ "$(losses single.out | wc -l)" -eq 4 ] || fail "single-process run printed $(losses single.out | wc -l) step lines"
diff <(losses single.out) <(losses pair.out) >/dev/null ||
    fail "2 processes: losses differ from the single-process run: $(diff <(losses single.out) <(losses pair.out))"
ok

# ---- 2 + 2 processes, traced -------------------------------------------------------------
run four mpi 4 "$TR" --steps 30 --log-every 10 --layout targets=2,drafters=2 --trace run.sqlite
[ $rc -eq 0 ] || fail "4 processes: exit $rc: $(tail -5 four.err)"
read -r first last < <(losses four.out | awk 'NR == 1 { f = $2 } { l = $2 } END { print f, l }')
awk -v f="$first" -v l="$last" 'BEGIN { exit !(f - l >= 0.4) }' ||
    fail "4 processes: the loss did not fall by 0.4: $first -> $last"
ok
[ "$(grep -c '^trainer: rank [0-3] .*: done after 30 ' four.out)" -eq 4 ] ||
    fail "4 processes: not every rank said done: $(grep '^trainer: rank' four.out)"
run_id=$(meta run.rank0.sqlite run_id)
[ -n "$run_id" ] || fail "rank 0's trace has no run_id"
for r in 0 1 2 3; do
    f=run.rank$r.sqlite
    [ -f "$f" ] || fail "no $f (files: $(ls))"
    [ "$(meta "$f" status)" = complete ] || fail "$f: status $(meta "$f" status)"
    [ "$(meta "$f" run_id)" = "$run_id" ] || fail "$f: run_id $(meta "$f" run_id), rank 0's $run_id"
    [ "$(meta "$f" rank)" = "$r" ] || fail "$f: rank $(meta "$f" rank)"
    [ "$(meta "$f" world_size)" = 4 ] || fail "$f: world_size $(meta "$f" world_size)"
    [ "$(meta "$f" local_rank)" = "$r" ] || fail "$f: local_rank $(meta "$f" local_rank)"
    [ -n "$(meta "$f" clock_offset_close_ns)" ] || fail "$f: no clock measurement at close"
    expect_ok "info$r" "$A" info "$f"
    grep -q "rank $r of 4, run $run_id" "info$r.out" || fail "analyze info $f: $(head -3 "info$r.out")"
done
[ "$(ls run*.sqlite | wc -l)" -eq 4 ] || fail "4 processes wrote: $(ls)"
# each role's threads and stages, on its own ranks
roles() { sqlite3 "$1" "select group_concat(role, ',') from (select distinct role from threads order by role)"; }
[ "$(roles run.rank0.sqlite)" = "loader,target" ] || fail "rank 0's threads: $(roles run.rank0.sqlite)"
[ "$(roles run.rank3.sqlite)" = "drafter" ] || fail "rank 3's threads: $(roles run.rank3.sqlite)"
[ "$(sqlite3 run.rank2.sqlite "select max(step) from steps")" = 30 ] || fail "rank 2: steps"
ok

# ---- clocks: a shifted rank recovers its shift --------------------------------------------
ST_TEST_CLOCK_SHIFT_NS=1:5000000000 run shift mpi 2 "$TR" --steps 5 --trace shift.sqlite
[ $rc -eq 0 ] || fail "shifted run: exit $rc: $(tail -5 shift.err)"
for at in "" _close; do
    off=$(meta shift.rank1.sqlite "clock_offset${at}_ns")
    unc=$(meta shift.rank1.sqlite "clock_uncertainty${at}_ns")
    [ -n "$off" ] && [ -n "$unc" ] || fail "shift.rank1.sqlite: no clock_offset${at}_ns"
    err=$((off + 5000000000))
    [ ${err#-} -le "$unc" ] || fail "rank 1's clock_offset${at}_ns is $off, not -5 s within $unc ns"
    [ "$(meta shift.rank0.sqlite "clock_offset${at}_ns")" = 0 ] || fail "rank 0's offset is not 0"
done
ok

# ---- a rank killed mid-run ----------------------------------------------------------------
# mpirun SIGTERMs the other ranks (each flushes its trace, status interrupted) and SIGKILLs
# them a second later (odls_base_sigkill_timeout): on a loaded machine a flush may not finish
# by then, and that trace stays as its last commit left it (status running); readable either way.
# The killed rank keeps what its writer committed (every 250 ms): on an idle host 15 steps of
# this run take 130-220 ms, so it dies at step 60 (0.5-0.9 s), after commits that hold marks.
run die mpi 4 "$TR" --steps 80 --log-every 10 --trace die.sqlite --test-die-at 2:60
[ $rc -ne 0 ] || fail "a run with a killed rank exited 0"
# Open MPI's mpirun returns 128 + 9 after a rank is killed (README, Multi-process runs)
if mpirun --version 2>/dev/null | grep -q 'Open MPI'; then
    [ $rc -eq 137 ] || fail "mpirun after a rank was killed: exit $rc, not 137"
fi
for r in 0 1 2 3; do
    f=die.rank$r.sqlite
    [ -f "$f" ] || fail "no $f after rank 2 was killed (files: $(ls die*))"
    expect_ok "dieinfo$r" "$A" info "$f"
    s=$(meta "$f" status)
    if [ $r = 2 ]; then
        [ "$s" = running ] || fail "the killed rank's trace says $s"
    else
        case "$s" in interrupted | complete | running) ;; *) fail "$f: status $s" ;; esac
    fi
    [ "$(sqlite3 "$f" "select count(*) from steps")" -ge 2 ] || fail "$f: no step marks"
done
ok

# ---- one role slowed on purpose: bottleneck on each rank's own trace ----------------------
# shares come from `analyze bottleneck`'s roles table: $5 wait_input_pct, $6 wait_output_pct;
# (the suite shares 2 cores: the delays' busy waits slow the other role too, so the waits are
# compared between the two runs rather than against a fixed share)
share() { awk -v role="$2" -v col="$3" '$1 == role { print $col; exit }' "$1" | tr -d %; }
run slowd mpi 2 "$TR" --steps 24 --queue-depth 4 --drafter-delay-us 20000 --trace slowd.sqlite
[ $rc -eq 0 ] || fail "slow drafter: exit $rc: $(tail -5 slowd.err)"
run slowt mpi 2 "$TR" --steps 24 --queue-depth 4 --target-delay-us 20000 --trace slowt.sqlite
[ $rc -eq 0 ] || fail "slow target: exit $rc: $(tail -5 slowt.err)"
# the depth bound holds on the drafter rank: items received and not yet trained on never
# exceed --queue-depth, in its step lines or its queue_depth counter, and a slow drafter
# fills the queue to exactly that
bad=$(awk '$1 == "step" { split($NF, q, "/"); if (q[1] + 0 > q[2] + 0) print }' slowd.out)
[ -z "$bad" ] || fail "slow drafter: a step line shows more than --queue-depth 4 queued: $bad"
depth_max=$("$A" sql slowd.rank1.sqlite "select max(value) from counters where counter = (select id from counter_names where name = 'queue_depth')" | tail -1 | tr -d ' ')
[ "$depth_max" = 4 ] || fail "slow drafter: queue_depth reached $depth_max, not --queue-depth 4"
for f in slowd slowt; do
    expect_ok "$f.t" "$A" bottleneck $f.rank0.sqlite
    expect_ok "$f.d" "$A" bottleneck $f.rank1.sqlite
done
grep -q '^Bottleneck: drafter ' slowd.d.out || fail "slow drafter, drafter rank: $(grep '^Bottleneck' slowd.d.out)"
grep -q '^Bottleneck: target .*limiting stage: forward' slowt.t.out ||
    fail "slow target, target rank: $(grep '^Bottleneck' slowt.t.out)"
# the target waits for credits (queue_put: wait_output) when the drafter is slow...
put_d=$(share slowd.t.out target 6) put_t=$(share slowt.t.out target 6)
awk -v a="$put_d" -v b="$put_t" 'BEGIN { exit !(a >= 5 && a > 2 * b) }' ||
    fail "the target's wait_output: ${put_d}% with a slow drafter, ${put_t}% with a slow target"
# ...the drafter waits for items (queue_wait: wait_input) when the target is slow
get_t=$(share slowt.d.out drafter 5) get_d=$(share slowd.d.out drafter 5)
awk -v a="$get_t" -v b="$get_d" 'BEGIN { exit !(a >= 5 && a > 2 * b) }' ||
    fail "the drafter's wait_input: ${get_t}% with a slow target, ${get_d}% with a slow drafter"
ok

# ---- launch mistakes ----------------------------------------------------------------------
run badlayout mpi 3 "$TR" --steps 5 --layout targets=2,drafters=2
[ $rc -eq 2 ] || fail "a layout for 4 processes under 3: exit $rc"
[ "$(grep -c '^trainer: ' badlayout.err)" -eq 1 ] || fail "bad layout: $(grep trainer: badlayout.err)"
grep -q "^trainer: --layout targets=2,drafters=2 needs 4 processes, but the run has 3 (start it with mpirun -np 4)$" badlayout.err ||
    fail "bad layout: $(grep trainer: badlayout.err)"
ok
# one process under mpirun plays every role: a layout of ranks is a mistake there too
for bad in "--layout targets=2,drafters=2" "--target-ranks 0,5"; do
    # shellcheck disable=SC2086
    run np1 mpi 1 "$TR" --steps 5 $bad
    [ $rc -ne 0 ] || fail "mpirun -np 1 $bad: exit 0"
    [ "$(grep -c '^trainer: ' np1.err)" -eq 1 ] || fail "mpirun -np 1 $bad: $(cat np1.err)"
    grep -q 'Exit code: *2$' np1.err || fail "mpirun -np 1 $bad: the trainer's exit status was not 2: $(cat np1.err)"
done
grep -q '^trainer: --target-ranks names rank 5, but the run has 1 process (rank 0)$' np1.err ||
    fail "mpirun -np 1 --target-ranks 0,5: $(grep trainer: np1.err)"
ok
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 run torchrun "$TR" --steps 5
[ $rc -eq 2 ] || fail "torchrun's environment: exit $rc"
[ "$(wc -l <torchrun.err)" -eq 1 ] || fail "torchrun's environment: $(cat torchrun.err)"
grep -q 'use mpirun -np 2 build/trainer' torchrun.err || fail "torchrun's environment: $(cat torchrun.err)"
[ ! -s torchrun.out ] || fail "torchrun's environment: printed $(cat torchrun.out)"
ok
RANK=0 WORLD_SIZE=1 run torchrun1 "$TR" --steps 3
[ $rc -eq 0 ] || fail "WORLD_SIZE=1 (one process): exit $rc: $(cat torchrun1.err)"
ok
RANK=1 WORLD_SIZE=2 run torchrun_r1 "$TR" --steps 3
[ $rc -eq 2 ] || fail "torchrun's environment, RANK=1: exit $rc"
[ "$(wc -l <torchrun_r1.err)" -eq 1 ] || fail "torchrun's environment, RANK=1, said: '$(cat torchrun_r1.err)'"
ok

# ---- --trace DIR/: one process, and a run over more ranks of an older one ----------------
mkdir one
run one mpi 1 "$TR" --steps 3 --trace one/
[ $rc -eq 0 ] || fail "mpirun -np 1 --trace one/: exit $rc: $(tail -3 one.err)"
[ "$(ls one)" = rank0.sqlite ] || fail "mpirun -np 1 --trace one/ wrote: $(ls one)"
[ "$(meta one/rank0.sqlite world_size)" = 1 ] || fail "one/rank0.sqlite: world_size $(meta one/rank0.sqlite world_size)"
expect_ok onebn "$A" bottleneck one/
# a directory that does not exist yet: every rank's file in it
run fresh mpi 2 "$TR" --steps 3 --trace fresh/sub/
[ $rc -eq 0 ] || fail "mpirun -np 2 --trace fresh/sub/: exit $rc: $(tail -3 fresh.err)"
[ "$(ls fresh/sub | tr '\n' ' ')" = "rank0.sqlite rank1.sqlite " ] || fail "--trace fresh/sub/ wrote: $(ls fresh/sub)"
ok
mkdir old
run old8 mpi 8 "$TR" --steps 2 --layout targets=4,drafters=4 --trace old/
[ $rc -eq 0 ] || fail "8 processes: exit $rc: $(tail -3 old8.err)"
echo "not a trace" >old/notes.txt
run old4 mpi 4 "$TR" --steps 3 --trace old/
[ $rc -ne 0 ] || fail "4 processes over 8 old ranks without --overwrite: exit 0"
[ "$(grep -c '^trainer: ' old4.err)" -eq 1 ] || fail "4 over 8 old ranks: $(grep trainer: old4.err)"
grep -q '^trainer: rank 0: an older run left rank files that a run of 4 processes does not write: old/rank4.sqlite, old/rank5.sqlite, old/rank6.sqlite, old/rank7.sqlite; .*add --overwrite' old4.err ||
    fail "4 over 8 old ranks: $(grep trainer: old4.err)"
[ "$(ls old | wc -l)" -eq 9 ] || fail "4 over 8 old ranks without --overwrite changed old/: $(ls old)"
run new4 mpi 4 "$TR" --steps 3 --trace old/ --overwrite
[ $rc -eq 0 ] || fail "4 processes over 8 old ranks with --overwrite: exit $rc: $(tail -3 new4.err)"
grep -qx 'trainer: --overwrite removed the rank files of an older run: old/rank4.sqlite, old/rank5.sqlite, old/rank6.sqlite, old/rank7.sqlite' new4.out ||
    fail "--overwrite did not say what it removed: $(grep -- --overwrite new4.out)"
[ "$(ls old | tr '\n' ' ')" = "notes.txt rank0.sqlite rank1.sqlite rank2.sqlite rank3.sqlite " ] ||
    fail "after 4 over 8 old ranks with --overwrite, old/ holds: $(ls old)"
expect_ok oldbn "$A" bottleneck old/
grep -q 'warning' oldbn.err && fail "analyze bottleneck old/ warned: $(cat oldbn.err)"
for r in 0 1 2 3; do
    [ "$(meta old/rank$r.sqlite world_size)" = 4 ] || fail "old/rank$r.sqlite: world_size $(meta old/rank$r.sqlite world_size)"
done
ok
echo "it_mpi: $n_checks checks passed"
