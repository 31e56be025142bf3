"""The one pipeline from (S, A, S') rows to flagged windows.

:class:`Pipeline` is what the live session (``idt_desk.live.session``) and the Gymnasium
wrapper and SB3 callback (``idt_desk.gym``) build, so a wrapper's windows and alarms equal a
session's on the same stream. Inside it, :class:`WindowStage` symbolises transitions,
pushes them through the :class:`~idt_desk.metrics.engine.MetricEngine` (one per part of a
preset with parts), and gives each window per-transition columns' means over its W
transitions and others' values at its last transition (loop time, episode); :func:`judge` flags
windows with a :class:`~idt_desk.detection.monitor.Monitor`: no verdict (NaN) for the
windows the symbols were calibrated on and for the baseline's. :func:`build_monitor` makes
the monitor of a stream; :func:`source_preset` and :func:`source_monitor` read a source's
pipeline settings.

One file: the path from rows to verdicts, which every consumer must walk the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from idt_desk.detection import isolation, nulls
from idt_desk.detection.detectors import DEFAULT_BUDGET, Budget, DetectorSpec, parse_budget
from idt_desk.detection.monitor import ADJUSTED_METRICS, IDT_METRICS, Monitor, base_metric
from idt_desk.detection.phase import episode_steps, window_phase
from idt_desk.metrics.engine import MetricEngine
from idt_desk.metrics.parts import part_metrics, part_windows
from idt_desk.metrics.presets import PRESETS, Preset, preset_from_spec
from idt_desk.metrics.symbolize import Symbolizer
from idt_desk.metrics.twin import TWIN_METRICS, Twin, TwinEvidence, TwinStage
from idt_desk.metrics.views import View, choose_view, view_ladder, view_symbolizers
from idt_desk.settings import (
    DEFAULTS,
    LIMITS,
    PipelineSettings,
    SettingError,
    check_buffers,
    source_defaults,
)

__all__ = ["FLAG_COLUMNS", "Pipeline", "Step", "WindowStage", "build_monitor", "judge",
           "part_metrics", "part_windows", "preset_from_spec", "source_monitor", "source_preset"]

#: The flag column of each detector in a window table.
FLAG_COLUMNS = {"P": "x_P", "H_f": "x_H_f", "H_b": "x_H_b", "dH": "x_dH", "IDT": "x_IDT",
                "reward": "x_reward", "twin": "x_twin",
                **{m: f"x_{m}" for m in (*ADJUSTED_METRICS, "IDT_adj")}}


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
    mean_columns, end_columns
        Per-transition columns averaged over each window's W transitions; read at its last.

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
        #: One engine, or one per part of a preset with parts (each fed that part's composite
        #: of S and S'); ``engine`` is the first.
        self.parts = tuple(preset.parts)
        self.engines = [MetricEngine(preset.window, preset.stride, has_action=sym_a is not None,
                                     correction=correction) for _ in self.parts or (None,)]
        self.engine = self.engines[0]
        #: Transitions the symbols are calibrated on.
        self.calibration_transitions = (
            preset.window + (int(calibration_windows) - 1) * preset.stride)
        self.mean_columns = tuple(mean_columns)
        self.end_columns = tuple(end_columns)
        # Per-transition columns of the latest transitions: the means', clamped?, the ends'.
        self._tail = np.empty((0, len(self.mean_columns) + 1 + len(self.end_columns)))
        # Where S lay in each binned column (in bins) over the latest transitions: its spread
        # over a window says whether the loop moved at all (``motion``). Apart from the tail:
        # the symbols (and their columns) are chosen after the first rows (an auto view).
        self._where = np.empty((0, 0))

    @property
    def calibrated(self) -> bool:
        """Whether the symbols are fitted."""
        return self.sym_s.calibrated

    def fit(self, s: np.ndarray, a: np.ndarray | None,
            ranges_s: Mapping[int, tuple[float, float]] | None = None,
            ranges_a: Mapping[int, tuple[float, float]] | None = None) -> None:
        """Fit the symbols on the first ``calibration_transitions`` rows of S (and A)."""
        need = self.calibration_transitions
        margin = self.preset.range_margin
        self.sym_s.fit(np.asarray(s)[:need], ranges_s or {}, margin)
        if self.sym_a is not None:
            self.sym_a.fit(np.asarray(a)[:need], ranges_a or {}, margin)

    def push(self, s: np.ndarray, a: np.ndarray | None, s_next: np.ndarray,
             columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """Symbolise and push rows; return the windows they finish, or None.

        A window has the engine's columns, ``start`` and ``end`` (transitions from this
        stage's first row), ``out_of_range``, ``motion`` (the widest a binned column of S
        spread over the window, in bins: under 1, the loop moved less than a bin and the
        entropies cannot see it move) and the mean and end columns.
        """
        k = len(s)
        # S and S' in one call: the symboliser costs far more per call than per row.
        both = np.concatenate([s, s_next])
        sn, out_sn = (self.sym_s.symbolize_groups(both) if self.parts
                      else self.sym_s.symbolize(both))
        out = out_sn[:k] | out_sn[k:]
        a_sym = None
        if self.sym_a is not None:
            a_sym, out_a = self.sym_a.symbolize(a)
            out = out | out_a
        block = np.column_stack(
            [*(np.asarray(columns[c], dtype=np.float64) for c in self.mean_columns), out,
             *(np.asarray(columns[c], dtype=np.float64) for c in self.end_columns)])
        where = self.sym_s.positions(s)[:, sorted({j for g in self.sym_s.groups for j in g})]
        if where.shape[1] != self._where.shape[1]:
            self._where = np.empty((0, where.shape[1]))
        where = np.concatenate([self._where, where])
        tail = np.concatenate([self._tail, block])
        if self.parts:
            w = part_windows(self.parts, [
                e.push(sn[:k, j], sn[k:, j], a_sym) for j, e in enumerate(self.engines)])
        else:
            w = self.engine.push(sn[:k], sn[k:], a_sym)
        W = self.preset.window
        self._tail = tail[-W:]
        self._where = where[-W:]
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
        lag = len(tail) - len(where)  # rows of the tail before the symbols' columns were known
        table["motion"] = np.array([
            float(np.ptp(where[e + 1 - W - lag:e + 1 - lag], axis=0).max())
            if e + 1 - W - lag >= 0 and where.shape[1] else np.nan for e in idx_end])
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
        rest = {m: table[m][skip:] for m in (*monitor.metrics, "phase") if m in table}
        flags = monitor.update(rest)
        verdict = slice(skip + min(gathering, k - skip), k)
        for m, f in flags.items():
            flags_all[m][verdict] = f[verdict.start - skip:]
        if gathering and monitor.baseline is not None:
            completed = skip + gathering - 1
    if not any(base_metric(m) in IDT_METRICS for m in monitor.metrics):
        flags_all.pop("IDT")
    return flags_all, completed


def build_monitor(
    metrics: Sequence[str],
    *,
    baseline_windows: int,
    detector: str = "persistence",
    false_alarms: str | Budget = DEFAULT_BUDGET,
    k: float = DEFAULTS["k"],
    persist: int = DetectorSpec.m,
    drift: float = DEFAULTS["drift"],
    ewma_lambda: float = DEFAULTS["ewma_lambda"],
    rate: float | None = None,
    stride: int = 1,
    window: int = 1,
    episode_steps: int | None = None,
    turns: bool = False,
    what: str = "this loop",
    phased: bool = False,
) -> Monitor:
    """The monitor of a stream: detector, budget and the budget's units in windows.

    Parameters
    ----------
    metrics
        Detectors to track (IDT components; ``reward`` for a loop with reward).
    baseline_windows, detector, false_alarms, k, persist, drift, ewma_lambda
        As :class:`~idt_desk.live.config.SessionConfig`.
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
    phased
        An episodic loop: a baseline per phase of the episode
        (:mod:`~idt_desk.detection.phase`; the windows need a ``phase`` column).

    Raises
    ------
    ValueError
        An unknown detector, an unreadable budget, a budget in a unit the loop lacks or of
        more than one false alarm a window.
    """
    spec = DetectorSpec(detector, k=float(k), m=int(persist), drift=float(drift),
                        lam=float(ewma_lambda))
    budget = false_alarms if isinstance(false_alarms, Budget) else parse_budget(false_alarms)
    per_unit = budget_units(budget, rate=rate, stride=stride, turns=turns,
                            episode_steps=episode_steps, what=what)
    return Monitor(int(baseline_windows), float(k), metrics, spec=spec, budget=budget,
                   windows_per_unit=per_unit, overlap=window / stride, phased=phased)


def budget_units(budget: Budget, *, rate: float | None, stride: int, turns: bool,
                 episode_steps: int | None, what: str) -> dict[str, float]:
    """Windows per unit of loop time a budget may be given in; refuses a unit the loop lacks.

    Raises
    ------
    SettingError
        ``false_alarms`` in seconds for a loop without a rate, in episodes for one without
        episodes, in turns for one without turns.
    """
    per_unit: dict[str, float] = {}
    if rate:
        per_unit["s"] = float(rate) / stride
    if turns:
        per_unit["turns"] = 1.0
    if episode_steps:
        per_unit["episodes"] = float(episode_steps) / stride
    why = ""
    if budget.unit not in ("windows", *per_unit):
        have = ", ".join(f"1/{'h' if u == 's' else '100' + u}" for u in (*per_unit, "windows"))
        why = (f"{what} has no {'loop time' if budget.unit == 's' else budget.unit}; give it "
               f"as, e.g., {have}")
    elif (windows := per_unit.get(budget.unit, 1.0)) * budget.per < budget.alarms:
        why = f"allows more than one false alarm a window ({windows:g} windows per {budget.unit})"
    if why:
        raise SettingError("false_alarms", str(budget), why, f"false-alarm budget {budget}: {why}")
    return per_unit


def source_preset(source: Any, p: Mapping[str, Any] | PipelineSettings) -> Preset:
    """The symbolisation preset of pipeline settings ``p`` for ``source``, checked.

    ``p`` holds ``preset`` (a name; None: the source's first), or ``preset_spec`` (a preset
    by value, as a recording states it), and ``bins``, ``window``, ``stride`` overrides, and
    the detector settings (the budget's units checked against the source's loop here; the
    rest when the monitor is built: :func:`source_monitor`).

    Raises
    ------
    ValueError
        A setting out of its range (``idt_desk.settings.SETTINGS``) or of the wrong type, an
        unknown preset, a preset for another number of state variables, or a bad detector
        setting.

    """
    from dataclasses import replace

    s = p if isinstance(p, PipelineSettings) else PipelineSettings.parse(p)
    name = s.preset or (source.presets[0] if source.presets else None)
    spec = s.preset_spec
    if spec is not None and not s.preset:
        base = preset_from_spec(spec)
    elif name is None:
        base = Preset("custom", "no preset", bins=8, window=300, stride=50)
    else:
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
        base = PRESETS[name]
    preset = replace(base, **{k: getattr(s, k) for k in ("bins", "window", "stride")
                              if getattr(s, k) is not None})
    if preset.n_state is not None and preset.n_state != len(source.state_names):
        raise SettingError("preset", preset.name, "", f"preset {preset.name} expects "
                           f"{preset.n_state} state variables; {source.name} has "
                           f"{len(source.state_names)}")
    _source_budget(source, s, preset)
    return preset


def _source_budget(source: Any, s: PipelineSettings, preset: Preset, check: bool = True
                   ) -> Budget:
    """The budget of ``s`` (or the source's default); ``check``: its units against the loop.

    :func:`source_monitor` leaves the check to :func:`build_monitor`, which makes it once.
    """
    turns = source.metric_path == "turns"
    if s.phase_baseline and (turns or not source.episode_steps):
        why = f"{source.name} has no episodes of a set length to take a phase from"
        raise SettingError("phase_baseline", True, why, f"phase_baseline: {why}")
    budget = s.budget or parse_budget(source_defaults(source, preset)["false_alarms"])
    if check:
        budget_units(budget, rate=source.rate, stride=1 if turns else preset.stride,
                     turns=turns, episode_steps=source.episode_steps, what=source.name)
    return budget


def source_monitor(source: Any, p: Mapping[str, Any] | PipelineSettings,
                   preset: Preset, twin: bool = False) -> Monitor:
    """The alarm's monitor of ``source`` for pipeline settings ``p`` (see :func:`build_monitor`).

    The IDT components, a dialogue's length-adjusted ones on the turn path, the twin's
    channels (``twin``: the pipeline has one; :mod:`idt_desk.metrics.twin`), and reward when
    the source has one; a budget in loop time converts through the source's rate.
    ``phase_baseline`` asks for a baseline per phase of the episode
    (:mod:`~idt_desk.detection.phase`): only a source with episodes (``episode_steps``).

    Raises
    ------
    SettingError
        A bad detector setting, or ``phase_baseline`` for a loop without episodes.
    """
    s = p if isinstance(p, PipelineSettings) else PipelineSettings.parse(p)
    turns = source.metric_path == "turns"
    budget = _source_budget(source, s, preset, check=False)  # build_monitor checks it
    unset = source_defaults(source, preset)  # what the settings leave to the source
    metrics = (*part_metrics(preset, IDT_METRICS), *(ADJUSTED_METRICS if turns else ()),
               *(TWIN_METRICS if twin and not turns else ()),
               *(("reward",) if source.has_reward else ()))
    return build_monitor(
        metrics, baseline_windows=int(s.baseline_windows or unset["baseline_windows"]),
        detector=s.detector or unset["detector"], false_alarms=budget,
        k=s.k, persist=int(s.persist or unset["persist"]), drift=s.drift,
        ewma_lambda=s.ewma_lambda,
        rate=source.rate,
        stride=1 if turns else preset.stride, window=1 if turns else preset.window,
        episode_steps=source.episode_steps, turns=turns, what=source.name,
        phased=s.phase_baseline)


#: Value ranges known in advance, by column index: (the state's, the action's).
Ranges = tuple[Mapping[int, tuple[float, float]], Mapping[int, tuple[float, float]]]


@dataclass
class Step:
    """What one :meth:`Pipeline.push` produced.

    Attributes
    ----------
    windows
        The windows the rows finished (columns, ``start``/``end`` counted from the
        pipeline's first row; flag columns ``x_*`` when the pipeline has a monitor), or None.
    flags
        The flag of each detector for those windows (NaN: no verdict), or None.
    calibrated
        On the push whose rows completed the symbols' calibration: ``transitions`` (how many
        they were fitted on), ``value_ranges`` and the symbolisers as dicts; else None.
    baseline_row
        The row of ``windows`` at which the monitor's baseline completed, or None.

    """

    windows: dict[str, np.ndarray] | None = None
    flags: dict[str, np.ndarray] | None = None
    calibrated: dict[str, Any] | None = None
    baseline_row: int | None = None


#: The pipeline shapes whose kernels this process has loaded (:meth:`Pipeline.warm`).
_WARMED: set[tuple[Any, ...]] = set()


class Pipeline:
    """(S, A, S') rows in, flagged windows out: the one assembly of symbols, engine and monitor.

    The live session, the Gymnasium wrapper and SB3 callback, and through the session the
    ``Recorder`` and every reproduction that runs sessions, all build one of these, so a
    wrapper's windows and alarms equal a session's on the same stream. Rows are buffered
    until ``calibration_windows`` windows' worth have arrived; the symbols are fitted on
    exactly those rows (whatever the batching), and every row then goes through the
    :class:`WindowStage`. The windows the symbols were fitted on are never judged; the
    monitor's baseline is the windows after them.

    Parameters
    ----------
    preset
        Bins, groups, angles, window W and stride.
    monitor
        The detector (:func:`build_monitor`); None: windows without flags.
    state_names, action_names
        Column names of S and A (``action_names`` None: a passive loop,
        P = MI(S;S') / (H(S) + H(S'))).
    state_bins, action_bins
        Bins per side (default the preset's; a discrete space may need its own count).
    calibration_windows, correction
        Windows the symbols are fitted on; the engine's entropy correction.
    mean_columns, end_columns
        Per-row columns averaged over each window, and read at its last row.
    turns
        A dialogue: one metric row a turn from its token counts, made elsewhere; the
        pipeline only judges them (no symbols, nothing to calibrate).
    twin
        The loop's nominal model (``Source.twin``; None: none): each window gets the
        residual channels of :mod:`idt_desk.metrics.twin`, fitted on the symbols'
        calibration rows, and :meth:`evidence` says what the twin saw in any window of the
        latest step (its baseline: the monitor's).

    Examples
    --------
    Symbols fitted on the first 2 windows (150 transitions), a 20-window baseline after them,
    every later window judged:

    >>> import numpy as np
    >>> from idt_desk.metrics.presets import Preset
    >>> from idt_desk.pipeline import Pipeline, build_monitor
    >>> preset = Preset("toy", "a toy loop", bins=4, window=100, stride=50)
    >>> monitor = build_monitor(["P", "H_f", "H_b", "dH"], baseline_windows=20,
    ...                         detector="persistence", false_alarms="1/1000windows",
    ...                         stride=50, window=100)
    >>> pipe = Pipeline(preset, monitor, state_names=["x"], action_names=["u"],
    ...                 calibration_windows=2)
    >>> rng = np.random.default_rng(0)
    >>> x, u = rng.normal(size=(3001, 1)), rng.normal(size=(3000, 1))
    >>> step = pipe.push(x[:-1], u, x[1:], {"reward": np.zeros(3000), "t": np.arange(3000.0)})
    >>> step.calibrated["transitions"], len(step.windows["P"]), step.baseline_row
    (150, 59, 21)
    >>> int(np.isnan(step.flags["IDT"]).sum()), int(np.nansum(step.flags["IDT"]))  # no alarm
    (22, 0)
    """

    def __init__(
        self,
        preset: Preset,
        monitor: Monitor | None = None,
        *,
        state_names: Sequence[str] = (),
        action_names: Sequence[str] | None = None,
        state_bins: int | None = None,
        action_bins: int | None = None,
        calibration_windows: int = 1,
        correction: str | None = None,
        mean_columns: Sequence[str] = ("reward",),
        end_columns: Sequence[str] = ("t",),
        turns: bool = False,
        twin: Twin | None = None,
    ) -> None:
        self.preset = preset
        self.monitor = monitor
        #: The twin's residual channels (None: no twin).
        self.twin_stage = None if twin is None or turns else TwinStage(
            twin, preset.window, state_names, () if action_names is None else action_names)
        #: What :meth:`warm` builds its copy from.
        self._shape = dict(state_names=tuple(state_names), action_names=None if action_names
                           is None else tuple(action_names), state_bins=state_bins,
                           action_bins=action_bins, correction=correction,
                           mean_columns=tuple(mean_columns), end_columns=tuple(end_columns))
        self.turns = bool(turns)
        #: The view an ``auto`` preset chose at calibration, in words ("": none chosen).
        self.view = ""
        #: An episodic loop's windows carry their ``phase`` (the monitor's phase baseline):
        #: the rows' ``episode`` column is turned into each row's step in its episode.
        self.phased = bool(monitor is not None and monitor.phased and not turns)
        self._episode_carry: tuple[float, int] | None = None
        if self.phased and "episode_step" not in end_columns:
            end_columns = (*end_columns, "episode_step")
        self.calibration_windows = 0 if turns else int(calibration_windows)
        #: Windows made so far (the first ones calibrate the symbols).
        self.n_windows = 0
        self._buffer: list[tuple[Any, ...]] = []
        #: Rows held until the symbols are calibrated.
        self.n_buffered = 0
        if turns:
            self.sym_s = self.sym_a = self.stage = self.engine = None
            self.calibration_transitions = 0
            return
        # Before anything is allocated: a window of 10**9 is refused, not tried.
        for bins in (preset.bins, state_bins, action_bins):  # 1: a discrete space's own
            if bins is not None and not 1 <= int(bins) <= LIMITS["bins"][1]:
                raise ValueError(f"bins {bins}: must be an integer from 1 to "
                                 f"{LIMITS['bins'][1]:,}")
        check_buffers(preset.window, preset.stride, self.calibration_windows,
                      len(state_names), len(action_names or ()))
        circular = preset.angles if preset.angle_mode == "wrap" else ()
        self.sym_s = Symbolizer(len(state_names), state_bins or preset.bins,
                                preset.state_groups, circular=circular, names=list(state_names))
        self.sym_a = None if action_names is None else Symbolizer(
            len(action_names), action_bins or preset.bins, preset.action_groups,
            names=list(action_names))
        self.stage = WindowStage(preset, self.sym_s, self.sym_a,
                                 calibration_windows=self.calibration_windows,
                                 correction=correction, mean_columns=mean_columns,
                                 end_columns=end_columns)
        self.engine = self.stage.engine
        #: Rows the symbols are fitted on.
        self.calibration_transitions = self.stage.calibration_transitions

    def warm(self) -> None:
        """Load (or compile) every kernel this pipeline runs, on a few synthetic rows.

        numba loads a compiled kernel from its cache at the kernel's first call in a process
        (seconds; longer to compile after an install): met at the first real rows, that time
        would hold them back. A copy of this pipeline (the same symbol shapes, engine and
        detector, one calibration window and a three-window baseline) takes random rows
        instead, so a loop that warms first never waits for a kernel (nor for its twin's:
        it predicts a few rows). Milliseconds once the kernels are loaded. The copy's own
        trouble is not the loop's: a pipeline that would fail fails on its real rows, where
        they are on record.
        """
        shape = self._shape
        key = (repr(self.preset), self.turns, len(shape["state_names"]),
               None if shape["action_names"] is None else len(shape["action_names"]),
               shape["state_bins"], shape["action_bins"], shape["correction"],
               None if self.monitor is None else self.monitor.spec.kind)
        if key in _WARMED:  # loaded once per process: a reproduction starts many sessions
            return
        with contextlib.suppress(Exception):  # a warm-up only loads kernels
            self._warm_copy()
        _WARMED.add(key)

    def _warm_copy(self) -> None:
        mon = self.monitor
        copy_mon = None if mon is None else Monitor(
            3, mon.k, mon.metrics, spec=mon.spec,
            budget=None if mon.budget is None else Budget(1.0, 1000.0, "windows"),
            overlap=mon.overlap, phased=mon.phased)
        if mon is not None and mon.spec.calibrated:
            nulls.warm_kernels()  # each detector's fit meets only some of them on 3 windows
        rng = np.random.default_rng(0)
        if self.turns:
            if copy_mon is not None:
                copy_mon.update({m: rng.standard_normal(6) for m in copy_mon.metrics})
            return
        shape = self._shape
        copy = Pipeline(self.preset, copy_mon, calibration_windows=1, turns=False,
                        **shape)
        n = self.preset.window + 6 * self.preset.stride
        width = len(shape["state_names"])
        s = rng.standard_normal((n + 1, width))
        a = None if shape["action_names"] is None else rng.standard_normal(
            (n, len(shape["action_names"])))
        columns = {c: np.arange(n, dtype=np.float64)
                   for c in (*shape["mean_columns"], *shape["end_columns"])}
        if self.twin_stage is not None:  # its kernels too (the pendulum's equations)
            self.twin_stage.twin.predict(s[:2], None if a is None else a[:2])
        copy.push(s[:-1], a, s[1:], columns)

    def fitted(self) -> dict[str, Any]:
        """What this pipeline fitted before it judged a window.

        The symbols (and the view chosen), the twin's residual scales and baseline, the
        monitor's baseline and thresholds. JSON-able but for NaN; :meth:`load_fitted` takes it.

        Raises
        ------
        ValueError
            The symbols or the baseline are not fitted yet (the baseline's progress said).
        """
        if self.monitor is None:
            raise ValueError("this pipeline has no monitor: nothing to judge against")
        if self.turns:  # token counts: no symbols, no twin
            return {"symbols": None, "twin": None, "monitor": self.monitor.fitted()}
        if not self.calibrated:
            raise ValueError(f"the symbols are not calibrated yet: {self.n_buffered:,} of "
                             f"{self.calibration_transitions:,} transitions")
        monitor = self.monitor.fitted()
        twin = self.twin_stage
        return {"symbols": {"state": self.sym_s.to_dict(), "action": None if self.sym_a is None
                            else self.sym_a.to_dict(), "view": self.view},
                "twin": None if twin is None else twin.fitted(), "monitor": monitor}

    def load_fitted(self, d: Mapping[str, Any]) -> None:
        """Judge from the first window on against what another stream fitted (:meth:`fitted`).

        The symbols, the twin's scales and baseline and the monitor's are taken whole: no
        calibration, no baseline to gather, the first complete window is judged.

        Raises
        ------
        ValueError
            Symbols of other variables, a twin where this pipeline has none (or none where it
            has one), another detector or other metrics: named in one line.
        """
        if self.monitor is None:
            raise ValueError("this pipeline has no monitor: nothing to judge against")
        if self.turns or d.get("symbols") is None:
            if not self.turns:
                raise ValueError("the baseline was fitted on a dialogue's turns (no symbols)")
            if d.get("symbols") is not None:
                raise ValueError("the baseline was fitted on symbols; a dialogue's turn path "
                                 "has none")
            self.monitor.load_fitted(d.get("monitor") or {})
            return
        sym = d["symbols"]
        try:
            sym_s = Symbolizer.from_dict(sym["state"])
            sym_a = None if sym.get("action") is None else Symbolizer.from_dict(sym["action"])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"the symbols: {type(exc).__name__}: {exc}") from None
        names = self._shape["state_names"]
        if tuple(sym_s.names or ()) != names or not sym_s.calibrated:
            raise ValueError("the symbols were fitted on other state variables")
        acts = self._shape["action_names"]
        if (sym_a is None) != (acts is None) or (
                sym_a is not None and (tuple(sym_a.names or ()) != acts or not sym_a.calibrated)):
            raise ValueError("the symbols were fitted on other action variables")
        twin = d.get("twin")
        if (twin is None) != (self.twin_stage is None):
            raise ValueError("the baseline judges the twin's residual; this loop has no twin"
                             if twin is not None else "the baseline was fitted without a twin")
        if self.twin_stage is not None:
            self.twin_stage.load_fitted(twin)
        self.monitor.load_fitted(d.get("monitor") or {})
        self.sym_s, self.sym_a = sym_s, sym_a
        self.stage.sym_s, self.stage.sym_a = sym_s, sym_a
        self.view = str(sym.get("view") or "")
        self._buffer, self.n_buffered = [], 0
        self.calibration_windows = 0
        self.calibration_transitions = self.stage.calibration_transitions = 0

    @property
    def calibrated(self) -> bool:
        """Whether the symbols are fitted (always, on the turn path)."""
        return self.sym_s is None or self.sym_s.calibrated

    def push(self, s: np.ndarray, a: np.ndarray | None, s_next: np.ndarray,
             columns: Mapping[str, np.ndarray],
             ranges: Ranges | Callable[[], Ranges] | None = None) -> Step:
        """Take in rows; return the windows they finish, judged.

        ``ranges`` (or a function giving them, called only when the symbols are fitted):
        value ranges known in advance, by column index, for the state and the action.
        """
        step = Step()
        if self.phased:
            episode = columns.get("episode")
            steps, self._episode_carry = episode_steps(
                np.full(len(s), np.nan) if episode is None else episode, self._episode_carry)
            columns = {**columns, "episode_step": steps}
        if not self.calibrated:
            self._buffer.append((s, a, s_next, dict(columns)))
            self.n_buffered += len(s)
            if self.n_buffered < self.calibration_transitions:
                return step
            blocks, self._buffer = self._buffer, []
            self.n_buffered = 0

            def cat(j: int) -> np.ndarray | None:
                return None if blocks[0][j] is None else np.concatenate([b[j] for b in blocks])

            s, a, s_next = cat(0), cat(1), cat(2)
            columns = {c: np.concatenate([b[3][c] for b in blocks]) for c in blocks[0][3]}
            got = ranges() if callable(ranges) else ranges
            r_s, r_a = got if got is not None else ({}, {})
            view = self._choose_view(s, a, s_next, r_s, r_a) if self.preset.auto_view else None
            self.stage.fit(s, a, r_s, r_a)
            if self.twin_stage is not None:  # on the same rows, however the loop was cut
                need = self.calibration_transitions
                self.twin_stage.fit(s[:need], None if a is None else a[:need], s_next[:need])
            inexact = self.twin_stage is not None and not self.twin_stage.exact
            if inexact and self.monitor is not None:  # its residual moves with the gait: apart
                self.monitor.apart.add("twin")
            step.calibrated = {
                "transitions": self.calibration_transitions,
                "symbolizer": self.sym_s.to_dict(),
                "action_symbolizer": None if self.sym_a is None else self.sym_a.to_dict()}
            if view is not None:
                step.calibrated["view"] = view
            if inexact:
                step.calibrated["twin"] = {
                    "exact": False, "misfit": float(f"{self.twin_stage.misfit:.3g}"),
                    "said": f"the twin is not exact (its clean residual reaches "
                            f"{self.twin_stage.misfit:.2g} of a variable's spread, rounding is "
                            f"under 1e-6): its alarm is kept apart from the IDT's, and it "
                            f"still names the class"}
        w = self.stage.push(s, a, s_next, columns)
        if self.twin_stage is not None:  # every row, whether or not it ends a window
            ends = np.empty(0, dtype=np.int64) if w is None else w["end"]
            got = self.twin_stage.push(s, a, s_next, ends)
            if w is not None:
                w.update(got)
        if w is not None:
            self._judge(w, step)
        return step

    def _choose_view(self, s: np.ndarray, a: np.ndarray | None, s_next: np.ndarray,
                     ranges_s: Mapping[int, tuple[float, float]],
                     ranges_a: Mapping[int, tuple[float, float]]) -> dict[str, Any]:
        """An ``auto`` preset's view, chosen on the calibration rows; its symbols replace these.

        Returns what the ``calibrated`` step says of it: the view chosen (``view``) and the
        share of each regime in the calibration windows of every view tried (``tried``).
        """
        need = self.calibration_transitions
        shape = self._shape
        circular = self.preset.angles if self.preset.angle_mode == "wrap" else ()

        def make(v: View) -> tuple[Symbolizer, Symbolizer | None]:
            # A discrete space's bins are its values: not the view's to change.
            sym_s, sym_a = view_symbolizers(
                v, shape["state_names"], shape["action_names"], state_bins=shape["state_bins"],
                action_bins=shape["action_bins"], circular=circular)
            sym_s.fit(s[:need], ranges_s, self.preset.range_margin)
            if sym_a is not None:
                sym_a.fit(a[:need], ranges_a, self.preset.range_margin)
            return sym_s, sym_a

        views = view_ladder(self.preset.bins)
        best, tried = choose_view(s[:need], None if a is None else a[:need], s_next[:need],
                                  self.preset.window, self.preset.stride, make, views)
        self.sym_s, self.sym_a = make(views[best])
        self.stage.sym_s, self.stage.sym_a = self.sym_s, self.sym_a
        self.view = views[best].name
        return {"view": self.view, "tried": tried}

    def evidence(self, row: int, hypotheses: bool = True) -> TwinEvidence | None:
        """What the twin saw in window ``row`` of the latest step (None: no twin, no baseline).

        See :meth:`idt_desk.metrics.twin.TwinStage.evidence`.
        """
        if self.twin_stage is None:
            return None
        if not hypotheses:
            return self.twin_stage.evidence(row, False)
        return isolation.evidence(self.twin_stage, row)

    def judge(self, table: dict[str, np.ndarray]) -> Step:
        """Judge rows made elsewhere (the turn path's): flags and the baseline's row."""
        step = Step()
        self._judge(table, step)
        return step

    def _judge(self, table: dict[str, np.ndarray], step: Step) -> None:
        k = len(table["start"])
        first, self.n_windows = self.n_windows, self.n_windows + k
        if self.phased:
            table["phase"] = window_phase(table["episode_step"], self.preset.stride)
        step.windows = table
        if self.monitor is None:
            return
        # The window that completes the baseline fits the thresholds here, in milliseconds
        # (idt_desk.detection.nulls), and every window is judged as it arrives.
        twin, mon = self.twin_stage, self.monitor
        if twin is not None and mon.baseline is None:  # the twin's baseline: the monitor's
            got, need = mon.baseline_progress
            skip = min(max(self.calibration_windows - first, 0), k)
            twin.gather(slice(skip, skip + min(need - got, k - skip)), restart=got == 0)
        self._apply(step, *judge(mon, table, first, self.calibration_windows))
        if twin is not None and step.baseline_row is not None:
            twin.freeze()

    def _apply(self, step: Step, flags: dict[str, np.ndarray], baseline_row: int | None
               ) -> None:
        """A judged step: its flags, into its windows' flag columns too."""
        for m, f in flags.items():
            step.windows[FLAG_COLUMNS.get(m, f"x_{m}")] = f
        step.flags, step.baseline_row = flags, baseline_row
