"""Reports of shuffled runs never show one number alone: the certificate, the Poisson epsilon a typical implementation
would report (not a certificate for the run) and Chua et al.'s lower bound for shuffling, each labelled
(`dpjax.accounting.shuffle_gap`). The reproductions that print a shuffled run's epsilon call these helpers."""

from __future__ import annotations

from dpjax.accounting.shuffle_gap import LABELS, ShuffleGap, shuffle_gap

__all__ = ["GAP_ACCOUNTANTS", "family_gap", "gap_rows", "gap_lines"]

#: The accountant names the extra privacy rows of a shuffled variant carry (beside its certificate's).
GAP_ACCOUNTANTS = {"poisson": "poisson-reported (not a certificate)", "lower_bound": "shuffle-lower-bound (Chua et al.)"}


def family_gap(alg, n_train: int, certified) -> ShuffleGap | None:
    """The three numbers of a DP-SGD-General run with ``sampling="shuffle"`` (``None`` for other samplings) on
    ``n_train`` records, its ``certified`` report (the strong-exact ``PrivacyReport``, noise std 2 sigma) given."""
    if getattr(alg, "sampling", None) != "shuffle":
        return None
    return shuffle_gap(certified.noise_std / 2.0, alg.batch_size, n_train, alg.stored_epochs, certified.delta,
                       steps=alg.num_rounds, steps_per_epoch=alg.rounds_per_epoch, certified=certified)


def gap_rows(gap: ShuffleGap | None) -> list[dict]:
    """Privacy-table rows (group_size 1) for the Poisson number and the lower bound; none without a gap."""
    if gap is None:
        return []
    return [{"group_size": 1, "accountant": GAP_ACCOUNTANTS[e.key], "epsilon": e.epsilon,
             "notes": f"{e.label}: {e.method}"} for e in (gap.poisson, gap.lower_bound)]


def gap_lines(name: str, certified_epsilon: float, rows: list[dict]) -> list[str]:
    """Markdown bullets: the variant's certificate and its two gap rows, each with its label."""
    by_acc = {r["accountant"]: r for r in rows}
    out = [f"* {name}: {LABELS['certified']}: ε = {certified_epsilon:.4g}"]
    for key, acc in GAP_ACCOUNTANTS.items():
        if acc in by_acc:
            out.append(f"  * {LABELS[key]}: ε = {by_acc[acc]['epsilon']:.4g}")
    return out
