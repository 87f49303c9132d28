"""JAX's persistent compilation cache, on by default in dpjax's cache directory, so that a second process
running the same program (a resumed sweep, a figure re-drawn, the next CLI call) loads its executables
instead of compiling them again.

``dpjax.engine`` turns it on when imported, unless the user chose otherwise:

* ``DPJAX_COMPILATION_CACHE=0`` (or ``off``/``false``): off;
* ``DPJAX_COMPILATION_CACHE=DIR``: that directory;
* a cache directory already set for JAX (``jax.config.update("jax_compilation_cache_dir", ...)`` or
  ``$JAX_COMPILATION_CACHE_DIR``) is kept as it is;
* otherwise ``$XDG_CACHE_HOME/dpjax/jax-compilation`` (``~/.cache/dpjax/jax-compilation``).

Only programs that took at least ``jax_persistent_cache_min_compile_time_secs`` to compile are stored. Where dpjax
turns the cache on and that option is still JAX's default (1 s; not set in code or by
``$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS``), dpjax lowers it to ``MIN_COMPILE_TIME_S`` (0.05 s): a run's
programs of 0.05-1 s (its parameter init, evaluation, the engine's small steps) would otherwise compile again in
every process -- 0.55 s of the 0.77 s of compiling left in a warm start of the MNIST DP-FedAvg benchmark, idle
(issue #38, ``experiments/benchmarks/bench_startup.py``). A cached executable is the same program: results are bit-identical with and without the cache.
"""

from __future__ import annotations

import os
import pathlib

ENV_VAR = "DPJAX_COMPILATION_CACHE"
_OFF = ("0", "off", "false", "no")
MIN_COMPILE_TIME_S = 0.05
_JAX_DEFAULT_MIN_COMPILE_TIME_S = 1.0


def default_directory() -> pathlib.Path | None:
    """Where dpjax puts JAX's compilation cache, or None when ``$DPJAX_COMPILATION_CACHE`` turns it off."""
    from dpjax.data.paths import default_cache_dir

    choice = os.environ.get(ENV_VAR, "").strip()
    if choice.lower() in _OFF:
        return None
    return pathlib.Path(choice).expanduser() if choice else default_cache_dir() / "jax-compilation"


def enable_default() -> str | None:
    """Turns the cache on at ``default_directory()`` unless JAX already has a cache directory or the user
    turned it off; returns the directory in use (None: off)."""
    import jax

    current = jax.config.jax_compilation_cache_dir
    if current:
        return current
    directory = default_directory()
    if directory is None:
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    if ("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ
            and jax.config.jax_persistent_cache_min_compile_time_secs == _JAX_DEFAULT_MIN_COMPILE_TIME_S):
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
    return str(directory)
