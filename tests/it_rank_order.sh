#!/usr/bin/env bash
# it_rank_order.sh: a rank set is one input however it is given (docs/analyze.md,
# "Rank sets", Inputs): the files listed in rank order, reversed, shuffled, a quoted
# glob pattern and the directory give every command the same bytes (stdout, stderr,
# exit status, and the files that export and report write). Sets: one from
# `tracegen --ranks` (equal ranks, so that every tie is met: summary's slowest rank
# goes to the lowest rank, not to the first file), the same with a killed rank and a
# missing one (the warnings), and, when Open MPI and the MPI trainer are there, a
# real 4-process run. Then the warnings: every command prints the same lines for a
# set with a running and an interrupted rank, and info names the dead rank.
#
#   bash tests/it_rank_order.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
TR="$BUILD/trainer"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$GEN" ] || { echo "SKIP: $GEN is not built (make tests)"; exit 0; }

it_enter_tmp

# same_everywhere NAME SET CMD...: CMD with SET's files (SET/<prefix><r>.sqlite, ranks
# 0..3 present) given five ways; OUT in CMD is replaced by a per-way output path whose
# file (or directory) must be the same for every way.
same_everywhere() {
    local name=$1 set=$2; shift 2
    local files=() f
    for f in $(ls "$set" | grep '\.sqlite$' | sort -V); do files+=("$set/$f"); done
    local n=${#files[@]}
    local rev=() shuf=() i
    for ((i = n - 1; i >= 0; i--)); do rev+=("${files[$i]}"); done
    # a fixed shuffle: odd positions first, then even ones (1 3 0 2 for four files)
    for ((i = 1; i < n; i += 2)); do shuf+=("${files[$i]}"); done
    for ((i = 0; i < n; i += 2)); do shuf+=("${files[$i]}"); done
    local prefix=${files[0]##*/}
    prefix=${prefix%%[0-9]*}
    local way
    for way in sorted reversed shuffled glob dir; do
        local inputs=()
        case $way in
        sorted) inputs=("${files[@]}") ;;
        reversed) inputs=("${rev[@]}") ;;
        shuffled) inputs=("${shuf[@]}") ;;
        glob) inputs=("$set/$prefix*.sqlite") ;;
        dir) inputs=("$set") ;;
        esac
        local args=() a
        for a in "$@"; do
            if [ "$a" = OUT ]; then args+=("out_${name}_$way"); elif [ "$a" = IN ]; then args+=("${inputs[@]}"); else args+=("$a"); fi
        done
        run "${name}_$way" "$A" "${args[@]}"
        echo "$rc" >"${name}_$way.rc"
    done
    for way in reversed shuffled glob dir; do
        # the output's own name (report prints the path it wrote) is the one thing allowed to differ
        sed -i "s|out_${name}_$way|out_${name}_sorted|g" "${name}_$way.out"
        for ext in out err rc; do
            cmp -s "${name}_sorted.$ext" "${name}_$way.$ext" ||
                fail "$name: $way differs from the sorted list ($ext): $(diff "${name}_sorted.$ext" "${name}_$way.$ext" | head -6)"
        done
        if [ -e "out_${name}_sorted" ]; then
            diff -r "out_${name}_sorted" "out_${name}_$way" >/dev/null ||
                fail "$name: $way wrote other files: $(diff -r "out_${name}_sorted" "out_${name}_$way" | head -6)"
        fi
    done
    [ "$(cat "${name}_sorted.rc")" = "${EXPECT_RC:-0}" ] || fail "$name: exit $(cat "${name}_sorted.rc"): $(cat "${name}_sorted.err")"
    ok
}

# every_command TAG SET: every command that takes a rank set, five ways each
every_command() {
    local tag=$1 set=$2
    same_everywhere "${tag}_info" "$set" info IN
    same_everywhere "${tag}_info_json" "$set" info --format json IN
    same_everywhere "${tag}_summary" "$set" summary IN
    same_everywhere "${tag}_summary_csv" "$set" summary --format csv IN
    same_everywhere "${tag}_summary_jobs" "$set" summary --jobs 2 --format json IN
    same_everywhere "${tag}_intervals" "$set" intervals --every 5 IN
    same_everywhere "${tag}_bottleneck" "$set" bottleneck IN
    same_everywhere "${tag}_bottleneck_json" "$set" bottleneck --format json IN
    # without GPU activity gpu refuses, with the same line every way
    EXPECT_RC=$([ "$tag" = mpi ] && echo 2 || echo 0) same_everywhere "${tag}_gpu" "$set" gpu IN
    # tracegen's sets have no flow records: flow refuses them, the same way every way
    EXPECT_RC=$([ "$tag" = mpi ] && echo 0 || echo 2) same_everywhere "${tag}_flow" "$set" flow IN
    same_everywhere "${tag}_stragglers" "$set" stragglers IN
    same_everywhere "${tag}_chrome" "$set" export IN --chrome OUT
    same_everywhere "${tag}_csv" "$set" export IN --csv OUT
    same_everywhere "${tag}_rows" "$set" export IN --rows OUT
    same_everywhere "${tag}_report" "$set" report IN --html OUT
}

mkdir even killed
"$GEN" --ranks even 4 --gpu                       # every rank alike: every tie is a tie
"$GEN" --ranks killed 5 --gpu --killed 2 --missing 4 # rank 2 killed (running), rank 4 missing
every_command even even
every_command killed killed

# the tie of summary's ranks table goes to the lowest rank, whatever the order given
grep -Eq '^target +forward +work .* 0 +0\.0%$' even_summary_reversed.out ||
    fail "summary: the slowest of equal ranks is not rank 0: $(grep '^target' even_summary_reversed.out)"
ok
# files in rank order: rank 0's block first
[ "$(grep -m1 '^== ' even_summary_reversed.out)" = "== even/rank0.sqlite: ranks rank 0; whole trace, 0.001-0.201 s; wall time 200.000 ms per thread" ] ||
    fail "summary: first block $(grep -m1 '^== ' even_summary_reversed.out)"
ok
[ "$(head -1 even_info_shuffled.out)" = even/rank0.sqlite ] || fail "info: first file $(head -1 even_info_shuffled.out)"
ok

# diff: each side expanded on its own; a side in any order is the same side
for way in glob dir; do
    case $way in glob) side='even/rank*.sqlite' ;; dir) side=even ;; esac
    run "diff_$way" "$A" diff "$side" "$side"
    [ $rc -eq 0 ] || fail "diff $way: exit $rc: $(cat "diff_$way.err")"
done
cmp -s diff_glob.out diff_dir.out || fail "diff: glob and directory differ: $(diff diff_glob.out diff_dir.out | head -4)"
ok

# ---- warnings: the same lines from every command ----------------------------------------
mkdir mixed
"$GEN" --ranks mixed 4 --gpu --killed 2 # rank 2 running (killed)
for r in 0 1 3; do
    python3 -c "import sqlite3,sys; c = sqlite3.connect(sys.argv[1]); c.execute(\"UPDATE meta SET value = 'interrupted' WHERE key = 'status'\"); c.commit()" "mixed/rank$r.sqlite"
done
python3 -c "import sqlite3,sys; c = sqlite3.connect(sys.argv[1]); c.execute(\"UPDATE meta SET value = 'complete' WHERE key = 'status'\"); c.commit()" mixed/rank3.sqlite
cat >warn_want.txt <<'EOF'
analyze: warning: mixed/rank0.sqlite is incomplete (status interrupted: the run was stopped by a signal); analysing what it holds
analyze: warning: mixed/rank1.sqlite is incomplete (status interrupted: the run was stopped by a signal); analysing what it holds
analyze: warning: mixed/rank2.sqlite is incomplete (status running: the run did not finish); analysing what it holds
EOF
for cmd in summary "intervals --every 5" bottleneck gpu stragglers "export --chrome w.json --overwrite" "report --html w.html --overwrite"; do
    name=warn_${cmd%% *}
    # shellcheck disable=SC2086
    run "$name" "$A" $cmd mixed/rank3.sqlite mixed/rank1.sqlite mixed/rank2.sqlite mixed/rank0.sqlite
    [ $rc -eq 0 ] || fail "$cmd: exit $rc: $(cat "$name.err")"
    grep '^analyze: warning: ' "$name.err" | grep -v 'no ranges in the selection' >"$name.warn" || true
    cmp -s warn_want.txt "$name.warn" || fail "$cmd warns otherwise: $(diff warn_want.txt "$name.warn")"
done
ok
# a missing rank: one line first, from every command
run miss_summary "$A" summary killed
run miss_bottleneck "$A" bottleneck killed
head -1 miss_summary.err | grep -qx 'analyze: warning: run 1700000000-500: 1 of 5 ranks have no trace (missing rank 4); analysing the 4 present' ||
    fail "summary: $(head -2 miss_summary.err)"
cmp -s <(grep '^analyze: warning' miss_summary.err) <(grep '^analyze: warning' miss_bottleneck.err) ||
    fail "summary and bottleneck warn otherwise: $(diff miss_summary.err miss_bottleneck.err)"
ok
# an interrupted file alone was stopped on purpose and flushed: no warning; the same file as a
# set of one rank (a pattern) is a run cut short, from summary as from bottleneck
for cmd in summary "intervals --every 5"; do
    # shellcheck disable=SC2086
    run "alone_${cmd%% *}" "$A" $cmd mixed/rank0.sqlite
    cmd=${cmd%% *} # the name from here
    [ $rc -eq 0 ] && ! grep -q 'incomplete' "alone_$cmd.err" || fail "$cmd, an interrupted file alone: $(cat "alone_$cmd.err")"
    [ "$cmd" = summary ] && set -- || set -- --every 5
    run "one_$cmd" "$A" "$cmd" "$@" 'mixed/rank0.sq*'
    [ $rc -eq 0 ] || fail "$cmd, a set of one interrupted rank: exit $rc: $(cat "one_$cmd.err")"
    grep '^analyze: warning: ' "one_$cmd.err" >"one_$cmd.warn" || true
    printf '%s\n' "analyze: warning: run 1700000000-500: 3 of 4 ranks have no trace (missing ranks 1, 2, 3); analysing the 1 present" \
        "analyze: warning: mixed/rank0.sqlite is incomplete (status interrupted: the run was stopped by a signal); analysing what it holds" >one_want.txt
    cmp -s one_want.txt "one_$cmd.warn" || fail "$cmd, a set of one interrupted rank: $(diff one_want.txt "one_$cmd.warn")"
done
ok

# info: each rank's status in words, the dead rank and those stopped because of it
expect_ok info_mixed "$A" info mixed
cat >info_want.txt <<'EOF'
rank set: run 1700000000-500, world size 4, 4 ranks present
  missing ranks: none
  incomplete ranks: 0 (interrupted), 1 (interrupted), 2 (running)
  rank 0: interrupted (stopped by a signal; what it recorded was flushed)
  rank 1: interrupted (stopped by a signal; what it recorded was flushed)
  rank 2: running (killed: no clean close, the trace was never finished)
  rank 3: complete
  died: rank 2 (status running: killed, no clean close)
  stopped because of it: ranks 0, 1 (status interrupted)
  clock: mapped onto rank 0's, within 2000 ns (align meta)
  rank 0 clock: meta (its measured offsets), within 0 ns
  rank 1 clock: meta (its measured offsets), within 2000 ns
  rank 2 clock: meta (its measured offsets), within 1500 ns
  rank 3 clock: meta (its measured offsets), within 2000 ns
EOF
sed -n '/^rank set: /,$p' info_mixed.out >info_got.txt
cmp -s info_want.txt info_got.txt || fail "info on a set with a dead rank: $(diff info_want.txt info_got.txt)"
ok
expect_ok info_mixed_csv "$A" info --format csv mixed
grep -qx 'run_id,world_size,ranks_present,missing_ranks,incomplete_ranks,duplicate_ranks,max_clock_uncertainty_ns,died_ranks,interrupted_ranks,align' info_mixed_csv.out ||
    fail "info csv: $(tail -3 info_mixed_csv.out)"
grep -qx '1700000000-500,4,4,,"0 (interrupted), 1 (interrupted), 2 (running)",,2000,2,"0, 1",meta' info_mixed_csv.out ||
    fail "info csv: $(tail -1 info_mixed_csv.out)"
ok

# ---- a real multi-process run -----------------------------------------------------------
if command -v mpirun >/dev/null && [ -x "$TR" ] && "$TR" --version | grep -q 'multi-process: mpi'; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    mkdir mpi
    run mpirun_four timeout 120 mpirun --oversubscribe -np 4 "$TR" --steps 12 --log-every 4 \
        --layout targets=2,drafters=2 --trace mpi/run.sqlite
    [ $rc -eq 0 ] || fail "mpirun: exit $rc: $(tail -5 mpirun_four.err)"
    [ "$(ls mpi | grep -c '\.sqlite$')" -eq 4 ] || fail "mpirun wrote: $(ls mpi)"
    every_command mpi mpi
else
    echo "it_rank_order: no mpirun or MPI trainer: the multi-process run is skipped"
fi

echo "it_rank_order: $n_checks checks passed"
