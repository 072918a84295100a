#!/usr/bin/env bash
# Run the installed vLLM release's own offloading-connector scheduler tests
# (its sdist's tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py)
# twice on CPU: stock, and with kvreach's KvReachOffloadingConnectorScheduler
# substituted for OffloadingConnectorScheduler. Exit non-zero if any test that
# passes stock does not pass with kvreach (or if the substitution did not
# happen).
#
# Environment (all optional):
#   PYTHON            interpreter with vLLM (0.33.0 or 0.34.0) and kvreach installed
#   VLLM_VERSION      the release whose tests run (default: PYTHON's vLLM); its
#                     sdist is fetched once by `python -m kvreach.vllm_sdist`
#   VLLM_SRC_CACHE    where the sdist is cached and unpacked (default:
#                     ${XDG_CACHE_HOME:-~/.cache}/kvreach/vllm-sdist); never
#                     inside the repository
#   PYTEST_SELECT     extra pytest args, e.g. '-k "swa or sliding"'
#   KVREACH_RULE      the kvreach rule substituted (default vllm-0.33)
#   EXPECTED_REGRESSIONS  a file of test ids (one per line, '#' comments; a
#                     line "[X.Y.Z] id" counts only for that release) that
#                     pass stock and are expected not to pass with this rule
#                     (tests pinning the release's exact stored sets): then the
#                     run fails unless the regressions are exactly these
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
VLLM_VERSION="${VLLM_VERSION:-$("$PYTHON" -c 'from importlib.metadata import version; print(version("vllm"))')}"
TEST_FILE=tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py

SRC="$(cd "$REPO_ROOT" && "$PYTHON" -m kvreach.vllm_sdist "$VLLM_VERSION")"
[[ -f "$SRC/$TEST_FILE" ]] || { echo "no $TEST_FILE in $SRC" >&2; exit 1; }
echo "vLLM $VLLM_VERSION's own tests: $SRC/$TEST_FILE"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kvreach-vllm-own-tests.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# Fake offline HF cache: facebook/opt-125m's config.json only (no weights).
"$PYTHON" - "$WORK/hub" <<'PY'
import sys
from pathlib import Path
from transformers import OPTConfig
rev = "0" * 40
repo = Path(sys.argv[1]) / "models--facebook--opt-125m"
OPTConfig().save_pretrained(repo / "snapshots" / rev)
(repo / "refs").mkdir(parents=True, exist_ok=True)
(repo / "refs" / "main").write_text(rev)
PY

run() {  # $1 = stock|kvreach
    local mode="$1" sub=0
    [[ "$mode" == kvreach ]] && sub=1
    (
        cd "$SRC"
        HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_CACHE="$WORK/hub" \
        KVREACH_SUBSTITUTE=$sub KVREACH_INSTANCES_FILE="$WORK/$mode.instances" \
        PYTHONPATH="$REPO_ROOT/scripts:$SRC${PYTHONPATH:+:$PYTHONPATH}" \
        "$PYTHON" -m pytest -p kvreach_vllm_plugin -p no:cacheprovider \
            --confcutdir=tests/v1/kv_connector/unit/offloading_connector \
            -q -rfE --junitxml="$WORK/$mode.xml" ${PYTEST_SELECT:-} "$TEST_FILE" \
            > "$WORK/$mode.log" 2>&1 || true
    )
    tail -n 1 "$WORK/$mode.log" | sed "s/^/[$mode] /"
}

start=$(date +%s)
run stock
run kvreach
echo "elapsed: $(( $(date +%s) - start ))s"

"$PYTHON" - "$WORK" "${EXPECTED_REGRESSIONS:-}" "$VLLM_VERSION" <<'PY'
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

work = Path(sys.argv[1])

def outcomes(mode):
    res = {}
    for case in ET.parse(work / f"{mode}.xml").iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        res[name] = ("failed" if kinds & {"failure", "error"}
                     else "skipped" if "skipped" in kinds else "passed")
    return res

stock, kv = outcomes("stock"), outcomes("kvreach")
instances = int((work / "kvreach.instances").read_text() or 0)
count = lambda d, o: sum(v == o for v in d.values())
print(f"stock:   {count(stock, 'passed')} passed, {count(stock, 'failed')} failed, "
      f"{count(stock, 'skipped')} skipped")
print(f"kvreach: {count(kv, 'passed')} passed, {count(kv, 'failed')} failed, "
      f"{count(kv, 'skipped')} skipped; kvreach schedulers built: {instances}")
not_on_cpu = sorted(n for n, o in stock.items() if o != "passed")
if not_on_cpu:
    print("not passing stock on this machine (excluded from the comparison):")
    for n in not_on_cpu:
        print(f"  {stock[n]:7} {n}")
regressions = sorted(n for n, o in stock.items() if o == "passed" and kv.get(n) != "passed")
expected = set()
if sys.argv[2]:
    release = sys.argv[3]
    for ln in Path(sys.argv[2]).read_text().splitlines():
        ln = ln.split("#")[0].strip()
        m = re.fullmatch(r"\[(\d+\.\d+\.\d+)\]\s+(\S+)", ln)
        if m:
            if m.group(1) == release:
                expected.add(m.group(2))
        elif ln:
            expected.add(ln)
for n in regressions:
    print(f"{'expected, pins ' + sys.argv[3] if n in expected else 'REGRESSION'} {kv.get(n, 'missing')}: {n}")
missing = sorted(expected - set(regressions))
for n in missing:
    print(f"ERROR: expected not to pass with this rule, but it did (or is gone): {n}")
if instances == 0:
    print("ERROR: the kvreach scheduler was never instantiated (substitution failed)")
bad = set(regressions) - expected
sys.exit(1 if bad or missing or instances == 0 or not stock else 0)
PY
