"""``dpjax.algorithms.hparams``: one declaration per hyperparameter, its check and dtype read by ``create``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.algorithms.diff2 import Diff2HParams
from dpjax.algorithms.dp_fedavg import FedAvgHParams
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams


def test_positional_and_named_arguments_bind_to_the_declared_fields():
    hp = MbSgdHParams.create(0.5, 2.0, clip_norm=3.0)
    assert (float(hp.learning_rate), float(hp.noise_multiplier), float(hp.clip_norm)) == (0.5, 2.0, 3.0)
    assert float(MbSgdHParams.create(0.5).noise_multiplier) == 0.0  # the declared default
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree_util.tree_leaves(hp))


@pytest.mark.parametrize("call, message", [
    (lambda: MbSgdHParams.create(0.1, noise_multiplier=-1.0), "noise_multiplier=-1.0 must be >= 0"),
    (lambda: MbSgdHParams.create(0.0), "learning_rate=0.0 must be > 0"),
    (lambda: Diff2HParams.create(0.1, restart_interval=0), "restart_interval=0"),
    (lambda: Diff2HParams.create(0.1, clip_diff=-2.0), "clip_diff=-2.0"),
    (lambda: FedAvgHParams.create(target_quantile=1.5), "target_quantile=1.5"),
    (lambda: FedAvgHParams.create(noise_multiplier_count=float("nan")), "noise_multiplier_count=nan"),
])
def test_each_field_is_checked_by_its_own_rule(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        call()


def test_inf_clip_is_allowed_where_declared():
    assert np.isinf(float(MbSgdHParams.create(0.1, clip_norm=float("inf")).clip_norm))


def test_wrong_arguments_are_type_errors_naming_the_fields():
    with pytest.raises(TypeError, match="unexpected argument 'clip'"):
        MbSgdHParams.create(0.1, clip=1.0)
    with pytest.raises(TypeError, match="needs 'learning_rate'"):
        MbSgdHParams.create()
    with pytest.raises(TypeError, match="both by position and by name"):
        MbSgdHParams.create(0.1, learning_rate=0.2)
    with pytest.raises(TypeError, match="at most 3 positional"):
        MbSgdHParams.create(0.1, 0.0, 1.0, 4.0)


def test_dtype_overrides_float_fields_only():
    with jax.enable_x64(True):
        hp = Diff2HParams.create(0.1, 3, dtype=jnp.float64)
        assert hp.learning_rate.dtype == jnp.float64 and hp.clip_local.dtype == jnp.float64
        assert hp.restart_interval.dtype == jnp.int32 and int(hp.restart_interval) == 3


def test_traced_values_pass_so_grids_can_vmap_the_constructor():
    lrs = jnp.array([0.1, 0.2, 0.4])
    hps = jax.vmap(lambda lr: MbSgdHParams.create(lr, noise_multiplier=1.0))(lrs)
    np.testing.assert_array_equal(hps.learning_rate, lrs)
