"""Helpers of the robustness tests: in-process CLI calls and a tiny sweep."""

from __future__ import annotations

import os
import pathlib

import pytest

from tests import _shared
from tests.sweep.conftest import TINY

REPO = pathlib.Path(__file__).resolve().parents[2]


def shared_data_dir() -> pathlib.Path | None:
    """The project's real datasets: ``<repo>/../shared/data``, else ``$DPJAX_DATA_DIR`` (worktrees); neither when
    hidden (``$DPJAX_TESTS_HIDE_SHARED``, see tests/_shared.py)."""
    if _shared.hidden():
        return None
    for p in (REPO.parent / "shared" / "data", os.environ.get("DPJAX_DATA_DIR")):
        if p and pathlib.Path(p, "obesity").is_dir():
            return pathlib.Path(p)
    return None


@pytest.fixture
def real_data() -> pathlib.Path:
    d = shared_data_dir()
    if d is None:
        why = "hidden by $DPJAX_TESTS_HIDE_SHARED=1" if _shared.hidden() else "absent"
        pytest.skip(f"needs the real obesity dataset: {REPO.parent / 'shared' / 'data' / 'obesity'} and "
                    f"$DPJAX_DATA_DIR/obesity are {why}")
    return d


def run_cli(argv, capsys) -> tuple[int, str, str]:
    """``dpjax.cli.main(argv)`` in-process: ``(exit status, stdout, stderr)`` (argparse's SystemExit included)."""
    from dpjax import cli

    capsys.readouterr()
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_failure(code: int, err: str, *fragments: str) -> None:
    """Exit status 2, no traceback, and the error is one ``dpjax: error:`` line (argparse's own
    errors: its usage line plus one error line) containing every fragment."""
    assert code == 2, (code, err)
    assert "Traceback" not in err, err
    error_lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(error_lines) == 1, err
    for f in fragments:
        assert f in error_lines[0], (f, err)


# The sweep tests' tiny config: 3 step sizes x 2 noise levels x 2 repetitions x 3 trials = 36 runs of 6 rounds.
TINY_SWEEP = TINY


def store_files(root: pathlib.Path) -> dict[str, bytes]:
    """The result files of a sweep directory (config, runs, evals, manifests) by relative path."""
    root = pathlib.Path(root)
    files = {"config.json": (root / "config.json").read_bytes()}
    for sub in ("runs", "evals", "manifests"):
        for p in sorted((root / sub).glob("*")):
            if not p.name.startswith("."):
                files[f"{sub}/{p.name}"] = p.read_bytes()
    return files
