"""Roofline report: how far each compiled program of dpjax is from what this machine allows.

For every program measured (each reproduce figure's chunk programs, the DP
steps of ``bench_dp_step.py``) the report reads XLA's cost analysis of the
compiled program (``compiled.cost_analysis()``: ``flops``, ``bytes accessed``),
times the program, and compares it with the machine's peaks measured in the
same process:

* ``peak FLOP/s``: the best of a large float32 matmul (``2 n^3`` FLOPs);
* ``peak bytes/s``: the best of an elementwise copy-scale ``y = a x`` over
  several sizes (read + write = ``2 x`` the array), so the fastest level of the
  memory hierarchy the copy reached (cache for small arrays). The DRAM figure
  (largest size) is printed too.

Per program: achieved FLOP/s and bytes/s, ``floor = max(FLOPs / peak_flops,
bytes / peak_bw)`` and ``measured / floor``. Per full protocol (a figure):
the number of chunk calls, the measured time of the chunk calls (or, with
``--replay``, one measured call per distinct program times its number of
calls), the floor (sum of the calls' floors) and their ratio.

Loops. XLA's cost analysis counts the body of a ``while`` loop ONCE, whatever
its trip count (checked: a 100-step ``lax.scan`` of a matmul reports the FLOPs
of one step). A chunk program runs its rounds in ``lax.scan``, so its cost is
rebuilt from three loop-free variants of the same chunk (the same vmaps over
trials x repetitions x configurations, ``trace_run`` replaced)::

    C1 = init + round + eval        C2 = init + round + round + eval
    C3 = init + round + eval + round + eval
    round = C2 - C1,  eval = C3 - C2
    cost  = C1 + (R - 1) round + (E - 1) eval      (R rounds, E evaluations)

Host round loops (``round_loop="host"``, the CNN on CPU) are loop-free per
call: ``init + R round + E (output + eval)``.

Every other loop (a loop *inside* a round: local steps, a ``lax.map`` over
configurations wider than ``vmap_width``, the rolled Threefry hash of XLA:CPU;
the solver and phase loops of programs run outside ``ChunkProgram``) is
corrected from the optimized HLO (``hlo_cost.py``): XLA annotates each loop whose
trip count it proved (every ``lax.scan`` / ``fori_loop`` with static bounds),
and the model there, which mirrors XLA's own counting rules (checked against
XLA's numbers on loop-free programs in ``tests/benchmarks/test_hlo_cost.py``),
adds the ``n - 1`` iterations XLA left out. The column ``loops`` counts the
loops WITHOUT a known trip count, still counted once: where it is > 0 the FLOPs
and bytes are lower bounds (the floor lower than the truth, so measured / floor
overstates the distance to the floor, never understates it).

Bytes. XLA counts a fusion's operand as read whole unless it is only sliced;
a fused gather (a round reading its window of the users or a minibatch of the
records) or a slice behind a bitcast (round ``r``'s hparams) was counted as
reading the whole operand, so per-round bytes grew with the data or the number
of rounds. ``hlo_cost.gather_overcount`` removes that over-count.

Figures. ``--figures`` runs each named reproduction (``dpjax reproduce``'s
figure functions, ``--protocol quick`` or ``full``) with
``ChunkProgram.run_chunks`` patched to record every distinct chunk program
(static program + argument shapes), its number of calls, its cost and its
measured time per call, and every other compiled XLA program the figure runs
(``jax.jit``-ed functions it calls itself, engine entry points outside
``ChunkProgram``, eager ``jnp`` ops) is recorded where jit dispatch ends
(``Recorder``'s direct path: every call timed; a program whose cost analysis is
empty gets ``bound = no cost analysis`` and no ratio, and protocol ratios leave
it out). A figure that runs no compiled program (pure accounting) says so in
its protocol row. ``--replay`` (default for ``--protocol full``) runs
each distinct program twice (compile, then one timed call) and hands later
calls of the same program the first call's outputs, so a full protocol's
chunk programs are measured without running the protocol: its time is
extrapolated as ``sum(calls x time per call)``. Replayed outputs are the same
numbers for every call, so a driver's selection logic (step-size search)
may take a different path than the real run; the figure's own outputs are
written to a temporary directory and discarded.

Usage::

    PYTHONPATH=$PWD python experiments/benchmarks/roofline.py --out experiments/benchmarks/results
    python experiments/benchmarks/roofline.py --quick --figures none --out /tmp/r   # CI size
    # one figure a process (a crash or time limit loses one figure), no DP steps, no synthetic grid:
    python experiments/benchmarks/roofline.py --models --no-synthetic --figures isrl-mnist --protocol full \
        --replay --figure-timeout 150 --out experiments/benchmarks/results/roofline_full --stem isrl-mnist

Only ratios measured in one run mean anything on a shared machine; the peaks
are measured in the same process for that reason.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import importlib.util
import math
import os
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent


def _load_sibling(name: str):
    """A module of this folder, loaded by path (this script is itself loaded by path: not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hlo_cost = _load_sibling("hlo_cost")
CLOCK = time.perf_counter
COLUMNS = ["group", "program", "calls", "loops", "gflop", "mbytes", "measured_ms", "gflop_per_s", "gbytes_per_s",
           "floor_ms", "bound", "measured_over_floor"]
PROTOCOL_COLUMNS = ["figure", "protocol", "programs", "calls", "measured_s", "floor_s", "measured_over_floor",
                    "how"]


# ----------------------------------------------------------------------------- timing and peaks
def best_time(fn: Callable[[], Any], repeats: int, budget_s: float = 5.0) -> tuple[float, float]:
    """``(min, median)`` seconds of ``fn()`` (blocked until ready) over up to ``repeats`` calls after one
    warm-up call, stopping early once ``budget_s`` is spent (a slow program is timed fewer times)."""
    jax.block_until_ready(fn())
    times: list[float] = []
    start = CLOCK()
    while len(times) < repeats and (not times or CLOCK() - start < budget_s):
        t0 = CLOCK()
        jax.block_until_ready(fn())
        times.append(CLOCK() - t0)
    return min(times), statistics.median(times)


@dataclasses.dataclass(frozen=True)
class Peaks:
    flops: float  # FLOP/s of the best matmul
    bandwidth: float  # bytes/s of the best copy over the sizes tried
    bandwidth_dram: float  # bytes/s of the largest copy
    matmul_n: int
    copy_mib: tuple

    def floor(self, flops: float, nbytes: float) -> tuple[float, str]:
        t_flops, t_bytes = flops / self.flops, nbytes / self.bandwidth
        return (t_flops, "flops") if t_flops >= t_bytes else (t_bytes, "bytes")


def measure_peaks(quick: bool, repeats: int = 10) -> Peaks:
    """The machine's peaks in this process: float32 matmul FLOP/s and copy bytes/s."""
    n = 512 if quick else 2048
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    mm = jax.jit(lambda a, b: a @ b)
    t, _ = best_time(lambda: mm(a, b), repeats)
    flops = 2.0 * n ** 3 / t
    sizes = (1, 4, 16) if quick else (1, 4, 16, 64, 256)
    scale = jax.jit(lambda x: x * jnp.float32(1.0000001))
    bws = []
    for mib in sizes:
        x = jnp.ones((mib * 2 ** 20 // 4,), jnp.float32)
        t, _ = best_time(lambda: scale(x), repeats if mib < 64 else max(3, repeats // 3))
        bws.append(2.0 * x.nbytes / t)
    return Peaks(flops, max(bws), bws[-1], n, sizes)


def best_peaks(a: Peaks, b: Peaks) -> Peaks:
    """The better of two peak measurements (the machine can do at least the better one)."""
    return Peaks(max(a.flops, b.flops), max(a.bandwidth, b.bandwidth), max(a.bandwidth_dram, b.bandwidth_dram),
                 a.matmul_n, a.copy_mib)


def rescale(rows: list[dict], protocols: list[dict], peaks: Peaks) -> tuple[list[dict], list[dict]]:
    """Rows and protocols recomputed against ``peaks`` (floors and ratios; measured times unchanged)."""
    new_rows = []
    for r in rows:
        n = row(r["group"], r["program"], r["gflop"] * 1e9, r["mbytes"] * 1e6, r["measured_ms"] / 1e3, peaks,
                calls=r["calls"], loops=r["loops"])
        n.update({k: v for k, v in r.items() if k.startswith("_")})
        new_rows.append(n)
    new_protocols, factor = [], {}
    for p in protocols:
        if isinstance(p["calls"], int):
            mine = [r for r in new_rows if r["group"] == p["figure"]]
            floor = sum(r["calls"] * r["floor_ms"] / 1e3 for r in mine)
            factor[p["figure"]] = floor / p["floor_s"] if p["floor_s"] else 1.0
        else:  # an extrapolated row (device_suite's DIFF2 full protocol): its probe's floor, rescaled
            floor = p["floor_s"] * factor.get(p["figure"], 1.0)
        costed = p.get("_measured_costed_s", p["measured_s"])  # the time of the programs that have a floor
        new_protocols.append(dict(p, floor_s=floor, measured_over_floor=costed / floor if floor else None))
    return new_rows, new_protocols


def _cost(compiled) -> tuple[float, float, int]:
    """``(flops, bytes accessed, while loops still counted once)`` of a compiled program (``_corrected``)."""
    ca = compiled.cost_analysis()
    if isinstance(ca, (list, tuple)):
        ca = ca[0]
    return _corrected(ca, compiled.as_text())


def _corrected(ca: dict, hlo_text: str) -> tuple[float, float, int]:
    """XLA's ``flops`` and ``bytes accessed`` corrected from the optimized HLO (``hlo_cost``): less what XLA
    over-counts for gathers and viewed slices inside fusions (a round reading a window of the data was
    costed as reading all of it), plus the uncounted iterations of every loop with a known trip count
    (XLA counts a body once). The third number is the loops without a known trip count: still once."""
    flops, nbytes = float(ca.get("flops", 0.0)), float(ca.get("bytes accessed", 0.0))
    if not (flops or nbytes):
        return flops, nbytes, hlo_text.count(" while(")
    extra_flops, extra_bytes, unknown = hlo_cost.loop_extra(hlo_text)
    nbytes = max(nbytes - hlo_cost.gather_overcount(hlo_text), 0.0) + extra_bytes
    return flops + extra_flops, nbytes, unknown


NO_COST = "no cost analysis"  # the ``bound`` of a program whose XLA cost analysis gave neither FLOPs nor bytes


def row(group: str, program: str, flops: float, nbytes: float, seconds: float, peaks: Peaks, *, calls: int = 1,
        loops: int = 0) -> dict:
    """One program's row. A program whose cost analysis reported nothing (0 FLOPs and 0 bytes) has no floor:
    its ``bound`` says so and its ratio is empty (``None``), never ``inf``."""
    floor, bound = peaks.floor(flops, nbytes)
    if floor <= 0:
        bound = NO_COST
    return {"group": group, "program": program, "calls": calls, "loops": loops, "gflop": flops / 1e9,
            "mbytes": nbytes / 1e6, "measured_ms": seconds * 1e3,
            "gflop_per_s": flops / seconds / 1e9 if seconds > 0 else 0.0,
            "gbytes_per_s": nbytes / seconds / 1e9 if seconds > 0 else 0.0, "floor_ms": floor * 1e3, "bound": bound,
            "measured_over_floor": seconds / floor if floor > 0 else None}


# ----------------------------------------------------------------------------- DP steps
def _bench_dp_step():
    return _load_sibling("bench_dp_step")  # registered in sys.modules: its dataclasses look their module up there


DP_STEP_ROWS = ("private (ghost)", "non-private")


def dp_step_rows(models, batch: int, peaks: Peaks, repeats: int) -> list[dict]:
    """The DP steps of ``bench_dp_step.py`` (private ghost step and its non-private twin) per model."""
    bench = _bench_dp_step()
    rows = []
    for name in models:
        problem, x, y = bench.make_problem(name, batch, jax.random.key(0))
        params = problem.init_params(jax.random.key(1))
        args = (params, x, y, jax.random.key(2))
        steps = bench.make_steps(problem)
        for label in DP_STEP_ROWS:
            compiled = jax.jit(steps[label]).lower(*args).compile()
            flops, nbytes, loops = _cost(compiled)
            t, _ = best_time(lambda: compiled(*args), repeats)
            rows.append(row("dp-step", f"{name} {label} (batch {batch})", flops, nbytes, t, peaks, loops=loops))
    return rows


# ----------------------------------------------------------------------------- chunk programs
def _fake_trace_run(pattern: str):
    """A loop-free ``trace_run``: ``pattern`` of ``r`` (a round) and ``e`` (an evaluation) after ``init``."""
    from dpjax.engine import program as prog

    def trace_run(algorithm, eval_fn, eval_every, params, hparams, data, eval_data, run_key, *, flags=False):
        state = algorithm.init(params, hparams, data, run_key)
        metrics, evals, r = [], [], 0
        for c in pattern:
            if c == "r":
                state, m = prog._round(algorithm, state, data, run_key, jnp.int32(r))
                metrics.append(m)
                r += 1
            elif eval_fn is not None:
                evals.append(eval_fn(algorithm.output_params(state), eval_data))
        stack = lambda *xs: jnp.stack(xs)  # noqa: E731
        round_metrics = jax.tree_util.tree_map(stack, *metrics)
        if flags:  # as the engine's trace_run(flags=True): the two first-bad-round flags, not every metric
            from dpjax.engine import checks

            round_metrics = checks.run_flags(round_metrics, jnp)
        evals = jax.tree_util.tree_map(stack, *evals) if evals else {}
        return state, algorithm.output_params(state), round_metrics, evals

    return trace_run


def scan_chunk_cost(program, chunk_args) -> tuple[float, float, int, dict]:
    """Trip-count-corrected ``(flops, bytes, loops in a round, parts)`` of a scanned ``ChunkProgram``'s
    chunk (see the module docstring)."""
    from dpjax.engine import program as prog

    algorithm, eval_fn, eval_every, shape, vmap_width, _devices, options = program.static_key
    rounds = algorithm.num_rounds
    evals = len(prog.eval_schedule(rounds, eval_every)) if eval_fn is not None else 0
    costs = {}
    original = prog.trace_run
    try:
        for name, pattern in (("C1", "re"), ("C2", "rre"), ("C3", "rere")):
            prog.trace_run = _fake_trace_run(pattern)
            fn = prog.chunk_fn(algorithm, eval_fn, eval_every, shape, vmap_width, **dict(options))
            costs[name] = _cost(jax.jit(fn).lower(*chunk_args).compile())
    finally:
        prog.trace_run = original
    c1, c2, c3 = (np.array(costs[k][:2]) for k in ("C1", "C2", "C3"))
    per_round, per_eval = np.maximum(c2 - c1, 0), np.maximum(c3 - c2, 0)
    total = c1 + (rounds - 1) * per_round + max(evals - 1, 0) * per_eval
    loops = costs["C2"][2] - costs["C1"][2]
    return float(total[0]), float(total[1]), max(loops, costs["C1"][2]), {
        "round_flops": float(per_round[0]), "round_bytes": float(per_round[1]), "rounds": rounds, "evals": evals}


def host_chunk_cost(program, chunk_args) -> tuple[float, float, int, dict]:
    """``(flops, bytes, loops, parts)`` of a host-round-loop chunk: init + R rounds + E (output + eval)."""
    from dpjax.engine import program as prog

    hp, data, eval_data, kd, params = chunk_args
    width = program.shape[2]
    batched, common = width > 1, program.options.get("common_keys", True)
    hp = jax.tree_util.tree_map(lambda a: a[0] if batched else a[0, 0], hp)
    kd = kd[0, 0] if common or batched else kd[0, 0, 0]
    key_axis = 0 if batched and not common else None
    key = jax.random.wrap_key_data(kd)
    alg, eval_fn = program.algorithm, program.eval_fn
    init, one_round, output, evaluate = prog._host_programs(alg, eval_fn, batched, None, None, key_axis)
    state = init(params, hp, data, key)
    ci = _cost(init.lower(params, hp, data, key).compile())
    cr = _cost(one_round.lower(state, data, key, jnp.int32(0)).compile())
    co = _cost(output.lower(state).compile())
    ce = _cost(evaluate.lower(state, eval_data).compile())
    rounds = alg.num_rounds
    evals = len(prog.eval_schedule(rounds, program.eval_every)) if eval_fn is not None else 0
    flops = ci[0] + rounds * cr[0] + evals * (co[0] + ce[0]) + co[0]
    nbytes = ci[1] + rounds * cr[1] + evals * (co[1] + ce[1]) + co[1]
    return flops, nbytes, cr[2], {"round_flops": cr[0], "round_bytes": cr[1], "rounds": rounds, "evals": evals}


def _signature(args) -> str:
    leaves, tree = jax.tree_util.tree_flatten(args)
    return repr(tree) + repr([(np.shape(a), str(np.asarray(a).dtype)) for a in leaves])


@dataclasses.dataclass
class Recorded:
    name: str
    calls: int = 0
    chunks: int = 0
    seconds: float = 0.0  # measured seconds of one call (first timed call)
    total_seconds: float = 0.0  # measured seconds of all real calls (without --replay)
    real_calls: int = 0
    flops: float = 0.0
    nbytes: float = 0.0
    loops: int = 0
    parts: dict = dataclasses.field(default_factory=dict)
    out: Any = None


def _executable_cost(xla_executable) -> tuple[float, float, int]:
    """``(flops, bytes accessed, while loops)`` of a loaded XLA executable (``0, 0`` when XLA reports no cost)."""
    try:
        ca = xla_executable.cost_analysis()
    except Exception:  # noqa: BLE001  (a backend without cost analysis: the row says "no cost analysis")
        ca = None
    if isinstance(ca, (list, tuple)):
        ca = ca[0] if ca else None
    ca = ca or {}
    try:
        text = "\n".join(m.to_string() for m in xla_executable.hlo_modules())
    except Exception:  # noqa: BLE001
        text = ""
    return _corrected(ca, text)


class Recorder:
    """Records, costs and times every compiled program a figure runs.

    * Chunk programs: ``ChunkProgram.run_chunks`` is patched (one row per distinct static program + argument
      shapes; trip-count-corrected cost; ``--replay`` extrapolates their later calls).
    * Every other compiled XLA program (``direct``): a figure that calls ``jax.jit``-ed functions itself, or
      the engine entry points that do not go through ``ChunkProgram`` (and eager ``jnp`` ops, which run as
      small compiled programs), is recorded where every jit call ends: ``pxla.ExecuteReplicated.__call__``.
      While recording, jit's C++ fast path is switched off (``pjit._get_fastpath_data`` and
      ``MeshExecutable.create_cpp_call`` answer ``None``) so that every call of such a program reaches the
      Python dispatch path; each call is blocked until ready and timed (the figure loses its async
      dispatch overlap, so these times are an upper bound of the programs' share). Programs run inside a
      recorded chunk call are not counted twice. A function whose fast path was cached before recording
      started keeps it and is missed: run one figure per fresh recorder, as ``run_figure`` does.
    """

    def __init__(self, replay: bool, label: str = "", cost: bool = True, direct: bool = False):
        self.replay, self.label, self.cost, self.direct = replay, label, cost, direct
        self.programs: dict[str, Recorded] = {}
        self.executables: dict[int, tuple[Any, Recorded]] = {}  # id -> (executable kept alive, record)
        self._in_chunk = 0

    @contextlib.contextmanager
    def patch(self):
        from dpjax.engine.program import ChunkProgram

        original = ChunkProgram.run_chunks
        recorder = self

        def run_chunks(program, chunk_args):
            recorder._in_chunk += 1
            try:
                return recorder._call(original, program, chunk_args)
            finally:
                recorder._in_chunk -= 1

        ChunkProgram.run_chunks = run_chunks
        try:
            with (self._patch_direct() if self.direct else contextlib.nullcontext()):
                yield self
        finally:
            ChunkProgram.run_chunks = original

    @contextlib.contextmanager
    def _patch_direct(self):
        from jax._src import pjit
        from jax._src.interpreters import pxla

        recorder = self
        execute, fastpath, cpp_call = pxla.ExecuteReplicated.__call__, pjit._get_fastpath_data, \
            pxla.MeshExecutable.create_cpp_call

        def call(executable, *args):
            if recorder._in_chunk:
                return execute(executable, *args)
            t0 = CLOCK()
            out = jax.block_until_ready(execute(executable, *args))
            recorder._direct_call(executable, CLOCK() - t0)
            return out

        pxla.ExecuteReplicated.__call__ = call
        pjit._get_fastpath_data = lambda *a, **k: None
        pxla.MeshExecutable.create_cpp_call = lambda self, params: None
        try:
            yield
        finally:
            pxla.ExecuteReplicated.__call__ = execute
            pjit._get_fastpath_data = fastpath
            pxla.MeshExecutable.create_cpp_call = cpp_call

    def _direct_call(self, executable, seconds: float) -> None:
        entry = self.executables.get(id(executable))
        if entry is None or entry[0] is not executable:
            rec = Recorded(f"{self.label}jit {executable.name} #{len(self.executables)}")
            if self.cost:
                rec.flops, rec.nbytes, rec.loops = _executable_cost(executable.xla_executable)
            entry = self.executables[id(executable)] = (executable, rec)
        rec = entry[1]
        rec.calls += 1
        rec.real_calls += 1
        rec.total_seconds += seconds
        rec.seconds = rec.total_seconds / rec.real_calls  # mean per call: every call ran for real

    def _describe(self, program) -> str:
        alg = program.static_key[0] if program.round_loop == "scan" else program.algorithm
        return (f"{self.label}{type(alg).__name__} {type(getattr(alg, 'problem', None)).__name__} "
                f"R={alg.num_rounds} chunk={'x'.join(map(str, program.shape))} {program.round_loop}")

    def _call(self, original, program, chunk_args):
        static = program.static_key if program.round_loop == "scan" else (
            program.algorithm, program.eval_fn, program.eval_every, program.shape, program.round_loop,
            tuple(sorted(program.options.items())))
        key = repr(static) + _signature(chunk_args[0])
        rec = self.programs.get(key)
        first = rec is None
        if first:
            rec = self.programs[key] = Recorded(f"{self._describe(program)} #{len(self.programs)}")
        rec.calls += 1
        rec.chunks += len(chunk_args)
        if first:
            original(program, chunk_args)  # compile + warm-up
            # the best of up to 5 calls within ~1 s (one call when a call is slower): a shared machine
            times, spent = [], 0.0
            while not times or (len(times) < 5 and spent < 1.0):
                t0 = CLOCK()
                out = original(program, chunk_args)
                times.append(CLOCK() - t0)
                spent += times[-1]
            rec.seconds = min(times)
            rec.total_seconds += rec.seconds
            rec.real_calls += 1
            rec.out = out[:1]
            if self.cost:
                cost = scan_chunk_cost if program.round_loop == "scan" else host_chunk_cost
                flops, nbytes, loops, parts = cost(program, chunk_args[0])
                # one call runs len(devices) chunks side by side (idle devices redo the last one)
                ndev = len(program.devices)
                rec.flops, rec.nbytes, rec.loops, rec.parts = flops * ndev, nbytes * ndev, loops, parts
            return out
        if self.replay:
            return [rec.out[0]] * len(chunk_args)
        t0 = CLOCK()
        out = original(program, chunk_args)
        rec.total_seconds += CLOCK() - t0
        rec.real_calls += 1
        return out

    def rows(self, group: str, peaks: Peaks) -> list[dict]:
        out = []
        for rec in [*self.programs.values(), *(r for _, r in self.executables.values())]:
            r = row(group, rec.name, rec.flops, rec.nbytes, rec.seconds, peaks, calls=rec.calls, loops=rec.loops)
            r.update({f"_{k}": v for k, v in rec.parts.items()})
            out.append(r)
        return out

    def protocol(self, figure: str, protocol: str, peaks: Peaks) -> dict:
        """The figure's protocol row: chunk programs (extrapolated with ``--replay``, else every call timed)
        plus every directly run compiled program (every call timed). The ratio is over the programs with a
        cost analysis; the ``how`` column names what it leaves out."""
        recs = list(self.programs.values())
        direct = [r for _, r in self.executables.values()]
        hows = []
        if recs:
            hows.append(f"{len(recs)} chunk program(s): " + (
                "calls x one timed call per program (replay)" if self.replay else "every chunk call timed"))
        if direct:
            hows.append(f"{len(direct)} directly run jit program(s) ({sum(r.calls for r in direct)} calls): "
                        "every call timed, blocked")
        if not recs and not direct:
            hows.append("no compiled XLA program ran: the figure is host Python/NumPy (see wall_s)")
        chunk_time = (lambda r: r.calls * r.seconds) if self.replay else (lambda r: r.total_seconds)
        timed = [(chunk_time(r), r) for r in recs] + [(r.total_seconds, r) for r in direct]
        measured = sum(t for t, _ in timed)
        floors = [(t, r.calls * peaks.floor(r.flops, r.nbytes)[0]) for t, r in timed]
        costed = [(t, f) for t, f in floors if f > 0]
        floor = sum(f for _, f in costed)
        interrupted = [r for r in recs if r.real_calls == 0]  # a time limit hit its compile or first call
        if interrupted:
            hows.append(f"{len(interrupted)} chunk program(s) interrupted before their first timed call "
                        f"({sum(r.calls for r in interrupted)} calls, no time, no cost)")
        cut = [r for r in recs if r.real_calls > 0 and self.cost and not r.parts]  # timed; cost step cut
        if cut:
            hows.append(f"{len(cut)} chunk program(s) timed but their cost step cut by the time limit")
        uncosted = [t for (t, f), (_, r) in zip(floors, timed) if f <= 0 and r.real_calls > 0]
        if uncosted:
            hows.append(f"{len(uncosted)} program(s) with no cost analysis ({sum(uncosted):.3g} s) left out of "
                        "floor and ratio")
        ratio = sum(t for t, _ in costed) / floor if floor > 0 else None
        return {"figure": figure, "protocol": protocol, "programs": len(recs) + len(direct),
                "calls": sum(r.calls for r in recs + direct), "measured_s": measured, "floor_s": floor,
                "measured_over_floor": ratio, "how": "; ".join(hows),
                "_measured_costed_s": sum(t for t, _ in costed)}


# ----------------------------------------------------------------------------- figures
def run_figure(name: str, protocol: str, replay: bool, peaks: Peaks, data_dir=None, seed: int = 0,
               log=print) -> tuple[list[dict], dict]:
    """Runs reproduce figure ``name`` under a ``Recorder``; returns its program rows and protocol row."""
    from dpjax import reproduce

    fig = reproduce.get(name)
    recorder = Recorder(replay, label=f"{name}: ", direct=True)
    kwargs = {"quick": protocol == "quick", "seed": seed}
    if fig.reads_data:
        kwargs["data_dir"] = data_dir
    t0 = CLOCK()
    abandoned = None
    with tempfile.TemporaryDirectory() as tmp, recorder.patch():
        try:
            fig.fn(pathlib.Path(tmp), **kwargs)
        except _FigureTimeout as err:  # keep the programs recorded so far
            if not recorder.programs and not recorder.executables:
                raise
            abandoned = str(err)
    wall = CLOCK() - t0
    proto = recorder.protocol(name, protocol, peaks)
    proto["wall_s"] = wall
    if abandoned:
        proto["how"] += f" (figure {abandoned}: the programs and calls up to then)"
    log(f"  {name} ({protocol}): {proto['programs']} programs, {proto['calls']} calls, wall {wall:.1f} s")
    return recorder.rows(name, peaks), proto


def synthetic_grid(peaks: Peaks, quick: bool) -> tuple[list[dict], dict]:
    """A small ISRL Noisy MB-SGD grid on random data through ``run_grid`` (no dataset needed): the
    recorder path of the figures, used by the CI test."""
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.engine import SiloData, run_grid
    from dpjax.problems import LogisticRegression

    n_silos, n, d, rounds, lanes = (4, 64, 8, 10, 4) if quick else (25, 1238, 50, 35, 60)
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(n, d)).astype(np.float32) for _ in range(n_silos)]
    ys = [(x[:, 0] > 0).astype(np.float32) for x in xs]
    data = SiloData.from_silos(xs, ys)
    alg = NoisyMbSgd(LogisticRegression(d), rounds, max(n // 4, 1), output="average")
    hps = MbSgdHParams.create(jnp.exp(jnp.linspace(-4.0, 0.0, lanes)), noise_multiplier=jnp.full(lanes, 1.0),
                              clip_norm=jnp.ones(lanes))
    from dpjax import keys

    run_keys = jnp.stack([keys.run_key(0, 0)] * lanes)
    recorder = Recorder(replay=False, label="synthetic: ")
    with recorder.patch():
        run_grid(alg, data, hps, run_keys, chunk_size=lanes)
    return recorder.rows("synthetic", peaks), recorder.protocol("synthetic", "quick" if quick else "full", peaks)


class _FigureTimeout(BaseException):
    pass


@contextlib.contextmanager
def _time_limit(seconds):
    """Raises ``_FigureTimeout`` after ``seconds`` (SIGALRM; main thread only), none when ``None``."""
    if not seconds:
        yield
        return
    import signal

    def handler(signum, frame):
        raise _FigureTimeout(f"abandoned after {seconds} s")

    previous = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ----------------------------------------------------------------------------- output
def _fmt(v) -> str:
    if v is None:  # a ratio without a floor (no cost analysis): the bound / how column says why
        return "n/a"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.3e}"
    return str(v)


def markdown(rows: list[dict], protocols: list[dict], peaks: Peaks, note: str = "") -> str:
    lines = [f"Peaks (this process): {peaks.flops / 1e9:.1f} GFLOP/s (float32 matmul n={peaks.matmul_n}), "
             f"{peaks.bandwidth / 1e9:.1f} GB/s best copy (sizes {', '.join(f'{m} MiB' for m in peaks.copy_mib)}), "
             f"{peaks.bandwidth_dram / 1e9:.1f} GB/s at {peaks.copy_mib[-1]} MiB.", ""]
    if note:
        lines += [note, ""]
    cols = COLUMNS
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r[c]) for c in cols) + " |" for r in rows]
    if protocols:
        lines += ["", "| " + " | ".join(PROTOCOL_COLUMNS) + " |", "|" + "---|" * len(PROTOCOL_COLUMNS)]
        lines += ["| " + " | ".join(_fmt(p[c]) for c in PROTOCOL_COLUMNS) + " |" for p in protocols]
    return "\n".join(lines) + "\n"


def write(out: pathlib.Path, rows: list[dict], protocols: list[dict], peaks: Peaks, stem: str = "roofline",
          note: str = "") -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    if protocols:
        with open(out / f"{stem}_protocols.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=PROTOCOL_COLUMNS + ["wall_s"], extrasaction="ignore")
            w.writeheader()
            w.writerows(protocols)
    (out / f"{stem}.md").write_text(markdown(rows, protocols, peaks, note))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (CI): small peaks, batch 16, synthetic grid")
    ap.add_argument("--out", type=pathlib.Path, default=None, help="write roofline.csv / roofline.md here")
    ap.add_argument("--models", nargs="*", default=None, help="DP-step models (default mlp cnn transformer)")
    ap.add_argument("--batch", type=int, default=None, help="DP-step batch (default 256; 16 with --quick)")
    ap.add_argument("--figures", nargs="*", default=None,
                    help="reproduce figures to record ('none': only the synthetic grid; default: all)")
    ap.add_argument("--protocol", choices=("quick", "full"), default="quick")
    ap.add_argument("--replay", action=argparse.BooleanOptionalAction, default=None,
                    help="one timed call per distinct chunk program, later calls replayed (default: on for full)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--synthetic", action=argparse.BooleanOptionalAction, default=True,
                    help="also record the synthetic grid (off: only the named figures, e.g. one figure a process)")
    ap.add_argument("--stem", default="roofline", help="output file names: STEM.csv, STEM.md, STEM_protocols.csv")
    ap.add_argument("--note", default="", help="a line for the markdown (machine load, ...)")
    ap.add_argument("--figure-timeout", type=int, default=None,
                    help="seconds after which a figure is abandoned (reported as skipped)")
    args = ap.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 10)
    models = args.models if args.models is not None else ["mlp", "cnn", "transformer"]
    batch = args.batch or (16 if args.quick else 256)
    replay = args.replay if args.replay is not None else args.protocol == "full"
    if args.figures is None:
        from dpjax import reproduce

        figures = [] if args.quick else [n for n, f in reproduce.figures().items()]
    else:
        figures = [f for f in args.figures if f != "none"]

    load0 = os.getloadavg()[0]
    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({len(jax.devices())} device(s)); "
          f"load average {load0:.1f}", flush=True)
    peaks = measure_peaks(args.quick, repeats=max(repeats, 3))
    print(f"peaks: {peaks.flops / 1e9:.1f} GFLOP/s, {peaks.bandwidth / 1e9:.1f} GB/s "
          f"({peaks.bandwidth_dram / 1e9:.1f} GB/s at {peaks.copy_mib[-1]} MiB)", flush=True)
    rows = dp_step_rows(models, batch, peaks, repeats)
    protocols = []
    if args.synthetic:
        srows, sproto = synthetic_grid(peaks, args.quick)
        rows += srows
        protocols.append(sproto)
    for name in figures:
        try:
            with _time_limit(args.figure_timeout):
                frows, fproto = run_figure(name, args.protocol, replay, peaks, data_dir=args.data_dir)
        except (Exception, _FigureTimeout) as err:  # a figure without its data (or failing under replay) is reported, not fatal
            print(f"  {name}: skipped ({type(err).__name__}: {str(err)[:200]})", flush=True)
            continue
        rows += frows
        protocols.append(fproto)
    # The machine is shared: a peak measured while other jobs ran is too low (the floor too high). The
    # peaks are measured again at the end and the better of the two is the machine's peak.
    peaks = best_peaks(peaks, measure_peaks(args.quick, repeats=max(repeats, 3)))
    rows, protocols = rescale(rows, protocols, peaks)
    note = args.note or f"load average at start {load0:.1f}, at end {os.getloadavg()[0]:.1f} (shared machine)"
    text = markdown(rows, protocols, peaks, note)
    print(text, flush=True)
    if args.out is not None:
        write(args.out, rows, protocols, peaks, stem=args.stem, note=note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
