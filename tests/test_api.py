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
    for name, line in listed.items():
        cls_name, text = line.split(": ", 1)
        assert cls_name == _families()[name].cls.__name__ and hasattr(dpjax.algorithms, cls_name)
        assert "\n" not in line and 15 < len(text) < 130, line
    assert listed["dp-sgd"].startswith("DpSgd: central DP-SGD")


def test_the_listed_line_is_the_registry_entrys_description(capsys):
    """One registry: list_algorithms(), `dpjax sweep --algorithms` and the docs table show each entry's
    ``description`` (read from the register_family lines without importing the families, or from the
    imported registry: both are the entry's)."""
    from dpjax.cli import main
    from dpjax.docs import build

    entries = _families()
    declared = dpjax.algorithms.declared_families()
    assert declared == {n: (e.cls.__name__, e.description) for n, e in entries.items()}
    listed = dpjax.list_algorithms()
    assert main(["sweep", "--algorithms"]) == 0
    cli_lines = dict(line.split(None, 1) for line in capsys.readouterr().out.strip().splitlines())
    table = build.algorithms_table()
    for name, entry in entries.items():
        assert entry.description and listed[name] == f"{entry.cls.__name__}: {entry.description}"
        assert cli_lines[name] == listed[name]
        assert f"| `{name}` | `{entry.cls.__name__}` |" in table
    assert not hasattr(dpjax, "DESCRIPTIONS")  # the one registry: no second table of lines


def test_a_family_registered_at_run_time_is_listed_with_its_description(monkeypatch):
    from dpjax.algorithms import NoisyMbSgd

    monkeypatch.setattr(registry, "ALGORITHMS", dict(_families()))
    registry.register_family("my-dp-mbsgd", NoisyMbSgd, "my ISRL-DP MB-SGD with a line of its own",
                             twin={"my-mbsgd": "my non-private MB-SGD, the twin of my-dp-mbsgd"})
    registry.register_family("my-other", NoisyMbSgd, twin="my-other-twin")  # lines by default
    listed = dpjax.list_algorithms()
    assert listed["my-dp-mbsgd"] == "NoisyMbSgd: my ISRL-DP MB-SGD with a line of its own"
    assert listed["my-mbsgd"] == "NoisyMbSgd: my non-private MB-SGD, the twin of my-dp-mbsgd"
    assert listed["my-other"] == f"NoisyMbSgd: {registry.first_sentence(NoisyMbSgd)}"
    assert listed["my-other-twin"] == "NoisyMbSgd: the non-private twin of my-other"
    assert not registry.ALGORITHMS["my-mbsgd"].private and registry.ALGORITHMS["my-dp-mbsgd"].private


def test_a_registration_the_static_reader_cannot_read_falls_back_to_the_registry(monkeypatch):
    monkeypatch.setattr(dpjax.algorithms, "declared_families", lambda: None)
    assert dpjax.list_algorithms() == {n: f"{e.cls.__name__}: {e.description}" for n, e in sorted(_families().items())}


def test_top_level_docstring_points_to_the_entry_points():
    doc = dpjax.__doc__
    for needle in ("list_algorithms", "dpjax.algorithms", "dpjax.engine", "RunResult", "dpjax.primitives",
                   "dpjax.accounting", "dpjax --help", "reproduce --list", "sweep --list"):
        assert needle in doc, needle
