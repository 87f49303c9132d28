"""DP-SCAFFOLD (Noble, Bellet & Dieuleveut 2022): privacy against a hand computation, the noise std
measured, the non-private twin against a NumPy SCAFFOLD, and its audit catching a skipped clip."""

from __future__ import annotations

import dp_accounting as dpa
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import engine, keys
from dpjax.algorithms.dp_scaffold import DpScaffold, ScaffoldHParams
from dpjax.engine.chain import DataShape
from dpjax.engine.roles import Context
from dpjax.engine.silos import SiloData
from dpjax.problems import LinearRegression

DELTA = 1e-5
pytestmark = pytest.mark.privacy


def test_privacy_is_r_times_k_subsampled_gaussians_at_the_smallest_silo():
    """Each local step is a Gaussian of multiplier z on a uniform s-subset of the silo (replace-one):
    dp_accounting's RDP of SampledWithoutReplacement(n_min, s, Gaussian(z)) composed R K times."""
    alg = DpScaffold(LinearRegression(3), 12, 2, 4, 5)
    hp = ScaffoldHParams.create(1.0, 0.1, 1.3, 0.5)
    spec = alg.privacy([40, 25, 60], hp)
    acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    z = float(np.float32(1.3))
    acc.compose(dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(25, 5, dpa.GaussianDpEvent(z)), 12 * 4))
    assert spec.neighboring == "replace-one" and spec.unit == "record-in-silo"
    assert spec.epsilon(DELTA, "rdp").epsilon == pytest.approx(acc.get_epsilon(DELTA), rel=1e-9)
    # the sensitivity of a step's release is the clipped mean's 2C/s
    assert alg.message_sensitivity(hp, [40, 25, 60]) == pytest.approx(2 * 0.5 / 5)


class Zero:
    """Loss 0: every gradient vanishes, so a silo's delta is its steps' noise alone."""

    def loss(self, params, x, y):
        return 0.0 * jnp.sum(params)

    def init_params(self, key=None):
        return jnp.zeros((4000,), jnp.float32)


def test_noise_std_of_a_silos_delta_is_lr_z_2c_over_s_times_sqrt_k():
    k, s, lr, z, c = 3, 4, 0.5, 2.0, 0.25
    alg = DpScaffold(Zero(), 1, 1, k, s)
    data = SiloData.from_silos([np.zeros((8, 1), np.float32)], [np.zeros(8, np.float32)])
    hp = ScaffoldHParams.create(1.0, lr, z, c)
    out = np.asarray(engine.run(alg, data, hp, jax.random.key(3)).output, np.float64)
    want = lr * z * 2 * c / s * np.sqrt(k)
    # the sample std of d = 4000 normals is within 5 of its sd sqrt(1/(2d)) (relative) of the true std
    assert abs(out.std() / want - 1) < 5 * np.sqrt(1 / (2 * out.size))


def numpy_scaffold(xs, ys, rounds, k, s, lr_local, lr_server, indices, available):
    """SCAFFOLD (option II) on least squares, the batches and silos the run used."""
    n_silos, d = len(xs), xs[0].shape[1]
    w, controls = np.zeros(d), np.zeros((n_silos, d))
    for r in range(rounds):
        c = controls.mean(axis=0)
        deltas, new_controls = [], controls.copy()
        for i in range(n_silos):
            if not available[r][i]:
                continue
            y = w.copy()
            for step in range(k):
                idx = indices[r][i][step]
                g = xs[i][idx].T @ (xs[i][idx] @ y - ys[i][idx]) / s
                y = y - lr_local * (g - controls[i] + c)
            deltas.append(w - y)
            new_controls[i] = controls[i] - c + (w - y) / (k * lr_local)
        w = w - lr_server * np.mean(deltas, axis=0)
        controls = new_controls
    return w


def test_the_twin_is_scaffold_with_its_control_variates():
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(n, 3)).astype(np.float32) for n in (9, 12, 10)]
    ys = [(x @ np.array([1.0, -2.0, 0.5]) + i).astype(np.float32) for i, x in enumerate(xs)]  # heterogeneous
    data = SiloData.from_silos(xs, ys)
    alg = DpScaffold(LinearRegression(3), 4, 2, 3, 2, private=False)
    hp = ScaffoldHParams.create(0.7, 0.05)
    key = jax.random.key(1)
    res = engine.run(alg, data, hp, key)
    # the silos and batches of every round, drawn by the family's selection part with the run's round keys
    selection = alg.parts(DataShape.of(data)).selection
    indices, available = [], []
    for r in range(4):
        ctx = Context(jnp.int32(r), keys.round_key(key, r), hp, data)
        batch, _ = selection.update(data, (), ctx)
        per = {int(i): np.asarray(batch.indices[j]) for j, i in enumerate(np.asarray(batch.rows()))}
        indices.append([per.get(i) for i in range(3)])
        available.append([i in per for i in range(3)])
    want = numpy_scaffold([x.astype(np.float64) for x in xs], [y.astype(np.float64) for y in ys], 4, 3, 2,
                          0.05, 0.7, indices, available)
    np.testing.assert_allclose(np.asarray(res.output, np.float64), want, rtol=2e-5, atol=2e-5)


def test_training_audit_passes_honest_and_catches_a_skipped_clip():
    from dpjax.auditing.training import training_audit

    honest = training_audit("dp-scaffold", canaries=2000, rounds=2, delta=1e-6)
    assert honest.passed and honest.bound.epsilon <= honest.certified_epsilon
    caught = training_audit("dp-scaffold", "no-clip", canaries=2000, rounds=2, delta=1e-6)
    assert caught.passed and caught.bound.epsilon > caught.certified_epsilon  # a mutant "passes" when caught
