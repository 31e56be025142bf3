"""A baseline profile fitted on known-good recordings (``idt-desk fit``, :func:`fit_profile`).

The runs' clean transitions (each run's rows before its first perturbation or modulation)
are taken in order as one stream, the way a loop's episodes follow one another: the symbols
(and the twin's residual scales) are fitted on the first run's first ``calibration_windows``
windows, as that run's own session fitted them, and the detectors' baseline on every window
after them, of every run. The pipeline is the first run's recorded one (its preset, detector
and budget), with the options given in its place. What it fitted is written as a profile
(:mod:`idt_desk.recordings.profile`) that ``run``/``gui --baseline``, ``IDTMonitor``,
``IDTCallback`` and ``Recorder`` take.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from idt_desk.errors import InputError

__all__ = ["CHANGES", "fit_profile", "judge_run"]

#: Events that end a run's clean stretch (what the loop did to itself from there on).
CHANGES = ("perturbation_on", "perturbation_pulse", "modulation_on", "impulse")
#: Rows handed to the session at a time.
BLOCK = 20_000


def _clean_rows(rec: Any) -> tuple[dict[str, np.ndarray], int]:
    """A recording's rows before its first change, as arrays; and how many."""
    tr = rec.transitions
    ev = rec.events
    stop = len(tr)
    if len(ev):
        changes = ev[ev["kind"].isin(CHANGES)]
        if len(changes):
            first = int(np.asarray(changes["i"], dtype=np.int64).min())
            start = int(tr["i"].iloc[0]) if len(tr) else 0
            stop = max(0, min(stop, first - start))
    names_s = [f"s_{j}" for j in range(len(rec.state_names))]
    names_n = [f"s_next_{j}" for j in range(len(rec.state_names))]
    names_a = [f"a_{j}" for j in range(len(rec.action_names))]
    head = tr.iloc[:stop]

    def cols(names: list[str]) -> np.ndarray:
        return np.asarray(head[names], dtype=np.float64).reshape(stop, len(names))

    out = {"s": cols(names_s), "s_next": cols(names_n),
           "a": cols(names_a) if names_a else None,
           "t": np.asarray(head["t"], dtype=np.float64),
           "reward": np.asarray(head["reward"], dtype=np.float64) if "reward" in head
           else None,
           "episode": np.asarray(head["episode"], dtype=np.float64) if "episode" in head
           else None}
    return out, stop


def fit_profile(runs: Sequence[str | Path], out: str | Path,
                options: dict[str, Any] | None = None,
                progress: Callable[[str], None] | None = None) -> Any:
    """Fit a profile on recordings ``runs`` and write it to ``out`` (see the module).

    ``options``: detector settings in place of the first run's (``detector``,
    ``false_alarms``, ``persist``, ``ewma_lambda``, ``drift``, ``phase_baseline``, ``k``);
    ``progress`` is told what is being fitted.
    Returns the :class:`~idt_desk.recordings.profile.Profile` written.

    Raises
    ------
    InputError
        A run that cannot be read, runs of different loops, a run without a clean
        stretch, too few windows for the baseline, or a bad option: one line each.
    """
    from idt_desk.live.loop import LoopSource
    from idt_desk.live.plugins import load_source
    from idt_desk.live.session import Session, SessionConfig
    from idt_desk.live.source import Batch
    from idt_desk.recordings import RecordingError, load_recording
    from idt_desk.recordings.profile import Profile, profile_document
    from idt_desk.settings import PIPELINE_KEYS, PipelineSettings, SettingError

    say_ = progress or (lambda text: None)
    recs = []
    for path in runs:
        try:
            recs.append(load_recording(path))
        except RecordingError as exc:
            raise InputError(str(exc)) from None
    first = recs[0]
    key = (first.state_names, first.action_names, first.config["source"].get("rate"))
    for rec in recs[1:]:
        if (rec.state_names, rec.action_names, rec.config["source"].get("rate")) != key:
            raise InputError(f"{rec.path}: another loop than {first.path} (its variables or "
                             "rate differ); a profile is fitted on runs of one loop")
    try:
        PipelineSettings.parse(dict(options or {}))
    except SettingError as exc:
        raise InputError(f"--{exc.field.replace('_', '-')}: {exc.why or exc}") from None
    # The first run's loop as its replay declares it (names, rate, episodes, twin, recorded
    # pipeline), with the value ranges its source declared at its calibration: the symbols
    # are fitted as its own session fitted them (a pendulum's rates over their energy bound).
    replay = load_source("replay")(path=str(first.path))
    cal = first.events[first.events["kind"] == "calibrated"] if len(first.events) else None
    ranges = cal.iloc[0].get("value_ranges") if cal is not None and len(cal) else None
    source = LoopSource(replay.state_names, replay.action_names, replay.rate,
                        replay.has_reward, replay.episode_steps, replay.twin(),
                        state_bins=replay.state_bins, action_bins=replay.action_bins,
                        value_ranges={k: (float(v[0]), float(v[1])) for k, v in
                                      (ranges if isinstance(ranges, dict) else {}).items()})
    source.env_id = replay.env_id
    source.recorded_source = replay.recorded_source
    source.twin_note = replay.twin_note
    pipeline = {k: v for k, v in (replay.recorded_pipeline() or {}).items()
                if k in PIPELINE_KEYS and k != "profile"}  # fitted afresh, whatever judged it
    replay.close()
    try:
        session = Session(SessionConfig(source="loop", speed=None,
                                        **{**pipeline, **(options or {})}), source=source)
    except ValueError as exc:
        raise InputError(f"{first.path}: {exc}") from None
    c = session.config
    rows, fitted_on, total = [], [], 0
    for rec in recs:
        got, n = _clean_rows(rec)
        if n == 0:
            raise InputError(f"{rec.path}: no clean transitions (a change from its first "
                             "step); fit on runs that start as they should")
        rows.append(got)
        fitted_on.append({"run": str(rec.path), "transitions": n})
        total += n
    session.rebuild_pipeline()
    preset = session.preset
    windows = 1 + (total - preset.window) // preset.stride if total >= preset.window else 0
    baseline = windows - c.calibration_windows
    if baseline < 2:
        raise InputError(f"the runs' {total:,} clean transitions make {windows:,} windows of "
                         f"{preset.window}; the symbols take {c.calibration_windows} and the "
                         "baseline needs at least 2 more")
    c.baseline_windows = baseline
    session.rebuild_pipeline()
    session.begin()
    say_(f"fitting on {total:,} transitions of {len(recs)} run(s): symbols on "
         f"{c.calibration_windows} windows, the baseline on {baseline:,}")
    episode_base, t_base = 0.0, 0.0
    for got in rows:
        n = len(got["s"])
        ep = got["episode"]
        if ep is not None:  # each run's episodes after the last one's
            ep = ep - np.nanmin(ep) + episode_base if np.isfinite(ep).any() else ep
            episode_base = float(np.nanmax(ep)) + 1 if np.isfinite(ep).any() else episode_base
        t = got["t"] - got["t"][0] + t_base
        t_base = float(t[-1]) + 1.0 / source.rate
        pos = 0
        while pos < n:
            hi = pos + session.plan(min(BLOCK, n - pos))
            sl = slice(pos, hi)
            session.advance(Batch(s=got["s"][sl], s_next=got["s_next"][sl],
                                  a=None if got["a"] is None else got["a"][sl],
                                  reward=None if got["reward"] is None else got["reward"][sl],
                                  episode=None if ep is None else ep[sl], t=t[sl]))
            pos = hi
    if session.monitor.baseline is None:
        got_, need = session.monitor.baseline_progress
        raise InputError(f"the baseline did not complete ({got_:,} of {need:,} windows)")
    doc = profile_document(session, fitted_on)
    profile = Profile.parse(doc).save(out)
    for g, cal in session.monitor.calibrations.items():
        if cal.too_short:
            say_(f"note: the {g} detector's baseline is short for its budget (thresholds "
                 f"inflated x{max(cal.inflation.values()):.2f}); "
                 f"{cal.needed_windows or 'more':,} windows would do")
    return profile


def judge_run(run: str | Path, profile: Any) -> dict[str, Any]:
    """A recording's rows judged by a baseline profile (a replay at full speed, headless).

    Returns ``alarms`` (IDT alarms raised), ``first_alarm`` (loop time of the first; None),
    ``fits`` (the profile check's verdict on the first windows; None: too few windows) and
    ``windows``. Raises :class:`~idt_desk.recordings.profile.ProfileError` (one line) for a
    run of another loop, :class:`InputError` for one that cannot be replayed.
    """
    from idt_desk.live.session import Session, SessionConfig, run_headless

    try:
        session = Session(SessionConfig(source="replay", settings={"path": str(run)},
                                        speed=None, profile=profile.setting()))
    except InputError:
        raise
    except ValueError as exc:
        raise InputError(f"{run}: {exc}") from None
    try:
        snap = run_headless(session)
        events = session.events_since(0)
        check = session.profile_check
    finally:
        session.close()
    on = [e for e in events if e["kind"] == "alarm_on" and e.get("metric") == "IDT"]
    return {"alarms": len(on), "first_alarm": float(on[0]["t"]) if on else None,
            "fits": None if check is None else bool(check["fits"]),
            "windows": int(snap.n_windows)}
