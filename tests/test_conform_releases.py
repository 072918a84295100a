"""``kvreach conform`` against each release's own wheel (slow: the wheels,
about 1.9 GB, are downloaded once into $KVREACH_CACHE or ~/.cache/kvreach by
``tests/vllm_releases.py``): each wheel equals its record (the function
layer; and the whole command, system layer included, on the wheels that run
over the installed vLLM: 0.33.0 and the installed release's), and every
checked part of that record is caught when flipped on that release's code."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvreach import conform as cf
from kvreach import releases as R
from kvreach.cli import app
from test_conform import assert_every_part_caught
import vllm_releases

pytestmark = pytest.mark.slow
runner = CliRunner()


def _record(version: str) -> R.Release:
    try:
        return R.release(version)
    except ValueError:
        pytest.skip(f"kvreach.releases.RELEASES has no record of vLLM {version} yet")


@pytest.mark.parametrize("version", (*vllm_releases.RELEASES, "0.34.0"))
def test_each_release_wheel_equals_its_record(version):
    rec = _record(version)
    whl = vllm_releases.wheel(version)
    r = runner.invoke(app, ["conform", "--vllm-wheel", str(whl), "--function-only"])
    if version == "0.34.0":  # its stubs cannot run five roles: the system layer decides
        assert r.exit_code == 2 and "cannot check role" in r.output, r.output
        return
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == f"equals {rec.name}"


@pytest.mark.vllm
@pytest.mark.parametrize("version", ("0.33.0", "0.34.0"))
def test_conform_names_the_release_of_its_wheel(version):
    """The whole command (the system layer laid over the installed vLLM)."""
    rec = _record(version)
    whl = vllm_releases.wheel(version)
    r = runner.invoke(app, ["conform", "--vllm-wheel", str(whl), "--cases", "300",
                            "--system-cases", "40"])
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == f"equals {rec.name}"


@pytest.mark.parametrize("version", ("0.29.0", "0.30.0", "0.32.0"))
def test_every_checked_part_is_caught_on_each_release(version):
    assert_every_part_caught(cf.Tree.wheel(vllm_releases.wheel(version)), R.release(version))


@pytest.mark.parametrize("version", vllm_releases.RELEASES)
def test_each_release_own_lookup_gives_the_hits_of_the_unchecked_load_cases(version):
    """The two cases of tests/test_releases.py on the release's own
    ``_lookup_complete_chunks`` (extracted from its wheel): 0.29.0 hits 22 in
    the first, 0.29.0 and 0.30.0 hit 6 in the second (a load that then reads
    a chunk the lookup never checked, kvreach's ``loaded_chunks``)."""
    from test_releases import CASE_029, CASE_030
    from kvreach.impl import lookup as lk

    ex = cf.extract(cf.Tree.wheel(vllm_releases.wheel(version)))
    lookup_role = next(role for role in cf.CHECKS if role.name == "lookup")
    hits = []
    for groups, n, missing in (CASE_029, CASE_030):
        gs = [dict(b=b, W=W, extra=e, eagle=False) for b, W, e in groups]
        keys = {(gi, c): lk.Answer.MISS if (gi, c) in missing else lk.Answer.HIT
                for gi, g in enumerate(gs) for c in range(n // g["b"])}
        hits.append(lookup_role.tree(dict(groups=gs, bpc=1, n=n, local=0, keys=keys,
                                          max_load=None, max_new=None), ex))
    want = {"0.29.0": [22, 6], "0.30.0": [12, 6]}.get(version, [12, 0])
    assert hits == want
