import json

import pytest

from dpjax.accounting import cli


def test_cli_json_matches_issue_vector(capsys):
    rc = cli.main(["--sampling", "poisson", "--noise-multiplier", "1.1", "--batch-size", "256", "--dataset-size", "60000",
                   "--steps", "14062", "--delta", "1e-5", "--neighboring", "add-remove", "--accountant", "rdp", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["epsilon"] == pytest.approx(2.5966, abs=5e-5)
    assert {"epsilon", "delta", "noise_multiplier", "noise_std", "accountant", "sampling", "neighboring"} <= set(out)


def test_cli_calibrate_table(capsys):
    rc = cli.main(["--sampling", "without-replacement", "--epsilon", "2", "--sampling-rate", "0.05", "--dataset-size", "200",
                   "--steps", "20", "--delta", "1e-5"])
    text = capsys.readouterr().out
    assert rc == 0 and "target epsilon" in text and "without-replacement" in text
    eps = float(next(line.split()[-1] for line in text.splitlines() if line.startswith("epsilon")))
    assert eps <= 2


def test_cli_errors_are_clean(capsys):
    assert cli.main(["--noise-multiplier", "1", "--batch-size", "10", "--dataset-size", "100", "--steps", "5", "--delta", "2"]) == 2
    assert "delta=2.0" in capsys.readouterr().err
    assert cli.main(["--sampling", "without-replacement", "--noise-multiplier", "1", "--batch-size", "10", "--dataset-size", "100",
                     "--steps", "5", "--delta", "1e-5", "--accountant", "pld"]) == 2
    assert "accountant='pld'" in capsys.readouterr().err


def test_add_account_parser():
    import argparse

    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    cli.add_account_parser(sub)
    args = p.parse_args(["account", "--noise-multiplier", "1", "--batch-size", "10", "--dataset-size", "100", "--steps", "5", "--delta", "1e-5"])
    assert callable(args.func)


ABADI = ["--noise-multiplier", "1.1", "--batch-size", "256", "--dataset-size", "60000", "--steps", "14062",
         "--delta", "1e-5", "--accountant", "rdp"]


@pytest.mark.privacy
def test_neighboring_default_follows_sampling(capsys):
    """The classic Abadi schedule typed without --neighboring means what it means in dp_accounting: add/remove."""
    from dpjax.accounting import GaussianSchedule, compute_epsilon

    assert cli.main(["--sampling", "poisson", *ABADI, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = compute_epsilon(GaussianSchedule(1.1, 1.0, "poisson", 60000, 256, 14062, neighboring="add-remove",
                                                unit="record"), 1e-5, "rdp").epsilon
    assert out["neighboring"] == "add-remove" and out["epsilon"] == expected
    # a fixed-size batch keeps replace-one (add/remove is refused there), and says what its multiplier means
    assert cli.main(["--sampling", "without-replacement", *ABADI[:-2], "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["neighboring"] == "replace-one" and any("std / (2 x clip norm)" in n for n in out["notes"])


@pytest.mark.privacy
@pytest.mark.parametrize("neighboring", ["replace-one", "add-remove"])
def test_explicit_neighboring_certifies_the_same_number(neighboring, capsys):
    """An explicit --neighboring is accounted exactly as GaussianSchedule with that relation (no number moves)."""
    from dpjax.accounting import GaussianSchedule, compute_epsilon

    assert cli.main(["--sampling", "poisson", *ABADI, "--neighboring", neighboring, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    sched = GaussianSchedule(1.0, 1.0, "poisson", 60000, 256, 14062, neighboring=neighboring, unit="record")
    sched = sched.replace(noise_std=1.1 * sched.sensitivity)
    assert out["epsilon"] == compute_epsilon(sched, 1e-5, "rdp").epsilon
    assert out["noise_std"] == sched.noise_std
    notes = " ".join(out["notes"])
    assert ("2 x clip norm" in notes) == (neighboring == "replace-one")


def test_replace_one_convention_printed_beside_epsilon(capsys):
    assert cli.main(["--sampling", "poisson", *ABADI, "--neighboring", "replace-one"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("epsilon") and float(lines[0].split()[-1]) > 0  # the number stays parseable
    assert lines[1].startswith("convention") and "replace-one" in lines[1] and "2 x clip norm" in lines[1]


def test_help_shows_every_default(capsys):
    import re

    with pytest.raises(SystemExit):
        cli.main(["--help"])
    options = capsys.readouterr().out.split("options:", 1)[1]
    blocks = {m.group(1): " ".join(m.group(2).split())  # each option's entry, up to the next option
              for m in re.finditer(r"^  (--[a-z-]+)(.*?)(?=^  -|\Z)", options, flags=re.M | re.S)}
    for flag, default in [("--sampling", "poisson"), ("--neighboring", "add-remove for poisson, replace-one"),
                          ("--unit", "record"), ("--group-size", "1"), ("--accountant", "best")]:
        assert f"default: {default}" in blocks[flag], (flag, blocks[flag])
