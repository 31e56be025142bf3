"""The report of a reproduction: the Markdown tables and the figures, written into ``--out``.

:func:`format_tables` lays ``summary.json`` out like the paper's Tables 3 and 4 (the paper's
values beside ours), with the protocols side by side, the matched false-alarm and the
live-calibrated blocks, the perturbations and the closed loop; :func:`plot_summary` draws
detection, false alarms and latency per detector (``detection.png``), :func:`plot_roc` the
ROC of each swept detector (``roc.png``); :func:`write_outputs` writes them all with
``trials.csv`` and ``summary.json``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from idt_desk_sources.gym.reproduce.config import CONTROL, DETECTORS, HAND
from idt_desk_sources.gym.reproduce.judge import SWEPT, SWEPT_LABEL, scores, swept
from idt_desk_sources.gym.reproduce.summary import CheetahResult, with_defaults

#: Each detector as the tables and figures name it.
LABEL = {"IDT": "IDT", "P": "P", "dH": "ΔH", "H_f": "H_f", "H_b": "H_b", "reward": "Rewards"}


def live_rows(lv: dict[str, Any]) -> list[str]:
    """The live-calibrated block as a Markdown table (one row per detector)."""
    lines = ["| Detector | loop: detection | false alarms | median latency | "
             "reward: detection | false alarms | median latency | asked for |",
             "|---|---|---|---|---|---|---|---|"]
    over = (lv.get("by_chance") or {}).get("over")
    for kind in (k for k in lv if isinstance(lv[k], dict) and k != "by_chance"):
        cells = []
        for g in ("loop", "reward"):
            # The loop's columns: the IDT's (or the twin's) windows, or a drift detector's.
            b = (lv[kind].get("IDT") or lv[kind].get("drift")) if g == "loop" \
                else lv[kind].get(g)
            if b is None:
                cells += ["—"] * 3
                continue
            dt, fa = b["detection"], b["false_alarms"]
            cells += [f"{dt['detected']} of {dt['trials']}",
                      f"{fa['alarms']} of {fa['trials']}"
                      + (" (over budget)" if over is not None and fa["alarms"] >= over
                         else ""), fmt(b["median_latency"])]
        skipped = lv[kind].get("skipped")
        label = kind if not skipped else (f"{kind} (did not run on {skipped['trials']} "
                                          f"trials: {skipped['why']})")
        lines.append(f"| {label} | " + " | ".join(cells) + " | "
                     + _count(lv[kind].get("needed_windows")) + " |")
    return lines


def attribution_rows(att: dict[str, Any]) -> list[str]:
    """Each attribution column's confusion and accuracy as Markdown lines."""
    from idt_desk_sources.gym.reproduce.twin import NAMED

    lines = []
    for col, b in att.items():
        lines += [f"**{col}** — at {b['alarm']}'s detection, twin {b['twin']}: "
                  f"{b['right']} of {b['judged']} right"
                  + (f" ({b['right'] / b['judged']:.0%})" if b["judged"] else "") + "; per "
                  "policy " + ", ".join(f"{p} {r}/{n}" for p, (r, n) in b["per_policy"].items())
                  + "; controls' false alarms named: " + (", ".join(
                      f"{n} {k}" for n, k in b["controls_named"].items()) or "none") + ".", "",
                  "| true \\ named | " + " | ".join(NAMED) + " |",
                  "|---|" + "---|" * len(NAMED)]
        for c, row in b["confusion"].items():
            lines.append(f"| {c} | " + " | ".join(str(row[n]) for n in NAMED) + " |")
        lines.append("")
    return lines


def _chance_text(live: dict[str, Any]) -> str:
    """The live block's false alarms as the budget expects them (see :func:`_by_chance`)."""
    c = live.get("by_chance")
    if not c:
        return ""
    over = (f"; {c['over']} or more happen by chance with probability under 0.05 (marked "
            "*over budget*)" if c["over"] is not None else
            "; no count of them is unlikely enough to say the budget was broken")
    return (f" Kept exactly, the budget lets a control's {c['minutes_after_onset']:.0f} min "
            f"of loop time after the onset alarm with probability {c['p_control']:.2f}: "
            f"{c['expected']:.1f} of {live['control_trials']} controls expected{over}.")


def _count(v: Any) -> str:
    """A whole count with thousands separators ("—" for none)."""
    return "—" if v is None or not math.isfinite(v) else f"{v:,.0f}"


def fmt(v: Any, digits: int = 3) -> str:
    """A number for a table: ``digits`` significant digits ("—" for none, NaN or inf)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


#: What each protocol is, for the tables' header.
_ACTIONS_TEXT = {
    "deterministic": "the policy's mean action, as the authors' released evaluation acts: "
                     "model.predict(obs, deterministic=True)",
    "stochastic": "actions sampled from the policy's distribution, the paper's wording: "
                  "'stochastic policies ensure choice'",
}


def _false_alarms(fa: dict[str, Any] | None) -> str:
    """'k of n (r %)' for a false-alarm count over control trials."""
    return "—" if not fa else f"{fa['alarms']} of {fa['trials']} ({fa['rate']:.0%})"


def _pm(ms: dict[str, Any], digits: int = 3) -> str:
    if ms.get("mean") is None:
        return "—"
    return f"{ms['mean']:.{digits}f}" + ("" if ms.get("std") is None
                                         else f" ± {ms['std']:.{digits}f}")


def _env(summary: dict[str, Any]) -> str:
    """The env the run stepped (a run from before ``--env-id``: HalfCheetah-v5)."""
    return summary["config"].get("env_id") or "HalfCheetah-v5"


def _symbols(cfg: dict[str, Any]) -> str:
    """The symbols in words: the preset's bins, or an ``auto`` preset's view chosen per trial."""
    if cfg.get("preset") == "auto":
        return "preset auto (each trial's view chosen on its first 20 windows: trials.csv's view)"
    return f"3 bins (preset {cfg.get('preset') or 'cheetah'})"


def format_tables(summary: dict[str, Any]) -> str:
    """Markdown laid out like the paper's Tables 3 and 4, the paper's values beside ours."""
    cfg = summary["config"]
    paper = summary["paper"]
    n_seeds, n_inc = len(summary["seeds"]), len(summary["included_seeds"])
    fa_trials = next((v["trials"] for v in summary["all_seeds"]["false_alarm_rate"].values()
                      if v), 0)
    env = _env(summary)
    cheetah = env.startswith("HalfCheetah")
    # Another env runs the same protocol; the paper's rows stay HalfCheetah's, for scale.
    title = ("# HalfCheetah: reproduction of the paper's §5.1 (Tables 3 and 4)" if cheetah
             else f"# {env}: the paper's §5.1 protocol (its HalfCheetah rows beside, for scale)")
    lines = [
        title,
        "",
        f"**Actions: {summary['actions']}** ({_ACTIONS_TEXT[summary['actions']]}). "
        f"{n_seeds} policies (seeds), {summary['all_seeds']['trials']} perturbation trials "
        f"({summary['trials']} on the {n_inc} included seeds) and {fa_trials} control trials "
        f"({cfg['control_seeds']} per seed, each its own environment seed); "
        f"{cfg['episodes']} episodes per trial, perturbation on from "
        f"episode {cfg['onset']}; windows W = 300, stride 50, "
        f"{_symbols(cfg)}, {cfg['k']:g}σ. Wall time "
        f"{summary['wall_seconds']:.0f} s.",
        "",
        "## Table 3 — Bi-predictability across physical and agentic systems",
        "",
        "| System | P | ΔH |",
        "|---|---|---|",
        f"| Double pendulum (paper) | {paper['pendulum_P']} | ≈ 0 |",
        f"| Half-Cheetah baseline (paper) | {paper['baseline_P']['mean']} ± "
        f"{paper['baseline_P']['std']} | {paper['baseline_dH']['mean']} ± "
        f"{paper['baseline_dH']['std']} |",
        f"| {'Half-Cheetah' if cheetah else env} baseline (this run, "
        f"{summary['baseline_P']['n']} seeds) | "
        f"{_pm(summary['baseline_P'])} | {_pm(summary['baseline_dH'])} |",
        "",
        "## Detection coverage (§5.1.3)",
        "",
        f"Included seeds: {n_inc} of {n_seeds} (exclusion rule: pre-onset return CV > "
        f"{cfg['max_baseline_cv']:g}, fixed before the first full run"
        + ("; excluded: " + ", ".join(f"{e['policy']} (CV {e['return_pre_cv']:.2f})"
                                      for e in summary["exclusions"]) if summary["exclusions"]
           else "") + "). Control trials have no perturbation: their 'detections' are the "
        "false alarms of the 3σ rule, counted over every control trial.",
        "",
        "| Detector | Paper | This run, included seeds | This run, all seeds | False alarms "
        "(control), all seeds | Post-onset windows in excursion, perturbed / control | "
        "Cohen's d, all seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    every = summary["all_seeds"]

    def rate(r: dict[str, Any]) -> str:
        return "—" if r["mean"] is None else (
            f"{r['mean']:.1%}" + ("" if r["std"] is None else f" ± {r['std']:.1%}"))

    def frac(block: dict[str, Any], m: str) -> str:
        e = block["excursion_fraction"][m]
        return " / ".join("—" if e[k] is None else f"{e[k]:.1%}" for k in ("perturbed", "control"))

    for m in DETECTORS:
        pr = paper["detection_rate"].get(m)
        pr_text = f"{pr['mean']:.1%} ± {pr['std']:.1%}" if pr else "—"
        d = every["cohens_d"].get(m)
        lines.append(f"| {LABEL[m]} | {pr_text} | {rate(summary['detection_rate'][m])} | "
                     f"{rate(every['detection_rate'][m])} | "
                     f"{_false_alarms(every['false_alarm_rate'][m])} | {frac(every, m)} | "
                     f"{'—' if not d else _pm(d, 2)} |")
    lines += ["", f"Paired t-test, IDT against reward detection over seeds: paper t = "
              f"{paper['t_test']['t']}, p {paper['t_test']['p']} (n = {paper['t_test']['n']})"]
    for label, block in (("included seeds", summary), ("all seeds", every)):
        t = block["t_test_IDT_vs_reward"]
        lines[-1] += f"; {label} t = {fmt(t['t'])}, p = {fmt(t['p'])} (n = {t['n']})"
    lines[-1] += "."
    protocols = summary.get("protocols", {})
    if len(protocols) > 1:
        names = list(protocols)
        lines += ["", "## Both protocols side by side (all seeds, open loop)", "",
                  "Deterministic: the authors' released evaluation "
                  "(`model.predict(obs, deterministic=True)`); stochastic: actions sampled from "
                  "the policy (the paper's wording, 'stochastic policies ensure choice'). "
                  "Same policies, perturbations, seeds and analysis.", "",
                  "| Detector | " + " | ".join(
                      f"{a}: detection | {a}: false alarms | {a}: windows in excursion, "
                      f"perturbed / control | {a}: median latency" for a in names) + " |",
                  "|---|" + "---|---|---|---|" * len(names)]
        for m in DETECTORS:
            cells = []
            for a in names:
                b = protocols[a]["all_seeds"]
                cells += [rate(b["detection_rate"][m]), _false_alarms(b["false_alarm_rate"][m]),
                          frac(b, m), fmt(b["median_latency"][m]["median"])]
            lines.append(f"| {LABEL[m]} | " + " | ".join(cells) + " |")
        lines.append("| Baseline P / ΔH | " + " | ".join(
            f"{_pm(protocols[a]['baseline_P'])} / {_pm(protocols[a]['baseline_dH'])} | | |"
            for a in names) + " |")
    matched = {a: b["matched_false_alarm"] for a, b in (protocols or
                                                         {summary["actions"]: summary}).items()
               if b.get("matched_false_alarm")}
    for a, mt in matched.items():
        names = [n for n in SWEPT if n in mt]
        lines += ["", f"## Detection at a matched false-alarm rate ({a} actions, all seeds)",
                  "",
                  f"Each detector's threshold θ (in its statistic's units: baseline σ, T² for "
                  f"the MEWMA) is the lowest that leaves at most "
                  f"{mt['allowed_false_alarms']} of the {mt['control_trials']} control trials "
                  f"alarmed after the onset (≤ {mt['target_rate']:.0%}); "
                  + "; ".join(SWEPT_LABEL[n] for n in names)
                  + ". The paper's fixed 3σ rule is the table above.", "",
                  "| Detector | " + " | ".join(
                      f"{n}: θ | false alarms | detection | median latency" for n in names)
                  + " |",
                  "|---|" + "---|---|---|---|" * len(names)]
        for m in DETECTORS:
            cells = []
            for name in names:
                b = mt[name][m]
                fa, dt = b["false_alarms"], b["detection"]
                cells += [f"{b['threshold_sigma']:.2f}", f"{fa['alarms']} of {fa['trials']}",
                          f"{dt['detected']} of {dt['trials']} ({dt['rate']:.0%})",
                          fmt(b["median_latency"])]
            lines.append(f"| {LABEL[m]} | " + " | ".join(cells) + " |")
        if mt.get("drift"):
            lines += ["", "The generic drift detectors at the same rate (θ in units of each "
                      "one's own ERT-calibrated threshold), beside the IDT's MEWMA:", "",
                      "| Detector | θ | false alarms | detection | median latency |",
                      "|---|---|---|---|---|"]
            rows = {**({"IDT (MEWMA)": mt["mewma"]["IDT"]} if "mewma" in mt else {}),
                    **mt["drift"]}
            for label, b in rows.items():
                fa, dt = b["false_alarms"], b["detection"]
                lines.append(f"| {label} | {b['threshold_sigma']:.2f} | "
                             f"{fa['alarms']} of {fa['trials']} | "
                             f"{dt['detected']} of {dt['trials']} ({dt['rate']:.0%}) | "
                             f"{fmt(b['median_latency'])} |")
    live = {a: b["live_calibrated"] for a, b in (protocols or
                                                 {summary["actions"]: summary}).items()
            if b.get("live_calibrated")}
    for a, lv in live.items():
        lines += ["", f"## Live-calibrated detectors ({a} actions, all seeds)", "",
                  f"Each trial judged by the monitor a live session calibrates on the trial's "
                  f"own pre-onset windows to {lv['budget']} (no threshold from other trials): "
                  f"false alarms over {lv['control_trials']} control trials, detection over "
                  f"{lv['perturbed_trials']} perturbed ones, latency in windows after the "
                  f"onset.{_chance_text(lv)} `_phase`: against the baseline at the window's "
                  "phase of the episode; `l10`, `l20`: λ 0.1, 0.2; `return_*`: the episode "
                  "return's EWMA (λ 0.2) or CUSUM (d 0.5σ), its baseline the pre-onset "
                  "episodes, judged at each episode's end; `mmd`, `lsdd`: the generic online "
                  "drift detectors (alibi-detect's online MMD and LSDD) on the trial's "
                  "(S, A, S'), one transition a window, standardised on the pre-onset ones, "
                  "calibrated to the same budget. *Asked for*: the most baseline "
                  "windows (episodes for `return_*`) any trial's calibration asked for, to keep "
                  "the threshold's inflation ≤ 1.25 (0: none asked).", "",
                  *live_rows(lv)]
    attributed = {a: b["attribution"] for a, b in (protocols or
                                                  {summary["actions"]: summary}).items()
                  if b.get("attribution")}
    for a, att in attributed.items():
        lines += ["", f"## What changed: the twin's class at each detection ({a} actions)", "",
                  "At each detection the env's twin (an unperturbed copy stepped from each "
                  "recorded S with the recorded A; or one with masses ×1.1 and friction ×0.9) "
                  "names the class of change: rows the perturbation's declared class, columns "
                  "the class named; `unknown` counts as wrong. `mewma_twin` and `mewma_union` "
                  "above are the twin's own alarm and its union with the IDT's.", "",
                  *attribution_rows(att)]
    lines += [
        "",
        "## Table 4 — Detection latency (median windows after perturbation onset)",
        "",
        "| Metric | Paper | Included seeds | All seeds | Trials detected, all seeds |",
        "|---|---|---|---|---|",
    ]
    for m in DETECTORS:
        lat, lat_all = summary["median_latency"][m], every["median_latency"][m]
        lines.append(f"| {LABEL[m]} | {paper['median_latency'][m]} | {fmt(lat['median'])} | "
                     f"{fmt(lat_all['median'])} | {lat_all['detected_trials']} of "
                     f"{lat_all['detected_trials'] + lat_all['never_detected_trials']} |")
    lines += ["", "## By perturbation (all seeds)", "",
              "| Perturbation | Trials | IDT | P | ΔH | H_f | H_b | Reward | IDT latency | "
              "Reward latency | d(P) | d(ΔH) | d(reward) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, b in every["by_perturbation"].items():
        rates = " | ".join(f"{b['detection_rate'][m]:.0%}" for m in DETECTORS)
        d = b["cohens_d"]
        lines.append(f"| {name} | {b['trials']} | {rates} | "
                     f"{fmt(b['median_latency']['IDT'])} | {fmt(b['median_latency']['reward'])} | "
                     f"{d['P']:.2f} | {d['dH']:.2f} | {d['reward']:.2f} |")
    if summary["closed_loop"]:
        lines += ["", "## Closing the loop (Auto modulation from the IDT alarm)", "",
                  "| Actions | Auto | Perturbation | Return after onset, open → auto | P after "
                  "onset, open → auto | Engaged (trials) | Engage latency (windows) | Time "
                  "engaged | False engagements before onset |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for c in summary["closed_loop"]:
            lines.append(
                f"| {c.get('actions', summary['actions'])} | {c['auto']} | {c['perturbation']} "
                f"| {c['return_post_open']:.0f} → "
                f"{c['return_post_auto']:.0f} | {c['P_post_open']:.3f} → "
                f"{c['P_post_auto']:.3f} | {c['engaged_trials']} of {c['trials']} | "
                f"{'at onset' if c['auto'].startswith(HAND) else fmt(c['engage_latency_median'])}"
                f" | {c['engaged_fraction_post']:.0%} | "
                f"{c['false_engagements_pre']} |")
    return "\n".join(lines) + "\n"


def plot_summary(summary: dict[str, Any], path: Path) -> None:
    """Detection rate (± std over seeds), false alarms and median latency per detector.

    One bar per protocol (deterministic, stochastic) when several were run; the paper's
    values are marked.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    protocols = summary.get("protocols") or {summary["actions"]: summary}
    names = list(protocols)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    x = np.arange(len(DETECTORS))
    width = 0.7 / len(names)
    for j, name in enumerate(names):
        every = protocols[name]["all_seeds"]
        off = (j - (len(names) - 1) / 2) * width
        colours = ["tab:blue" if m != "reward" else "tab:red" for m in DETECTORS]
        style = {"alpha": 0.85 if j == 0 else 0.4, "hatch": None if j == 0 else "//",
                 "edgecolor": "black" if j else None}
        rate = every["detection_rate"]
        means = [rate[m]["mean"] or 0.0 for m in DETECTORS]
        ax1.bar(x + off, means, width,
                yerr=rate_errors(means, [rate[m]["std"] or 0.0 for m in DETECTORS]),
                color=colours, capsize=2,
                error_kw={"ecolor": "0.55", "lw": 0.8},
                label=f"{name}: detection, {len(protocols[name]['seeds'])} seeds", **style)
        fa = [every["false_alarm_rate"][m] for m in DETECTORS]
        if any(fa):
            n_fa = next(v["trials"] for v in fa if v)
            ax1.scatter(x + off, [np.nan if v is None else v["rate"] for v in fa],
                        marker="X" if j == 0 else "o", s=70, color="black", edgecolors="white",
                        zorder=3, label=f"{name}: false alarms ({n_fa} controls)")
        lat = [every["median_latency"][m]["median"] for m in DETECTORS]
        ax2.bar(x + off, [np.nan if v is None else v for v in lat], width, color=colours,
                label=name, **style)
    paper = summary["paper"]
    for j, m in enumerate(DETECTORS):
        p = paper["detection_rate"].get(m)
        if p:
            ax1.errorbar(j + 0.42, p["mean"], yerr=rate_errors([p["mean"]], [p["std"]]),
                         fmt="D", color="grey", capsize=3,
                         label="paper" if m == "IDT" else None)
    ax1.set_xticks(x, [LABEL[m] for m in DETECTORS])
    ax1.set_ylim(0, 1.03)
    ax1.set_ylabel("detection rate (mean over seeds)")
    # Below the axes: over the bars it hid the data.
    ax1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2,
               frameon=False)
    ax2.scatter(x + 0.42, [paper["median_latency"][m] for m in DETECTORS], marker="D",
                color="grey", label="paper (Table 4)", zorder=3)
    ax2.set_xticks(x, [LABEL[m] for m in DETECTORS])
    ax2.set_ylabel("median latency (windows after onset)")
    ax2.legend(fontsize=8)
    fig.suptitle(f"{_env(summary)}: {summary['all_seeds']['trials']} perturbation trials per "
                 f"protocol on {len(summary['seeds'])} seeds (cf. the paper's §5.1); "
                 f"{' vs '.join(names)} actions", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def rate_errors(means: Sequence[float], stds: Sequence[float]) -> np.ndarray:
    """Error bars (2 × n: below, above) of rates, ± σ clipped to [0, 1]."""
    m = np.asarray(means, dtype=np.float64)
    s = np.asarray(stds, dtype=np.float64)
    return np.vstack([np.minimum(s, m), np.minimum(s, 1.0 - m)])


def plot_roc(rows: Any, path: Path) -> bool:
    """Detection against false alarms as the threshold sweeps, per detector (``roc.png``).

    One panel per swept detector (:data:`SWEPT`), one curve per metric, solid for
    deterministic and dashed for stochastic actions; the 5 % line marked. False if the rows
    hold no records (nothing drawn).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from idt_desk.plugin import MATCHED_RATE

    if "records_paper_IDT" not in rows:
        return False
    ok = rows[(rows["error"] == "") & (rows["auto"] == "")]
    names = swept(rows)
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4.6),
                             constrained_layout=True, squeeze=False)
    axes = axes[0]
    colours = dict(zip(DETECTORS, ("black", "tab:blue", "tab:purple", "tab:orange",
                                   "tab:green", "tab:red"), strict=True))
    for ax, name in zip(axes, names, strict=True):
        for a, style in zip(dict.fromkeys(ok["actions"]), ("-", "--"), strict=False):
            part = ok[ok["actions"] == a]
            ctl = part[part["perturbation"] == CONTROL]
            per = part[part["perturbation"] != CONTROL]
            for m in DETECTORS:
                c, _ = scores(ctl, name, m)
                p, _ = scores(per, name, m)
                if not c.size or not p.size:
                    continue
                grid = np.unique(np.concatenate([c, p, [np.inf]]))[::-1]
                ax.plot([(c > g).mean() for g in grid], [(p > g).mean() for g in grid], style,
                        color=colours[m], lw=1.4 if m == "IDT" else 1.0,
                        label=f"{LABEL[m]}, {a}", drawstyle="steps-post")
        ax.axvline(MATCHED_RATE, color="grey", lw=0.8, ls=":")
        ax.plot([0, 1], [0, 1], color="0.8", lw=0.8)
        ax.set_xlabel("false-alarm rate (control trials alarmed)")
        ax.set_ylabel("detection rate (perturbed trials)")
        ax.set_title(SWEPT_LABEL[name], fontsize=10)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
    axes[-1].legend(fontsize=7, ncol=2, loc="lower right")
    fig.suptitle("ROC over the threshold θ (all seeds; dotted: 5 % false alarms)",
                 fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_outputs(result: CheetahResult, out: Path) -> list[Path]:
    """``trials.csv``, ``summary.json``, ``table.md``, ``detection.png`` and ``roc.png``."""
    from idt_desk.plugin import write_report

    files = write_report(out, rows=result.trials, rows_name="trials.csv",
                         summary=result.summary, markdown=format_tables(result.summary),
                         figure=lambda path: plot_summary(result.summary, path),
                         figure_name="detection.png")
    if plot_roc(with_defaults(result.trials, result.config), out / "roc.png"):
        files.append(out / "roc.png")
    return files
