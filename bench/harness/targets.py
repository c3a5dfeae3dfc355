"""A benchmark's targets as data: declared once at the top of its script, judged once when the
figures are in, printed one line each and saved with the results (`"verdicts"`), so that
`run_all`'s summary reads the verdicts instead of judging again.

A figure that was not measured (None: a quick run too short for it, a phase that did not run)
is neither met nor missed, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    """One bound on one figure: `key` names the figure, `what` says what it measures."""

    key: str
    what: str
    bound: float
    at_most: bool = True  # the figure may be at most `bound`; False: at least
    unit: str = ""

    def met(self, value: float | None) -> bool | None:
        if value is None:
            return None
        return value <= self.bound if self.at_most else value >= self.bound

    def line(self, value: float | None) -> str:
        """`target: <what> <= <bound>: <value>, met` (or missed, or not measured)."""
        sign = "<=" if self.at_most else ">="
        head = f"target: {self.what} {sign} {_figure(self.bound, self.unit)}"
        if value is None:
            return f"{head}: not measured"
        return f"{head}: {_figure(value, self.unit)}, {'met' if self.met(value) else 'missed'}"


def judge(targets: Sequence[Target], figures: Mapping[str, float | None]) -> dict[str, dict[str, Any]]:
    """Each target against its figure, printed; the verdicts, to save as the results'
    `"verdicts"`. A target whose figure is absent from `figures` is a mistake in the script."""
    verdicts = {}
    for target in targets:
        value = figures[target.key]
        print(target.line(value))
        verdicts[target.key] = {
            "what": target.what,
            "bound": target.bound,
            "at_most": target.at_most,
            "unit": target.unit,
            "value": value,
            "met": target.met(value),
        }
    return verdicts


def verdict_summary(results: Mapping[str, Any]) -> str:
    """The verdicts saved with a script's results in a few words: all met, or which were missed
    (with the figure against its bound); "" for results saved without verdicts."""
    verdicts: Mapping[str, Mapping[str, Any]] = results.get("verdicts") or {}
    if not verdicts:
        return ""
    missed = [v for v in verdicts.values() if v["met"] is False]
    unmeasured = sum(1 for v in verdicts.values() if v["met"] is None)
    tail = f", {unmeasured} not measured" if unmeasured else ""
    if not missed:
        return f"targets: {len(verdicts) - unmeasured} met{tail}"
    parts = [
        f"{v['what']} {_figure(v['value'], v['unit'])} (bound {'<=' if v['at_most'] else '>='} "
        f"{_figure(v['bound'], v['unit'])})"
        for v in missed
    ]
    return f"targets missed: {'; '.join(parts)}{tail}"


def _figure(value: float, unit: str) -> str:
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}" if value else "0"
    return f"{text}{unit}"
