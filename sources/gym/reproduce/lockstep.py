"""Running one policy's trials together: :func:`run_group`, the task the executor spreads.

The trials of one policy, protocol and loop setting (a
:class:`~idt_desk_sources.gym.reproduce.config.TrialGroup`) step in lockstep through live
sessions, one batched forward pass per step; each trial's transitions are then judged
(:func:`~idt_desk_sources.gym.reproduce.judge.analyze_trial`) and its returns and Auto's
switches counted: one result row per trial. The executor's worker processes import
:func:`run_group` by name (pickled by reference).

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
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from idt_desk_sources.gym._source import ACTIONS
from idt_desk_sources.gym.reproduce.config import CONTROL, HAND, Trial, TrialGroup
from idt_desk_sources.gym.reproduce.judge import analyze_trial

from idt_desk.plugin import InputError


def _card(policy: str) -> dict[str, Any]:
    try:
        return json.loads(Path(policy).with_suffix(".json").read_text())
    except (OSError, ValueError):
        return {}


def _seed(task: TrialGroup, trial: Trial) -> int:
    return task.seed if trial.seed is None else trial.seed


def _protocol(task: TrialGroup) -> str:
    return ACTIONS[0] if task.deterministic else ACTIONS[1]


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
    from idt_desk_sources.gym._source import GymSource

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
    name = task.preset or first.presets[0]
    if name not in first.presets:
        for src in sources:
            src.close()
        raise InputError(f"--preset {name}: {task.env_id} takes {', '.join(first.presets)}")
    preset = PRESETS[name]
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
        # Auto's session needs no twin: the trial is judged with its own twins below.
        cfg = SessionConfig(source="gym", settings=dict(src.config), preset=preset.name,
                            twin=False,
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
            batches = GymSource.step_together(sources, n, info=False)
            for session, batch, parts in zip(sessions, batches, data, strict=True):
                session.advance(batch)
                parts.append((batch.s, batch.a, batch.s_next, batch.reward, batch.episode))
    except Exception as exc:  # the group's trials are reported failed; other groups go on
        failure = f"{type(exc).__name__}: {exc}"
    finally:
        for session in sessions:
            session.end()
    wall = time.perf_counter() - t_start
    twins = _twins(task) if not failure else []
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
                                     steps_per_episode=steps_per_episode, twins=twins,
                                     state_names=first.state_names,
                                     drift=task.drift))
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


def _twins(task: TrialGroup) -> list[tuple[str, Any]]:
    """The env's twins a trial is judged with: exact (suffix "") and 10 % off (``_off``).

    None when the reproduction asks for none (``twin``) or the env has none.
    """
    from idt_desk_sources.gym.reproduce.twin import MISMATCH

    from idt_desk.plugin import mujoco_twin

    if not task.twin:
        return []
    exact, _ = mujoco_twin(task.env_id)
    off, _ = mujoco_twin(task.env_id, MISMATCH)
    return [] if exact is None else [("", exact), ("_off", off)]


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
