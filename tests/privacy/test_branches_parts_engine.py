"""Branches of the samplers, aggregators, selection parts, iterate averaging and silo layout code reached by tests
that can fail (issue 42, item 1).

What they decide is privacy-relevant: which records and silos a round may use (a sampler serving a batch larger
than the silo would hold padding rows; an availability model's smallest round size is the shuffler's report count
M), the aggregate's sensitivity (sum vs mean), which silo's message goes on which device. Expected values are read off
the definitions by hand (sums, means, the weights of the averaging rules) or are the refusal the definition requires,
matched by the argument's name and value.
"""

from __future__ import annotations

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.engine import averaging, contract, silo_blocks, silo_sharding
from dpjax.parts import aggregators
from dpjax.parts.selection_bins import BinnedBatches
from dpjax.primitives import sampling, sampling_bins, sampling_truncated, shuffle_protocols

pytestmark = pytest.mark.privacy


# ----------------------------------------------------------------------------- samplers
def test_record_samplers_refuse_batches_larger_than_the_smallest_silo():
    with pytest.raises(ValueError, match=r"batch_size=8 must be <= the smallest silo size n=5"):
        sampling_bins.BallsInBins(8).validate(5, 1)
    with pytest.raises(ValueError, match=r"batch_size=3 x num_groups=2 must be <= the smallest silo size n=5"):
        sampling_bins.CyclicPoisson(3, 2).validate(5, 1)
    with pytest.raises(ValueError, match=r"batch_size=8 must be <= the smallest silo size n=5"):
        sampling_bins.MinSeparation(8).validate(5, 1)
    sampling_bins.MinSeparation(5).validate(5, 1)  # K = n: allowed
    with pytest.raises(ValueError, match=r"capacity=12 must be <= the smallest silo size n=10"):
        sampling_truncated.TruncatedPoisson(4, 0.4, capacity=12).validate(10, 1)
    sampling_truncated.TruncatedPoisson(4, 0.4, capacity=10).validate(10, 1)


def test_random_availability_and_subset_refusals():
    with pytest.raises(ValueError, match=r"pmf=\[0.5, 0.5\] must be a non-empty tuple"):
        sampling.RandomAvailability([0.5, 0.5])
    with pytest.raises(ValueError, match=r"pmf=\(\) must be a non-empty tuple"):
        sampling.RandomAvailability(())
    with pytest.raises(ValueError, match=r"pmf has length 2; it must have num_silos=3 entries"):
        sampling.RandomAvailability((0.5, 0.5)).validate(3)
    sampling.RandomAvailability((0.5, 0.5)).validate(2)
    with pytest.raises(ValueError, match=r"batch_size=True must be an integer"):
        sampling.sample_without_replacement(jax.random.key(0), 5, 8, True)
    with pytest.raises(ValueError, match=r"batch_size=6 must be <= size=5 \(the number of real records\)"):
        sampling.sample_without_replacement(jax.random.key(0), 5, 8, 6)


def test_make_sampler_refusals_and_poisson_capacity():
    with pytest.raises(ValueError, match=r"sampling_rate=0.1 is Poisson's public rate; sampling='without-replacement'"):
        sampling.make_sampler("without-replacement", 4, 0.1)
    with pytest.raises(ValueError, match=r"batch_size=4 must be None with sampling='full'"):
        sampling.make_sampler("full", 4)
    with pytest.raises(ValueError, match=r"capacity"):
        sampling.Poisson(8, capacity=4)  # a buffer below the expected batch
    assert sampling.Poisson(8, capacity=20).capacity == 20


def test_pvec_params_validation_names_the_field():
    shuffle_protocols.PvecParams(4.0, 10, 0.25).validate()  # an integral float granularity is an integer
    with pytest.raises(ValueError, match=r"granularity=2.5 must be an integer"):
        shuffle_protocols.PvecParams(2.5, 10, 0.25).validate()
    with pytest.raises(ValueError, match=r"trials=True must be an integer"):
        shuffle_protocols.PvecParams(4, True, 0.25).validate()
    with pytest.raises(ValueError, match=r"probability='x' must be a real number"):
        shuffle_protocols.PvecParams(4, 10, "x").validate()
    with pytest.raises(ValueError, match=r"probability=nan must be a real number"):
        shuffle_protocols.PvecParams(4, 10, float("nan")).validate()


def test_pvec_exactness_bound_for_static_and_traced_granularity():
    p = shuffle_protocols.PvecParams(4, 10, 0.25)
    assert shuffle_protocols._check_exact(100, p, None) is None          # static g: nothing to bound at run time
    with pytest.raises(ValueError, match=r"5000000 vectors x granularity=4 >= 2\^24"):
        shuffle_protocols._check_exact(5_000_000, p, None)              # 2e7 >= 16777216: sums not exact in f32

    def traced(g, max_g):
        seen = {}

        def f(g):
            seen["bound"] = shuffle_protocols._check_exact(100, shuffle_protocols.PvecParams(g, 10, 0.25), max_g)
            return g

        jax.make_jaxpr(f)(g)
        return seen["bound"]

    assert traced(4, 64) == 64                                            # a traced g: its static bound is returned
    with pytest.raises(ValueError, match=r"max_granularity=None: a traced PvecParams.granularity"):
        traced(4, None)
    # above the bound the report is NaN, not silently inexact; at or below it is the sum of the rounded vectors
    vectors, mask = jnp.zeros((3, 2)), jnp.asarray([True, True, False])

    @jax.jit
    def report(g):
        return shuffle_protocols.pvec_user_counts(jax.random.key(0), jax.random.key(1), vectors, mask,
                                                  shuffle_protocols.PvecParams(g, 0, 0.0), 1.0, max_granularity=8)

    # x = 0 with bound 1: scaled = g/2 exactly, no randomness; centred: xhat - g/2 = 0 per valid vector; b = 0: no noise
    np.testing.assert_array_equal(np.asarray(report(4)), [0.0, 0.0])
    assert np.all(np.isnan(np.asarray(report(16))))


# ----------------------------------------------------------------------------- aggregators
def test_aggregate_sum_and_min_available_of_every_availability():
    msgs = {"w": jnp.asarray([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])}
    avail = jnp.asarray([True, False, True])
    np.testing.assert_array_equal(np.asarray(aggregators.aggregate(msgs, avail, "sum")["w"]), [6.0, 8.0])
    np.testing.assert_array_equal(np.asarray(aggregators.aggregate(msgs, avail, "mean")["w"]), [3.0, 4.0])
    assert aggregators.min_available(sampling.FullAvailability(), 4) == 4
    assert aggregators.min_available(sampling.FixedAvailability(2), 4) == 2
    assert aggregators.min_available(sampling.RandomAvailability((0.0, 0.3, 0.7)), 3) == 2  # P(M=1) = 0
    with pytest.raises(ValueError, match=r"no rule for its smallest round size"):
        aggregators.min_available(types.SimpleNamespace(validate=lambda n: None), 4)
    with pytest.raises(ValueError, match=r"ShuffledAggregate\(availability=None\) cannot state its shuffle"):
        aggregators.ShuffledAggregate().aggregation_event([10, 10])
    ev = aggregators.ShuffledAggregate(availability=sampling.FixedAvailability(3)).aggregation_event([10] * 5)
    assert (ev.min_reports, ev.num_silos) == (3, 5)


def test_shuffled_sum_is_the_plain_sum_and_a_gated_mean_knows_whether_anyone_reported():
    msgs = {"w": jnp.asarray([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])}
    avail = jnp.asarray([True, True, False])
    got = aggregators.shuffled_aggregate(msgs, avail, jax.random.key(0), "sum")
    np.testing.assert_array_equal(np.asarray(got["w"]), [4.0, 6.0])
    from dpjax.engine.roles import Gated, Sensitive

    ctx = types.SimpleNamespace(batch=types.SimpleNamespace(available=avail))
    out, _ = aggregators.Aggregate(gate=True).update(Sensitive(msgs, jnp.float32(2.0), "replace-one"), (), ctx)
    assert isinstance(out.value, Gated) and bool(out.value.apply)
    np.testing.assert_array_equal(np.asarray(out.value.update["w"]), [2.0, 3.0])
    assert float(out.contribution_bound) == 1.0  # the largest silo's bound / M_r = 2 / 2


# ----------------------------------------------------------------------------- binned selection
def test_binned_batches_refusals():
    with pytest.raises(ValueError, match=r"batch_size=None: scheme='balls-in-bins' needs the public"):
        BinnedBatches()
    with pytest.raises(ValueError, match=r"batch_sizes=\(2, 3\): per-silo batch sizes are not supported here"):
        BinnedBatches(batch_size=2, batch_sizes=(2, 3))
    with pytest.raises(ValueError, match=r"capacity=4: min-separation batches are whole groups"):
        BinnedBatches(scheme="min-separation", batch_size=2, capacity=4)


def test_binned_batches_periods_read_off_the_declaration():
    sizes = [20, 30]
    ev = BinnedBatches(scheme="balls-in-bins", batch_size=5, num_bins=3).event(sizes)
    assert ev.periods == (3, 3)                              # declared B
    ev = BinnedBatches(scheme="cyclic-poisson", batch_size=5, sampling_rate=0.2).event(sizes)
    assert ev.periods == (1, 1)                              # cyclic Poisson without b: b = 1 (Poisson)
    assert ev.rates == (0.2, 0.2) and ev.group_sizes == (20, 30)
    ev = BinnedBatches(scheme="min-separation", batch_size=5).event(sizes)
    assert ev.periods == (4, 6)                              # max(1, n // K)


# ----------------------------------------------------------------------------- iterate averaging
def _fold(rule, iterates, decay=None, window=3):
    avg = averaging.IterateAverager(rule, window)
    state = avg.init({"w": jnp.zeros(2)})
    for r in range(len(iterates) - 1):
        state = avg.update(state, {"w": iterates[r]}, {"w": iterates[r + 1]}, jnp.asarray(r), decay)
    return avg, state


def test_every_averaging_rule_is_its_formula():
    w = [jnp.asarray([float(r), float(r * r)]) for r in range(6)]  # w_0 .. w_5
    rounds = 5
    avg, st = _fold("average", w)
    # the mean of the iterates before each step: (w_0 + ... + w_4) / 5
    np.testing.assert_allclose(np.asarray(avg.value(st, {"w": w[-1]}, rounds)["w"]), np.mean(w[:5], 0), rtol=1e-6)
    avg, st = _fold("window", w)
    # the mean of the last W = 3 iterates after each step: w_3, w_4, w_5
    np.testing.assert_allclose(np.asarray(avg.value(st, {"w": w[-1]}, rounds)["w"]), np.mean(w[3:], 0), rtol=1e-6)
    avg, st = _fold("exponential", w, decay=0.2)
    a = 1 / (1 - 0.2)  # weights a^r on w_r (r = 0..4), normalised
    weights = np.asarray([a**r for r in range(5)])
    want = np.tensordot(weights / weights.sum(), np.asarray(w[:5]), 1)
    np.testing.assert_allclose(np.asarray(avg.value(st, {"w": w[-1]}, rounds)["w"]), want, rtol=1e-5)
    avg, st = _fold("last", w)
    assert st == () and avg.update(st, {}, {}, 0) == ()
    np.testing.assert_array_equal(np.asarray(avg.value(st, {"w": w[-1]}, rounds)["w"]), np.asarray(w[-1]))
    # before any round every rule outputs the current iterate
    for rule in ("average", "window", "exponential"):
        a0 = averaging.IterateAverager(rule, 3)
        np.testing.assert_array_equal(np.asarray(a0.value(a0.init({"w": w[0]}), {"w": w[2]}, 0)["w"]), np.asarray(w[2]))


# ----------------------------------------------------------------------------- engine contract / silo layout
def test_contract_validate_and_hparams_type():
    @dataclasses.dataclass(frozen=True)
    class _Fam(contract.FamilyBase):
        availability: object = sampling.FullAvailability()

    data = types.SimpleNamespace(num_silos=2, min_size=3)
    assert _Fam().validate(data) is None                    # no batch_size: no sampler to check
    with pytest.raises(ValueError, match=r"_Fam declares no hparams_type"):
        contract.family_hparams(_Fam())

    class _Typed:
        hparams_type = int

    assert contract.family_hparams(_Typed()) is int


def test_silo_block_checks():
    silo_blocks.check_run(object(), None, "exact", 4, None)  # no block: nothing to check
    with pytest.raises(ValueError, match=r"silo_block: messages\['w'\] has shape \(3,\); a blocked run needs every "
                                         r"leaf per silo \(leading axis 4\)"):
        silo_blocks._check_per_silo({"w": jnp.zeros(3)}, 4, "messages")


def test_silo_devices_on_one_host_device():
    devices = jax.devices()
    assert silo_sharding.resolve_devices("all") == tuple(devices)
    assert silo_sharding.resolve_devices(1) == (jax.local_devices()[0],)
    with pytest.raises(ValueError, match=r"silo_devices=\[\] must name at least one device"):
        silo_sharding.resolve_devices([])
    with pytest.raises(ValueError, match=r"holds 3, which is not a jax device"):
        silo_sharding.resolve_devices([3])
    with pytest.raises(ValueError, match=r"names .* twice"):
        silo_sharding.resolve_devices([devices[0], devices[0]])
    mesh = silo_sharding.silo_mesh(1, 4)
    tree = {"a": np.arange(4.0), "s": np.float32(2.0)}
    placed = silo_sharding.put(tree, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    np.testing.assert_array_equal(np.asarray(placed["a"]), tree["a"])
    with silo_sharding.tracing(mesh, per_silo=True):
        assert silo_sharding.sharded()
        out = jax.jit(silo_sharding.on_silo_devices)({"a": jnp.arange(4.0), "s": jnp.float32(2.0)})
    # the values are unchanged (only their placement is constrained): each silo's row stays its own
    np.testing.assert_array_equal(np.asarray(out["a"]), np.arange(4.0))
    assert float(out["s"]) == 2.0


# ----------------------------------------------------------------------------- the chain's noise multiplier
def test_noise_multiplier_for_refusals_and_a_server_side_privatizer():
    from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.problems import LogisticRegression

    algo = NoisyMbSgd(LogisticRegression(3), num_rounds=2, batch_size=4)
    hp = MbSgdHParams.create(0.5, 0.3, 2.0)
    # sensitivity 2C/K = 1: the multiplier of std 0.75 is 0.75 (float32-exact)
    assert algo.noise_multiplier_for(0.75, hp, [10, 10]) == 0.75
    with pytest.raises(ValueError, match=r"noise_std=-1.0 must be finite and >= 0"):
        algo.noise_multiplier_for(-1.0, hp, [10, 10])
    with pytest.raises(ValueError, match=r"noise_std=0.5 with an unbounded message \(clip norm inf\)"):
        algo.noise_multiplier_for(0.5, MbSgdHParams.create(0.5, 0.3, float("inf")), [10, 10])
    server = DpSgdGeneral(LogisticRegression(3), 2, 1, 4, 1, sampling="subsample", placement="server")
    with pytest.raises(ValueError, match=r"DpSgdGeneral: the aggregate's sensitivity depends on the round's reports"):
        server.message_sensitivity(DpSgdHParams.create(0.5, noise_multiplier=0.3, clip_norm=1.0), [10, 10])



def test_a_chain_family_without_averager_or_availability():
    from dpjax.engine import chain

    seen = []

    @dataclasses.dataclass(frozen=True)
    class _Part:
        roles: tuple

        def validate(self, data):
            seen.append(self.roles)

    class _Fam(chain.ChainFamily):
        def parts(self, shape):
            return chain.Parts(_Part(("selection",)), (_Part(("client",)), _Part(("server",))))

    state = types.SimpleNamespace(params={"w": np.arange(3.0)})
    assert _Fam().output_params(state) is state.params       # no averager: the released iterate is the last one
    data = types.SimpleNamespace(num_silos=2, min_size=3, n_max=3, x=np.zeros((2, 3, 4)), y=np.zeros((2, 3)))
    _Fam().validate(data)                                     # no availability: only the parts' own checks run
    assert seen == [("selection",), ("client",), ("server",)]
