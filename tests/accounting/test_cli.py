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
