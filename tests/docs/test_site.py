"""The documentation site builds with warnings as errors, from the repository's own sources.

The build test runs ``mkdocs build --strict`` (through ``dpjax.docs.build.build_site``) into a
temporary folder once per session and checks what the site must hold: every public module's API
page, every kept report's page, the paper pages' claims generated from those reports, the README's
set-up commands, RELIABILITY.md and the notebooks rendered from their stored outputs. It skips,
saying why, where the ``docs`` extra is not installed (CI installs it through the ``test`` extra).
The helpers that stage the site are tested without mkdocs.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import time

import pytest

from dpjax.docs import build

pytestmark = pytest.mark.slow  # minutes of CPU: CI runs it in its -m slow pass

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCS_PACKAGES = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "mkdocs_jupyter")


def _missing_docs_packages() -> list[str]:
    missing = []
    for name in DOCS_PACKAGES:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except ModuleNotFoundError:
            missing.append(name)
    return missing


needs_docs_extra = pytest.mark.skipif(
    bool(_missing_docs_packages()),
    reason=f"the docs extra is not installed (missing: {', '.join(_missing_docs_packages())}); "
           "pip install \".[docs]\" (or \".[test]\") to build the site")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    start = time.perf_counter()
    log = build.build_site(out, REPO, strict=True)  # raises DocsBuildFailed on any warning
    print(f"site built in {time.perf_counter() - start:.1f} s")
    return out, log


@needs_docs_extra
def test_site_builds_strict_without_warnings(site):
    _, log = site
    assert build.warning_lines(log) == []


@needs_docs_extra
def test_api_reference_has_a_page_per_public_module(site):
    out, _ = site
    modules = build.public_modules()
    for required in ("dpjax.primitives", "dpjax.accounting", "dpjax.engine", "dpjax.algorithms", "dpjax.problems",
                     "dpjax.sweep", "dpjax.auditing", "dpjax.user_level", "dpjax.data"):
        assert required in modules
    missing = [m for m in modules if not (out / "api" / f"{m}.html").is_file()]
    assert not missing
    executor = (out / "api" / "dpjax.engine.executor.html").read_text(encoding="utf-8")
    assert 'id="dpjax.engine.executor.RunResult"' in executor and 'id="dpjax.engine.executor.run_many"' in executor


@needs_docs_extra
def test_every_kept_report_is_a_page_and_its_claims_are_on_the_paper_page(site):
    out, _ = site
    for paper in build.PAPERS:
        reports = build.find_reports(REPO, paper)
        assert reports, paper.slug
        paper_html = (out / "papers" / f"{paper.slug}.html").read_text(encoding="utf-8")
        for rep in reports:
            assert (out / rep.page.replace(".md", ".html")).is_file(), rep.source
        # A claims row of the first report, as written in its report.md, is on the paper page.
        _, body = build.split_title((REPO / reports[0].source).read_text(encoding="utf-8"))
        rows = [line for line in build.claims_section(body).splitlines() if line.startswith("|") and "---" not in line]
        first_cell = rows[1].strip("|").split("|")[0].strip()
        assert _html_text(first_cell) in paper_html, (paper.slug, first_cell)


@needs_docs_extra
def test_readme_commands_reliability_and_notebooks_are_included(site):
    out, _ = site
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    getting_started = (out / "getting-started.html").read_text(encoding="utf-8")
    for marker in ("main-command", "test-command"):
        command = build.readme_command(readme, marker).splitlines()[1]
        assert "pip install" in _strip_tags(getting_started) and _strip_tags(_html_text(command)) in _strip_tags(getting_started)
    reliability = (out / "reliability.html").read_text(encoding="utf-8")
    first_promise = re.search(r"^## (.+)$", (REPO / "dpjax" / "RELIABILITY.md").read_text(encoding="utf-8"), re.M).group(1)
    assert _html_text(first_promise) in reliability
    notebooks = sorted((REPO / "notebooks").glob("*.ipynb"))
    assert notebooks
    for nb in notebooks:
        assert (out / "notebooks" / f"{nb.stem}.html").is_file(), nb.name


def _html_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _strip_tags(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


# --- staging helpers (no mkdocs needed) -------------------------------------------------------

def test_public_modules_walks_the_package_and_skips_private_ones():
    modules = build.public_modules()
    assert modules[0] == "dpjax"
    assert "dpjax.engine.executor" in modules and "dpjax.docs.build" in modules
    assert not any(part.startswith("_") for m in modules for part in m.split("."))  # _validate, __main__


def test_rewrite_links_points_at_site_pages_or_names_the_file():
    text = "see [the promises](../RELIABILITY.md#3-determinism), [code](../tests/x.py) and [web](https://a.b/c)"
    out = build.rewrite_links(text, "dpjax/accounting/README.md", "accounting.md",
                              {"dpjax/RELIABILITY.md": "reliability.md"})
    assert "[the promises](reliability.md#3-determinism)" in out
    assert "code (`dpjax/tests/x.py`)" in out
    assert "[web](https://a.b/c)" in out


def test_claims_section_and_headings():
    body = "intro\n\n## Claims\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n## Notes\n\nmore\n"
    assert build.claims_section(body).strip() == "| a | b |\n|---|---|\n| 1 | 2 |"
    assert build.claims_section("no sections\n") == "no sections\n"
    assert build.markdown_section("# T\n## A b\nx\n### sub\ny\n## C\nz\n", "A", "f.md") == "x\n### sub\ny\n"
    with pytest.raises(build.DocsError, match="no section"):
        build.markdown_section("## A\n", "B", "f.md")
    assert build.demote_headings("# a\n```\n# not a heading\n```\n## b\n", 2) == "### a\n```\n# not a heading\n```\n#### b\n"


def test_pages_name_only_registered_figures():
    figures = build.registered_figures()
    assert {"isrl-mnist", "diff2-regression", "user-level-audit"} <= figures
    with pytest.raises(build.DocsError, match="isrl-mnistt"):
        build.check_reproduce_commands("run `dpjax reproduce isrl-mnistt --quick`", "x.md", figures)
    for page in sorted(build.PAGES_DIR.rglob("*.md")):
        build.check_reproduce_commands(page.read_text(encoding="utf-8"), page.name, figures)


def test_docs_command_without_a_checkout_is_one_clear_error(tmp_path, capsys):
    from dpjax.cli import main

    assert main(["docs", "build", "--out", str(tmp_path / "site"), "--repo", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dpjax: error: repo=") and "--repo DIR" in err[0]


def test_build_refuses_to_empty_a_folder_that_is_not_a_site(tmp_path):
    keep = tmp_path / "results"
    keep.mkdir()
    (keep / "report.md").write_text("a result")
    with pytest.raises(build.DocsError, match="not a previously built site"):
        build.build_site(keep, REPO)
    assert (keep / "report.md").read_text() == "a result"
