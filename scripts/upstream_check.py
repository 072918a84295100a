#!/usr/bin/env python3
"""Check the upstream patch docs/upstream/lookup-window*.patch on its vLLM release.

    python scripts/upstream_check.py [--vllm 0.34.0|0.33.0] [--cases N] [--seed S]
                                     [--json FILE] [--skip tests,replays,diff,horizon,conform]

``--vllm`` picks the release (default 0.34.0, the current one; 0.33.0 stays
supported): its patch is docs/upstream/lookup-window-0.34.0.patch or
docs/upstream/lookup-window.patch (0.33.0). The script unpacks that release's
sdist into a temporary folder, applies the patch with ``patch -p1``, and on
the patched tree with vLLM's STOCK ``OffloadingConnector`` (no kvreach class
anywhere in these runs):

(a) vLLM's own offloading scheduler tests
    (tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py, the
    file scripts/run_vllm_own_tests.sh runs, with the same CPU shims:
    scripts/kvreach_vllm_plugin.py with ``KVREACH_SUBSTITUTE=0``, a fake
    offline HF cache) in four trees: stock vLLM with stock tests, patched vLLM
    with stock tests, patched vLLM with patched tests, stock vLLM with patched
    tests. Passes when (1) the stock tests that pass stock and fail on the
    patched vLLM are exactly scripts/vllm_own_tests_lookup_window.txt (the
    tests pinning the release's stored sets; the same ten cases in 0.33.0 and
    0.34.0), (2) every test passing stock passes on the patched tree with the
    patched tests, the patch's new tests too, and (3) stock vLLM with the
    patched tests fails exactly the cases of (1) and the new tests (the
    updated tests tell the two apart);
(b) every F6 counterexample of ``hit-preservation`` (world (a)) and
    ``hit-preservation-neighbours`` (world (b)) for ``vllm-0.33``, as
    ``kvreach counterexample ... --rule vllm-0.33 --replay-vllm`` decodes and
    replays them (kvreach's replay helpers, :func:`replay_helpers`; legacy
    hashes, the harness's default): on the patched tree the later request gets
    the dense hit; on the stock tree the same replay still loses it (so the
    replay can tell; on 0.33.0 with kvreach's predicted numbers, on 0.34.0
    those of ``vllm-0.33`` are shown beside vLLM's, kvreach's own 0.34.0 twin
    being another part of kvreach); in world (b) the SWA chunks the patched
    vLLM stored for each earlier request are ``lookup-window``'s keep decision
    (``kvreach.impl.rules.store_step``);
(c) a differential check of the patched ``_reachable_store_block_mask``
    against kvreach's ``lookup-window`` (``kvreach.impl.rules.store_step``),
    block by block on the 0.34.0 patch (vLLM's null-block filter reads the
    kept blocks), chunk by chunk on the 0.33.0 patch and the stock trees (a
    chunk is stored when any of its blocks is kept), over a
    seeded random loop of geometries and ranges (``--cases``, default 20000;
    on 0.34.0 with lookahead block hashes on or off, an EAGLE group under
    lookahead compared with the rule's plain SWA group), failing with the
    first differing input; the same loop on the stock tree must find a
    difference;
(d) 0.34.0 only: the hashed-end horizon case (full block 8, SWA block 2,
    window 4, a 14-token prompt, budget 100, lookahead L=1): the SWA chunks
    stock and patched vLLM store, and for every later request sharing a
    prefix of the prompt (1 .. 30 tokens, each divergence point) its hit with
    those stores, without chunk 4, and with dense stores;
(e) 0.34.0 only: ``kvreach conform --vllm-src`` on the patched tree names
    the record of kvreach's lookup-window rule on that release
    (``kvreach.conform.records``: "equals lookup-window", exit 0), and on the
    stock tree the release's own record ("equals 0.34.0"): both layers, the
    system layer laying each tree over the installed vLLM (which must be
    that release).

The patched tree is imported instead of the installed vllm by putting it
first on PYTHONPATH in a subprocess (and running from it), for every part;
each subprocess first checks that ``vllm`` resolves into its tree. Exit 0
when every verdict holds, 1 otherwise, 2 on bad input. Needs the release's
dependencies (the ``vllm`` extra at that release), ``patch``, and this
checkout.

The sdist: ``vllm-<release>.tar.gz`` under ``$VLLM_SRC_CACHE`` or
``${XDG_CACHE_HOME:-~/.cache}/kvreach/vllm-sdist``; if it is not there, it is
downloaded there once by ``kvreach.vllm_sdist`` (pip's own package finder:
``pip download --no-binary`` would build it; only the index pip is configured
with is asked, for that one release).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# release -> its patch; the default is the current release
PATCHES = {
    "0.34.0": REPO / "docs" / "upstream" / "lookup-window-0.34.0.patch",
    "0.33.0": REPO / "docs" / "upstream" / "lookup-window.patch",
}
VLLM_VERSION = "0.34.0"
PATCH = PATCHES[VLLM_VERSION]
# the tests pinning the release's stored sets (the same ten cases in both)
EXPECTED_STOCK_TESTS = REPO / "scripts" / "vllm_own_tests_lookup_window.txt"
TEST_FILE = "tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py"
SCHEDULER_FILE = "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
PATCHED_FILES = (SCHEDULER_FILE, TEST_FILE)


def archive_name(version: str) -> str:
    return f"vllm-{version}.tar.gz"


class BadInput(Exception):
    """One line for stderr, exit 2."""


# ---------------------------------------------------------------------------
# kvreach's replay helpers: the one place that says where they live
# ---------------------------------------------------------------------------


def replay_helpers():
    """kvreach's vLLM replay helpers (the package ``kvreach.vllm_harness``).
    -> a namespace with ``replay``, ``replay_neighbours``, ``reproduced``,
    ``STOCK``, ``write_offline_model``, ``hybrid_kv_cache_shim``."""
    from types import SimpleNamespace

    from kvreach.vllm_harness import cpu_shims, replay, runner

    return SimpleNamespace(
        replay=replay.replay, replay_neighbours=replay.replay_neighbours,
        reproduced=replay.reproduced, STOCK=runner.STOCK,
        write_offline_model=cpu_shims.write_offline_model,
        hybrid_kv_cache_shim=cpu_shims.hybrid_kv_cache_shim)


# ---------------------------------------------------------------------------
# The sdist and the trees
# ---------------------------------------------------------------------------


def sdist_archive(version: str = VLLM_VERSION, fetch: bool = True) -> Path:
    """The release's sdist archive, from kvreach's sdist cache
    (``kvreach.vllm_sdist``: ``$VLLM_SRC_CACHE``, else
    ``${XDG_CACHE_HOME:-~/.cache}/kvreach/vllm-sdist``), else downloaded there
    once with pip's own package finder (the project's one sdist fetch)."""
    from kvreach import vllm_sdist

    dest = vllm_sdist.cache_dir()
    name = archive_name(version)
    if (dest / name).is_file():
        return dest / name
    if not fetch:
        raise BadInput(f"sdist: no {name} in {dest}")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        return vllm_sdist.download(version, dest)
    except (OSError, FileNotFoundError) as e:
        raise BadInput(f"--vllm={version}: {e}") from None


def unpack(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    tree = dest / archive.name.removesuffix(".tar.gz")
    if not (tree / TEST_FILE).is_file():
        raise BadInput(f"{archive}: no {TEST_FILE} in the unpacked sdist")
    return tree


def apply_patch(tree: Path, patch: Path = PATCH, dry_run: bool = False) -> subprocess.CompletedProcess:
    """``patch -p1`` in ``tree`` (``--dry-run``: check only)."""
    cmd = ["patch", "-p1", "--batch", "--forward", "-i", str(patch)]
    if dry_run:
        cmd.append("--dry-run")
    return subprocess.run(cmd, cwd=tree, capture_output=True, text=True)


def derived_tree(base: Path, dest: Path, files_from: Path, files: tuple[str, ...]) -> Path:
    """A hard-linked copy of ``base`` with ``files`` copied (not linked) from
    ``files_from``: the mixed trees (one side patched, the other stock)."""
    shutil.copytree(base, dest, copy_function=os.link)
    for f in files:
        (dest / f).unlink()
        shutil.copy2(files_from / f, dest / f)
    return dest


def trees(work: Path, version: str = VLLM_VERSION) -> dict[str, Path]:
    """``{"stock": S/S, "patched": P/P, "patched-vllm": P/S, "stock-vllm": S/P}``
    (vLLM source / test file)."""
    stock = unpack(sdist_archive(version), work / "stock")
    patched = work / "patched"
    shutil.copytree(stock, patched)
    r = apply_patch(patched, PATCHES[version])
    if r.returncode != 0 or "offset" in r.stdout or "fuzz" in r.stdout:
        raise SystemExit(f"FAIL: the patch does not apply cleanly to the {version} sdist:\n"
                         f"{r.stdout}{r.stderr}")
    return {"stock": stock, "patched": patched,
            "patched-vllm": derived_tree(patched, work / "patched-vllm", stock, (TEST_FILE,)),
            "stock-vllm": derived_tree(stock, work / "stock-vllm", patched, (TEST_FILE,))}


def tree_env(tree: Path, hub: Path | None = None) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", KVREACH_SUBSTITUTE="0")
    env.pop("KVREACH_RULE", None)
    paths = [str(tree), str(REPO / "scripts")]
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])
    if hub is not None:
        env["HF_HUB_CACHE"] = str(hub)
    return env


CHECK_IMPORT = """
import sys, vllm
from vllm.distributed.kv_transfer.kv_connector.v1.offloading import scheduler
tree = sys.argv[1]
assert vllm.__file__.startswith(tree) and scheduler.__file__.startswith(tree), (vllm.__file__, tree)
print(int(any(hasattr(scheduler.OffloadingConnectorScheduler, m)
              for m in ("_lookup_window_chunk_mask", "_lookup_window_block_mask"))))
"""


def imports_tree(tree: Path) -> bool:
    """``vllm`` resolves into ``tree`` in a subprocess; -> whether it is patched."""
    r = subprocess.run([sys.executable, "-c", CHECK_IMPORT, str(tree)], cwd=tree,
                       env=tree_env(tree), capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: vllm does not import from {tree}:\n{r.stderr[-2000:]}")
    return r.stdout.strip().splitlines()[-1] == "1"


# ---------------------------------------------------------------------------
# (a) vLLM's own offloading scheduler tests
# ---------------------------------------------------------------------------


def fake_hub(dest: Path) -> Path:
    """Offline HF cache with facebook/opt-125m's config.json only (as
    run_vllm_own_tests.sh writes it)."""
    from transformers import OPTConfig

    rev = "0" * 40
    repo = dest / "models--facebook--opt-125m"
    OPTConfig().save_pretrained(repo / "snapshots" / rev)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(rev)
    return dest


def run_own_tests(tree: Path, hub: Path, xml: Path) -> dict[str, str]:
    """vLLM's test_scheduler.py in ``tree`` -> outcome per test id."""
    cmd = [sys.executable, "-m", "pytest", "-p", "kvreach_vllm_plugin", "-p", "no:cacheprovider",
           "--confcutdir=tests/v1/kv_connector/unit/offloading_connector", "-q", "-rfE",
           f"--junitxml={xml}", TEST_FILE]
    log = xml.with_suffix(".log")
    with open(log, "w") as out:
        subprocess.run(cmd, cwd=tree, env=tree_env(tree, hub), stdout=out, stderr=subprocess.STDOUT)
    if not xml.is_file():
        raise SystemExit(f"FAIL: pytest wrote no report in {tree}; log {log}:\n"
                         + log.read_text()[-3000:])
    res = {}
    for case in ET.parse(xml).iter("testcase"):
        kinds = {child.tag for child in case}
        res[f"{case.get('classname')}::{case.get('name')}"] = (
            "failed" if kinds & {"failure", "error"} else
            "skipped" if "skipped" in kinds else "passed")
    return res


def expected_stock_differences() -> set[str]:
    return {ln.split("#")[0].strip() for ln in EXPECTED_STOCK_TESTS.read_text().splitlines()} - {""}


def changed_tests(stock_file: Path, patched_file: Path) -> set[str]:
    """Test functions of the patched test file whose source differs from
    stock's or that stock lacks (by ``[Class::]function`` name)."""
    import ast

    def functions(path: Path) -> dict[str, str]:
        src = path.read_text()
        out = {}
        for node in ast.parse(src).body:
            items = [(node.name + "::", n) for n in node.body] if isinstance(node, ast.ClassDef) \
                else [("", node)]
            for prefix, n in items:
                if isinstance(n, ast.FunctionDef) and n.name.startswith("test_"):
                    out[prefix + n.name] = ast.get_source_segment(src, n) + "".join(
                        ast.get_source_segment(src, d) or "" for d in n.decorator_list)
        return out

    s, p = functions(stock_file), functions(patched_file)
    return {name for name, body in p.items() if s.get(name) != body}


def test_name(test_id: str) -> str:
    """``tests.v1....test_scheduler.TestEagle::test_x[p]`` -> ``TestEagle::test_x``."""
    mod, _, func = test_id.partition("::")
    func = func.split("[")[0]
    cls = mod.rsplit(".", 1)[-1]
    return f"{cls}::{func}" if cls.startswith("Test") else func


def check_own_tests(t: dict[str, Path], work: Path, log) -> dict:
    hub = fake_hub(work / "hub")
    for name, tree in t.items():
        patched = imports_tree(tree)
        assert patched == name.startswith("patched"), (name, patched)
    t0 = time.perf_counter()
    out = {name: run_own_tests(tree, hub, work / f"{name}.xml") for name, tree in t.items()}
    secs = time.perf_counter() - t0
    count = lambda d, o: sum(v == o for v in d.values())  # noqa: E731
    for name in t:
        log(f"  [{name}] {count(out[name], 'passed')} passed, {count(out[name], 'failed')} failed, "
            f"{count(out[name], 'skipped')} skipped")
    log(f"  four runs: {secs:.0f} s")
    stock = out["stock"]
    passing = {n for n, o in stock.items() if o == "passed"}
    not_on_cpu = sorted(n for n, o in stock.items() if o != "passed")
    log(f"  not passing stock on this machine (excluded): {len(not_on_cpu)}")
    changed = changed_tests(t["stock"] / TEST_FILE, t["patched"] / TEST_FILE)
    ok = True
    # (1) patched vLLM, stock tests: only the tests pinning the release's stored sets differ
    differ = {n for n in passing if out["patched-vllm"].get(n) != "passed"}
    expected = expected_stock_differences()
    for n in sorted(differ | expected):
        tag = "expected, pins the release" if n in differ and n in expected else (
            "UNEXPECTED" if n in differ else "EXPECTED BUT PASSED")
        log(f"  patched vLLM, stock tests: {tag}: {n}")
    ok &= differ == expected
    # ... and every one of them is a test the patch updates
    ok &= {test_name(n) for n in differ} <= changed
    # (2) patched tree: everything passing stock passes, and the new tests pass
    new = sorted(n for n in out["patched"] if n not in stock)
    bad = sorted(n for n in passing | set(new) if out["patched"].get(n) != "passed")
    for n in bad:
        log(f"  patched tree: NOT PASSING: {n}")
    ok &= not bad and bool(new)
    # (3) stock vLLM, patched tests: exactly the cases of (1) and the new tests fail
    fail_on_stock = {n for n, o in out["stock-vllm"].items() if o != "passed"} - set(not_on_cpu)
    updated = {n for n in out["patched"] if test_name(n) in changed}
    want_fail = differ | set(new)
    for n in sorted(fail_on_stock - want_fail):
        log(f"  stock vLLM, patched tests: FAILS, NOT AN UPDATED CASE: {n}")
    for n in sorted(want_fail - fail_on_stock):
        log(f"  stock vLLM, patched tests: PASSES ON STOCK (cannot tell): {n}")
    ok &= fail_on_stock == want_fail and fail_on_stock <= updated
    log(f"  changed test functions: {len(changed)} ({', '.join(sorted(changed))}); "
        f"their cases: {len(updated)}, new: {len(new)}; stock vLLM fails {len(fail_on_stock)} "
        f"of the patched tests")
    return {"ok": bool(ok), "seconds": round(secs, 1),
            "counts": {name: {o: count(out[name], o) for o in ("passed", "failed", "skipped")}
                       for name in t},
            "not_passing_stock": not_on_cpu, "differ_stock_tests": sorted(differ),
            "new_tests": new, "updated_cases": sorted(updated),
            "fail_on_stock_vllm": sorted(fail_on_stock)}


# ---------------------------------------------------------------------------
# (b) the F6 counterexamples, replayed (run inside a tree's subprocess)
# ---------------------------------------------------------------------------

WORLD_A = ("hit-preservation", "vllm-0.33")
WORLD_B = ("hit-preservation-neighbours", "vllm-0.33")


def f6_counterexamples() -> list[tuple[str, str, dict]]:
    """Every geometry's counterexample of both obligations for vllm-0.33, as
    kvreach's runner decodes it (what ``kvreach counterexample ...
    --replay-vllm`` and tests/vllm replay). -> (obligation, geometry, cex)."""
    from kvreach.proofs import search
    from kvreach.proofs.geometries import GEOMETRIES
    from kvreach.proofs.neighbours import neighbour_geometries

    out = []
    for g in GEOMETRIES:
        _, cex = search.find_counterexample(WORLD_A[0], WORLD_A[1], "any", geometry=g)
        if cex is not None:
            out.append((WORLD_A[0], g.name, cex))
    for g in neighbour_geometries():
        cex = search.static_counterexample(WORLD_B[0], WORLD_B[1], "any", g)
        if cex is not None:
            out.append((WORLD_B[0], g.name, cex))
    return out


def lookup_window_one_shot(cex: dict) -> list[list[int]]:
    """``lookup-window``'s stored SWA chunks per earlier request of a world
    (b) counterexample (its keep decision at the request's final horizon)."""
    from kvreach.impl.rules import store_step
    from kvreach.params import GroupConfig, RequestConfig

    g = GroupConfig(**cex["config"]["group"])
    req = cex["config"]["request"]
    return [sorted(store_step("lookup-window", g, RequestConfig(**(req | {
        "prompt_tokens": q["prompt_tokens"]})), 0, q["final_horizon_chunks"], True).chunks)
        for q in cex["requests"]]


def replay_all(patched: bool, version: str) -> dict:
    """In a tree's subprocess: every F6 counterexample replayed with the
    stock connector. -> one row per counterexample. On stock 0.33.0 a row
    holds when vLLM's numbers are kvreach's ``vllm-0.33`` prediction; on stock
    0.34.0 when the hit is still lost (kvreach's ``vllm-0.33`` numbers are
    shown beside it)."""
    import contextlib
    from unittest import mock

    from kvreach.vllm_harness import replay as replay_module

    h = replay_helpers()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = []
    with contextlib.ExitStack() as stack:
        if version != "0.33.0":
            # kvreach's lookup twin models 0.33.0's lookup (0.34.0 moved the
            # SWA "- 1" before the caps); its per-lookup cross-check waits for
            # kvreach's 0.34.0 twin. The hits below are vLLM's own either way.
            stack.enter_context(mock.patch.object(replay_module, "check",
                                                  lambda *a, **k: None))
        rows = _replay_rows(h, patched, version)
    return {"rows": rows, "twin_checked": version == "0.33.0"}


def _replay_rows(h, patched: bool, version: str) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as d, h.hybrid_kv_cache_shim():
        model_dir = h.write_offline_model(d)
        for obligation, geometry, cex in f6_counterexamples():
            row = {"obligation": obligation, "geometry": geometry}
            if obligation == WORLD_A[0]:
                rule_obs, dense_obs = h.replay(model_dir, cex, h.STOCK)
                row |= {"hit": rule_obs.hit_tokens, "dense": dense_obs.hit_tokens,
                        "kvreach_vllm_033": [cex["later_lookup"]["hit_tokens"],
                                             cex["later_lookup"]["dense_hit_tokens"]]}
            else:
                got = h.replay_neighbours(model_dir, cex, WORLD_B[1])
                v = got["vllm"]
                row |= {"hit": v["hit_tokens"], "dense": v["dense_hit_tokens"],
                        "kvreach_vllm_033": [got["kvreach"]["hit_tokens"],
                                             got["kvreach"]["dense_hit_tokens"]],
                        "stored_swa_chunks": v["stored_swa_chunks"],
                        "stored_is_lookup_window": v["stored_swa_chunks"]
                        == lookup_window_one_shot(cex),
                        "stored_is_vllm_033": v["stored_swa_chunks"]
                        == got["kvreach"]["stored_swa_chunks"]}
            if patched:
                row["ok"] = row["hit"] == row["dense"] and (row["dense"] or 0) > 0 and \
                    row.get("stored_is_lookup_window", True)
            elif version == "0.33.0":  # stock vLLM must still show kvreach's counterexample
                row["ok"] = [row["hit"], row["dense"]] == row["kvreach_vllm_033"] and \
                    (row["hit"] or 0) < (row["dense"] or 0) and row.get("stored_is_vllm_033", True)
            else:  # stock 0.34.0 must still lose the hit
                row["ok"] = (row["hit"] or 0) < (row["dense"] or 0)
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------
# (c) differential: patched _reachable_store_block_mask vs lookup-window
# ---------------------------------------------------------------------------


def random_case(rng: random.Random, lookahead_hashes: bool) -> dict:
    """``lookahead_hashes``: the release has them (0.34.0): drawn, last."""
    B = rng.randint(1, 8)
    dcp = rng.choice((1, 1, 1, 2))
    bpc = rng.choice((1, 1, 2, 3, 4))
    C = B * dcp * bpc
    r = rng.random()
    if r < 0.1:
        A = None
    elif r < 0.2:
        A = rng.randint(1, 12 * C)  # often not a whole number of chunks
    else:
        A = C * rng.randint(1, 10)
    R = None
    if A is not None and rng.random() < 0.4:
        R = rng.choice((0, A * rng.randint(1, 4), C * rng.randint(1, 20)))
    prompt = rng.randint(1, 40 * C + 50)
    start = rng.randint(0, 50)
    case = {"block_size": B, "dcp_world_size": dcp, "blocks_per_chunk": bpc,
            "window": rng.randint(1, 12 * C + 4),
            "extra_retained_tokens": rng.choice((0, 0, 0, rng.randint(1, 2 * C + 3))),
            "eagle": rng.random() < 0.3, "alignment_tokens": A, "retention_interval": R,
            "prompt_tokens": prompt,
            "max_offload_tokens": rng.choice((None, None, rng.randint(0, prompt + 10))),
            "offload_prompt_only": rng.random() < 0.8,
            "start_chunk": start, "end_chunk": start + rng.randint(0, 120)}
    case["lookahead"] = lookahead_hashes and rng.random() < 0.5
    return case


def kvreach_mask(case: dict) -> list[bool]:
    """``lookup-window``'s block mask for the case's range (all True: dense)."""
    from kvreach.impl.rules import store_step
    from kvreach.params import GroupConfig, RequestConfig

    # under lookahead block hashes (0.34.0) an EAGLE group is a plain SWA group
    eagle = case["eagle"] and not case.get("lookahead", False)
    g = GroupConfig(case["block_size"], case["window"], case["alignment_tokens"],
                    case["blocks_per_chunk"], case["dcp_world_size"], eagle,
                    case["retention_interval"], case["extra_retained_tokens"])
    req = RequestConfig(case["prompt_tokens"], case["max_offload_tokens"],
                        case["offload_prompt_only"])
    w = store_step("lookup-window", g, req, case["start_chunk"], case["end_chunk"], False)
    n = (case["end_chunk"] - case["start_chunk"]) * case["blocks_per_chunk"]
    return [True] * n if w.block_mask is None else list(w.block_mask)


def chunk_keep(mask: list[bool], blocks_per_chunk: int) -> list[bool]:
    """A chunk is stored when any of its blocks is kept (``_build_store_jobs``)."""
    return [any(mask[i:i + blocks_per_chunk]) for i in range(0, len(mask), blocks_per_chunk)]


def vllm_mask(case: dict, patched: bool) -> list[bool]:
    """The tree's ``OffloadingConnectorScheduler._reachable_store_block_mask``
    for the case (a scheduler object with only its ``config``; the SWA group
    as ``SchedulerOffloadConfig.from_spec`` builds it). Stock 0.33.0 is
    called as ``_build_store_jobs`` calls it for a running request in
    prefill (prompt horizon, replay boundary)."""
    import torch
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
        get_sliding_window_size_in_chunks,
    )
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        GroupOffloadConfig, OffloadingConnectorScheduler, SchedulerOffloadConfig,
    )
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    spec = SlidingWindowSpec(block_size=case["block_size"], num_kv_heads=1, head_size=1,
                             dtype=torch.float32, sliding_window=case["window"],
                             extra_retained_tokens=case["extra_retained_tokens"])
    bpc = case["blocks_per_chunk"]
    tokens_per_block = case["block_size"] * case["dcp_world_size"]
    gc = GroupOffloadConfig(
        group_idx=1, tokens_per_block=tokens_per_block,
        tokens_per_chunk=tokens_per_block * bpc, hashes_per_chunk=bpc,
        kv_event_group_spec=None,
        sliding_window_size_in_chunks=get_sliding_window_size_in_chunks(
            spec, tokens_per_block * bpc),
        kv_cache_spec=spec, manager_cls=SlidingWindowManager,
        is_eagle_group=case["eagle"])
    sched = object.__new__(OffloadingConnectorScheduler)
    sched.use_lookahead_block_hashes = case["lookahead"]  # read by 0.34.0 only
    sched.config = SchedulerOffloadConfig(
        kv_group_configs=(gc,), blocks_per_chunk=bpc, tokens_per_hash=case["block_size"],
        num_workers=1, offload_prompt_only=case["offload_prompt_only"],
        supports_partial_tail=False, alignment_tokens=case["alignment_tokens"],
        retention_interval=case["retention_interval"], dcp_world_size=case["dcp_world_size"])
    P = case["prompt_tokens"]
    prompt_offloadable = min(P, case["max_offload_tokens"]) \
        if case["max_offload_tokens"] is not None else P
    retention = case["retention_interval"]
    kwargs = dict(group_config=gc, start_chunk_idx=case["start_chunk"],
                  end_chunk_idx=case["end_chunk"],
                  reachable_boundaries=(P - 1,) if retention is not None else ())
    if patched and hasattr(sched, "_lookup_window_block_mask"):  # 0.34.0's patch
        mask = sched._reachable_store_block_mask(
            final_segment_end_chunk_idx=None,
            lookup_boundaries=(prompt_offloadable,) if retention is not None else (), **kwargs)
    elif patched:
        mask = sched._reachable_store_block_mask(
            final_segment_end_chunk_idx=None, prompt_offloadable_tokens=prompt_offloadable,
            **kwargs)
    else:
        horizon = None if retention is not None or case["eagle"] else \
            prompt_offloadable // gc.tokens_per_chunk
        mask = sched._reachable_store_block_mask(final_segment_end_chunk_idx=horizon, **kwargs)
    n = (case["end_chunk"] - case["start_chunk"]) * bpc
    return [True] * n if mask is None else list(mask)


def differential(cases: int, seed: int, patched: bool, version: str) -> dict:
    """In a tree's subprocess: ``cases`` seeded random inputs; the first
    whose keep decisions differ, if any: block by block for the 0.34.0 patch,
    chunk by chunk otherwise. Lookahead block hashes only on
    0.34.0 (0.33.0 has none)."""
    from kvreach.params import ParamError

    rng = random.Random(seed)
    sparse = refused = 0
    for i in range(cases):
        case = random_case(rng, lookahead_hashes=version != "0.33.0")
        # the 0.34.0 patch block by block (vLLM's null-block filter reads the
        # kept blocks); the stock tree and the 0.33.0 patch by chunk
        per = (lambda m: m) if patched and version != "0.33.0" else \
            (lambda m: chunk_keep(m, case["blocks_per_chunk"]))
        try:
            want = per(kvreach_mask(case))
        except ParamError:  # a configuration vLLM refuses too (kvreach.params)
            refused += 1
            continue
        got = per(vllm_mask(case, patched))
        if got != want:
            return {"cases": i + 1, "compared": i + 1 - refused, "sparse": sparse,
                    "first_difference": case, "vllm": "".join(".#"[b] for b in got),
                    "lookup_window": "".join(".#"[b] for b in want)}
        sparse += not all(want)
    return {"cases": cases, "compared": cases - refused, "sparse": sparse,
            "first_difference": None}



# ---------------------------------------------------------------------------
# (d) 0.34.0's hashed-end horizon case (run inside a tree's subprocess)
# ---------------------------------------------------------------------------

HORIZON_CASE = {"full_block": 8, "swa_block": 2, "window": 4, "prompt": 14, "budget": 100,
                "hash_lookahead_tokens": 1, "chunk": 4}
HORIZON_LATER_MAX = 30  # later requests of 1 .. 30 tokens (the prompt, two segments, more)


def horizon_case() -> dict:
    """In a tree's subprocess: the earlier 14-token request run to completion
    with the stock connector and lookahead L=1; then every later request of
    ``n`` tokens (1 .. HORIZON_LATER_MAX) sharing its first ``k`` tokens with
    the prompt (every ``k`` from 1 to ``min(n, 14)``): its offload hit with
    the stores, with the stores less SWA chunk ``HORIZON_CASE["chunk"]``, and
    with every chunk the earlier request could offload (dense)."""
    from vllm.v1.kv_offload.base import LookupResult

    from kvreach.vllm_harness import cpu_shims
    from kvreach.vllm_harness.lookups import LookupRecorder, later_lookups, later_tokens
    from kvreach.vllm_harness.runner import STOCK, SchedulerRun, Setup, drive, full, \
        prompt_token_ids, swa

    c = HORIZON_CASE
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as d, cpu_shims.hybrid_kv_cache_shim():
        model_dir = cpu_shims.write_offline_model(d)
        setup = Setup((full(c["full_block"]), swa(c["swa_block"], c["window"])),
                      budget=c["budget"], hash_lookahead_tokens=c["hash_lookahead_tokens"])
        run = SchedulerRun(setup, STOCK, model_dir)
        assert run.offload.use_lookahead_block_hashes
        rec = LookupRecorder(run)
        stored_prompt = prompt_token_ids(c["prompt"], seed=31)
        drive(run, "stored", c["prompt"], token_ids=stored_prompt)
        swa_stored = run.stored(1)
        keys = set(rec.stored_keys.get("stored", []))
        # every key of the earlier request's first lookup by (group, chunk)
        key_of = {pos: k for k, pos in rec.prompt_keys["stored"].items()}
        rows = []
        for n in range(1, HORIZON_LATER_MAX + 1):
            for shared in range(1, min(n, c["prompt"]) + 1):
                tokens = later_tokens(stored_prompt, n, shared)
                hits = {}
                for content in ("stored", "without", "dense"):
                    if content == "stored":
                        answer = keys
                    elif content == "without":
                        answer = keys - {key_of.get((1, c["chunk"]))}
                    else:
                        answer = set(key_of.values()) | keys
                    rec.answers = {k: LookupResult.HIT for k in answer}
                    assert run.scheduler.reset_prefix_cache()
                    hits[content] = later_lookups(rec, tokens)[-1].hit_tokens
                rows.append({"n": n, "shared": shared, **hits})
    return {"swa_stored": swa_stored, "rows": rows,
            "num_keys": len(key_of), "chunk_key_known": (1, c["chunk"]) in key_of}

# ---------------------------------------------------------------------------
# (e) kvreach conform on the patched and the stock tree
# ---------------------------------------------------------------------------

# release -> the record kvreach conform names on its patched tree
CONFORM_RECORD = {"0.34.0": "lookup-window"}


def conform_tree(tree: Path) -> dict:
    """``kvreach conform --vllm-src tree`` (both layers, the CLI's defaults)
    -> its exit code and last line."""
    env = dict(os.environ)
    env.pop("KVREACH_RULE", None)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "kvreach.cli", "conform", "--vllm-src", str(tree)],
                       capture_output=True, text=True, cwd=REPO, env=env)
    lines = r.stdout.strip().splitlines() or [r.stderr.strip()[-300:]]
    system = [ln.strip() for ln in lines if ln.startswith("system layer:")]
    return {"exit": r.returncode, "last": lines[-1], "system": system[:1],
            "wall_s": round(time.monotonic() - t0, 1)}


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

PARTS = ("tests", "replays", "diff", "horizon", "conform")


def in_tree(tree: Path, mode: str, *args: str) -> dict:
    """Run this script's ``mode`` in a subprocess with ``tree`` first on
    PYTHONPATH (and as the working directory) -> its JSON answer."""
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), f"--in-tree={mode}",
                        *args], cwd=tree, env=tree_env(tree), capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {mode} in {tree}:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", default=VLLM_VERSION,
                    help=f"the vLLM release: {' or '.join(PATCHES)} (default {VLLM_VERSION})")
    ap.add_argument("--cases", default="20000", help="differential cases (default 20000)")
    ap.add_argument("--seed", default="0", help="differential seed (default 0)")
    ap.add_argument("--json", default=None, help="also write the verdicts to FILE")
    ap.add_argument("--skip", default="",
                    help="comma-separated parts to skip: " + ",".join(PARTS))
    ap.add_argument("--in-tree", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--patched", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        cases, seed = int(a.cases), int(a.seed)
        if cases < 1:
            raise ValueError
    except ValueError:
        print(f"error: --cases={a.cases} --seed={a.seed}: expected integers, cases >= 1",
              file=sys.stderr)
        return 2
    if a.vllm not in PATCHES:
        print(f"error: --vllm={a.vllm}: expected one of {', '.join(PATCHES)}", file=sys.stderr)
        return 2
    skip = {s for s in a.skip.split(",") if s}
    if skip - set(PARTS):
        print(f"error: --skip={a.skip}: expected a subset of {','.join(PARTS)}",
              file=sys.stderr)
        return 2
    if a.in_tree == "replays":
        print(json.dumps(replay_all(a.patched, a.vllm), default=str))
        return 0
    if a.in_tree == "diff":
        print(json.dumps(differential(cases, seed, a.patched, a.vllm), default=str))
        return 0
    if a.in_tree == "horizon":
        print(json.dumps(horizon_case(), default=str))
        return 0
    if a.json is not None and not Path(a.json).parent.is_dir():
        print(f"error: --json={a.json}: expected a file in an existing directory", file=sys.stderr)
        return 2
    try:
        return run(a.vllm, cases, seed, a.json, skip)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def run(version: str, cases: int, seed: int, json_out: str | None, skip: set[str]) -> int:
    log = lambda s: print(s, flush=True)  # noqa: E731
    verdicts: dict = {}
    with tempfile.TemporaryDirectory(prefix="kvreach-upstream-") as d:
        work = Path(d)
        t = trees(work, version)
        v = [f"--vllm={version}"]
        log(f"vLLM {version}: patch applies cleanly: {PATCHES[version].relative_to(REPO)} -> "
            f"{', '.join(PATCHED_FILES)} (sdist {sdist_archive(version)})")
        log("imports: each part runs in a subprocess with its tree first on PYTHONPATH")
        if "tests" not in skip:
            log(f"(a) vLLM's own {TEST_FILE}, stock OffloadingConnector:")
            verdicts["own_tests"] = check_own_tests(t, work, log)
        if "replays" not in skip:
            log("(b) F6 counterexamples replayed with the stock connector:")
            for name, patched in (("patched", True), ("stock", False)):
                got = in_tree(t[name], "replays", *v, *(["--patched"] if patched else []))
                rows = got["rows"]
                if not got["twin_checked"]:
                    log(f"  [{name}] per-lookup cross-check with kvreach's lookup twin: off "
                        f"(the twin models 0.33.0's lookup); hits are vLLM {version}'s own")
                for r in rows:
                    extra = "" if "stored_is_lookup_window" not in r else (
                        f"; stored = lookup-window's: {r['stored_is_lookup_window']}"
                        if patched else f"; stored = vllm-0.33's: {r['stored_is_vllm_033']}")
                    log(f"  [{name}] {r['obligation']} / {r['geometry']}: hit {r['hit']}, "
                        f"dense {r['dense']} (kvreach, vllm-0.33: {r['kvreach_vllm_033'][0]} vs "
                        f"{r['kvreach_vllm_033'][1]}){extra}: "
                        + (("dense hit" if patched else "loss reproduced") if r["ok"] else "FAIL"))
                verdicts[f"replays_{name}"] = {"ok": bool(rows) and all(r["ok"] for r in rows),
                                               "rows": rows}
        if "diff" not in skip:
            log(f"(c) differential, {cases} seeded cases (seed {seed}):")
            for name, patched in (("patched", True), ("stock", False)):
                res = in_tree(t[name], "diff", *v, f"--cases={cases}", f"--seed={seed}",
                              *(["--patched"] if patched else []))
                found = res["first_difference"]
                if patched:
                    res["ok"] = found is None
                    log(f"  [patched] {res['cases']} cases, {res['compared']} compared "
                        f"(the rest refused by kvreach.params), {res['sparse']} sparse: "
                        + ("equal to lookup-window" if found is None else
                           f"FIRST DIFFERENCE {found}\n    vllm          {res['vllm']}\n"
                           f"    lookup-window {res['lookup_window']}"))
                else:
                    res["ok"] = found is not None
                    log(f"  [stock] first difference from lookup-window at case {res['cases']}"
                        if found else "  [stock] NO DIFFERENCE FOUND (the check cannot tell)")
                    if found:
                        log(f"    {found}\n    vllm-{version}  {res['vllm']}\n"
                            f"    lookup-window {res['lookup_window']}")
                verdicts[f"diff_{name}"] = res
        if "horizon" not in skip and version != "0.33.0":
            c = HORIZON_CASE
            log(f"(d) hashed-end horizon: full block {c['full_block']}, SWA block "
                f"{c['swa_block']}, window {c['window']}, prompt {c['prompt']}, budget "
                f"{c['budget']}, lookahead L={c['hash_lookahead_tokens']}; later requests of "
                f"1 .. {HORIZON_LATER_MAX} tokens, every shared prefix:")
            res = {name: in_tree(t[name], "horizon", *v) for name in ("stock", "patched")}
            k = c["chunk"]
            for name, r in res.items():
                rows = r["rows"]
                needs_k = [x for x in rows if x["without"] != x["stored"]]
                lost = [x for x in rows if x["stored"] != x["dense"]]
                log(f"  [{name}] SWA chunks stored {r['swa_stored']}; {len(rows)} later "
                    f"requests: {len(needs_k)} need chunk {k}, {len(lost)} below the dense hit"
                    + (f" (first: {lost[0]})" if lost else ""))
                r["needs_chunk"] = len(needs_k)
                r["lost"] = len(lost)
            # stock stores chunk k that no later request loads; the patch stores
            # neither it nor loses a hit stock keeps
            stock_hits = {(x["n"], x["shared"]): x["stored"] for x in res["stock"]["rows"]}
            worse = [x for x in res["patched"]["rows"]
                     if x["stored"] < stock_hits[(x["n"], x["shared"])]]
            ok = (res["stock"]["chunk_key_known"] and k in res["stock"]["swa_stored"]
                  and res["stock"]["needs_chunk"] == 0
                  and k not in res["patched"]["swa_stored"] and not worse
                  and res["patched"]["lost"] == 0)
            log(f"  stock stores chunk {k}, no later request needs it; patched does not store "
                f"it, no later request below its dense hit or below stock's: "
                + ("yes" if ok else f"NO ({len(worse)} below stock)"))
            verdicts["horizon"] = {"ok": bool(ok), **res}
        if "conform" not in skip and version in CONFORM_RECORD:
            log("(e) kvreach conform --vllm-src (function and system layers, the tree laid over "
                "the installed vLLM):")
            res = {}
            for name, want in (("patched", CONFORM_RECORD[version]), ("stock", version)):
                got = conform_tree(t[name])
                got["want"] = f"equals {want}"
                got["ok"] = got["exit"] == 0 and got["last"] == got["want"]
                log(f"  [{name}] exit {got['exit']}, {got['wall_s']} s: {got['last']}"
                    + ("" if got["ok"] else f"  FAIL (expected '{got['want']}', exit 0)"))
                res[name] = got
            verdicts["conform"] = {"ok": all(g["ok"] for g in res.values()), **res}
    ok = all(v["ok"] for v in verdicts.values())
    log("verdict: " + ("PASS: " if ok else "FAIL: ") + ", ".join(
        f"{k} {'ok' if v['ok'] else 'FAIL'}" for k, v in verdicts.items()))
    if json_out is not None:
        Path(json_out).write_text(json.dumps({"ok": ok, **verdicts}, indent=2, default=str) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
