"""``kvreach conform`` against each release's own wheel (slow: the five wheels,
about 1.6 GB, are downloaded once into $KVREACH_CACHE or ~/.cache/kvreach by
``tests/vllm_releases.py``): each wheel equals its record, and every checked
part of that record is caught when flipped on that release's code."""

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


@pytest.mark.parametrize("version", vllm_releases.RELEASES)
def test_each_release_wheel_equals_its_record(version):
    whl = vllm_releases.wheel(version)
    r = runner.invoke(app, ["conform", "--vllm-wheel", str(whl)])
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == f"equals {R.release(version).name}"


@pytest.mark.parametrize("version", ("0.29.0", "0.30.0", "0.32.0"))
def test_every_checked_part_is_caught_on_each_release(version):
    assert_every_part_caught(cf.Tree.wheel(vllm_releases.wheel(version)), R.release(version))
