"""Judging one trial: the paper's rule, the live-calibrated detectors, the matched thresholds.

:func:`analyze_trial` takes one trial's recorded transitions through steps 2-3 of the protocol
(:mod:`idt_desk_sources.gym.reproduce.config`): symbols calibrated on the pre-onset
transitions, windows, the 3σ rule against the pre-onset baseline, Cohen's d; beside it each
row of :data:`LIVE_ROWS` (the monitor a live session calibrates on the trial's own pre-onset
windows) and the episode-return monitors (:data:`RETURN_MONITORS`), and the records of each
swept detector's statistic (:data:`SWEPT`), from which :func:`matched_false_alarm` compares
the detectors across trials at one false-alarm rate (``MATCHED_RATE``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from idt_desk_sources.gym.reproduce.config import COMPONENTS, CONTROL, DETECTORS

from idt_desk.plugin import DRIFT_KINDS


def analyze_trial(
    s: np.ndarray, a: np.ndarray, s_next: np.ndarray, reward: np.ndarray, onset: int,
    preset: Any, k: float = 3.0, *, live_false_alarms: str | None = None,
    rate: float | None = None, episode: np.ndarray | None = None,
    returns: Sequence[tuple[int, float]] = (), steps_per_episode: int | None = None,
    twins: Sequence[tuple[str, Any]] = (), state_names: Sequence[str] = (),
    drift: bool = False,
) -> dict[str, Any]:
    """The paper's detection on one trial's transitions (the protocol's steps 2-3).

    Returns per detector ``detected_*``, ``latency_*`` and ``d_*`` (Cohen's d), the baseline
    means and σ of P and ΔH, post-onset means of P and ΔH, the window count and the fraction
    of post-onset transitions outside the calibrated range. With ``live_false_alarms`` (and
    the loop's ``rate`` for a budget in time), also ``live_<row>_<IDT|reward>``: the
    first post-onset window (latency, NaN: none) each row of :data:`LIVE_ROWS` alarms at,
    calibrated as a live session would on the trial's own pre-onset windows (the phased
    rows need each row's ``episode``), and each episode-return monitor's
    (:data:`RETURN_MONITORS`; ``returns``: (end step, return) of every finished episode).
    With ``twins`` ((suffix, twin) pairs, the exact twin's suffix "" first) and a budget,
    the twin's alarm, its union with the IDT's and the class of each detection
    (:mod:`~idt_desk_sources.gym.reproduce.twin`; ``state_names`` name the evidence).
    With ``drift`` and a budget, the generic drift detectors' columns (:func:`_drift`).
    """
    from idt_desk.plugin import IDT_METRICS, Symbolizer, detect, sliding_metrics, window_means

    view = ""
    if preset.auto_view:  # the view the wrappers' default would choose on these rows
        sym_s, sym_a, view = _auto_view(s, a, s_next, preset)
    else:
        sym_s = Symbolizer(s.shape[1], preset.bins, preset.state_groups)
        sym_a = Symbolizer(a.shape[1], preset.bins, preset.action_groups)
    sym_s.fit(s[:onset])
    sym_a.fit(a[:onset])
    both, out_sn = sym_s.symbolize(np.concatenate([s, s_next]))
    n = len(s)
    a_sym, out_a = sym_a.symbolize(a)
    outside = out_sn[:n] | out_sn[n:] | out_a
    w = sliding_metrics(both[:n], both[n:], a_sym, preset.window, preset.stride)
    w = dict(w)
    w["reward"] = window_means(reward, w["start"], preset.window)
    metrics = (*IDT_METRICS, "reward")
    det = detect(w, window=preset.window, onset=onset, k=k, metrics=metrics)
    j0 = det.onset_index
    row: dict[str, Any] = {"windows": len(w["start"]), "baseline_windows": j0}
    if view:
        row["view"] = view
    for m in DETECTORS:
        lat = det.latency[m]
        row[f"detected_{m}"] = not math.isnan(lat)
        row[f"latency_{m}"] = lat
        # How much of the post-onset time is in excursion: graded, unlike the first crossing.
        row[f"excursion_frac_{m}"] = float(np.mean(det.flags[m][j0:]))
    for m in metrics:
        x = np.asarray(w[m], dtype=np.float64)
        post = x[j0:]
        post = post[np.isfinite(post)]
        mu, sd = det.baseline.mean[m], det.baseline.std[m]
        row[f"d_{m}"] = (float(post.mean()) - mu) / sd if post.size and sd > 0 else math.nan
    for m in ("P", "dH"):
        row[f"baseline_{m}"] = det.baseline.mean[m]
        row[f"baseline_{m}_std"] = det.baseline.std[m]
        x = np.asarray(w[m], dtype=np.float64)[j0:]
        row[f"post_{m}"] = float(np.nanmean(x)) if np.isfinite(x).any() else math.nan
    row["out_of_range_post"] = float(outside[onset:].mean()) if n > onset else math.nan
    row.update(_records(w, det, metrics))
    if live_false_alarms is not None:
        if episode is not None:
            from idt_desk.plugin import episode_steps, window_phase

            steps, _ = episode_steps(episode)
            w["phase"] = window_phase(steps[w["start"] + preset.window - 1], preset.stride)
        row.update(_live(w, j0, preset, live_false_alarms, rate))
        if twins:
            from idt_desk_sources.gym.reproduce.twin import judge_twin

            row.update(judge_twin(w, s, a, s_next, onset, j0, preset, twins, state_names,
                                  live_false_alarms, rate, {"": row["live_mewma_IDT"]}))
        if returns and steps_per_episode:
            row.update(_return_monitors(returns, onset, preset.stride, live_false_alarms,
                                        rate, steps_per_episode))
        if drift:
            row.update(_drift(w, s, a, s_next, j0, preset, live_false_alarms, rate))
    return row


#: The calibrated detectors judged as a live session would (the live-calibrated block).
LIVE_DETECTORS = ("persistence", "ewma", "mewma")
#: The live block's rows: (name, detector, phased). Each detector against the pooled
#: baseline, and (``NAME_phase``) against the baseline at the window's phase of the episode
#: (``idt_desk.detection.phase``: the RL source's default now).
#: Two more λ of the MEWMA against the phase (0.05 is every EWMA's default): a larger λ
#: forgets faster, so the baseline's finite size costs it less (a shorter baseline suffices).
LIVE_ROWS = (*((k, k, False, 0.05) for k in LIVE_DETECTORS),
             *((f"{k}_phase", k, True, 0.05) for k in LIVE_DETECTORS),
             ("mewma_l10_phase", "mewma", True, 0.1), ("mewma_l20_phase", "mewma", True, 0.2))
#: The episode-return monitors a practitioner would watch, calibrated to the same budget on
#: the trial's pre-onset episodes: (detector, λ or the CUSUM's reference d). The EWMA's λ 0.2
#: and the CUSUM's d 0.5σ are SPC's usual choices for shifts of about 1σ (Lucas & Saccucci
#: 1990; Montgomery, *Introduction to Statistical Quality Control*, ch. 9).
RETURN_MONITORS = {"return_ewma": ("ewma", 0.2), "return_cusum": ("cusum", 0.5)}


def _auto_view(s: np.ndarray, a: np.ndarray, s_next: np.ndarray, preset: Any
               ) -> tuple[Any, Any, str]:
    """An ``auto`` preset's view, chosen as a live session's: on its first 20 windows.

    The chosen view's symbolisers come back unfitted (the protocol fits them on every
    pre-onset row), with the view's name.
    """
    from idt_desk.plugin import choose_view, view_ladder, view_symbolizers

    need = min(preset.window + 19 * preset.stride, len(s))
    names_s = [f"s{j}" for j in range(s.shape[1])]
    names_a = [f"a{j}" for j in range(a.shape[1])]

    def make(v: Any) -> tuple[Any, Any]:
        sym_s, sym_a = view_symbolizers(v, names_s, names_a)
        return sym_s.fit(s[:need]), sym_a.fit(a[:need])

    views = view_ladder(preset.bins)
    best, _ = choose_view(s[:need], a[:need], s_next[:need], preset.window, preset.stride,
                          make, views)
    return (*view_symbolizers(views[best], names_s, names_a), views[best].name)


def _live(w: dict[str, Any], j0: int, preset: Any, budget: str, rate: float | None
          ) -> dict[str, float]:
    """Latency of each live detector's first post-onset alarm, IDT and reward (NaN: none).

    The monitor a live session builds (:func:`idt_desk.pipeline.build_monitor`), its
    baseline the trial's ``j0`` pre-onset windows, calibrated to ``budget``; then the
    post-onset windows are flagged in one batch (flags do not depend on batching). A phased
    row needs ``w["phase"]`` (skipped without it). Also ``live_<row>_needed``: the baseline
    windows the IDT's calibration asked for (0: it called the baseline long enough).
    """
    from idt_desk.plugin import IDT_METRICS, build_monitor

    metrics = (*IDT_METRICS, "reward")
    out = {}
    for name, kind, phased, lam in LIVE_ROWS:
        if phased and "phase" not in w:
            continue
        mon = build_monitor(metrics, baseline_windows=j0, detector=kind, false_alarms=budget,
                            ewma_lambda=lam, rate=rate, stride=preset.stride,
                            window=preset.window, what="this trial", phased=phased)
        flags = mon.update({m: np.asarray(w[m], dtype=np.float64)
                            for m in (*metrics, "phase") if m in w})
        for g in ("IDT", "reward"):
            hits = np.flatnonzero(flags[g][j0:])
            out[f"live_{name}_{g}"] = float(hits[0]) if hits.size else math.nan
        cal = mon.calibrations.get("IDT")
        out[f"live_{name}_needed"] = float((cal.needed_windows or 0) if cal else math.nan)
    return out


def _return_monitors(returns: Sequence[tuple[int, float]], onset: int, stride: int,
                     budget: str, rate: float | None, steps_per_episode: int
                     ) -> dict[str, float]:
    """Each episode-return monitor's first post-onset alarm, in windows after the onset.

    Baseline: the returns of the episodes that end at or before the onset; each later
    episode is judged when it ends (at step e), which is ``(e − onset) / stride − 1`` windows
    after the onset on the windows' clock (the first window holding a perturbed step is 0).
    The budget converts to episodes through the loop's rate (or counts them).
    """
    from idt_desk.plugin import DetectorSpec, calibrate, detector_statistic, parse_budget

    ends = np.array([e for e, _ in returns], dtype=np.int64)
    values = np.array([r for _, r in returns], dtype=np.float64)
    pre, post = values[ends <= onset], values[ends > onset]
    b = parse_budget(budget)
    # The budget's units in one episode: seconds of loop time, episodes, windows.
    per_episode = {"s": steps_per_episode / rate if rate else None, "episodes": 1.0,
                   "windows": steps_per_episode / stride}.get(b.unit)
    out = {}
    for name, (kind, param) in RETURN_MONITORS.items():
        out[f"live_{name}_reward"] = math.nan
        if per_episode is None or pre.size < 3:
            continue
        spec = DetectorSpec(kind, **({"lam": param} if kind == "ewma" else {"drift": param}))
        cal = calibrate(spec, {"return": pre}, b.per / b.alarms / per_episode)
        stat, _ = detector_statistic(spec, cal.standardise("return", post))
        hits = np.flatnonzero(stat > cal.threshold["return"])
        if hits.size:
            out[f"live_{name}_reward"] = float(
                (ends[ends > onset][hits[0]] - onset) / stride - 1)
        out[f"live_{name}_needed"] = float(cal.needed_windows or 0)
    return out


#: The generic drift detectors judged beside the IDT (``idt_desk.detection.drift``: the
#: online MMD and LSDD of alibi-detect), as ``live_<name>_drift`` and ``records_<name>_drift``.
DRIFT_ROWS = DRIFT_KINDS


def _drift(w: dict[str, Any], s: np.ndarray, a: np.ndarray, s_next: np.ndarray, j0: int,
           preset: Any, budget: str, rate: float | None) -> dict[str, Any]:
    """The generic drift detectors on the trial's transitions, calibrated to the same budget.

    One instance a window, on the windows' clock: the (S, A, S') of each window's last
    step, standardised on the pre-onset windows' instances (the reference: all of them
    before the onset), the detectors' expected run time the budget's windows per false alarm
    (the budget the live block's monitors are calibrated to). ``live_<name>_drift``: the
    first post-onset window it alarms at (NaN: none); ``records_<name>_drift``: the
    records of statistic / threshold after the onset (the matched comparison's, see
    :func:`_records`); ``drift_<name>_skipped``: why a detector did not run ("" if it did).
    """
    from idt_desk.plugin import IDT_METRICS, build_monitor, drift_alarms, records

    ends = np.asarray(w["start"]) + preset.window - 1
    x = np.column_stack([s[ends], a[ends], s_next[ends]])  # the rows used, not the whole trial
    mon = build_monitor(IDT_METRICS, baseline_windows=max(j0, 2), detector="mewma",
                        false_alarms=budget, rate=rate, stride=preset.stride,
                        window=preset.window, what="this trial")
    out: dict[str, Any] = {}
    for name, run in drift_alarms(x, j0, mon.budget_windows(), kinds=DRIFT_ROWS).items():
        out[f"live_{name}_drift"] = run.latency
        out[f"records_{name}_drift"] = json.dumps(records(run.ratio))
        out[f"drift_{name}_skipped"] = run.skipped
    return out


def ran_on(rows: Any, name: str) -> Any:
    """The trials drift detector ``name`` ran on (``drift_<name>_skipped`` empty)."""
    why = rows.get(f"drift_{name}_skipped")
    return rows if why is None else rows[why.fillna("").astype(str) == ""]


#: Detectors whose threshold is swept for the ROC and the matched false-alarm table: the
#: paper's rule (a window beyond θ σ), persistence (5 windows in a row beyond θ σ), the EWMA
#: of z (λ 0.05: |E| beyond θ) and the MEWMA (λ 0.05) of the components whitened by the
#: trial's own baseline windows (its IDT statistic is T², the components' their EWMA).
SWEPT = {"paper": ("paper", 1), "persistence": ("persistence", 5), "ewma": ("ewma", 1),
         "mewma": ("mewma", 1)}
#: Each swept detector in words (tables, figures).
SWEPT_LABEL = {"paper": "paper rule: a window beyond θσ",
               "persistence": "persistence: 5 windows in a row beyond θσ",
               "ewma": "EWMA (λ 0.05) of z: |E| beyond θ",
               "mewma": "MEWMA (λ 0.05), whitened: T² beyond θ (components: their EWMA)"}


def swept(rows: Any) -> list[str]:
    """The swept detectors whose records ``rows`` hold (older runs lack the newer ones)."""
    return [n for n in SWEPT if f"records_{n}_IDT" in rows]


def _records(w: dict[str, Any], det: Any, metrics: Sequence[str]) -> dict[str, str]:
    """Per swept detector and metric, the post-onset records of its statistic (JSON).

    The statistic (|z| for the paper rule, the smallest |z| of the last 5 windows for
    persistence; z against the trial's baseline; the IDT union is the largest of its four
    components') is kept as its running-maximum records ``[[window, value], ...]`` after the
    onset: the trial is detected at threshold θ iff its last record exceeds θ, and the latency
    is the first record above θ. So any threshold can be applied across trials afterwards.
    """
    from idt_desk.plugin import (
        DetectorSpec,
        detector_statistic,
        joint_statistic,
        records,
        standardise,
        whitening,
    )

    j0 = det.onset_index
    zs = {m: standardise(w[m], det.baseline.mean[m], det.baseline.std[m]) for m in metrics}
    out = {}
    for name, (kind, m) in SWEPT.items():
        spec = DetectorSpec(kind, m=m)
        stats = {metric: detector_statistic(spec, zs[metric])[0][j0:] for metric in metrics}
        if spec.detector.joint:  # one statistic for the group (MEWMA's T²)
            z = np.column_stack([zs[c] for c in COMPONENTS])
            stats["IDT"] = joint_statistic(spec.lam, z @ whitening(z[:j0]))[0][j0:]
        else:
            stats["IDT"] = np.max([stats[c] for c in COMPONENTS], axis=0)
        for metric, s in stats.items():
            out[f"records_{name}_{metric}"] = json.dumps(records(s))
    return out


def scores(rows: Any, name: str, metric: str) -> tuple[np.ndarray, list[list[list[float]]]]:
    """Each trial's largest post-onset statistic and its records (see :func:`_records`)."""
    recs = [json.loads(r) for r in rows[f"records_{name}_{metric}"]]
    return np.array([r[-1][1] if r else -np.inf for r in recs]), recs


def matched_false_alarm(open_loop: Any) -> dict[str, Any] | None:
    """Detection and latency of every swept detector at ≤ 5 % false alarms on the controls.

    The threshold θ is the lowest that leaves at most ⌊0.05 n⌋ of the n control trials above
    it (their largest post-onset statistic); a perturbed trial is detected when its statistic
    exceeds θ after the onset, with latency the first window it does.
    """
    from idt_desk.plugin import MATCHED_RATE

    if "records_paper_IDT" not in open_loop:
        return None
    control = open_loop[open_loop["perturbation"] == CONTROL]
    perturbed = open_loop[open_loop["perturbation"] != CONTROL]
    if not len(control) or not len(perturbed):
        return None
    allowed = math.floor(MATCHED_RATE * len(control) + 1e-9)
    out: dict[str, Any] = {"target_rate": MATCHED_RATE, "control_trials": len(control),
                           "allowed_false_alarms": allowed}
    for name in swept(open_loop):
        out[name] = {m: at_matched_threshold(name, m, control, control, perturbed)
                     for m in DETECTORS}
    # The generic drift detectors at the same rate (their statistic / own threshold), over
    # the trials each ran on (a reference too short for its window skips it, and says so).
    drift = {}
    for name in DRIFT_ROWS:
        if f"records_{name}_drift" not in open_loop:
            continue
        c, p = ran_on(control, name), ran_on(perturbed, name)
        if len(c) and len(p):
            drift[name] = at_matched_threshold(name, "drift", c, c, p)
    if drift:
        out["drift"] = drift
    return out


def at_matched_threshold(name: str, metric: str, fit: Any, control: Any, perturbed: Any
                         ) -> dict[str, Any]:
    """θ matched to ≤ 5 % false alarms on the ``fit`` controls; what it does on the others.

    In sample ``fit`` is ``control``; out of sample they are another batch's
    (:func:`idt_desk.detection.matched.matched_comparison`, less its count of allowed false
    alarms: the table gives that once).
    """
    from idt_desk.plugin import matched_comparison

    got = matched_comparison(scores(control, name, metric)[1], scores(perturbed, name, metric)[1],
                             fit=scores(fit, name, metric)[1])
    del got["allowed_false_alarms"]
    return got
