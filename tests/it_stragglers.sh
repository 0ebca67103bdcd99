#!/usr/bin/env bash
# it_stragglers.sh: `analyze stragglers` on real and generated rank sets
# (docs/analyze.md, "stragglers").
#  - A rank set without any comm range (tracegen --ranks with the allreduce
#    stage recorded as `work`) is a normal case: stragglers prints its "No
#    collective" line, bottleneck and report run, all exit 0, and nothing
#    (no *.tmp*) is left behind. Run it against the sanitizer build
#    (bash tests/it_stragglers.sh build/san-address-undefined): the empty
#    set of collectives was undefined behaviour there (qsort of NULL).
#  - The trainer under mpirun, 2 target ranks and 2 drafter ranks, 60 steps:
#    exactly 60 allreduce instances, each with both drafter ranks, although
#    the targets (rank 0 among them) mark their steps ahead of the drafters.
#    Skipped without mpirun or an MPI trainer.
#
#   bash tests/it_stragglers.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
GEN="$BUILD/tests/tracegen"
TR="$BUILD/trainer"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
[ -x "$GEN" ] || { echo "SKIP: $GEN is not built (make tests)"; exit 0; }
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 is needed to edit the generated traces"; exit 0; }

it_enter_tmp

# ---- no comm range anywhere in the set ---------------------------------------------------
mkdir nocomm
"$GEN" --ranks nocomm 4 --steps 10
for f in nocomm/rank*.sqlite; do sqlite3 "$f" "UPDATE stages SET kind = 'work' WHERE kind = 'comm'"; done
expect_ok st "$A" stragglers nocomm
grep -qx 'No collective (comm stage) is shared by two ranks.' st.out || fail "stragglers: $(cat st.out)"
ok
expect_ok st_json "$A" stragglers --format json nocomm
python3 - <<'PY' || fail "stragglers json: $(cat st_json.out)"
import json
d = json.load(open("st_json.out"))
assert d["collectives"] == [] and d["instances"] == [], d
assert any(r["stage"] == "allreduce" and r["kind"] == "work" for r in d["stages"]), d["stages"]
PY
ok
expect_ok bn "$A" bottleneck nocomm
expect_ok rep "$A" report --html nocomm.html nocomm
grep -q '<section id="ranks">' nocomm.html || fail "report: no ranks section"
grep -q 'No collective (comm stage) is shared by two ranks.' nocomm.html || fail "report: no 'No collective' note"
ok
[ -z "$(ls -A | grep '\.tmp')" ] || fail "left behind: $(ls -A | grep '\.tmp')"
ok

# ---- the trainer's rank set: targets mark steps ahead of the drafters --------------------
if command -v mpirun >/dev/null && [ -x "$TR" ] && "$TR" --version | grep -q 'multi-process: mpi'; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    mkdir run
    run four timeout 120 mpirun --oversubscribe -np 4 "$TR" --layout targets=2,drafters=2 --steps 60 --trace run/
    [ $rc -eq 0 ] || fail "4 processes: exit $rc: $(tail -5 four.err)"
    expect_ok strag "$A" stragglers --format json run
    python3 - <<'PY' || fail "stragglers on the trainer's 4 ranks: $(head -c 600 strag.out)"
import json
d = json.load(open("strag.out"))
coll = [r for r in d["collectives"] if r["stage"] == "allreduce"]
assert len(coll) == 1 and coll[0]["instances"] == 60 and coll[0]["ranks"] == 2, coll
inst = [r for r in d["instances"] if r["stage"] == "allreduce"]
assert len(inst) == 60, len(inst)
assert [r["instance"] for r in inst] == list(range(60)), [r["instance"] for r in inst]
assert all(r["ranks"] == 2 and r["last_rank"] in (2, 3) for r in inst), inst
# the step of each instance on the drafters' own marks: the drafter's step k + 1
assert [r["step"] for r in inst] == list(range(1, 61)), [r["step"] for r in inst]
PY
    ok
    # bottleneck and report see the same instances
    expect_ok rep4 "$A" report --html four.html run
    python3 - <<'PY' || fail "report: stragglers table"
import re
h = open("four.html").read()
t = h[h.index('id="stragglers"'):]
t = t[:t.index('</table>')]
cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", t)]
assert cells[:3] == ["allreduce", "60", "2"], cells
PY
    ok
else
    echo "note: no mpirun or no MPI trainer: the trainer's rank set is not checked"
fi
echo "it_stragglers: $n_checks checks passed"
