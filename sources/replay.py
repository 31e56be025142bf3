"""Replay a recording through the same pipeline, at any speed.

The recorded transitions (written with 17 significant digits, so bit-exact) are streamed in
order; the session rebuilds the pipeline the recording started with, and re-applies the
recorded pipeline changes (re-symbolisation, baseline re-calibration) at the transitions they
were made at. The windows therefore come out identical to the recorded ones. Recorded
perturbation and modulation events are replayed too, at their recorded transitions, so plots
shade the same periods and latency counts from the same onset. Batches are cut at every
recorded event, so each one is handed over before the batch it precedes (``row`` -1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from idt_desk.recording import Recording, load_recording
from idt_desk.source import Batch, Param, Source

__all__ = ["ReplaySource"]

_PIPELINE = ("reconfigure", "calibrate_baseline")
_SHOWN = ("perturbation_on", "perturbation_off", "perturbation_pulse", "modulation_on",
          "modulation_off", "note")


class ReplaySource(Source):
    """Streams a recording's transitions; the session ends when the recording does."""

    name = "replay"
    label = "Replay a recording"
    description = "Re-run a recorded session through the IDT pipeline at any speed."
    settings = (Param("path", "", "Recording", help="recording directory"),)
    chunk = 50

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        if not self.config["path"]:
            raise ValueError("replay: set 'path' to a recording directory")
        self.recording: Recording = load_recording(self.config["path"])
        rec = self.recording
        #: Said once before the replay runs (the command line, the GUI's banner): what the
        #: recording lacks. None for a complete recording.
        self.notice: str | None = None
        if not rec.complete:
            self.notice = (f"{rec.path} is incomplete ({'; '.join(rec.warnings)}): the replay "
                           f"runs the {len(rec.transitions):,} transitions it holds")
        src = rec.config.get("source", {})
        self.state_names = tuple(rec.state_names)
        self.action_names = tuple(rec.action_names)
        self.has_reward = bool(src.get("has_reward", False))
        self.rate = float(src.get("rate", 1000.0)) or 1000.0
        self.episode_steps = src.get("episode_steps") or None
        #: The recorded source's name (its declarations label the replayed switches).
        self.recorded_source: str | None = src.get("name")
        self.view = str(src.get("view", ""))
        session = rec.config.get("session", {})
        self.metric_path = str(session.get("metric_path", "windows"))
        self._tokenizer = session.get("tokenizer")
        _metric = ("i", "P", "dH", "H_b", "alarm")
        self._turns = [] if rec.turns is None else [
            {k: v for k, v in turn.items() if k not in _metric} for turn in rec.turns]
        self._history = [t for t in self._turns if t.get("history")]
        self._turns = [t for t in self._turns if not t.get("history")]
        if self.metric_path == "turns" and len(self._turns) != len(rec.transitions):
            raise ValueError(f"replay: {rec.path} holds {len(rec.transitions)} transitions "
                             f"but {len(self._turns)} turns")
        tr = rec.transitions
        ds, da = len(self.state_names), len(self.action_names)
        self._s = tr[[f"s_{j}" for j in range(ds)]].to_numpy(np.float64)
        self._n = tr[[f"s_next_{j}" for j in range(ds)]].to_numpy(np.float64)
        self._a = tr[[f"a_{j}" for j in range(da)]].to_numpy(np.float64) if da else None
        self._t = tr["t"].to_numpy(np.float64)
        self._r = tr["reward"].to_numpy(np.float64) if self.has_reward else None
        ep = tr["episode"].to_numpy(np.float64)
        self._ep = None if np.isnan(ep).all() else ep.astype(np.int64)
        # The live view of the replayed system is drawn from the recorded state and settings.
        self._view_info = {k: float(v) for k, v in src.get("settings", {}).items()
                           if isinstance(v, int | float) and not isinstance(v, bool)}
        start = int(rec.config.get("start_index", tr["i"].iloc[0] if len(tr) else 0))
        self._events: list[tuple[int, dict[str, Any]]] = []
        self._pipeline0: dict[str, Any] | None = None
        # Ranges the recorded source declared at each calibration, so symbols come out the same.
        self._ranges: list[tuple[int, dict[str, tuple[float, float]]]] = []
        for ev in rec.events.to_dict("records") if len(rec.events) else []:
            ev = {k: v for k, v in ev.items() if not _missing(v)}
            kind, i = ev.get("kind"), int(ev.get("i", start)) - start
            if kind == "recording_start":
                self._pipeline0 = ev.get("pipeline")
            elif kind == "calibrated":
                ranges = ev.get("value_ranges") or {}
                self._ranges.append((i, {k: (float(v[0]), float(v[1]))
                                         for k, v in ranges.items()}))
            elif kind in _PIPELINE and not (i == 0 and ev.get("reason") == "recording"):
                self._events.append((i, ev))
            elif kind in _SHOWN:
                self._events.append((i, {**ev, "replayed": True}))
        self._events.sort(key=lambda e: e[0])
        self._pos = 0
        self._next_event = 0

    def pipeline_overrides(self) -> dict[str, Any] | None:
        """The pipeline configuration the recording started with (and its tokenizer).

        A recording made before the calibrated detectors has no ``detector``: it alarmed by
        the paper's rule over a 30-window baseline, and replays so.
        """
        p = self._pipeline0
        if p is not None and "detector" not in p:
            p = {**p, "detector": "paper", "baseline_windows": p.get("baseline_windows") or 30}
        if self._tokenizer:
            return {**(p or {}), "tokenizer": self._tokenizer}
        return p

    def value_ranges(self) -> dict[str, tuple[float, float]]:
        """The ranges the recorded source declared at the calibration now being replayed."""
        done = [r for i, r in self._ranges if i <= self._pos]
        return done[-1] if done else {}

    def reset(self, seed: int | None = None) -> None:
        """Rewind to the first recorded transition."""
        self._pos = 0
        self._next_event = 0

    def step(self, n: int) -> Batch:
        """The next ``n`` recorded transitions, cut so every event lands on a batch start."""
        lo = self._pos
        hi = min(lo + n, len(self._s))
        events = []
        while self._next_event < len(self._events) and self._events[self._next_event][0] <= lo:
            events.append({**self._events[self._next_event][1], "row": -1})
            self._next_event += 1
        if self._next_event < len(self._events):
            hi = min(hi, max(self._events[self._next_event][0], lo + 1))
        self._pos = hi
        sl = slice(lo, hi)
        return Batch(
            s=self._s[sl], s_next=self._n[sl],
            a=None if self._a is None else self._a[sl],
            reward=None if self._r is None else self._r[sl],
            episode=None if self._ep is None else self._ep[sl],
            t=self._t[sl], events=events, done=hi >= len(self._s),
            turns=None if self.metric_path != "turns" else
            [*(self._history if lo == 0 else ()), *self._turns[sl]],
            info={**self._view_info, "replay_progress": hi / max(len(self._s), 1),
                  **({"y": self._n[hi - 1].copy(), "time": float(self._t[hi - 1])}
                     if hi > lo else {})},
        )


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v))
