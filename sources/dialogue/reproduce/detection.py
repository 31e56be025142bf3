"""The per-turn rule: each injection judged by each detector (§5.2.3).

Fixed before any result was seen: for each metric, the baseline is its mean and σ (ddof 1)
over turns 1–30; an injection after turn k is detected when the metric is more than 3σ from
that mean at turn k, k + 1 or k + 2 (the turn whose S' is the injection, the student's answer
to it, and one more: the paper's "recovers within 1–2 turns"); latency is the first such
turn − k. The baseline tests have no injections: the same rule at the same turns there gives
each detector's false-alarm rate (:func:`fisher_greater` compares the two rates;
:func:`matched` compares detectors at a matched false-alarm rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from idt_desk_sources.dialogue.reproduce.paper import TESTS
from idt_desk_sources.dialogue.reproduce.turns import detectors, rows_by_dialogue

from idt_desk.plugin import RESPONSE_TURNS, detect_injection, response_z


def injection_turns(turns: int) -> list[int]:
    """The paper's injection turns whose response turns all lie within ``turns`` turns."""
    from idt_desk_sources.dialogue._texts import PAPER_SCHEDULE

    return [k for k in PAPER_SCHEDULE if k + RESPONSE_TURNS - 1 <= turns]


def detection_table(rows: Any) -> list[dict[str, Any]]:
    """Every injection (and every control turn of the baseline tests) judged by each detector.

    A baseline test has no injections: its rows at the same turns (``control: true``) give
    the detectors' false alarms.
    """
    dets = detectors(rows)
    out = []
    for (test, cond, seed), g in rows_by_dialogue(rows):
        kind = TESTS[test].injection
        for k in injection_turns(int(g["turn"].max())):
            if kind is not None and g.loc[g["turn"] == k, "injected"].iloc[0] != kind:
                continue  # not injected there (a shorter or interrupted dialogue)
            row: dict[str, Any] = {"test": test, "condition": cond, "seed": seed, "turn": k,
                                   "type": kind or "none", "control": kind is None}
            for d in dets:
                hit, lat = detect_injection(g[d].to_numpy(), k)
                row[f"detected_{d}"] = hit
                row[f"latency_{d}"] = lat
                row[f"z_{d}"] = response_z(g[d].to_numpy(), k)
            out.append(row)
    return out


def fisher_greater(a: int, n_a: int, b: int, n_b: int) -> float | None:
    """One-sided Fisher exact p that rate a/n_a exceeds b/n_b."""
    if n_a == 0 or n_b == 0:
        return None
    from scipy.stats import fisher_exact

    return float(fisher_exact([[a, n_a - a], [b, n_b - b]], alternative="greater").pvalue)


def matched(real: Sequence[dict[str, Any]], ctrl: Sequence[dict[str, Any]], d: str
            ) -> dict[str, Any] | None:
    """Detection at a matched false-alarm rate (``idt_desk.plugin.MATCHED_RATE``, 5 %).

    The threshold (in σ) that at most 5 % of the baseline tests' control turns exceed within
    their response turns, applied to the injections (latency: the first response turn
    beyond it): :func:`~idt_desk.detection.matched.matched_comparison` on each turn's records
    of |z| over its response turns, kept exact.
    """
    from idt_desk.plugin import matched_comparison, records

    def recs(r: dict[str, Any]) -> list[list[float]]:
        return records([math.nan if x is None else abs(x) for x in r[f"z_{d}"]], digits=None)

    if not ctrl or not real:
        return None
    got = matched_comparison([recs(r) for r in ctrl], [recs(r) for r in real])
    return {"threshold_sigma": got["threshold_sigma"],
            "allowed_false_alarms": got["allowed_false_alarms"],
            "false_alarms": got["false_alarms"]["alarms"], "control_turns": len(ctrl),
            "detected": got["detection"]["detected"], "injections": len(real),
            "median_latency": got["median_latency"]}


def mean_z(rows: Sequence[dict[str, Any]], d: str) -> list[float | None]:
    """Mean signed z at k, k + 1, k + 2 over injections (or control turns)."""
    out: list[float | None] = []
    for j in range(RESPONSE_TURNS):
        v = [r[f"z_{d}"][j] for r in rows if r[f"z_{d}"][j] is not None]
        out.append(sum(v) / len(v) if v else None)
    return out
