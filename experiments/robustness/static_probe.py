"""Which bad static values does ``dpjax sweep`` still refuse only after jax loads? (issue #39, "bounded: any CLI
command refuses or answers within 10 s")

For every registered private family, from a minimal valid static table (its required fields at 4, plus
``sampling_rate = 0.25`` or ``batch_sizes = (4, 4)`` where the family needs them), one field at a time is set to a
crude bad value (an int or None field: 0, -1, 2.5; a str field: "bogus", 3; a float field: 1.5, -1.0). A value the
family refuses (``AlgorithmEntry.check_static``, which imports jax and builds the family) but the pre-jax check
(``dpjax.sweep.static_precheck.check_static``) lets through costs the 10-20 s of jax's import on the loaded machine
before its one-line refusal. Run from the repository root::

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu python experiments/robustness/static_probe.py [-v]

It prints the count per family and per field (``-v``: every such value with the family's message).
"""

from __future__ import annotations

import argparse
import collections


def probe() -> dict[str, list[tuple[str, object, str]]]:
    """``{family: [(field, value, the family's message), ...]}`` of the values refused only after jax."""
    from dpjax import algorithms
    from dpjax.engine import registry
    from dpjax.sweep import static_precheck

    algorithms.load_families()
    out: dict[str, list] = {}
    for name, entry in sorted(registry.ALGORITHMS.items()):
        if not entry.private:
            continue
        base, err = None, ""
        for extra in ({}, {"sampling_rate": 0.25}, {"batch_sizes": (4, 4)}):
            cand = {**{k: 4 for k in entry.required_static}, **{k: v for k, v in extra.items() if k in entry._fields}}
            try:
                entry.check_static(dict(cand), {}, 8)
            except (ValueError, TypeError) as e:
                err = str(e)
                continue
            base = cand
            break
        if base is None:
            out[name] = [("(baseline)", None, err)]
            continue
        out[name] = []
        for field, f in entry._fields.items():
            d = f.default
            bads = (["bogus", 3] if isinstance(d, str) else [1.5, -1.0] if isinstance(d, float)
                    else [0, -1, 2.5] if d is None or (isinstance(d, int) and not isinstance(d, bool)) else [])
            for v in bads:
                static = {**base, field: v}
                try:
                    entry.check_static(static, {}, 8)
                    continue
                except (ValueError, TypeError) as e:
                    message = str(e)
                problems: list = []
                static_precheck.check_static({"algorithm": name, "num_rounds": 8, "static": static}, problems)
                if not problems:
                    out[name].append((field, v, message))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    found = probe()
    fields = collections.Counter(f for rows in found.values() for f, _, _ in rows)
    for name, rows in found.items():
        print(f"{name:22s} {len(rows)}")
        if args.verbose:
            for f, v, m in rows:
                print(f"    {f}={v!r}: {m[:110]}")
    print(f"total {sum(len(r) for r in found.values())} value(s) refused only after jax; by field: "
          + ", ".join(f"{f} {n}" for f, n in fields.most_common()))


if __name__ == "__main__":
    main()
