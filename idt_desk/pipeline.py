"""The one pipeline from (S, A, S') rows to flagged windows.

:class:`WindowStage` symbolises transitions with symbolisers calibrated on the first windows,
pushes them through the :class:`~idt_desk.metrics.engine.MetricEngine`, and gives each window the
mean of per-transition columns over its W transitions (reward, the fraction clamped to an
edge bin) and the value of others at its last transition (loop time, episode).
:func:`judge` flags windows with a :class:`~idt_desk.detection.monitor.Monitor`: no verdict (NaN)
for
the windows the symbols were calibrated on and for the baseline's.

The live session (``idt_desk.live.session``), the Gymnasium wrapper and SB3 callback
(``idt_desk.gym``) and the reproductions that run sessions all go through these two, so a
wrapper's windows and alarms equal a session's on the same stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from idt_desk.detection.detectors import DetectorSpec, parse_budget
from idt_desk.detection.monitor import ADJUSTED_METRICS, IDT_METRICS, Monitor
from idt_desk.metrics.engine import MetricEngine
from idt_desk.metrics.presets import Preset
from idt_desk.metrics.symbolize import Symbolizer

__all__ = ["FLAG_COLUMNS", "WindowStage", "build_monitor", "judge"]

#: The flag column of each detector in a window table.
FLAG_COLUMNS = {"P": "x_P", "H_f": "x_H_f", "H_b": "x_H_b", "dH": "x_dH", "IDT": "x_IDT",
                "reward": "x_reward", **{m: f"x_{m}" for m in (*ADJUSTED_METRICS, "IDT_adj")}}


class WindowStage:
    """Symbols, engine and per-window means: transitions in, metric windows out.

    Parameters
    ----------
    preset
        Window W and stride (the symbolisers carry the bins and groups).
    sym_s, sym_a
        The state's and the action's symbolisers (``sym_a`` None: a passive source).
    calibration_windows
        The symbols are fitted on the first this-many windows' transitions.
    correction
        The engine's entropy correction (None or "miller-madow").
    mean_columns
        Per-transition columns averaged over each window's W transitions.
    end_columns
        Per-transition columns read at each window's last transition.

    """

    def __init__(
        self,
        preset: Preset,
        sym_s: Symbolizer,
        sym_a: Symbolizer | None,
        *,
        calibration_windows: int,
        correction: str | None = None,
        mean_columns: Sequence[str] = ("reward",),
        end_columns: Sequence[str] = ("t",),
    ) -> None:
        self.preset = preset
        self.sym_s, self.sym_a = sym_s, sym_a
        self.engine = MetricEngine(preset.window, preset.stride, has_action=sym_a is not None,
                                   correction=correction)
        #: Transitions the symbols are calibrated on.
        self.calibration_transitions = (
            preset.window + (int(calibration_windows) - 1) * preset.stride)
        self.mean_columns = tuple(mean_columns)
        self.end_columns = tuple(end_columns)
        # Per-transition columns of the latest transitions: the means', clamped?, the ends'.
        self._tail = np.empty((0, len(self.mean_columns) + 1 + len(self.end_columns)))

    @property
    def calibrated(self) -> bool:
        """Whether the symbols are fitted."""
        return self.sym_s.calibrated

    def fit(self, s: np.ndarray, a: np.ndarray | None,
            ranges_s: Mapping[int, tuple[float, float]] | None = None,
            ranges_a: Mapping[int, tuple[float, float]] | None = None) -> None:
        """Fit the symbols on the first ``calibration_transitions`` rows of S (and A)."""
        need = self.calibration_transitions
        self.sym_s.fit(np.asarray(s)[:need], ranges_s or {})
        if self.sym_a is not None:
            self.sym_a.fit(np.asarray(a)[:need], ranges_a or {})

    def push(self, s: np.ndarray, a: np.ndarray | None, s_next: np.ndarray,
             columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """Symbolise and push rows; return the windows they finish, or None.

        A window has the engine's columns, ``start`` and ``end`` (transitions from this
        stage's first row), ``out_of_range`` and the mean and end columns.
        """
        k = len(s)
        # S and S' in one call: the symboliser costs far more per call than per row.
        sn, out_sn = self.sym_s.symbolize(np.concatenate([s, s_next]))
        out = out_sn[:k] | out_sn[k:]
        a_sym = None
        if self.sym_a is not None:
            a_sym, out_a = self.sym_a.symbolize(a)
            out = out | out_a
        block = np.column_stack(
            [*(np.asarray(columns[c], dtype=np.float64) for c in self.mean_columns), out,
             *(np.asarray(columns[c], dtype=np.float64) for c in self.end_columns)])
        tail = np.concatenate([self._tail, block])
        w = self.engine.push(sn[:k], sn[k:], a_sym)
        W = self.preset.window
        self._tail = tail[-W:]
        m = len(w["start"])
        if m == 0:
            return None
        table = dict(w)
        end = w["start"] + W
        table["end"] = end
        idx_end = end - 1 - (self.engine.n_seen - len(tail))
        nm = len(self.mean_columns) + 1
        csum = np.vstack([np.zeros((1, nm)), np.cumsum(tail[:, :nm], axis=0)])
        means = (csum[idx_end + 1] - csum[idx_end + 1 - W]) / W
        for j, c in enumerate(self.mean_columns):
            table[c] = means[:, j]
        table["out_of_range"] = means[:, nm - 1]
        for j, c in enumerate(self.end_columns):
            table[c] = tail[idx_end, nm + j]
        return table


def judge(monitor: Monitor, table: Mapping[str, np.ndarray], first: int, skip_first: int
          ) -> tuple[dict[str, np.ndarray], int | None]:
    """Flags of new windows (1.0 / 0.0; NaN: no verdict) and where the baseline completed.

    ``first`` is the index of the table's first window among the pipeline's windows; the
    first ``skip_first`` of those (the symbols' calibration windows) are never judged, the
    monitor's baseline windows that follow get no verdict either. Returns the flag columns
    per detector (``P`` … ``IDT``) and the table row at which the baseline completed (None
    if it did not complete in this table).
    """
    k = len(table["P"])
    skip = min(max(skip_first - first, 0), k)
    got, need = monitor.baseline_progress
    gathering = 0 if monitor.baseline is not None else need - got
    flags_all = {m: np.full(k, np.nan) for m in monitor.flag_names}
    completed = None
    if k - skip > 0:
        rest = {m: table[m][skip:] for m in monitor.metrics}
        flags = monitor.update(rest)
        verdict = slice(skip + min(gathering, k - skip), k)
        for m, f in flags.items():
            flags_all[m][verdict] = f[verdict.start - skip:]
        if gathering and monitor.baseline is not None:
            completed = skip + gathering - 1
    if not any(m in IDT_METRICS for m in monitor.metrics):
        flags_all.pop("IDT")
    return flags_all, completed


def build_monitor(
    metrics: Sequence[str],
    *,
    baseline_windows: int,
    detector: str = "persistence",
    false_alarms: str = "1/h",
    k: float = 3.0,
    persist: int = 5,
    drift: float = 0.5,
    rate: float | None = None,
    stride: int = 1,
    window: int = 1,
    episode_steps: int | None = None,
    turns: bool = False,
    what: str = "this loop",
) -> Monitor:
    """The monitor of a stream: detector, budget and the budget's units in windows.

    Parameters
    ----------
    metrics
        Detectors to track (IDT components; ``reward`` for a loop with reward).
    baseline_windows, detector, false_alarms, k, persist, drift
        As :class:`~idt_desk.live.session.SessionConfig`.
    rate
        Transitions per second of loop time (None: a budget in seconds is refused).
    stride, window
        The windows' stride and length W (W / stride is the overlap; 1, 1 for turns).
    episode_steps
        Steps per episode (None: a budget per episode is refused).
    turns
        One window per turn (a dialogue).
    what
        The loop's name in error messages.

    Raises
    ------
    ValueError
        An unknown detector, an unreadable budget, or a budget in a unit the loop lacks.

    """
    spec = DetectorSpec(detector, k=float(k), m=int(persist), drift=float(drift))
    budget = parse_budget(false_alarms)
    per_unit: dict[str, float] = {}
    if rate:
        per_unit["s"] = float(rate) / stride
    if turns:
        per_unit["turns"] = 1.0
    if episode_steps:
        per_unit["episodes"] = float(episode_steps) / stride
    if budget.unit not in ("windows", *per_unit):
        have = ", ".join(f"1/{'h' if u == 's' else '100' + u}"
                         for u in (*per_unit, "windows")) if per_unit else "1/1000windows"
        raise ValueError(f"false-alarm budget {budget}: {what} has no "
                         f"{'loop time' if budget.unit == 's' else budget.unit}; "
                         f"give it as, e.g., {have}")
    return Monitor(int(baseline_windows), float(k), metrics, spec=spec, budget=budget,
                   windows_per_unit=per_unit, overlap=window / stride)
