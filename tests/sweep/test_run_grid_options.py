"""``dpjax.engine.run_grid`` options: one key per lane (== ``engine.run_many``), the host round loop
(== ``engine.run``/``run_many`` with ``round_loop="host"``) and per-trial data splits (== one call
per split, one compiled program for equal-shape trials). Equalities are exact: the same programs
run on the same inputs, so any reordering of arithmetic would show in the last bit."""

import jax
import numpy as np
import pytest

from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.engine import OutputParams, SiloData, Trial, program, run, run_grid, run_many, stack_hparams
from dpjax.problems import FlaxProblem, LogisticRegression


def _flax_grid():
    """DP-SGD-General (batch clipping, shuffling) on a tiny flax MLP; the last run diverges."""
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(nn.tanh(nn.Dense(8)(x)))

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 5)).astype(np.float32)
    y = rng.integers(0, 3, 40).astype(np.int32)
    problem = FlaxProblem(MLP(), (5,), "softmax")
    alg = DpSgdGeneral.for_epochs(problem, 32, 2, subset_size=4, num_subsets=2)
    hps = stack_hparams([DpSgdHParams.create(lr, noise_multiplier=0.7, clip_norm=c)
                         for lr, c in ((0.1, 0.5), (0.5, 1.0), (2.0, 1.0), (3e38, 1.0))])

    def eval_fn(params, ed):
        return {"loss": problem.loss(params, ed[0], ed[1]).mean()}

    return alg, SiloData.from_silos([x[:32]], [y[:32]]), hps, jax.random.split(jax.random.key(3), 4), eval_fn, \
        (x[32:], y[32:])


def _glm_grid(num_rounds=7, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(20, 4)).astype(np.float32) for _ in range(3)]
    ys = [rng.integers(0, 2, 20).astype(np.float32) for _ in range(3)]
    problem = LogisticRegression(4)
    alg = NoisyMbSgd(problem, num_rounds=num_rounds, batch_size=4)
    hps = stack_hparams([MbSgdHParams.create(lr, 0.5, 1.0) for lr in (0.1, 0.4, 1.6, 3.0)])
    return alg, SiloData.from_silos(xs, ys), hps, jax.random.split(jax.random.key(9), 4)


def _leaves_equal(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for u, v in zip(la, lb):
        np.testing.assert_array_equal(u, v)


@pytest.mark.slow
def test_one_key_per_lane_in_one_chunk_equals_run_many():
    """``common_random_numbers=False`` with every run in one chunk is ``run_many``'s program (first
    run's starting point), bit for bit: evaluations, output parameters and divergence flags."""
    alg, data, hps, ks, eval_fn, ed = _flax_grid()
    ref = run_many(alg, data, hps, ks, eval_fn=eval_fn, eval_data=ed, on_nonfinite="mark")
    got = run_grid(alg, data, hps, ks, eval_fn=eval_fn, eval_data=ed, common_random_numbers=False, chunk_size=4)
    np.testing.assert_array_equal(got.evals["loss"], ref.eval_metrics["loss"])
    np.testing.assert_array_equal(got.diverged_round, ref.diverged_round)
    assert got.diverged_round[-1] >= 0 and (got.diverged_round[:-1] == -1).all()

    alg, data, hps, ks = _glm_grid()
    got = run_grid(alg, data, hps, ks, eval_fn=OutputParams(), common_random_numbers=False, chunk_size=4)
    np.testing.assert_array_equal(got.evals["params"][:, -1], run_many(alg, data, hps, ks).output)
    assert len(np.unique(got.evals["params"][:, -1, 0])) == 4  # distinct runs: the equality can fail


@pytest.mark.slow
def test_host_round_loop_equals_the_engines_host_loop():
    """``round_loop="host"``: a chunk of one run is ``engine.run(..., round_loop="host")``, a wider
    chunk ``engine.run_many(..., round_loop="host")``; both bit for bit, divergence marked."""
    alg, data, hps, ks, eval_fn, ed = _flax_grid()
    one = run_grid(alg, data, hps, ks, eval_fn=eval_fn, eval_data=ed, common_random_numbers=False, chunk_size=1,
                   round_loop="host")
    for i in range(len(ks)):
        ref = run(alg, data, jax.tree_util.tree_map(lambda a: a[i], hps), ks[i], eval_fn=eval_fn, eval_data=ed,
                  round_loop="host", on_nonfinite="mark")
        np.testing.assert_array_equal(one.evals["loss"][i], ref.eval_metrics["loss"])
        assert one.diverged_round[i] == ref.diverged_round
    assert one.diverged_round[-1] >= 0 and len(np.unique(one.evals["loss"][:3, -1])) == 3
    # a pytree metric (the flax parameters) comes back per run, leaf by leaf
    wide = run_grid(alg, data, hps, ks, eval_fn=OutputParams(), common_random_numbers=False, chunk_size=8,
                    round_loop="host")
    ref = run_many(alg, data, hps, ks, round_loop="host", on_nonfinite="mark")
    _leaves_equal(jax.tree_util.tree_map(lambda a: a[:, -1], wide.evals["params"]), ref.output)
    np.testing.assert_array_equal(wide.diverged_round, ref.diverged_round)
    # common random numbers: one shared key, the chunk's runs vmapped over hparams only
    alg, data, hps, ks = _glm_grid()
    shared = run_grid(alg, data, hps, np.stack([jax.random.key_data(ks[0])] * 4), eval_fn=OutputParams(),
                      round_loop="host")
    ref = run_many(alg, data, hps, ks[0], shared_key=True, round_loop="host")
    np.testing.assert_array_equal(shared.evals["params"][:, -1], ref.output)


def _trial_data(seed, n=20):
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(n, 4)).astype(np.float32) for _ in range(3)]
    ys = [rng.integers(0, 2, n).astype(np.float32) for _ in range(3)]
    return SiloData.from_silos(xs, ys)


@pytest.mark.parametrize("common", [True, False])
@pytest.mark.slow
def test_per_trial_splits_equal_one_call_per_split_and_compile_once(common):
    """Runs of three trials, interleaved in the run order, equal three calls on one split each (bit for
    bit); the equal-shape trials share one compiled program, a trial of another shape adds one."""
    alg, _, hps, _ = _glm_grid(num_rounds=5)  # 5 rounds: a program no other test compiles
    problem = alg.problem

    def eval_fn(params, ed):
        return {"loss": problem.loss(params, ed.x.reshape(-1, 4), ed.y.reshape(-1)).mean()}

    splits = [_trial_data(s) for s in (1, 2, 3)]
    start = problem.init_params(jax.random.key(7)) + 0.3
    trials = [Trial(d, d, start if t == 1 else None) for t, d in enumerate(splits)]
    trial_of_run = np.array([0, 1, 2, 0, 1, 2, 2, 1, 0, 0, 1, 2])
    run_keys = np.stack([np.asarray(jax.random.key_data(jax.random.key(int(r // 6 if common else r))))
                         for r in range(12)])
    hp = jax.tree_util.tree_map(lambda a: np.concatenate([a, a, a]), hps)
    before = program.COMPILATIONS["count"]
    got = run_grid(alg, trials, hp, run_keys, trial_of_run=trial_of_run, eval_fn=eval_fn, eval_every=2,
                   common_random_numbers=common, chunk_size=3)
    assert program.COMPILATIONS["count"] - before == 1
    for t, trial in enumerate(trials):
        runs = np.flatnonzero(trial_of_run == t)
        alone = run_grid(alg, trial.data, jax.tree_util.tree_map(lambda a: a[runs], hp), run_keys[runs],
                         eval_fn=eval_fn, eval_data=trial.eval_data, params=trial.params, eval_every=2,
                         common_random_numbers=common, chunk_size=3)
        np.testing.assert_array_equal(got.evals["loss"][runs], alone.evals["loss"])
    assert program.COMPILATIONS["count"] - before == 1  # the separate calls reuse it too
    assert len(np.unique(got.evals["loss"][:, -1])) == 12  # trials, keys and step sizes all matter
    bigger = trials + [Trial(_trial_data(4, n=30), _trial_data(4, n=30))]
    # trial 2's runs move to a split with more records (trial 2 keeps no run): same chunks, one new shape
    run_grid(alg, bigger, hp, run_keys, trial_of_run=np.where(trial_of_run == 2, 3, trial_of_run), eval_fn=eval_fn,
             eval_every=2, common_random_numbers=common, chunk_size=3)
    assert program.COMPILATIONS["count"] - before == 2


def test_new_options_reject_bad_input():
    alg, data, hps, ks = _glm_grid()
    with pytest.raises(ValueError, match="round_loop='unrolled'"):
        run_grid(alg, data, hps, ks, round_loop="unrolled")
    cpu = jax.local_devices()[0]
    with pytest.raises(ValueError, match="round_loop='host' runs on one device"):
        run_grid(alg, data, hps, ks, round_loop="host", devices=[cpu, cpu])
    trials = [Trial(data), Trial(data)]
    with pytest.raises(ValueError, match="trial_of_run=.*needs data given as a sequence of Trial"):
        run_grid(alg, data, hps, ks, trial_of_run=[0, 0, 0, 0])
    with pytest.raises(ValueError, match="trial_of_run .* is required"):
        run_grid(alg, trials, hps, ks)
    with pytest.raises(ValueError, match="must lie in \\[0, 2\\)"):
        run_grid(alg, trials, hps, ks, trial_of_run=[0, 1, 2, 0])
    with pytest.raises(ValueError, match="expected 4 integers"):
        run_grid(alg, trials, hps, ks, trial_of_run=[0, 1])
    with pytest.raises(ValueError, match="eval_data must be None with per-trial splits"):
        run_grid(alg, trials, hps, ks, trial_of_run=[0, 1, 1, 0], eval_data=data)
    with pytest.raises(ValueError, match="sequence of\\s+dpjax.engine.Trial"):
        run_grid(alg, [data, data], hps, ks, trial_of_run=[0, 1, 1, 0])


@pytest.mark.slow
def test_pad_to_reuses_one_program_for_smaller_grids():
    """``pad_to``: a grid of 2 runs padded to 4 lanes compiles no new program after a 4-run grid of the
    same algorithm (the grid-extension case), and its runs equal the 4-run grid's first two runs up to
    float reordering (a run's lane count is part of its program)."""
    alg, data, hps, ks = _glm_grid(num_rounds=5, seed=4)
    common = jax.random.split(jax.random.key(1), 1)
    keys4 = jax.numpy.concatenate([common] * 4)
    full = run_grid(alg, data, hps, keys4, eval_fn=OutputParams(), chunk_size=8)
    two, keys2 = jax.tree_util.tree_map(lambda a: a[:2], hps), keys4[:2]
    compiles = []

    def listener(event, duration, fun_name="", **kw):
        if event == "/jax/core/compile/backend_compile_duration" and "per_device" in fun_name:
            compiles.append(fun_name)  # a chunk program (engine.program._sharded's per_device)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        padded = run_grid(alg, data, two, keys2, eval_fn=OutputParams(), chunk_size=8, pad_to=4)
        assert compiles == []
        unpadded = run_grid(alg, data, two, keys2, eval_fn=OutputParams(), chunk_size=8)
        assert len(compiles) == 1  # a 2-lane program is new: the check above could fail
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    np.testing.assert_allclose(padded.evals["params"], full.evals["params"][:2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(unpadded.evals["params"], padded.evals["params"], rtol=1e-5, atol=1e-6)
