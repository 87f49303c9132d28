"""The roofline's byte correction (experiments/benchmarks/hlo_bytes.py): a fused gather, or a slice behind
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
    return float(ca["bytes accessed"]), _module("hlo_bytes").gather_overcount(text), text


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
    hb = _module("hlo_bytes")
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
