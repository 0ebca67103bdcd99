#!/usr/bin/env bash
# it_mpi_stop.sh: an mpirun job stopped with SIGTERM leaves every rank's trace whole. mpirun
# (Open MPI 4.1) sends the ranks SIGTERM and SIGKILLs them as soon as the first one exits, so
# a rank exits only once every rank has flushed (trainer/dist.c, stop_main). Two trials of 8
# ranks (4 targets, 4 drafters), each stopped a second into its steps: every file says
# `interrupted` (none `running`), holds the steps its drafter printed before the signal, and
# its .sqlite alone (copied without -wal and -shm) says so and holds those steps. Skipped when mpirun
# is missing or the trainer was built without MPI.
#
#   bash tests/it_mpi_stop.sh BUILD_DIR
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
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe -np 8)

for trial in 1 2; do
    d=t$trial
    mkdir "$d"
    "${MPIRUN[@]}" "$TR" --layout targets=4,drafters=4 --steps 1000000 --log-every 1 \
        --trace "$d/" >"$d.out" 2>"$d.err" &
    pid=$!
    for _ in $(seq 600); do
        grep -q '^step ' "$d.out" 2>/dev/null && break
        sleep 0.1
    done
    grep -q '^step ' "$d.out" || fail "trial $trial: no step line in 60 s: $(tail -3 "$d.err")"
    sleep 1
    printed=$(grep '^step ' "$d.out" | tail -1 | awk '{print $2}')
    kill -TERM "$pid"
    set +e
    wait "$pid"
    set -e
    # the .sqlite files alone, before anything opens them (closing the last connection
    # would checkpoint the WAL)
    mkdir "$d.copy"
    cp "$d"/rank*.sqlite "$d.copy/"
    n=0
    for f in "$d"/rank*.sqlite; do
        [ -f "$f" ] || continue
        n=$((n + 1))
        s=$(sqlite3 "$f" "SELECT value FROM meta WHERE key = 'status'")
        [ "$s" = interrupted ] || fail "trial $trial: $f says '$s', not interrupted ($(grep -h 'rank' "$d.err" | tail -3))"
        # the .sqlite alone (the interrupted flush checkpointed the WAL into it; what the rank
        # committed after its flush, waiting for the others, may be in the -wal only) says
        # interrupted and holds the steps printed before the signal
        c="$d.copy/$(basename "$f")"
        s=$(sqlite3 "$c" "SELECT value FROM meta WHERE key = 'status'" 2>&1 || true)
        [ "$s" = interrupted ] || fail "trial $trial: $c alone says '$s', not interrupted"
        a=$(sqlite3 "$f" "SELECT sum(n_ranges) FROM range_chunks")
        b=$(sqlite3 "$c" "SELECT sum(n_ranges) FROM range_chunks" 2>/dev/null || true)
        [ -n "$b" ] && [ "$b" -gt 0 ] && [ "$b" -le "$a" ] || fail "trial $trial: $f holds $a ranges, its .sqlite alone $b"
        if [ "$(sqlite3 "$f" "SELECT count(*) FROM threads WHERE role = 'drafter'")" -gt 0 ]; then
            for g in "$f" "$c"; do
                last=$(sqlite3 "$g" "SELECT max(step) FROM steps")
                [ "$last" -ge "$printed" ] || fail "trial $trial: $g ends at step $last, step $printed was printed before the signal"
            done
        fi
    done
    [ "$n" -eq 8 ] || fail "trial $trial: $n trace files, wanted 8"
    ok
done
echo "it_mpi_stop: $n_checks checks passed"
