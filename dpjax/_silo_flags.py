"""``--silo-devices N|all``, ``--silo-compute MODE`` and ``--silo-block B``: one run's silos over devices, from the
command line (``dpjax sweep``, ``dpjax run``, ``dpjax reproduce``; ``dpjax.engine.silo_sharding``); ``--distributed``
and its flags are ``dpjax.sweep.multihost``'s.

Pure Python (no jax): the flags are parsed and checked before a command loads anything; the device count is checked
against the devices once jax has loaded (``silo_sharding.resolve_devices``)."""

from __future__ import annotations

import argparse

from dpjax import _validate

SILO_COMPUTE = ("exact", "per-silo", "blocks")  # dpjax.engine.silo_sharding.SILO_COMPUTE


def _devices(text: str):
    try:
        return _validate.check_devices_spec("--silo-devices", text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


_devices.__name__ = "number of devices"


def add_arguments(parser) -> None:
    """Adds the three flags to ``parser`` (one argument group)."""
    g = parser.add_argument_group("one run's silos over devices (dpjax.engine.silo_sharding)")
    g.add_argument("--silo-devices", type=_devices, default=None, metavar="N|all",
                   help="split each run's silos over N devices (the first N local ones) or all (with --distributed, "
                        "every process's devices); the number of silos must be a multiple of N. Default: none (runs "
                        "are spread over the devices instead)")
    g.add_argument("--silo-compute", choices=SILO_COMPUTE, default=None,
                   help="with --silo-devices: exact (default: the data split over the devices, every device computes "
                        "all silos; the unsharded bits), per-silo (each device computes its silos; agrees to float "
                        "rounding) or blocks (each device its silos --silo-block at a time; the bits of one device "
                        "with the same --silo-block)")
    g.add_argument("--silo-block", type=_validate.flag_type("--silo-block", _validate.parse_int, _validate.check_int,
                                                            min_value=1),
                   default=None, metavar="B", help="with --silo-compute blocks: silos a device computes at a time")


def host_device_count() -> int | None:
    """This process's device count where it is known without loading jax, else None: with ``JAX_PLATFORMS=cpu`` (jax
    not loaded yet, ``JAX_NUM_CPU_DEVICES`` unset) it is XLA's host platform count, ``XLA_FLAGS``'s
    ``--xla_force_host_platform_device_count`` (default 1)."""
    import os
    import re
    import sys

    if "jax" in sys.modules or os.environ.get("JAX_PLATFORMS", "").strip().lower() != "cpu" \
            or "JAX_NUM_CPU_DEVICES" in os.environ:
        return None
    found = re.findall(r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", ""))
    return int(found[-1]) if found else 1


def check_host_devices(silo_devices, name: str = "--silo-devices") -> None:
    """Refuses a number of devices above ``host_device_count()`` before jax loads (the message
    ``silo_sharding.resolve_devices`` gives once it has); ``"all"``, None or an unknown count pass (checked later).
    Not for ``--distributed``, where a number may count every process's devices."""
    available = host_device_count()
    if isinstance(silo_devices, int) and available is not None and silo_devices > available:
        raise ValueError(f"{name}={silo_devices!r} asks for more devices than there are: {available} device(s) "
                         "available (cpu); XLA_FLAGS=--xla_force_host_platform_device_count=N (set before jax loads) "
                         "makes N host devices")


def layout(args, config: dict | None = None) -> dict:
    """``{"silo_devices", "silo_compute", "silo_block"}`` from the flags over ``config`` (a sweep's ``[run]`` table),
    checked for consistency (a ``ValueError`` naming the flag); ``{}`` when no run is sharded."""
    out = dict(config or {})
    for key in ("silo_devices", "silo_compute", "silo_block"):
        if getattr(args, key, None) is not None:
            out[key] = getattr(args, key)
    if not out:
        return {}
    compute = out.setdefault("silo_compute", "exact")
    if "silo_devices" not in out:
        flag = "--silo-block" if out.get("silo_block") is not None else f"--silo-compute={compute}"
        raise ValueError(f"{flag} needs --silo-devices N|all (the devices one run's silos are split over)")
    if compute == "blocks" and out.get("silo_block") is None:
        raise ValueError("--silo-compute=blocks needs --silo-block B (the silos a device computes at a time)")
    if compute == "per-silo" and out.get("silo_block") is not None:
        raise ValueError(f"--silo-block={out['silo_block']} with --silo-compute=per-silo: use --silo-compute=blocks")
    out.setdefault("silo_block", None)
    return out


def command_layout(args, name: str = "--silo-devices"):
    """The flags as a context around a command's compute: ``dpjax.engine.silo_sharding.layout`` (every
    ``engine.run_grid`` inside shards its runs' silos), or a null context without them. The device count is checked
    now (jax is loaded), before anything compiles; a command that ran no grid says the flags did nothing."""
    import contextlib

    chosen = layout(args)
    if not chosen:
        return contextlib.nullcontext()
    from dpjax.engine import silo_sharding

    silo_sharding.resolve_devices(chosen["silo_devices"], name)

    @contextlib.contextmanager
    def active():
        with silo_sharding.layout(**chosen) as current:
            yield current
        if not current.used:
            from dpjax import progress
            progress.stage(f"note: {name} did nothing: this command ran no grid of runs through "
                           "dpjax.engine.run_grid")

    return active()

