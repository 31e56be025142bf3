"""Reproduce the paper's RL results (§5.1, §10; Tables 3 and 4) and measure closing the loop.

``idt-desk reproduce cheetah`` evaluates frozen policies in HalfCheetah with each of the
paper's eight perturbations (Table 9) switched on at the start of episode ``onset``, and asks
whether the IDT (P, H_f, H_b, ΔH, and their union) and the reward see it, and how soon.

One trial (a policy, a perturbation, optionally an Auto modulation)
----------------------------------------------------------------
1. The live source (:class:`~idt_desk_sources.gym.GymSource`) runs ``episodes`` episodes of ``L``
   steps (the env's time limit: 1000 for HalfCheetah) through a
   :class:`~idt_desk.live.session.Session`, seeded with ``seed``: every perturbed trial of a policy
   shares its pre-onset steps exactly (same environment, same policy noise). The policy acts
   deterministically (its mean, ``model.predict(obs, deterministic=True)``, as every
   evaluation loop of the authors' released code does) or, with ``actions`` stochastic,
   samples from its own distribution (the paper's wording: "stochastic policies ensure
   choice"); ``actions`` may name both, and each trial is then run under each. The
   perturbation is switched on at transition ``T0 = (onset − 1) · L``, the first step of
   episode ``onset``, and stays on. Trials of one policy, protocol and loop setting step in
   lockstep, one batched forward pass per step.
2. The paper's pipeline on the recorded (S, A, S'): each variable z-scored and cut into 3
   equal-width bins, both calibrated on the **pre-onset transitions only** (the data a
   deployed monitor has; calibrating on the whole run would let the perturbed data shape the
   bins), the body-part groups of the ``cheetah`` preset, windows of 300 steps every 50.
3. Baseline: mean and σ (ddof 1) of each metric over the windows wholly before ``T0``; a
   window is an excursion when it is more than 3σ from the mean; detection is any excursion
   at or after the first window that holds a perturbed step, latency the number of windows
   from that window to the first excursion (0: at once; NaN: never). The reward detector is
   the mean reward per window, judged the same way. ``IDT`` is the union of the four.
   Cohen's d of each metric: (mean over post-onset windows − baseline mean) / baseline σ.
4. ``none`` is a control trial: no perturbation. Its "detections" are false alarms of the
   rule above, the rate against which every detection rate must be read. ``control_seeds``
   controls run per policy (and protocol, and loop setting): the first with ``seed``, so it
   shares the perturbed trials' pre-onset steps, the others with ``seed + 1``,
   ``seed + 2``, ... (other initial states, so other runs); false alarms are counted over
   all of them ("4 of 30").

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

Closing the loop (``--auto``)
-----------------------------
Each named modulation adds, per policy and perturbation, the same trial with the session's
Auto controller on: the symbols calibrated on the first third of the pre-onset steps, the
monitor's baseline on the second third, and from then on a persistent IDT alarm engages the
modulation and its absence releases it (``persist`` / ``release`` windows). Engagements in the
last pre-onset third are false engagements. The report compares, against the open-loop trial:
mean episode return after the onset, mean P over post-onset windows, engagements, latency of
the first engagement after the onset (windows, counted as detection latency is) and the
fraction of post-onset steps modulated.

One file: the reproduction reads top to bottom as the paper's protocol (trials, the
detectors' calibration on controls, the matched false-alarm tables, the report), and its
tasks must be importable by name from one module by the executor's worker processes.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from idt_desk_sources.gym._source import ACTIONS

from idt_desk.plugin import (
    CONTROL_BUDGET,
    DEFAULT_BUDGET,
    InputError,
    add_settings,
    check_float,
    check_int,
    check_limit,
    check_out_dir,
)

__all__ = [
    "HELP",
    "PAPER",
    "CheetahConfig",
    "Trial",
    "TrialGroup",
    "add_arguments",
    "analyze_trial",
    "format_tables",
    "make_groups",
    "out_of_sample",
    "plot_summary",
    "reproduce",
    "run",
    "run_group",
    "summarize_trials",
]

#: ``idt-desk reproduce cheetah``'s one-line help.
HELP = "the paper's RL results: Table 3 baseline, detection coverage, Table 4 latency"

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

#: Detectors, in the order of the paper's Table 4.
DETECTORS = ("IDT", "P", "dH", "H_f", "H_b", "reward")
_COMPONENTS = ("P", "H_f", "H_b", "dH")
#: The control trial: no perturbation.
CONTROL = "none"
_LABEL = {"IDT": "IDT", "P": "P", "dH": "ΔH", "H_f": "H_f", "H_b": "H_b", "reward": "Rewards"}


def _perturbation_names() -> tuple[str, ...]:
    from idt_desk_sources.gym._source import GymSource

    return tuple(p.name for p in GymSource.perturbations)


def _shipped_policies() -> tuple[str, ...]:
    from idt_desk_sources.gym._source import POLICY_DIR

    return tuple(str(p) for p in sorted(POLICY_DIR.glob("halfcheetah-v5-*.zip")))


# ---------------------------------------------------------------------------------------------
# Configuration and tasks
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheetahConfig:
    """What to reproduce (the command line's options; see the module docstring)."""

    policies: tuple[str, ...] = ()
    perturbations: tuple[str, ...] = ()
    control_seeds: int = 5
    actions: tuple[str, ...] = ("deterministic",)
    episodes: int = 50
    onset: int = 15
    env_id: str = "HalfCheetah-v5"
    seed: int = 0
    auto: tuple[str, ...] = ()
    #: Modulations switched on by hand at the onset (``NAME[:k=v,...]``), beside Auto.
    manual: tuple[str, ...] = ()
    #: The Auto controller's alarm: a calibrated detector and its budget, or ``paper``.
    auto_detector: str = "persistence"
    auto_false_alarms: str = DEFAULT_BUDGET
    #: The budget of the live-calibrated block: each trial judged by the detectors a live
    #: session calibrates on the trial's own pre-onset windows to this budget (the gym
    #: source's default).
    false_alarms: str = CONTROL_BUDGET
    max_baseline_cv: float = 0.25
    k: float = 3.0
    workers: int | None = None
    scheduler: str | None = None
    out: Path | None = None

    def resolved(self) -> CheetahConfig:
        """Defaults filled in (every shipped policy, every perturbation) and checked.

        Raises
        ------
        InputError
            An unknown perturbation or modulation, a missing policy file, bad counts.

        """
        from dataclasses import replace

        from idt_desk_sources.gym._source import _CHEETAH_GROUPS, GymSource

        from idt_desk.plugin import DETECTOR_KINDS, parse_auto, parse_budget, parse_switch

        known = _perturbation_names()
        perts = self.perturbations or known
        for p in perts:  # NAME or NAME:k=v (a stronger noise: obs_noise_3:percent=20)
            if p != CONTROL:
                parse_switch(p, GymSource, "perturb", "--perturbations")
        for spec in self.manual:
            parse_switch(spec, GymSource, "modulate", "--manual")
        if self.auto_detector not in DETECTOR_KINDS:
            raise InputError(f"--auto-detector {self.auto_detector}: choose from "
                             f"{', '.join(DETECTOR_KINDS)}")
        try:
            parse_budget(self.auto_false_alarms)
        except ValueError as exc:
            raise InputError(f"--auto-false-alarms: {exc}") from None
        try:
            parse_budget(self.false_alarms)
        except ValueError as exc:
            raise InputError(f"--false-alarms: {exc}") from None
        check_int("--control-seeds", self.control_seeds, 0, 10_000)
        # 'none' named among the perturbations asks for a control: at least one.
        controls = max(self.control_seeds, 1) if CONTROL in perts else self.control_seeds
        perts = tuple(p for p in perts if p != CONTROL)
        actions = tuple(dict.fromkeys(self.actions))
        bad = [a for a in actions if a not in ACTIONS]
        if bad or not actions:
            raise InputError(f"--actions: {', '.join(bad) or 'none given'}; choose from "
                             f"{', '.join(ACTIONS)} (comma-separated for several)")
        policies = self.policies or _shipped_policies()
        if not policies:
            raise InputError("no policies: pass --policies PATH,... (train one with "
                             "`idt-desk train`)")
        missing = [p for p in policies if not Path(p).expanduser().is_file()]
        if missing:
            raise InputError(f"--policies: no such file: {', '.join(missing)}")
        check_int("--episodes", self.episodes, 2, 10_000)
        check_int("--onset", self.onset, 2, self.episodes)
        check_limit("seed", self.seed)
        check_int("--workers", self.workers, 1)
        check_float("--max-baseline-cv", self.max_baseline_cv, 0.0)
        check_limit("k", self.k)
        for spec in self.auto:
            auto = parse_auto(spec, GymSource)
            if auto["modulation"] != "dim_reduction":
                continue
            drop = [g.strip() for g in str(auto["params"]["drop"]).split(",") if g.strip()]
            unknown = [g for g in drop if g not in _CHEETAH_GROUPS]
            if unknown and self.env_id.startswith("HalfCheetah"):
                raise InputError(f"--auto {spec}: unknown group(s) {unknown}; known: "
                                 f"{', '.join(_CHEETAH_GROUPS)}")
            if not drop:
                raise InputError(f"--auto {spec}: name the observation groups to freeze, e.g. "
                                 "dim_reduction:drop=front_leg (groups: torso, back_leg, "
                                 "front_leg)")
        check_out_dir(self.out, "--out")
        return replace(self, policies=tuple(str(Path(p).expanduser()) for p in policies),
                       perturbations=tuple(dict.fromkeys(perts)), control_seeds=controls,
                       actions=actions)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, with the fixed protocol settings."""
        d = asdict(self)
        d["out"] = None if self.out is None else str(self.out)
        d.update(window=300, stride=50, bins=3, preset="cheetah",
                 symbol_calibration="pre-onset transitions of each trial",
                 baseline="windows wholly before the onset", std_ddof=1)
        return d


@dataclass(frozen=True)
class Trial:
    """One trial: the perturbation switched on at the onset, and the Auto spec ('' for none).

    ``seed`` is the environment and noise seed; None: the group's.
    """

    perturbation: str
    auto: str = ""
    seed: int | None = None


@dataclass(frozen=True)
class TrialGroup:
    """The trials of one policy, stepped together (the unit of work sent to an executor)."""

    policy: str
    trials: tuple[Trial, ...]
    env_id: str
    episodes: int
    onset: int
    seed: int
    k: float
    deterministic: bool = True
    auto_detector: str = "persistence"
    auto_false_alarms: str = DEFAULT_BUDGET
    false_alarms: str = CONTROL_BUDGET


def control_seed(seed: int, j: int) -> int:
    """The environment seed of control ``j`` ≥ 1 of a run seeded ``seed``.

    Spawned from (seed, j) by NumPy's ``SeedSequence`` (63 bits), so the controls of two runs
    never share a seed, whatever their seeds (``seed + j`` made ``--seed 300`` and ``--seed
    301`` share 9 of 10 controls). Control 0 has the run's own seed, the perturbed trials'.
    """
    state = np.random.SeedSequence([int(seed), int(j)]).generate_state(1, np.uint64)[0]
    return int(state >> np.uint64(1))


def make_groups(config: CheetahConfig) -> list[TrialGroup]:
    """One group per policy, protocol and Auto setting (open loop first).

    A group holds the ``control_seeds`` control trials (the first with the group's seed, the
    others with :func:`control_seed`) and then each perturbation. A group's trials step together;
    groups are the tasks the executor spreads over cores (and the progress bar counts), so
    they are kept to one protocol and loop setting each.
    """
    def trials(auto: str) -> tuple[Trial, ...]:
        controls = tuple(Trial(CONTROL, auto, None if j == 0 else control_seed(config.seed, j))
                         for j in range(config.control_seeds))
        return controls + tuple(Trial(name, auto) for name in config.perturbations)

    return [TrialGroup(p, trials(a), config.env_id, config.episodes, config.onset,
                       config.seed, config.k, deterministic=actions == "deterministic",
                       auto_detector=config.auto_detector,
                       auto_false_alarms=config.auto_false_alarms,
                       false_alarms=config.false_alarms)
            for actions in config.actions for p in config.policies
            for a in ("", *config.auto, *(HAND + m for m in config.manual))]


# ---------------------------------------------------------------------------------------------
# One group of trials
# ---------------------------------------------------------------------------------------------


def _card(policy: str) -> dict[str, Any]:
    try:
        return json.loads(Path(policy).with_suffix(".json").read_text())
    except (OSError, ValueError):
        return {}


def analyze_trial(
    s: np.ndarray, a: np.ndarray, s_next: np.ndarray, reward: np.ndarray, onset: int,
    preset: Any, k: float = 3.0, *, live_false_alarms: str | None = None,
    rate: float | None = None, episode: np.ndarray | None = None,
    returns: Sequence[tuple[int, float]] = (), steps_per_episode: int | None = None,
) -> dict[str, Any]:
    """The paper's detection on one trial's transitions (module docstring, steps 2-3).

    Returns per detector ``detected_*``, ``latency_*`` and ``d_*`` (Cohen's d), the baseline
    means and σ of P and ΔH, post-onset means of P and ΔH, the window count and the fraction
    of post-onset transitions outside the calibrated range. With ``live_false_alarms`` (and
    the loop's ``rate`` for a budget in time), also ``live_<row>_<IDT|reward>``: the
    first post-onset window (latency, NaN: none) each row of :data:`LIVE_ROWS` alarms at,
    calibrated as a live session would on the trial's own pre-onset windows (the phased
    rows need each row's ``episode``), and each episode-return monitor's
    (:data:`RETURN_MONITORS`; ``returns``: (end step, return) of every finished episode).
    """
    from idt_desk.plugin import IDT_METRICS, Symbolizer, detect, sliding_metrics, window_means

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
        if returns and steps_per_episode:
            row.update(_return_monitors(returns, onset, preset.stride, live_false_alarms,
                                        rate, steps_per_episode))
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


def _swept(rows: Any) -> list[str]:
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
        if kind == "mewma":
            z = np.column_stack([zs[c] for c in _COMPONENTS])
            stats["IDT"] = joint_statistic(spec.lam, z @ whitening(z[:j0]))[0][j0:]
        else:
            stats["IDT"] = np.max([stats[c] for c in _COMPONENTS], axis=0)
        for metric, s in stats.items():
            out[f"records_{name}_{metric}"] = json.dumps(records(s))
    return out


def _scores(rows: Any, name: str, metric: str) -> tuple[np.ndarray, list[list[list[float]]]]:
    """Each trial's largest post-onset statistic and its records (see :func:`_records`)."""
    recs = [json.loads(r) for r in rows[f"records_{name}_{metric}"]]
    return np.array([r[-1][1] if r else -np.inf for r in recs]), recs


#: The per-trial false-alarm rate at which detectors are compared.
MATCHED_RATE = 0.05


def _matched(open_loop: Any) -> dict[str, Any] | None:
    """Detection and latency of every swept detector at ≤ 5 % false alarms on the controls.

    The threshold θ is the lowest that leaves at most ⌊0.05 n⌋ of the n control trials above
    it (their largest post-onset statistic); a perturbed trial is detected when its statistic
    exceeds θ after the onset, with latency the first window it does.
    """
    if "records_paper_IDT" not in open_loop:
        return None
    control = open_loop[open_loop["perturbation"] == CONTROL]
    perturbed = open_loop[open_loop["perturbation"] != CONTROL]
    if not len(control) or not len(perturbed):
        return None
    allowed = math.floor(MATCHED_RATE * len(control) + 1e-9)
    out: dict[str, Any] = {"target_rate": MATCHED_RATE, "control_trials": len(control),
                           "allowed_false_alarms": allowed}
    for name in _swept(open_loop):
        out[name] = {m: _at_matched(name, m, control, control, perturbed) for m in DETECTORS}
    return out


def _at_matched(name: str, metric: str, fit: Any, control: Any, perturbed: Any
                ) -> dict[str, Any]:
    """θ matched to ≤ 5 % false alarms on the ``fit`` controls; what it does on the others.

    In sample ``fit`` is ``control``; out of sample they are another batch's.
    """
    from idt_desk.plugin import first_above, matched_threshold

    theta, _ = matched_threshold(_scores(fit, name, metric)[0], MATCHED_RATE)
    c_scores, _ = _scores(control, name, metric)
    p_scores, p_recs = _scores(perturbed, name, metric)
    lat = [first_above(r, theta) for r, sc in zip(p_recs, p_scores, strict=True) if sc > theta]
    hits = int((p_scores > theta).sum())
    return {
        "threshold_sigma": theta,
        "false_alarms": {"alarms": int((c_scores > theta).sum()), "trials": len(c_scores)},
        "detection": {"detected": hits, "trials": len(p_scores),
                      "rate": hits / len(p_scores) if len(p_scores) else math.nan},
        "median_latency": float(np.median(lat)) if lat else None,
    }


def out_of_sample(batch_a: Any, batch_b: Any) -> dict[str, Any]:
    """Detectors and thresholds chosen on one batch of trials, judged on another.

    ``batch_a``, ``batch_b``: two runs' ``trials.csv`` tables (other seeds: other runs).
    Each way round, every swept detector's θ is matched to ≤ 5 % false alarms on the first
    batch's controls and applied unchanged to the second batch's controls (false alarms)
    and perturbed trials (detection, latency); the detector *chosen* is the one whose IDT
    detected most of the first batch's perturbed trials at its θ (fewer median windows to
    detection break a tie), for the IDT and, apart, for reward. Open-loop trials of the first
    protocol only.
    """
    def open_loop(rows: Any) -> tuple[Any, Any]:
        rows = rows[_blank(rows, "error") & _blank(rows, "auto")]
        rows = rows[rows["actions"] == rows["actions"].iloc[0]]
        return rows[rows["perturbation"] == CONTROL], rows[rows["perturbation"] != CONTROL]

    (ca, pa), (cb, pb) = open_loop(batch_a), open_loop(batch_b)
    names = [n for n in _swept(batch_a) if n in _swept(batch_b)]
    out: dict[str, Any] = {"target_rate": MATCHED_RATE}
    for label, (c1, p1, c2, p2) in (("a_to_b", (ca, pa, cb, pb)), ("b_to_a", (cb, pb, ca, pa))):
        block: dict[str, Any] = {"fit_controls": len(c1), "test_controls": len(c2),
                                 "test_perturbed": len(p2), "detectors": {}}
        for name in names:
            block["detectors"][name] = {m: _at_matched(name, m, c1, c2, p2)
                                        for m in ("IDT", "reward")}
        for m in ("IDT", "reward"):
            ranks = {}
            for name in names:
                inside = _at_matched(name, m, c1, c1, p1)
                lat = inside["median_latency"]
                ranks[name] = (inside["detection"]["detected"],
                               -(lat if lat is not None else 1e9))
            block[f"chosen_{m}"] = max(names, key=ranks.__getitem__) if names else None
        out[label] = block
    return out


def _seed(task: TrialGroup, trial: Trial) -> int:
    return task.seed if trial.seed is None else trial.seed


def _protocol(task: TrialGroup) -> str:
    return ACTIONS[0] if task.deterministic else ACTIONS[1]


#: The ``auto`` label of a trial whose modulation is switched on by hand at the onset.
HAND = "by hand: "


def _auto_config(spec: str) -> dict[str, Any] | None:
    from idt_desk_sources.gym._source import GymSource

    from idt_desk.plugin import parse_auto

    return parse_auto(spec, GymSource) if spec and not spec.startswith(HAND) else None


def run_group(task: TrialGroup, chunk: int = 1000) -> list[dict[str, Any]]:
    """Run a policy's trials together; one result row per trial (in ``task.trials`` order).

    A trial whose analysis fails, or every trial of a group whose stepping fails (they step
    together), is returned with its ``error`` set, not raised: the other groups' results
    stand, and ``summary.json`` lists the errors.
    """
    import torch
    from idt_desk_sources.gym._source import GymSource, step_together

    from idt_desk.plugin import PRESETS, Session, SessionConfig, parse_switch

    # One torch thread per worker process (one process per core): a small MLP gains nothing
    # from more, and with every core busy extra threads spin (measured: 10 ms per layer).
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    card = _card(task.policy)
    sources: list[GymSource] = []
    try:
        for _ in task.trials:
            src = GymSource(env_id=task.env_id, policy=task.policy,
                            deterministic=task.deterministic)
            if sources:  # one policy object: one batched forward pass serves them all
                src.policy = sources[0].policy
            sources.append(src)
    except Exception:
        for src in sources:
            src.close()
        raise
    first = sources[0]
    steps_per_episode = first.env.spec.max_episode_steps if first.env.spec else None
    if not steps_per_episode:
        for src in sources:
            src.close()
        raise InputError(f"{task.env_id}: needs a time limit (episodes of fixed length)")
    preset = PRESETS[first.presets[0]]
    rate = first.rate
    onset = (task.onset - 1) * steps_per_episode
    total = task.episodes * steps_per_episode
    # Auto's session: symbols on the first 20 windows (as live), its detector's baseline
    # on every later window wholly before the onset; a short run: a third of the pre-onset
    # steps each.
    before = (onset - preset.window) // preset.stride + 1
    calib, base = 20, before - 20
    if before < 40:
        third = onset // 3
        calib = max(1, (third - preset.window) // preset.stride + 1)
        base = max(2, third // preset.stride)
    sessions, logs, data = [], [], []
    for trial, src in zip(task.trials, sources, strict=True):
        cfg = SessionConfig(source="gym", settings=dict(src.config), preset=preset.name,
                            calibration_windows=calib, baseline_windows=base, k=task.k,
                            detector=task.auto_detector, false_alarms=task.auto_false_alarms,
                            speed=None, seed=_seed(task, trial), history=16,
                            auto=_auto_config(trial.auto))
        session = Session(cfg, source=src)
        session.limit = total
        if trial.perturbation != CONTROL:
            name, params = parse_switch(trial.perturbation, GymSource, "perturb")
            session.schedule(onset, "perturb", name=name, params=params)
        if trial.auto.startswith(HAND):
            name, params = parse_switch(trial.auto[len(HAND):], GymSource, "modulate")
            session.schedule(onset, "modulate", name=name, params=params)
        log: list[dict[str, Any]] = []
        session.add_event_listener(lambda ev, log=log: log.append(ev) if ev["kind"] in (
            "episode_end", "modulation_on", "modulation_off", "perturbation_on") else None)
        sessions.append(session)
        logs.append(log)
        data.append([])
    failure = ""
    try:
        for session in sessions:
            session.begin()
        while True:
            n = min(session.plan(chunk) for session in sessions)
            if n == 0:
                break
            for session, batch, parts in zip(sessions, step_together(sources, n, info=False),
                                             data, strict=True):
                session.advance(batch)
                parts.append((batch.s, batch.a, batch.s_next, batch.reward, batch.episode))
    except Exception as exc:  # the group's trials are reported failed; other groups go on
        failure = f"{type(exc).__name__}: {exc}"
    finally:
        for session in sessions:
            session.end()
    wall = time.perf_counter() - t_start
    rows = []
    for trial, log, parts in zip(task.trials, logs, data, strict=True):
        row: dict[str, Any] = {
            "policy": Path(task.policy).stem, "algorithm": card.get("algorithm", ""),
            "policy_seed": card.get("seed"), "perturbation": trial.perturbation,
            "auto": trial.auto, "actions": _protocol(task), "env_seed": _seed(task, trial),
            "onset_step": onset,
            "steps": sum(len(p[0]) for p in parts), "error": failure,
            "loop_seconds_per_step": 1.0 / rate if rate else math.nan,
        }
        if failure:
            rows.append(row)
            continue
        s, a, s2, r, ep = (np.concatenate([p[j] for p in parts]) for j in range(5))
        ends = [(ev["i"], ev["return"]) for ev in log if ev["kind"] == "episode_end"]
        try:
            row.update(analyze_trial(s, a, s2, r, onset, preset, task.k,
                                     live_false_alarms=task.false_alarms, rate=rate,
                                     episode=ep, returns=ends,
                                     steps_per_episode=steps_per_episode))
        except Exception as exc:  # reported per trial, the others stand
            row["error"] = f"{type(exc).__name__}: {exc}"
        returns = [(ev["episode"], ev["return"]) for ev in log if ev["kind"] == "episode_end"]
        pre = np.array([x for e, x in returns if e < task.onset - 1])
        post = np.array([x for e, x in returns if e >= task.onset - 1])
        row["return_pre"] = float(pre.mean()) if pre.size else math.nan
        row["return_pre_cv"] = (float(pre.std(ddof=1) / abs(pre.mean()))
                                if pre.size > 1 and pre.mean() != 0 else math.nan)
        row["return_post"] = float(post.mean()) if post.size else math.nan
        # Every episode's return (JSON lists), for intervals over episodes: a modulation's
        # recovered return, a perturbation's cost.
        row["returns_pre"], row["returns_post"] = (json.dumps([round(x, 6) for x in v])
                                                   for v in (pre.tolist(), post.tolist()))
        row.update(_engagements(log, onset, total, preset.window, preset.stride,
                                by_hand=trial.auto.startswith(HAND)))
        row["group_wall_seconds"] = wall
        rows.append(row)
    return rows


def _engagements(log: list[dict[str, Any]], onset: int, total: int, window: int,
                 stride: int, by_hand: bool = False) -> dict[str, Any]:
    """The Auto controller's switches: before and after the onset, latency, time engaged."""
    # Auto's switches, or (``by_hand``) the one made by hand at the onset.
    on = [ev["i"] for ev in log
          if ev["kind"] == "modulation_on" and bool(ev.get("auto")) != by_hand]
    off = [ev["i"] for ev in log
           if ev["kind"] == "modulation_off" and bool(ev.get("auto")) != by_hand]
    engaged = 0
    for start in on:
        stop = next((i for i in off if i > start), total)
        engaged += max(0, min(stop, total) - max(start, onset))
    after = [i for i in on if i >= onset]
    # A switch acts at the end of the window that made it; the window that first holds a
    # perturbed step ends ``stride`` after the onset (latency 0, as for detection).
    latency = (after[0] - onset) / stride - 1 if after else math.nan
    return {"engagements_pre": sum(i < onset for i in on), "engagements_post": len(after),
            "engage_latency": latency,
            "engaged_fraction_post": engaged / (total - onset) if total > onset else math.nan}


# ---------------------------------------------------------------------------------------------
# Across trials
# ---------------------------------------------------------------------------------------------


def _ms(x: Sequence[float]) -> dict[str, float | None]:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return {"mean": float(x.mean()) if x.size else None,
            "std": float(x.std(ddof=1)) if x.size > 1 else None, "n": int(x.size)}


def _with_defaults(rows: Any, config: CheetahConfig) -> Any:
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

    rows = _with_defaults(rows, config)
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
        "matched_false_alarm": _matched(open_loop),
        "live_calibrated": _live_summary(open_loop, config),
    }


def _live_summary(open_loop: Any, config: CheetahConfig) -> dict[str, Any] | None:
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
        block = {}
        for g in ("IDT", "reward"):
            col = f"live_{kind}_{g}"
            if col not in open_loop:
                continue
            lat = perturbed[col].to_numpy(np.float64)
            hit = np.isfinite(lat)
            block[g] = {
                "false_alarms": {"alarms": int(np.isfinite(control[col].to_numpy(np.float64))
                                               .sum()), "trials": len(control)},
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
    names = [r[0] for r in LIVE_ROWS] + list(RETURN_MONITORS)
    return [n for n in names if f"live_{n}_IDT" in rows or f"live_{n}_reward" in rows]


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
            "cohens_d": {m: float(part[f"d_{m}"].mean()) for m in (*_COMPONENTS, "reward")},
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
        "cohens_d": {m: _ms(perturbed[f"d_{m}"].to_numpy()) for m in (*_COMPONENTS, "reward")},
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


def _group_key(group: TrialGroup) -> str:
    """What a group's results depend on: its settings and the policy file's bytes."""
    import hashlib
    import pickle

    h = hashlib.sha256(pickle.dumps(group))
    h.update(Path(group.policy).read_bytes())
    return h.hexdigest()[:24]


def reproduce(config: CheetahConfig, *, executor: Any | None = None, progress: bool = True
              ) -> CheetahResult:
    """Run every trial (grouped per policy) through the shared executor and summarise.

    With ``out`` set, each finished group's rows are kept in ``out/groups/``: run the same
    command again after an interruption and only the groups left are run.

    Raises
    ------
    InputError
        Bad settings, Dask missing, or an unreachable scheduler.

    """
    import pandas as pd

    from idt_desk.plugin import run_tasks

    config = config.resolved()
    groups = make_groups(config)
    t0 = time.perf_counter()
    results = run_tasks(run_group, groups, executor=executor, workers=config.workers,
                        scheduler=config.scheduler, progress=progress, desc="cheetah trials",
                        unit="trial", weight=lambda g: len(g.trials),
                        resume_dir=None if config.out is None else Path(config.out) / "groups",
                        key=_group_key)
    wall = time.perf_counter() - t0
    rows = pd.DataFrame([r for group in results for r in group])
    summary = summarize_trials(rows, config, wall)
    result = CheetahResult(config, rows, summary, wall)
    if config.out is not None:
        result.files = write_outputs(result, Path(config.out))
    return result


# ---------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------


def _live_rows(lv: dict[str, Any]) -> list[str]:
    """The live-calibrated block as a Markdown table (one row per detector)."""
    lines = ["| Detector | IDT: detection | false alarms | median latency | "
             "reward: detection | false alarms | median latency | asked for |",
             "|---|---|---|---|---|---|---|---|"]
    over = (lv.get("by_chance") or {}).get("over")
    for kind in (k for k in lv if isinstance(lv[k], dict) and k != "by_chance"):
        cells = []
        for g in ("IDT", "reward"):
            b = lv[kind].get(g)
            if b is None:
                cells += ["—"] * 3
                continue
            dt, fa = b["detection"], b["false_alarms"]
            cells += [f"{dt['detected']} of {dt['trials']}",
                      f"{fa['alarms']} of {fa['trials']}"
                      + (" (over budget)" if over is not None and fa["alarms"] >= over
                         else ""), _f(b["median_latency"])]
        lines.append(f"| {kind} | " + " | ".join(cells) + " | "
                     + _count(lv[kind].get("needed_windows")) + " |")
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


def _f(v: Any, digits: int = 3) -> str:
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


def format_tables(summary: dict[str, Any]) -> str:
    """Markdown laid out like the paper's Tables 3 and 4, the paper's values beside ours."""
    cfg = summary["config"]
    paper = summary["paper"]
    n_seeds, n_inc = len(summary["seeds"]), len(summary["included_seeds"])
    fa_trials = next((v["trials"] for v in summary["all_seeds"]["false_alarm_rate"].values()
                      if v), 0)
    lines = [
        "# HalfCheetah: reproduction of the paper's §5.1 (Tables 3 and 4)",
        "",
        f"**Actions: {summary['actions']}** ({_ACTIONS_TEXT[summary['actions']]}). "
        f"{n_seeds} policies (seeds), {summary['all_seeds']['trials']} perturbation trials "
        f"({summary['trials']} on the {n_inc} included seeds) and {fa_trials} control trials "
        f"({cfg['control_seeds']} per seed, each its own environment seed); "
        f"{cfg['episodes']} episodes per trial, perturbation on from "
        f"episode {cfg['onset']}; windows W = 300, stride 50, 3 bins, {cfg['k']:g}σ. Wall time "
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
        f"| Half-Cheetah baseline (this run, {summary['baseline_P']['n']} seeds) | "
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
        lines.append(f"| {_LABEL[m]} | {pr_text} | {rate(summary['detection_rate'][m])} | "
                     f"{rate(every['detection_rate'][m])} | "
                     f"{_false_alarms(every['false_alarm_rate'][m])} | {frac(every, m)} | "
                     f"{'—' if not d else _pm(d, 2)} |")
    lines += ["", f"Paired t-test, IDT against reward detection over seeds: paper t = "
              f"{paper['t_test']['t']}, p {paper['t_test']['p']} (n = {paper['t_test']['n']})"]
    for label, block in (("included seeds", summary), ("all seeds", every)):
        t = block["t_test_IDT_vs_reward"]
        lines[-1] += f"; {label} t = {_f(t['t'])}, p = {_f(t['p'])} (n = {t['n']})"
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
                          frac(b, m), _f(b["median_latency"][m]["median"])]
            lines.append(f"| {_LABEL[m]} | " + " | ".join(cells) + " |")
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
                          _f(b["median_latency"])]
            lines.append(f"| {_LABEL[m]} | " + " | ".join(cells) + " |")
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
                  "episodes, judged at each episode's end. *Asked for*: the most baseline "
                  "windows (episodes for `return_*`) any trial's calibration asked for, to keep "
                  "the threshold's inflation ≤ 1.25 (0: none asked).", "",
                  *_live_rows(lv)]
    lines += [
        "",
        "## Table 4 — Detection latency (median windows after perturbation onset)",
        "",
        "| Metric | Paper | Included seeds | All seeds | Trials detected, all seeds |",
        "|---|---|---|---|---|",
    ]
    for m in DETECTORS:
        lat, lat_all = summary["median_latency"][m], every["median_latency"][m]
        lines.append(f"| {_LABEL[m]} | {paper['median_latency'][m]} | {_f(lat['median'])} | "
                     f"{_f(lat_all['median'])} | {lat_all['detected_trials']} of "
                     f"{lat_all['detected_trials'] + lat_all['never_detected_trials']} |")
    lines += ["", "## By perturbation (all seeds)", "",
              "| Perturbation | Trials | IDT | P | ΔH | H_f | H_b | Reward | IDT latency | "
              "Reward latency | d(P) | d(ΔH) | d(reward) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, b in every["by_perturbation"].items():
        rates = " | ".join(f"{b['detection_rate'][m]:.0%}" for m in DETECTORS)
        d = b["cohens_d"]
        lines.append(f"| {name} | {b['trials']} | {rates} | "
                     f"{_f(b['median_latency']['IDT'])} | {_f(b['median_latency']['reward'])} | "
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
                f"{'at onset' if c['auto'].startswith(HAND) else _f(c['engage_latency_median'])}"
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
    ax1.set_xticks(x, [_LABEL[m] for m in DETECTORS])
    ax1.set_ylim(0, 1.03)
    ax1.set_ylabel("detection rate (mean over seeds)")
    # Below the axes: over the bars it hid the data.
    ax1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2,
               frameon=False)
    ax2.scatter(x + 0.42, [paper["median_latency"][m] for m in DETECTORS], marker="D",
                color="grey", label="paper (Table 4)", zorder=3)
    ax2.set_xticks(x, [_LABEL[m] for m in DETECTORS])
    ax2.set_ylabel("median latency (windows after onset)")
    ax2.legend(fontsize=8)
    fig.suptitle(f"HalfCheetah: {summary['all_seeds']['trials']} perturbation trials per "
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

    if "records_paper_IDT" not in rows:
        return False
    ok = rows[(rows["error"] == "") & (rows["auto"] == "")]
    names = _swept(rows)
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
                c, _ = _scores(ctl, name, m)
                p, _ = _scores(per, name, m)
                if not c.size or not p.size:
                    continue
                grid = np.unique(np.concatenate([c, p, [np.inf]]))[::-1]
                ax.plot([(c > g).mean() for g in grid], [(p > g).mean() for g in grid], style,
                        color=colours[m], lw=1.4 if m == "IDT" else 1.0,
                        label=f"{_LABEL[m]}, {a}", drawstyle="steps-post")
        ax.axvline(MATCHED_RATE, color="grey", lw=0.8, ls=":")
        ax.plot([0, 1], [0, 1], color="0.8", lw=0.8)
        ax.set_xlabel("false-alarm rate (control trials alarmed)")
        ax.set_ylabel("detection rate (perturbed trials)")
        ax.set_title(SWEPT_LABEL[name], fontsize=10)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
    axes[-1].legend(fontsize=7, ncol=2, loc="lower right")
    fig.suptitle("HalfCheetah: ROC over the threshold θ (all seeds; dotted: 5 % false alarms)",
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
    if plot_roc(_with_defaults(result.trials, result.config), out / "roc.png"):
        files.append(out / "roc.png")
    return files


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``idt-desk reproduce cheetah`` options (and ``func=run``)."""
    from idt_desk.plugin import DETECTOR_KINDS

    parser.description = (
        "Evaluate frozen policies in HalfCheetah with each of the paper's perturbations from "
        "episode --onset, and report detection by P, H_f, H_b, dH, their union (IDT) and "
        "reward, beside the paper's Tables 3 and 4. Writes trials.csv, summary.json, "
        "table.md and detection.png into --out."
    )
    parser.add_argument("--policies", type=_names, default=(), metavar="PATH,PATH",
                        help="SB3 zips (default: every shipped HalfCheetah policy)")
    parser.add_argument("--perturbations", type=_names, default=(), metavar="NAME,NAME",
                        help="Table 9 perturbations (default: all eight)")
    parser.add_argument("--actions", type=_names, default=("deterministic",),
                        metavar="deterministic|stochastic",
                        help="how the policy acts: deterministic (its mean, as the authors' "
                             "released evaluation does; the default) or stochastic (sampled); "
                             "'deterministic,stochastic' runs every trial under both and "
                             "reports them side by side")
    parser.add_argument("--control-seeds", type=int, default=5, metavar="N",
                        help="unperturbed control trials per policy, each its own environment "
                             "seed (5): the false-alarm rates are counted over them")
    parser.add_argument("--no-control", action="store_true",
                        help="no control trial (--control-seeds 0)")
    parser.add_argument("--episodes", type=int, default=50, help="episodes per trial (50)")
    parser.add_argument("--onset", type=int, default=15,
                        help="episode the perturbation starts at (15)")
    parser.add_argument("--env-id", default="HalfCheetah-v5")
    parser.add_argument("--seed", type=int, default=0, help="environment and noise seed (0)")
    parser.add_argument("--auto", action="append", default=[], metavar="NAME[:k=v,...]",
                        help="also run every trial with Auto engaging this modulation "
                             "(hold, input_filter or dim_reduction, with parameters and "
                             "persist/release windows as `run --auto`); repeat for more")
    parser.add_argument("--manual", action="append", default=[], metavar="NAME[:k=v,...]",
                        help="also run every trial with this modulation switched on by hand "
                             "at the onset (the comparison for Auto); repeat for more")
    parser.add_argument("--auto-detector", choices=DETECTOR_KINDS, default="persistence",
                        help="the alarm Auto follows, calibrated to --auto-false-alarms: "
                             "persistence (the default, which the documented closed-loop "
                             "tables used), cusum, ewma or mewma (a live RL session's "
                             "default), or the paper's 3σ rule (paper)")
    parser.add_argument("--auto-false-alarms", default=DEFAULT_BUDGET, metavar="BUDGET",
                        help="Auto's false-alarm budget in loop time (1/h; 1/10episodes)")
    parser.add_argument("--out-of-sample", nargs=2, metavar=("RUN_A", "RUN_B"),
                        help="run nothing: from two finished runs (other --seed, same "
                             "policies), choose each detector's threshold and the best "
                             "detector on one and judge them on the other, both ways; "
                             "writes out_of_sample.json and .md into --out")
    parser.add_argument("--pool", nargs="+", metavar="RUN",
                        help="run nothing: pool the live-calibrated blocks of finished runs "
                             "(other --seed, the same policies) per policy and in all, "
                             "counting each distinct control once and warning of controls "
                             "two runs share; writes pooled.json and .md into --out")
    parser.add_argument("--modulation", nargs="+", metavar="RUN",
                        help="run nothing: from finished runs with --manual settings, each "
                             "setting's recovered share of the return a perturbation lost "
                             "and its cost on unperturbed controls, with 95 %% bootstrap "
                             "intervals over policies, runs and episodes; writes "
                             "modulation.json and .md into --out")
    parser.add_argument("--modulation-study", action="store_true",
                        help="run the RL page's modulation study (four batches of --manual "
                             "settings on the three shipped SAC seeds, about 35 minutes on 2 "
                             "cores; batches already in --out are kept) and write its table "
                             "as --modulation does")
    add_settings(parser, ("false_alarms",), false_alarms=CONTROL_BUDGET, notes={
        "false_alarms": "the live-calibrated block's: every trial judged by the detectors a "
                        "live session calibrates on its own pre-onset windows (persistence, "
                        "ewma, mewma; the RL source's budget)"})
    parser.add_argument("--max-baseline-cv", type=float, default=0.25,
                        help="exclude seeds whose pre-onset return CV exceeds this (0.25)")
    add_settings(parser, ("k",))
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (default: all cores)")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="run on a Dask scheduler, e.g. tcp://host:8786 (it exchanges "
                        "pickles with this process: a cluster you trust)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, print_fn: Callable[[str], None] = print) -> int:
    """Run ``idt-desk reproduce cheetah`` from parsed arguments; print the tables."""
    modes = [flag for flag, given in (("--out-of-sample", args.out_of_sample),
                                      ("--pool", args.pool), ("--modulation", args.modulation),
                                      ("--modulation-study", args.modulation_study)) if given]
    if len(modes) > 1:
        raise InputError(f"{modes[0]} and {modes[1]}: one analysis at a time (each writes its "
                         "own report into --out)")
    check_out_dir(args.out, "--out")
    if args.out_of_sample:
        return _run_out_of_sample(args, print_fn)
    if args.pool:
        return _run_pool(args, print_fn)
    if args.modulation_study:
        from idt_desk_sources.gym.modulation import run_study

        args.modulation = run_study(args.out, workers=args.workers,
                                    progress=not args.no_progress, print_fn=print_fn)
    if args.modulation:
        return _run_modulation(args, print_fn)
    config = CheetahConfig(
        policies=args.policies, perturbations=args.perturbations,
        control_seeds=0 if args.no_control else args.control_seeds, actions=args.actions,
        episodes=args.episodes, onset=args.onset,
        env_id=args.env_id, seed=args.seed, auto=tuple(args.auto),
        manual=tuple(args.manual), auto_detector=args.auto_detector,
        auto_false_alarms=args.auto_false_alarms, false_alarms=args.false_alarms,
        max_baseline_cv=args.max_baseline_cv,
        k=args.k, workers=args.workers,
        scheduler=args.scheduler, out=args.out,
    )
    result = reproduce(config, progress=not args.no_progress)
    print_fn(format_tables(result.summary).rstrip("\n"))
    print_fn("")
    print_fn("wrote " + ", ".join(str(p) for p in result.files))
    return 0


def _run_names(dirs: Sequence[Any]) -> list[str]:
    """Each run's folder as given (:func:`_read_runs` refuses one given twice)."""
    return [str(d) for d in dirs]


def _read_runs(dirs: Sequence[Any], flag: str) -> list[Any]:
    """Each finished run's checked ``trials.csv`` (``idt_desk_sources.gym.trials``)."""
    from idt_desk_sources.gym.trials import read_runs

    return [_with_defaults(rows, CheetahConfig()) for rows in read_runs(dirs, flag)]


def _blank(rows: Any, col: str) -> Any:
    """Rows whose ``col`` is empty (read back from CSV: NaN)."""
    return rows[col].isna() | (rows[col].astype(str) == "")


#: What makes two control trials the same run: the same policy acting the same way in an
#: environment seeded alike (its trajectory is then the same, bit for bit).
CONTROL_KEY = ("policy", "actions", "env_seed")


def _control_keys(rows: Any) -> set[tuple[Any, ...]]:
    c = rows[(rows["perturbation"] == CONTROL) & _blank(rows, "auto")]
    return {tuple(str(v) for v in k) for k in c[list(CONTROL_KEY)].itertuples(index=False)}


def shared_controls(runs: dict[str, Any]) -> list[str]:
    """One line per pair of runs that share control trials (none: the counts stand)."""
    keys = {name: _control_keys(rows) for name, rows in runs.items()}
    names = list(keys)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = keys[a] & keys[b]
            if both:
                seeds = sorted({k[2] for k in both})
                out.append(f"{a} and {b} share {len(both)} control trial(s) (environment "
                           f"seed(s) {', '.join(seeds[:5])}{' ...' if len(seeds) > 5 else ''}): "
                           "each is one run counted twice, and out of sample it is judged "
                           "by thresholds fitted on itself. Rerun one with another --seed "
                           "(runs from this release derive their controls' seeds so that "
                           "two --seed values never share one).")
    return out


def pool_runs(runs: dict[str, Any], budget: str | None = None) -> dict[str, Any]:
    """The live-calibrated block of several runs, per policy and in all.

    Perturbed trials are summed; a control shared by two runs (:func:`shared_controls`), or a
    perturbed trial two runs share (``trials.TRIAL_KEY``), is counted once (its first run's
    row). ``budget`` only labels the block (each run's trials
    were judged at their own run's budget: pool runs of one budget).
    """
    import pandas as pd

    frames = []
    for name, rows in runs.items():
        ok = rows[_blank(rows, "error") & _blank(rows, "auto")]
        ok = ok[ok["actions"] == ok["actions"].iloc[0]] if len(ok) else ok
        frames.append(ok.assign(run=name))
    every = pd.concat(frames, ignore_index=True)
    control = every[every["perturbation"] == CONTROL]
    distinct = control.drop_duplicates(subset=list(CONTROL_KEY), keep="first")
    from idt_desk_sources.gym.trials import TRIAL_KEY

    perturbed = every[every["perturbation"] != CONTROL]
    once = perturbed.drop_duplicates(subset=[c for c in TRIAL_KEY if c in perturbed],
                                     keep="first")
    every = pd.concat([once, distinct], ignore_index=True)
    config = CheetahConfig(false_alarms=budget or CONTROL_BUDGET)
    warnings = shared_controls(runs)
    if len(once) < len(perturbed):
        warnings.append(f"{len(perturbed) - len(once)} perturbed trial(s) appear in two runs "
                        "(the same policy, perturbation, environment seed and onset): each "
                        "is counted once, from the first run that has it")
    out: dict[str, Any] = {"runs": list(runs), "warnings": warnings,
                           "controls_counted": len(distinct),
                           "controls_shared": len(control) - len(distinct),
                           "perturbed_shared": len(perturbed) - len(once),
                           "all": _live_summary(every, config), "policies": {},
                           "signatures": signatures(runs)}
    for policy in dict.fromkeys(every["policy"]):
        out["policies"][policy] = _live_summary(every[every["policy"] == policy], config)
    return out


#: A perturbation's signature: how far each component's post-onset mean moved (Cohen's d
#: against the trial's pre-onset windows), the IDT's four and reward.
SIGNATURE = (*_COMPONENTS, "reward")
#: |d| beyond which a component counts as moved in the signature's arrows.
MOVED_D = 1.0


def signatures(runs: dict[str, Any]) -> dict[str, Any] | None:
    """Which components each perturbation moves, and whether that tells them apart.

    Per perturbation: the mean and σ of each component's Cohen's d over its trials (every
    run and policy), its arrows (↑/↓ where |mean d| > :data:`MOVED_D`, · elsewhere) and the
    return's change (``return_post`` against ``return_pre``). Out of sample, with two runs
    or more: each run's perturbed trials classified by the nearest centroid (Euclidean, in
    d) of the perturbations' signatures measured on the other runs; the share right, the
    chance level (one in the number of perturbations) and the confusions. None: no
    perturbed trial.
    """
    import pandas as pd

    frames = []
    for name, rows in runs.items():
        ok = rows[_blank(rows, "error") & _blank(rows, "auto")]
        frames.append(ok[ok["perturbation"] != CONTROL].assign(run=name))
    every = pd.concat(frames, ignore_index=True) if frames else None
    cols = [f"d_{m}" for m in SIGNATURE]
    if every is None or not len(every) or any(c not in every for c in cols):
        return None
    every = every.dropna(subset=cols)
    table = {}
    for pert, g in every.groupby("perturbation", sort=True):
        d = g[cols].to_numpy(np.float64)
        mean = d.mean(axis=0)
        change = ((g["return_post"] - g["return_pre"]) / g["return_pre"].abs()).to_numpy(
            np.float64) if "return_post" in g else np.array([math.nan])
        table[str(pert)] = {
            "trials": len(g), "d_mean": dict(zip(SIGNATURE, mean.tolist(), strict=True)),
            "d_std": dict(zip(SIGNATURE, (d.std(axis=0, ddof=1) if len(d) > 1 else
                                          np.full(len(cols), math.nan)).tolist(),
                              strict=True)),
            "arrows": "".join("↑" if v > MOVED_D else "↓" if v < -MOVED_D else "·"
                              for v in mean),
            "return_change": float(np.nanmean(change)) if np.isfinite(change).any() else None}
    out: dict[str, Any] = {"components": list(SIGNATURE), "moved_d": MOVED_D,
                           "perturbations": table, "out_of_sample": None}
    names = list(dict.fromkeys(every["run"]))
    if len(names) >= 2 and len(table) >= 2:
        right = total = 0
        confusions: dict[str, int] = {}
        for held in names:
            fit, test = every[every["run"] != held], every[every["run"] == held]
            cents = {p: g[cols].to_numpy(np.float64).mean(axis=0)
                     for p, g in fit.groupby("perturbation")}
            keys = list(cents)
            c = np.stack([cents[k] for k in keys])
            for truth, x in zip(test["perturbation"], test[cols].to_numpy(np.float64),
                                strict=True):
                if truth not in cents:
                    continue
                guess = keys[int(np.argmin(((c - x) ** 2).sum(axis=1)))]
                total += 1
                right += guess == truth
                if guess != truth:
                    pair = f"{truth} → {guess}"
                    confusions[pair] = confusions.get(pair, 0) + 1
        out["out_of_sample"] = {
            "classified": total, "right": right, "share": right / total if total else None,
            "chance": 1.0 / len(table),
            "confusions": dict(sorted(confusions.items(), key=lambda kv: -kv[1]))}
    return out


def _signature_rows(sig: dict[str, Any]) -> list[str]:
    """The signature table and its out-of-sample line, in Markdown."""
    heads = " | ".join(_LABEL[m] for m in sig["components"])
    lines = [f"| Perturbation | trials | {heads} | moved (d beyond ±{sig['moved_d']:g}) | "
             "return change |", "|---|---|" + "---|" * len(sig["components"]) + "---|---|"]
    for pert, row in sig["perturbations"].items():
        cells = [(f"{row['d_mean'][m]:+.1f} ± {row['d_std'][m]:.1f}"
                  if math.isfinite(row["d_std"][m]) else f"{row['d_mean'][m]:+.1f}"
                  ).replace("-", "−") for m in sig["components"]]
        rc = row["return_change"]
        lines.append(f"| {pert} | {row['trials']} | " + " | ".join(cells)
                     + f" | {row['arrows']} | "
                     + ("—" if rc is None else f"{100 * rc:+.1f} %".replace("-", "−")) + " |")
    oos = sig.get("out_of_sample")
    if oos and oos["classified"]:
        conf = ", ".join(f"{k} ({v})" for k, v in list(oos["confusions"].items())[:6])
        lines += ["", f"Out of sample (each run's trials by the nearest signature measured on "
                      f"the other runs): {oos['right']} of {oos['classified']} right "
                      f"({oos['share']:.0%}; chance {oos['chance']:.0%})"
                      + (f"; confused: {conf}." if conf else ".")]
    return lines


def _run_pool(args: argparse.Namespace, print_fn: Callable[[str], None]) -> int:
    """``--pool RUN ...``: the live-calibrated blocks of finished runs, pooled."""
    tables = _read_runs(args.pool, "--pool")
    result = pool_runs(dict(zip(_run_names(args.pool), tables, strict=True)), args.false_alarms)
    lines = [f"# Pooled live-calibrated detectors: {', '.join(map(str, args.pool))}", "",
             f"Distinct controls counted: {result['controls_counted']} "
             f"({result['controls_shared']} shared ones counted once).", ""]
    for text in result["warnings"]:
        print_fn(f"warning: {text}")
        lines += [f"**Warning**: {text}", ""]
    for label, lv in (("all policies", result["all"]), *result["policies"].items()):
        if lv is None:
            continue
        lines += [f"## {label}: {lv['perturbed_trials']} perturbed, {lv['control_trials']} "
                  "distinct controls", "", *_live_rows(lv), ""]
    if result.get("signatures"):
        lines += ["## Signatures: how far each component moved (Cohen's d, mean ± σ over "
                  "trials)", "", *_signature_rows(result["signatures"]), ""]
    return _report(lines, result, args.out, "pooled", print_fn)


def _run_modulation(args: argparse.Namespace, print_fn: Callable[[str], None]) -> int:
    """``--modulation RUN ...``: what each hand-switched setting recovered, and cost."""
    from idt_desk_sources.gym.modulation import (
        COST_LIMIT,
        HELPS_SHARE,
        format_table,
        modulation_table,
        verdict,
    )

    tables = _read_runs(args.modulation, "--modulation")
    try:
        table = modulation_table(dict(zip(_run_names(args.modulation), tables, strict=True)))
    except ValueError as exc:
        raise InputError(f"--modulation: {exc}") from None
    if not table["settings"]:
        raise InputError("--modulation: no trial with a setting switched on by hand "
                         "(run reproduce cheetah with --manual SPEC)")
    said = verdict(table)
    lines = [f"# What each modulation does: {', '.join(map(str, args.modulation))}", "",
             "Recovered share of the return lost, (M − O) / (C − O), pooled over policies "
             f"and runs, [95 % bootstrap, {table['draws']} draws over units and episodes]; "
             "control cost (C_M − C) / C with the number of controls.", "",
             *format_table(table), ""]
    if said["helps"]:
        lines.append(f"Helps (≥ {100 * HELPS_SHARE:.0f} % of a ≥ 10 % loss back, interval "
                     f"above 0, controls within {100 * COST_LIMIT:.0f} %): " +
                     "; ".join(f"{s} on {p}" for s, p in said["helps"]))
    else:
        lines.append(f"No setting recovers {100 * HELPS_SHARE:.0f} % of a loss of 10 % or "
                     "more with its interval above 0 while costing controls at most "
                     f"{100 * COST_LIMIT:.0f} %.")
    lines += ["", "Least costly setting of each modulation: " +
              ", ".join(f"{s} ({100 * table['settings'][s]['cost']:+.1f} %)".replace("-", "−")
                        for s in said["cheapest"].values()), ""]
    return _report(lines, {**table, "verdict": said}, args.out, "modulation", print_fn)


def _report(lines: list[str], result: dict[str, Any], out: Path | None, stem: str,
            print_fn: Callable[[str], None]) -> int:
    """Print a block read from finished runs; write it as ``STEM.json`` and ``.md`` in out."""
    text = "\n".join(lines)
    print_fn(text.rstrip("\n"))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / f"{stem}.md").write_text(text)
        print_fn(f"wrote {out / f'{stem}.json'}, {out / f'{stem}.md'}")
    return 0


def _run_out_of_sample(args: argparse.Namespace, print_fn: Callable[[str], None]) -> int:
    """``--out-of-sample A B``: the block from two finished runs' ``trials.csv``."""
    tables = _read_runs(args.out_of_sample, "--out-of-sample")
    if any("records_paper_IDT" not in rows for rows in tables):
        bad = next(d for d, rows in zip(args.out_of_sample, tables, strict=True)
                   if "records_paper_IDT" not in rows)
        raise InputError(f"--out-of-sample {bad}: its trials keep no records")
    result = out_of_sample(*tables)
    lines = ["# Out of sample: detectors and thresholds chosen on one batch, judged on the "
             "other", ""]
    for text in shared_controls(dict(zip(_run_names(args.out_of_sample), tables, strict=True))):
        print_fn(f"warning: {text}")
        lines += [f"**Warning**: {text}", ""]
    for label, (fit, test) in (("a_to_b", args.out_of_sample),
                               ("b_to_a", args.out_of_sample[::-1])):
        b = result[label]
        lines += [f"## θ matched (≤ {result['target_rate']:.0%}) on {fit}'s "
                  f"{b['fit_controls']} controls, applied to {test} ({b['test_controls']} "
                  f"controls, {b['test_perturbed']} perturbed)", "",
                  f"Chosen on {fit}: IDT → {b['chosen_IDT']}, reward → {b['chosen_reward']}.",
                  "", "| Detector | IDT: detection | false alarms | median latency | "
                  "reward: detection | false alarms | median latency |",
                  "|---|---|---|---|---|---|---|"]
        for name, per in b["detectors"].items():
            cells = []
            for m in ("IDT", "reward"):
                dt, fa = per[m]["detection"], per[m]["false_alarms"]
                cells += [f"{dt['detected']} of {dt['trials']}",
                          f"{fa['alarms']} of {fa['trials']}", _f(per[m]["median_latency"])]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return _report(lines, result, args.out, "out_of_sample", print_fn)
