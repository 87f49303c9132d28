"""`dpjax audit training`: the one-run audit of actual DP-SGD-General and ISRL-DP Noisy MB-SGD
training runs (Dirac gradient canaries), its mutants (wrapped clipper / privatizer) and its CLI."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.auditing import training
from dpjax.auditing.execute import run_family
from dpjax.cli import main
from dpjax.engine.silos import SiloData


def _dirac_data(values):
    m = len(values)
    x = np.stack([np.arange(m, dtype=np.float32), np.asarray(values, np.float32)], axis=1)
    return SiloData.from_silos([x], [np.zeros(m, np.float32)])


def test_dirac_probe_clipped_sum_equals_autodiff():
    probe = training.DiracProbe(6)
    x = jnp.asarray([[0, 3.0], [2, -0.5], [5, 10.0], [2, 2.0]], jnp.float32)
    w = jnp.asarray([1.0, 0.0, 0.5, 1.0, 0.0, 1.0])
    weights = jnp.asarray([1.0, 1.0, 0.5, 1.0])
    per_example = jax.vmap(jax.grad(probe.loss), in_axes=(None, 0, None))(w, x, None)
    norms = jnp.linalg.norm(per_example, axis=1)
    expected = jnp.sum((weights * jnp.minimum(1.0, 1.0 / norms))[:, None] * per_example, axis=0)
    np.testing.assert_allclose(probe.weighted_grad_sum(w, x, None, weights, clip_norm=1.0), expected, rtol=1e-6)
    np.testing.assert_allclose(probe.row_sq_norms(x), norms ** 2, rtol=1e-6)


@pytest.mark.parametrize("name", training.FAMILIES)
def test_mutants_change_only_their_part(name):
    """Same key, same records (canaries at 50 x the clip), same noise draws: the half-noise run's noise is
    half the honest run's; the no-clip run moves each coordinate by the canary value instead of the clip."""
    m, rounds, c = 8, 2, 1.0
    fam = training.build_family(name, m, rounds)
    key = jax.random.key(3)[None]
    zero = jnp.zeros((m,), jnp.float32)
    signs = np.where(np.arange(m) % 2 == 0, 1.0, -1.0)

    def final(family):
        res = run_family(family, _dirac_data(50 * signs), training._hparams(name, 2.0, c), key, params=zero)
        return np.asarray(res.eval_metrics["params"])[0, -1]

    clipped, unclipped = -rounds * c * signs / m, -rounds * 50 * signs / m  # eta = 1, message = sum / m (+ noise)
    noise = final(fam) - clipped
    assert np.std(noise) > 0.1  # sigma = 2: per-coordinate noise std 2 sigma C sqrt(rounds) / m ~ 0.7
    np.testing.assert_allclose(final(training.mutant_family(fam, "half-noise")) - clipped, noise / 2, atol=1e-5)
    np.testing.assert_allclose(final(training.mutant_family(fam, "no-clip")) - unclipped, noise, atol=1e-5)
    mutant = training.mutant_family(fam, "no-clip")
    assert type(mutant).__name__.endswith("[no-clip]") and mutant.num_rounds == fam.num_rounds
    hp = training._hparams(name, 2.0, c)
    assert mutant.privacy([m], hp).epsilon(1e-5, training.ACCOUNTANTS[name]).epsilon == \
        fam.privacy([m], hp).epsilon(1e-5, training.ACCOUNTANTS[name]).epsilon


def test_cli_honest_run_passes_and_clip_skipping_mutant_is_caught(tmp_path, capsys):
    out = tmp_path / "report"
    argv = ["audit", "training", "--family", "dpsgd-general", "--mutant", "no-clip", "--canaries", "2000",
            "--rounds", "2", "--noise-multiplier", "2.83", "--delta", "1e-6", "--out", str(out)]
    assert main(argv) == 0
    data = json.loads((out / "training_audit.json").read_text())
    honest, mutant = data["audits"]
    assert honest["mutant"] is None and mutant["mutant"] == "no-clip"
    assert 0 < honest["lower_bound"] <= honest["certified_epsilon"]  # mu = sqrt(2)/2.83 = 0.5: eps(1e-6) = 2.25
    assert honest["certified_epsilon"] == pytest.approx(2.25, abs=0.02)
    assert mutant["lower_bound"] > mutant["certified_epsilon"] == honest["certified_epsilon"]
    assert data["meta"]["passed"] and "| dpsgd-general | no-clip |" in (out / "training_audit.md").read_text()
    assert main(argv) == 2  # refuses to overwrite, before any run
    assert "--overwrite" in capsys.readouterr().err


@pytest.mark.parametrize("argv,needle", [
    (["audit", "training", "dp-gd"], "runs alone"),
    (["audit", "training", "--canaries", "1"], "canaries=1"),
    (["audit", "training", "--canaries", "100000", "--delta", "1e-3"], "delta=0.001 is too large"),
])
def test_training_bad_input_is_one_line_and_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", training.FAMILIES)
def test_default_audit_catches_half_noise(name):
    """The CLI default (10^6 canaries, delta 1e-9): honest passes, both mutants caught."""
    audits = [training.training_audit(name, mut) for mut in (None,) + training.MUTANTS]
    assert all(a.passed for a in audits), [training.format_row(a) for a in audits]
