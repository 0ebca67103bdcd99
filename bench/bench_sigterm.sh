#!/usr/bin/env bash
# bench_sigterm.sh: does stopping an mpirun job with SIGTERM leave every rank's trace whole?
# Each trial starts the trainer as NP processes (CPU backend, --layout targets=NP/2,
# drafters=NP/2, --log-every 1), waits for its first step line, lets it run RUN_S seconds,
# notes the last step the drafters printed and the time (CLOCK_MONOTONIC, the traces' clock),
# sends SIGTERM to mpirun and waits. Open MPI 4.1's mpirun then sends the ranks SIGCONT, SIGTERM
# a second later, and SIGKILL when the first rank exits or 1 s after (odls_base_sigkill_timeout).
# Per trial it counts the files left `running` (a rank killed before its flush) and checks
# that nothing recorded before the signal is missing:
#   lost steps   the last step printed before the signal minus the last step mark in a
#                drafter's file (0: none lost), the worst drafter;
#   margin_ms    per file, the last completed range's end minus the signal's time: positive
#                when the file holds records from after the signal to mpirun (what a rank
#                did before its own SIGTERM), the worst file.
# Prints one line per trial and a total.
#
#   bash bench/bench_sigterm.sh [BUILD_DIR]   env: NP=16 TRIALS=30 RUN_S=3 TRAINER=...
set -uo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
NP=${NP:-16}
TRIALS=${TRIALS:-30}
RUN_S=${RUN_S:-3}
TR=${TRAINER:-$BUILD/trainer}
A=$BUILD/analyze
command -v mpirun >/dev/null || { echo "bench_sigterm: no mpirun"; exit 1; }
command -v sqlite3 >/dev/null || { echo "bench_sigterm: no sqlite3"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=$(mktemp -d "${TMPDIR:-/tmp}/bench_sigterm.XXXXXX")
trap 'rm -rf "$T"' EXIT
now_ns() { python3 -c 'import time; print(time.clock_gettime_ns(time.CLOCK_MONOTONIC))'; }

printf '%-5s %5s %7s %11s %7s %10s %10s %9s\n' trial files running interrupted printed last_step lost_steps margin_ms
tot_files=0 tot_running=0 tot_lost=0 bad_trials=0 worst_margin=
for trial in $(seq "$TRIALS"); do
    d=$T/t$trial
    mkdir -p "$d"
    mpirun --oversubscribe -np "$NP" "$TR" --layout "targets=$((NP / 2)),drafters=$((NP / 2))" \
        --steps 1000000 --log-every 1 --trace "$d/" >"$d/out" 2>"$d/err" &
    pid=$!
    for _ in $(seq 600); do
        grep -q '^step ' "$d/out" 2>/dev/null && break
        sleep 0.1
    done
    sleep "$RUN_S"
    printed=$(grep '^step ' "$d/out" | tail -1 | awk '{print $2}')
    t_kill=$(now_ns)
    kill -TERM "$pid"
    wait "$pid"
    files=0 running=0 interrupted=0 last_min= margin_min=
    for f in "$d"/rank*.sqlite; do
        [ -f "$f" ] || continue
        files=$((files + 1))
        s=$(sqlite3 "$f" "SELECT value FROM meta WHERE key = 'status'" 2>/dev/null)
        case "$s" in running) running=$((running + 1)) ;; interrupted) interrupted=$((interrupted + 1)) ;; esac
        role=$(sqlite3 "$f" "SELECT role FROM threads WHERE role IN ('target', 'drafter') LIMIT 1" 2>/dev/null)
        if [ "$role" = drafter ]; then
            last=$(sqlite3 "$f" "SELECT coalesce(max(step), -1) FROM steps" 2>/dev/null)
            [ -z "$last_min" ] || [ "$last" -lt "$last_min" ] && last_min=$last
        fi
        end=$("$A" sql --format csv "$f" "SELECT coalesce(max(end_ns), 0) AS e FROM ranges" 2>/dev/null | tail -1)
        m=$(( (end - t_kill) / 1000000 ))
        [ -z "$margin_min" ] || [ "$m" -lt "$margin_min" ] && margin_min=$m
    done
    lost=$(( printed > last_min ? printed - last_min : 0 ))
    printf '%-5s %5s %7s %11s %7s %10s %10s %9s\n' "$trial" "$files" "$running" "$interrupted" \
        "$printed" "$last_min" "$lost" "$margin_min"
    tot_files=$((tot_files + files))
    tot_running=$((tot_running + running))
    tot_lost=$((tot_lost + lost))
    [ "$running" -gt 0 ] || [ "$lost" -gt 0 ] || [ "$margin_min" -lt 0 ] || [ "$files" -ne "$NP" ] &&
        bad_trials=$((bad_trials + 1))
    [ -z "$worst_margin" ] || [ "$margin_min" -lt "$worst_margin" ] && worst_margin=$margin_min
    rm -rf "$d"
done
echo "total: $TRIALS trials at $NP ranks: $bad_trials with a file running or data lost;" \
    "$tot_running of $tot_files files running; $tot_lost steps lost; worst margin $worst_margin ms"
