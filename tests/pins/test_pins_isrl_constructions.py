"""ISRL-DP (Lowy & Razaviyayn, ICLR 2023) experiment constructions pinned to the printed rule, computed by hand.

Issue #42 item 3; split from test_pins_isrl.py because importing ``dpjax.reproduce`` costs seconds.

Inventory: ``reproduce.isrl.constructions.experiment_batch_size`` (Appendix I's K vs the authors' scripts' floor) ->
``test_experiment_batch_size_constructions``, ``test_experiment_batch_size_spec_value``.
"""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.privacy


# -- Experiments' K from the sweep's largest eps: Appendix I ceil(n sqrt(eps_max)/(2 sqrt R)); the authors' scripts
#    int(max(1, n sqrt(eps_max/(4R)))) (a floor). Spec/docstring: n = 1238, R = 35, eps_max = 18 -> 444 vs 443.
@pytest.mark.parametrize("n, R, eps_max", [(1238, 35, 18.0), (8673, 25, 15.0), (300, 12, 0.5)])
def test_experiment_batch_size_constructions(n, R, eps_max):
    from dpjax.reproduce.isrl.constructions import experiment_batch_size

    assert experiment_batch_size(n, R, eps_max, "paper") == min(max(math.ceil(n * math.sqrt(eps_max) / (2 * math.sqrt(R))), 1), n)
    assert experiment_batch_size(n, R, eps_max, "authors") == int(max(1, math.floor(n * math.sqrt(eps_max / (4 * R)))))


def test_experiment_batch_size_spec_value():
    from dpjax.reproduce.isrl.constructions import experiment_batch_size

    assert (experiment_batch_size(1238, 35, 18.0, "paper"), experiment_batch_size(1238, 35, 18.0, "authors")) == (444, 443)

