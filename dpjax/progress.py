"""Progress of long commands: stage lines and progress bars on stderr (pure Python, never imports jax).

Every command that can run longer than ~10 s says what it is doing within a few
seconds of starting, so a user (or a log) never watches a silent terminal for
minutes:

* ``stage(message)``: one line on stderr, ``[dpjax   12.3 s] message``, the time
  since the command started. Stage lines go to stderr whether or not it is a
  terminal, so logs of batch jobs show progress too; stdout keeps only results.
* ``bar(...)``: a tqdm progress bar on stderr, drawn only when stderr is a
  terminal (a log gets the stage lines instead of carriage-return noise).
* ``grid(title)``: while active, the engine's executor (``dpjax.engine.executor.execute``)
  announces every grid it runs with a stage line and a bar titled ``title``,
  although the caller (a paper driver) asked for none.
* ``configure(quiet=True)`` (the commands' ``--quiet``) silences all of them;
  results and errors are still printed.
"""

from __future__ import annotations

import contextlib
import sys
import time

__all__ = ["configure", "is_quiet", "stage", "bar", "grid", "grid_title", "elapsed"]

_state: dict = {"quiet": False, "start": time.perf_counter(), "title": None}


def configure(*, quiet: bool | None = None, restart_clock: bool = False) -> None:
    """Sets ``quiet`` (no stage lines, no bars) and optionally restarts the clock stage lines print."""
    if quiet is not None:
        _state["quiet"] = bool(quiet)
    if restart_clock:
        _state["start"] = time.perf_counter()


def is_quiet() -> bool:
    return _state["quiet"]


def elapsed() -> float:
    """Seconds since the command started (or since ``configure(restart_clock=True)``)."""
    return time.perf_counter() - _state["start"]


def stage(message: str) -> None:
    """Prints ``[dpjax <seconds> s] message`` on stderr (flushed at once) unless quiet."""
    if _state["quiet"]:
        return
    print(f"[dpjax {elapsed():7.1f} s] {message}", file=sys.stderr, flush=True)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


def bar(iterable=None, *, total: int | None = None, desc: str | None = None, unit: str = "it", **kwargs):
    """A ``tqdm`` bar on stderr; disabled when quiet or when stderr is not a terminal.

    ``kwargs`` go to ``tqdm`` (``disable=`` overrides the rule above).
    """
    from tqdm.auto import tqdm

    kwargs.setdefault("disable", _state["quiet"] or not _stderr_is_terminal())
    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, **kwargs)


@contextlib.contextmanager
def grid(title: str):
    """While active, grids the executor runs without a progress title of their own get ``title``."""
    before = _state["title"]
    _state["title"] = title
    try:
        yield
    finally:
        _state["title"] = before


def grid_title() -> str | None:
    """The title set by the innermost active ``grid(...)``, else ``None``."""
    return _state["title"]
