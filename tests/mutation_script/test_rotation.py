"""experiments/mutation/run_mutants.py's rotating sample (CI's slow pass runs it): the rotation is deterministic,
every ceil(N / K) consecutive rotations cover the whole catalogue, the budget stops the sample's tail in its order,
and every mutant of the catalogue still applies to the tree (its old snippet occurs exactly once: a stale mutant
would make the CI step refuse to run). Running mutants is the script's job (CI), not this test's."""

import datetime
import importlib.util
import itertools
import math
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rm():
    spec = importlib.util.spec_from_file_location("run_mutants", REPO / "experiments/mutation/run_mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's string annotations through sys.modules
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


IDS = [f"M{i:02d}" for i in range(23)]  # 23 = 4 x 5 + 3: a short last chunk


@pytest.mark.parametrize("k", [1, 5, 7, 22, 23, 40])
def test_consecutive_rotations_cover_every_mutant(rm, k):
    chunks = math.ceil(len(IDS) / min(k, len(IDS)))
    for first in (0, 3, 20790):  # any window of `chunks` consecutive rotations, not only those starting at 0
        seen, chunk_ids = set(), set()
        for r in range(first, first + chunks):
            picked, chunk, n_chunks = rm.rotating_sample(IDS, k, r)
            assert n_chunks == chunks and chunk == r % chunks
            assert len(picked) == min(k, len(IDS)) == len(set(picked))  # K distinct mutants every time
            seen |= set(picked)
            chunk_ids.add(chunk)
        assert seen == set(IDS), (k, first, sorted(set(IDS) - seen))
        assert chunk_ids == set(range(chunks))


def test_rotation_is_deterministic_and_moves(rm):
    a = rm.rotating_sample(IDS, 5, 7)
    assert a == rm.rotating_sample(list(IDS), 5, 7)  # the same rotation, the same sample (no hidden state)
    assert rm.rotation_order(IDS) == rm.rotation_order(IDS) != IDS  # shuffled, but fixed
    # consecutive rotations take disjoint chunks (but the filled-up last one): they are not the same sample
    assert not set(rm.rotating_sample(IDS, 5, 0)[0]) & set(rm.rotating_sample(IDS, 5, 1)[0])
    assert rm.rotating_sample(IDS, 5, 2)[0] == rm.rotating_sample(IDS, 5, 2 + 5)[0]  # period ceil(23/5) = 5


def test_rotation_from_the_date_and_refusals(rm):
    # days since 1970-01-01: 2026-12-03 is day 20790 (56 years of 365 days + 14 leap days 1972..2024 + 336)
    assert rm.resolve_rotation("date", datetime.date(2026, 12, 3))[0] == 56 * 365 + 14 + 336 == 20790
    assert rm.resolve_rotation("date", datetime.date(2026, 12, 4))[0] == 20791  # the next day: the next chunk
    assert rm.resolve_rotation("17") == (17, "given")
    for bad in ("-1", "x", "1.5"):
        with pytest.raises(ValueError, match="rotation="):
            rm.resolve_rotation(bad)
    with pytest.raises(ValueError, match="k=0"):
        rm.rotating_sample(IDS, 0, 0)


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("costs,budget,ran", [
    ((10, 10, 10, 10), 100, 4),   # all fit
    ((10, 10, 10, 10), 30, 3),    # 30 spent + longest 10 > 30 after three: the fourth is skipped
    ((10, 10, 10, 10), 29, 2),    # 20 + 10 > 29 after two
    ((50, 1, 1, 1), 60, 1),       # the longest (50) is the estimate: 50 + 50 > 60
    ((5, 40, 1, 1), 60, 2),       # 5 + 5 <= 60: the second runs; 45 + 40 > 60: stop
    ((500,), 10, 1),              # the first mutant always runs (a budget that fits none would test nothing)
])
def test_budget_skips_the_tail_in_order(rm, costs, budget, ran):
    clock, order = _Clock(), []
    cost = dict(zip(IDS, costs))

    def run_one(m):
        order.append(m)
        clock.now += cost[m]
        return "caught"

    results, skipped = rm.run_in_budget(IDS[:len(costs)], run_one, budget, clock)
    assert order == IDS[:ran] == [m for m, _, _ in results]  # in the sample's order, never reordered
    assert skipped == IDS[ran:len(costs)]
    assert [s for _, _, s in results] == list(costs[:ran])


def test_every_catalogue_mutant_applies_once_and_names_its_tests(rm):
    rm._check(rm.MUTANTS)  # raises SystemExit naming a mutant whose old snippet is not exactly once in its file
    ids = [m.id for m in rm.MUTANTS]
    assert len(ids) == len(set(ids))
    for m in rm.MUTANTS:
        assert m.old != m.new, m.id
        assert m.targets and all((REPO / t).exists() for t in m.targets), m.id


def test_the_catalogue_sample_covers_it(rm):
    ids = [m.id for m in rm.MUTANTS]
    k = 12
    covered = set(itertools.chain.from_iterable(rm.rotating_sample(ids, k, r)[0]
                                                for r in range(math.ceil(len(ids) / k))))
    assert covered == set(ids)
