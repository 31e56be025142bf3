"""Table 6: how P and ΔH relate to the structural baselines and to the judge.

Per dialogue, Pearson's r of P and of ΔH with the prompt–response cosine similarity (the
structural baseline of §11.5) and with the judge's mean score when it was on, over all turns;
Fisher's 95 % CI and p. "Significant" is p < 0.05.
"""

from __future__ import annotations

from typing import Any

from idt_desk_sources.dialogue.reproduce.turns import rows_by_dialogue


def correlations(rows: Any) -> list[dict[str, Any]]:
    """Table 6 per dialogue: P's and ΔH's correlations with structure and semantics.

    Pearson's r with the prompt–reply cosine similarity (and with the judge's mean score when
    it was on) over all turns, Fisher's 95 % CI and p.
    """
    from idt_desk.plugin import correlation

    out = []
    for (test, cond, seed), g in rows_by_dialogue(rows):
        row: dict[str, Any] = {"test": test, "condition": cond, "seed": seed,
                               "teacher": g["teacher"].iloc[0], "turns": len(g)}
        for m in ("P", "dH"):
            for ref in ("cos_sim", "judge"):
                if g[ref].notna().sum() >= 3:
                    row[f"{m}~{ref}"] = correlation(g[m], g[ref])
        out.append(row)
    return out
