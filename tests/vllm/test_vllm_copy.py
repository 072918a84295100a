"""``kvreach.impl.vllm.vllm_copy`` is the installed vLLM release's code (the
copy module of that release, chosen at import: 0.33.0 or 0.34.0): each copy in
``COPIES`` equals its original in the installed vLLM (``inspect.getsource``)
line for line, except at the seams the copy declares, whitespace and the
copy's ``# kvreach:`` comments aside. A changed line, a dropped vLLM comment,
an undeclared difference or a seam that no longer matches fails."""

from __future__ import annotations

import importlib
import inspect

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

import vllm  # noqa: E402

from kvreach.impl.vllm import vllm_copy  # noqa: E402

pytestmark = pytest.mark.vllm


def _attr(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def normalized(source: str, *, copy: bool) -> list[str]:
    """Stripped non-blank lines; in a copy, without its ``# kvreach:`` comments."""
    lines = [ln.strip() for ln in source.splitlines()]
    return [ln for ln in lines if ln and not (copy and ln.startswith("# kvreach:"))]


def with_seams(original: list[str], seams) -> list[str]:
    """``original`` with each seam's ``first`` .. ``last`` run replaced."""
    out = list(original)
    for seam in seams:
        assert seam.first in out, f"seam {seam.first!r}: no such line in vLLM's source"
        i = out.index(seam.first)
        assert seam.last in out[i:], f"seam {seam.first!r}: no line {seam.last!r} after it"
        j = out.index(seam.last, i)
        out[i:j + 1] = list(seam.replacement)
    return out


def test_the_installed_vllm_is_the_copied_release():
    assert vllm_copy.ORIGIN == f"vllm {vllm.__version__}"


@pytest.mark.parametrize("c", vllm_copy.COPIES, ids=lambda c: c.copy)
def test_copy_equals_vllm_source_but_for_its_seams(c):
    module, path = c.original
    original = normalized(inspect.getsource(_attr(importlib.import_module(module), path)),
                          copy=False)
    copied = normalized(inspect.getsource(_attr(vllm_copy, c.copy)), copy=True)
    expected = with_seams(original, c.seams)
    diff = [f"line {k}: vLLM {a!r} != copy {b!r}"
            for k, (a, b) in enumerate(zip(expected, copied)) if a != b]
    assert copied == expected, "\n".join(diff[:10] or [f"{len(expected)} != {len(copied)} lines"])


def test_every_seam_is_marked_in_the_copy():
    """Each seam's replacement is preceded by a ``# kvreach:`` comment."""
    for c in vllm_copy.COPIES:
        lines = [ln.strip() for ln in inspect.getsource(_attr(vllm_copy, c.copy)).splitlines()
                 if ln.strip()]
        for seam in c.seams:
            i = lines.index(seam.replacement[0])
            assert lines[i - 1].startswith("# kvreach:"), (c.copy, seam.replacement[0])


def test_the_check_rejects_a_drifted_copy():
    """Non-vacuity: one changed line of a copy, or a seam that no longer
    matches vLLM's source, is found."""
    c = vllm_copy.COPIES[0]
    module, path = c.original
    original = normalized(inspect.getsource(_attr(importlib.import_module(module), path)),
                          copy=False)
    copied = normalized(inspect.getsource(_attr(vllm_copy, c.copy)), copy=True)
    k = copied.index("if not store_output.keys_to_store:")
    drifted = copied[:k] + ["if store_output.keys_to_store:"] + copied[k + 1:]
    assert drifted != with_seams(original, c.seams)
    bad_seam = vllm_copy.Seam("for group_config in kv_group_configs:", "x", ())
    with pytest.raises(AssertionError, match="no such line"):
        with_seams(original, (bad_seam,))


def test_a_release_without_a_copy_is_refused():
    """The connector never runs a copy against a release it was not copied
    from: another release is refused at import, in one line."""
    assert vllm_copy.module_name(vllm.__version__).endswith(vllm_copy.MODULES[vllm.__version__])
    with pytest.raises(ImportError, match=r"^kvreach's vLLM connector runs on vLLM 0\.33\.0, "
                                          r"0\.34\.0; the installed vLLM is 0\.35\.0 "):
        vllm_copy.module_name("0.35.0")
