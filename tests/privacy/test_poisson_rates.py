"""Poisson's rate is public: add/remove neighbours are sampled with the SAME inclusion probability, the
declared ``sampling_rate`` q, which is also the q the accountant reads (one number, two consumers).

Under add/remove the neighbour D' holds one record (or one user's silo) more than D. A sampler that read
its rate from the data's size (``K / n``) would draw every other record at ``K / n`` in D and
``K / (n + 1)`` in D' -- a data-dependent law the accountant (one fixed q) does not describe. Here the
families' real steps run on both neighbours, and the canary record's (silo's) inclusion frequency is
measured in each (the canary ``+big e_1`` against ``-big e_1``, same keys, noise off: a round's
increments differ exactly when it was sampled); both must be the declared q, chosen far from K/n and
K/(n+1) so that a rate read from the data fails the exact binomial test. Without a declared rate
every family, and the DP plan itself, refuses Poisson under add/remove, naming ``sampling_rate``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.accounting.events import ClipEvent, DpPlan, NoiseEvent, SelectionEvent
from dpjax.algorithms.accelerated import AcceleratedMbSgd
from dpjax.algorithms.dp_fedavg import DpFedAvg, FedAvgHParams
from dpjax.algorithms.dp_sgd import DpSgd
from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.auditing.execute import AutodiffProbe
from dpjax.engine.chain import DataShape
from dpjax.primitives import sampling

from .pins import BIG, check_rate, increments, keys, probe, silos, trajectory

DIM, RUNS, ROUNDS = 2, 1000, 3
K, N = 2, 5  # expected batch K; D holds N records, D' = D plus one zero record
Q = 0.2  # the declared rate: not K / N = 0.4, not K / (N + 1) = 0.333
C, LR = 0.6, 0.5


def _record_families():
    """(name, family, hparams with noise off) of every family that Poisson-samples records under add/remove."""
    return [
        ("dp-sgd", DpSgd(probe(DIM), ROUNDS, K, optimizer="sgd", sampling_rate=Q), DpSgdHParams.create(LR, 0.0, C)),
        ("dpsgd-general", DpSgdGeneral(probe(DIM), ROUNDS, 1, K, 1, sampling="poisson", neighboring="add-remove",
                                       sampling_rate=Q), DpSgdHParams.create(LR, 0.0, C)),
        ("isrl-mbsgd-dense", NoisyMbSgd(probe(DIM), ROUNDS, K, sampling="poisson", neighboring="add-remove",
                                        gradient_path="dense", sampling_rate=Q), MbSgdHParams.create(LR, 0.0, C)),
        ("isrl-mbsgd-gather", NoisyMbSgd(AutodiffProbe(DIM), ROUNDS, K, sampling="poisson", neighboring="add-remove",
                                         gradient_path="gather", sampling_rate=Q), MbSgdHParams.create(LR, 0.0, C)),
    ]


def _canary_inclusions(family, hp, sizes, seed, n_max=None):
    """How many of the RUNS x ROUNDS rounds sampled the canary (record 0 of silo 0)."""
    plus = increments(trajectory(family, silos(sizes, DIM, +BIG, n_max=n_max), hp, keys(RUNS, seed), DIM))
    minus = increments(trajectory(family, silos(sizes, DIM, -BIG, n_max=n_max), hp, keys(RUNS, seed), DIM))
    shift = (plus - minus)[..., 0]
    return int((np.abs(shift) > 1e-6).sum()), shift.size


@pytest.mark.parametrize("name,family,hp", _record_families(), ids=[f[0] for f in _record_families()])
def test_add_remove_neighbours_sample_each_record_at_the_declared_rate(name, family, hp):
    """(a) + (d): the real step on D (N records) and D' (N + 1): the canary joins a round w.p. q in
    both, and q is the accountant's rate for both. D is padded to D's N + 1 rows (one compiled program
    for both; the sizes are data): a rate read from the sizes (K / N, K / (N + 1)) or from the padded
    shape (K / (N + 1)) still fails the binomial test."""
    for sizes, seed in (((N,), 0), ((N + 1,), 1)):
        hits, trials = _canary_inclusions(family, hp, sizes, seed, n_max=N + 1)
        check_rate(hits, trials, Q, f"{name}: canary inclusion with {sizes[0]} records")
        assert family.privacy(sizes, dataclass_with_noise(hp)).schedule.inclusion_probability == Q


def dataclass_with_noise(hp):
    return type(hp)(**{**{f: getattr(hp, f) for f in hp.__dataclass_fields__}, "noise_multiplier": 1.0})


def test_add_remove_neighbours_sample_each_user_at_the_declared_rate():
    """DP-FedAvg: the user is the silo; D has 4 users, D' one more. Silo 0 (one record ``+-big e_1``,
    the others zero) is in a round w.p. q in both, not m/4 = 0.5 or m/5 = 0.4."""
    m, q = 2, 0.25
    family = DpFedAvg(probe(DIM), ROUNDS, m, sampling_rate=q)
    hp = FedAvgHParams.create(learning_rate=1.0, client_learning_rate=1.0, clip_norm=C, clip_learning_rate=0.0)
    for n_silos, seed in ((4, 0), (5, 1)):
        sizes = (1,) * n_silos
        hits, trials = _canary_inclusions(family, hp, sizes, seed)
        check_rate(hits, trials, q, f"dp-fedavg: user inclusion with {n_silos} users")
        spec = family.privacy(sizes, FedAvgHParams.create(noise_multiplier=1.0, noise_multiplier_count=2.0))
        assert spec.schedule.inclusion_probability == q


def test_the_sampler_draws_the_declared_rate_at_every_size():
    """(a), exactly: the sampler's inclusion probability does not depend on the silo's size, on the
    gather (``draw``) and dense (``draw_weights``) forms; the fallback K / n is size-dependent."""
    sampler = sampling.make_sampler("poisson", K, Q)
    assert sampler.inclusion_probability(N) == sampler.inclusion_probability(N + 1) == Q
    assert sampling.make_sampler("poisson", K).inclusion_probability(N) == K / N  # replace-one only
    draws = 4000
    for size in (N, N + 1):
        for form in ("draw", "draw_weights"):
            def one(key, size=size, form=form):
                if form == "draw":
                    idx, mask, _ = sampler.draw(key, size, N + 3, 0, None)
                    return jnp.zeros((N + 3,), jnp.int32).at[idx].add(mask.astype(jnp.int32))
                return sampler.draw_weights(key, size, N + 3, 0, None)[0].astype(jnp.int32)

            counts = np.asarray(jax.jit(jax.vmap(one))(keys(draws, size)))
            assert counts[:, size:].sum() == 0
            for row in range(size):
                check_rate(counts[:, row].sum(), draws, Q, f"Poisson.{form}, size {size}, row {row}",
                           alpha=1e-6 / size)


def test_the_buffer_holds_the_expected_batch_of_the_declared_rate():
    """A declared q can expect more than K records on a large silo: the static buffer is sized for
    q n_max (an overflowing batch would be truncated and the run refused), K without a rate."""
    assert sampling.Poisson(2, sampling_rate=0.2).padded_size(400) == sampling.default_poisson_capacity(80)  # 80 + 54 + 8
    assert sampling.Poisson(2, sampling_rate=0.01).padded_size(100) == sampling.default_poisson_capacity(2)
    assert sampling.Poisson(2).padded_size(100) == sampling.default_poisson_capacity(2)
    idx, mask, overflow = sampling.Poisson(2, sampling_rate=0.5).draw(jax.random.key(0), 100, 100, 0, None)
    assert not bool(overflow) and 30 <= int(mask.sum()) <= 70


@pytest.mark.parametrize("family", [
    DpSgd(probe(DIM), ROUNDS, K, sampling_rate=Q),
    DpSgdGeneral(probe(DIM), ROUNDS, 1, K, 1, sampling="poisson", neighboring="add-remove", sampling_rate=Q),
    NoisyMbSgd(probe(DIM), ROUNDS, K, sampling="poisson", neighboring="add-remove", sampling_rate=Q),
    AcceleratedMbSgd(probe(DIM), ROUNDS, K, sampling="poisson", neighboring="add-remove", sampling_rate=Q),
    DpFedAvg(probe(DIM), ROUNDS, K, sampling_rate=Q),
], ids=["dp-sgd", "dpsgd-general", "isrl-mbsgd", "isrl-accelerated", "dp-fedavg"])
def test_the_selection_event_carries_the_rate_the_sampler_draws_with(family):
    """(b): the selection part's sampler and its event hold the one declared q, whatever the sizes."""
    selection = family.parts(DataShape(3, 9)).selection
    assert selection.sampling_rate == Q
    if hasattr(selection, "sampler"):
        assert selection.sampler.inclusion_probability(7) == Q
    for sizes in ((7, 9, 8), (8, 9, 8)):
        assert selection.event(sizes).sampling_rate == Q
        assert all(selection.event(sizes).inclusion_probability(i) == Q for i in range(3))


@pytest.mark.parametrize("build", [
    lambda: DpSgd(probe(DIM), ROUNDS, K),
    lambda: DpSgdGeneral(probe(DIM), ROUNDS, 1, K, 1, sampling="poisson", neighboring="add-remove"),
    lambda: NoisyMbSgd(probe(DIM), ROUNDS, K, sampling="poisson", neighboring="add-remove"),
    lambda: AcceleratedMbSgd(probe(DIM), ROUNDS, K, sampling="poisson", neighboring="add-remove"),
    lambda: DpFedAvg(probe(DIM), ROUNDS, K),
], ids=["dp-sgd", "dpsgd-general", "isrl-mbsgd", "isrl-accelerated", "dp-fedavg"])
def test_add_remove_without_a_public_rate_is_refused_before_the_data(build):
    """(c): the configuration alone is refused, naming the argument."""
    with pytest.raises(ValueError, match=r"sampling_rate=None: Poisson sampling under add/remove"):
        build()


def test_the_dp_plan_refuses_a_rate_read_from_the_data_under_add_remove():
    """(c), for any composition of parts: a Poisson selection without a declared rate and an add/remove
    clipper is no plan; under replace-one the sizes are public and K / n_min is accounted."""
    noise = (NoiseEvent("noise_multiplier", 1.0, "server"),)
    with pytest.raises(ValueError, match="sampling_rate=None"):
        DpPlan(SelectionEvent("poisson", (10, 12), 2, "record"), ClipEvent("add-remove"), noise, 3)
    replace = DpPlan(SelectionEvent("poisson", (10, 12), 2, "record"), ClipEvent("replace-one"), noise, 3).spec()
    assert replace.schedule.inclusion_probability == 2 / 10
    declared = DpPlan(SelectionEvent("poisson", (10, 12), 2, "record", sampling_rate=0.15), ClipEvent("add-remove"),
                      noise, 3).spec()
    assert declared.schedule.inclusion_probability == 0.15
    with pytest.raises(ValueError, match="sampling_rate=0.15 is Poisson's"):
        SelectionEvent("without-replacement", (10, 12), 2, "record", sampling_rate=0.15)
