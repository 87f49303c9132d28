"""A dp_accounting PLD made dense before a long self-composition (issue 39: bounded work).

dp_accounting's sparse self-composition decides whether to go dense by computing ``size ** count`` as a Python
integer; ``dense_for_self_compose`` makes that decision in logarithms first, so 10^8..10^12 steps answer in seconds."""

from __future__ import annotations

import math


def dense_for_self_compose(pld, count: int):
    """``pld`` with its PMFs made dense where dp_accounting's own ``self_compose(count)`` would make them dense.

    Its sparse self-composition decides that by computing ``size ** count`` as a Python integer: for a sparse PMF of a
    few points (large noise) and 10^8 steps that is a number of hundreds of millions of bits, computed before anything
    else (the cause of ``dpjax account ... --steps 100000000`` never answering). The same test in logarithms, then
    the same dense self-composition: the same PLD, bit for bit."""
    from dp_accounting.pld import pld_pmf, privacy_loss_distribution as pld_lib

    sparse_max = pld_pmf._MAX_PMF_SPARSE_SIZE  # noqa: SLF001 (the threshold its self_compose uses)

    def dense(pmf):
        if not isinstance(pmf, pld_pmf.SparsePLDPmf) or pmf.size <= 1:
            return pmf
        if count < 64:  # small powers: the library's exact integer test
            return pmf.to_dense_pmf() if pmf.size ** count > sparse_max else pmf
        return pmf.to_dense_pmf() if count * math.log(pmf.size) > math.log(sparse_max) + 1e-9 else pmf

    remove, add = pld._pmf_remove, pld._pmf_add  # noqa: SLF001 (no public accessor for the PMFs)
    if pld._symmetric:  # noqa: SLF001
        return pld_lib.PrivacyLossDistribution(dense(remove))
    return pld_lib.PrivacyLossDistribution(dense(remove), dense(add))
