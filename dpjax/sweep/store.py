"""The sweep directory: resolved config, environment, append-only results.

Layout::

    DIR/config.json        resolved SweepConfig (+ chunk_size, vmap_width) — the resume contract
    DIR/config.toml        the file the sweep was started from (if any), verbatim
    DIR/env-<p>.json       versions, devices, host, time (one per process p)
    DIR/runs/<chunk>.csv   one row per run: id, axes, resolved hparams, diverged_round, final metrics
    DIR/evals/<chunk>.csv  one row per (run, evaluation round): id, eval_round, metrics

Every file is written to a temporary name in the same directory, flushed,
``fsync``-ed and moved into place with ``os.replace`` (then the directory is
``fsync``-ed), so a reader — or a sweep killed at any instant, SIGKILL
included — sees either the whole file or none of it. A chunk is finished
exactly when its ``runs`` file exists (it is written after its ``evals``
file); loaders ignore evals of unfinished chunks and temporary files. Floats
are written with Python's shortest round-trip ``repr``, so a table read back
equals the computed values bit for bit.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import platform
import socket
import subprocess
import sys
import time

import numpy as np
import pandas as pd

TMP_SUFFIX = ".tmp"
# A temporary file is written and renamed within milliseconds; one older than
# this was left by a killed process. Younger ones may belong to another
# process writing into the same sweep directory right now (multi-host mode).
STALE_TEMP_SECONDS = 600.0


def fsync_dir(path: pathlib.Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> pathlib.Path:
    """Writes ``text`` to ``path`` atomically (temp file + fsync + os.replace + dir fsync)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # host + pid: several hosts may share the directory (pids can coincide)
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}-{os.getpid()}{TMP_SUFFIX}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return path


def frame_to_csv(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    out = df.copy()
    for c in out.columns:  # shortest round-trip repr of every float
        if out[c].dtype.kind == "f":
            out[c] = [repr(float(v)) for v in out[c]]
    out.to_csv(buf, index=False)
    return buf.getvalue()


def environment(devices) -> dict:
    import jax
    import jaxlib

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=pathlib.Path(__file__).resolve().parent, capture_output=True,
            text=True, timeout=10,
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "dpjax_git_commit": commit,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in devices],
        "process_index": jax.process_index(),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
    }


class Store:
    """A sweep directory (see module docstring)."""

    def __init__(self, root: str | os.PathLike):
        self.root = pathlib.Path(root)
        self.runs_dir = self.root / "runs"
        self.evals_dir = self.root / "evals"

    # -- config -----------------------------------------------------------
    @property
    def config_path(self) -> pathlib.Path:
        return self.root / "config.json"

    def read_config(self) -> dict | None:
        if not self.config_path.exists():
            return None
        return json.loads(self.config_path.read_text())

    def init(self, resolved: dict, source_text: str | None, env: dict, process_index: int = 0) -> None:
        """Creates the directory, or checks that an existing one holds the same sweep."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.runs_dir.mkdir(exist_ok=True)
        self.evals_dir.mkdir(exist_ok=True)
        old = self.read_config()
        if old is None:
            atomic_write_text(self.config_path, json.dumps(resolved, indent=2, sort_keys=True) + "\n")
            if source_text is not None:
                atomic_write_text(self.root / "config.toml", source_text)
        elif old != resolved:
            diff = sorted(k for k in set(old) | set(resolved) if old.get(k) != resolved.get(k))
            raise ValueError(
                f"out={str(self.root)!r} holds a different sweep (config differs at {diff}); "
                "use a new --out directory to start another sweep"
            )
        atomic_write_text(self.root / f"env-{process_index}.json", json.dumps(env, indent=2) + "\n")
        self.clean_temporaries()

    def clean_temporaries(self, min_age_s: float = STALE_TEMP_SECONDS) -> None:
        """Removes temporary files of interrupted writes (never complete ones).

        Only files older than ``min_age_s`` are removed, so a process that
        starts or resumes never deletes the in-flight temporary file of
        another process sharing the directory. Leftover temporaries are
        harmless meanwhile: only ``*.csv`` files count as finished chunks.
        """
        now = time.time()
        for d in (self.root, self.runs_dir, self.evals_dir):
            if d.exists():
                for p in d.glob(f".*{TMP_SUFFIX}"):
                    try:
                        if now - p.stat().st_mtime >= min_age_s:
                            p.unlink()
                    except FileNotFoundError:
                        pass

    # -- chunks -----------------------------------------------------------
    def finished_chunks(self) -> set[str]:
        if not self.runs_dir.exists():
            return set()
        return {p.stem for p in self.runs_dir.glob("*.csv")}

    def write_chunk(self, chunk_id: str, runs: pd.DataFrame, evals: pd.DataFrame) -> None:
        atomic_write_text(self.evals_dir / f"{chunk_id}.csv", frame_to_csv(evals))
        atomic_write_text(self.runs_dir / f"{chunk_id}.csv", frame_to_csv(runs))  # commit point

    def load(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``(runs, evals)`` of all finished chunks, in plan order."""
        done = sorted(self.finished_chunks())
        if not done:
            return pd.DataFrame(), pd.DataFrame()
        runs = pd.concat([_read_csv(self.runs_dir / f"{c}.csv") for c in done], ignore_index=True)
        evals = pd.concat([_read_csv(self.evals_dir / f"{c}.csv") for c in done], ignore_index=True)
        return runs, evals


def _read_csv(path) -> pd.DataFrame:
    # pandas >= 3 parses floats round-trip by default (and deprecates the option).
    if int(pd.__version__.split(".")[0]) >= 3:
        return pd.read_csv(path)
    return pd.read_csv(path, float_precision="round_trip")


def load_results(root: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Reads a sweep directory: ``(runs, evals)`` DataFrames (see ``Store``)."""
    store = Store(root)
    if store.read_config() is None:
        raise ValueError(f"store={str(root)!r} is not a sweep directory (no config.json)")
    return store.load()
