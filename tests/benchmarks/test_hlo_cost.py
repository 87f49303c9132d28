"""The roofline's byte correction (experiments/benchmarks/hlo_cost.py): a fused gather, or a slice behind
a bitcast, reads a window of its operand, not all of it; an operand any other op reads stays counted whole.

Each test compiles a small program on CPU and compares XLA's own ``bytes accessed`` with the corrected
count; the bounds come from the shapes (the window's bytes, the operand's bytes), not from recorded values.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import jax
import jax.numpy as jnp
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _module(name):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "experiments" / "benchmarks" / f"{name}.py")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _costs(fn, *args):
    compiled = jax.jit(fn).lower(*args).compile()
    ca = compiled.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    text = compiled.as_text()
    return float(ca["bytes accessed"]), _module("hlo_cost").gather_overcount(text), text


ROWS, COLS, TAKE = 100_000, 16, 8


def test_a_fused_gather_of_rows_is_counted_by_the_rows_it_reads():
    data = jnp.ones((ROWS, COLS), jnp.float32)
    idx = jnp.arange(TAKE, dtype=jnp.int32) * 7
    xla, over, text = _costs(lambda x, i: jnp.tanh(x[i]) * 2.0, data, idx)
    assert "gather" in text
    whole = ROWS * COLS * 4
    assert xla >= whole  # XLA counts the whole data array
    corrected = xla - over
    window = TAKE * COLS * 4
    # the window read, its output written, the indices: a few windows, never the array
    assert window <= corrected <= 4 * window + 64, (xla, over)


def test_a_slice_behind_a_bitcast_is_counted_by_the_slice():
    """A ``[1, 2, R]`` hparams array bitcast to ``[2, R]`` and sliced at one round, fused with arithmetic:
    the per-round count must not grow with R."""
    def round_value(h, r):
        return jnp.sin(h.reshape(2, -1)[:, r]) + 1.0

    corrected = {}
    for rounds in (1_000, 100_000):
        h = jnp.ones((1, 2, rounds), jnp.float32)
        xla, over, _ = _costs(lambda h: round_value(h, 3), h)
        corrected[rounds] = xla - over
    assert corrected[1_000] == corrected[100_000] <= 64, corrected


def test_an_operand_read_whole_elsewhere_keeps_its_count():
    data = jnp.ones((ROWS, COLS), jnp.float32)
    idx = jnp.arange(TAKE, dtype=jnp.int32)
    # the same fusion gathers rows and sums the whole array: all of it is read, nothing is corrected
    xla, over, _ = _costs(lambda x, i: jnp.tanh(x[i]) * jnp.sum(x), data, idx)
    assert xla >= ROWS * COLS * 4
    assert xla - over >= ROWS * COLS * 4


def test_programs_without_windows_are_unchanged():
    a = jnp.ones((256, 256), jnp.float32)
    _, over, _ = _costs(lambda a: jnp.tanh(a @ a).sum(), a)
    assert over == 0


def test_shape_bytes_of_arrays_and_tuples():
    hb = _module("hlo_cost")
    assert hb.shape_bytes("f32[2,3]{1,0}") == 24
    assert hb.shape_bytes("(s32[], f64[4]{0}, pred[3]{0})") == 4 + 32 + 3
    assert hb.shape_bytes("f32[]") == 4


@pytest.mark.slow
def test_a_user_stream_round_costs_the_same_whatever_the_number_of_rounds():
    """P_SGD's one-pass rounds read a window of the users: the chunk's rebuilt per-round bytes must not grow
    with n (R = n / batch rounds); before the correction they grew tenfold with n (0.13 -> 1.5 MB)."""
    import importlib

    from dpjax.engine.program import ChunkProgram
    from dpjax.reproduce.shuffle_sco.config import INSTANCES, TABLE1

    roofline = _module("roofline")
    measure = importlib.import_module("dpjax.reproduce.shuffle_sco.measure")
    inst = INSTANCES[TABLE1["p_sgd"][0]]
    per_round, rounds = {}, {}
    for n in (2_000, 20_000):
        rec = roofline.Recorder(replay=False)
        with rec.patch():
            measure.measure_point("p_sgd", inst, n, 10, 1, 0, measure.EPS_RATES, "lan", variants=False)
        (r,) = rec.programs.values()
        per_round[n], rounds[n] = r.parts["round_bytes"], r.parts["rounds"]
    assert rounds[20_000] >= 5 * rounds[2_000]  # the schedule did lengthen
    assert per_round[2_000] == per_round[20_000] > 0, per_round
    assert ChunkProgram.run_chunks.__name__ == "run_chunks"  # the patch was undone


# ----------------------------------------------------------------------------- loops
N = 64


def _matmul_flops():
    return 2.0 * N ** 3


def _corrected(fn, *args):
    compiled = jax.jit(fn).lower(*args).compile()
    ca = compiled.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    extra_flops, extra_bytes, unknown = _module("hlo_cost").loop_extra(compiled.as_text())
    return float(ca["flops"]), float(ca["flops"]) + extra_flops, unknown, compiled.as_text()


@pytest.mark.parametrize("rounds", [10, 37])
def test_a_scan_is_costed_for_every_iteration(rounds):
    a = jnp.ones((N, N), jnp.float32) / N

    def fn(a):
        return jax.lax.scan(lambda c, _: (jnp.sin(c @ a), None), a, None, length=rounds)[0]

    xla, corrected, unknown, _ = _corrected(fn, a)
    assert xla < 2 * _matmul_flops()  # XLA: the body once
    assert unknown == 0
    assert rounds * _matmul_flops() <= corrected <= rounds * _matmul_flops() * 1.02, (xla, corrected)


def test_nested_loops_multiply_their_trip_counts():
    a = jnp.ones((N, N), jnp.float32) / N

    def inner(c):
        return jax.lax.fori_loop(0, 4, lambda i, c: jnp.cos(c @ a), c)

    def fn(a):
        return jax.lax.scan(lambda c, _: (inner(c), None), a, None, length=3)[0]

    _, corrected, unknown, _ = _corrected(fn, a)
    assert unknown == 0
    assert 12 * _matmul_flops() <= corrected <= 12 * _matmul_flops() * 1.02, corrected


def test_a_loop_without_a_known_trip_count_is_reported_and_counted_once():
    a = jnp.ones((N, N), jnp.float32) / N

    def fn(a, limit):
        return jax.lax.while_loop(lambda s: s[1] < limit, lambda s: (jnp.sin(s[0] @ a), s[1] + 1), (a, 0))[0]

    xla, corrected, unknown, _ = _corrected(fn, a, jnp.int32(5))
    assert unknown == 1 and corrected == xla


@pytest.mark.parametrize("case", ["mlp-grad", "gather-window", "softmax"])
def test_the_model_counts_loop_free_programs_as_xla_does(case):
    """The model costs loop bodies XLA skipped; on loop-free programs it must agree with XLA's own count
    (within 10 %: XLA also counts a few ops the model calls free), or its loop corrections mean nothing."""
    hc = _module("hlo_cost")
    w, x = jnp.ones((784, 256), jnp.float32), jnp.ones((32, 784), jnp.float32)
    fns = {"mlp-grad": (jax.grad(lambda w, x: jnp.mean(jax.nn.relu(x @ w) ** 2)), w, x),
           "gather-window": (lambda d, i: jnp.tanh(d[i]).sum(0) * 2.0, jnp.ones((ROWS, COLS)),
                             jnp.arange(TAKE, dtype=jnp.int32)),
           "softmax": (lambda x: jax.nn.log_softmax(x @ w, axis=-1), x)}
    fn, *args = fns[case]
    compiled = jax.jit(fn).lower(*args).compile()
    ca = compiled.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    text = compiled.as_text()
    assert " while(" not in text
    flops, nbytes = hc.model_cost(text, weighted=False)
    xla_bytes = float(ca["bytes accessed"]) - hc.gather_overcount(text)
    assert abs(flops - float(ca["flops"])) <= 0.1 * float(ca["flops"]), (flops, ca["flops"])
    assert abs(nbytes - xla_bytes) <= 0.1 * xla_bytes, (nbytes, xla_bytes)


def _kernels(fn, *args):
    text = jax.jit(fn).lower(*args).compile().as_text()
    return _module("hlo_cost").kernel_traffic(text), text


def test_kernel_traffic_weights_loop_bodies_by_their_trip_counts():
    """A 3 x 4 nested loop of one matmul-and-cosine on an [N, N] float32 carry: its dot (the largest kernel,
    whatever XLA calls its fusion) launches 12 times, each reading two [N, N] arrays and writing one
    (3 N^2 4 bytes), and so does the cosine (2 N^2 4 bytes); the launches' bytes add up
    to the model's byte count, so the histogram and the floor describe the same traffic."""
    hlo_cost = _module("hlo_cost")
    a = jnp.ones((N, N), jnp.float32) / N

    def fn(a):
        inner = lambda c: jax.lax.fori_loop(0, 4, lambda i, c: jnp.cos(c @ a), c)  # noqa: E731
        return jax.lax.scan(lambda c, _: (inner(c), None), a, None, length=3)[0]

    kernels, text = _kernels(fn, a)
    largest = max(kernels, key=lambda k: k[1])
    assert largest[:2] == (12, 3 * N * N * 4), kernels
    assert (12, 2 * N * N * 4) in [k[:2] for k in kernels], kernels
    assert sum(launches * nbytes for launches, nbytes, *_ in kernels) == pytest.approx(hlo_cost.model_cost(text)[1])
    assert not [k for k in kernels if k[2] in ("parameter", "bitcast", "get-tuple-element", "tuple", "while")]


def test_kernel_traffic_of_a_loop_free_program_is_its_kernels_once():
    x = jnp.ones((4096,), jnp.float32)
    kernels, _ = _kernels(lambda x: jnp.exp(x) * 2.0 + 1.0, x)  # one fusion: reads x, writes the result
    assert [(launches, nbytes) for launches, nbytes, *_ in kernels] == [(1, 2 * 4096 * 4)]
