"""Audit reports: one markdown table and one JSON document per ``dpjax audit`` run."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from dpjax.auditing.audit import AuditResult

__all__ = ["markdown_report", "json_report"]


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "inf" if math.isinf(x) else f"{x:.3f}"
    return str(x)


def markdown_report(results: Sequence[AuditResult], header: str = "") -> str:
    """A table: certified (eps, delta) and accountant, the empirical lower bound with its confidence and counts, each
    mutant's lower bound, exact epsilon where computable, pass/fail."""
    lines = [header.rstrip(), ""] if header else []
    lines += [
        "| mechanism | certified ε (δ) | accountant | empirical ε lower bound | FP / FN of runs | mutants: ε lower bound | exact ε of the canary pair | pass |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        b = r.bound
        mutants = "; ".join(f"{m.name} {_fmt(m.bound.epsilon)} ({'caught' if m.caught else 'NOT caught'})"
                            for m in r.mutants) or "-"
        exact = _fmt((r.exact or {}).get("epsilon"))
        lines.append(
            f"| {r.name} | {_fmt(r.certificate.epsilon)} ({r.certificate.delta:g}) | {r.certificate.accountant} | "
            f"{_fmt(b.epsilon)} ({b.confidence:.0%}) | {b.false_positives} / {b.false_negatives} of {b.runs_d} | "
            f"{mutants} | {exact} | {r.verdict} |")
    lines.append("")
    for r in results:
        lines.append(f"* **{r.name}**: {r.description}; relation {r.certificate.neighboring}; "
                     + ", ".join(f"{k} = {v}" for k, v in r.details.items())
                     + (f"; exact: {json.dumps(r.exact, default=str)}" if r.exact else "")
                     + f"; {r.seconds:.1f} s"
                     + (f"; **{r.verdict}**: {'; '.join(r.failed_criteria())}" if not r.passed else ""))
    return "\n".join(lines) + "\n"


def json_report(results: Sequence[AuditResult], meta: dict) -> str:
    return json.dumps({"meta": meta, "audits": [r.as_dict() for r in results]}, indent=2, default=float) + "\n"
