#!/usr/bin/env bash
# it_mpi_flow.sh: item flows across the processes of an MPI run (CPU backend, tiny preset).
# `mpirun -np 2 build/trainer --layout targets=1,drafters=1 --trace run.sqlite`, once as is
# and once with rank 1's clock shifted by 5 s on purpose (ST_TEST_CLOCK_SHIFT_NS), then:
#  - the raw records (`analyze sql` on each rank file): the target rank marks every global
#    batch out to the drafter (id batch << 16 | 2) and the drafter rank marks each in;
#    mapped onto rank 0's clock as docs/trace-format.md says, every in lies at or after its
#    out, or before it by no more than the two ranks' clock uncertainties;
#  - `analyze flow` on the set (the directory): every trained batch's two handoffs pair
#    (loader -> target inside rank 0, target -> drafter across ranks), none left over
#    (in_before_out 0: a mapped in within the uncertainty pairs with residence 0), one item
#    per batch, and queue residences are >= 0;
#  - `analyze export --chrome` on the set: one flow arrow per handoff, the target -> drafter
#    ones from rank 0's process to rank 1's.
# Skipped when mpirun is missing or the trainer was built without MPI.
#
#   bash tests/it_mpi_flow.sh BUILD_DIR
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
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the records"; exit 0; }

it_enter_tmp

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
STEPS=20
for case in plain shifted; do
    mkdir "$case"
    shift_env=()
    [ "$case" = shifted ] && shift_env=(-x ST_TEST_CLOCK_SHIFT_NS=1:5000000000)
    run "train_$case" timeout 120 mpirun --oversubscribe -np 2 "${shift_env[@]}" "$TR" --steps $STEPS \
        --log-every 5 --seed 7 --layout targets=1,drafters=1 --trace "$case/run.sqlite"
    [ $rc -eq 0 ] || fail "$case: mpirun: exit $rc: $(tail -5 "train_$case.err")"
    for r in 0 1; do
        expect_ok "meta_${case}_$r" "$A" sql --format csv "$case/run.rank$r.sqlite" \
            "SELECT key, value FROM meta WHERE key LIKE 'clock_%'"
        expect_ok "flows_${case}_$r" "$A" sql --format csv "$case/run.rank$r.sqlite" \
            "SELECT t.name, f.ts_ns, f.dir, f.id FROM flows f JOIN threads t ON t.id = f.thread"
    done
    expect_ok "flow_$case" "$A" flow --format json "$case"
    expect_ok "export_$case" "$A" export "$case" --chrome "$case.json"
    CASE=$case STEPS=$STEPS py "$case: records, flow and export" <<'EOF'
import csv, json, os
case, steps = os.environ["CASE"], int(os.environ["STEPS"])
def meta(r):
    return {k: int(v) for k, v in csv.reader(open(f"meta_{case}_{r}.out")) if k != "key" and k != "clock"
            and v.lstrip("-").isdigit()}
def mapper(m):
    if "clock_offset_ns" not in m:
        return lambda t: t, 0
    s, o = m["clock_sync_ns"], m["clock_offset_ns"]
    u = m["clock_uncertainty_ns"]
    if "clock_sync_close_ns" in m and m["clock_sync_close_ns"] > s:
        s2, o2 = m["clock_sync_close_ns"], m["clock_offset_close_ns"]
        u = max(u, m["clock_uncertainty_close_ns"])
        def f(t):
            num = (t - s) * (o2 - o)
            q = abs(num) // (s2 - s) * (1 if num >= 0 else -1)  # C truncates toward zero
            return t + o + q
        return f, u
    return lambda t: t + o, u
recs, slack = {}, 0
for r in (0, 1):
    f, u = mapper(meta(r))
    slack += u
    for row in csv.DictReader(open(f"flows_{case}_{r}.out")):
        recs.setdefault(int(row["id"]), []).append((r, row["name"], row["dir"], f(int(row["ts_ns"]))))
if case == "shifted":
    assert meta(1)["clock_offset_ns"] < -4_000_000_000, meta(1)
batches = list(range(steps))
for g in batches:
    for hop, (rank_out, rank_in) in ((0, (0, 0)), (2, (0, 1))):
        rs = sorted(recs.get(g << 16 | hop, []), key=lambda x: x[2] != "out")
        assert [(x[0], x[2]) for x in rs] == [(rank_out, "out"), (rank_in, "in")], (g, hop, rs)
        assert rs[1][3] - rs[0][3] >= -slack, (g, hop, rs, slack)
assert len(recs) == 2 * steps, sorted(recs)
d = json.load(open(f"flow_{case}.out"))
fl = d["flow"][0]
assert fl["handoffs"] == 2 * steps and fl["items"] == steps, fl
for k in ("in_flight", "out_only", "in_only", "repeated", "in_before_out"):
    assert fl[k] == 0, fl
q = {(x["from"], x["to"]): x for x in d["queues"]}
assert q[("target", "drafter")]["n"] == steps and q[("loader", "target")]["n"] == steps, q
for x in d["queues"]:
    assert x["p50_ms"] >= 0 and x["mean_ms"] >= 0, x
assert d["latency"][0]["n"] == steps, d["latency"]
ev = json.load(open(f"{case}.json"))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
names = {}
for e in ev:
    if e.get("ph") == "M" and e.get("name") == "thread_name":
        names[(e["pid"], e["tid"])] = e["args"]["name"]
arrows = {}
for e in ev:
    if e.get("cat") == "flow" and e.get("name") == "item":
        arrows.setdefault(e["id"], {})[e["ph"]] = (e["pid"], names.get((e["pid"], e["tid"]), "?"))
assert len(arrows) == 2 * steps, len(arrows)
cross = [a for a in arrows.values() if a["s"][0] != a["f"][0]]
assert len(cross) == steps, arrows
for a in cross:
    assert a["s"][1].startswith("r0/target") and a["f"][1].startswith("r1/drafter"), a
EOF
done
echo "it_mpi_flow: $n_checks checks passed"
