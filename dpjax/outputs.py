"""Output directories of ``dpjax run`` and ``dpjax reproduce``: never lose a result.

:func:`claim_output_dir` runs *before* any compute. It refuses an output path that is a file or cannot be written, and a
directory holding a different run's results unless ``overwrite=True``. A run is identified by a small JSON record
(``.dpjax-run.json``: the command and its configuration) written by :func:`finish_output_dir` after the results; a
directory with results but no record (or another record) counts as a different run. :func:`release_output_dir` removes a
directory this run created when the run failed before writing anything, so a failed run leaves no empty output directory
behind. :func:`check_report_dir` is the lighter check of commands that write a few named report files (``dpjax audit``,
``dpjax audit training``) into a directory created only at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import tempfile

RECORD = ".dpjax-run.json"


def _identity_text(identity: dict) -> str:
    return json.dumps(identity, sort_keys=True, default=str)


def claim_output_dir(out, identity: dict, *, overwrite: bool = False, flag: str = "--out") -> tuple[pathlib.Path, bool]:
    """Checks (and creates) the output directory ``out`` for the run ``identity``.

    Returns ``(path, created)``. Raises ``ValueError`` naming ``flag`` when ``out`` is a file, holds another run's
    results (without ``overwrite``) or is not writable (checked by creating and removing a temporary file).
    """
    path = pathlib.Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag}={str(out)!r} is a file, not a directory; choose a directory path")
    if path.is_dir() and any(path.iterdir()):
        record = path / RECORD
        try:
            same = _identity_text(json.loads(record.read_text())) == _identity_text(identity)
        except (OSError, ValueError):
            same = False
        if not same and not overwrite:
            what = "another run's results" if record.exists() else "files of something else (no dpjax run record)"
            raise ValueError(f"{flag}={str(out)!r} already holds {what}; pass --overwrite to replace them "
                             f"or choose a new {flag} directory")
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".dpjax-write-check.", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        if created:
            release_output_dir(path, True)
        raise ValueError(f"{flag}={str(out)!r} is not writable: {err.strerror or err}") from None
    return path, created


def finish_output_dir(path: pathlib.Path, identity: dict) -> None:
    """Records which run wrote ``path`` (after its results are written)."""
    tmp = path / (RECORD + ".tmp")
    tmp.write_text(_identity_text(identity) + "\n")
    os.replace(tmp, path / RECORD)


def release_output_dir(path: pathlib.Path, created: bool) -> None:
    """After a failed run: removes ``path`` (and its empty sub-folders) if this run created it and it
    holds no files; never removes anything that holds a file."""
    if not created or not path.is_dir():
        return
    for sub in [*sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)), path]:
        with contextlib.suppress(OSError):  # not empty: it holds a file
            sub.rmdir()


def check_report_dir(out: str, files, *, overwrite: bool) -> None:
    """Checks, before any compute, that the report ``files`` can be written into the directory ``out`` (created only
    when the report is written, so a failed run leaves nothing): ``out`` is no file, holds none of ``files`` unless
    ``overwrite``, and its nearest existing ancestor is a writable directory. Raises ``ValueError`` naming ``out``."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"out={out!r} is a file; give a directory")
    existing = [f for f in files if os.path.exists(os.path.join(out, f))]
    if existing and not overwrite:
        raise ValueError(f"out={out!r} already holds {', '.join(existing)}; pass --overwrite to replace them")
    probe = os.path.abspath(out)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe) or not os.access(probe, os.W_OK):
        raise ValueError(f"out={out!r} is not writable ({probe} is not a writable directory)")
