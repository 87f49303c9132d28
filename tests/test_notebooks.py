"""Every notebook in notebooks/ is stored executed and runs top to bottom at its reduced size.

The notebooks read ``DPJAX_NOTEBOOK_QUICK=1`` (set here for the kernel) and shrink their data, rounds and
grids; readers get the full size. A notebook that reads real data gets it by the tests' one rule
(tests/_shared.py): MNIST from ``../shared/data`` or the copy the ``[test]`` extra installs (passed to the
notebook as ``$DPJAX_DATA_DIR``, the CLI's resolution), any other dataset from ``../shared/data`` or a skip
naming the missing file. No package the project depends on ships California housing, so the DIFF2 notebook
is skipped without ``../shared`` (the notebook itself raises ``DatasetNotFoundError`` rather than train on
anything else).
"""

import json
import pathlib

import pytest

from tests import _shared

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))

# What each notebook must print when it runs: the reports and results it promises (a notebook that
# silently skipped its work, or fell back to other data, would not print them).
EXPECTED = {
    "quickstart.ipynb": ("accountant=rdp", "accountant=paper"),
    "shuffle_sco_pvec_tradeoff.ipynb": ("accountant=rdp", "accountant=paper", "accountant=pvec-lemma"),
    "dpsgd_batch_clipping.ipynb": ("size: quick", "MNIST from", "test accuracy", "accountant=rdp", "accountant=paper"),
    "isrl_dp_federated.ipynb": ("size: quick", "MNIST from", "accountant=rdp", "ISRL-DP eps=3", "ISRL-DP eps=18"),
    "user_level_output_perturbation.ipynb": ("size: quick", "accountant=basic", "exact epsilon of this pair",
                                             "sc_output_pert refuses", "Theorem 4.1: -0.5"),
    "privacy_units_and_shuffling.ipynb": ("size: quick", "lower bound for shuffling (Chua et al. 2024",
                                          "Poisson-reported epsilon below the shuffling lower bound in 6 of 6",
                                          "accountant=pld+truncation", "truncation", "sampling=truncated-poisson",
                                          "buffered 360 rows", "unit=user"),
    "diff2_gradient_differences.ipynb": ("size: quick", "California housing from", "accountant=rdp",
                                         "DIFF2-GD: min train loss", "DP-GD   : min train loss"),
}
# Notebooks that read real data: MNIST (../shared or the packaged copy), or files of ../shared/data.
MNIST_NOTEBOOKS = {"dpsgd_batch_clipping.ipynb", "isrl_dp_federated.ipynb"}
SHARED_FILES = {"diff2_gradient_differences.ipynb": ("california_housing", "cal_housing.data")}
# A cell appended to the notebook at test time that prints ``probe: <value>`` from the notebook's own
# variables, and the range that value has on the real data but not on a random stand-in: MNIST's background
# pixels are one value (about 80 % of them; none for Gaussian noise), and on even vs odd digits the
# non-private logistic regression's test error is about 0.15 at the reduced size (0.5 by chance).
PROBES = {
    "dpsgd_batch_clipping.ipynb": ("import numpy as _np\n_x = _np.asarray(xtr)\n"
                                   "print('probe:', float((_x == _x.min()).mean()))", 0.5, 1.0),
    "isrl_dp_federated.ipynb": ("print('probe:', nonprivate['MB-SGD'][1])", 0.0, 0.3),
}
DATA_NOTEBOOKS = [p for p in NOTEBOOKS if p.name in MNIST_NOTEBOOKS or p.name in SHARED_FILES]
PLAIN_NOTEBOOKS = [p for p in NOTEBOOKS if p not in DATA_NOTEBOOKS]


def test_every_notebook_has_expectations():
    assert NOTEBOOKS, "notebooks/ must contain at least the quickstart"
    assert {p.name for p in NOTEBOOKS} == set(EXPECTED), "add the new notebook's expected outputs to EXPECTED"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_executed(path):
    """The site renders stored outputs: every code cell ran, in order, in one session, without an error."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    counts = [c.get("execution_count") for c in code]
    assert counts == list(range(1, len(code) + 1)), f"{path.name}: execution counts {counts}; run it top to bottom"
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert outputs, f"{path.name} is stored without outputs"
    assert not [o for o in outputs if o.get("output_type") == "error"], f"{path.name} is stored with an error"


def _execute(path, monkeypatch) -> str:
    nbformat = pytest.importorskip("nbformat", reason="install the [test] extra to execute notebooks")
    nbclient = pytest.importorskip("nbclient", reason="install the [test] extra to execute notebooks")
    monkeypatch.setenv("DPJAX_NOTEBOOK_QUICK", "1")  # the kernel inherits this process's environment
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    nb = nbformat.read(path, as_version=4)
    if path.name in PROBES:
        nb.cells.append(nbformat.v4.new_code_cell(PROBES[path.name][0]))
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    missing = [s for s in EXPECTED[path.name] if s not in text]
    assert not missing, f"{path.name} did not print {missing}"
    if path.name in PROBES:
        _, lo, hi = PROBES[path.name]
        value = float(text.rsplit("probe:", 1)[1].split()[0])
        assert lo <= value <= hi, f"{path.name}: probe {value} outside [{lo}, {hi}]: not trained on the real data?"
    return text


@pytest.mark.parametrize("path", PLAIN_NOTEBOOKS, ids=lambda p: p.name)
@pytest.mark.slow
def test_notebook_executes(path, monkeypatch):
    _execute(path, monkeypatch)


@pytest.mark.parametrize("path", DATA_NOTEBOOKS, ids=lambda p: p.name)
@pytest.mark.slow
def test_data_notebook_executes(path, monkeypatch, tmp_path_factory):
    """The notebook finds its data where the CLI does ($DPJAX_DATA_DIR here) and never trains on other data."""
    if path.name in MNIST_NOTEBOOKS:
        monkeypatch.setenv("DPJAX_DATA_DIR", str(_shared.mnist_data_dir(tmp_path_factory)))
    else:
        file = _shared.shared_file(*SHARED_FILES[path.name])  # a skip naming the file when it is absent
        monkeypatch.setenv("DPJAX_DATA_DIR", str(file.parents[1]))
    _execute(path, monkeypatch)
