"""The report: ``table.md`` (:func:`format_tables`) and ``figure4.png`` (:func:`plot_figure4`).

The tables put the paper's values beside a run's: injection detection with the false alarms,
the signature (mean z at turns k, k + 1, k + 2), Cohen's d, Table 6 and its per-dialogue
correlations, the length confound and the baseline turns' metrics. :func:`write_outputs`
writes them with ``turns.csv`` and ``summary.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from idt_desk_sources.dialogue.reproduce.paper import PAPER, TESTS
from idt_desk_sources.dialogue.reproduce.summary import DialogueResult

from idt_desk.plugin import BASELINE_TURNS, LENGTH_COLUMNS

#: Each detector's and metric's name in the tables.
_LABEL = {"P": "P", "H_b": "H_b", "dH": "ΔH", "H_f": "H_f", "P_adj": "P − length null",
          "H_b_adj": "H_b − length null", "dH_adj": "ΔH − length null",
          "H_f_adj": "H_f − length null", "cos_sim": "cosine (prompt–reply)",
          "adjacent": "adjacent coherence", "drift": "cumulative drift", "judge": "LLM judge"}


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
