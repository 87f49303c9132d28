"""The sweep directory: resolved config, environment, append-only results.

Layout::

    DIR/config.json        resolved SweepConfig (+ chunk_size, vmap_width) — the resume contract
    DIR/config.toml        the file the sweep was started from (if any), verbatim
    DIR/config.sha256.json SHA-256 of config.json and config.toml as written: a resume or a load refuses a directory
                           whose stored config was edited since (its results belong to the original)
    DIR/env-<p>.json       versions, devices, host, time (one per process p)
    DIR/runs/<chunk>.csv   one row per run: id, axes, resolved hparams, diverged_round, final metrics
    DIR/evals/<chunk>.csv  one row per (run, evaluation round): id, eval_round, metrics
    DIR/manifests/<chunk>.json  row counts and SHA-256 of the chunk's two CSVs (the commit record)
    DIR/.lock-p<i>         held (flock) by the process computing share i while it runs

Every file is written to a temporary name in the same directory, flushed, ``fsync``-ed and moved into place with
``os.replace`` (then the directory is ``fsync``-ed), so a reader — or a sweep killed at any instant, SIGKILL included —
sees either the whole file or none of it. A chunk is finished exactly when its manifest exists (written after its
``evals`` and ``runs`` files) and both files still match it: :meth:`Store.verify` re-hashes them, so a chunk truncated,
emptied or edited by anything else is found — on resume it is recomputed, on load it is an error naming the file.
Loaders ignore uncommitted chunks and temporary files. Floats are written with Python's shortest round-trip ``repr``, so
a table read back equals the computed values bit for bit.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import pathlib
import platform
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd

TMP_SUFFIX = ".tmp"
CONFIG_CHECKSUMS = "config.sha256.json"
# A temporary file is written and renamed within milliseconds; one older than this was left by a killed process.
# Younger ones may belong to another process writing into the same sweep directory right now (multi-host mode).
STALE_TEMP_SECONDS = 600.0


def fsync_dir(path: pathlib.Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> pathlib.Path:
    """Writes ``text`` to ``path`` atomically (temp file + fsync + os.replace + dir fsync)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # host + pid: several hosts may share the directory (pids can coincide)
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}-{os.getpid()}{TMP_SUFFIX}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:  # disk full, read-only, ...: the old file (if any) is untouched
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OSError(err.errno, f"cannot write {path}: {err.strerror or err}") from err
    fsync_dir(path.parent)
    return path


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def frame_to_csv(df: pd.DataFrame) -> str:
    out = df.copy()
    for c in out.columns:  # shortest round-trip repr of every float
        if out[c].dtype.kind == "f":
            out[c] = [repr(float(v)) for v in out[c]]
    return out.to_csv(index=False)


def environment(devices) -> dict:
    import jax
    import jaxlib
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=pathlib.Path(__file__).resolve().parent,
                                capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": socket.gethostname(),
            "python": sys.version.split()[0], "platform": platform.platform(), "jax": jax.__version__,
            "jaxlib": jaxlib.__version__, "numpy": np.__version__, "pandas": pd.__version__,
            "dpjax_git_commit": commit, "backend": jax.default_backend(), "devices": [str(d) for d in devices],
            "process_index": jax.process_index(), "XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}


class Store:
    """A sweep directory (see module docstring)."""

    def __init__(self, root: str | os.PathLike):
        self.root = pathlib.Path(root)
        self.runs_dir = self.root / "runs"
        self.evals_dir = self.root / "evals"
        self.manifest_dir = self.root / "manifests"
        self._lock_fd = None

    # -- before any compute ---------------------------------------------------
    def prepare(self) -> None:
        """Creates the directory and checks it is writable (a file, a read-only or a full disk fail here, before
        anything is computed), with a ``ValueError`` naming ``out``."""
        if self.root.exists() and not self.root.is_dir():
            raise ValueError(f"out={str(self.root)!r} is a file, not a directory; choose a directory path")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".write-check.", suffix=TMP_SUFFIX, dir=self.root)  # one per process
            os.close(fd)
            os.unlink(probe)
        except OSError as err:
            raise ValueError(f"out={str(self.root)!r} is not writable: {err.strerror or err}") from None

    def lock(self, process_index: int = 0, config: dict | None = None) -> None:
        """Takes this process's share of the directory (an exclusive ``flock`` held until exit).

        A second process computing the same share of the same directory at the same time would race it chunk for chunk;
        it is refused with a ``ValueError``. The lock dies with its process (SIGKILL included), so a resume never waits
        for a dead sweep. ``config`` (the sweep's resolved config) is fingerprinted into the lock file, so that a second
        process running a *different* config is told so.
        """
        digest = config_digest(config) if config is not None else None
        import fcntl
        path = self.root / f".lock-p{process_index}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if err.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                theirs = holder.rpartition("config ")[2] if "config " in holder else None
                if digest is not None and theirs is not None and theirs != digest:
                    raise ValueError(
                        f"out={str(self.root)!r} is being written by another dpjax sweep ({holder.split(';')[0]}) "
                        "of a different config; use a new --out directory for this sweep") from None
                raise ValueError(
                    f"out={str(self.root)!r} is being written by another dpjax sweep ({holder}) computing the same "
                    f"share (process index {process_index}); wait for it to finish, or split the work with "
                    "--process-index/--process-count") from None
            raise
        os.ftruncate(fd, 0)
        text = f"pid {os.getpid()} on {socket.gethostname()}" + (f"; config {digest}" if digest else "")
        os.pwrite(fd, text.encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    @property
    def config_path(self) -> pathlib.Path:
        return self.root / "config.json"

    @property
    def checksum_path(self) -> pathlib.Path:
        return self.root / CONFIG_CHECKSUMS

    def _config_files(self) -> dict[str, pathlib.Path]:
        return {name: self.root / name for name in ("config.json", "config.toml")}

    def _write_checksums(self) -> None:
        sums = {name: hashlib.sha256(p.read_bytes()).hexdigest()
                for name, p in self._config_files().items() if p.exists()}
        atomic_write_text(self.checksum_path, json.dumps(sums, indent=2, sort_keys=True) + "\n")

    def verify_config(self) -> None:
        """``ValueError`` naming the file when the stored ``config.json`` or ``config.toml`` no longer has the SHA-256
        recorded when the sweep started: the chunks were computed from the original, so resuming (or presenting the
        results) under the edited file would attribute one configuration's results to another. A directory written
        before checksums were kept has none to check (they are recorded on its next resume)."""
        try:
            recorded = json.loads(self.checksum_path.read_text())
            if not isinstance(recorded, dict):
                raise ValueError
        except FileNotFoundError:
            return
        except ValueError:
            raise ValueError(f"{self.checksum_path} is damaged; this sweep directory's stored config cannot be "
                             "verified (start a new --out directory)") from None
        for name, path in self._config_files().items():
            want = recorded.get(name)
            if want is None:
                continue
            try:
                got = hashlib.sha256(path.read_bytes()).hexdigest()
            except FileNotFoundError:
                raise ValueError(f"{path} is missing: the sweep directory's stored config was deleted after the "
                                 "sweep started; restore it or start a new --out directory") from None
            if got != want:
                raise ValueError(
                    f"{path} was modified after the sweep started (sha256 {got[:12]}..., recorded {want[:12]}... in "
                    f"{self.checksum_path.name}): the results in this directory were computed from the original "
                    "config; restore the file or start a new --out directory") from None

    def read_config(self) -> dict | None:
        """The stored resolved config (``None`` for a new directory), after :meth:`verify_config`."""
        if not self.config_path.exists():
            return None
        self.verify_config()
        try:
            return json.loads(self.config_path.read_text())
        except ValueError:
            raise ValueError(f"{self.config_path} is not valid JSON; this sweep directory is damaged "
                             "(restore config.json or start a new --out directory)") from None

    def init(self, resolved: dict, source_text: str | None, env: dict, process_index: int = 0) -> None:
        """Creates the directory, or checks that an existing one holds the same sweep."""
        import fcntl
        self.root.mkdir(parents=True, exist_ok=True)
        for d in (self.runs_dir, self.evals_dir, self.manifest_dir):
            d.mkdir(exist_ok=True)
        # Processes of different shares may start together: read-compare-write config.json under one lock.
        with open(self.root / ".config.lock", "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            old = self.read_config()
            if old is None:
                atomic_write_text(self.config_path, json.dumps(resolved, indent=2, sort_keys=True) + "\n")
                if source_text is not None:
                    atomic_write_text(self.root / "config.toml", source_text)
                self._write_checksums()
            else:
                check_same_sweep(self.root, old, resolved)
                if not self.checksum_path.exists():  # a directory of an older dpjax: record them from now on
                    self._write_checksums()
        atomic_write_text(self.root / f"env-{process_index}.json", json.dumps(env, indent=2) + "\n")
        self.clean_temporaries()

    def clean_temporaries(self, min_age_s: float = STALE_TEMP_SECONDS) -> None:
        """Removes temporary files of interrupted writes (never complete ones) older than ``min_age_s``, so a process
        that starts or resumes never deletes the in-flight temporary file of another process sharing the directory.
        Leftover temporaries are harmless meanwhile: only ``*.csv`` files count as finished chunks."""
        now = time.time()
        for d in (self.root, self.runs_dir, self.evals_dir, self.manifest_dir):
            if d.exists():
                for p in d.glob(f".*{TMP_SUFFIX}"):
                    with contextlib.suppress(FileNotFoundError):
                        if now - p.stat().st_mtime >= min_age_s:
                            p.unlink()

    def finished_chunks(self) -> set[str]:
        """Chunks with a commit record (manifest); :meth:`verify` checks their files still match it."""
        if not self.manifest_dir.exists():
            return set()
        return {p.stem for p in self.manifest_dir.glob("*.json")}

    def write_chunk(self, chunk_id: str, runs: pd.DataFrame, evals: pd.DataFrame) -> None:
        runs_text, evals_text = frame_to_csv(runs), frame_to_csv(evals)
        manifest = {"chunk": chunk_id, "runs_rows": len(runs), "evals_rows": len(evals),
                    "runs_sha256": _sha256(runs_text), "evals_sha256": _sha256(evals_text)}
        atomic_write_text(self.evals_dir / f"{chunk_id}.csv", evals_text)
        atomic_write_text(self.runs_dir / f"{chunk_id}.csv", runs_text)
        self.manifest_dir.mkdir(exist_ok=True)
        atomic_write_text(self.manifest_dir / f"{chunk_id}.json", json.dumps(manifest) + "\n")  # commit point

    def verify(self, chunk_id: str, expected_rows: tuple[int, int] | None = None) -> str | None:
        """``None`` if chunk ``chunk_id`` is committed and intact, else why not (naming the file). Intact: the manifest
        parses, both CSVs exist with the SHA-256 it records, and (if given) ``expected_rows = (runs, evals)`` equals its
        row counts."""
        mpath = self.manifest_dir / f"{chunk_id}.json"
        try:
            m = json.loads(mpath.read_text())
            recorded = {k: m[f"{k}_sha256"] for k in ("runs", "evals")}
            rows = (int(m["runs_rows"]), int(m["evals_rows"]))
        except FileNotFoundError:
            return f"{mpath} is missing (the chunk was never committed)"
        except (ValueError, KeyError, TypeError):
            return f"{mpath} is damaged"
        if expected_rows is not None and rows != tuple(expected_rows):
            return f"{mpath} records {rows} (runs, evals) rows, the plan has {tuple(expected_rows)}"
        for kind, d in (("runs", self.runs_dir), ("evals", self.evals_dir)):
            p = d / f"{chunk_id}.csv"
            try:
                got = hashlib.sha256(p.read_bytes()).hexdigest()
            except FileNotFoundError:
                return f"{p} is missing"
            if got != recorded[kind]:
                return f"{p} does not match its manifest (sha256 {got[:12]}..., recorded {recorded[kind][:12]}...; " \
                       f"truncated or modified after it was written)"
        return None

    def load(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``(runs, evals)`` of all committed chunks, in plan order, each verified against its manifest; a
        ``ValueError`` names every damaged chunk file (rerunning ``dpjax sweep`` on the directory recomputes them)."""
        done = sorted(self.finished_chunks())
        if not done:
            if self.runs_dir.exists() and any(self.runs_dir.glob("*.csv")):
                raise ValueError(f"sweep directory {str(self.root)!r} has chunk files but no manifests (written by "
                                 "an older dpjax, or never committed); run `dpjax sweep CONFIG --out DIR` on it to "
                                 "recompute and commit them")
            return pd.DataFrame(), pd.DataFrame()
        broken = [why for why in (self.verify(c) for c in done) if why]
        if broken:
            raise ValueError(f"sweep directory {str(self.root)!r} has {len(broken)} damaged chunk(s): "
                             f"{'; '.join(broken[:3])}{' ...' if len(broken) > 3 else ''}. Run the same "
                             "`dpjax sweep CONFIG --out DIR` again to recompute them")
        return tuple(pd.concat([_read_csv(d / f"{c}.csv") for c in done], ignore_index=True)
                     for d in (self.runs_dir, self.evals_dir))


def _identity(config: dict) -> dict:
    """A resolved config without ``data.data_dir``: where the dataset files lie is not part of a sweep's identity (a
    sweep may resume on another machine or after the data moved; the dataset's name and split seeds are)."""
    data = config.get("data")
    if isinstance(data, dict) and "data_dir" in data:
        return {**config, "data": {k: v for k, v in data.items() if k != "data_dir"}}
    return config


def config_digest(config: dict) -> str:
    """Fingerprint of what defines a sweep (its config without the tiling and without ``data.data_dir``)."""
    ident = {k: v for k, v in _identity(config).items() if k not in ("chunk_size", "vmap_width")}
    return _sha256(json.dumps(ident, sort_keys=True, default=str))[:16]


def check_same_sweep(root, old: dict, resolved: dict, keys=None) -> None:
    """``ValueError`` when the directory's ``old`` config differs from ``resolved`` (on ``keys``, default all;
    ``data.data_dir`` is not compared, see ``_identity``)."""
    old, resolved = _identity(old), _identity(resolved)
    keys = sorted(set(old) | set(resolved)) if keys is None else keys
    diff = [k for k in keys if old.get(k) != resolved.get(k)]
    if diff:
        raise ValueError(f"out={str(root)!r} holds a different sweep (config differs at {diff}); "
                         "use a new --out directory to start another sweep")



def _read_csv(path) -> pd.DataFrame:
    try:
        # pandas >= 3 parses floats round-trip by default (and deprecates the option).
        if int(pd.__version__.split(".")[0]) >= 3:
            return pd.read_csv(path)
        return pd.read_csv(path, float_precision="round_trip")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not a readable CSV table: {' '.join(str(err).split())}") from None


def load_results(root: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Reads a sweep directory: ``(runs, evals)`` DataFrames (see ``Store``)."""
    store = Store(root)
    if store.read_config() is None:
        raise ValueError(f"store={str(root)!r} is not a sweep directory (no config.json)")
    return store.load()
