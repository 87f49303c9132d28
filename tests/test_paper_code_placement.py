"""Paper-specific code lives under ``dpjax/reproduce/<paper>/``, never in the core (issue #37, item 5).

The core packages (``algorithms``, ``parts``, ``engine``, ``primitives``, ``data``) hold no
paper-construction branch: not even the word "construction" (a ``construction=`` switch between
the paper's text and the authors' scripts, or its documentation), read statically from the
sources. ``dpjax.reproduce`` exports its figure registry, not the papers' internals.
"""

from __future__ import annotations

import importlib
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORE = ("algorithms", "parts", "engine", "primitives", "data")
WORD = re.compile(r"\bconstruction\b")
PAPER_PACKAGES = ("diff2", "dpsgd_mnist", "isrl", "shuffle_sco", "user_level", "batch_clipping_privacy",
                  "correlated_noise")


def construction_lines(package_dir: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """``path:line`` of every source line of ``package_dir`` that says "construction" (as ``grep -w``)."""
    return [f"{path.relative_to(root)}:{i}" for path in sorted(package_dir.rglob("*.py"))
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if WORD.search(line)]


def test_the_core_holds_no_construction_branch():
    found = [hit for package in CORE for hit in construction_lines(ROOT / "dpjax" / package)]
    assert not found, ("paper constructions belong under dpjax/reproduce/<paper>/ (build them there from the "
                       "core's generic pieces):\n" + "\n".join(found))


def test_the_detector_finds_a_construction_switch(tmp_path):
    (tmp_path / "m.py").write_text('def f(construction="paper"):\n    """Constructions: none."""\n')
    (tmp_path / "n.py").write_text('"""Built at construction time."""\n')
    assert construction_lines(tmp_path, root=tmp_path) == ["m.py:1", "n.py:1"]


def test_reproduce_exports_its_registry_not_the_papers_internals():
    import dpjax.reproduce as reproduce

    assert set(reproduce.__all__) == {"CONSTRUCTIONS", "FIGURE_MODULES", "Figure", "LISTING", "figures", "get", "is_known",
                                      "listing_lines", "register"}
    assert all(hasattr(reproduce, name) for name in reproduce.__all__)
    exported = {p: importlib.import_module(f"dpjax.reproduce.{p}").__dict__.get("__all__") for p in PAPER_PACKAGES}
    total = len(reproduce.__all__) + sum(len(names or ()) for names in exported.values())
    assert total <= 20, f"dpjax.reproduce and its paper packages export {total} names: {exported}"
    for p, names in exported.items():
        module = importlib.import_module(f"dpjax.reproduce.{p}")
        assert all(hasattr(module, n) for n in names or ()), p
