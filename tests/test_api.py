"""A discoverable API: ``dpjax.algorithms.__all__`` holds every registered family class and its
hyperparameters, ``dpjax.list_algorithms()`` names every registered family with a line, and the
top-level docstring points to the entry points."""

import inspect

import dpjax
import dpjax.algorithms
from dpjax.algorithms import load_families
from dpjax.engine import registry


def _families():
    load_families()
    return registry.ALGORITHMS


def test_algorithms_all_holds_every_family_and_its_hparams():
    exported = {name: getattr(dpjax.algorithms, name) for name in dpjax.algorithms.__all__}
    for name, entry in _families().items():
        for obj in (entry.cls, entry.cls.hparams_type):
            assert any(v is obj for v in exported.values()), f"{name}: {obj.__name__} is not in dpjax.algorithms.__all__"
    assert len(set(dpjax.algorithms.__all__)) == len(dpjax.algorithms.__all__)
    for name, obj in exported.items():  # each name is what it says (a class of that name)
        if name in ("algorithm_entry", "load_families"):  # the two registry helpers
            assert inspect.isfunction(obj) and obj.__doc__, name
            continue
        assert inspect.isclass(obj) and obj.__name__ in (name, obj.__name__) and obj.__doc__, name


def test_list_algorithms_names_every_registered_family_with_a_line():
    listed = dpjax.list_algorithms()
    assert list(listed) == sorted(_families())
    assert set(dpjax.DESCRIPTIONS) == set(_families()), "add a line to dpjax.DESCRIPTIONS for a new family"
    for name, line in listed.items():
        cls_name, text = line.split(": ", 1)
        assert cls_name == _families()[name].cls.__name__ and hasattr(dpjax.algorithms, cls_name)
        assert "\n" not in line and 15 < len(text) < 130, line
    assert listed["dp-sgd"].startswith("DpSgd: central DP-SGD")


def test_top_level_docstring_points_to_the_entry_points():
    doc = dpjax.__doc__
    for needle in ("list_algorithms", "dpjax.algorithms", "dpjax.engine", "RunResult", "dpjax.primitives",
                   "dpjax.accounting", "dpjax --help", "reproduce --list", "sweep --list"):
        assert needle in doc, needle
