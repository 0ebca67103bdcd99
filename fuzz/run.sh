#!/usr/bin/env bash
# run.sh: runs every fuzz target in BUILD_DIR for SECONDS each (make fuzz).
# Seeds come from make_seeds (small valid traces and chunks) and from
# fuzz/regress/<target> (inputs that once crashed it); the corpus each
# target grows is kept in BUILD_DIR/corpus-<target> between runs, and inputs
# that crash are written to BUILD_DIR/artifacts/. Prints one line per target
# (executions, corpus, crashes) and exits 1 when any target crashed.
#
#   bash fuzz/run.sh build/fuzz 30
set -uo pipefail
DIR=${1:-build/fuzz}
SECONDS_EACH=${2:-30}
"$DIR/make_seeds" "$DIR/seeds" || exit 1
mkdir -p "$DIR/artifacts"
status=0
for target in fuzz_reader fuzz_chunks; do
    [ -x "$DIR/$target" ] || { echo "missing $DIR/$target"; exit 1; }
    seeds="$DIR/seeds/chunks"
    max_len=4096
    if [ "$target" = fuzz_reader ]; then seeds="$DIR/seeds/reader"; max_len=32768; fi
    # inputs that once crashed a target stay in its seeds (fuzz/regress/<target>)
    regress="$(dirname "$0")/regress/${target#fuzz_}"
    [ -d "$regress" ] && seeds="$seeds $regress"
    corpus="$DIR/corpus-$target"
    mkdir -p "$corpus"
    log="$DIR/$target.log"
    "$DIR/$target" -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=2048 -max_len=$max_len \
        -print_final_stats=1 -artifact_prefix="$DIR/artifacts/$target-" "$corpus" $seeds >"$log" 2>&1
    rc=$?
    execs=$(awk '/stat::number_of_executed_units/{print $NF}' "$log")
    speed=$(awk '/stat::average_exec_per_sec/{print $NF}' "$log")
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
    corpus_n=$(ls "$corpus" | wc -l)
    if [ $rc -eq 0 ]; then
        echo "  ok   $target: ${execs:-?} executions in ${SECONDS_EACH}s (${speed:-?}/s), $cov, corpus $corpus_n inputs"
    else
        status=1
        echo "  FAIL $target (exit $rc): crash input in $DIR/artifacts/; log $log:"
        grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==' "$log" | head -20 | sed 's/^/       | /'
    fi
done
exit $status
