"""IDT metrics of any Gymnasium environment: a wrapper and a Stable-Baselines3 callback.

For researchers who never open the dashboard:

- :class:`IDTMonitor` wraps one ``gymnasium.Env`` and puts the latest finished window's
  metrics (P, H_f, H_b, dH and every other window key) in ``info["idt"]``;
- ``IDTCallback`` (a ``stable_baselines3`` ``BaseCallback``) follows every training env of
  an SB3 model and logs ``idt/P``, ``idt/H_f``, ``idt/H_b``, ``idt/dH`` and
  ``idt/unique_frac`` to the model's logger.

Both feed the same internal stream (symbolisers + :class:`~idt_desk.MetricEngine`). With
``record=`` either also writes its stream as an ordinary IDT Desk recording (its stream is a
session around the loop, and the recording is that session's: each window computed once),
which ``idt-desk watch`` follows while the env runs and replay reads afterwards, with the same
windows and flags.

The transition
--------------
S is the observation the agent acted on (the one ``reset`` or the previous ``step``
returned), A is the action passed to ``step`` and S' the observation ``step`` returns. At an
episode's last step S' is the terminal observation; the next ``reset`` starts a new S, so a
transition never spans two episodes. (Under SB3's vector envs, which reset by themselves,
S' of a finished episode is ``infos[i]["terminal_observation"]``.) Transitions are numbered
0, 1, ... across episodes; a window covers ``window`` consecutive transitions, which may
come from several episodes.

Spaces. A ``Box`` is flattened to its variables. A ``Discrete(n, start)`` is one variable
whose n values are each their own symbol, whatever ``bins`` says (it gets exactly n
equal-width bins over [start, start + n - 1], one per value). Other spaces (Dict, Tuple,
MultiDiscrete, ...) are refused: flatten them first (``gymnasium.wrappers.FlattenObservation``).

Calibration
-----------
Exactly as a live session (:mod:`idt_desk.live.session`): the first ``calibration_windows``
windows' transitions, W + (calibration_windows - 1) * stride of them, are buffered; the
state symboliser is fitted on their S rows and the action symboliser on their A rows
(z-score and bin edges frozen; a Discrete space's bins are its n values), then all of them
are symbolised and pushed to the engine, which gives the first ``calibration_windows``
windows at once; until then ``info["idt"]`` is absent. From then on transitions are copied
into a buffer and symbolised + pushed in one block each time a window ends (every ``stride``
transitions), so ``info["idt"]`` changes on the step that finishes a window. Symbolising
costs mostly per call, not per row: a block of 50 costs about what one transition would.
``block=`` makes blocks longer (less overhead per step, ``info["idt"]`` lagging by up to
that many steps; the windows are the same). Later values outside the calibrated range go
to the edge bins and are counted per window in ``out_of_range``.

Angles: a preset with ``angle_mode="wrap"`` wraps its ``angles`` to (-pi, pi] with bins over
the whole circle; ``"unwrap"`` and ``"none"`` use the values as the env gives them (a stream
cannot be unwrapped consistently from a calibration on its first seconds).

Importing this module imports gymnasium but neither torch nor stable_baselines3: those are
imported when ``IDTCallback`` is first looked up. ``import idt_desk`` does not import this
module.
"""

from __future__ import annotations

from typing import Any

from idt_desk.gym.monitor import IDTMonitor
from idt_desk.gym.stream import GENERIC_PRESET, IDT_COLUMNS, LOGGED_METRICS, resolve_preset
from idt_desk.gym.vector import IDTVectorMonitor

__all__ = [
    "GENERIC_PRESET",
    "IDT_COLUMNS",
    "LOGGED_METRICS",
    "IDTCallback",
    "IDTMonitor",
    "IDTVectorMonitor",
    "StopTrainingOnAlarm",
    "resolve_preset",
]


def __getattr__(name: str) -> Any:
    # PEP 562: ``IDTCallback`` is built (and stable_baselines3 imported) on first use.
    if name == "IDTCallback":
        from idt_desk.gym.callback import callback_class

        return callback_class()
    if name == "StopTrainingOnAlarm":
        from idt_desk.gym.callback import stop_on_alarm_class

        return stop_on_alarm_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
