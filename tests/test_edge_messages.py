"""Issue #39's "unclear messages" block: each bad input is refused with dpjax's own message naming the argument, the
file or the layer, not a raw library error (each case failed on the tree before the fix with the error quoted)."""

import gzip
import struct

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.data import isrl, mnist, tabular
from dpjax.engine import SiloData, run, run_grid, run_many
from dpjax.primitives import clipping, ghost_clipping, projection
from dpjax.primitives import noise as noise_lib
from dpjax.problems import LogisticRegression


def _silos():
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(n, 3)).astype(np.float32) for n in (6, 7)]
    return SiloData.from_silos(xs, [np.ones(len(x), np.float32) for x in xs])


@pytest.mark.privacy
def test_hparams_built_under_jit_are_checked_at_the_executor():
    # was: a clip of -1 built inside jax.jit ran unchecked (a meaningless, negative sensitivity)
    hp = jax.jit(lambda c: MbSgdHParams.create(0.1, 1.0, c))(-1.0)
    algo = NoisyMbSgd(LogisticRegression(3), num_rounds=1, batch_size=2)
    with pytest.raises(ValueError, match=r"clip_norm=-1.0 must be > 0"):
        run(algo, _silos(), hp, jax.random.key(0))
    stacked = jax.jit(jax.vmap(lambda c: MbSgdHParams.create(0.1, 1.0, c)))(jnp.array([1.0, -2.0]))
    keys = jax.random.split(jax.random.key(0), 2)
    with pytest.raises(ValueError, match=r"clip_norm\[1\]=-2.0 must be > 0"):
        run_many(algo, _silos(), stacked, keys)
    with pytest.raises(ValueError, match=r"clip_norm\[1\]=-2.0 must be > 0"):
        run_grid(algo, _silos(), stacked, keys)
    MbSgdHParams.create(0.1, 1.0, 0.5).validate()  # a valid one passes


def _dense_loss():
    model = nn.Dense(2)
    params = model.init(jax.random.key(0), jnp.ones((1, 3)))

    def loss(p, xi, yi):
        return jnp.sum((model.apply(p, xi) - yi) ** 2)
    return loss, params


@pytest.mark.privacy
@pytest.mark.parametrize("path", ["ghost", "per-example"])
def test_clipping_refuses_mismatched_batch_axes(path):
    # was: "vmap got inconsistent sizes for array axes to be mapped: ... argument yi of type float32[6,2]"
    loss, params = _dense_loss()
    fn = ghost_clipping.ghost_clipped_sum if path == "ghost" else clipping.per_example_clipped_sum
    with pytest.raises(ValueError, match=r"same leading batch size.*x has 5, y has 6"):
        fn(loss, params, jnp.ones((5, 3)), jnp.ones((6, 2)), 1.0)
    with pytest.raises(ValueError, match=r"mask has shape \(4,\); it must be \[B\] = \(5,\)"):
        fn(loss, params, jnp.ones((5, 3)), jnp.ones((5, 2)), 1.0, mask=jnp.ones(4))
    with pytest.raises(ValueError, match=r"y is a scalar"):
        fn(loss, params, jnp.ones((5, 3)), jnp.float32(1.0), 1.0)


class _NNXWithBatchNorm(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(3, 2, rngs=rngs)
        self.bn = nnx.BatchNorm(2, rngs=rngs)  # training mode by default

    def __call__(self, x):
        return self.bn(self.lin(x))


@pytest.mark.privacy
@pytest.mark.parametrize("require_fast", [True, False])
def test_nnx_batch_norm_in_training_mode_is_refused_by_name(require_fast):
    # was: flax's "TraceContextError: Cannot mutate BatchStat from a different trace level"
    model = _NNXWithBatchNorm(nnx.Rngs(0))
    loss, params = ghost_clipping.nnx_loss(model, lambda m, x, y: jnp.sum((m(x) - y) ** 2))
    with pytest.raises(ValueError, match=r"BatchNorm 'bn' is in training mode.*model.eval\(\)"):
        ghost_clipping.ghost_clipped_sum(loss, params, jnp.ones((4, 3)), jnp.ones((4, 2)), 1.0,
                                         require_fast=require_fast)
    model.eval()  # with running averages the same model is accepted
    loss, params = ghost_clipping.nnx_loss(model, lambda m, x, y: jnp.sum((m(x) - y) ** 2))
    res = ghost_clipping.ghost_clipped_sum(loss, params, jnp.ones((4, 3)), jnp.ones((4, 2)), 1.0)
    assert np.isfinite(float(res.count)) and float(res.count) == 4


def test_single_class_labels_name_the_missing_digits():
    # was: "n_per_digit=10 ... needs 50 images of digit 1 ... (use replace=True or a smaller n)"
    images = np.zeros((200, 4, 4), np.uint8)
    with pytest.raises(ValueError, match=r"no image of digit\(s\) \[1, 2, 3, 4, 5, 6, 7, 8, 9\] \(present: \[0\]\)"):
        isrl.isrl_mnist_silos(images, np.zeros(200, np.uint8), seed=0, n_per_digit=2, pca_dim=None)


def _idx_header(shape):
    return b"\x00\x00\x08" + bytes([len(shape)]) + struct.pack(f">{len(shape)}I", *shape)


def test_truncated_idx_files_are_called_truncated(tmp_path):
    short = tmp_path / "short-idx3-ubyte"
    short.write_bytes(_idx_header((60000, 28, 28)) + bytes(100))
    with pytest.raises(ValueError, match=r"short-idx3-ubyte is truncated .* 47040000 bytes .* holds 100"):
        mnist.read_idx(short)
    # was: "needs -17179869183" bytes (int64 overflow of a corrupt header's dimensions)
    huge = tmp_path / "huge-idx"
    huge.write_bytes(_idx_header((2**32 - 1,) * 4) + bytes(8))
    with pytest.raises(ValueError, match=r"is truncated") as err:
        mnist.read_idx(huge)
    assert "-" not in str(err.value).split("declares shape")[1].split("bytes of data")[0]
    packed = gzip.compress(_idx_header((10, 28, 28)) + bytes(7840))
    cut = tmp_path / "cut-idx3-ubyte.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(ValueError, match=r"cut-idx3-ubyte.gz is a truncated or corrupt gzip file"):
        mnist.read_idx(cut)
    extra = tmp_path / "extra-idx"
    extra.write_bytes(_idx_header((2, 2)) + bytes(6))
    with pytest.raises(ValueError, match=r"2 bytes follow the 4 bytes"):
        mnist.read_idx(extra)


def test_binary_csv_names_its_file(tmp_path):
    # was: "'utf-8' codec can't decode byte 0xca in position 0" without the file's name
    f = tmp_path / "obesity" / "ObesityDataSet_raw_and_data_sinthetic.csv"
    f.parent.mkdir()
    f.write_bytes(b"\xca\xfe" * 64)
    with pytest.raises(ValueError, match=r"ObesityDataSet_raw_and_data_sinthetic.csv is not a readable UTF-8 CSV"):
        tabular.load_obesity(tmp_path, verify=False)


def test_shuffled_epoch_too_large_says_which_knob():
    # was: "rounds_per_epoch*num_subsets*subset_size=120 must be <= the smallest silo size n=50"
    from types import SimpleNamespace

    from dpjax.parts.selection import SubsetBatches

    data = SimpleNamespace(min_size=50)
    epoch = SubsetBatches("shuffle", subset_size=4, num_subsets=3, rounds_per_epoch=10, num_rounds=10)
    with pytest.raises(ValueError, match=r"rounds_per_epoch=10 batches of num_subsets=3 x subset_size=4 records, "
                                         r"120 in all.*n=50.*rounds_per_epoch <= 4 here"):
        epoch.validate(data)
    batch = SubsetBatches("subsample", subset_size=20, num_subsets=3, rounds_per_epoch=1, num_rounds=10)
    with pytest.raises(ValueError, match=r"num_subsets=3 x subset_size=20 = 60 records must be <= .* n=50"):
        batch.validate(data)
    SubsetBatches("shuffle", subset_size=4, num_subsets=3, rounds_per_epoch=4, num_rounds=10).validate(data)


@pytest.mark.parametrize("call,message", [
    (lambda: noise_lib.add_gaussian_noise(jax.random.key(0), {"a": jnp.zeros(3)}, {"b": 1.0}),
     r"std=\{.b.: 1.0\} must be a scalar .* got dict"),
    (lambda: noise_lib.add_gaussian_noise(jax.random.key(0), {"a": jnp.zeros(3)}, jnp.ones(2)),
     r"std=Array\(\[1\., 1\.\].* must be a scalar .* got shape \(2,\)"),
    (lambda: noise_lib.gaussian_like(jax.random.key(0), {"a": "x"}, 1.0), r"tree\['a'\] is a str"),
    (lambda: noise_lib.add_gaussian_noise(0, {"a": jnp.zeros(3)}, 1.0), r"key=0 must be a PRNG key array"),
    (lambda: clipping.clip_to_norm({"a": "x"}, 1.0), r"tree\['a'\] is a str"),
    (lambda: clipping.global_norm("abc"), r"tree is a str"),
    (lambda: clipping.clip_per_example({"a": jnp.zeros((3, 2)), "b": jnp.zeros(4)}, 1.0),
     r"grads\['a'\] has 3, grads\['b'\] has 4"),
    (lambda: clipping.clipped_sum({"a": jnp.zeros((3, 2)), "b": jnp.zeros(4)}, 1.0), r"one leading example axis"),
    (lambda: projection.project_l2_ball({"a": "x"}, 1.0), r"tree\['a'\] is a str"),
])
def test_wrong_pytrees_are_refused_by_name(call, message):
    # each was a raw jax message (abstract-array interpretation, vmap axis sizes, key data, float() of a dict)
    with pytest.raises(ValueError, match=message):
        call()


def test_run_refuses_wrong_params_and_data_by_name():
    algo = NoisyMbSgd(LogisticRegression(3), num_rounds=1, batch_size=2)
    hp = MbSgdHParams.create(0.1, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"params has tree structure .*init_params has"):
        run(algo, _silos(), hp, jax.random.key(0), params={"w": jnp.zeros(3)})
    with pytest.raises(ValueError, match=r"params has shape \(4,\); the problem's init_params has \(3,\)"):
        run(algo, _silos(), hp, jax.random.key(0), params=jnp.zeros(4))
    with pytest.raises(ValueError, match=r"data=tuple must be a dpjax SiloData"):
        run(algo, ([np.zeros((3, 3))], [np.zeros(3)]), hp, jax.random.key(0))
    out = run(algo, _silos(), hp, jax.random.key(0), params=jnp.zeros(3))  # the right structure runs
    assert np.all(np.isfinite(np.asarray(out.output)))
