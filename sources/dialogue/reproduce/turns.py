"""The per-turn table: one row per turn of every dialogue, from the dialogues' texts.

Per turn: the IDT metrics from token counts (:class:`idt_desk.metrics.tokens.DialogueMetrics`,
the session's own), the structural baselines of §11.5 (:mod:`idt_desk.metrics.embeddings`:
prompt–reply cosine, adjacent coherence, cumulative drift) when the ``embeddings`` extra is
installed, and the judge's scores when ``--judge`` was on. :func:`detectors` names the
detectors a table has values for, :func:`rows_by_dialogue` splits it into its dialogues.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from idt_desk_sources.dialogue.reproduce.paper import TESTS

from idt_desk.plugin import ADJUSTED, LENGTH_COLUMNS

#: Detectors judged at each injection: the IDT's, then the structural baselines (§11.5), then
#: the judge's mean score when it was on.
IDT_DETECTORS = ("P", "H_b", "dH", "P_adj", "H_b_adj", "dH_adj")
BASELINE_DETECTORS = ("cos_sim", "adjacent", "drift")
JUDGE_SCORES = ("relevance", "coherence", "helpfulness")
#: The metric columns kept per turn in ``turns.csv``.
_METRIC_COLUMNS = ("P", "H_f", "H_b", "dH", "MI", "H_S", "H_A", "H_S_next",
                   *ADJUSTED.values(), *LENGTH_COLUMNS)


def _teacher(turns: Sequence[dict[str, Any]]) -> str:
    """The teacher's model, as its backend describes it."""
    for t in turns:
        d = t.get("teacher") or {}
        if d:
            return str(d.get("model") or d.get("backend") or "?")
    return "?"


def turn_table(results: Sequence[dict[str, Any]], *, tokenizer: str | None = None,
               baselines: bool | None = None) -> Any:
    """One row per turn of every dialogue: texts, the IDT's metrics, baselines, judge.

    The metrics come from :class:`idt_desk.metrics.tokens.DialogueMetrics` (the session's), the
    baselines from :class:`idt_desk.metrics.embeddings.StructuralBaselines` when ``baselines``
    (None: when installed). Columns a dialogue lacks are NaN.
    """
    import numpy as np
    import pandas as pd

    from idt_desk.plugin import TOKENIZER, DialogueMetrics, embeddings, load_tokenizer

    tok = load_tokenizer(tokenizer or TOKENIZER)
    use_baselines = embeddings.available() if baselines is None else baselines
    embedder = embeddings.load_embedder() if use_baselines else None
    frames = []
    for res in results:
        turns = res["turns"]
        if not turns:
            continue
        m = DialogueMetrics(tok).push(turns)
        b = (embeddings.StructuralBaselines(embedder).push(turns) if embedder is not None
             else {c: np.full(len(turns), np.nan) for c in BASELINE_DETECTORS})
        test = TESTS[res["test"]]
        df = pd.DataFrame({
            "test": res["test"], "test_name": test.name, "condition": res["condition"],
            "seed": res["seed"], "teacher": _teacher(turns),
            "student": (turns[0].get("student") or {}).get("model", "?"),
            "turn": [t["turn"] for t in turns],
            "injected": [(t.get("injected") or {}).get("type", "") for t in turns],
            "answers_injection": [(t.get("prompt_injected") or {}).get("type", "")
                                  for t in turns],
            "seconds": [t.get("seconds", np.nan) for t in turns],
            **{c: m[c] for c in _METRIC_COLUMNS},
            **{c: b[c] for c in BASELINE_DETECTORS},
            **{f"judge_{s}": [((t.get("judge") or {}).get(s, np.nan)) for t in turns]
               for s in JUDGE_SCORES},
            "prompt": [t["prompt"] for t in turns],
            "reply": [t["reply"] for t in turns],
            "next_prompt": [t["next_prompt"] for t in turns],
        })
        df["judge"] = df[[f"judge_{s}" for s in JUDGE_SCORES]].mean(axis=1, skipna=False)
        frames.append(df)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def detectors(rows: Any) -> tuple[str, ...]:
    """The detectors the table has values for."""
    out = list(IDT_DETECTORS)
    out += [c for c in BASELINE_DETECTORS if rows[c].notna().any()]
    if rows["judge"].notna().any():
        out.append("judge")
    return tuple(out)


def rows_by_dialogue(rows: Any) -> list[tuple[tuple[int, str, int], Any]]:
    """Each dialogue's rows, by (test, condition, seed), in turn order."""
    return [(key, g.sort_values("turn")) for key, g in rows.groupby(["test", "condition", "seed"],
                                                                    sort=False)]
