"""``summary.json``: what a reproduction found, and :class:`DialogueResult`, a finished one.

:func:`summarize` gathers, per condition and detector, the injections detected against the
false alarms at the same turns of the baseline tests (Fisher's p, latency, mean z, the matched
false-alarm comparison: :mod:`~idt_desk_sources.dialogue.reproduce.detection`), Cohen's d
(:mod:`~idt_desk_sources.dialogue.reproduce.effects`), Table 6's counts
(:mod:`~idt_desk_sources.dialogue.reproduce.correlations`), the length confound, the teacher
prompts' token counts, the models and the paper's values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from idt_desk_sources.dialogue.reproduce.config import DialogueConfig
from idt_desk_sources.dialogue.reproduce.correlations import correlations
from idt_desk_sources.dialogue.reproduce.detection import (
    detection_table,
    fisher_greater,
    matched,
    mean_z,
)
from idt_desk_sources.dialogue.reproduce.effects import effect_sizes
from idt_desk_sources.dialogue.reproduce.paper import PAPER
from idt_desk_sources.dialogue.reproduce.turns import (
    BASELINE_DETECTORS,
    detectors,
    rows_by_dialogue,
)

from idt_desk.plugin import BASELINE_TURNS


@dataclass
class DialogueResult:
    """A finished reproduction: the per-turn table, the summary and the wall time."""

    config: DialogueConfig
    rows: Any
    summary: dict[str, Any]
    wall_seconds: float
    files: list[Path] = field(default_factory=list)


def summarize(rows: Any, results: Sequence[dict[str, Any]], config: DialogueConfig,
              wall: float) -> dict[str, Any]:
    """The ``summary.json`` content (the rules: detection, effects, correlations)."""
    import numpy as np

    from idt_desk.plugin import (
        TOKENIZER,
        embeddings,
        length_confound,
        load_tokenizer,
        summary_document,
    )
    from idt_desk.plugin import summarize as metric_table

    dets = detectors(rows)
    inj = detection_table(rows)
    rates: dict[str, Any] = {}
    for cond in config.conditions:
        real = [r for r in inj if r["condition"] == cond and not r["control"]]
        ctrl = [r for r in inj if r["condition"] == cond and r["control"]]
        block: dict[str, Any] = {}
        for d in dets:
            hits = sum(r[f"detected_{d}"] for r in real)
            fa = sum(r[f"detected_{d}"] for r in ctrl)
            lats = [r[f"latency_{d}"] for r in real if r[f"latency_{d}"] is not None]
            by_type = {}
            for kind in ("contradiction", "topic_shift", "non_sequitur"):
                rk = [r for r in real if r["type"] == kind]
                if rk:
                    by_type[kind] = {"detected": sum(r[f"detected_{d}"] for r in rk),
                                     "injections": len(rk)}
            block[d] = {"detected": hits, "injections": len(real),
                        "mean_z": mean_z(real, d), "mean_z_control": mean_z(ctrl, d),
                        "false_alarms": fa, "control_turns": len(ctrl),
                        "p_vs_control": fisher_greater(hits, len(real), fa, len(ctrl)),
                        "median_latency": float(np.median(lats)) if lats else None,
                        "by_type": by_type, "matched": matched(real, ctrl, d)}
        rates[cond] = block
    d_rows = effect_sizes(rows)
    d_summary = {}
    for d in dets:
        v = np.array([r[d] for r in d_rows if r[d] is not None and np.isfinite(r[d])])
        d_summary[d] = {"n": int(v.size), "large": int((np.abs(v) > 0.8).sum()),
                        "min": float(v.min()) if v.size else None,
                        "max": float(v.max()) if v.size else None,
                        "median_abs": float(np.median(np.abs(v))) if v.size else None}
    corr = correlations(rows)
    table6 = {}
    for m in ("P", "dH"):
        for ref in ("cos_sim", "judge"):
            cs = [c[f"{m}~{ref}"] for c in corr if f"{m}~{ref}" in c]
            sig = [c for c in cs if c["p"] is not None and c["p"] < 0.05]
            table6[f"{m}~{ref}"] = {"significant": len(sig), "conditions": len(cs),
                                    "positive": sum(1 for c in sig if c["r"] > 0)}
    dialogue_rows = [{"key": r["key"], "test": r["test"], "condition": r["condition"],
                      "seed": r["seed"], "turns": len(r["turns"]), "complete": r["complete"],
                      "error": r["error"], "resumed_from": r["resumed_from"],
                      "median_turn_seconds": float(np.median([t["seconds"] for t in r["turns"]]))
                      if r["turns"] else None} for r in results]
    base = rows[rows["turn"] <= BASELINE_TURNS]
    first = next((r["turns"][0] for r in results if r["turns"]), {})
    return summary_document(
        metric_table(base, [m for m in ("P", "H_f", "H_b", "dH", *BASELINE_DETECTORS)
                         if rows[m].notna().any()]),
        notes=[
            "metrics: each metric over turns 1-30 of every dialogue (the baseline turns).",
            "Detection (fixed before any result): an injection after turn k is detected when "
            "the metric is more than 3 sigma (ddof 1) from its mean over turns 1-30 at turn k, "
            "k+1 or k+2; latency = first such turn - k.",
            "Baseline tests (3, 4, 8) have no injections: the same rule at turns "
            "31, 46, 61, 76, 91 gives the false alarms; p_vs_control is the one-sided Fisher "
            "exact test of the detection rate against that false-alarm rate.",
            "Cohen's d: turns k and k+1 of every injection against turns 1-30, pooled sigma.",
            "Table 6: Pearson r over all turns of a dialogue, Fisher 95% CI; significant: "
            "p < 0.05.",
        ],
        config=config.to_dict(),
        dialogues=dialogue_rows,
        unfinished=[d["key"] for d in dialogue_rows if not d["complete"]],
        turns=len(rows),
        detection=rates,
        injections=inj,
        cohens_d={"per_dialogue": d_rows, "summary": d_summary},
        correlations=corr,
        table6=table6,
        detectors=list(dets),
        length_confound=length_confound([g for _key, g in rows_by_dialogue(rows)], BASELINE_TURNS),
        prompt_tokens=_prompt_tokens(rows),
        models={"student": first.get("student"), "teacher": first.get("teacher"),
                "student_options": {c: r["turns"][0]["options"] for c in config.conditions
                                    for r in results if r["turns"] and r["condition"] == c}},
        tokenizer=load_tokenizer(TOKENIZER).describe(),
        baselines=embeddings.load_embedder().describe() if "cos_sim" in dets else None,
        wall_seconds=wall,
        turn_seconds=float(np.nansum(rows["seconds"])) if len(rows) else 0.0,
        paper=PAPER,
    )


def _prompt_tokens(rows: Any) -> dict[str, Any]:
    """Token counts of S' (the teacher's next prompt): ordinary turns against injections."""
    import numpy as np

    def stats(v: Any) -> dict[str, Any]:
        v = np.asarray(v, dtype=np.float64)
        v = v[np.isfinite(v)]
        if not v.size:
            return {"n": 0, "median": None, "p10": None, "p90": None}
        return {"n": int(v.size), "median": float(np.median(v)),
                "p10": float(np.percentile(v, 10)), "p90": float(np.percentile(v, 90))}

    injected = rows["injected"].astype(bool)
    return {"ordinary": stats(rows.loc[~injected, "n_S_next"]),
            "injected": stats(rows.loc[injected, "n_S_next"])}
