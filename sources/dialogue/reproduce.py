"""Reproduce the paper's dialogue protocol (§5.2, §11; Figure 4, Table 6).

``idt-desk reproduce dialogue`` runs the paper's tests with whatever models a user has (the
source's backends: Ollama for either role, or the built-in SmolLM2) and asks whether token
statistics see the injections, how large the effects are, and how P relates to the
embedding-based structural baselines.

The tests (§11.1, §11.4)
------------------------
- Baseline tests 3 (varied questioning, 200 turns), 4 (deep topic exploration, 200) and
  8 (natural progression, 150): the teacher styles of :mod:`idt_desk_sources.dialogue._texts`.
- Perturbation tests 7 (contradictions), 9 (topic shifts), 10 (non-sequiturs): 100 turns of
  varied questioning, with the source's ``paper_schedule`` injecting a text of about 40 words
  as the teacher prompt after turns 31, 46, 61, 76 and 91 (the S' of those turns; the
  student answers it in the next turn).
- Each under the student conditions normal (temperature 0.7, top_k 40) and constrained
  (0.1, 10), and each sampling seed asked for.

One dialogue is one task for the shared executor (:func:`idt_desk.experiments.executor.run_tasks`).
Every completed turn is appended to ``out/dialogues/<key>.jsonl`` as it arrives: a dialogue
that fails (a backend that stops answering, Ctrl-C, a crash) keeps its turns, is reported,
and the same command run again carries it on from the next turn
(:meth:`~idt_desk_sources.dialogue.DialogueSource.restore`). The key holds the test, condition, seed
and every setting that changes what is asked, so a different model is a different dialogue.

The analysis (after the dialogues, from their texts)
----------------------------------------------------
Per turn: the IDT metrics from token counts (:class:`idt_desk.metrics.tokens.DialogueMetrics`, the
session's own), the structural baselines of §11.5 (:mod:`idt_desk.metrics.embeddings`) when the
``embeddings`` extra is installed, and the judge's scores when ``--judge`` was on.

- **Detection** (fixed before any result was seen): for each metric, the baseline is its
  mean and σ (ddof 1) over turns 1–30; an injection after turn k is detected when the metric
  is more than 3σ from that mean at turn k, k + 1 or k + 2 (the turn whose S' is the
  injection, the student's answer to it, and one more: the paper's "recovers within 1–2
  turns"); latency is the first such turn − k. The baseline tests have no injections: the
  same rule at the same turns there gives each detector's false-alarm rate.
- **Cohen's d** per metric and dialogue: the injection turns (k and k + 1 of each injection)
  against turns 1–30, pooled σ (ddof 1).
- **Table 6**: per dialogue, Pearson's r of P and of ΔH with the prompt–response cosine
  similarity over all turns, Fisher's 95 % CI and p; "significant" is p < 0.05.

One file: the reproduction reads top to bottom as the paper's protocol (tests, dialogues,
the per-turn rule, effect sizes, the structural baselines, the report), and its tasks must
be importable by name from one module by the executor's worker processes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from idt_desk.plugin import (
    ADJUSTED,
    BASELINE_TURNS,
    LENGTH_COLUMNS,
    RESPONSE_TURNS,
    InputError,
    detect_injection,
    response_z,
)

__all__ = ["HELP", "PAPER", "TESTS", "Dialogue", "DialogueConfig", "add_arguments",
           "make_dialogues", "run", "run_dialogue"]

#: ``idt-desk reproduce dialogue``'s one-line help.
HELP = "the paper's LLM results: injection detection, effect sizes, Table 6 correlations"


@dataclass(frozen=True)
class Test:
    """One of the paper's tests (§11.1)."""

    number: int
    name: str
    style: str
    turns: int
    injection: str | None = None


#: The paper's tests, by number.
TESTS: dict[int, Test] = {t.number: t for t in (
    Test(3, "varied questioning", "varied", 200),
    Test(4, "deep topic exploration", "deep", 200),
    Test(8, "natural progression", "natural", 150),
    Test(7, "contradictions", "varied", 100, "contradiction"),
    Test(9, "topic shifts", "varied", 100, "topic_shift"),
    Test(10, "non-sequiturs", "varied", 100, "non_sequitur"),
)}

#: The paper's numbers (§5.2.2, §5.2.3, §11.5).
PAPER: dict[str, Any] = {
    "detection": {"P": "9/9 per condition", "dH": "9/9 per condition", "p": "< 0.001"},
    "table6": {"P": {"cosine": "29/34 (85%)", "judge": "44%"},
               "dH": {"cosine": "26/34 (76%)", "judge": "47%"}},
    "cohens_d": {"all": "> 0.8 in all 36 comparisons", "P": [1.26, 6.99],
                 "judge": [2.22, 4.55]},
    "example_correlation": {"test": 7, "teacher": "Claude", "r": 0.838, "ci": [0.77, 0.89]},
    "turns": 4574,
    "conditions": 34,
    "student": "Llama 3.1 8B (Ollama)",
    "teachers": ["Claude Sonnet 4", "GPT-4o-mini", "Gemini Pro Preview"],
    "tokenizer": "Llama-2-7b-hf (NousResearch)",
}

#: Settings of the source that change what a dialogue says (its key holds them).
_KEYED = ("host", "student_host", "teacher_host", "student_backend", "teacher_backend",
          "student_model", "teacher_model", "topic", "judge", "judge_model", "judge_host",
          "teacher_length")


# ---------------------------------------------------------------------------------------------
# Configuration and tasks
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DialogueConfig:
    """What to reproduce (the command line's options; see the module docstring)."""

    tests: tuple[int, ...] = (3, 4, 8, 7, 9, 10)
    conditions: tuple[str, ...] = ("normal", "constrained")
    seeds: tuple[int, ...] = (0,)
    turns: int | None = None  # None: each test's own length
    settings: tuple[tuple[str, Any], ...] = ()  # the source's settings (host, models, ...)
    retries: int = 2
    workers: int | None = None
    scheduler: str | None = None
    out: str | None = None

    def resolved(self) -> DialogueConfig:
        """Checked against the source's settings and the paper's tests.

        Raises
        ------
        InputError
            An unknown test or condition, a bad setting, too few turns.

        """
        from idt_desk_sources.dialogue._source import CONDITIONS, DialogueSource

        bad = [t for t in self.tests if t not in TESTS]
        if bad or not self.tests:
            raise InputError(f"--tests: the paper's tests are {', '.join(map(str, TESTS))}; "
                             f"got {', '.join(map(str, self.tests)) or 'none'}")
        bad_c = [c for c in self.conditions if c not in CONDITIONS]
        if bad_c or not self.conditions:
            raise InputError(f"--conditions: choose from {', '.join(CONDITIONS)}; got "
                             f"{', '.join(self.conditions) or 'none'}")
        if not self.seeds or any(s < 0 for s in self.seeds):
            raise InputError("--seeds: one or more whole numbers >= 0")
        if self.turns is not None and self.turns < 33:
            raise InputError(f"--turns {self.turns}: at least 33 (30 baseline turns and an "
                             "injection after turn 31 with two turns to see it)")
        if self.retries < 0:
            raise InputError(f"--retries {self.retries}: must be >= 0")
        known = {p.name: p for p in DialogueSource.settings}
        settings = {}
        for name, value in self.settings:
            if name not in known or name in ("condition", "style"):
                names = ", ".join(n for n in known if n not in ("condition", "style"))
                raise InputError(f"setting {name!r}: not one of {names}")
            try:
                settings[name] = known[name].validate(value)
            except ValueError as exc:
                raise InputError(f"setting {name}: {exc}") from None
        return DialogueConfig(**{**asdict(self), "settings": tuple(sorted(settings.items())),
                                 "tests": tuple(self.tests), "conditions": tuple(
                                     self.conditions), "seeds": tuple(self.seeds)})

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (for ``summary.json``)."""
        d = asdict(self)
        d["settings"] = dict(self.settings)
        return d


@dataclass(frozen=True)
class Dialogue:
    """One dialogue: a test under a condition with a sampling seed."""

    test: int
    condition: str
    seed: int
    turns: int
    settings: tuple[tuple[str, Any], ...]
    retries: int = 2
    dialogue_dir: str | None = None  # where its turns are kept as they arrive

    @property
    def key(self) -> str:
        """File name of its turns: the test, condition, seed and what changes the texts."""
        keyed = {k: v for k, v in self.settings if k in _KEYED}
        h = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:10]
        return f"test{self.test}-{self.condition}-seed{self.seed}-{h}"

    @property
    def path(self) -> Path | None:
        """Its turns' file (None: kept in memory only)."""
        return None if self.dialogue_dir is None else Path(self.dialogue_dir) / f"{self.key}.jsonl"


def make_dialogues(config: DialogueConfig) -> list[Dialogue]:
    """Every dialogue of ``config``, in the order they are started.

    The perturbation tests first (what a run cut short should have), then the baseline tests
    longest first.
    """
    out = None if config.out is None else str(Path(config.out) / "dialogues")
    tasks = [Dialogue(t, c, s, config.turns or TESTS[t].turns, config.settings,
                      config.retries, out)
             for t in config.tests for c in config.conditions for s in config.seeds]
    return sorted(tasks, key=lambda d: (TESTS[d.test].injection is None, -d.turns))


def read_turns(path: Path | None) -> list[dict[str, Any]]:
    """The turns kept in a dialogue's file (a line cut short by a crash is dropped)."""
    if path is None or not path.exists():
        return []
    turns = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            turn = json.loads(line)
        except json.JSONDecodeError:
            break  # only the last line can be cut short
        if int(turn["turn"]) != len(turns) + 1:
            break
        turns.append(turn)
    return turns


def run_dialogue(task: Dialogue, *, run: bool = True) -> dict[str, Any]:
    """Run (or carry on) one dialogue; returns its turns and whether it finished.

    A backend failure is retried ``task.retries`` times (a few seconds apart); after that the
    dialogue is returned unfinished with the error, its turns kept. ``run=False`` only reads
    the turns kept so far.
    """
    from idt_desk_sources.dialogue._source import DialogueSource

    from idt_desk.plugin import SourcePaused

    test = TESTS[task.test]
    path = task.path
    turns = read_turns(path)[:task.turns]
    resumed_from = len(turns)
    result: dict[str, Any] = {"key": task.key, "test": task.test, "condition": task.condition,
                              "seed": task.seed, "resumed_from": resumed_from, "error": None}
    t0 = time.monotonic()
    if run and len(turns) < task.turns:
        source = DialogueSource(**dict(task.settings), condition=task.condition,
                                style=test.style)
        source.reset(task.seed)
        source.restore(turns)
        if test.injection is not None:
            source.set_perturbation("paper_schedule", {"type": test.injection})
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Rewrite what was read, dropping a line a crash cut short.
            path.write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
        failures = 0
        try:
            while len(turns) < task.turns:
                try:
                    batch = source.step(1)
                except SourcePaused as exc:
                    failures += 1
                    if failures > task.retries:
                        result["error"] = f"turn {len(turns) + 1}: {exc}"
                        break
                    time.sleep(min(30.0, 3.0 * failures))
                    continue
                for turn in batch.turns or []:
                    turns.append(turn)
                    if path is not None:
                        with open(path, "a", encoding="utf-8") as f:
                            f.write(json.dumps(turn) + "\n")
        finally:
            source.close()
    result["turns"] = turns
    result["complete"] = len(turns) >= task.turns
    result["seconds"] = time.monotonic() - t0
    return result


# ---------------------------------------------------------------------------------------------
# Per-turn table
# ---------------------------------------------------------------------------------------------

#: Detectors judged at each injection: the IDT's, then the structural baselines (§11.5), then
#: the judge's mean score when it was on.
IDT_DETECTORS = ("P", "H_b", "dH", "P_adj", "H_b_adj", "dH_adj")
BASELINE_DETECTORS = ("cos_sim", "adjacent", "drift")
JUDGE_SCORES = ("relevance", "coherence", "helpfulness")
_LABEL = {"P": "P", "H_b": "H_b", "dH": "ΔH", "H_f": "H_f", "P_adj": "P − length null",
          "H_b_adj": "H_b − length null", "dH_adj": "ΔH − length null",
          "H_f_adj": "H_f − length null", "cos_sim": "cosine (prompt–reply)",
          "adjacent": "adjacent coherence", "drift": "cumulative drift", "judge": "LLM judge"}
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


# ---------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------


def _injection_turns(turns: int) -> list[int]:
    from idt_desk_sources.dialogue._texts import PAPER_SCHEDULE

    return [k for k in PAPER_SCHEDULE if k + RESPONSE_TURNS - 1 <= turns]


def _detectors(rows: Any) -> tuple[str, ...]:
    """The detectors the table has values for."""
    out = list(IDT_DETECTORS)
    out += [c for c in BASELINE_DETECTORS if rows[c].notna().any()]
    if rows["judge"].notna().any():
        out.append("judge")
    return tuple(out)


def _dialogues(rows: Any) -> list[tuple[tuple[int, str, int], Any]]:
    return [(key, g.sort_values("turn")) for key, g in rows.groupby(["test", "condition", "seed"],
                                                                    sort=False)]


def detection_table(rows: Any) -> list[dict[str, Any]]:
    """Every injection (and every control turn of the baseline tests) judged by each detector.

    A baseline test has no injections: its rows at the same turns (``control: true``) give
    the detectors' false alarms.
    """
    dets = _detectors(rows)
    out = []
    for (test, cond, seed), g in _dialogues(rows):
        kind = TESTS[test].injection
        for k in _injection_turns(int(g["turn"].max())):
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


def effect_sizes(rows: Any) -> list[dict[str, Any]]:
    """Cohen's d per perturbation dialogue and detector.

    Turns k and k + 1 of every injection against turns 1–30.
    """
    from idt_desk.plugin import cohens_d

    dets = _detectors(rows)
    out = []
    for (test, cond, seed), g in _dialogues(rows):
        if TESTS[test].injection is None:
            continue
        ks = _injection_turns(int(g["turn"].max()))
        hit = g["turn"].isin([k + j for k in ks for j in (0, 1)])
        base = g["turn"] <= BASELINE_TURNS
        out.append({"test": test, "condition": cond, "seed": seed,
                    **{d: cohens_d(g.loc[hit, d], g.loc[base, d]) for d in dets}})
    return out


def correlations(rows: Any) -> list[dict[str, Any]]:
    """Table 6 per dialogue: P's and ΔH's correlations with structure and semantics.

    Pearson's r with the prompt–reply cosine similarity (and with the judge's mean score when
    it was on) over all turns, Fisher's 95 % CI and p.
    """
    from idt_desk.plugin import correlation

    out = []
    for (test, cond, seed), g in _dialogues(rows):
        row: dict[str, Any] = {"test": test, "condition": cond, "seed": seed,
                               "teacher": g["teacher"].iloc[0], "turns": len(g)}
        for m in ("P", "dH"):
            for ref in ("cos_sim", "judge"):
                if g[ref].notna().sum() >= 3:
                    row[f"{m}~{ref}"] = correlation(g[m], g[ref])
        out.append(row)
    return out


def _fisher_greater(a: int, n_a: int, b: int, n_b: int) -> float | None:
    """One-sided Fisher exact p that rate a/n_a exceeds b/n_b."""
    if n_a == 0 or n_b == 0:
        return None
    from scipy.stats import fisher_exact

    return float(fisher_exact([[a, n_a - a], [b, n_b - b]], alternative="greater").pvalue)


def summarize(rows: Any, results: Sequence[dict[str, Any]], config: DialogueConfig,
              wall: float) -> dict[str, Any]:
    """The ``summary.json`` content (module docstring for every rule)."""
    import numpy as np

    from idt_desk.plugin import (
        TOKENIZER,
        embeddings,
        length_confound,
        load_tokenizer,
        summary_document,
    )
    from idt_desk.plugin import summarize as metric_table

    dets = _detectors(rows)
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
                        "mean_z": _mean_z(real, d), "mean_z_control": _mean_z(ctrl, d),
                        "false_alarms": fa, "control_turns": len(ctrl),
                        "p_vs_control": _fisher_greater(hits, len(real), fa, len(ctrl)),
                        "median_latency": float(np.median(lats)) if lats else None,
                        "by_type": by_type, "matched": _matched(real, ctrl, d)}
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
        length_confound=length_confound([g for _key, g in _dialogues(rows)], BASELINE_TURNS),
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


def _matched(real: Sequence[dict[str, Any]], ctrl: Sequence[dict[str, Any]], d: str
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


def _mean_z(rows: Sequence[dict[str, Any]], d: str) -> list[float | None]:
    """Mean signed z at k, k + 1, k + 2 over injections (or control turns)."""
    out: list[float | None] = []
    for j in range(RESPONSE_TURNS):
        v = [r[f"z_{d}"][j] for r in rows if r[f"z_{d}"][j] is not None]
        out.append(sum(v) / len(v) if v else None)
    return out


# ---------------------------------------------------------------------------------------------
# Running it all
# ---------------------------------------------------------------------------------------------


@dataclass
class DialogueResult:
    """A finished reproduction: the per-turn table, the summary and the wall time."""

    config: DialogueConfig
    rows: Any
    summary: dict[str, Any]
    wall_seconds: float
    files: list[Path] = field(default_factory=list)


class _LineCounter:
    """Turns kept in the dialogues' files so far, for the progress bar.

    Asked every second; the files only grow, so each read starts where the last one ended.
    """

    def __init__(self, tasks: Sequence[Dialogue]) -> None:
        self._tasks = list(tasks)
        self._seen = {t.path: (0, 0) for t in self._tasks}  # path -> (bytes read, lines)

    def __call__(self) -> int:
        total = 0
        for t in self._tasks:
            offset, lines = self._seen[t.path]
            if t.path is not None and t.path.exists():
                with open(t.path, "rb") as f:
                    if f.seek(0, 2) < offset:  # rewritten shorter (a cut line dropped)
                        offset, lines = 0, 0
                    f.seek(offset)
                    data = f.read()
                offset += len(data)
                lines += data.count(b"\n")
                self._seen[t.path] = (offset, lines)
            total += min(lines, t.turns)
        return total


def reproduce(config: DialogueConfig, *, executor: Any | None = None, progress: bool = True,
              baselines: bool | None = None, report_only: bool = False) -> DialogueResult:
    """Run every dialogue (resuming kept turns) through the shared executor and analyse.

    ``report_only``: run nothing, report on the turns kept in ``out`` so far (while another
    process may still be adding to them).

    Raises
    ------
    InputError
        Bad settings, Dask missing, or an unreachable scheduler.

    """
    from idt_desk.plugin import run_tasks

    config = config.resolved()
    tasks = make_dialogues(config)
    t0 = time.perf_counter()
    if report_only:
        if config.out is None:
            raise InputError("--report-only reports on the turns kept in --out")
        results = [run_dialogue(t, run=False) for t in tasks]
    else:
        results = run_tasks(
            run_dialogue, tasks, executor=executor, workers=config.workers,
            scheduler=config.scheduler, progress=progress, desc="dialogue turns", unit="turn",
            weight=lambda d: d.turns,
            poll=None if config.out is None else _LineCounter(tasks))
    wall = time.perf_counter() - t0
    rows = turn_table(results, baselines=baselines)
    summary = summarize(rows, results, config, wall)
    result = DialogueResult(config, rows, summary, wall)
    if config.out is not None:
        result.files = write_outputs(result, Path(config.out))
    return result


# ---------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------


def _r(c: dict[str, Any] | None) -> str:
    if not c or c.get("r") is None:
        return "—"
    ci = c.get("ci")
    text = f"{c['r']:+.2f}"
    if ci:
        text += f" [{ci[0]:+.2f}, {ci[1]:+.2f}]"
    return text + (f", p {c['p']:.2g}" if c.get("p") is not None else "")


def format_tables(summary: dict[str, Any]) -> str:
    """Markdown: detection, effect sizes and Table 6, the paper's values beside ours."""
    dets = summary["detectors"]
    models = summary["models"]
    student = (models.get("student") or {}).get("model", "?")
    teacher = (models.get("teacher") or {}).get("model", "?")
    n_dialogues = len(summary["dialogues"])
    lines = [
        "# LLM dialogue: reproduction of the paper's §5.2 (Figure 4, Table 6)",
        "",
        f"Student {student}, teacher {teacher}; {n_dialogues} dialogues, {summary['turns']} "
        f"turns; tokenizer {summary['tokenizer']['name']}; structural baselines "
        + (summary["baselines"]["model"] if summary["baselines"] else "not installed")
        + f". Wall time {summary['wall_seconds']:.0f} s for what ran now; the turns took "
        f"{summary['turn_seconds']:.0f} s of model time in all.",
        "",
    ]
    if summary["unfinished"]:
        lines += [f"**Unfinished dialogues** ({len(summary['unfinished'])}): "
                  + ", ".join(summary["unfinished"])
                  + ". Their turns are kept: run the same command again to carry them on.", ""]
    lines += [
        "## Injection detection (§5.2.3): injections detected / injected; false alarms at the "
        "same turns of the baseline tests",
        "",
        "Paper: P and ΔH detect every injection, 9/9 trials per condition (p < 0.001).",
        "",
        "| Condition | Detector | Contradiction | Topic shift | Non-sequitur | All | "
        "False alarms | p vs false alarms | Median latency (turns) | Matched ≤ 5 %: "
        "threshold, detected, false alarms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cond, block in summary["detection"].items():
        for d in dets:
            b = block[d]
            cells = []
            for kind in ("contradiction", "topic_shift", "non_sequitur"):
                t = b["by_type"].get(kind)
                cells.append("—" if t is None else f"{t['detected']}/{t['injections']}")
            p = b["p_vs_control"]
            lat = b["median_latency"]
            m = b.get("matched")
            matched = "—" if m is None else (
                f"{m['threshold_sigma']:.2f}σ, {m['detected']}/{m['injections']}, "
                f"{m['false_alarms']}/{m['control_turns']}")
            lines.append(
                f"| {cond} | {_LABEL[d]} | {' | '.join(cells)} | "
                f"{b['detected']}/{b['injections']} | {b['false_alarms']}/{b['control_turns']} "
                f"| {'—' if p is None else f'{p:.2g}'} | {'—' if lat is None else f'{lat:g}'} "
                f"| {matched} |")
    lines += [
        "",
        "## The signature (Figure 4): mean signed z (baseline σ) at turns k, k + 1, k + 2",
        "",
        "Paper: P drops sharply at the injection (occasionally spikes) and recovers within "
        "1–2 turns, while H_b rises.",
        "",
        "| Condition | Detector | Injections: k, k+1, k+2 | Control turns: k, k+1, k+2 |",
        "|---|---|---|---|",
    ]

    def zs(v: list[float | None]) -> str:
        return ", ".join("—" if z is None else f"{z:+.2f}" for z in v)

    for cond, block in summary["detection"].items():
        for d in dets:
            b = block[d]
            lines.append(f"| {cond} | {_LABEL[d]} | {zs(b['mean_z'])} | "
                         f"{zs(b['mean_z_control'])} |")
    lines += [
        "",
        "## Effect sizes (§11.5): Cohen's d, injection turns (k, k + 1) against turns 1–30",
        "",
        "Paper: d > 0.8 in all 36 comparisons; P from 1.26 to 6.99, LLM judge 2.22 to 4.55.",
        "",
        "| Detector | |d| > 0.8 | d range | median |d| |",
        "|---|---|---|---|",
    ]
    for d in dets:
        s = summary["cohens_d"]["summary"][d]
        rng = "—" if s["min"] is None else f"{s['min']:+.2f} to {s['max']:+.2f}"
        med = "—" if s["median_abs"] is None else f"{s['median_abs']:.2f}"
        lines.append(f"| {_LABEL[d]} | {s['large']} of {s['n']} | {rng} | {med} |")
    lines += [
        "",
        "## Table 6: relationship to structure and semantics",
        "",
        "| Metric | Correlation with structure (cosine), paper | this run | with semantics "
        "(LLM judge), paper | this run |",
        "|---|---|---|---|---|",
    ]
    for m, label in (("P", "Prediction efficiency (P)"), ("dH", "Prediction asymmetry (ΔH)")):
        cells = []
        for ref in ("cos_sim", "judge"):
            t = summary["table6"][f"{m}~{ref}"]
            cells.append("not measured" if not t["conditions"] else
                         f"{t['significant']}/{t['conditions']} "
                         f"({t['significant'] / t['conditions']:.0%}; {t['positive']} positive)")
        paper = PAPER["table6"][m]
        lines.append(f"| {label} | {paper['cosine']} | {cells[0]} | {paper['judge']} | "
                     f"{cells[1]} |")
    lines += [
        "",
        "Per dialogue (r, 95 % CI, p; paper's example: test 7 with Claude, r = 0.838 "
        "[0.77, 0.89]):",
        "",
        "| Test | Condition | Seed | Turns | P ~ cosine | ΔH ~ cosine | P ~ judge |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in summary["correlations"]:
        lines.append(f"| {c['test']} ({TESTS[c['test']].name}) | {c['condition']} | "
                     f"{c['seed']} | {c['turns']} | {_r(c.get('P~cos_sim'))} | "
                     f"{_r(c.get('dH~cos_sim'))} | {_r(c.get('P~judge'))} |")
    lines += _confound_lines(summary)
    lines += ["", "## Baseline (turns 1–30 of every dialogue)", "",
              "| Metric | mean | std | min | max |", "|---|---|---|---|---|"]
    for m, s in summary["metrics"].items():
        lines.append(f"| {_LABEL.get(m, m)} | " + " | ".join(
            "—" if s[k] is None else f"{s[k]:.3f}" for k in ("mean", "std", "min", "max")) + " |")
    return "\n".join(lines) + "\n"


def _confound_lines(summary: dict[str, Any]) -> list[str]:
    """The length confound's table (Markdown lines)."""
    conf = summary.get("length_confound") or {}
    tok = summary.get("prompt_tokens") or {}
    if not conf:
        return []
    o, i = tok.get("ordinary") or {}, tok.get("injected") or {}

    def med(d: dict[str, Any]) -> str:
        if not d.get("n"):
            return "—"
        return f"{d['median']:.0f} (10–90 %: {d['p10']:.0f}–{d['p90']:.0f})"

    lines = [
        "",
        "## The length confound: r with log(1 + token count) over turns 1–30",
        "",
        f"Teacher prompts (S'), tokens: ordinary {med(o)}; injections {med(i)}. Each "
        "dialogue's means removed first; Fisher 95 % CI. \"− length null\": the metric less "
        "its mean over length-matched surrogates of S' (baseline prompts of the same token "
        "count, same S and A).",
        "",
        "| Metric | log n_S' | log n_A | log n_S |",
        "|---|---|---|---|",
    ]
    for m, block in conf.items():
        cells = [_r({k: v for k, v in block[c].items() if k != "p"}) for c in LENGTH_COLUMNS[::-1]]
        lines.append(f"| {_LABEL.get(m, m)} | " + " | ".join(cells) + " |")
    return lines


def plot_figure4(rows: Any, summary: dict[str, Any], path: Path) -> None:
    """P against turn, laid out like the paper's Figure 4.

    One panel per perturbation test (rows) and condition (columns): injections marked, the
    baseline's mean ± 3σ shaded, detected injections circled.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tests = [t for t in (7, 9, 10) if t in set(rows["test"])] or sorted(set(rows["test"]))
    conds = list(dict.fromkeys(rows["condition"]))
    fig, axes = plt.subplots(len(tests), len(conds), figsize=(max(7.5, 5.2 * len(conds)),
                                                               2.6 * len(tests)),
                             squeeze=False, sharex=True, constrained_layout=True)
    # The turn after k at which P first left the band (None: not detected).
    latency = {(r["test"], r["condition"], r["seed"], r["turn"]): r["latency_P"]
               for r in summary["injections"] if r["detected_P"]}
    for i, test in enumerate(tests):
        for j, cond in enumerate(conds):
            ax = axes[i][j]
            sub = rows[(rows["test"] == test) & (rows["condition"] == cond)]
            for seed, g in sub.groupby("seed"):
                g = g.sort_values("turn")
                ax.plot(g["turn"], g["P"], lw=1, label=f"seed {seed}")
                base = g.loc[g["turn"] <= BASELINE_TURNS, "P"]
                if len(base) > 1:
                    mu, sd = base.mean(), base.std(ddof=1)
                    ax.axhspan(mu - 3 * sd, mu + 3 * sd, color="tab:green", alpha=0.12, lw=0)
                    ax.axhline(mu, color="tab:green", lw=0.8, ls="--")
                for k in g.loc[g["injected"] != "", "turn"]:
                    ax.axvline(k, color="tab:red", lw=0.8, alpha=0.6)
                    lat = latency.get((test, cond, seed, int(k)))
                    if lat is not None:  # circled where P crossed the band
                        at = g.loc[g["turn"] == k + lat, "P"]
                        ax.plot([k + lat], [at.iloc[0]], "o", mfc="none", mec="tab:red", ms=8)
            ax.set_title(f"test {test} ({TESTS[test].name}), {cond}", fontsize=9)
            if j == 0:
                ax.set_ylabel("P")
            if i == len(tests) - 1:
                ax.set_xlabel("turn")
    teacher = summary["models"].get("teacher") or {}
    student = summary["models"].get("student") or {}
    fig.suptitle(f"P under dialogue perturbations (cf. the paper's Figure 4)\nstudent "
                 f"{student.get('model', '?')}, teacher {teacher.get('model', '?')}\nred lines: "
                 "injections (the S' of that turn); green: turns 1-30 mean ± 3σ;\ncircles: "
                 "where P crossed the band (detected)", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: DialogueResult, out: Path) -> list[Path]:
    """``turns.csv``, ``summary.json``, ``table.md`` and ``figure4.png`` into ``out``."""
    from idt_desk.plugin import write_report

    return write_report(out, rows=result.rows, rows_name="turns.csv", summary=result.summary,
                        markdown=format_tables(result.summary),
                        figure=lambda path: plot_figure4(result.rows, result.summary, path),
                        figure_name="figure4.png")


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: whole numbers separated by commas"
                                          ) from None


def _words(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


#: Options that are the source's settings (option name -> setting name).
_SETTING_OPTIONS = ("host", "student_host", "teacher_host", "student_backend",
                    "teacher_backend", "student_model", "teacher_model", "topic", "threads",
                    "timeout", "judge", "judge_model", "judge_host", "teacher_length")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``idt-desk reproduce dialogue`` options (and ``func=run``)."""
    parser.description = (
        "Run the paper's dialogue tests (baseline tests 3, 4, 8; perturbation tests 7, 9, 10 "
        "with injections after turns 31, 46, 61, 76, 91) under the normal and constrained "
        "student conditions, with Ollama models or the built-in SmolLM2 for either role, and "
        "report injection detection by P, H_b, ΔH and the structural baselines, effect sizes "
        "and the Table 6 correlations beside the paper's. Writes turns.csv, summary.json, "
        "table.md and figure4.png into --out; every turn is kept in --out/dialogues as it "
        "arrives, and the same command run again carries unfinished dialogues on.")
    parser.add_argument("--tests", type=_ints, default=(3, 4, 8, 7, 9, 10), metavar="N,N",
                        help="the paper's tests (default: 3,4,8,7,9,10)")
    parser.add_argument("--conditions", type=_words, default=("normal", "constrained"),
                        metavar="NAME,NAME", help="student conditions (normal,constrained)")
    parser.add_argument("--seeds", type=_ints, default=(0,), metavar="N,N",
                        help="sampling seeds, one dialogue per test, condition and seed (0)")
    parser.add_argument("--turns", type=int, default=None,
                        help="turns per dialogue (default: each test's own, 100-200)")
    for name in _SETTING_OPTIONS:
        from idt_desk_sources.dialogue._source import DialogueSource

        p = next(p for p in DialogueSource.settings if p.name == name)
        kw: dict[str, Any] = {"default": None, "help": (p.help or p.label)
                              + f" (default: {p.default!r})"}
        if p.choices:
            kw["choices"] = p.choices
        elif isinstance(p.default, bool):
            pass
        elif isinstance(p.default, int):
            kw["type"] = int
        elif isinstance(p.default, float):
            kw["type"] = float
        parser.add_argument("--" + name.replace("_", "-"), **kw)
    parser.add_argument("--retries", type=int, default=2,
                        help="tries again after a backend failure before a dialogue is "
                             "reported unfinished (2)")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: report on the turns kept in --out so far")
    parser.add_argument("--no-baselines", action="store_true",
                        help="skip the embedding baselines even when installed")
    parser.add_argument("--workers", type=int, default=None,
                        help="dialogues at once (default: all cores)")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="run on a Dask scheduler, e.g. tcp://host:8786 (it exchanges "
                        "pickles with this process: a cluster you trust)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, print_fn: Any = print) -> int:
    """Run ``idt-desk reproduce dialogue`` from parsed arguments; print the tables.

    Exit status 0 when every dialogue finished, 1 when some are unfinished (their turns are
    kept and the report covers what there is).
    """
    settings = tuple((name, getattr(args, name)) for name in _SETTING_OPTIONS
                     if getattr(args, name, None) is not None)
    config = DialogueConfig(tests=args.tests, conditions=args.conditions, seeds=args.seeds,
                            turns=args.turns, settings=settings, retries=args.retries,
                            workers=args.workers, scheduler=args.scheduler,
                            out=str(args.out))
    result = reproduce(config, progress=not args.no_progress,
                       baselines=False if args.no_baselines else None,
                       report_only=args.report_only)
    print_fn(format_tables(result.summary).rstrip("\n"))
    print_fn("")
    print_fn("wrote " + ", ".join(str(p) for p in result.files))
    if result.summary["unfinished"]:
        print_fn(f"{len(result.summary['unfinished'])} dialogue(s) unfinished: run the same "
                 "command again" + (" without --report-only" if args.report_only else "")
                 + " to carry them on")
        return 1
    return 0
