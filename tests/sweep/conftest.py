import textwrap

import pytest

TINY = textwrap.dedent(
    """
    name = "tiny"
    algorithm = "isrl-mbsgd"
    num_rounds = 6
    eval_every = 3
    seed = 3
    [static]
    batch_size = 8
    sampling = "without-replacement"
    [data]
    name = "synthetic-logistic"
    num_silos = 3
    n = 40
    dim = 4
    n_test = 16
    [grid]
    learning_rate = { logspace = [-1, 0.5, 3], base = 10 }
    noise_multiplier = [0.0, 0.5]
    clip_norm = ["1*maxnorm"]
    repetition = 2
    trial = 3
    """
)


@pytest.fixture
def tiny_toml(tmp_path):
    p = tmp_path / "tiny.toml"
    p.write_text(TINY)
    return p
