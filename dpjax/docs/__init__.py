"""The dpjax documentation site: its sources and the command that builds it.

The site (MkDocs with the Material theme, mkdocstrings for the API reference and mkdocs-jupyter for the notebooks) is
built from a source checkout:

    pip install ".[docs]"
    python -m dpjax.docs build --out site        # or: dpjax docs build --out site

``pages/`` holds the hand-written pages, ``mkdocs.yml`` the base configuration; ``dpjax.docs.build`` assembles the rest
at build time (paper claims from the kept ``experiments/**/report.md``, ``dpjax/RELIABILITY.md``, the accounting guide,
the notebooks' stored outputs and one API page per public module) and runs ``mkdocs build --strict``. Nothing here is
imported by the rest of dpjax, and this module imports nothing heavy.
"""
