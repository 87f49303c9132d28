"""The docs tutorial (``dpjax/docs/pages/tutorial-new-algorithm.md``) runs as written: a new DP federated
family from parts in at most 60 lines, swept as one compiled grid, its epsilon from its parts' events."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

PAGE = pathlib.Path(__file__).resolve().parents[2] / "dpjax" / "docs" / "pages" / "tutorial-new-algorithm.md"


def tutorial_code() -> str:
    text = PAGE.read_text(encoding="utf-8")
    block = text.split("<!-- tutorial-code -->", 1)[1]
    return block.split("```python\n", 1)[1].split("\n```", 1)[0]


def test_the_tutorial_algorithm_is_at_most_60_lines():
    lines = [line for line in tutorial_code().splitlines() if line.strip()]
    assert 20 < len(lines) <= 60


@pytest.mark.slow
def test_the_tutorial_runs_and_its_sweep_prints_every_configuration(tmp_path):
    script = tmp_path / "tutorial.py"
    script.write_text(tutorial_code(), encoding="utf-8")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = re.findall(r"lr=(\S+) z=(\S+)  eps=(\S+)  loss=(\S+)", out.stdout)
    assert len(rows) == 6
    eps = {(lr, z): float(e) for lr, z, e, _ in rows}
    for lr in ("0.3", "1.0", "3.0"):
        assert 0 < eps[(lr, "1.6")] < eps[(lr, "0.8")]  # more noise, less epsilon: read from the parts
        assert eps[(lr, "0.8")] == eps[("0.3", "0.8")]  # the step size does not enter the certificate
    assert all(0.0 < float(loss) < 0.6931 for *_, loss in rows)  # every run learned (below log 2 at w = 0)
