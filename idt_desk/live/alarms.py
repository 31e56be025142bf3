"""The session's alarm state: lights, onsets and their verdicts, Auto, symbol range.

:class:`Alarms` takes each block of judged windows (flags per metric, NaN: no verdict) and
keeps what the dashboard shows of them: the alarm light per metric, the number of alarms,
the latency of the latest perturbation's detection (an *onset*: the windows that hold its
transitions, within a horizon) and the automatic modulation's switches. It stamps every
event at the end of the window that caused it through the ``later`` callback the session
gives it, so events land in transition order however the loop was chunked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from idt_desk.detection.auto import AutoController
from idt_desk.detection.monitor import IDT_METRICS, base_metric
from idt_desk.detection.spec import COSTLY_RETURN
from idt_desk.metrics.twin import TWIN_METRICS
from idt_desk.words import change_text

if TYPE_CHECKING:
    from idt_desk.live.seams import CalibrationHost
    from idt_desk.live.source import Source

__all__ = [
    "COSTLY_RETURN",
    "DURING_ALARM",
    "HORIZON_TURNS",
    "HORIZON_WINDOWS",
    "Alarms",
    "attribution_text",
    "auto_controller",
    "baseline_overlap",
    "baseline_span",
    "during_alarm_text",
    "impact_text",
    "overlap_text",
    "severity_text",
]

#: A perturbation switched on while an earlier change's alarm is still on, in words.
DURING_ALARM = "a second change during an alarm (the alarm was already on, so it cannot time it)"

#: Windows after an onset's first window within which an alarm counts as its detection
#: (the turn path: the paper's injection turn and the two after it).
HORIZON_WINDOWS, HORIZON_TURNS = 100, 3

#: ``later(kind, at, **fields)``: log an event at the end of a window being processed.
Later = Callable[..., None]

#: Finished episodes' returns kept for the severity's "before the onset".
_RETURNS_KEPT = 20


def auto_controller(auto: Mapping[str, Any] | None) -> AutoController | None:
    """The Auto controller of a session's ``auto`` setting (None: off)."""
    if auto is None:
        return None
    return AutoController(auto["modulation"], dict(auto.get("params", {})),
                          int(auto.get("persist", 3)), int(auto.get("release", 10)))


class Alarms:
    """Alarm lights, the latest onset and Auto, updated from judged windows.

    Parameters
    ----------
    turns
        One window per turn (a dialogue): onsets count turns, not windows.
    source
        The session's source (Auto switches its modulation).
    later
        Logs an event at the end of a window being processed.
    attribute
        The session's attribution (None: none): called with a row of the latest block, it
        gives that window's ``{"attribution", "evidence", "twin"}``
        (:mod:`idt_desk.detection.attribution`).
    attribute_after
        Windows after an alarm's first at which its class is named (:attr:`attribute_after`).
    """

    def __init__(self, turns: bool, source: Source, later: Later,
                 attribute: Callable[[int], dict[str, Any]] | None = None,
                 attribute_after: int = 0) -> None:
        self.turns = turns
        self.source = source
        self.later = later
        self.attribute = attribute
        #: An alarm's class of change is named this many windows after its first (a window
        #: length: the first window that holds none of the alarm window's rows, which may
        #: end at the change itself), in an ``attributed`` event; the detection of
        #: an onset is told then too (``detected``, with its latency as of the alarm). 0 (the
        #: turn path): at the alarm itself.
        self.attribute_after = int(attribute_after)
        #: The latest alarm's class (``attributed``'s fields), for the panel.
        self.attribution: dict[str, Any] | None = None
        #: How far the latest alarm moved each component (its event's ``severity``).
        self.severity: dict[str, float] | None = None
        #: The latest IDT alarm: ``{"i": its first window's end, "t": that window's loop
        #: time}`` (None before one). The panel tells it apart from the onset's detection, and
        #: its class from an earlier alarm's (``attribution["alarm_i"]``).
        self.latest_alarm: dict[str, Any] | None = None
        #: Windows (the session's count) whose class is still to be named: the first window
        #: of the alarm each is for (its end transition).
        self._due: dict[int, int] = {}
        #: The light of each detector: on while its latest judged window alarmed.
        self.alarm = {m: False for m in (*IDT_METRICS, "IDT", "twin", "reward")}
        #: IDT alarms so far (rising edges).
        self.n_alarms = 0
        #: Latency bookkeeping of the latest perturbation switched on (None: none yet).
        self.onset: dict[str, Any] | None = None
        #: The automatic modulation (None: off).
        self.auto: AutoController | None = None
        #: (end transition, return) of the latest finished episodes.
        self._returns: list[tuple[int, float]] = []
        #: Windows an alarm's severity averages, up to its first (the detector's
        #: :meth:`~idt_desk.detection.registry.Detector.memory`; the session sets it).
        self.memory = 1
        #: Each component's z of the latest judged windows (``memory`` of them at most).
        self._recent: dict[str, np.ndarray] = {}

    def new_onset(self, name: str | None, i: int, impulse: bool = False) -> None:
        """Start measuring latency: a perturbation went on at transition ``i``."""
        horizon = HORIZON_TURNS if self.turns else HORIZON_WINDOWS
        self.onset = {"name": name, "i": i, "first_window": None, "latency": None,
                      "horizon": horizon, "expired": False, "impulse": bool(impulse),
                      "unit": "turn" if self.turns else "window", "z_sum": {}, "z_n": {},
                      # An alarm already on (an earlier change's) is not this one's detection:
                      # only an alarm that rises after it has cleared is. Until then it is a
                      # second change during an alarm, named by the first window that holds
                      # only what followed it (:meth:`_judge_onset`).
                      "carried": bool(self.alarm["IDT"]),
                      "carried_from": (self.latest_alarm or {}).get("i")
                      if self.alarm["IDT"] else None,
                      # The returns of the episodes that ended before it (the latest kept).
                      "before": [r for end, r in self._returns if end <= i]}

    def episode_end(self, i: int, ret: float, length: int | None) -> None:
        """An episode ended at transition ``i`` with return ``ret`` (``length`` steps).

        Each episode wholly after the latest onset says what the perturbation cost so far: an
        ``impact`` event with the mean return of those episodes against the mean of the ones
        that ended before the onset (the latest :data:`_RETURNS_KEPT`), in percent and in
        their σ (``episodes_after``: how many it averages).
        """
        onset = self.onset
        if onset is not None and length is not None and i - int(length) >= onset["i"] \
                and onset.get("off_i") is None:
            before = np.array(onset["before"])
            onset.setdefault("after", []).append(float(ret))
            if before.size:
                # Logged at every whole episode after the onset (the mean of all of them so
                # far): a run's listing and its summary say the latest cost, not the first.
                onset["impact"] = self._impact(before, np.array(onset["after"]))
                self.later("impact", at=int(i), name=onset["name"], onset_i=onset["i"],
                           **onset["impact"])
        self._returns.append((int(i), float(ret)))
        del self._returns[:-_RETURNS_KEPT]

    @staticmethod
    def _impact(before: np.ndarray, after: np.ndarray) -> dict[str, Any]:
        """The mean return of whole episodes after an onset against the ones before it."""
        mean, ret = float(before.mean()), float(after.mean())
        sd = float(before.std(ddof=1)) if before.size > 1 else float("nan")
        change = (ret - mean) / abs(mean) if mean else float("nan")
        return {"return": ret, "baseline_return": mean, "episodes": int(before.size),
                "episodes_after": int(after.size), "change": change,
                "sigma": (ret - mean) / sd if sd > 0 else float("nan"),
                "costly": bool(change <= -COSTLY_RETURN)}

    def onset_off(self, name: str | None, i: int) -> None:
        """The perturbation latency is measured from has gone off at transition ``i``."""
        if self.onset is not None and self.onset["name"] == name:
            self.onset["off_i"] = i

    def update(self, table: Mapping[str, np.ndarray], flags: Mapping[str, np.ndarray],
               metrics: tuple[str, ...], windows_before: int,
               z: Mapping[str, np.ndarray] | None = None) -> None:
        """Lights, alarm events, latency and Auto from a block of judged windows.

        ``metrics`` are the monitor's; ``windows_before`` counts the session's windows
        before this block (onsets count windows across blocks); ``z`` the windows' metrics
        in baseline σ (``Monitor.zscores``), for the detection's severity.
        """
        judged = np.flatnonzero(np.isfinite(flags["IDT"]))
        if not judged.size:
            return
        ends = table["end"]
        idt = flags["IDT"][judged] == 1.0
        before = np.concatenate([[self.alarm["IDT"]], idt[:-1]])
        self.n_alarms += int(np.count_nonzero(idt & ~before))
        prev = {m: self._recent.get(m, np.empty(0)) for m in (z or {}) if m not in TWIN_METRICS}
        recent = {m: np.concatenate([v, z[m][judged]]) for m, v in prev.items()}
        times = table.get("t")
        for k in np.flatnonzero(idt != before):
            j = judged[k]
            on = flags["IDT"][j] == 1.0
            got = {}
            if on:
                self.latest_alarm = {"i": int(ends[j]), "t": None if times is None
                                     else float(times[j])}
            if on and self.attribute_after:
                self._due.setdefault(windows_before + int(j) + self.attribute_after,
                                     int(ends[j]))
            elif on:
                got = self._attribute(int(j))
                self.attribution = {**got, "alarm_i": int(ends[j])} if got else None
            if on and recent:  # how far each component moved: its mean z up to the alarm
                self.severity = self._moved(
                    {m: v[:len(prev[m]) + int(k) + 1] for m, v in recent.items()})
                got = {**got, "severity": self.severity}
            self.later("alarm_on" if on else "alarm_off", at=int(ends[j]),
                       metric="IDT", window_start=int(table["start"][j]), **got)
        self._recent = {m: v[-self.memory:] for m, v in recent.items()}
        # The reward's own alarm episodes are logged too (metric "reward"): the plot's marks
        # and the light then have the log's word behind them.
        rj = np.flatnonzero(np.isfinite(flags["reward"])) if "reward" in flags else judged[:0]
        if rj.size:
            r_on = flags["reward"][rj] == 1.0
            r_before = np.concatenate([[self.alarm["reward"]], r_on[:-1]])
            for j in rj[r_on != r_before]:
                self.later("alarm_on" if flags["reward"][j] == 1.0 else "alarm_off",
                           at=int(ends[j]), metric="reward", window_start=int(table["start"][j]))
        # Published whole: a snapshot (another thread) never sees half of the lights changed.
        self.alarm = {m: bool(flags[m][judged[-1]] == 1.0) if m in flags else on
                      for m, on in self.alarm.items()}
        onset = self.onset
        if onset is not None and onset["latency"] is None and not onset.get("logged"):
            self._judge_onset(onset, table, flags, judged, windows_before, z or {})
        self._name_due(ends, windows_before)
        if self.auto is not None:
            for j, what in self.auto.update(idt):
                self._auto_switch(what, int(ends[judged[j]]), int(table["start"][judged[j]]))

    def _moved(self, upto: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Each component's mean z over its latest :attr:`memory` windows of ``upto``."""
        out = {}
        for m, v in upto.items():
            w = v[-self.memory:]
            w = w[np.isfinite(w)]
            if w.size:
                out[m] = round(float(w.mean()), 3)
        return out

    def _judge_onset(self, onset: dict[str, Any], table: Mapping[str, np.ndarray],
                     flags: Mapping[str, np.ndarray], judged: np.ndarray,
                     windows_before: int, z: Mapping[str, np.ndarray]) -> None:
        """Latency of the onset from these judged windows; its verdict once it is known.

        The verdict is stamped at the window that decides it, whatever the blocks the loop
        was cut into (the same at every speed): ``detected`` at the first alarmed window
        holding perturbed transitions within the horizon; ``not_detected`` at the horizon's
        last window, or at the first window without perturbed transitions once the
        perturbation is off, whichever comes first.
        """
        ends, starts = table["end"], table["start"]
        # Windows that hold perturbed transitions: ending after the onset and, once it is
        # off, starting before it went off.
        seen = judged[ends[judged] > onset["i"]]
        off = onset.get("off_i")
        after = seen[starts[seen] >= off] if off is not None else seen[:0]
        if off is not None:
            seen = seen[starts[seen] < off]
        if seen.size and onset["first_window"] is None:
            onset["first_window"] = windows_before + int(seen[0])
        last = seen[:0]
        if onset["first_window"] is not None:
            pos = windows_before + seen - onset["first_window"]
            last = seen[pos == onset["horizon"] - 1]  # the horizon's last window
            seen = seen[pos < onset["horizon"]]
        alarmed = flags["IDT"][seen] == 1.0
        if onset.get("carried"):
            cleared = np.flatnonzero(~alarmed)
            clear_at = int(cleared[0]) if cleared.size else alarmed.size
            # The first window that holds only what followed the onset, while the earlier
            # alarm is still on: the alarm cannot time this change, but that window's class
            # says what changed (a second change during an alarm), told at once in an
            # ``attributed`` event; the verdict still waits for the alarm to clear and rise.
            only_after = np.flatnonzero(starts[seen] >= onset["i"])
            if not onset.get("during_alarm") and only_after.size and only_after[0] < clear_at:
                row = int(seen[only_after[0]])
                onset["during_alarm"] = True
                onset["attribution"] = self._attribute(row)
                self.later("attributed", at=int(ends[row]), alarm_i=onset["carried_from"],
                           onset_i=onset["i"], name=onset["name"], during_alarm=True,
                           **onset["attribution"])
            alarmed[:clear_at] = False
            if cleared.size:
                onset["carried"] = False
        hits = seen[alarmed]
        # How far each component moved: its mean σ over the perturbed windows up to the
        # detection (or all of them so far). The twin's channels are the attribution's
        # evidence, told with the class.
        upto = seen[seen <= hits[0]] if hits.size else seen
        for m, zm in z.items():
            if m in TWIN_METRICS:
                continue
            v = zm[upto]
            v = v[np.isfinite(v)]
            onset["z_sum"][m] = onset["z_sum"].get(m, 0.0) + float(v.sum())
            onset["z_n"][m] = onset["z_n"].get(m, 0) + int(v.size)
        if hits.size:
            onset["latency"] = windows_before + int(hits[0]) - onset["first_window"]
            onset["alarm_i"] = int(ends[hits[0]])  # the alarm that detected it
            if self.attribute_after:  # told with its class, once that is named
                onset["due"] = windows_before + int(hits[0]) + self.attribute_after
                self._due.setdefault(onset["due"], int(ends[hits[0]]))
            else:
                onset["attribution"] = self._attribute(int(hits[0]))
                self._verdict(onset, at=int(ends[hits[0]]))
        elif last.size:
            onset["expired"] = True
            self._verdict(onset, at=int(ends[last[0]]))
        elif after.size:
            # Every window holding the perturbed transitions judged: none alarmed.
            self._verdict(onset, at=int(ends[after[0]]))

    def _verdict(self, onset: dict[str, Any], at: int) -> None:
        """Log once whether the onset's perturbation was detected (the event log's latency).

        ``detected``: the latency in windows (turns) after the onset's first window;
        ``not_detected``: the horizon ran out, or the perturbation went off undetected (with
        ``during_alarm`` and the class of change of the first window after it, where it came
        during an earlier alarm still on then).
        """
        if onset.get("logged"):
            return
        onset["logged"] = True
        common = {"name": onset["name"], "onset_i": onset["i"], "unit": onset["unit"]}
        if onset["latency"] is not None:
            severity = {m: onset["z_sum"][m] / n for m, n in onset["z_n"].items() if n}
            onset["severity"] = severity
            self.later("detected", at=at, latency=onset["latency"], severity=severity,
                       **onset.get("attribution", {}), **common)
        else:
            during = ({"during_alarm": True, "alarm_from": onset.get("carried_from"),
                       **onset.get("attribution", {})} if onset.get("during_alarm") else {})
            self.later("not_detected", at=at, horizon=onset["horizon"],
                       off=onset.get("off_i") is not None and not onset.get("expired"),
                       **({"alarm_carried": True} if onset.get("carried") else {}),
                       **during, **common)

    def _attribute(self, row: int) -> dict[str, Any]:
        """The attribution of an alarm at ``row`` of the latest block ({}: none)."""
        got = self.attribute(row) if self.attribute is not None else None
        return dict(got) if got else {}

    def _name_due(self, ends: np.ndarray, windows_before: int) -> None:
        """Name the class of the alarms whose window to name it at is in this block.

        An ``attributed`` event for each (the alarm's first window's end, ``alarm_i``); the
        onset detected by that alarm gets its ``detected`` verdict now, with the class.
        """
        for due in sorted(d for d in self._due if windows_before <= d < windows_before + len(ends)):
            alarm_i = self._due.pop(due)
            row = due - windows_before
            got = self._attribute(row)
            self.later("attributed", at=int(ends[row]), alarm_i=alarm_i, **got)
            self.attribution = {**got, "alarm_i": alarm_i} if got else None
            onset = self.onset
            if onset is not None and onset.get("due") == due and not onset.get("logged"):
                onset["attribution"] = got
                self._verdict(onset, at=int(ends[row]))

    def flush(self, at: int) -> None:
        """The loop ended: tell a detection whose class was still to be named, without it."""
        onset = self.onset
        self._due.clear()
        if onset is not None and onset.get("due") is not None and not onset.get("logged"):
            onset["attribution"] = {"attribution": "unknown", "evidence": (
                "the loop ended before a window after the alarm held only changed data")}
            self._verdict(onset, at=at)

    def _auto_switch(self, what: str, at: int, window_start: int) -> None:
        name = self.auto.modulation
        if what == "engage":
            params = self.source.set_modulation(name, self.auto.params)
            self.later("modulation_on", at=at, name=name, params=params, auto=True,
                       window_start=window_start)
        else:
            self.source.set_modulation(name, None)
            self.later("modulation_off", at=at, name=name, auto=True,
                       window_start=window_start)

    def auto_state(self) -> dict[str, Any] | None:
        """Auto as a snapshot shows it (None: off)."""
        a = self.auto
        return None if a is None else {"modulation": a.modulation, "params": a.params,
                                       "persist": a.persist, "release": a.release,
                                       "engaged": a.engaged}


def baseline_span(session: CalibrationHost) -> tuple[int, int] | None:
    """Transitions ``[first, end)`` the calibration still to come is made of; None once set.

    The symbols' calibration windows (while the symbols are not calibrated) and the
    baseline's windows: a perturbation on during them becomes part of what "normal" is, and
    the alarm calibrated on it cannot see it. ``end`` is the end of the baseline's last
    window; on the turn path the baseline is the next turns.
    """
    mon = session.monitor
    if mon.baseline is not None:
        return None
    have, need = mon.baseline_progress
    left = need - have
    if session.config.metric_path == "turns":
        end = session.n_transitions + left
        return end - need, end
    window, stride = session.preset.window, session.preset.stride
    if not session.pipeline.calibrated:
        first = session.offset
        end = first + window + (session.config.calibration_windows + need - 1) * stride
        return first, end
    end = session.next_window_end() + (left - 1) * stride
    return end - window - (need - 1) * stride, end


def baseline_overlap(session: CalibrationHost, on: int, off: int | None
                     ) -> dict[str, Any] | None:
    """The overlap of a perturbation on over transitions ``[on, off)`` with the calibration.

    None when there is none (or the baseline is set); otherwise the event's fields:
    ``first`` and ``end`` of the span (:func:`baseline_span`), their loop times ``first_t``
    and ``end_t`` at the source's rate, and ``unit`` ("turn" or "s").
    """
    span = baseline_span(session)
    if span is None:
        return None
    first, end = span
    if on >= end or (off is not None and off <= first):
        return None
    turns = session.config.metric_path == "turns"
    rate = 1.0 if turns else float(session.source.rate)
    return {"first": int(first), "end": int(end), "first_t": first / rate, "end_t": end / rate,
            "unit": "turn" if turns else "s"}


def overlap_text(name: str, overlap: dict[str, Any]) -> str:
    """A ``baseline_overlap`` in words: what is wrong and until when the calibration runs."""
    if overlap.get("unit") == "turn":  # turns 1..N: no symbols, the baseline's turns
        return (f"{name} falls into the baseline's turns (until turn {int(overlap['end'])}): "
                "the baseline takes it for normal, and the alarm calibrated on it cannot see "
                "it")
    return (f"{name} is on while the symbols and the baseline are calibrated (until "
            f"{float(overlap['end_t']):,.2f} s of loop time): the baseline takes it for "
            "normal, and the alarm calibrated on it cannot see it")


#: Components as the panels name them.
_NAMES = {"P": "P", "H_f": "H_f", "H_b": "H_b", "dH": "ΔH", "reward": "reward"}


def _component_name(m: str) -> str:
    """"ΔH", or one part's: "ΔH (back leg)"."""
    base, _, part = m.partition("@")
    name = _NAMES.get(base, base)
    return f"{name} ({part.replace('_', ' ')})" if part else name


def attribution_text(event: Mapping[str, Any] | None) -> str:
    """An alarm's class of change in words, with its evidence.

    "actuator — physics intact (…): the action given the state changed"; a class not named
    (``unknown``) says why. No study's score: how often the rule is right is a figure of the
    documentation, which a study regenerates.
    """
    if not event or not event.get("attribution"):
        return ""
    words = event.get("evidence")
    return event["attribution"] + (f" — {words}" if isinstance(words, str) and words else "")


def during_alarm_text(event: Mapping[str, Any]) -> str:
    """A ``not_detected`` verdict of a change that came during an alarm, with its class."""
    named = attribution_text(event)
    return DURING_ALARM + (f"; what changed after it: {named}" if named else "")


def severity_text(severity: Mapping[str, float] | None, top: int = 4,
                  beyond: Callable[[str], float] | None = None) -> str:
    """How far each component moved, largest first: "ΔH −5.2σ, H_b +1.7σ; reward −0.1σ".

    ``top`` components at most, except that with ``beyond`` (a component's threshold in σ,
    ``Baseline.k_of``) every component past its threshold is named, however many.
    """
    if not severity:
        return ""
    ranked = sorted(((m, v) for m, v in severity.items()
                     if base_metric(m) in IDT_METRICS and np.isfinite(v)),
                    key=lambda mv: -abs(mv[1]))
    idt = [mv for j, mv in enumerate(ranked)
           if j < top or (beyond is not None and abs(mv[1]) >= beyond(mv[0]))]
    text = ", ".join(f"{_component_name(m)} {v:+.1f}σ".replace("-", "−") for m, v in idt)
    r = severity.get("reward")
    if r is not None and np.isfinite(r):
        text += f"; reward {r:+.1f}σ".replace("-", "−")
    return text


def impact_text(impact: Mapping[str, Any] | None) -> str:
    """The return's change in words: "return −4.6 % (−21σ) since the onset: costly"."""
    if not impact:
        return ""
    change, sigma = impact.get("change"), impact.get("sigma")
    if not isinstance(change, int | float) or not np.isfinite(change):
        return ""
    sig = f" ({sigma:+.1f}σ)" if isinstance(sigma, int | float) and np.isfinite(sigma) else ""
    word = "costly" if impact.get("costly") else "cheap" if change <= 0 else "no cost, a gain"
    n = int(impact.get("episodes_after", 1))
    after = "the first whole episode" if n == 1 else f"{n} whole episodes"
    return (f"return {change_text(change, COSTLY_RETURN)}{sig} over {after} after the onset, "
            f"against {impact.get('episodes', '?')} before it: {word}").replace("-", "−")
