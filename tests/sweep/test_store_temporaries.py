"""Interrupted-write temporaries: stale ones are cleaned, another process's
in-flight one is left alone (several hosts may share a sweep directory)."""

import os
import time

import pytest

from dpjax.sweep import store


def test_only_stale_temporaries_are_removed(tmp_path):
    s = store.Store(tmp_path)
    s.runs_dir.mkdir(parents=True, exist_ok=True)
    fresh = s.runs_dir / ".chunk-0001.csv.otherhost-123.tmp"
    stale = s.runs_dir / ".chunk-0002.csv.deadhost-456.tmp"
    fresh.write_text("partial")
    stale.write_text("partial")
    old = time.time() - 2 * store.STALE_TEMP_SECONDS
    os.utime(stale, (old, old))
    s.clean_temporaries()
    assert fresh.exists(), "a fresh temporary may belong to a concurrent writer"
    assert not stale.exists()
    assert s.finished_chunks() == set(), "temporaries never count as finished chunks"


def test_atomic_write_leaves_no_temporary(tmp_path):
    target = tmp_path / "a" / "b.csv"
    store.atomic_write_text(target, "x,y\n1,2\n")
    assert target.read_text() == "x,y\n1,2\n"
    assert [p.name for p in target.parent.iterdir()] == ["b.csv"]


def test_resume_check_ignores_where_the_data_lies_but_not_which_data(tmp_path):
    from dpjax.sweep.store import check_same_sweep

    old = {"name": "s", "data": {"name": "isrl-mnist", "split_seed": 0, "data_dir": "/a/data"}}
    moved = {"name": "s", "data": {"name": "isrl-mnist", "split_seed": 0, "data_dir": "/b/data"}}
    check_same_sweep(tmp_path, old, moved)  # the same sweep, its files read from elsewhere
    check_same_sweep(tmp_path, old, {"name": "s", "data": {"name": "isrl-mnist", "split_seed": 0}})
    with pytest.raises(ValueError, match=r"different sweep \(config differs at \['data'\]\)"):
        check_same_sweep(tmp_path, old, {"name": "s", "data": {"name": "isrl-mnist", "split_seed": 1,
                                                               "data_dir": "/a/data"}})
