#!/usr/bin/env bash
# it_samples.sh: the sample traces of samples/traces/ (real H200 runs, recorded by
# samples/traces/record.sh) read back as their README says: each is complete, `analyze
# intervals` prints exactly the profile lines the trainer printed while recording (the
# .log beside it), and `bottleneck` on these co-located runs names the shared GPU 0 with
# the target as its largest user, from the CUPTI records; every other command the README
# lists runs cleanly.
#
#   bash tests/it_samples.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/preamble.sh" # BUILD, ROOT, it_enter_tmp
A="$BUILD/analyze"
S="$ROOT/samples/traces"
[ -x "$A" ] || { echo "SKIP: $A is not built"; exit 0; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check JSON"; exit 0; }
ls "$S"/*.sqlite >/dev/null 2>&1 || { echo "SKIP: no sample traces in $S"; exit 0; }

it_enter_tmp

n_traces=0
for trace in "$S"/*.sqlite; do
    name=$(basename "$trace" .sqlite)
    log="$S/$name.log"
    [ -f "$log" ] || fail "$name: no $name.log beside the trace"
    n_traces=$((n_traces + 1))

    expect_ok "$name.info" "$A" info "$trace"
    grep -Eq '^ +status: complete$' "$name.info.out" || fail "$name: status is not complete"
    grep -Eq '^  gpu activity: [1-9][0-9]* records on devices? [0-9, ]+ \(.*\), [1-9][0-9]* API calls; CUPTI dropped 0$' \
        "$name.info.out" || fail "$name: info's GPU line: $(grep 'gpu activity' "$name.info.out")"

    # the profile lines of the log, as `intervals` prints them
    awk '/^profile /{p=1} /^profile /||(p && /^  /){print; next} {p=0}' "$log" >"$name.profile"
    [ -s "$name.profile" ] || fail "$name: no profile lines in $name.log"
    expect_ok "$name.intervals" "$A" intervals "$trace"
    diff -u "$name.profile" "$name.intervals.out" >"$name.diff" ||
        fail "$name: intervals differ from the profile lines of the log: $(head -20 "$name.diff")"
    ok

    expect_ok "$name.bottleneck" "$A" bottleneck --format json "$trace"
    NAME=$name py "$name: bottleneck from GPU activity" <<'EOF'
import json, os
name = os.environ["NAME"]
d = json.load(open(name + ".bottleneck.out"))
v = d["verdict"][0]
# target and drafter share the GPUs: the device is the limit, the target its largest user
assert v["bottleneck_device"] == 0 and v["bottleneck"] == "target" and v["stage"] == "forward", v
assert 85 < v["device_busy_pct"] <= 100, v
dev = {(r["device"], r["role"]): r["busy_pct"] for r in d["devices"]}
assert dev[(0, "target")] > dev[(0, "drafter")] > 0, dev
roles = {r["role"]: r for r in d["roles"]}
# the host view alone would not say so: the drafter syncs more than half its time
assert roles["drafter"]["sync_pct"] > 50 and roles["target"]["gpu_pct"] > roles["target"]["host_pct"], roles
EOF
    expect_ok "$name.gpu" "$A" gpu "$trace"
    expect_ok "$name.summary" "$A" summary "$trace"
    expect_ok "$name.report" "$A" report "$trace" --html "$name.html"
    grep -q 'Bottleneck: GPU 0, busy ' "$name.html" || fail "$name: the report's verdict does not name GPU 0"
    ok
done
expect_ok diff "$A" diff "$S/h200-sync.sqlite" "$S/h200-async.sqlite"
echo "it_samples: $n_checks checks passed ($n_traces traces)"
