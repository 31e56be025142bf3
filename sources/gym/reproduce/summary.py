"""The summary of a reproduction: ``summary.json``'s content from the per-trial table.

:func:`summarize_trials` gives, per protocol (``actions``), the baseline P and ΔH of Table 3,
the seeds excluded, the detection rates, false alarms, latencies and Cohen's d of each
detector (Table 4), the matched false-alarm comparison, the live-calibrated block
(:func:`live_summary`, with what the budget lets controls alarm by chance) and the
closed-loop comparison; :data:`PAPER` holds the paper's numbers beside them.

Across trials
-------------
- **Seeds** are the policies (the paper: 21 trained seeds). A seed's detection rate for a
  detector is the fraction of its perturbation trials it detects; ``summary.json`` gives the
  mean ± std (ddof 1) over the included seeds, the paired t-test of IDT against reward over
  the same seeds, and median latencies over every included trial (never-detected trials are
  NaN and left out of the median; their count is reported).
- **Exclusion rule** (fixed before any result was seen, after the paper's "unstable baseline
  variance"): a seed is excluded from the detection statistics when the coefficient of
  variation (σ / |mean|, ddof 1) of its pre-onset episode returns exceeds ``max_baseline_cv``
  (default 0.25): such an agent has no one stationary gait to calibrate a threshold on. The
  baseline P and ΔH (Table 3) are over every seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from idt_desk_sources.gym._source import ACTIONS
from idt_desk_sources.gym.reproduce.config import COMPONENTS, CONTROL, DETECTORS, CheetahConfig
from idt_desk_sources.gym.reproduce.judge import (
    DRIFT_ROWS,
    LIVE_ROWS,
    RETURN_MONITORS,
    matched_false_alarm,
    ran_on,
)
from idt_desk_sources.gym.reproduce.twin import TWIN_ROWS, attribution_summary

#: The paper's numbers (§5.1.2-5.1.4, Tables 3 and 4).
PAPER: dict[str, Any] = {
    "baseline_P": {"mean": 0.33, "std": 0.02},
    "baseline_dH": {"mean": -0.56, "std": 0.22},
    "pendulum_P": 0.48,
    "detection_rate": {"IDT": {"mean": 0.893, "std": 0.151},
                       "reward": {"mean": 0.440, "std": 0.261}},
    "t_test": {"t": 7.95, "p": "< 1e-6", "n": 21},
    "median_latency": {"IDT": 42, "P": 74, "dH": 67, "H_f": 69, "H_b": 75, "reward": 184},
    "trials": 168,
    "seeds": {"SAC": 11, "PPO": 10, "excluded": 5},
}


def _ms(x: Sequence[float]) -> dict[str, float | None]:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return {"mean": float(x.mean()) if x.size else None,
            "std": float(x.std(ddof=1)) if x.size > 1 else None, "n": int(x.size)}


def with_defaults(rows: Any, config: CheetahConfig) -> Any:
    """Rows with ``actions`` and ``env_seed`` filled in (tables written before they existed)."""
    fill = {"actions": config.actions[0] if config.actions else ACTIONS[0],
            "env_seed": config.seed}
    for col, value in fill.items():
        rows = rows.assign(**{col: rows[col].fillna(value) if col in rows else value})
    return rows


def summarize_trials(rows: Any, config: CheetahConfig, wall: float) -> dict[str, Any]:
    """The ``summary.json`` content from the per-trial table (a DataFrame).

    Every protocol (``actions``) present gets its own block under ``protocols``; the first of
    ``config.actions`` is also written at the top level (the tables' main protocol).
    """
    from idt_desk.plugin import summary_document

    rows = with_defaults(rows, config)
    ok = rows[rows["error"] == ""]
    names = [a for a in dict.fromkeys([*config.actions, *rows["actions"]])
             if (rows["actions"] == a).any()] or [config.actions[0]]
    protocols = {a: _protocol_summary(ok[(ok["actions"] == a) & (ok["auto"] == "")], config)
                 for a in names}
    main = protocols[names[0]]
    return summary_document(
        {m: main[f"baseline_{m}"] for m in ("P", "dH")},
        notes=[
            "Seeds are policies. Detection rate per seed: fraction of its perturbation trials "
            "detected; mean ± std (ddof 1) over included seeds.",
            f"Exclusion rule, fixed beforehand: pre-onset episode-return CV > "
            f"{config.max_baseline_cv:g} (the mean over the seed's distinct pre-onset runs, "
            "its control trials).",
            "Median latency in windows after the first window holding a perturbed step, over "
            "detected trials (never-detected trials are NaN, counted apart).",
            "Control trials ('none') have no perturbation: their detections are the false "
            "alarms of the 3-sigma rule over the post-onset windows, counted over every "
            "control trial (control_seeds per policy, each its own environment seed).",
            f"Actions: {names[0]} at the top level"
            + (f"; every protocol under 'protocols' ({', '.join(names)})." if len(names) > 1
               else "."),
        ],
        config=config.to_dict(),
        actions=names[0],
        **main,
        protocols=protocols,
        closed_loop=_closed_loop(ok),
        errors=[f"{r.policy} {r.perturbation} {r.auto}: {r.error}"
                for r in rows.itertuples() if r.error],
        wall_seconds=wall,
        paper=PAPER,
    )


def _protocol_summary(open_loop: Any, config: CheetahConfig) -> dict[str, Any]:
    """Baseline, exclusions and detection statistics of one protocol's open-loop trials.

    A seed's baseline P and ΔH and its pre-onset return CV are the means over its distinct
    pre-onset runs (its control trials, one per environment seed; the perturbed trials share
    the first control's), or its first trial's when it has no control.
    """
    seeds = list(dict.fromkeys(open_loop["policy"]))
    control = open_loop[open_loop["perturbation"] == CONTROL]
    runs = _pre_onset_runs(open_loop, control)
    per_seed = runs.groupby("policy", sort=False)[["baseline_P", "baseline_dH",
                                                   "return_pre_cv"]].mean()
    cv = per_seed["return_pre_cv"]
    excluded = {p: float(cv[p]) for p in seeds if not (cv[p] <= config.max_baseline_cv)}
    included = [p for p in seeds if p not in excluded]
    return {
        "baseline_P": _ms(per_seed["baseline_P"].to_numpy()),
        "baseline_dH": _ms(per_seed["baseline_dH"].to_numpy()),
        "seeds": seeds,
        "included_seeds": included,
        "exclusions": [{"policy": p, "return_pre_cv": c,
                        "rule": f"return_pre_cv > {config.max_baseline_cv:g}"}
                       for p, c in excluded.items()],
        **_detection(open_loop, included),
        "all_seeds": _detection(open_loop, seeds),
        "matched_false_alarm": matched_false_alarm(open_loop),
        "live_calibrated": live_summary(open_loop, config),
        "attribution": attribution_summary(open_loop),
    }


def live_summary(open_loop: Any, config: CheetahConfig) -> dict[str, Any] | None:
    """Each live detector's detection, false alarms and median latency, IDT and reward.

    Every trial is judged by the monitor a live session calibrates on that trial's own
    pre-onset windows to ``config.false_alarms`` (no threshold from other trials): false
    alarms are the control trials alarmed after the onset, detection the perturbed ones.
    """
    if not _live_names(open_loop):
        return None
    control = open_loop[open_loop["perturbation"] == CONTROL]
    perturbed = open_loop[open_loop["perturbation"] != CONTROL]
    out: dict[str, Any] = {"budget": config.false_alarms, "control_trials": len(control),
                           "perturbed_trials": len(perturbed),
                           "by_chance": _by_chance(control, config.false_alarms)}
    for kind in _live_names(open_loop):
        block: dict[str, Any] = {}
        # A drift detector counts the trials it ran on only, and says why it skipped others.
        ctrl, pert = ran_on(control, kind), ran_on(perturbed, kind)
        skipped = len(control) + len(perturbed) - len(ctrl) - len(pert)
        if skipped:
            why = open_loop[f"drift_{kind}_skipped"].fillna("").astype(str)
            block["skipped"] = {"trials": skipped, "why": str(why[why != ""].iloc[0])}
            if not len(ctrl) + len(pert):
                out[kind] = block
                continue
        for g in ("IDT", "drift", "reward"):
            col = f"live_{kind}_{g}"
            if col not in open_loop:
                continue
            lat = pert[col].to_numpy(np.float64)
            hit = np.isfinite(lat)
            block[g] = {
                "false_alarms": {"alarms": int(np.isfinite(ctrl[col].to_numpy(np.float64))
                                               .sum()), "trials": len(ctrl)},
                "detection": {"detected": int(hit.sum()), "trials": len(lat),
                              "rate": float(hit.mean()) if lat.size else math.nan},
                "median_latency": float(np.median(lat[hit])) if hit.any() else None,
            }
        needed = open_loop.get(f"live_{kind}_needed")
        if needed is not None and np.isfinite(needed.to_numpy(np.float64)).any():
            block["needed_windows"] = float(np.nanmax(needed.to_numpy(np.float64)))
        out[kind] = block
    return out


def _live_names(rows: Any) -> list[str]:
    """The live block's rows these trials hold (older runs lack the newer ones)."""
    names = [r[0] for r in LIVE_ROWS] + [*RETURN_MONITORS, *TWIN_ROWS, *DRIFT_ROWS]
    return [n for n in names
            if any(f"live_{n}_{g}" in rows for g in ("IDT", "drift", "reward"))]


def _by_chance(control: Any, budget: str) -> dict[str, Any] | None:
    """What a budget in loop time lets the control trials alarm, if it is kept exactly.

    A calibrated monitor keeps ``budget`` as a rate of false alarms: a control with T s of
    loop time after the onset alarms there with probability 1 − exp(−rate·T) (the first
    alarm of a Poisson stream). The count of alarmed controls is then a sum of Bernoulli
    trials: its expectation, and ``over``: the least count whose chance is below 5 % (a
    count at or above it says the budget was not kept). None: a budget not in loop time, or
    trials without their loop time (older runs).
    """
    from idt_desk.plugin import parse_budget

    b = parse_budget(budget)
    if b.unit != "s" or "loop_seconds_per_step" not in control or not len(control):
        return None
    seconds = ((control["steps"] - control["onset_step"])
               * control["loop_seconds_per_step"]).to_numpy(np.float64)
    if not np.all(np.isfinite(seconds)):
        return None
    p = 1.0 - np.exp(-b.alarms / b.per * seconds)
    dist = np.zeros(len(p) + 1)  # the count's distribution (Poisson-binomial), by convolution
    dist[0] = 1.0
    for q in p:
        dist[1:] = dist[1:] * (1 - q) + dist[:-1] * q
        dist[0] *= 1 - q
    tail = np.cumsum(dist[::-1])[::-1]  # P(count >= k)
    over = next((k for k in range(len(tail)) if tail[k] < 0.05), None)
    return {"p_control": float(p.mean()), "minutes_after_onset": float(seconds.mean() / 60),
            "expected": float(p.sum()), "over": over}


def _pre_onset_runs(open_loop: Any, control: Any) -> Any:
    """Each seed's distinct pre-onset runs: its controls, or its first trial without one."""
    import pandas as pd

    without = [p for p in dict.fromkeys(open_loop["policy"]) if p not in set(control["policy"])]
    first = open_loop[open_loop["policy"].isin(without)].groupby("policy", sort=False).head(1)
    return pd.concat([control, first])


def _detection(open_loop: Any, seeds: list[str]) -> dict[str, Any]:
    """Detection statistics over the open-loop trials of ``seeds``."""
    from idt_desk.plugin import paired_t_test

    mine = open_loop[open_loop["policy"].isin(seeds)]
    perturbed = mine[mine["perturbation"] != CONTROL]
    control = mine[mine["perturbation"] == CONTROL]
    per_seed = perturbed.groupby("policy")[[f"detected_{m}" for m in DETECTORS]].mean()
    latency = {}
    for m in DETECTORS:
        lat = perturbed[f"latency_{m}"].to_numpy(dtype=np.float64)
        latency[m] = {"median": float(np.nanmedian(lat)) if np.isfinite(lat).any() else None,
                      "detected_trials": int(np.isfinite(lat).sum()),
                      "never_detected_trials": int((~np.isfinite(lat)).sum())}
    by_pert = {}
    for name, part in perturbed.groupby("perturbation", sort=False):
        by_pert[name] = {
            "trials": len(part),
            "detection_rate": {m: float(part[f"detected_{m}"].mean()) for m in DETECTORS},
            "median_latency": {m: (float(np.nanmedian(part[f"latency_{m}"]))
                                   if part[f"latency_{m}"].notna().any() else None)
                               for m in DETECTORS},
            "cohens_d": {m: float(part[f"d_{m}"].mean()) for m in (*COMPONENTS, "reward")},
        }
    return {
        "trials": len(perturbed),
        "detection_rate": {m: _ms(per_seed[f"detected_{m}"].to_numpy()) for m in DETECTORS},
        # Counted over every control trial (control_seeds per seed): "alarms of trials".
        "false_alarm_rate": {m: ({"rate": float(control[f"detected_{m}"].mean()),
                                  "alarms": int(control[f"detected_{m}"].sum()),
                                  "trials": len(control)} if len(control) else None)
                             for m in DETECTORS},
        "excursion_fraction": {
            m: {"perturbed": (float(perturbed[f"excursion_frac_{m}"].mean()) if len(perturbed)
                              else None),
                "control": (float(control[f"excursion_frac_{m}"].mean()) if len(control)
                            else None)} for m in DETECTORS},
        "median_latency": latency,
        "t_test_IDT_vs_reward": paired_t_test(per_seed["detected_IDT"].to_numpy(),
                                              per_seed["detected_reward"].to_numpy()),
        "cohens_d": {m: _ms(perturbed[f"d_{m}"].to_numpy()) for m in (*COMPONENTS, "reward")},
        "by_perturbation": by_pert,
    }


def _closed_loop(ok: Any) -> list[dict[str, Any]]:
    """Per protocol, Auto modulation and perturbation, against the same open-loop trials."""
    out = []
    key = ["actions", "policy", "perturbation", "env_seed"]
    open_loop = ok[ok["auto"] == ""].set_index(key)
    for (actions, auto), closed in ok[ok["auto"] != ""].groupby(["actions", "auto"],
                                                                 sort=False):
        for pert, part in closed.groupby("perturbation", sort=False):
            ref = open_loop.loc[list(part[key].itertuples(index=False, name=None))]
            out.append({
                "actions": actions, "auto": auto, "perturbation": pert, "trials": len(part),
                "return_post_open": float(ref["return_post"].mean()),
                "return_post_auto": float(part["return_post"].mean()),
                "P_post_open": float(ref["post_P"].mean()),
                "P_post_auto": float(part["post_P"].mean()),
                "engaged_trials": int((part["engaged_fraction_post"] > 0).sum()),
                "engage_latency_median": (float(np.nanmedian(part["engage_latency"]))
                                          if part["engage_latency"].notna().any() else None),
                "engaged_fraction_post": float(part["engaged_fraction_post"].mean()),
                "false_engagements_pre": int(part["engagements_pre"].sum()),
            })
    return out


@dataclass
class CheetahResult:
    """A finished reproduction: the per-trial table, the summary and the wall time."""

    config: CheetahConfig
    trials: Any
    summary: dict[str, Any]
    wall_seconds: float
    files: list[Path] = field(default_factory=list)
