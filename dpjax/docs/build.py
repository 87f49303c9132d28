"""Stage and build the dpjax documentation site.

The site is assembled at build time so that nothing in it can drift from the repository:

* the hand-written pages in ``dpjax/docs/pages/`` are copied, and their include markers (``<!-- dpjax-docs: ... -->``,
  see ``expand_markers``) are replaced by the README's set-up commands, ``dpjax/RELIABILITY.md``,
  ``dpjax/accounting/README.md`` or the claims tables of the kept reports;
* every kept ``experiments/**/report.md`` becomes a page (with its figures), and each paper's
  ``experiments/<paper>/README.md`` its "experiment notes" page;
* every public module of the package found by walking ``dpjax/`` (so a new package appears without editing anything
  here) gets an API reference page, rendered by mkdocstrings from the docstrings (statically, with griffe: nothing is
  imported, so jax is not needed);
* ``notebooks/*.ipynb`` are rendered from their stored outputs, never executed.

``build_site`` then runs ``mkdocs build --strict`` (every warning, broken link or missing anchor is an error) in a
subprocess and returns its log.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import time

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent.parent  # .../dpjax
DOCS_DIR = pathlib.Path(__file__).resolve().parent  # .../dpjax/docs
PAGES_DIR = DOCS_DIR / "pages"


@dataclasses.dataclass(frozen=True)
class Paper:
    """One paper of the site: its page slug, title and kept experiments folder."""
    slug: str
    title: str
    experiments: str  # repository-relative folder holding report.md files and README.md


PAPERS = (Paper("isrl", "ISRL-DP federated learning (Lowy & Razaviyayn)", "experiments/isrl"),
          Paper("shuffle-sco", "Shuffle private SCO (Cheu et al.)", "experiments/shuffle_sco"),
          Paper("user-level", "User-level private convex optimization (Ghazi et al.)", "experiments/user_level"),
          Paper("batch-clipping", "DP-SGD with shuffling and batch clipping (van Dijk et al.)", "experiments/dpsgd"),
          Paper("diff2", "DIFF2 (Murata & Suzuki)", "experiments/diff2"))

#: Headings of a report's claims section (the section a paper page shows for each kept report).
CLAIMS_HEADING = re.compile(r"^##\s+(claims?\b|claim by claim|checks\b|expected outcomes|reading)", re.IGNORECASE)
MARKER = re.compile(r"^<!--\s*dpjax-docs:\s*(?P<kind>[\w-]+)\s*(?P<arg>.*?)\s*-->\s*$", re.MULTILINE)
LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})(\s)", re.MULTILINE)
FENCE = re.compile(r"^\s*(```|~~~)")


#: Seconds between the "mkdocs still building" stage lines (a full build takes minutes and mkdocs prints nothing).
HEARTBEAT_SECONDS = 30


class DocsError(ValueError):
    """The site cannot be built (missing sources or the docs extra)."""


class DocsBuildFailed(DocsError):
    """``mkdocs build`` failed (in strict mode: it logged a warning); ``log`` is its output."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


def warning_lines(log: str) -> list[str]:
    """The WARNING / ERROR lines of a mkdocs log."""
    return [line for line in log.splitlines() if re.match(r"^\s*(WARNING|ERROR)\b", line)]


def _missing(root: pathlib.Path) -> list[str]:
    return [name for name in ("experiments", "notebooks", "README.md") if not (root / name).exists()]


def find_repo_root(repo: str | os.PathLike | None = None, cwd: str | os.PathLike | None = None) -> pathlib.Path:
    """The source checkout whose ``experiments/`` and ``notebooks/`` the site is built from.

    The site reads the kept reports and notebooks, which live beside the package in a checkout, not inside an installed
    wheel. Default: the folder holding this ``dpjax`` package (an editable install), else the working directory ``cwd``
    or a folder above it that is a dpjax checkout (holds ``dpjax/__init__.py`` too): after ``pip install ".[docs]"``
    (not editable) the package lives in site-packages, and the README's ``dpjax docs build`` runs in the clone.
    """
    if repo is not None:
        root = pathlib.Path(repo).resolve()
        if _missing(root):
            raise DocsError(
                f"repo={str(root)!r} is not a dpjax source checkout (no {', '.join(_missing(root))}); the site is "
                "built from the kept reports and notebooks of a checkout: pass --repo DIR")
        return root
    if not _missing(PACKAGE_DIR.parent):
        return PACKAGE_DIR.parent
    here = pathlib.Path(os.getcwd() if cwd is None else cwd).resolve()
    for root in (here, *here.parents):
        if not _missing(root) and (root / "dpjax" / "__init__.py").is_file():
            return root
    raise DocsError(
        f"no dpjax source checkout found: the installed package ({str(PACKAGE_DIR)!r}) has none beside it and "
        f"neither has the working directory ({str(here)!r}) or a folder above it (experiments/, notebooks/, "
        "README.md, dpjax/); the site is built from a checkout's kept reports and notebooks: run this in the clone, "
        "or pass --repo DIR")


# -- Markdown helpers ----------------------------------------------------------------------------------------------

def _outside_fences(text: str, fn) -> str:
    """Applies ``fn`` to the parts of ``text`` outside fenced code blocks."""
    out, chunk, in_fence = [], [], False
    for line in text.splitlines(keepends=True):
        if FENCE.match(line):
            if not in_fence:
                out.append(fn("".join(chunk)))
                chunk = []
            in_fence = not in_fence
            out.append(line)
            continue
        (out if in_fence else chunk).append(line)
    out.append(fn("".join(chunk)))
    return "".join(out)


def demote_headings(text: str, levels: int) -> str:
    """Moves every markdown heading ``levels`` levels down (``#`` -> ``###`` for 2), at most to ``######``."""
    return _outside_fences(text, lambda s: HEADING.sub(lambda m: "#" * min(6, len(m.group(1)) + levels) + m.group(2), s))


def split_title(text: str) -> tuple[str, str]:
    """``(title, body)`` of a markdown file whose first line is ``# title``."""
    first, _, rest = text.partition("\n")
    if first.startswith("# "):
        return first[2:].strip(), rest
    return "", text


def rewrite_links(text: str, source: str, dest: str, site_files: dict[str, str]) -> str:
    """Rewrites the relative links of ``source`` (repository path) for a page staged at ``dest``.

    A link to a repository file that is on the site (``site_files``: repository path -> site path) points at its page; a
    link to anything else (source files, CSVs) becomes the path in code, since the site does not carry it. External
    links and anchors are kept.
    """
    src_dir = posixpath.dirname(source)
    dest_dir = posixpath.dirname(dest)

    def fix(m: re.Match) -> str:
        target = m.group("target")
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
            return m.group(0)
        path, _, anchor = target.partition("#")
        repo_path = posixpath.normpath(posixpath.join(src_dir, path))
        if repo_path in site_files:
            rel = posixpath.relpath(site_files[repo_path], dest_dir or ".")
            return f"{m.group('bang')}[{m.group('text')}]({rel}{'#' + anchor if anchor else ''})"
        label = m.group("text")
        return f"{label} (`{repo_path}`)" if label and label != repo_path else f"`{repo_path}`"

    return _outside_fences(text, lambda s: LINK.sub(fix, s))


def indent(text: str, prefix: str = "    ") -> str:
    return "".join(prefix + line if line.strip() else line for line in text.splitlines(keepends=True))


def readme_command(readme: str, marker: str) -> str:
    """The code block that follows ``<!-- marker -->`` in the README."""
    m = re.search(rf"<!--\s*{re.escape(marker)}\s*-->\s*\n(```[^\n]*\n.*?\n```)", readme, re.DOTALL)
    if not m:
        raise DocsError(f"README.md has no code block after <!-- {marker} -->")
    return m.group(1)


# -- Reports -------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Report:
    """A kept ``report.md`` and the site page it becomes."""
    source: str  # repository path of report.md
    page: str  # site path of its page
    title: str
    run: str  # the run folder, relative to the paper's experiments folder


def _report_slug(run: str) -> str:
    """The run folder as a site folder (one per report, so two runs' same-named figures never collide)."""
    return "/".join(re.sub(r"[^A-Za-z0-9_.-]+", "-", part).strip("-") or "run" for part in run.split("/"))


def find_reports(root: pathlib.Path, paper: Paper) -> list[Report]:
    base = root / paper.experiments
    reports = []
    for path in sorted(base.rglob("report.md")):
        run = path.parent.relative_to(base).as_posix()
        title, _ = split_title(path.read_text(encoding="utf-8"))
        reports.append(Report(source=path.relative_to(root).as_posix(),
                              page=f"papers/{paper.slug}/reports/{_report_slug(run)}/report.md", title=title or run,
                              run=run))
    return reports


def claims_section(body: str) -> str:
    """The claims / checks / expected-outcomes section of a report body, or the whole body."""
    lines = body.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if CLAIMS_HEADING.match(line)), None)
    if start is None:
        return body
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "".join(lines[start + 1:end])


def markdown_section(body: str, heading: str, source: str) -> str:
    """The section of ``body`` whose heading starts with ``heading``, without its heading line (the including page gives
    its own), up to the next heading of the same or a higher level."""
    lines = body.splitlines(keepends=True)
    for i, line in enumerate(lines):
        m = re.match(r"^(#{1,6})\s+(.*)$", line)
        if m and m.group(2).startswith(heading):
            level = len(m.group(1))
            end = next((j for j in range(i + 1, len(lines))
                        if (h := re.match(r"^(#{1,6})\s", lines[j])) and len(h.group(1)) <= level), len(lines))
            return "".join(lines[i + 1:end])
    raise DocsError(f"{source} has no section whose heading starts with {heading!r}")


# -- Include markers -----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Context:
    root: pathlib.Path
    site_files: dict[str, str]  # repository path -> site path
    reports: dict[str, list[Report]]  # paper slug -> its reports
    modules: list[str]  # public modules (API reference pages)


def expand_markers(text: str, page: str, ctx: Context) -> str:
    """Replaces the include markers of a hand-written page.

    * ``<!-- dpjax-docs: readme-command main-command -->``: the README code block after that marker;
    * ``<!-- dpjax-docs: include PATH [demote=N] [section=Heading_start] -->``: a repository markdown file without its
      title (or only the section whose heading starts with the given words, underscores for spaces), headings moved down
      N levels (default 1), links rewritten for the site;
    * ``<!-- dpjax-docs: claims PAPER -->``: the claims section of each of the paper's kept reports, full-protocol runs
      open and quick ones folded, each linking to its whole report;
    * ``<!-- dpjax-docs: api-table -->``: the top-level modules and packages with their docstrings' first lines;
    * ``<!-- dpjax-docs: algorithms -->``: the registered algorithms with their registry descriptions.
    """

    def replace(m: re.Match) -> str:
        kind, arg = m.group("kind"), m.group("arg").split()
        if kind == "readme-command":
            return readme_command((ctx.root / "README.md").read_text(encoding="utf-8"), arg[0])
        if kind == "include":
            source = arg[0]
            opts = dict(a.split("=", 1) for a in arg[1:])
            path = ctx.root / source
            if not path.is_file():
                raise DocsError(f"{page}: included file {source} does not exist")
            _, body = split_title(path.read_text(encoding="utf-8"))
            if "section" in opts:
                body = markdown_section(body, opts["section"].replace("_", " "), source)
            body = demote_headings(body, int(opts.get("demote", 1)))
            return rewrite_links(body, source, page, ctx.site_files)
        if kind == "claims":
            return _claims_block(arg[0], page, ctx)
        if kind == "api-table":
            return _api_table(ctx.modules, page)
        if kind == "algorithms":
            return algorithms_table()
        raise DocsError(f"{page}: unknown include marker {kind!r}")

    return MARKER.sub(replace, text)


def algorithms_table() -> str:
    """A markdown table of ``dpjax.list_algorithms()``: each name, class and registry description."""
    import dpjax
    escape = lambda text: re.sub(r"([_*|\\])", r"\\\1", text)
    rows = [f"| `{name}` | `{line.split(': ', 1)[0]}` | {escape(line.split(': ', 1)[1])} |"
            for name, line in dpjax.list_algorithms().items()]
    return "\n".join(["| `algorithm =` | class | description |", "| --- | --- | --- |", *rows])


def _claims_block(slug: str, page: str, ctx: Context) -> str:
    reports = ctx.reports.get(slug)
    if not reports:
        raise DocsError(f"{page}: no kept reports for paper {slug!r}")
    parts = []
    for rep in reports:
        _, body = split_title((ctx.root / rep.source).read_text(encoding="utf-8"))
        section = claims_section(body)
        section = rewrite_links(section, rep.source, page, ctx.site_files)
        section = _drop_images(demote_headings(section, 3))
        link = posixpath.relpath(rep.page, posixpath.dirname(page))
        kind = "???" if "quick" in rep.run.lower() else "???+"  # quick runs folded, full-protocol runs open
        title = f"{rep.run}: {rep.title}".replace('"', "'")
        title = title if len(title) <= 140 else title[:139] + "…"
        parts.append(f'{kind} note "{title}"\n\n'
                     + indent(f"Whole report: [{rep.run}]({link}) (`{rep.source}`).\n\n{section.strip()}\n")
                     + "\n")
    return "\n".join(parts)


def _drop_images(text: str) -> str:
    return _outside_fences(text, lambda s: re.sub(r"!\[[^\]\n]*\]\([^)\s]+\)\n?", "", s))


# -- API reference -------------------------------------------------------------------------------------------------

def public_modules(package_dir: pathlib.Path = PACKAGE_DIR) -> list[str]:
    """Dotted names of the package's public modules (no ``_``-prefixed part, no ``__main__``), sorted."""
    names = []
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(p.startswith("_") for p in parts):
            continue
        # A folder without __init__.py is not a package (e.g. data folders).
        if not all((package_dir.parent.joinpath(*parts[:i]) / "__init__.py").exists() for i in range(1, len(parts))):
            continue
        names.append(".".join(parts))
    return sorted(set(names))


def module_summary(module: str, package_dir: pathlib.Path = PACKAGE_DIR) -> str:
    """The first line of a module's docstring, read without importing it."""
    import ast
    parts = module.split(".")[1:]
    base = package_dir.joinpath(*parts)
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _api_table(modules: list[str], page: str) -> str:
    top = modules[0].split(".")[0]
    rows = ["| module | what it holds |", "|---|---|"]
    for m in [top, *(m for m in modules if m.count(".") == 1)]:
        link = posixpath.relpath(_api_page(m), posixpath.dirname(page) or ".")
        rows.append(f"| [`{m}`]({link}) | {module_summary(m).replace('|', '&#124;')} |")
    return "\n".join(rows) + "\n"


def _api_page(module: str) -> str:
    return "api/" + module + ".md"


def api_pages(modules: list[str]) -> dict[str, str]:
    """Site path -> content of one API reference page per module."""
    pages = {}
    for module in modules:
        children = [m for m in modules if m.rpartition(".")[0] == module]
        # The title names the page in the navigation and the browser (the heading comes from mkdocstrings).
        text = f"---\ntitle: {module}\n---\n\n::: {module}\n"
        if children:
            text += "\n## Modules\n\n" + "".join(
                f"* [`{c}`]({posixpath.relpath(_api_page(c), 'api')})\n" for c in children)
        pages[_api_page(module)] = text
    return pages


def api_nav(modules: list[str]) -> list:
    """Nested nav: the top-level package, then each subpackage with its modules."""
    top = modules[0].split(".")[0]

    def entries(parent: str) -> list:
        out = []
        for m in modules:
            if m.rpartition(".")[0] != parent:
                continue
            kids = entries(m)
            if kids:
                out.append({m: [{f"{m} (package)": _api_page(m)}, *kids]})
            else:
                out.append({m: _api_page(m)})
        return out

    return [{top: _api_page(top)}, *entries(top)]


# -- Staging -------------------------------------------------------------------------------------------------------

REPRODUCE_COMMAND = re.compile(r"dpjax reproduce ([a-z0-9][a-z0-9-]*[a-z0-9])")


def registered_figures(package_dir: pathlib.Path = PACKAGE_DIR) -> set[str]:
    """Names registered in ``dpjax/reproduce/`` (read, not imported): ``@register("name", ...)`` and the user-level
    reproduction's ``demonstration("name", ...)``, which registers through ``register``."""
    names = set()
    for path in (package_dir / "reproduce").rglob("*.py"):  # modules and per-paper packages
        names.update(re.findall(r"(?:@register|\bdemonstration)\(\s*[\"']([\w-]+)[\"']",
                                path.read_text(encoding="utf-8")))
    return names


def check_reproduce_commands(text: str, page: str, figures: set[str]) -> None:
    """Fails on a ``dpjax reproduce NAME`` in a hand-written page that names no registered figure."""
    unknown = sorted({m for m in REPRODUCE_COMMAND.findall(text) if m not in figures})
    if unknown:
        raise DocsError(f"{page} names figures that `dpjax reproduce` does not have: {', '.join(unknown)}")

def _notebook_title(path: pathlib.Path) -> str:
    import json
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            src = "".join(cell.get("source", []))
            m = re.search(r"^#\s+(.+)$", src, re.MULTILINE)
            if m:
                return m.group(1).strip()
    return path.stem


def stage(root: pathlib.Path, dest: pathlib.Path) -> dict:
    """Writes the site's markdown, figures and notebooks under ``dest/docs`` and its config to ``dest/mkdocs.yml``;
    returns the config."""
    import yaml
    docs = dest / "docs"
    docs.mkdir(parents=True)

    reports = {p.slug: find_reports(root, p) for p in PAPERS}
    site_files = {"dpjax/RELIABILITY.md": "reliability.md", "dpjax/accounting/README.md": "accounting.md",
                  "README.md": "index.md", "experiments/audit/README.md": "audits.md"}
    for paper in PAPERS:
        site_files[f"{paper.experiments}/README.md"] = f"papers/{paper.slug}/notes.md"
        site_files.update({r.source: r.page for r in reports[paper.slug]})
    modules = public_modules()
    ctx = Context(root=root, site_files=site_files, reports=reports, modules=modules)

    def write(site_path: str, text: str) -> None:
        path = docs / site_path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    # Hand-written pages, markers expanded; their `dpjax reproduce NAME` commands must exist.
    figures = registered_figures()
    for path in sorted(PAGES_DIR.rglob("*.md")):
        site_path = path.relative_to(PAGES_DIR).as_posix()
        text = path.read_text(encoding="utf-8")
        check_reproduce_commands(text, site_path, figures)
        write(site_path, expand_markers(text, site_path, ctx))

    # Per paper: the experiments README and every kept report (with its figures).
    paper_nav = []
    for paper in PAPERS:
        notes_src = root / paper.experiments / "README.md"
        notes_page = f"papers/{paper.slug}/notes.md"
        title, body = split_title(notes_src.read_text(encoding="utf-8"))
        write(notes_page, f"# Experiment notes: {title}\n\n"
              f"*Included at build time from `{paper.experiments}/README.md`.*\n\n"
              + rewrite_links(body, f"{paper.experiments}/README.md", notes_page, site_files))
        report_nav = []
        for rep in reports[paper.slug]:
            text = (root / rep.source).read_text(encoding="utf-8")
            title, body = split_title(text)
            run_dir = (root / rep.source).parent
            referenced = set()
            for m in LINK.finditer(body):
                target = m.group("target")
                if m.group("bang") and not re.match(r"^[a-z]+:", target) and (run_dir / target).is_file():
                    referenced.add(target)
            body = rewrite_links(body, rep.source, rep.page,
                                 {**site_files, **{posixpath.normpath(posixpath.join(posixpath.dirname(rep.source), t)):
                                                   posixpath.join(posixpath.dirname(rep.page), t) for t in referenced}})
            figures = ""
            for png in sorted(run_dir.glob("*.png")):
                target_dir = docs / posixpath.dirname(rep.page)
                target_dir.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(png, target_dir / png.name)
                if png.name not in referenced:
                    figures += f"\n![{png.stem}]({png.name})\n"
            write(rep.page, f"# {title}\n\n*Kept report `{rep.source}`, included at build time.*\n\n{body}"
                  + (f"\n## Figures\n{figures}" if figures else ""))
            report_nav.append({rep.run: rep.page})
        paper_nav.append({paper.title: [f"papers/{paper.slug}.md", {"Experiment notes": notes_page},
                                         {"Kept reports": report_nav}]})

    # Audits page: the audit README and the kept audit report.
    write("audits.md", expand_markers(
        "# Empirical privacy audits\n\n*Included at build time from `experiments/audit/README.md`.*\n\n"
        "<!-- dpjax-docs: include experiments/audit/README.md demote=0 -->\n", "audits.md", ctx))

    # Notebooks, rendered from their stored outputs.
    nb_nav = []
    for nb in sorted((root / "notebooks").glob("*.ipynb")):
        (docs / "notebooks").mkdir(exist_ok=True)
        shutil.copyfile(nb, docs / "notebooks" / nb.name)
        nb_nav.append({_notebook_title(nb): f"notebooks/{nb.name}"})

    # API reference.
    for site_path, text in api_pages(modules).items():
        write(site_path, text)

    config = yaml.safe_load((DOCS_DIR / "mkdocs.yml").read_text(encoding="utf-8"))
    config["docs_dir"] = str(docs)
    python_handler = config["plugins"][-1]["mkdocstrings"]["handlers"]["python"]
    python_handler["paths"] = [str(PACKAGE_DIR.parent)]
    config["nav"] = [
        {"Home": "index.md"}, {"Getting started": "getting-started.md"}, {"A longer tour": "tour.md"},
        {"Tutorial: a new algorithm": "tutorial-new-algorithm.md"}, {"Papers": ["papers/index.md", *paper_nav]},
        {"Accounting guide": "accounting.md"}, {"BandMF (correlated noise)": "band-mf.md"},
        {"Reliability promises": "reliability.md"},
        {"Privacy audits": "audits.md"},
        {"Performance": [{"Benchmarks": "benchmarks.md"}, {"Roofline": "roofline.md"}, {"Sharding": "sharding.md"}]},
        {"Notebooks": ["notebooks/index.md", *nb_nav]}, {"API reference": ["api/index.md", *api_nav(modules)]},
        {"The test suite": "testing.md"}, {"Contributing and about": "contributing.md"},
    ]

    (dest / "mkdocs.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return config


def build_site(out: str | os.PathLike, repo: str | os.PathLike | None = None, *, strict: bool = True,
               keep_staging: str | os.PathLike | None = None) -> str:
    """Builds the site into ``out`` with ``mkdocs build`` (``--strict`` by default); returns mkdocs' log.

    Raises ``DocsBuildFailed`` (with the log) when the build fails (in strict mode: any warning), ``DocsError`` when the
    docs extra or the checkout's sources are missing.
    """
    out = pathlib.Path(out).resolve()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "search" / "search_index.json").is_file())):
        # mkdocs empties its site folder first: never let it delete something that is not a site.
        raise DocsError(f"out={str(out)!r} exists and is not a previously built site; choose a new or empty folder")
    root = find_repo_root(repo)
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
        import mkdocs_jupyter  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError as err:
        raise DocsError(f"the docs extra is not installed ({err.name or err} missing): pip install \".[docs]\"") from err
    with tempfile.TemporaryDirectory(prefix="dpjax-docs-") as tmp:
        staging = pathlib.Path(keep_staging).resolve() if keep_staging else pathlib.Path(tmp)
        if keep_staging and staging.exists():
            shutil.rmtree(staging)
        from dpjax import progress

        progress.stage(f"docs: staging the pages, the kept reports and the API pages of {root}")
        stage(root, staging)
        cmd = [sys.executable, "-m", "mkdocs", "build", "--config-file", str(staging / "mkdocs.yml"),
               "--site-dir", str(out), "--clean"]
        if strict:
            cmd.append("--strict")
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        progress.stage(f"docs: mkdocs build{' --strict' if strict else ''} into {out} (minutes: it renders the "
                       "notebooks and an API page per module)")
        # Run inside the staging folder: mkdocs-jupyter writes a .cache/ folder into the working directory.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=staging)
        started = time.perf_counter()
        try:
            while True:
                try:
                    stdout, stderr = proc.communicate(timeout=HEARTBEAT_SECONDS)
                    break
                except subprocess.TimeoutExpired:  # communicate() again keeps the output read so far
                    progress.stage(f"docs: mkdocs still building ({time.perf_counter() - started:.0f} s)")
        except BaseException:  # Ctrl-C: leave no mkdocs running behind
            proc.kill()
            proc.wait()
            raise
    log = stdout + stderr
    if proc.returncode != 0:
        problems = warning_lines(log)
        raise DocsBuildFailed(
            f"mkdocs build failed (exit {proc.returncode}; {len(problems)} warnings/errors"
            f"{', strict mode' if strict else ''}): {problems[0].strip() if problems else log.strip()[-300:]}", log)
    return log


def main_build(out: str, repo: str | None, strict: bool, keep_staging: str | None, dry_run: bool = False) -> int:
    """``dpjax docs build``: builds, prints the warnings and the time taken; a failed build prints its log.
    ``dry_run``: only resolves the checkout and the output folder and says what would be built."""
    if dry_run:
        root = find_repo_root(repo)
        target = pathlib.Path(out).resolve()
        if target.exists() and not target.is_dir():
            raise DocsError(f"out={str(target)!r} exists and is not a folder")
        print(f"dpjax docs: would build the site from {root} (pages from {PAGES_DIR}) into {target}")
        return 0
    start = time.perf_counter()
    try:
        log = build_site(out, repo, strict=strict, keep_staging=keep_staging)
    except DocsBuildFailed as err:
        print(err.log, file=sys.stderr)
        raise
    warnings = warning_lines(log)
    for line in warnings:
        print(line, file=sys.stderr)
    print(f"dpjax docs: site written to {out} in {time.perf_counter() - start:.1f} s"
          f"{' (strict)' if strict else f' ({len(warnings)} warnings)'}")
    return 0
