"""Every grid driver goes through ``dpjax.engine.run_grid`` and reproduces its pre-refactoring numbers.

The expectations (``data/pipeline_expectations.npz``) were written by
``python -m tests.sweep.pipeline_cases --data-dir ../shared/data`` on the code
before the drivers were moved onto the sweep executor (the ``dpsgd_mnist_grid``
and ``shuffle_sco_points`` cases on commit b1d1c2f, where those drivers still
called ``dpjax.engine.run``/``run_many``); equality is exact (the same compiled
arithmetic, the same keys, the same chunk widths). The ``diff2/`` arrays were re-recorded once, with
``--only diff2``, when small noise draws went back to ``jax.random.normal`` (issue #24's round overhead):
the noise is the same numbers, but the update around it fuses differently (largest relative change
6.9e-7, in grad_norm_sq; every other case stayed bit-identical). The ``dpsgd_mnist_grid/ic/`` arrays
were re-recorded with ``--only dpsgd_mnist_grid`` when ghost clipping's materialised per-example
convolution gradients moved to chunked strided-slice patches (issue #25: the same products summed in
another order; largest relative change 1.09e-7, in test_accuracy; batch clipping bit-identical). The ``isrl_grid/local/`` arrays were re-recorded with ``--only isrl_grid``
when Local SGD's sequential steps moved the runs axis inside the silo axis and clipped a GLM record by
its closed form (issue #25: the same arithmetic in another layout; largest relative change 7.7e-7, in
train_loss; the MB-SGD and softmax arrays bit-identical). ``dpsgd_mnist_grid/ic/diverged`` was
re-recorded (``--only dpsgd_mnist_grid``) when ``ghost_clipped_sum`` began zeroing a non-finite
example's contribution as ``clip_to_norm`` does (e4c5a94, issue #39): the lr = 3e38 run's one
overflowing example no longer turns round 1's sum into NaN, so it diverges at round 5 instead of 1;
every other array bit-identical.
"""

import numpy as np
import pytest

from dpjax.engine import program
from tests.sweep import pipeline_cases as cases


@pytest.fixture
def expected():
    return np.load(cases.EXPECTATIONS)


@pytest.fixture
def counted(monkeypatch):
    """Counts chunk executions (scan or host round loop) and makes the old per-driver paths
    (``dpjax.engine.run_many`` and ``dpjax.engine.run``) fail loudly."""
    calls = {"chunks": 0}
    import dpjax.engine

    def spy(self, args, _original=program.ChunkProgram.run_chunks):
        calls["chunks"] += 1
        return _original(self, args)

    monkeypatch.setattr(program.ChunkProgram, "run_chunks", spy)
    for name in ("run_many", "run"):
        def bypass(*args, _name=name, **kwargs):
            raise AssertionError(f"a grid driver called {_name} instead of dpjax.engine.run_grid")

        monkeypatch.setattr(dpjax.engine, name, bypass)
        monkeypatch.setattr(dpjax.engine.executor, name, bypass)
    return calls


def _check(got: dict, expected, prefix: str):
    names = [k for k in expected.files if k.startswith(prefix)]
    assert names and sorted(names) == sorted(got)
    for k in names:
        np.testing.assert_array_equal(got[k], expected[k], err_msg=k)


@pytest.mark.parametrize("case", sorted(cases.CASES))
@pytest.mark.slow
def test_driver_through_executor_and_unchanged(case, expected, counted):
    got = cases.CASES[case]()
    assert counted["chunks"] > 0
    _check(got, expected, case + "/")


@pytest.mark.slow
def test_diff2_driver_through_executor_and_unchanged(expected, counted, shared_data):
    got = cases.diff2_dataset(str(shared_data))
    assert counted["chunks"] > 0
    _check(got, expected, "diff2/")


def _tiny_grid():
    import jax.numpy as jnp

    from dpjax import keys
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.engine import SiloData, stack_hparams
    from dpjax.problems import LogisticRegression
    from dpjax.sweep.table import Evaluator, eval_data_for

    xs, ys, tx, ty = cases._synthetic_silos(num_silos=3, n=20, d=4, seed=5)
    train = SiloData.from_silos(xs, ys)
    problem = LogisticRegression(4)
    algo = NoisyMbSgd(problem, num_rounds=5, batch_size=4)
    grid = [(lr, rep) for rep in range(2) for lr in (0.1, 0.4, 1.6)]
    hps = stack_hparams([MbSgdHParams.create(lr, 0.5, 1.0) for lr, _ in grid])
    run_keys = jnp.stack([keys.run_key(3, rep) for _, rep in grid])
    return algo, train, hps, run_keys, Evaluator(problem), eval_data_for(train, tx, ty), grid


@pytest.mark.parametrize("common", [True, False])
@pytest.mark.slow
def test_run_grid_returns_runs_in_the_order_given(common):
    """Reversing the runs (same chunk widths) reverses the results bit for bit: lanes are independent
    and ``run_grid`` puts each result back at its run's index."""
    import jax

    from dpjax.engine import run_grid

    algo, train, hps, run_keys, ev, ed, grid = _tiny_grid()
    rev = np.arange(len(grid))[::-1]
    a = run_grid(algo, train, hps, run_keys, eval_fn=ev, eval_data=ed, common_random_numbers=common, chunk_size=3)
    b = run_grid(algo, train, jax.tree_util.tree_map(lambda x: x[rev], hps), run_keys[rev], eval_fn=ev,
                 eval_data=ed, common_random_numbers=common, chunk_size=3)
    np.testing.assert_array_equal(a.evals["train_loss"], b.evals["train_loss"][rev])
    np.testing.assert_array_equal(a.diverged_round, b.diverged_round[rev])
    # different step sizes and keys give different results (the comparison above can fail)
    assert len(np.unique(a.evals["train_loss"][:, -1])) == len(grid)


@pytest.mark.slow
def test_run_grid_agrees_with_single_runs():
    """Each lane is the run ``dpjax.engine.run`` does alone, up to float32 reassociation of batched
    products (a few ulps per round over 5 rounds: rtol 1e-5)."""
    import jax

    from dpjax.engine import run
    from dpjax.engine import run_grid

    algo, train, hps, run_keys, ev, ed, grid = _tiny_grid()
    res = run_grid(algo, train, hps, run_keys, eval_fn=ev, eval_data=ed, chunk_size=4)
    for i in range(len(grid)):
        one = run(algo, train, jax.tree_util.tree_map(lambda x: x[i], hps), run_keys[i], eval_fn=ev, eval_data=ed)
        np.testing.assert_allclose(res.evals["train_loss"][i], one.eval_metrics["train_loss"], rtol=1e-5)


def test_run_grid_rejects_bad_input():
    import jax

    from dpjax.engine import NonFiniteError
    from dpjax.engine import run_grid

    algo, train, hps, run_keys, ev, ed, grid = _tiny_grid()
    with pytest.raises(ValueError, match="leading axis must be the number of runs"):
        run_grid(algo, train, hps, run_keys[:3], eval_fn=ev, eval_data=ed)
    with pytest.raises(ValueError, match="chunk_size=0"):
        run_grid(algo, train, hps, run_keys, eval_fn=ev, eval_data=ed, chunk_size=0)
    huge = jax.tree_util.tree_map(lambda x: x * 0 + 1e30, hps)
    with pytest.raises(NonFiniteError, match="NaN/inf"):
        run_grid(algo, train, huge, run_keys, eval_fn=ev, eval_data=ed, on_nonfinite="raise")
    assert (run_grid(algo, train, huge, run_keys, eval_fn=ev, eval_data=ed).diverged_round >= 0).all()
