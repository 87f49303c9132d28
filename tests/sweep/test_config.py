"""Config parsing: every bad config fails with an error naming the key."""

import math

import pytest

from dpjax.sweep.config import SweepConfig, expand_axis
from tests.sweep.conftest import TINY

try:
    import tomllib
except ImportError:  # pragma: no cover
    tomllib = None


def base():
    return tomllib.loads(TINY)


def test_tiny_config_parses_and_roundtrips():
    cfg = SweepConfig.from_dict(base())
    assert cfg.grid["trial"] == (0, 1, 2) and cfg.grid["repetition"] == (0, 1)
    assert cfg.grid["learning_rate"] == pytest.approx((0.1, 10 ** -0.25, 10 ** 0.5))
    again = SweepConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.canonical_json() == cfg.canonical_json()


def test_logspace_base_e_matches_paper_grid():
    vals = expand_axis("learning_rate", {"logspace": [-6, 0, 10], "base": "e"})
    assert len(vals) == 10 and vals[0] == pytest.approx(math.exp(-6)) and vals[-1] == pytest.approx(1.0)
    assert vals[1] == pytest.approx(math.exp(-6 + 6 / 9))


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda d: d.update(bogus=1), "bogus"),
        (lambda d: d["grid"].update(step=[0.1]), "grid.step"),
        (lambda d: d["grid"].update(learning_rate=[]), "grid.learning_rate"),
        (lambda d: d["grid"].update(learning_rate=["fast"]), "grid.learning_rate[0]"),
        (lambda d: d["grid"].update(trial=0), "grid.trial"),
        (lambda d: d["grid"].update(repetition=[0, 0]), "grid.repetition"),
        (lambda d: d["grid"].update(learning_rate={"logspace": [1, 2]}), "grid.learning_rate.logspace"),
        (lambda d: d["static"].update(batchsize=4), "static.batchsize"),
        (lambda d: d["static"].update(batch_size="big"), "static.batch_size"),
        (lambda d: d["data"].update(rows=3), "data.rows"),
        (lambda d: d["data"].update(name="nope"), "data.name"),
        (lambda d: d.update(algorithm="nope"), "algorithm"),
        (lambda d: d.update(num_rounds=0), "num_rounds"),
        (lambda d: d.update(num_rounds="6"), "num_rounds"),
        (lambda d: d.update(eval_every=7), "eval_every"),
        (lambda d: d.update(on_nonfinite="ignore"), "on_nonfinite"),
        (lambda d: d.pop("grid"), "grid"),
        (lambda d: d.update(grid={}), "grid"),
        (lambda d: d["grid"].pop("learning_rate"), "grid.learning_rate"),
        (lambda d: d["grid"].update(epsilon=[1.0]), "grid.epsilon"),
        (lambda d: (d["grid"].pop("noise_multiplier"), d["grid"].update(epsilon=[1.0])), "privacy"),
        (lambda d: (d["grid"].pop("noise_multiplier"), d["grid"].update(epsilon=[-1.0]),
                    d.update(privacy={"accountant": "rdp", "delta": 1e-5})), "grid.epsilon[0]"),
        (lambda d: d.update(privacy={"accountant": "rdp", "delta": 2.0}), "privacy.delta"),
        (lambda d: d.update(privacy={"accountant": "magic", "delta": 1e-5}), "privacy.accountant"),
        (lambda d: d.update(privacy={"accountant": "rdp", "delta": 1e-5, "eps": 1}), "privacy.eps"),
    ],
)
def test_bad_configs_name_the_key(mutate, key):
    d = base()
    mutate(d)
    with pytest.raises(ValueError) as err:
        SweepConfig.from_dict(d)
    assert key in str(err.value)


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        SweepConfig.from_toml(tmp_path / "none.toml")
    p = tmp_path / "bad.toml"
    p.write_text("name = ")
    with pytest.raises(ValueError, match="not valid TOML"):
        SweepConfig.from_toml(p)


def test_static_axis_in_grid_is_allowed_and_exclusive_with_static():
    d = base()
    d["static"].pop("batch_size")
    d["grid"]["batch_size"] = [4, 8]
    assert SweepConfig.from_dict(d).grid["batch_size"] == (4, 8)
    d["static"]["batch_size"] = 4
    with pytest.raises(ValueError, match="grid.batch_size"):
        SweepConfig.from_dict(d)


def test_shipped_fig4_config_parses():
    import pathlib

    import dpjax.sweep

    path = pathlib.Path(dpjax.sweep.__file__).parent / "configs" / "isrl_fig4_mbsgd_appendix_i.toml"
    cfg = SweepConfig.from_toml(path)
    assert cfg.grid["availability"] == (12, 25) and len(cfg.grid["learning_rate"]) == 10
    assert len(cfg.grid["trial"]) == 20 and len(cfg.grid["repetition"]) == 3
