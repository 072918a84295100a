#!/usr/bin/env bash
# CrossHair over kvreach.impl's deal contracts. Exit 0 iff no counterexample.
#
#   scripts/crosshair_check.sh            # ~2-3 min wall on 2 cores
#   PYTHON=... T_IMPL=10 T_HARNESS=30 scripts/crosshair_check.sh
#
# Two runs, in parallel (one per core):
#  1. the impl modules as they are (symbolic GroupConfig/RequestConfig,
#     unbounded ints): every deal-decorated function in kvreach.impl.mask,
#     kvreach.impl.rules, kvreach.impl.load and kvreach.impl.lookup (the offload lookup's twin:
#     its scan loop against its closed form, loads only HIT keys),
#     --per_condition_timeout=$T_IMPL CPU seconds each;
#  2. the plain-int harness tests/conformance/crosshair_targets.py (mask_real,
#     horizon_real, store_real: the same contracts over bounded ints, see the
#     MAX_* constants there), --per_condition_timeout=$T_HARNESS each.
# "No counterexample" is a bounded search, not a proof (see docs/conformance.md).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
T_IMPL=${T_IMPL:-10}
T_HARNESS=${T_HARNESS:-30}
RUN="$PY tests/conformance/run_crosshair.py --"
out=$(mktemp -d)
start=$(date +%s)

timeout 1800 $RUN check --analysis_kind=deal --per_condition_timeout="$T_IMPL" \
    kvreach.impl.mask kvreach.impl.rules kvreach.impl.load kvreach.impl.lookup >"$out/impl" 2>&1 &
p1=$!
timeout 1800 $RUN check --analysis_kind=deal --per_condition_timeout="$T_HARNESS" \
    crosshair_targets.mask_real crosshair_targets.horizon_real \
    crosshair_targets.store_real >"$out/harness" 2>&1 &
p2=$!
wait $p1; rc1=$?
wait $p2; rc2=$?

for f in impl harness; do
    echo "== crosshair check ($f): exit $([ $f = impl ] && echo $rc1 || echo $rc2)"
    cat "$out/$f"
done
rm -rf "$out"
echo "== wall time: $(( $(date +%s) - start ))s"
if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ]; then
    echo "FAIL: counterexample(s) or error (exit 1 = counterexample, 2 = error, 124 = timeout)"
    exit 1
fi
echo "OK: no counterexamples"
