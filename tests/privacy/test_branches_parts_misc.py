"""Branches of the parts' declarations reached by tests that can fail (issue 42, item 1): cyclic client groups,
per-silo batch sizes, user-level privatizers and servers, the noise multiplier read back host-side, AC-SA's step
schedules. A part that accepted a declaration its accountant does not cover (a cyclic-Poisson rate read from the
data, a surrogate mechanism that certifies nothing) would report a guarantee the run does not have.

Expected values are the definitions' (AC-SA's Lan constants ``alpha_t = 2/(t+1)``, ``eta_t = 4 nu/(t(t+1))``, by hand)
or the refusal naming the argument and its value.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from dpjax.accounting import sco_transcript
from dpjax.parts import acsa, cyclic_silos, privatizers, selection, users

pytestmark = pytest.mark.privacy


def test_acsa_lan_constants_and_an_unknown_schedule():
    alpha, eta = acsa.acsa_constants(3, 2.0, "lan")
    assert float(alpha) == pytest.approx(2 / 4) and float(eta) == pytest.approx(4 * 2.0 / (3 * 4))
    alpha, eta = acsa.acsa_constants(3, 2.0, "paper")
    assert float(alpha) == pytest.approx(2 / 5) and float(eta) == pytest.approx(2 * 2.0 / (4 * 5))
    with pytest.raises(ValueError, match=r"schedule='nesterov' must be one of"):
        acsa.acsa_constants(3, 2.0, "nesterov")


def test_cyclic_client_groups_declarations():
    with pytest.raises(ValueError, match=r"sampling_rate=None: cyclic Poisson over clients needs the public rate q"):
        cyclic_silos.CyclicSilos(2, 3)
    with pytest.raises(ValueError, match=r"cohort_capacity"):
        cyclic_silos.CyclicSilos(2, 3, sampling_rate=0.5, cohort_capacity=0)
    assert cyclic_silos.CyclicSilos(2, 3, sampling_rate=0.5, cohort_capacity=4).sampler.capacity == 4
    sep = cyclic_silos.CyclicSilos(2, 3, scheme="min-separation")
    assert type(sep.sampler).__name__ == "MinSeparation"
    with pytest.raises(ValueError, match=r"num_groups=3 must be <= num_silos=2 \(every group needs a client\)"):
        sep.validate(types.SimpleNamespace(num_silos=2))


def test_host_multiplier_reads_one_runs_value():
    assert privatizers.host_multiplier(np.float32(0.5)) == 0.5
    assert privatizers.host_multiplier(np.asarray([0.5, 0.25])) == (0.5, 0.25)
    with pytest.raises(ValueError, match=r"noise multiplier has shape \(2, 2\); pass one run's hyperparameters"):
        privatizers.host_multiplier(np.ones((2, 2)))


def test_local_step_noise_has_no_state_before_the_first_batch():
    part = privatizers.LocalStepGaussian(num_steps=2)
    assert part.init({}, types.SimpleNamespace(batch=None)) == ()


def test_per_silo_batch_sizes_need_the_gather_path_and_a_batch_within_the_smallest_silo():
    with pytest.raises(ValueError, match=r"batch_sizes=\(2, 3\) needs the gather path and batch_size = max K_i, got "
                                         r"batch_size=2, dense=False"):
        selection.SiloBatches(batch_size=2, batch_sizes=(2, 3))
    sel = selection.LocalStepBatches(batch_size=4)
    with pytest.raises(ValueError, match=r"batch_size=4 must be <= the smallest silo size 3"):
        sel.validate(types.SimpleNamespace(num_silos=2, min_size=3))


def test_user_level_privatizer_declarations():
    with pytest.raises(ValueError, match=r"mechanism='laplace' must be one of"):
        users.UserGaussian("laplace")
    with pytest.raises(ValueError, match=r"mechanism='none' adds no noise; no multiplier gives a noise std"):
        users.UserGaussian("none").multiplier_for(1.0, [4], 2.0)
    hp = types.SimpleNamespace(start=np.asarray([0, 4]), batch=np.asarray([4, 4]), stage_round=np.asarray([1, 2]),
                               noise_multiplier=np.asarray([1.0, 1.0]))
    (ev,) = users.UserGaussian("surrogate").events(hp, 2)
    assert isinstance(ev, sco_transcript.NoGuaranteeEvent)
    assert "variance-matched surrogate of P_vec, not a DP mechanism" in ev.reason
    with pytest.raises(ValueError, match=r"output='mean' must be one of \('average', 'last'\)"):
        users.PhasedSgdServer(output="mean")


def test_min_separation_clients_take_no_rate_or_buffer():
    with pytest.raises(ValueError, match=r"sampling_rate=0.5: scheme='min-separation' takes all of the round's group"):
        cyclic_silos.CyclicSilos(2, 3, scheme="min-separation", sampling_rate=0.5)
    with pytest.raises(ValueError, match=r"cohort_capacity=4: min-separation cohorts are whole groups"):
        cyclic_silos.CyclicSilos(2, 3, scheme="min-separation", cohort_capacity=4)


def test_full_batch_denominator_is_the_silo_size():
    from dpjax.parts.clients import MinibatchGradient

    sizes = np.asarray([7.0, 9.0], np.float32)
    assert MinibatchGradient(problem=None).denominator(sizes) is sizes           # full batch: the public size
    assert MinibatchGradient(problem=None, batch_size=4).denominator(sizes) == 4


def test_projection_onto_a_ball_around_a_centre():
    import jax.numpy as jnp

    from dpjax.primitives.projection import project_l2_ball

    # |(3, 4) - (0, 0)| = 5 > 1 around centre (0, 0)... here centre (1, 0): offset (2, 4), norm sqrt(20)
    out = project_l2_ball({"w": jnp.asarray([3.0, 4.0])}, 1.0, {"w": jnp.asarray([1.0, 0.0])})
    want = np.asarray([1.0, 0.0]) + np.asarray([2.0, 4.0]) / np.sqrt(20.0)
    np.testing.assert_allclose(np.asarray(out["w"]), want, rtol=1e-6)


def test_a_gated_server_steps_only_when_some_silo_reported():
    import jax
    import jax.numpy as jnp
    import optax

    from dpjax.engine.roles import Gated
    from dpjax.parts.servers import OptaxServer

    server = OptaxServer(optax.trace(0.5))
    w = {"w": jnp.asarray([1.0, 2.0])}
    ctx = types.SimpleNamespace(params=w, hparams=types.SimpleNamespace(learning_rate=0.1))
    state = server.init(w, ctx)
    u = {"w": jnp.asarray([0.5, -1.0])}
    kept, kept_state = server.update(Gated(u, jnp.asarray(False)), state, ctx)
    np.testing.assert_array_equal(np.asarray(kept["w"]), [1.0, 2.0])          # no report: no step, state kept
    np.testing.assert_array_equal(np.asarray(jax.tree_util.tree_leaves(kept_state)[0]), [0.0, 0.0])
    stepped, _ = server.update(Gated(u, jnp.asarray(True)), state, ctx)
    np.testing.assert_allclose(np.asarray(stepped["w"]), [1.0 - 0.1 * 0.5, 2.0 + 0.1 * 1.0], rtol=1e-7)


def test_clippers_refuse_units_they_do_not_clip():
    import jax.numpy as jnp

    from dpjax.engine.roles import PerExampleGradients, PerUnitVectors
    from dpjax.parts.clipping import ClipPerUnit, ClipVectors

    ctx = types.SimpleNamespace(hparams=types.SimpleNamespace(clip_norm=1.0))
    keep = PerExampleGradients(None, {}, jnp.zeros((1, 2, 3)), jnp.zeros((1, 2)), jnp.ones((1, 2)), 1.0, None, None,
                               reduce=False)
    with pytest.raises(ValueError, match=r"ClipPerUnit sums per-example gradients; a local randomizer needs the "
                                         r"clipped vectors themselves"):
        ClipPerUnit().update(keep, (), ctx)
    with pytest.raises(ValueError, match=r"units=dict is not a unit description ClipPerUnit knows"):
        ClipPerUnit().update({}, (), ctx)
    per_silo = PerUnitVectors({"w": jnp.ones((2, 3))}, None, 1.0, per_silo=True)
    with pytest.raises(ValueError, match=r"units=PerUnitVectors are not per-unit vectors ClipVectors can keep apart"):
        ClipVectors().update(per_silo, (), ctx)


def test_pvec_bit_level_needs_static_buffers():
    from dpjax.parts.pvec import PvecRandomizer

    with pytest.raises(ValueError, match=r"bit_buffer=None: the bit level needs static \(g_max, b_max\) bit buffers"):
        PvecRandomizer(dim=3, level="bits")


def test_a_non_certified_user_level_schedule_certifies_nothing():
    from dpjax.accounting.user_level import UserLevelPrivacy

    # B2 (the paper's non-private baseline) and any mode other than "certified": (inf, 1), whatever the calls say
    assert UserLevelPrivacy("B2", ((0.5, 1e-6, "a"),)).certified() == (float("inf"), 1.0)
    assert UserLevelPrivacy("A1", ((0.5, 1e-6, "a"),), mode="rate-shape").certified() == (float("inf"), 1.0)
    assert UserLevelPrivacy("A1", ((0.5, 1e-6, "a"),)).certified() == (0.5, 1e-6)


def test_batch_clipping_standard_accountant_is_for_single_records():
    from dpjax.accounting.batch_clipping import batch_clipping_report

    with pytest.raises(ValueError, match=r"accountant='standard' covers group_size=1 only, got group_size=2"):
        batch_clipping_report("standard", sampling="shuffle", n_records=100, s=2, m=5, num_rounds=10,
                              rounds_per_epoch=10, sigma=1.0, delta=1e-5, group_size=2)
