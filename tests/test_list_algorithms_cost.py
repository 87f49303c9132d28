"""``dpjax.list_algorithms()`` reads the families' registration lines, importing neither jax nor a family
(issue #39, newcomer 8: it took ~28 s silent under load when it imported every family)."""

import subprocess
import sys


def test_list_algorithms_imports_no_family_and_no_jax():
    code = ("import sys, dpjax; listed = dpjax.list_algorithms(); assert 'dp-sgd' in listed, listed; "
            "loaded = sorted(m for m in sys.modules if m == 'jax' or m.startswith('dpjax.algorithms.')); "
            "assert not loaded, loaded")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
