"""JAX's persistent compilation cache: on by default in dpjax's cache dir, off with DPJAX_COMPILATION_CACHE=0,
a directory the user gave JAX kept; a second process loads the executable and gets the same bits.
Each case runs in a subprocess (the option is process-wide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Each case starts 2-3 fresh Python+JAX processes (~17 s a test on CI's 2 cores): experiment-scale start-ups, so
# they run in the slow pass (CI runs it too), not in the default suite (issue #39).
pytestmark = pytest.mark.slow

SCRIPT = r"""
import json, sys
import jax, jax.numpy as jnp
import dpjax.engine  # turns the cache on
min_time = jax.config.jax_persistent_cache_min_compile_time_secs
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # store even this small program
out = jax.jit(lambda x: jnp.sin(x) @ jnp.cos(x).T)(jnp.arange(64.0).reshape(8, 8))
print(json.dumps({"dir": jax.config.jax_compilation_cache_dir, "out": out.tolist(), "min": min_time}))
"""


def _run(env_extra, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DPJAX_COMPILATION_CACHE", "JAX_COMPILATION_CACHE_DIR")}
    env.update({"JAX_PLATFORMS": "cpu", "XDG_CACHE_HOME": str(tmp_path / "xdg"), **env_extra})
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_default_cache_in_dpjax_cache_dir_and_a_second_process_reads_it(tmp_path):
    first = _run({}, tmp_path)
    expected = tmp_path / "xdg" / "dpjax" / "jax-compilation"
    assert first["dir"] == str(expected)
    assert first["min"] == 0.05  # dpjax stores programs from 0.05 s of compile, not JAX's 1 s
    entries = sorted(p.name for p in expected.iterdir())
    assert entries, "the compiled program was not stored"
    second = _run({}, tmp_path)
    assert second["out"] == first["out"]
    assert sorted(p.name for p in expected.iterdir()) == entries  # loaded, not compiled and stored again


def test_off_and_user_choices_are_respected(tmp_path):
    off = _run({"DPJAX_COMPILATION_CACHE": "0"}, tmp_path)
    assert off["dir"] is None and off["min"] == 1.0  # off: JAX's own setting untouched
    assert not (tmp_path / "xdg" / "dpjax").exists()
    assert _run({"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "2"}, tmp_path)["min"] == 2.0  # the user's choice
    mine = tmp_path / "mine"
    assert _run({"DPJAX_COMPILATION_CACHE": str(mine)}, tmp_path)["dir"] == str(mine)
    jax_own = tmp_path / "jax-own"
    assert _run({"JAX_COMPILATION_CACHE_DIR": str(jax_own)}, tmp_path)["dir"] == str(jax_own)
