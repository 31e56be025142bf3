"""Effect sizes (§11.5): Cohen's d per perturbation dialogue and detector.

The injection turns (k and k + 1 of each injection) against turns 1–30, pooled σ (ddof 1).
"""

from __future__ import annotations

from typing import Any

from idt_desk_sources.dialogue.reproduce.detection import injection_turns
from idt_desk_sources.dialogue.reproduce.paper import TESTS
from idt_desk_sources.dialogue.reproduce.turns import detectors, rows_by_dialogue

from idt_desk.plugin import BASELINE_TURNS


def effect_sizes(rows: Any) -> list[dict[str, Any]]:
    """Cohen's d per perturbation dialogue and detector.

    Turns k and k + 1 of every injection against turns 1–30.
    """
    from idt_desk.plugin import cohens_d

    dets = detectors(rows)
    out = []
    for (test, cond, seed), g in rows_by_dialogue(rows):
        if TESTS[test].injection is None:
            continue
        ks = injection_turns(int(g["turn"].max()))
        hit = g["turn"].isin([k + j for k in ks for j in (0, 1)])
        base = g["turn"] <= BASELINE_TURNS
        out.append({"test": test, "condition": cond, "seed": seed,
                    **{d: cohens_d(g.loc[hit, d], g.loc[base, d]) for d in dets}})
    return out
