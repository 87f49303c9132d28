"""Planning: tiles cover every run exactly once, ids are stable and distinct."""

import itertools

import pytest
import tomllib

from dpjax.sweep import plan
from dpjax.sweep.config import SweepConfig
from tests.sweep.conftest import TINY


@pytest.mark.parametrize("T,S,H,c", [(3, 2, 6, 12), (3, 2, 6, 5), (5, 3, 7, 4), (1, 1, 1, 9), (4, 3, 2, 100)])
def test_tiles_cover_each_run_once(T, S, H, c):
    g = plan.Group(0, {}, tuple(range(T)), tuple(range(S)), tuple({"learning_rate": i} for i in range(H)))
    chunks = plan.build_chunks([g], c)
    shapes = {(len(ch.trial_idx), len(ch.rep_idx), len(ch.cfg_idx)) for ch in chunks}
    assert len(shapes) == 1  # one static shape: one compilation
    tc, sc, hc = shapes.pop()
    assert tc * sc * hc <= max(c, 1) or (tc, sc, hc) == (1, 1, 1)
    seen = []
    for ch in chunks:
        for lt, ls, lh in ch.lanes():
            seen.append((ch.trial_idx[lt], ch.rep_idx[ls], ch.cfg_idx[lh]))
    assert sorted(seen) == sorted(itertools.product(range(T), range(S), range(H)))
    assert sum(ch.num_runs for ch in chunks) == T * S * H


def test_run_ids_stable_and_distinct():
    cfg = SweepConfig.from_dict(tomllib.loads(TINY))
    groups = plan.build_groups(cfg)
    ids = [plan.run_id(plan.identity(cfg, g, t, s, h)) for g in groups for t in g.trials for s in g.repetitions
           for h in g.configs]
    assert len(ids) == len(set(ids)) == plan.num_runs(groups) == 3 * 2 * 6
    again = SweepConfig.from_dict(tomllib.loads(TINY))
    g = plan.build_groups(again)[0]
    assert plan.run_id(plan.identity(again, g, 0, 0, g.configs[0])) == ids[0]


def test_static_axes_make_groups():
    d = tomllib.loads(TINY)
    d["static"].pop("batch_size")
    d["grid"]["batch_size"] = [4, 8]
    d["static"].pop("sampling")
    d["grid"]["sampling"] = ["with-replacement", "without-replacement"]
    groups = plan.build_groups(SweepConfig.from_dict(d))
    assert [g.static["batch_size"] for g in groups] == [4, 4, 8, 8]
    assert {g.static["sampling"] for g in groups} == {"with-replacement", "without-replacement"}
