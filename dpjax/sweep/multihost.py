"""One sweep on several hosts with JAX's multi-process runtime.

A sweep's chunks are independent compiled programs (no collective crosses a chunk), so several processes can share one
sweep: process ``i`` of ``P`` computes chunks ``i, i+P, i+2P, ...`` on its own ``jax.local_devices()`` (``shard_map``
over the runs axis, as on one host) and writes them into the shared sweep directory, whose writes are atomic and whose
temporaries carry host + pid. The stored tables are bit-identical to a single-process sweep of the same config (same
chunk tiling, same per-chunk program).

Two ways to say which process is which:

* **JAX's runtime** (``dpjax sweep CONFIG --out DIR --distributed``): every process calls ``jax.distributed.initialize``
  (``initialize`` below) and takes its index and the count from ``jax.process_index()`` / ``jax.process_count()``. The
  coordinator address, process count and id come from ``--coordinator HOST:PORT --num-processes P --process-id I`` or,
  when omitted, from JAX's own detection: ``JAX_COORDINATOR_ADDRESS`` and the cluster environments JAX knows (SLURM,
  Open MPI, Kubernetes, Cloud TPU). Processes with index > 0 wait for process 0 to write ``DIR/config.json`` before
  starting, so all adopt its automatic chunk tiling; at the end every process waits for the others
  (``jax.distributed.shutdown``), then prints how much of the sweep the directory holds.
* **Manual** (``--process-index i --process-count P``): no runtime at all; each host is started by hand (or by a job
  array) with its index.

Recipe (two hosts sharing ``/shared`` (NFS, Lustre, ...); the same config file on both)::

    # host A (10.0.0.1), process 0: also runs the coordinator on port 1234
    dpjax sweep sweep.toml --out /shared/sw --distributed \\
        --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0
    # host B, process 1
    dpjax sweep sweep.toml --out /shared/sw --distributed \\
        --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 1

    # under SLURM (one task per host): JAX reads the job's environment
    srun --ntasks-per-node=1 dpjax sweep sweep.toml --out /shared/sw --distributed

Several processes on one host work the same way (each with its own devices; e.g. ``CUDA_VISIBLE_DEVICES`` or
``JAX_LOCAL_DEVICE_IDS``); on CPU, set ``JAX_COORDINATOR_BIND_ADDRESS=127.0.0.1:PORT`` to keep the coordinator on the
loopback interface. If a process dies, the chunks already stored stay valid: rerun the same command (any number of
processes) and it resumes. Hosts with different devices can choose different automatic tilings only in manual mode;
there, set ``chunk_size`` in the config.
"""

from __future__ import annotations

import inspect
import re

from dpjax import _validate

_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^:\s\[\]]+):(\d{1,5})$")


def check_coordinator(address) -> str:
    """``"HOST:PORT"`` (``[v6]:PORT`` for IPv6 literals) or a ValueError naming ``coordinator``."""
    if not isinstance(address, str) or not _HOST_PORT.match(address):
        raise ValueError(f"coordinator={address!r} must be HOST:PORT (e.g. 10.0.0.1:1234)")
    port = int(_HOST_PORT.match(address).group(2))
    if not 0 < port < 65536:
        raise ValueError(f"coordinator={address!r} has port {port}; it must be in 1..65535")
    return address


def is_initialized() -> bool:
    """Whether ``jax.distributed.initialize`` has run in this process."""
    import jax
    fn = getattr(jax.distributed, "is_initialized", None)
    if fn is not None:
        return bool(fn())
    from jax._src import distributed  # older JAX: no public predicate
    return distributed.global_state.client is not None


def initialize(coordinator_address: str | None = None, num_processes: int | None = None, process_id: int | None = None,
               *, initialization_timeout: int = 300, shutdown_timeout: int | None = None) -> tuple[int, int]:
    """Joins JAX's multi-process runtime; returns ``(process_index, process_count)``.

    Arguments left ``None`` are detected by JAX (``JAX_COORDINATOR_ADDRESS``, SLURM, Open MPI, Kubernetes, Cloud TPU).
    Must run before this process uses JAX for anything else (JAX's rule). Calling it again in a process that has already
    joined returns the same share without reconnecting.

    Args:
      coordinator_address: ``HOST:PORT`` of process 0's coordinator service.
      num_processes: P, the number of processes in the sweep.
      process_id: this process's id in ``[0, P)``.
      initialization_timeout: seconds to wait for every process to connect.
      shutdown_timeout: seconds a finished process waits at the end for the others (``finish``); ``None`` keeps JAX's
        default (300 s). Only the coordinator's value (process 0) matters.
    """
    import jax
    if coordinator_address is not None:
        check_coordinator(coordinator_address)
    if num_processes is not None:
        _validate.check_int("num_processes", num_processes, min_value=1)
    if process_id is not None:
        _validate.check_int("process_id", process_id, min_value=0)
        if num_processes is not None and process_id >= num_processes:
            raise ValueError(f"process_id={process_id} must be in [0, num_processes={num_processes})")
    _validate.check_int("initialization_timeout", initialization_timeout, min_value=1)
    if shutdown_timeout is not None:
        _validate.check_int("shutdown_timeout", shutdown_timeout, min_value=1)
    if is_initialized():
        return process_share()
    kwargs = dict(coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id,
                  initialization_timeout=initialization_timeout)
    if shutdown_timeout is not None and "shutdown_timeout_seconds" in inspect.signature(jax.distributed.initialize).parameters:
        kwargs["shutdown_timeout_seconds"] = shutdown_timeout
    try:
        jax.distributed.initialize(**kwargs)
    except ValueError as err:  # JAX could not detect what was not given
        raise ValueError(
            f"distributed: jax.distributed.initialize failed ({err}); pass coordinator_address/num_processes/"
            "process_id (--coordinator HOST:PORT --num-processes P --process-id I), or run under a cluster "
            "manager JAX detects (SLURM, Open MPI, Kubernetes, Cloud TPU; JAX_COORDINATOR_ADDRESS sets the address)"
        ) from None
    except RuntimeError as err:
        if "before" in str(err):  # "must be called before any JAX computations are executed"
            raise ValueError(f"distributed: {err} (call dpjax.sweep.multihost.initialize first)") from None
        raise
    return process_share()


def process_share() -> tuple[int, int]:
    """``(jax.process_index(), jax.process_count())``: this process's share of the chunks."""
    import jax
    return int(jax.process_index()), int(jax.process_count())


def finish() -> None:
    """Waits until every process has finished, then leaves the runtime (no-op when not joined).

    ``jax.distributed.shutdown`` is a barrier: it returns once all processes have called it (or the coordinator's
    shutdown timeout has passed), so afterwards the shared directory holds every process's chunks.
    """
    import jax
    if is_initialized():
        jax.distributed.shutdown()


# ----------------------------------------------------------------------------- the runtime flags of every command

INIT_TIMEOUT = 300  # s: all processes must connect within this
SHUTDOWN_TIMEOUT = 3600  # s: a process that finished its share waits this long for the others
DISTRIBUTED_ONLY = ("coordinator", "num_processes", "process_id", "init_timeout", "shutdown_timeout")


def add_distributed_arguments(parser, what: str) -> None:
    """``--distributed`` and the runtime's flags (one argument group); ``what`` says what the processes share."""
    d = parser.add_argument_group("JAX multi-process runtime (jax.distributed)")
    d.add_argument("--distributed", action="store_true",
                   help=f"join JAX's multi-process runtime; {what}")
    d.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="process 0's coordinator address (default: JAX_COORDINATOR_ADDRESS or cluster detection)")
    d.add_argument("--num-processes", type=int, default=None, help="number of processes (default: detected)")
    d.add_argument("--process-id", type=int, default=None, help="this process's id (default: detected)")
    d.add_argument("--init-timeout", type=int, default=None,
                   help=f"seconds to wait for all processes to connect (default {INIT_TIMEOUT})")
    d.add_argument("--shutdown-timeout", type=int, default=None,
                   help=f"seconds a finished process waits for the others at the end (default {SHUTDOWN_TIMEOUT})")


def join_runtime(args) -> tuple[int, int]:
    """``(process_index, process_count)``: joins JAX's runtime with ``--distributed`` (before anything else touches
    JAX, as ``jax.distributed.initialize`` must), ``(0, 1)`` without it; a runtime flag without ``--distributed`` is a
    ``ValueError`` naming it."""
    if not getattr(args, "distributed", False):
        for k in DISTRIBUTED_ONLY:
            if getattr(args, k, None) is not None:
                flag = f"--{k.replace('_', '-')}"
                raise ValueError(f"{flag} needs --distributed (JAX's multi-process runtime); got "
                                 f"{flag}={getattr(args, k)!r}")
        return 0, 1
    return initialize(
        args.coordinator, args.num_processes, args.process_id,
        initialization_timeout=INIT_TIMEOUT if args.init_timeout is None else args.init_timeout,
        shutdown_timeout=SHUTDOWN_TIMEOUT if args.shutdown_timeout is None else args.shutdown_timeout)


def check_one_run_distributed(args, command: str) -> None:
    """``dpjax run`` / ``dpjax reproduce`` compute one figure's grids, so ``--distributed`` means one run's silos over
    every process's devices: it needs ``--silo-devices all`` (checked before the runtime is joined)."""
    if getattr(args, "distributed", False) and getattr(args, "silo_devices", None) != "all":
        raise ValueError(f"--distributed with `dpjax {command}` needs --silo-devices all: every process computes the "
                         "same grids over all processes' devices (process 0 writes the output); to split a grid's "
                         "runs over processes use `dpjax sweep CONFIG --distributed`")


def follower_output(index: int):
    """Where process ``index`` writes: process 0 the command's ``--out``; the others compute the same replicated
    results, so theirs go to a scratch directory removed at the end (a shared file system never sees two writers)."""
    import contextlib
    import tempfile

    if index == 0:
        return contextlib.nullcontext(None)
    return tempfile.TemporaryDirectory(prefix=f"dpjax-process-{index}-")


def leave_runtime() -> None:
    """The end-of-command barrier of ``--distributed`` (no-op otherwise): every process has finished."""
    finish()
