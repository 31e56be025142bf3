"""A loop that runs elsewhere, as a session sees it, and the marks of what it does itself.

:class:`LoopSource` is the source of a session fed by a caller (``idt_desk.Recorder``, the
Gymnasium wrapper and callback): it declares the loop's names, rate, episodes, twin and
defaults, and is never stepped. :class:`Marks` is how every such loop marks a perturbation,
an impulse, a modulation or a note of its own at its next transition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from idt_desk.detection.spec import (
    CONTROL_BASELINE_WINDOWS,
    CONTROL_BUDGET,
    CONTROL_DETECTOR,
    DEFAULT_BUDGET,
    EPISODE_BUDGET,
    NO_RATE_BUDGET,
)
from idt_desk.live.source import Batch, Source
from idt_desk.metrics.twin import Twin
from idt_desk.recordings.files import json_line

__all__ = ["LoopSource", "Marks"]


class LoopSource(Source):
    """The recorded loop as the session sees it: fed by :class:`Recorder`, never stepped.

    Any perturbation or modulation name is accepted: they are the loop's own (its code
    applies them; the recording marks when).
    """

    name = "loop"
    label = "Your loop"
    description = "Transitions a Python loop hands to idt_desk.Recorder."

    def __init__(self, state_names: Sequence[str], action_names: Sequence[str],
                 rate: float | None, has_reward: bool, episode_steps: int | None = None,
                 twin: Twin | None = None, *, control: bool = False,
                 state_bins: int | None = None, action_bins: int | None = None,
                 value_ranges: Mapping[str, tuple[float, float]] | None = None) -> None:
        super().__init__()
        #: The loop's twin, where the caller gave one (``Source.twin``).
        self._twin = twin
        self.episode_steps = episode_steps
        self.state_names = tuple(str(n) for n in state_names)
        self.action_names = tuple(str(n) for n in action_names)
        self.has_reward = bool(has_reward)
        self.state_bins, self.action_bins = state_bins, action_bins
        self._ranges = dict(value_ranges or {})
        #: The env's registered id, where the caller knows it (a profile is checked by it).
        self.env_id: str | None = None
        # Without a rate the loop's time is its step count and budgets count windows (its
        # episodes, with a time limit): one fallback for every loop (NO_RATE_BUDGET).
        self.rate = float(rate) if rate else 1.0
        if control:  # a policy acting in an environment: the gym source's defaults
            self.default_detector = CONTROL_DETECTOR
            self.default_baseline = CONTROL_BASELINE_WINDOWS
        self.default_budget = (CONTROL_BUDGET if control else DEFAULT_BUDGET) if rate else \
            EPISODE_BUDGET if episode_steps else NO_RATE_BUDGET

    def value_ranges(self) -> dict[str, tuple[float, float]]:
        """The ranges the caller declared (a Discrete space's values), by variable name."""
        return dict(self._ranges)

    def describe(self) -> dict[str, Any]:
        """The loop's twin, where it is a MuJoCo env's copy: a replay rebuilds it from this."""
        loop = {"env_id": self.env_id} if self.env_id else {}
        env_id = getattr(self._twin, "env_id", None)
        if env_id is None or getattr(self._twin, "mismatch", 0.0):
            return loop
        return {**loop, "twin": {"env_id": str(env_id)}}

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


def _finite_fields(fields: Any, where: str) -> None:
    """Refuse NaN and infinities in a mark's fields: JSON would hold them as null."""
    if isinstance(fields, Mapping):
        for k, v in fields.items():
            _finite_fields(v, f"{where}.{k}" if where else str(k))
    elif isinstance(fields, list | tuple):
        for j, v in enumerate(fields):
            _finite_fields(v, f"{where}[{j}]")
    elif isinstance(fields, float | np.floating) and not np.isfinite(fields):
        raise ValueError(f"{where} {fields}: not a finite number (a recording holds numbers, "
                         "text, lists and dicts; NaN would be stored as null)")


class Marks:
    """What a loop does itself, marked at its next transition: the one way for every loop.

    :class:`Recorder` and the Gymnasium wrapper's and callback's ``recorder(s)`` mark with
    these; a subclass says where a checked mark goes (``_queue_mark``).
    """

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
        """Check a mark (refused here if a recording could not hold it), then queue it."""
        name = fields.get("name", "")
        if kind != "note" and (not isinstance(name, str) or not name.strip()):
            # A recording whose event had a name of 5 was written, then refused whole.
            raise TypeError(f"{kind}: the name must be a non-empty string, got {name!r}")
        what = " ".join(str(x) for x in (kind, fields.get("name")) if x)
        try:
            json_line(fields)
        except TypeError as exc:
            raise TypeError(f"{what}: {exc}; give numbers, text, lists or dicts") from None
        _finite_fields(fields, what)
        self._queue_mark(kind, fields)

    def _queue_mark(self, kind: str, fields: dict[str, Any]) -> None:
        raise NotImplementedError
