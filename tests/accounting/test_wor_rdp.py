"""The RDP of sampling without replacement (replace-one) computed with shared forward differences
(dpjax.accounting.wor_rdp.wor_gaussian_rdp) is dp_accounting's, bit for bit, and so is every epsilon
the RdpAccountant path reports for such schedules."""

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rpa

from dpjax.accounting import wor_rdp


@pytest.mark.parametrize("q,sigma", [(444 / 1238, 0.8), (1 / 1238, 3.0), (0.5, 0.3), (0.01, 25.0), (1.0, 2.0)])
def test_wor_rdp_equals_dp_accounting(q, sigma):
    orders = np.asarray(list(rpa.DEFAULT_RDP_ORDERS) + [7.5, 300.0, 1024.0, np.inf], float)
    ours = wor_rdp.wor_gaussian_rdp(q, sigma, orders)
    theirs = rpa._compute_rdp_sample_wor_gaussian(q, sigma, orders)
    np.testing.assert_array_equal(ours, theirs)


def test_rdp_vector_equals_the_accountant_for_a_wor_schedule():
    event = dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(1238, 444, dpa.GaussianDpEvent(0.9)), 35)
    acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(event)
    q, z, count = wor_rdp.wor_gaussian_parts(event, dpa.NeighboringRelation.REPLACE_ONE)
    orders = np.asarray(rpa.DEFAULT_RDP_ORDERS, float)
    np.testing.assert_array_equal(np.zeros_like(orders) + count * wor_rdp.wor_gaussian_rdp(q, z, orders), acc._rdp)
    assert wor_rdp.wor_gaussian_parts(event, dpa.NeighboringRelation.ADD_OR_REMOVE_ONE) is None
    assert wor_rdp.wor_gaussian_parts(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(1.0), 3),
                                     dpa.NeighboringRelation.REPLACE_ONE) is None
