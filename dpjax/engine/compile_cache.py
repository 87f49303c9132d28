"""JAX's persistent compilation cache, on by default in dpjax's cache directory, so that a second process
running the same program (a resumed sweep, a figure re-drawn, the next CLI call) loads its executables
instead of compiling them again.

``dpjax.engine`` turns it on when imported, unless the user chose otherwise:

* ``DPJAX_COMPILATION_CACHE=0`` (or ``off``/``false``): off;
* ``DPJAX_COMPILATION_CACHE=DIR``: that directory;
* a cache directory already set for JAX (``jax.config.update("jax_compilation_cache_dir", ...)`` or
  ``$JAX_COMPILATION_CACHE_DIR``) is kept as it is;
* otherwise ``$XDG_CACHE_HOME/dpjax/jax-compilation`` (``~/.cache/dpjax/jax-compilation``).

Only programs that took at least JAX's ``jax_persistent_cache_min_compile_time_secs`` (1 s) to compile are
stored. A cached executable is the same program: results are bit-identical with and without the cache.
"""

from __future__ import annotations

import os
import pathlib

ENV_VAR = "DPJAX_COMPILATION_CACHE"
_OFF = ("0", "off", "false", "no")


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
    return str(directory)
