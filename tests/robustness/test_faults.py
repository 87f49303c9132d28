"""Faults during a sweep: SIGKILL at random moments, a full disk, two processes on one directory.

The promise (dpjax/RELIABILITY.md): whatever happens, the sweep directory
holds only whole, verified chunks; a resume computes exactly the chunks that
are not committed (a committed chunk is never rewritten) and ends with files
byte-identical to an uninterrupted sweep.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import stat
import subprocess
import sys
import time

import pytest

from tests.robustness.conftest import REPO, TINY_SWEEP, assert_clean_failure, run_cli, store_files

CHUNK = ["--chunk-size", "2", "--no-progress"]  # 36 runs -> 18 chunks: many commit points to hit


_ENV = {"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


def _sweep_proc(cfg, out, *extra):
    return subprocess.Popen([sys.executable, "-m", "dpjax.cli", "sweep", str(cfg), "--out", str(out), *CHUNK, *extra],
                            env={**os.environ, **_ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted sweep of the tiny config (in a subprocess): its files and its wall time.

    It also fills a persistent compilation cache that the later subprocesses
    share, so each of them costs start-up and execution, not a compilation.
    """
    d = tmp_path_factory.mktemp("reference")
    _ENV["JAX_COMPILATION_CACHE_DIR"] = str(d / "jax-cache")
    cfg = d / "tiny.toml"
    cfg.write_text(TINY_SWEEP)
    t0 = time.monotonic()
    p = _sweep_proc(cfg, d / "store")
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return store_files(d / "store"), time.monotonic() - t0


def _commit_records(root):
    """chunk -> (inode, mtime_ns) of its manifest: a committed chunk rewritten would change both."""
    out = {}
    for p in (root / "manifests").glob("*.json"):
        st = p.stat()
        out[p.stem] = (st.st_ino, st.st_mtime_ns)
    return out


def _check_intact(root, seen):
    """Every committed chunk verifies and none committed earlier was rewritten; no temporaries are visible."""
    from dpjax.sweep.store import Store

    if not (root / "manifests").exists():  # killed before the directory was set up
        return
    s = Store(root)
    for c in s.finished_chunks():
        assert s.verify(c) is None, s.verify(c)
    now = _commit_records(root)
    for c, rec in seen.items():
        assert now.get(c) == rec, f"chunk {c} was lost or computed twice"
    seen.update(now)


def _count_commits(root) -> int:
    d = root / "manifests"
    return len(list(d.glob("*.json"))) if d.exists() else 0


def _kill_fuzz(tmp_path, reference, trials: int, seed: int):
    """``trials`` SIGKILLs at random moments: a quarter during start-up (uniform over the reference
    run's wall time), the rest while chunks are being computed and written (uniform within the
    0.6 s after the process commits its first chunk; chunks are 0.05 s apart)."""
    ref_files, wall = reference
    n_chunks = sum(k.startswith("manifests/") for k in ref_files)
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY_SWEEP)
    rng = random.Random(seed)
    kills, cycle = 0, 0
    while kills < trials:
        root, seen = tmp_path / f"store-{cycle}", {}
        while kills < trials and _count_commits(root) < n_chunks:
            before = _count_commits(root)
            p = _sweep_proc(cfg, root, "--sleep-between-chunks", "0.05")
            if rng.random() < 0.25:
                time.sleep(rng.uniform(0.0, wall))
            else:
                while p.poll() is None and _count_commits(root) == before:
                    time.sleep(0.01)
                time.sleep(rng.uniform(0.0, 0.6))
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                kills += 1
            p.wait()
            assert p.returncode in (0, -signal.SIGKILL), p.stderr.read()
            p.stdout.close(), p.stderr.close()
            _check_intact(root, seen)
        p = _sweep_proc(cfg, root)  # the final, uninterrupted resume
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        _check_intact(root, seen)
        assert store_files(root) == ref_files
        cycle += 1
    return kills


@pytest.mark.slow
def test_sigkill_at_random_moments_resumes_to_identical_store(tmp_path, reference):
    assert _kill_fuzz(tmp_path, reference, trials=3, seed=0) == 3


@pytest.mark.slow
def test_sigkill_fuzz_20_trials(tmp_path, reference):
    assert _kill_fuzz(tmp_path, reference, trials=20, seed=1) == 20


@pytest.mark.slow
def test_disk_full_mid_sweep_keeps_store_and_says_why(tmp_path, reference, monkeypatch, capsys):
    """ENOSPC while the 3rd chunk's runs file is written: exit 2 with one line saying why; the 2 chunks
    before stay committed and verified, no temporary file remains, and a resume completes the sweep."""
    from dpjax.sweep import store as store_mod

    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY_SWEEP)
    root = tmp_path / "store"
    real_fsync, original_write = os.fsync, store_mod.Store.write_chunk
    state = {"chunks": 0, "file_syncs": 0}

    def full_disk_fsync(fd):
        if stat.S_ISREG(os.fstat(fd).st_mode):
            state["file_syncs"] += 1
            if state["file_syncs"] >= 2:  # the evals file fits, the runs file does not
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    def write_chunk(self, chunk_id, runs, evals):
        state["chunks"] += 1
        if state["chunks"] == 3:
            monkeypatch.setattr(store_mod.os, "fsync", full_disk_fsync)
        return original_write(self, chunk_id, runs, evals)

    monkeypatch.setattr(store_mod.Store, "write_chunk", write_chunk)
    code, _, err = run_cli(["sweep", cfg, "--out", root, *CHUNK], capsys)
    assert_clean_failure(code, err, "No space left on device", "2 chunk(s) stored before are intact")
    monkeypatch.undo()

    s = store_mod.Store(root)
    assert len(s.finished_chunks()) == 2 and all(s.verify(c) is None for c in s.finished_chunks())
    leftovers = [p for d in (root / "runs", root / "evals", root / "manifests") for p in d.iterdir()
                 if p.name.endswith(store_mod.TMP_SUFFIX)]
    assert leftovers == []
    assert len(list((root / "runs").glob("*.csv"))) == 2  # the failed chunk has no runs file, no manifest
    code, out, err = run_cli(["sweep", cfg, "--out", root, *CHUNK], capsys)
    assert code == 0, err
    n_chunks = sum(k.startswith("manifests/") for k in reference[0])
    assert f"computed {n_chunks - 2} chunk(s), skipped 2 finished" in out
    assert store_files(root) == reference[0]


@pytest.mark.slow
def test_truncated_or_emptied_chunk_is_recomputed_on_resume(tmp_path, reference, capsys):
    """Finding 9: a chunk cut by another process is found by its manifest and recomputed, not loaded short."""
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY_SWEEP)
    root = tmp_path / "store"
    assert run_cli(["sweep", cfg, "--out", root, *CHUNK], capsys)[0] == 0
    runs = sorted((root / "runs").glob("*.csv"))
    lines = runs[0].read_text().splitlines(keepends=True)
    runs[0].write_text("".join(lines[:-1]))  # cut at a line boundary: still parses
    (root / "evals" / runs[1].name).write_text("")  # emptied
    code, _, err = run_cli(["plot", root], capsys)
    assert_clean_failure(code, err, runs[0].name, "does not match its manifest")
    code, out, err = run_cli(["sweep", cfg, "--out", root, *CHUNK], capsys)
    assert code == 0 and "computed 2 chunk(s)" in out, (out, err)
    assert f"recomputing chunk {runs[0].stem}" in err and f"recomputing chunk {runs[1].stem}" in err
    assert store_files(root) == reference[0]


@pytest.mark.slow
def test_two_processes_on_one_sweep_directory(tmp_path, reference):
    """Two `dpjax sweep` processes started together on one directory: the second is refused while the
    first holds the directory (or, if it starts after, finds nothing to do); the store ends identical."""
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY_SWEEP)
    root = tmp_path / "store"
    procs = [_sweep_proc(cfg, root, "--sleep-between-chunks", "0.1") for _ in range(2)]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close(), p.stderr.close()
    codes = sorted(r[0] for r in results)
    assert codes[0] == 0, results
    for code, out, err in results:
        assert code == 0 or (code == 2 and "being written by another dpjax sweep" in err and "Traceback" not in err), \
            (code, out, err)
    assert store_files(root) == reference[0]
