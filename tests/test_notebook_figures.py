"""Every notebook draws at least one figure in its stored outputs, which the site renders (issue #39, newcomer 9)."""

import json
import pathlib

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
# Not yet: adding its figure means re-executing its MNIST training (minutes); strict, so the fix must remove this.
NO_FIGURE_YET = {"dpsgd_batch_clipping.ipynb"}
NO_FIGURE_REASON = "issue 39 item 9, open: no figure yet (re-executing its MNIST training takes minutes)"


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=NO_FIGURE_REASON))
                                  if p.name in NO_FIGURE_YET else p for p in NOTEBOOKS], ids=lambda p: p.name)
def test_notebook_stores_a_figure(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    images = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, f"{path.name} draws no figure"
