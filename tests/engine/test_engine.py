"""The compiled engine with ISRL-DP Noisy MB-SGD: determinism, vmap == loop,
the non-private twin, unequal silo sizes, NaN detection."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import keys
from dpjax.engine import program
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.engine import NonFiniteError, SiloData, run, run_many, stack_hparams
from dpjax.primitives import FixedAvailability, FullAvailability, RandomAvailability
from dpjax.problems import LinearRegression, LogisticRegression

DIM = 5


def _silos(sizes=(30, 40, 25, 35), seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=DIM)
    xs = [rng.normal(size=(n, DIM)).astype(np.float32) for n in sizes]
    ys = [(x @ w + 0.3 * rng.normal(size=len(x)) > 0).astype(np.float32) for x in xs]
    return xs, ys


@pytest.fixture(scope="module")
def data():
    return SiloData.from_silos(*_silos())


@pytest.fixture(scope="module")
def algo():
    return NoisyMbSgd(LogisticRegression(DIM), num_rounds=12, batch_size=6, availability=FixedAvailability(3))


def test_same_seed_bit_identical_and_different_seed_differs(algo, data):
    hp = MbSgdHParams.create(0.5, 0.2, 1.0)
    a = run(algo, data, hp, jax.random.key(3))
    b = run(algo, data, hp, jax.random.key(3))
    c = run(algo, data, hp, jax.random.key(4))
    np.testing.assert_array_equal(a.output, b.output)
    assert not np.array_equal(a.output, c.output)


@pytest.mark.slow
def test_vmapped_runs_equal_runs_one_by_one(algo, data):
    configs = [(0.1, 0.0, 1.0), (0.5, 0.3, 1.0), (1.0, 0.1, 0.5), (2.0, 1.0, 2.0)]
    run_keys = jax.random.split(jax.random.key(9), len(configs))
    batched = run_many(algo, data, stack_hparams([MbSgdHParams.create(*c) for c in configs]), run_keys)
    for i, c in enumerate(configs):
        single = run(algo, data, MbSgdHParams.create(*c), run_keys[i])
        np.testing.assert_allclose(batched.output[i], single.output, rtol=1e-6, atol=1e-7)


def _reference_minibatch_sgd(algo, data, lr, key):
    """Plain minibatch SGD written out by hand with the engine's key schedule."""
    w = np.zeros(DIM, np.float64)
    loss_grad = jax.grad(algo.problem.loss)
    for r in range(algo.num_rounds):
        rk = keys.round_key(key, r)
        avail = np.asarray(algo.availability.sample(keys.stream_key(rk, "availability"), data.num_silos))
        silo_k = keys.silo_keys(keys.stream_key(rk, "sampling"), data.num_silos)
        grads = []
        for i in range(data.num_silos):
            idx, _, _ = algo.sampler.draw(silo_k[i], data.sizes[i], data.n_max, r, None)
            g = np.mean([np.asarray(loss_grad(jnp.asarray(w, jnp.float32), data.x[i, j], data.y[i, j])) for j in np.asarray(idx)], axis=0)
            grads.append(g)
        w = w - lr * np.mean([g for g, a in zip(grads, avail) if a], axis=0)
    return w


@pytest.mark.slow
def test_nonprivate_twin_is_plain_minibatch_sgd(algo, data):
    twin = dataclasses.replace(algo, private=False, num_rounds=5, gradient_path="gather")
    key = jax.random.key(11)
    res = run(twin, data, MbSgdHParams.create(0.7), key)
    ref = _reference_minibatch_sgd(twin, data, 0.7, key)
    np.testing.assert_allclose(res.output, ref, rtol=1e-5, atol=1e-6)


def test_private_with_zero_noise_and_loose_clip_equals_twin(algo, data):
    # Same batches (same keys); the twin differentiates the batch-mean loss
    # instead of summing per-example gradients, so only float rounding differs.
    key = jax.random.key(12)
    private = run(algo, data, MbSgdHParams.create(0.7, 0.0, 1e6), key)
    twin = run(dataclasses.replace(algo, private=False), data, MbSgdHParams.create(0.7), key)
    np.testing.assert_allclose(private.output, twin.output, rtol=1e-5, atol=1e-6)


def test_noise_changes_the_result_and_scales_with_sigma(algo, data):
    key = jax.random.key(13)
    base = run(algo, data, MbSgdHParams.create(0.5, 0.0, 1.0), key).output
    small = run(algo, data, MbSgdHParams.create(0.5, 0.01, 1.0), key).output
    large = run(algo, data, MbSgdHParams.create(0.5, 1.0, 1.0), key).output
    # same keys: the trajectories differ only by the noise term (common random numbers)
    assert 0 < np.linalg.norm(small - base) < np.linalg.norm(large - base)


@pytest.mark.slow
def test_unequal_silo_sizes_never_touch_padding():
    xs, ys = _silos(sizes=(7, 50, 12))
    data = SiloData.from_silos(xs, ys)
    # poison the padded rows: if any were sampled the result would be NaN or differ
    poisoned = SiloData(
        x=jnp.where(data.mask[..., None], data.x, jnp.nan), y=data.y, mask=data.mask, sizes=data.sizes
    )
    for sampling in ("without-replacement", "with-replacement", "poisson", "one-pass"):
        algo = NoisyMbSgd(LogisticRegression(DIM), num_rounds=3, batch_size=2, sampling=sampling)
        clean = run(algo, data, MbSgdHParams.create(0.5, 0.1, 1.0), jax.random.key(0))
        dirty = run(algo, poisoned, MbSgdHParams.create(0.5, 0.1, 1.0), jax.random.key(0))
        np.testing.assert_array_equal(clean.output, dirty.output)


@pytest.mark.slow
def test_nan_run_stops_with_round_and_run_named(data):
    algo = NoisyMbSgd(LinearRegression(DIM), num_rounds=10, batch_size=5, private=False)
    xs, _ = _silos()
    ys = [1e3 * np.ones(len(x), np.float32) for x in xs]
    big = SiloData.from_silos([1e3 * x for x in xs], ys)
    with pytest.raises(NonFiniteError, match=r"round \d+"):
        run(algo, big, MbSgdHParams.create(100.0), jax.random.key(0))
    hps = stack_hparams([MbSgdHParams.create(1e-9), MbSgdHParams.create(100.0)])
    with pytest.raises(NonFiniteError, match=r"run 1 .*round \d+"):
        run_many(algo, big, hps, jax.random.split(jax.random.key(0), 2))
    marked = run_many(algo, big, hps, jax.random.split(jax.random.key(0), 2), on_nonfinite="mark")
    assert marked.diverged_round[0] == -1 and marked.diverged_round[1] >= 0


@pytest.mark.slow
def test_random_availability_and_window_output_run(data):
    algo = NoisyMbSgd(
        LogisticRegression(DIM), num_rounds=10, batch_size=4,
        availability=RandomAvailability((0.25, 0.25, 0.25, 0.25)), output="window", window=3,
    )
    res = run(algo, data, MbSgdHParams.create(0.5, 0.1, 1.0), jax.random.key(2))
    counts = res.round_metrics["num_available"]
    assert counts.min() >= 1 and counts.max() <= 4 and len(set(counts.tolist())) > 1
    # window output = mean of the last 3 iterates, recomputed by hand
    iterates = []
    for r in (8, 9, 10):
        short = dataclasses.replace(algo, num_rounds=r, output="last")
        iterates.append(run(short, data, MbSgdHParams.create(0.5, 0.1, 1.0), jax.random.key(2)).output)
    np.testing.assert_allclose(res.output, np.mean(iterates, axis=0), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_paper_average_output_excludes_last_iterate(data):
    algo = NoisyMbSgd(LogisticRegression(DIM), num_rounds=4, batch_size=4, output="average")
    hp = MbSgdHParams.create(0.5, 0.1, 1.0)
    res = run(algo, data, hp, jax.random.key(5))
    iterates = [np.zeros(DIM)] + [
        run(dataclasses.replace(algo, num_rounds=r, output="last"), data, hp, jax.random.key(5)).output for r in (1, 2, 3)
    ]
    np.testing.assert_allclose(res.output, np.mean(iterates, axis=0), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def _largest_array(jaxpr) -> int:
    """The most elements of any value in ``jaxpr`` and its sub-jaxprs (scan bodies, ...)."""
    from jax.extend import core as jcore
    most = 0
    for eqn in jaxpr.eqns:
        for var in list(eqn.invars) + list(eqn.outvars):
            shape = getattr(getattr(var, "aval", None), "shape", ())
            most = max(most, int(np.prod(shape)) if shape else 1)
        for p in eqn.params.values():
            for sub in (p if isinstance(p, (tuple, list)) else (p,)):
                if isinstance(sub, jcore.ClosedJaxpr):
                    most = max(most, _largest_array(sub.jaxpr))
                elif isinstance(sub, jcore.Jaxpr):
                    most = max(most, _largest_array(sub))
    return most


@pytest.mark.parametrize("eval_every", [None, 10**8])
def test_a_sweep_lane_of_a_billion_rounds_holds_no_per_round_array(data, eval_every):
    """The lane a sweep compiles keeps its round index and its divergence/overflow flags in the scan's carry: no
    ``[num_rounds]`` array (10^9 rounds were a 4 GB ``arange`` plus every per-round metric, growing past 8 GB)."""
    rounds = 10**9
    algo = NoisyMbSgd(LogisticRegression(DIM), num_rounds=rounds, batch_size=6)
    lane = program.run_program(algo, lambda p, e: {"norm": jnp.sum(p ** 2)}, eval_every, flags=True)
    hp = MbSgdHParams.create(0.5, 0.2, 1.0)
    jaxpr = jax.make_jaxpr(lane)(hp, data, None, jax.random.key(0), jnp.zeros(DIM))
    assert _largest_array(jaxpr.jaxpr) < 10**6


def test_flags_in_the_carry_equal_the_per_round_metrics(data):
    """The carried flags are ``checks.run_flags`` of the per-round metrics (also for a run that diverges mid-way)."""
    from dpjax.engine.checks import run_flags
    algo = NoisyMbSgd(LinearRegression(DIM), num_rounds=40, batch_size=6)
    for lr in (0.01, 1e6):  # the second grows geometrically (clip far away) to inf after a few rounds
        hp = MbSgdHParams.create(lr, 0.0, 3e38)
        args = (hp, data, None, jax.random.key(1), jnp.ones(DIM))
        eval_fn = lambda p, e: {"norm": jnp.sum(p ** 2)}  # noqa: E731
        full = jax.jit(program.run_program(algo, eval_fn, 4))(*args)
        flags = jax.jit(program.run_program(algo, eval_fn, 4, flags=True))(*args)
        diverged, overflow = run_flags(jax.device_get(full[2]))
        assert int(flags["diverged_round"]) == int(diverged) and int(flags["overflow_round"]) == int(overflow)
        np.testing.assert_array_equal(flags["evals"]["norm"], full[3]["norm"])
        assert (int(diverged) > 0) == (lr > 1)


def test_eval_schedule_is_closed_form_and_bounded():
    """10^12 rounds: the schedule is built without a list of every round, and one with more points than are stored is
    refused naming eval_every (it was a MemoryError from ``list(range(...))``)."""
    import time
    start = time.perf_counter()
    pts = program.eval_schedule(10**12, 10**7)
    assert pts.size == 10**5 and pts[0] == 10**7 and pts[-1] == 10**12 and time.perf_counter() - start < 1.0
    np.testing.assert_array_equal(program.eval_schedule(10, 4), [4, 8, 10])
    np.testing.assert_array_equal(program.eval_schedule(12, 4), [4, 8, 12])
    np.testing.assert_array_equal(program.eval_schedule(7, None), [7])
    with pytest.raises(ValueError, match=r"eval_every=1 over num_rounds=1000000000 gives 1000000000 evaluations"):
        program.eval_schedule(10**9, 1)


def test_eval_schedule_and_metrics(algo, data):
    x, y, m = data.pooled()
    res = run(
        algo, data, MbSgdHParams.create(0.5, 0.0, 1.0), jax.random.key(0),
        eval_fn=lambda p, d: algo.problem.evaluate(p, *d), eval_data=(x, y, m), eval_every=5,
    )
    np.testing.assert_array_equal(res.eval_rounds, [5, 10, 12])
    assert res.eval_metrics["loss"].shape == (3,)
    # the last evaluation is of the returned output
    final = algo.problem.evaluate(jnp.asarray(res.output), x, y, m)
    assert float(final["loss"]) == pytest.approx(float(res.eval_metrics["loss"][-1]), rel=1e-5)


def test_privacy_reads_the_run_config(algo):
    hp = MbSgdHParams.create(0.5, 0.3, 2.0)
    s = algo.privacy([25, 30], hp).schedule  # the smallest silo certifies
    assert s.steps == algo.num_rounds and s.batch_size == algo.batch_size and s.dataset_size == 25
    assert s.noise_multiplier == pytest.approx(0.3) and s.sampling.value == algo.sampling
    assert algo.message_sensitivity(hp, [25, 30]) == pytest.approx(2 * 2.0 / algo.batch_size)
    assert not dataclasses.replace(algo, private=False).privacy([25], hp).private


def test_run_noise_std_is_the_multiplier_times_the_clipped_sensitivity():
    """Zero data (zero gradients), one round of SGD at lr 1: w_1 = -(1/M) sum_i u_i, so the measured
    per-coordinate std of w_1 times sqrt(M) is each silo's noise std, z x 2C/K (C = 2, K = 6)."""
    dim, z, clip, k, m = 4000, 0.3, 2.0, 6, 3
    xs = [np.zeros((10, dim), np.float32)] * 4
    zero = SiloData.from_silos(xs, [np.zeros(10, np.float32)] * 4)
    alg = NoisyMbSgd(LogisticRegression(dim), num_rounds=1, batch_size=k,
                     availability=FixedAvailability(m))
    out = np.asarray(run(alg, zero, MbSgdHParams.create(1.0, z, clip), jax.random.key(5)).output, np.float64)
    std = float(np.std(out)) * np.sqrt(m)
    assert std == pytest.approx(z * 2 * clip / k, rel=5 * np.sqrt(1 / (2 * dim)))


@pytest.mark.slow
def test_one_compile_serves_a_grid(algo, data):
    from dpjax import engine

    engine.compiled_runner.cache_clear()
    for lrs in ([0.1, 0.2], [0.3, 0.4]):
        hps = stack_hparams([MbSgdHParams.create(lr, 0.1, 1.0) for lr in lrs])
        run_many(algo, data, hps, jax.random.split(jax.random.key(0), 2))
    fn = engine.compiled_runner(algo, None, None, True, None, None, 0)
    assert fn._cache_size() == 1


@pytest.mark.slow
def test_dense_and_gather_paths_agree_in_law():
    # Same algorithm, two gradient paths (different draws, same law): with
    # full-batch-like K = n both are deterministic given the data and agree.
    xs, ys = _silos(sizes=(20, 20, 20))
    data = SiloData.from_silos(xs, ys)
    hp = MbSgdHParams.create(0.5, 0.0, 0.3)
    outs = [
        run(NoisyMbSgd(LogisticRegression(DIM), num_rounds=6, batch_size=20, gradient_path=p), data, hp, jax.random.key(1)).output
        for p in ("gather", "dense")
    ]
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="gradient_path"):
        NoisyMbSgd(LogisticRegression(DIM), num_rounds=2, batch_size=2, gradient_path="fast")


@pytest.mark.parametrize("sampling,batch_size,dense", [
    ("without-replacement", 10, True),   # a mask draw, K >= n/8: two dense passes
    ("without-replacement", 2, False),   # K < n/8: gather the few rows
    ("with-replacement", 10, False),     # weights are a scatter of K indices: gather
    ("one-pass", 3, False),
    ("poisson", 10, True),
])
def test_auto_gradient_path_rule(sampling, batch_size, dense):
    xs, ys = _silos(sizes=(20, 20, 20))
    data = SiloData.from_silos(xs, ys)
    algo = NoisyMbSgd(LogisticRegression(DIM), num_rounds=2, batch_size=batch_size, sampling=sampling)
    assert algo._dense(data) is dense
    # a problem without a closed form always gathers
    assert not dataclasses.replace(algo, problem=_NoClosedForm(LogisticRegression(DIM)))._dense(data)


@dataclasses.dataclass(frozen=True)
class _NoClosedForm:
    inner: object

    def loss(self, params, x, y):
        return self.inner.loss(params, x, y)


@pytest.mark.slow
def test_shared_key_grid_equals_runs_with_that_key(algo, data):
    configs = [(0.1, 0.0, 1.0), (0.5, 0.3, 1.0), (1.0, 0.1, 0.5)]
    key = jax.random.key(21)
    grid = run_many(algo, data, stack_hparams([MbSgdHParams.create(*c) for c in configs]), key, shared_key=True)
    for i, c in enumerate(configs):
        single = run(algo, data, MbSgdHParams.create(*c), key)
        np.testing.assert_allclose(grid.output[i], single.output, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="shared_key"):
        run_many(algo, data, stack_hparams([MbSgdHParams.create(*c) for c in configs]), jax.random.split(key, 3), shared_key=True)


@pytest.mark.slow
def test_host_round_loop_equals_scan(algo, data):
    """round_loop="host" runs the same rounds with the same keys: outputs, per-round metrics and the
    eval schedule equal the scan's (float32 round-off only: XLA compiles the two programs separately)."""
    x, y, m = data.pooled()
    configs = [(0.1, 0.0, 1.0), (0.5, 0.3, 1.0), (1.0, 0.1, 0.5)]
    hps = stack_hparams([MbSgdHParams.create(*c) for c in configs])
    run_keys = jax.random.split(jax.random.key(13), len(configs))
    kw = dict(eval_fn=lambda p, d: algo.problem.evaluate(p, *d), eval_data=(x, y, m), eval_every=5)
    scan = run_many(algo, data, hps, run_keys, **kw)
    host = run_many(algo, data, hps, run_keys, round_loop="host", **kw)
    np.testing.assert_allclose(host.output, scan.output, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(host.eval_rounds, scan.eval_rounds)
    assert host.eval_metrics["loss"].shape == scan.eval_metrics["loss"].shape == (3, 3)
    np.testing.assert_allclose(host.eval_metrics["loss"], scan.eval_metrics["loss"], rtol=1e-5)
    assert set(host.round_metrics) == set(scan.round_metrics)
    for k, v in scan.round_metrics.items():
        assert host.round_metrics[k].shape == v.shape == (3, algo.num_rounds)
        np.testing.assert_array_equal(host.round_metrics[k], v)  # integer/boolean metrics: exact
    single = run(algo, data, MbSgdHParams.create(*configs[1]), run_keys[1], round_loop="host")
    np.testing.assert_allclose(single.output, scan.output[1], rtol=1e-5, atol=1e-6)
    assert single.round_metrics["num_available"].shape == (algo.num_rounds,)
    with pytest.raises(ValueError, match="round_loop"):
        run(algo, data, MbSgdHParams.create(*configs[1]), run_keys[1], round_loop="while")


@pytest.mark.slow
def test_host_round_loop_reports_nonfinite_round(data):
    algo = NoisyMbSgd(LinearRegression(DIM), num_rounds=10, batch_size=5, private=False)
    xs, _ = _silos()
    big = SiloData.from_silos([1e3 * x for x in xs], [1e3 * np.ones(len(x), np.float32) for x in xs])
    hps = stack_hparams([MbSgdHParams.create(1e-9), MbSgdHParams.create(100.0)])
    ks = jax.random.split(jax.random.key(0), 2)
    scan = run_many(algo, big, hps, ks, on_nonfinite="mark")
    host = run_many(algo, big, hps, ks, on_nonfinite="mark", round_loop="host")
    np.testing.assert_array_equal(host.diverged_round, scan.diverged_round)
    assert host.diverged_round[1] >= 0
