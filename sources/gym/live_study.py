"""The RL source's live default judged as a live session runs it, on seeds never used.

``idt-desk reproduce cheetah-live --out DIR`` rolls out each agent (the shipped SAC 3, 7, 2;
the authors' SAC 3, 5, 7 with ``--authors DIR``) on two splits of environment seeds: a
*choice* split that settings and the attribution are chosen and fitted on, and a *held-out*
split never used for anything before. A split holds unperturbed controls, each its own seed,
and trials of each of the source's eight declared perturbations, switched on at ``--onset``
and left on. Every trial is kept (``DIR/trials/*.npz``), so the judgement is recomputed from
them without a rollout.

Each trial goes through the :class:`~idt_desk.pipeline.Pipeline` a live session builds: the
symbols fitted on the first ``--calibration`` windows, the monitor's baseline on the next
``--baseline`` windows, every later window judged by the RL source's default detector (one
MEWMA of every part's components, at the default budget). Per trial: when the alarm armed
(loop time), whether the calibration called the baseline too short, the share of values out
of the symbols' range (as the session's out-of-range notice averages it), the latency of the
first alarm after the onset (windows from the first window holding a perturbed step; for a
control, any alarm over the same span is a false alarm), and the class of change the env's
twin names at the alarm (:mod:`idt_desk.detection.attribution`: an unperturbed copy of the
env stepped from each kept S; the trials keep S, A and S' as float32, so its residual on
clean rows is float32's rounding, not the copy's 1e-11).

The attribution's rule is fixed (chosen on ``reproduce cheetah``'s training seeds); it is
judged on both splits here: the class of a perturbation comes from its declaration
(:func:`change_class`), never its name.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["HELP", "SPLITS", "add_arguments", "change_class", "judge_trial", "run",
           "trial_rollouts", "trial_seed", "trial_table"]

#: ``idt-desk reproduce cheetah-live``'s one-line help.
HELP = ("the RL source's live default on held-out seeds: detection, false alarms on distinct "
        "controls, latency, arming time and the twin's class of each detection")

#: The splits: the seeds the live default was chosen on, and seeds never used for anything
#: before (earlier studies used 0-1301).
SPLITS = {"choice": 20_000, "held-out": 30_000}


def trial_seed(split: str, kind: str, j: int) -> int:
    """A trial's environment seed: distinct for every split, kind and repeat (``j``).

    Controls take ``base + j``, perturbed trials ``base + 1000 + 10 * i + j`` (``i`` the
    perturbation's place in the source's declarations), so no two trials share a trajectory.
    """
    from idt_desk_sources.gym import GymSource

    base = SPLITS[split]
    if kind == "control":
        return base + j
    names = [p.name for p in GymSource.perturbations]
    return base + 1000 + 10 * names.index(kind) + j


def trial_plan(split: str, controls: int, repeats: int) -> list[tuple[str, int]]:
    """(kind, repeat) of every trial of a split: the controls, then each perturbation's."""
    from idt_desk_sources.gym import GymSource

    return [("control", j) for j in range(controls)] + [
        (p.name, j) for p in GymSource.perturbations for j in range(repeats)]


def roll_trials(policy: str, env_id: str, split: str, plan: Sequence[tuple[str, int]], *,
                n: int, onset: int, chunk: int = 5_000,
                progress: Callable[[str], None] = print) -> list[dict[str, np.ndarray]]:
    """The trials of ``plan``, each seeded by :func:`trial_seed` and ``n`` steps long.

    Every perturbation is switched on at step ``onset``. Each trial: float32 S, A, S',
    reward and the episode index, and its ``onset`` (-1: a control).

    The trials step in lockstep (one policy call a step for all of them); each trial's record
    is what it would be alone.
    """
    import torch
    from idt_desk_sources.gym import GymSource

    torch.set_num_threads(1)  # one process per core: torch's own threads would contend
    sources = [GymSource(policy=policy, env_id=env_id) for _ in plan]
    try:
        for src in sources[1:]:
            src.policy = sources[0].policy  # one policy call a step serves them all
        for src, (kind, j) in zip(sources, plan, strict=True):
            src.reset(trial_seed(split, kind, j))
        parts: list[list[dict[str, np.ndarray]]] = [[] for _ in plan]
        done = 0
        while done < n:
            if done == onset:
                for src, (kind, _) in zip(sources, plan, strict=True):
                    if kind != "control":
                        decl = next(p for p in src.perturbations if p.name == kind)
                        src.set_perturbation(kind, {q.name: q.default for q in decl.params})
            k = min(chunk, (onset if done < onset else n) - done)
            for rec, b in zip(parts, GymSource.step_together(sources, k, info=False), strict=True):
                rec.append({"s": b.s.astype(np.float32), "a": b.a.astype(np.float32),
                            "s_next": b.s_next.astype(np.float32),
                            "reward": b.reward.astype(np.float32),
                            "episode": b.episode.astype(np.int32)})
            done += k
            progress(f"  {split}: {done:,}/{n:,} steps of {len(plan)} trials")
    finally:
        for src in sources:
            src.close()
    return [{**{k: np.concatenate([r[k] for r in rec]) for k in rec[0]},
             "onset": np.int64(-1 if kind == "control" else onset)}
            for rec, (kind, _) in zip(parts, plan, strict=True)]


def trial_rollouts(out: Path, agent: str, policy: str, env_id: str = "HalfCheetah-v5", *,
                   split: str, controls: int, repeats: int, n: int, onset: int,
                   chunk: int = 5_000, progress: Callable[[str], None] = print) -> None:
    """Every trial of one agent and split into ``out/trials`` (a split there is kept).

    :func:`trial_plan` says which, :func:`roll_trials` rolls them out.
    """
    folder = out / "trials"
    folder.mkdir(parents=True, exist_ok=True)
    plan = trial_plan(split, controls, repeats)
    paths = [folder / f"{agent}_{split}_{kind}_{j}.npz" for kind, j in plan]
    if all(p.exists() for p in paths):
        return
    runs = roll_trials(policy, env_id, split, plan, n=n, onset=onset, chunk=chunk,
                       progress=lambda m: progress(f"  {agent}{m}"))
    for path, run in zip(paths, runs, strict=True):
        tmp = path.with_suffix(".tmp.npz")
        np.savez_compressed(tmp, **run, env_id=env_id)
        tmp.replace(path)


def change_class(decl: Any) -> str:
    """The class of change a perturbation declares.

    ``sensor`` or ``actuator`` (its target), ``force`` (a force parameter), else
    ``dynamics`` (a change of the physics).
    """
    if decl.target in ("sensor", "actuator"):
        return decl.target
    if any(p.name == "force" for p in decl.params):
        return "force"
    return "dynamics"


def load_trial(path: Path) -> dict[str, np.ndarray]:
    """One kept trial (float64 S, A, S', reward; the episode index; its onset, -1: none)."""
    with np.load(path) as d:
        return {k: (d[k].astype(np.float64) if d[k].dtype == np.float32 else d[k])
                for k in d.files}


def _onset(path: Path) -> int:
    """A kept trial's onset, read without its arrays."""
    with np.load(path) as d:
        return int(d["onset"])


def trial_table(run: dict[str, np.ndarray], preset: Any, calibration_windows: int,
                chunk: int = 5_000) -> dict[str, np.ndarray]:
    """The windows a live session makes of a trial (no monitor: judged by :func:`judge_trial`).

    The rows go through the :class:`~idt_desk.pipeline.Pipeline` in chunks; its windows do
    not depend on the chunking.
    """
    from idt_desk.plugin import Pipeline

    s, a, s2 = run["s"], run["a"], run["s_next"]
    pipe = Pipeline(preset, None, state_names=[f"obs_{j}" for j in range(s.shape[1])],
                    action_names=[f"act_{j}" for j in range(a.shape[1])],
                    calibration_windows=calibration_windows)
    parts = []
    for i in range(0, len(s), chunk):
        j = slice(i, i + chunk)
        step = pipe.push(s[j], a[j], s2[j], {"reward": run["reward"][j],
                                             "t": np.arange(i, i + len(s[j]), dtype=float)})
        if step.windows is not None:
            parts.append(step.windows)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def judge_trial(table: dict[str, np.ndarray], onset: int, preset: Any, *,
                calibration_windows: int, baseline_windows: int, budget: str,
                ewma_lambda: float, rate: float, detector: str | None = None,
                persist: int = 20, run: dict[str, np.ndarray] | None = None
                ) -> dict[str, Any]:
    """A trial judged as a live session would judge it (module docstring).

    ``onset``: the step the perturbation started at (for a control, the perturbed trials'
    onset: its alarms over the same span are the false alarms counted). ``run``: the kept
    trial (with its ``env_id``), for the twin's class at the alarm.
    """
    from idt_desk.plugin import (
        CONTROL_DETECTOR,
        IDT_METRICS,
        attribute,
        build_monitor,
        first_post_onset_window,
        judge,
        mujoco_twin,
        part_metrics,
        twin_over,
    )

    mon = build_monitor((*part_metrics(preset, IDT_METRICS), "reward"),
                        baseline_windows=baseline_windows,
                        detector=detector or preset.detector or CONTROL_DETECTOR,
                        false_alarms=budget,
                        ewma_lambda=ewma_lambda, rate=rate, stride=preset.stride,
                        window=preset.window, what="this trial")
    flags, completed = judge(mon, table, 0, calibration_windows)
    end = table["end"]
    j0 = first_post_onset_window(table["start"], preset.window, onset)
    row: dict[str, Any] = {"windows": len(end), "onset_window": j0}
    if completed is None or completed >= j0:
        row["armed_s"] = math.nan
        return row
    cal = mon.calibration
    row["armed_s"] = float(end[completed]) / rate
    row["needed_windows"] = int(cal.needed_windows or 0)
    row["too_short"] = bool(cal.too_short)
    oor = np.convolve(table["out_of_range"], np.ones(persist) / persist, mode="valid")
    row["out_of_range_max"] = float(oor[: max(j0 - persist + 1, 1)].max())
    row["distinct"] = {p: float(np.median(table[f"K_SAS@{p}"][:j0])) for p in preset.parts} \
        if preset.parts else float(np.median(table["K_SAS"][:j0]))
    idt = flags["IDT"]
    row["alarms_before_onset"] = int(np.nansum(np.diff(np.r_[0.0, np.nan_to_num(
        idt[completed + 1:j0])]) > 0))
    hits = np.flatnonzero(idt[j0:] == 1)
    row["latency"] = float(hits[0]) if hits.size else math.nan
    rh = np.flatnonzero(flags["reward"][j0:] == 1)
    row["latency_reward"] = float(rh[0]) if rh.size else math.nan
    if hits.size and run is not None:
        twin, why = mujoco_twin(str(run.get("env_id", "HalfCheetah-v5")))
        ev = None
        if twin is not None:
            s = run["s"]
            fit = preset.window + (calibration_windows - 1) * preset.stride
            stage, _ = twin_over(twin, preset.window, [f"obs_{j}" for j in range(s.shape[1])],
                                 s, run["a"], run["s_next"], np.asarray(end),
                                 fit=slice(0, fit), baseline=slice(
                                     completed + 1 - baseline_windows, completed + 1))
            ev = stage.evidence(j0 + int(hits[0]))
            twin.close()
        got = attribute(ev, note=why)
        row["attribution"], row["evidence"] = got["attribution"], got["evidence"]
    return row


#: The shipped agents, by the name their zip carries.
SHIPPED = ("sac-seed3", "sac-seed7", "sac-seed2")
#: The authors' SAC agents (HalfCheetah-v4), by the zip's name in their repository.
AUTHORS = {"authors-sac3": "sac_claude_seed3.zip", "authors-sac5": "sac_claude_seed5.zip",
           "authors-sac7": "sac_claude_seed7.zip"}


def agents(authors: Path | None) -> list[tuple[str, str, str]]:
    """(name, policy zip, env id) of every agent.

    The shipped SAC, and the authors' SAC given their repository's folder.
    """
    from idt_desk.plugin import InputError, assets

    out = [(a, str(assets.path("policies", f"halfcheetah-v5-{a}.zip")), "HalfCheetah-v5")
           for a in SHIPPED]
    if authors is not None:
        for name, zip_name in AUTHORS.items():
            path = Path(authors) / zip_name
            if not path.exists():
                raise InputError(f"--authors: no {zip_name} in {authors} (clone "
                                 "github.com/Semarxai/idt_pipeline there)")
            out.append((name, str(path), "HalfCheetah-v4"))
    return out


def judge_split(out: Path, agent: str, split: str, preset: Any, settings: dict[str, Any],
                progress: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every kept trial of one agent and split, judged (:func:`judge_trial`), one row each."""
    from idt_desk_sources.gym import GymSource

    decl = {p.name: p for p in GymSource.perturbations}
    rows = []
    paths = sorted((out / "trials").glob(f"{agent}_{split}_*.npz"))
    # Every trial of a split shares the onset; a control, which has none, takes its trials'.
    onset = next((_onset(p) for p in paths if "_control_" not in p.name), 0)
    for path in paths:
        kind, j = path.stem[len(f"{agent}_{split}_"):].rsplit("_", 1)
        run = load_trial(path)
        on = int(run["onset"]) if int(run["onset"]) >= 0 else onset
        table = trial_table(run, preset, settings["calibration_windows"])
        row = judge_trial(table, on, preset, **settings, run=run)
        row.update(agent=agent, split=split, trial=kind, repeat=int(j),
                   cls="control" if kind == "control" else change_class(decl[kind]))
        rows.append(row)
    progress(f"  judged {agent} {split}: {len(rows)} trials")
    return rows


#: The paper's four perturbations (the authors' released evaluation runs these).
PAPER_FOUR = ("act_noise_1", "act_noise_4", "obs_noise_1", "obs_noise_3")


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per agent and split, what the live default did.

    Detection (the paper's four, all eight), controls alarmed, median latency, when the
    alarm armed, too-short baselines, out-of-range and regime.
    """
    out: dict[str, Any] = {}
    for key in sorted({(r["agent"], r["split"]) for r in rows}):
        rs = [r for r in rows if (r["agent"], r["split"]) == key]
        ctrl = [r for r in rs if r["trial"] == "control"]
        pert = [r for r in rs if r["trial"] != "control"]
        four = [r for r in pert if r["trial"] in PAPER_FOUR]
        lat = [r["latency"] for r in pert if math.isfinite(r.get("latency", math.nan))]
        armed = [r["armed_s"] for r in rs if math.isfinite(r["armed_s"])]

        def hit(r: dict[str, Any]) -> bool:
            return math.isfinite(r.get("latency", math.nan))

        out[f"{key[0]} {key[1]}"] = {
            "agent": key[0], "split": key[1],
            "paper_four": [sum(map(hit, four)), len(four)],
            "all_eight": [sum(map(hit, pert)), len(pert)],
            "controls_alarmed": [sum(map(hit, ctrl)), len(ctrl)],
            "controls_alarmed_before_onset": sum(r.get("alarms_before_onset", 0) > 0
                                                 for r in ctrl),
            "median_latency": float(np.median(lat)) if lat else math.nan,
            "reward_detected": [sum(math.isfinite(r.get("latency_reward", math.nan))
                                    for r in pert), len(pert)],
            "reward_controls_alarmed": sum(math.isfinite(r.get("latency_reward", math.nan))
                                           for r in ctrl),
            "armed_s_max": max(armed) if armed else math.nan,
            "too_short": sum(bool(r.get("too_short")) for r in rs),
            "needed_windows_max": max((r.get("needed_windows", 0) for r in rs), default=0),
            "out_of_range_max": max((r.get("out_of_range_max", 0.0) for r in ctrl),
                                    default=math.nan),
            "distinct": _median_distinct(ctrl),
        }
    return out


def _median_distinct(rows: Sequence[dict[str, Any]]) -> Any:
    ds = [r["distinct"] for r in rows if "distinct" in r]
    if not ds:
        return math.nan
    if isinstance(ds[0], dict):
        return {p: float(np.median([d[p] for d in ds])) for p in ds[0]}
    return float(np.median(ds))


def attribution_study(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The twin's class at each detection against the perturbation's declared class.

    Per split: accuracy per agent and pooled (``unknown`` counts as wrong), the confusion
    table (true class × named class), and what each control's false alarm was named.
    """
    classes = ("sensor", "actuator", "force", "dynamics")
    out: dict[str, Any] = {}
    for split in SPLITS:
        judged = [r for r in rows if r["split"] == split and r["trial"] != "control"
                  and "attribution" in r]
        confusion = {c: dict.fromkeys((*classes, "unknown"), 0) for c in classes}
        per_agent: dict[str, list[int]] = {}
        for r in judged:
            confusion[r["cls"]][r["attribution"]] += 1
            a = per_agent.setdefault(r["agent"], [0, 0])
            a[0] += r["attribution"] == r["cls"]
            a[1] += 1
        controls: dict[str, int] = {}
        for r in rows:
            if r["split"] == split and r["trial"] == "control" and "attribution" in r:
                controls[r["attribution"]] = controls.get(r["attribution"], 0) + 1
        out[split] = {"judged": len(judged), "right": sum(confusion[c][c] for c in classes),
                      "per_agent": per_agent, "confusion": confusion,
                      "controls_named": controls}
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the command's options to ``parser`` (and ``func=run``)."""
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for the trials and the results (trials already there "
                             "are kept)")
    parser.add_argument("--authors", type=Path, default=None, metavar="DIR",
                        help="a clone of github.com/Semarxai/idt_pipeline: also judge the "
                             "authors' SAC seeds 3, 5 and 7 (HalfCheetah-v4)")
    parser.add_argument("--controls", nargs=2, type=int, default=[8, 20],
                        metavar=("CHOICE", "HELD_OUT"),
                        help="unperturbed controls per agent in each split (8 20)")
    parser.add_argument("--repeats", type=int, default=2,
                        help="trials of each of the eight perturbations per agent and split")
    parser.add_argument("--steps", type=int, default=85_000, help="steps per trial")
    parser.add_argument("--onset", type=int, default=50_000, help="perturbation onset (step)")
    parser.add_argument("--preset", default="cheetah-live",
                        help="the symbols and windows judged (default: cheetah-live)")
    from idt_desk_sources.gym import GymSource

    from idt_desk.plugin import DEFAULT_BASELINE_WINDOWS, add_settings, source_defaults

    unset = source_defaults(GymSource)
    # The study's protocol: 800 baseline windows before the onset at 50,000 steps (the gym
    # source's own default, 2,000 windows for the MEWMA, would not fit before it).
    add_settings(parser, ("calibration_windows", "baseline_windows", "false_alarms"),
                 baseline_windows=DEFAULT_BASELINE_WINDOWS,
                 false_alarms=unset["false_alarms"])
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the study from parsed arguments."""
    from idt_desk_sources.gym import GymSource

    from idt_desk.plugin import (
        DEFAULTS,
        PRESETS,
        InputError,
        check_int,
        check_limit,
        source_defaults,
    )

    check_int("--steps", args.steps, 10_000, 10_000_000)
    check_int("--onset", args.onset, 5_000, args.steps - 1_000)
    check_int("--repeats", args.repeats, 1, 100)
    for c in args.controls:
        check_int("--controls", c, 1, 1_000)
    if args.preset not in PRESETS:
        raise InputError(f"--preset: unknown preset {args.preset!r}; known: "
                         f"{', '.join(PRESETS)}")
    preset = PRESETS[args.preset]
    todo = agents(args.authors)
    for split, controls in zip(SPLITS, args.controls, strict=True):
        for name, policy, env_id in todo:
            trial_rollouts(args.out, name, policy, env_id, split=split, controls=controls,
                           repeats=args.repeats, n=args.steps, onset=args.onset,
                           progress=lambda m: print(m, flush=True))
    for key in ("calibration_windows", "baseline_windows", "false_alarms"):
        check_limit(key, getattr(args, key))
    settings = {"calibration_windows": args.calibration_windows,
                "baseline_windows": args.baseline_windows, "budget": args.false_alarms,
                "ewma_lambda": DEFAULTS["ewma_lambda"], "rate": 20.0}
    rows = [r for name, _, _ in todo for split in SPLITS
            for r in judge_split(args.out, name, split, preset, settings)]
    result: dict[str, Any] = {"preset": preset.to_dict(), "settings": settings,
                              "detector": source_defaults(GymSource, preset)["detector"],
                              "steps": args.steps, "onset": args.onset,
                              "summary": summarize(rows)}
    result["attribution"] = attribution_study(rows)
    (args.out / "trials.json").write_text(json.dumps(rows, indent=1, default=float))
    (args.out / "summary.json").write_text(json.dumps(result, indent=1, default=float))
    print(report(result))
    return 0


def report(result: dict[str, Any]) -> str:
    """The held-out split's table in Markdown."""
    lines = [f"preset {result['preset']['name']}, detector {result['detector']}, budget "
             f"{result['settings']['budget']}, baseline "
             f"{result['settings']['baseline_windows']} windows (held-out split)", "",
             "| agent | paper's four | all eight | controls alarmed | median latency | "
             "reward (phase-blind) | armed at | too short | out of range (max) | distinct |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for v in result["summary"].values():
        if v["split"] != "held-out":
            continue
        d = v["distinct"]
        dist = "/".join(f"{x:.0f}" for x in d.values()) if isinstance(d, dict) else f"{d:.0f}"
        lines.append(
            f"| {v['agent']} | {v['paper_four'][0]}/{v['paper_four'][1]} | "
            f"{v['all_eight'][0]}/{v['all_eight'][1]} | "
            f"{v['controls_alarmed'][0]}/{v['controls_alarmed'][1]} | "
            f"{v['median_latency']:.1f} | {v['reward_detected'][0]}/{v['reward_detected'][1]}, "
            f"{v['reward_controls_alarmed']} controls | {v['armed_s_max']:.0f} s | "
            f"{v['too_short']} | {v['out_of_range_max']:.3f} | {dist} |")
    a = result["attribution"]["held-out"]
    lines += ["", f"the twin's class at each held-out detection: {a['right']}/{a['judged']} "
              "right; per agent: "
              + ", ".join(f"{k} {r}/{n}" for k, (r, n) in a["per_agent"].items()),
              "true -> named: " + "; ".join(
                  f"{t} -> " + ", ".join(f"{g} {n}" for g, n in row.items() if n)
                  for t, row in a["confusion"].items()),
              "controls' false alarms named: " + (", ".join(
                  f"{g} {n}" for g, n in a["controls_named"].items()) or "none")]
    return "\n".join(lines)
