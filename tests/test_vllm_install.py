"""``kvreach.vllm_install.requirements``: the wheel's ``Requires-Dist`` lines
as the project installs them (an override replaces its requirement, lines
under an extra are dropped, a stale override is an error). No network."""

from __future__ import annotations

import pytest

from kvreach import vllm_install

METADATA = """\
Metadata-Version: 2.4
Name: vllm
Version: 0.34.0
Requires-Dist: regex
Requires-Dist: torch==2.14.0
Requires-Dist: flashinfer-python==0.7.3; platform_system == "Linux"
Requires-Dist: Flashinfer_Cubin==0.7.3
Requires-Dist: tensorizer==2.10.1; extra == "tensorizer"
Requires-Dist: runai-model-streamer[gcs,s3]>=0.15.7; extra == 'runai'
Requires-Dist: numba==0.61.2; python_version > "3.9"
Description-Content-Type: text/markdown

Requires-Dist: not-a-header-line
"""


def test_override_replaces_the_pinned_requirement_and_keeps_the_others():
    reqs = vllm_install.requirements(METADATA, {"flashinfer-python": "flashinfer-python==0.7.4"})
    assert reqs == [
        "regex",
        "torch==2.14.0",
        "flashinfer-python==0.7.4",
        "Flashinfer_Cubin==0.7.3",
        'numba==0.61.2; python_version > "3.9"',
    ]


def test_override_matches_the_canonical_name():
    """``Flashinfer_Cubin`` and ``flashinfer-cubin`` are one distribution."""
    reqs = vllm_install.requirements(METADATA, {"flashinfer.cubin": "flashinfer-cubin==0.7.4"})
    assert "flashinfer-cubin==0.7.4" in reqs
    assert "Flashinfer_Cubin==0.7.3" not in reqs
    assert "flashinfer-python==0.7.3; platform_system == \"Linux\"" in reqs


def test_lines_under_an_extra_are_dropped():
    reqs = vllm_install.requirements(METADATA, {})
    assert not any("tensorizer" in r or "runai" in r for r in reqs)
    assert len(reqs) == 5


def test_a_stale_override_is_a_clear_error():
    with pytest.raises(ValueError, match=r"override flashinfer-jit-cache: the wheel does not require it"):
        vllm_install.requirements(METADATA, {"flashinfer-jit-cache": "flashinfer-jit-cache==1"})


def test_an_override_of_an_extra_only_requirement_is_stale():
    """A requirement present only under an extra is not installed, so
    overriding it changes nothing: stale."""
    with pytest.raises(ValueError, match="tensorizer"):
        vllm_install.requirements(METADATA, {"tensorizer": "tensorizer==2.11"})


def test_the_current_release_has_the_flashinfer_override():
    assert vllm_install.CURRENT == "0.34.0"
    assert vllm_install.OVERRIDES["0.34.0"] == {"flashinfer-python": "flashinfer-python==0.7.4"}


def test_bad_version_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        vllm_install.main(["latest"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "version='latest': expected a release such as 0.34.0" in err


def test_vllm_sdist_bad_version_is_one_line(capsys):
    from kvreach import vllm_sdist

    with pytest.raises(SystemExit) as e:
        vllm_sdist.main(["0.34"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "version='0.34': expected a release such as 0.34.0" in err


def test_vllm_sdist_uses_an_unpacked_tree_without_fetching(tmp_path, monkeypatch):
    """A tree already in the cache is returned as is (no download)."""
    from kvreach import vllm_sdist

    monkeypatch.setenv("VLLM_SRC_CACHE", str(tmp_path))
    marker = tmp_path / "vllm-9.9.9" / vllm_sdist.MARKER
    marker.parent.mkdir(parents=True)
    marker.write_text("")

    def no_download(*a):
        raise AssertionError("downloaded")

    monkeypatch.setattr(vllm_sdist, "download", no_download)
    assert vllm_sdist.tree("9.9.9") == tmp_path / "vllm-9.9.9"
