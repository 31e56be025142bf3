"""Offline analysis (``idt-desk analyze``) of a trajectory file or a dialogue recording.

A trajectory is symbolised, windowed and summarised; a dialogue recording gives its per-turn
token metrics, their length confound and the injections' verdicts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from idt_desk.detection.detectors import ANALYZE_BUDGET, DetectorSpec
from idt_desk.detection.monitor import IDT_METRICS, Detection, detect
from idt_desk.errors import InputError
from idt_desk.metrics.engine import sliding_metrics, surrogate_null, window_means
from idt_desk.metrics.presets import ANGLE_MODES, Preset
from idt_desk.metrics.regime import SATURATED
from idt_desk.metrics.symbolize import Symbolizer, wrap_angle
from idt_desk.pipeline import build_monitor
from idt_desk.recordings.trajectory import Trajectory
from idt_desk.settings import DEFAULTS

__all__ = [
    "SATURATED",
    "AnalysisResult",
    "analyze_dialogue",
    "analyze_trajectory",
    "plot_metrics",
    "summarize",
    "summary_document",
    "symbolize_trajectory",
    "write_outputs",
    "write_summary",
]

#: The metrics the paper tabulates (Tables 1 and 2), in order.
TABLE_METRICS = ("P", "H_f", "H_b", "dH")



def prepare_angles(
    s: np.ndarray, s_next: np.ndarray, angles: Sequence[int], mode: str
) -> tuple[np.ndarray, np.ndarray]:
    """Apply the preset's angle handling to S and S' (copies; inputs untouched).

    ``unwrap`` makes S's angles continuous along the rows and places each S' angle at the
    branch nearest its S (S' is one step after S), so both share one continuous angle.
    ``wrap`` maps both to (-pi, pi]; ``none`` leaves them.
    """
    if mode not in ANGLE_MODES:
        raise InputError(f"angle mode must be one of {ANGLE_MODES}, got {mode!r}")
    if not angles or mode == "none":
        return s, s_next
    s, s_next = s.copy(), s_next.copy()
    idx = list(angles)
    if max(idx) >= s.shape[1]:
        raise InputError(f"angle column {max(idx)} out of range for {s.shape[1]} state columns")
    if mode == "wrap":
        s[:, idx] = wrap_angle(s[:, idx])
        s_next[:, idx] = wrap_angle(s_next[:, idx])
    else:
        s[:, idx] = np.unwrap(s[:, idx], axis=0)
        s_next[:, idx] = s[:, idx] + wrap_angle(s_next[:, idx] - s[:, idx])
    return s, s_next


def symbolize_trajectory(
    traj: Trajectory, preset: Preset
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, dict[str, Any]]:
    """Symbols (s, s_next, a) with the whole file as calibration; plus the symbolisers' config."""
    s, s_next = prepare_angles(traj.s, traj.s_next, preset.angles, preset.angle_mode)
    # Wrapped angles are circular: their bins span the whole circle, as in a live session.
    circular = preset.angles if preset.angle_mode == "wrap" else ()
    sym_s = Symbolizer(s.shape[1], preset.bins, preset.state_groups, circular=circular,
                       names=traj.state_names)
    s_sym = sym_s.fit_transform(s)
    n_sym = sym_s.transform(s_next)
    config: dict[str, Any] = {"state": sym_s.to_dict()}
    a_sym = None
    if traj.a is not None:
        sym_a = Symbolizer(
            traj.a.shape[1], preset.bins, preset.action_groups, names=traj.action_names
        )
        a_sym = sym_a.fit_transform(traj.a)
        config["action"] = sym_a.to_dict()
    return s_sym, n_sym, a_sym, config


@dataclass
class AnalysisResult:
    """Per-window table, its summary, and the detection (if asked for)."""

    windows: pd.DataFrame
    summary: dict[str, Any]
    detection: Detection | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def _stats(x: np.ndarray) -> dict[str, float | None]:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if not x.size:
        return {"min": None, "mean": None, "max": None, "std": None}
    return {
        "min": float(x.min()),
        "mean": float(x.mean()),
        "max": float(x.max()),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
    }


def summarize(windows: Mapping[str, Any], metrics: Sequence[str] = TABLE_METRICS) -> dict:
    """Min / mean / max / std (ddof = 1, as MATLAB's std) of each metric over windows."""
    return {m: _stats(np.asarray(windows[m])) for m in metrics}


def analyze_trajectory(
    traj: Trajectory,
    preset: Preset,
    *,
    correction: str | None = None,
    null_draws: int = 0,
    seed: int = 0,
    onset: int | None = None,
    n_baseline: int | None = None,
    k: float = 3.0,
    source: str = "",
    detector: str = "paper",
    false_alarms: str | None = None,
    persist: int = DetectorSpec.m,
    ewma_lambda: float = DEFAULTS["ewma_lambda"],
    drift: float = DEFAULTS["drift"],
    rate: float | None = None,
) -> AnalysisResult:
    """Symbolise a trajectory (whole file as calibration), window it, summarise it.

    With an onset or a baseline length, windows are flagged by ``detector``: the paper's
    rule (default, ``k`` σ), or ``persistence`` / ``cusum`` (reference ``drift``) /
    ``ewma`` / ``mewma`` (weight ``ewma_lambda``) calibrated to ``false_alarms``
    (per windows by default; in seconds of loop time given ``rate``, transitions per second)
    by the live monitor's own code.

    Raises
    ------
    InputError
        Too few transitions for one window, or bad symbolisation settings.

    """
    if traj.n < preset.window:
        raise InputError(
            f"{source or 'trajectory'}: {traj.n} transitions, fewer than one window of "
            f"{preset.window}"
        )
    try:
        s, n, a, sym_config = symbolize_trajectory(traj, preset)
    except ValueError as exc:
        raise InputError(f"{source or 'trajectory'}: {exc}") from None
    w = sliding_metrics(s, n, a, preset.window, preset.stride, correction)
    table = pd.DataFrame(w)
    table.insert(1, "end", table["start"] + preset.window)
    if traj.reward is not None:
        table["reward"] = window_means(traj.reward, w["start"], preset.window)
    notes = list(getattr(traj, "notes", []))
    n_undef = int(np.isnan(w["P"]).sum())
    if n_undef:
        notes.append(
            f"{n_undef} window(s) have P undefined (NaN): H(S) + H(A) + H(S') = 0, "
            "the symbolised signal is constant there"
        )
    if null_draws:
        null = surrogate_null(s, n, a, preset.window, preset.stride, null_draws, seed, w)
        for key in ("P_null_mean", "P_null_std", "P_null_z"):
            table[key] = null[key]
    saturated = np.asarray(w["unique_frac"]) >= SATURATED
    if saturated.any():
        note = (
            f"{int(saturated.sum())} of {len(table)} windows are saturated (unique_frac >= "
            f"{SATURATED:g}: nearly every (S, A, S') occurs once in its window), so the plug-in "
            "entropies sit at their ceiling and P there measures the estimator, not coupling "
            "(i.i.d. noise gives P near 0.5); "
        )
        if null_draws:
            p_sat = float(np.nanmean(w["P"][saturated]))
            null_sat = float(np.nanmean(table["P_null_mean"].to_numpy()[saturated]))
            note += (f"there the shuffled null's mean P is {null_sat:.4f} against the measured "
                     f"{p_sat:.4f} (see null and the P_null_z column)")
        else:
            note += ("rerun with --null N to compare P with a shuffled surrogate, or use fewer "
                     "--bins or a longer --window")
        notes.append(note)
    summary = summary_document(
        summarize(w),
        notes=notes,
        config={
            "preset": preset.to_dict(),
            "correction": correction,
            "symbolizer": sym_config,
            "std_ddof": 1,
        },
        source=source,
        rows=traj.rows,
        transitions=traj.n,
        windows=len(table),
        passive=a is None,
        also=summarize(
            w, ("MI", "H_S", "H_A", "H_S_next", "H_A_given_S", "MI_A_S_next_given_S",
                "unique_frac")
        ),
        undefined_P_windows=n_undef,
        saturated_windows=int(saturated.sum()),
    )
    if a is not None:
        summary["agency"] = {
            "choice_H_A_given_S": float(np.nanmean(w["H_A_given_S"])),
            "effect_MI_A_S_next_given_S": float(np.nanmean(w["MI_A_S_next_given_S"])),
            "asymmetry_mean_abs_dH": float(np.nanmean(np.abs(w["dH"]))),
        }
    if null_draws:
        summary["null"] = {
            "draws": null_draws,
            "seed": seed,
            "P_null_mean": _stats(table["P_null_mean"].to_numpy()),
            "P_null_z": _stats(table["P_null_z"].to_numpy()),
        }
    detection = None
    if onset is not None or n_baseline is not None:
        metrics = list(IDT_METRICS) + (["reward"] if "reward" in table else [])
        try:
            monitor = None if detector == "paper" else build_monitor(
                metrics, baseline_windows=2, detector=detector,
                false_alarms=false_alarms or ANALYZE_BUDGET, k=k, persist=persist,
                ewma_lambda=ewma_lambda, drift=drift,
                rate=rate, stride=preset.stride, window=preset.window,
                what=f"{source or 'the trajectory'} (give --rate for loop time)")
            detection = detect(
                table, window=preset.window, onset=onset, n_baseline=n_baseline, k=k,
                metrics=metrics, monitor=monitor,
            )
        except ValueError as exc:
            raise InputError(f"{source or 'trajectory'}: {exc}") from None
        for m, f in detection.flags.items():
            table[f"excursion_{m}"] = f
        summary["detection"] = detection.summary()
    return AnalysisResult(table, summary, detection)


#: The per-turn detectors of :func:`analyze_dialogue`: raw, then less their length null.
DIALOGUE_DETECTORS = ("P", "H_b", "dH", "P_adj", "H_b_adj", "dH_adj")


def analyze_dialogue(path: str | Path, baseline_turns: int | None = None,
                     source: str | None = None) -> AnalysisResult:
    """The per-turn metrics of a dialogue recording, their length confound, its injections.

    Every turn of the recording's ``turns.jsonl`` goes through
    :class:`idt_desk.metrics.tokens.DialogueMetrics` with the recording's tokenizer (the session's
    own computation, so the raw metrics equal the recorded ones), which also gives the token
    counts and the length-adjusted metrics. The summary has the metrics over the baseline
    turns (the recording's ``baseline_windows``, else 30), ``length_confound``
    (:func:`idt_desk.metrics.tokens.length_confound`) and, for every turn whose S' was injected, the
    signed z of each of :data:`DIALOGUE_DETECTORS` at that turn and the two after it and the
    3σ verdict (:func:`idt_desk.detection.turns.detect_injection`).
    """
    from idt_desk.detection.turns import BASELINE_TURNS, detect_injection, response_z
    from idt_desk.metrics.tokens import (
        CONFOUND_METRICS,
        TOKENIZER,
        DialogueMetrics,
        length_confound,
        load_tokenizer,
    )
    from idt_desk.recordings import load_recording

    rec = load_recording(path)
    turns = [t for t in rec.turns if not t.get("history")]
    if not turns:
        raise InputError(f"{path}: a recording without turns (not a dialogue)")
    session = rec.config.get("session") or {}
    b = int(baseline_turns or session.get("baseline_windows") or BASELINE_TURNS)
    tok_name = (rec.config.get("tokenizer") or {}).get("name") or session.get("tokenizer") \
        or TOKENIZER
    tok = load_tokenizer(tok_name)
    m = DialogueMetrics(tok, baseline_turns=b).push(rec.turns)
    table = pd.DataFrame({"turn": [int(t["turn"]) for t in turns],
                          "start": [int(t["turn"]) for t in turns],
                          "injected": [(t.get("injected") or {}).get("type", "") for t in turns],
                          **m})
    injections = []
    for j, t in enumerate(turns):
        kind = (t.get("injected") or {}).get("type")
        if not kind:
            continue
        row: dict[str, Any] = {"turn": int(t["turn"]), "type": kind}
        for d in DIALOGUE_DETECTORS:
            hit, lat = detect_injection(m[d], j + 1, baseline_turns=b)
            row[d] = {"detected": hit, "latency": lat,
                      "z": response_z(m[d], j + 1, baseline_turns=b)}
        injections.append(row)
    base = {c: v[:b] for c, v in m.items()}
    summary = summary_document(
        summarize(base, CONFOUND_METRICS),
        notes=[f"metrics: each over the baseline turns 1-{b}.",
               "length_confound: Pearson r of each metric with log(1 + token count) of S', A "
               f"and S over turns 1-{b}, Fisher 95% CI.",
               "*_adj: the metric less its mean over length-matched surrogates of S' (the "
               "baseline turns' prompts, joined and cut to S''s token count; same S and A).",
               f"injections: z in baseline sigma (ddof 1, turns 1-{b}) at the injected turn k "
               "and k+1, k+2; detected: beyond 3 sigma at one of them."],
        config={"baseline_turns": b, "tokenizer": tok.describe()},
        source=source or str(path),
        turns=len(turns),
        length_confound=length_confound([m], b),
        injections=injections,
    )
    return AnalysisResult(table, summary, extras={"x_label": "turn"})


def plot_metrics(
    table: pd.DataFrame, path: Path, title: str = "", detection: Detection | None = None,
    x_label: str = "window start (transition)",
) -> None:
    """Write a PNG of P, H_f, H_b and dH against the window's first transition (or turn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {"P": "P", "H_f": "H_f (bits)", "H_b": "H_b (bits)", "dH": "ΔH (bits)"}
    fig, axes = plt.subplots(4, 1, sharex=True, figsize=(9, 8), constrained_layout=True)
    x = table["start"].to_numpy()
    for ax, m in zip(axes, TABLE_METRICS, strict=True):
        ax.plot(x, table[m].to_numpy(), lw=0.8, color="tab:blue")
        ax.set_ylabel(labels[m])
        ax.grid(alpha=0.3)
        if detection is not None and m in detection.baseline.mean:
            lo, hi = detection.baseline.band(m)
            if math.isfinite(lo) and math.isfinite(hi):
                ax.axhspan(lo, hi, color="tab:green", alpha=0.12, lw=0)
            ex = detection.flags[m]
            ax.plot(x[ex], table[m].to_numpy()[ex], "o", ms=2.5, color="tab:red")
            if detection.onset_index is not None and detection.onset_index < len(x):
                ax.axvline(x[detection.onset_index], color="tab:red", lw=0.8, ls="--")
    axes[-1].set_xlabel(x_label)
    if title:
        axes[0].set_title(title)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _json_default(o: object) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return None if math.isnan(o) else float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def summary_document(
    metrics: Mapping[str, Mapping[str, float | None]],
    *,
    notes: Sequence[str],
    config: Mapping[str, Any],
    **fields: Any,
) -> dict[str, Any]:
    """The one layout of ``summary.json``, shared by ``idt-desk analyze`` and ``reproduce``.

    Parameters
    ----------
    metrics : mapping
        The table: metric name -> ``{"min", "mean", "max", "std"}`` (:func:`summarize`).
    notes : sequence of str
        One-line remarks for the reader (caveats, saturation, undefined windows).
    config : mapping
        Everything needed to redo the computation.
    **fields
        The command's own top-level fields (counts, detection, null, ...); a command may add
        more to the returned dict, never under the three reserved keys.

    Returns
    -------
    dict
        ``{"metrics": {...}, **fields, "notes": [...], "config": {...}}``: the metric table is
        always under ``metrics``, never at the top level.

    """
    clash = {"metrics", "notes", "config"} & set(fields)
    if clash:
        raise ValueError(f"summary fields {sorted(clash)} are reserved")
    return {"metrics": {k: dict(v) for k, v in metrics.items()}, **fields,
            "notes": list(notes), "config": dict(config)}


def write_summary(summary: Mapping[str, Any], path: Path) -> None:
    """Write a :func:`summary_document` as ``summary.json`` (NaN as null).

    Raises
    ------
    ValueError
        ``summary`` is not in the shared layout.

    """
    missing = [k for k in ("metrics", "notes", "config") if k not in summary]
    if missing:
        raise ValueError(f"not a summary document: missing {missing}")
    write_json(dict(summary), path)


def write_json(obj: Any, path: Path) -> None:
    """Write JSON with numpy scalars converted and NaN written as null."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and math.isnan(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [clean(x) for x in v]
        return v

    path.write_text(json.dumps(clean(obj), indent=2, default=_json_default) + "\n")


def format_table(summary: Mapping[str, Any], label: str = "this run") -> str:
    """The metrics summary laid out like the paper's Tables 1 and 2 (Markdown)."""
    lines = ["| Metric | Min | Mean | Max | STD |", "|---|---|---|---|---|"]
    names = {"P": "Bi-predictability P", "H_f": "Forward H(S'|S,A)",
             "H_b": "Backward H(S,A|S')", "dH": "Asymmetry ΔH"}
    for m, st in summary["metrics"].items():

        def f(v: float | None) -> str:
            return "—" if v is None else f"{v:.6g}"

        lines.append(
            f"| {names.get(m, m)} | {f(st['min'])} | {f(st['mean'])} | {f(st['max'])} "
            f"| {f(st['std'])} |"
        )
    return f"{label}\n" + "\n".join(lines)


def write_outputs(result: AnalysisResult, out: Path, title: str = "") -> list[Path]:
    """Write ``windows.csv``, ``summary.json`` and ``metrics.png`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "windows.csv", out / "summary.json", out / "metrics.png"]
    result.windows.to_csv(paths[0], index=False)
    write_summary(result.summary, paths[1])
    plot_metrics(result.windows, paths[2], title, result.detection,
                 **({"x_label": result.extras["x_label"]} if "x_label" in result.extras else {}))
    return paths


def preset_with_overrides(preset: Preset, **overrides: Any) -> Preset:
    """A copy of ``preset`` with the given non-None fields replaced."""
    return replace(preset, **{k: v for k, v in overrides.items() if v is not None})
