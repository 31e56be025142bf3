"""Record any Python loop's (S, A, S') as an ordinary recording the dashboard can follow.

One line in a training script, an evaluation harness or a robot driver::

    with idt_desk.Recorder("runs/x", state_names=["x", "v"], action_names=["u"]) as rec:
        for ...:
            rec.add(s, a, s_next, reward=r)

writes ``runs/x`` as the dashboard's own sessions do (``transitions.csv``, ``windows.csv``,
``events.jsonl``, ``config.json``; flushed at least every 0.5 s, whole lines only), with the
windows, baseline and calibrated alarms computed by the same pipeline as the live dashboard.
``idt-desk watch runs/x`` follows it while it grows; ``load_recording`` and replay read it
like any other recording. Perturbations and modulations the loop applies itself are marked
with :meth:`Recorder.perturb` / :meth:`Recorder.modulate` (shaded bands, detection latency),
one-shot impulses with :meth:`Recorder.impulse`, remarks with :meth:`Recorder.note`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from idt_desk.live.source import Batch, Source

__all__ = ["Recorder"]


class LoopSource(Source):
    """The recorded loop as the session sees it: fed by :class:`Recorder`, never stepped.

    Any perturbation or modulation name is accepted: they are the loop's own (its code
    applies them; the recording marks when).
    """

    name = "loop"
    label = "Your loop"
    description = "Transitions a Python loop hands to idt_desk.Recorder."

    def __init__(self, state_names: Sequence[str], action_names: Sequence[str],
                 rate: float | None, has_reward: bool) -> None:
        super().__init__()
        self.state_names = tuple(str(n) for n in state_names)
        self.action_names = tuple(str(n) for n in action_names)
        self.has_reward = bool(has_reward)
        # Without a rate the loop's time is its step count and budgets count windows.
        self.rate = float(rate) if rate else 1.0
        self.default_budget = "1/h" if rate else "1/1000windows"

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset: the loop runs elsewhere."""

    def step(self, n: int) -> Batch:
        """Never called: :class:`Recorder` hands the session its batches."""
        raise RuntimeError("a loop's transitions come from Recorder.add, not from step")

    def set_perturbation(self, name: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Mark the loop's own perturbation on (params) or off (None)."""
        return _switch(self.active_perturbations, name, params)

    def set_modulation(self, name: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Mark the loop's own modulation on (params) or off (None)."""
        return _switch(self.active_modulations, name, params)


def _switch(active: dict[str, dict[str, Any]], name: str,
            params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Record ``name`` as on (with ``params``) or off (None) in ``active``."""
    if params is None:
        active.pop(name, None)
        return {}
    active[name] = dict(params)
    return dict(params)


def _rows(x: Any, width: int, what: str) -> np.ndarray:
    """One transition (a vector) or a batch (rows) as a 2-D float array of ``width`` columns."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim <= 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(f"{what}: expected {width} value(s) per transition, got shape "
                         f"{np.shape(x)}")
    return arr


class Recorder:
    """Write a loop's transitions as a recording, with the dashboard's metrics and alarms.

    Parameters
    ----------
    path
        The recording's directory (created; it must not hold a recording yet).
    state_names, action_names
        Names of the state and action variables (no actions: a passive system).
    rate
        Transitions per second of the loop's own time (a MuJoCo env's ``1 / dt``): times
        and false-alarm budgets per hour follow it. None: the time is the step count and the
        budget counts windows (1 false alarm per 1000 windows).
    reward
        Whether ``add`` is given rewards (a reward plot and alarm).
    preset, bins, window, stride, calibration_windows, baseline_windows, detector,
    false_alarms
        The pipeline, as ``idt-desk run`` takes it (``idt_desk.live.session.SessionConfig``).
    chunk
        Transitions gathered before the pipeline runs (the recording is flushed at least
        every ``flush_seconds`` all the same).
    """

    def __init__(
        self,
        path: str | Path,
        state_names: Sequence[str],
        action_names: Sequence[str] = (),
        *,
        rate: float | None = None,
        reward: bool = False,
        preset: str | None = None,
        bins: int | None = None,
        window: int | None = None,
        stride: int | None = None,
        calibration_windows: int = 20,
        baseline_windows: int | None = None,
        detector: str = "persistence",
        false_alarms: str | None = None,
        chunk: int = 1000,
        flush_seconds: float = 0.25,
    ) -> None:
        from idt_desk.live.session import Session, SessionConfig

        if not list(state_names):
            raise ValueError("state_names: a loop needs at least one state variable")
        if rate is not None and not (np.isfinite(rate) and rate > 0):
            raise ValueError(f"rate must be a positive number of transitions per second, "
                             f"got {rate!r}")
        self.path = Path(path)
        self.source = LoopSource(state_names, action_names, rate, reward)
        self._timed = rate is not None
        config = SessionConfig(source="loop", speed=None, preset=preset, bins=bins,
                               window=window, stride=stride,
                               calibration_windows=calibration_windows,
                               baseline_windows=baseline_windows, detector=detector,
                               false_alarms=false_alarms)
        self.session = Session(config, source=self.source, record=self.path)
        self.chunk = max(1, int(chunk))
        self.flush_seconds = float(flush_seconds)
        self._ds, self._da = len(self.source.state_names), len(self.source.action_names)
        self._blocks: list[tuple[np.ndarray, ...]] = []
        self._n_blocks = 0
        self._events: list[tuple[int, dict[str, Any]]] = []
        self.n_added = 0
        self._last = time.monotonic()
        self.closed = False
        self.session.begin()

    # -- the loop's side --------------------------------------------------------------------

    def add(self, s: Any, a: Any = None, s_next: Any = None, *, reward: Any = None,
            t: Any = None, episode: Any = None) -> None:
        """Add one transition (vectors) or a batch (rows): S, A, S'.

        Optionally the reward, the loop's time (default: the step count over ``rate``) and
        the episode index, each a number or one per row.
        """
        if self.closed:
            raise ValueError(f"{self.path}: the recorder is closed")
        if s_next is None:
            raise ValueError("add(s, a, s_next): S' is required")
        s_ = _rows(s, self._ds, "s")
        n_ = _rows(s_next, self._ds, "s_next")
        k = len(s_)
        if len(n_) != k:
            raise ValueError(f"s has {k} row(s) but s_next {len(n_)}")
        if self._da:
            if a is None:
                raise ValueError(f"a: this loop has {self._da} action variable(s)")
            a_ = _rows(a, self._da, "a")
            if len(a_) != k:
                raise ValueError(f"s has {k} row(s) but a {len(a_)}")
        else:
            a_ = np.empty((k, 0))
        r_ = np.full(k, np.nan) if reward is None else \
            np.broadcast_to(np.asarray(reward, dtype=np.float64).reshape(-1), (k,))
        if t is None:
            t_ = np.arange(self.n_added + 1, self.n_added + k + 1, dtype=np.float64) / \
                self.source.rate
        else:
            t_ = np.broadcast_to(np.asarray(t, dtype=np.float64).reshape(-1), (k,))
        e_ = np.full(k, np.nan) if episode is None else \
            np.broadcast_to(np.asarray(episode, dtype=np.float64).reshape(-1), (k,))
        self._blocks.append((s_, a_, n_, r_, t_, e_))
        self._n_blocks += k
        self.n_added += k
        now = time.monotonic()
        if self._n_blocks >= self.chunk or now - self._last >= self.flush_seconds:
            self._run()

    def perturb(self, name: str, on: bool = True, **params: Any) -> None:
        """Mark the loop's own perturbation ``name`` on (with parameters) or off.

        It acts from the next transition on: a shaded band, and latency measured from it.
        """
        self._mark("perturbation_on" if on else "perturbation_off", name=name,
                   **({"params": params} if on else {}))

    def impulse(self, name: str, **params: Any) -> None:
        """Mark a one-shot perturbation (a kick) at the next transition."""
        self._mark("perturbation_pulse", name=name, params=params)

    def modulate(self, name: str, on: bool = True, **params: Any) -> None:
        """Mark the loop's own modulation ``name`` engaged (with parameters) or released."""
        self._mark("modulation_on" if on else "modulation_off", name=name, auto=False,
                   **({"params": params} if on else {}))

    def note(self, text: str) -> None:
        """A remark at the next transition (a *note* event)."""
        self._mark("note", text=str(text))

    def _mark(self, kind: str, **fields: Any) -> None:
        if self.closed:
            raise ValueError(f"{self.path}: the recorder is closed")
        self._events.append((self.n_added, {"kind": kind, **fields}))

    # -- the pipeline's side ----------------------------------------------------------------

    def _run(self) -> None:
        """Hand what was added to the session, cut so every mark lands on a batch start."""
        self._last = time.monotonic()
        if not self._blocks:
            self._marks_at_end()
            return
        cols = [np.concatenate([b[j] for b in self._blocks]) for j in range(6)]
        self._blocks, self._n_blocks = [], 0
        s, a, n, r, t, e = cols
        total = len(s)
        i0 = self.session.n_transitions
        pos = 0
        while pos < total:
            at = i0 + pos
            events = []
            while self._events and self._events[0][0] <= at:
                events.append({**self._events.pop(0)[1], "row": -1})
            hi = total
            if self._events:
                hi = min(hi, max(self._events[0][0] - i0, pos + 1))
            hi = min(hi, pos + self.session.plan(hi - pos))
            sl = slice(pos, hi)
            self.session.advance(Batch(
                s=s[sl], s_next=n[sl], a=a[sl] if self._da else None,
                reward=r[sl] if self.source.has_reward else None,
                episode=None if np.isnan(e[sl]).all() else e[sl], t=t[sl], events=events))
            pos = hi

    def _marks_at_end(self) -> None:
        """Marks after the last transition: logged now, at that transition."""
        while self._events:
            _i, ev = self._events.pop(0)
            self.session.advance(Batch(s=np.empty((0, self._ds)), s_next=np.empty((0, self._ds)),
                                       events=[{**ev, "row": -1}]))

    def flush(self) -> None:
        """Run the pipeline on everything added and write it out now."""
        self._run()
        rec = self.session._recorder
        if rec is not None:
            rec.flush()

    def close(self, error: str | None = None) -> None:
        """Process what is left and close the recording (``session_end``, complete)."""
        if self.closed:
            return
        try:
            self._run()
            self._marks_at_end()
        finally:
            self.closed = True
            self.session._state = "error" if error else "stopped"
            self.session._error = error
            self.session.end()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(None if exc is None else f"{type(exc).__name__}: {exc}")

    # -- what the pipeline made -------------------------------------------------------------

    def snapshot(self, limit: int = 2000) -> Any:
        """The session's state (windows, baseline, alarms, events), as the dashboard sees it."""
        return self.session.snapshot(limit=limit)
