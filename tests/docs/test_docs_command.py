"""`dpjax docs build` after a non-editable install: the README's command finds the clone it runs in; the build says
what it is doing while mkdocs runs (issue #39, newcomer 1). No real build here (7 minutes): a dry run and a stub."""

import subprocess

import pytest

from dpjax.cli import main
from dpjax.docs import build


def _checkout(root):
    for d in ("experiments", "notebooks", "dpjax"):
        (root / d).mkdir(parents=True)
    (root / "README.md").write_text("# dpjax\n")
    (root / "dpjax" / "__init__.py").write_text("")
    return root


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The package as a plain install sees it: site-packages/dpjax, nothing of a checkout beside it."""
    site = tmp_path / "venv" / "site-packages" / "dpjax"
    site.mkdir(parents=True)
    monkeypatch.setattr(build, "PACKAGE_DIR", site)
    return site


def test_readme_command_in_the_clone_finds_the_clone(tmp_path, monkeypatch, installed, capsys):
    clone = _checkout(tmp_path / "clone")
    monkeypatch.chdir(clone)
    assert main(["docs", "build", "--out", "site", "--dry-run"]) == 0
    assert f"from {clone.resolve()} " in capsys.readouterr().out
    monkeypatch.chdir(clone / "notebooks")  # a folder inside the clone finds it too
    assert build.find_repo_root() == clone.resolve()


def test_outside_a_clone_is_one_line_saying_where_to_run_it(tmp_path, monkeypatch, installed, capsys):
    elsewhere = tmp_path / "empty"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["docs", "build", "--out", "site", "--dry-run"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("dpjax: error: no dpjax source checkout found") and "run this in the clone" in line
    assert "--repo DIR" in line


def test_the_build_prints_stage_lines_while_mkdocs_runs(tmp_path, monkeypatch, capsys):
    from dpjax import progress

    class SlowMkdocs:  # stands in for `mkdocs build`: silent for three heartbeats, then done
        returncode = 0

        def __init__(self, cmd, **kwargs):
            self.calls = 0

        def communicate(self, timeout=None):
            self.calls += 1
            if self.calls <= 3:
                raise subprocess.TimeoutExpired("mkdocs", timeout)
            return "INFO built\n", ""

    monkeypatch.setattr(build, "stage", lambda root, dest: {})
    monkeypatch.setattr(build.subprocess, "Popen", SlowMkdocs)
    monkeypatch.setattr(build, "HEARTBEAT_SECONDS", 0.01)
    progress.configure(quiet=False)
    assert main(["docs", "build", "--out", str(tmp_path / "site")]) == 0
    err = capsys.readouterr().err
    assert "docs: staging" in err and "docs: mkdocs build --strict" in err
    assert err.count("docs: mkdocs still building") == 3
