"""The loop's nominal model (its *twin*) and the residual of the physics in each window.

The IDT's terms say *that* a loop changed; its own model says *what* changed. A source may
declare a twin (``Source.twin``): a batched prediction of S' from (S, A) by an unperturbed
model of the loop — for a MuJoCo env, an unperturbed copy of it set to each recorded state
and stepped with the recorded action (:class:`idt_desk.gym.twin.MujocoTwin`); for the double
pendulum, its own integrator. On clean transitions such a twin predicts S' to rounding
(1e-11 on HalfCheetah); what a change does to the residual ``r = S' − twin(S, A)`` names it
(model-based fault isolation with structured residuals):

- noise in what is measured (a **sensor**) spreads the residual of the positions, which an
  error in the physics barely touches;
- a change of the action given the state (an **actuator**: A is recorded as applied) leaves
  the physics intact, and the residual where it was;
- an external **force** or a change of the **dynamics** (gravity, a payload) is a *bias*, in
  the direction the twin itself predicts for that change (:class:`Hypothesis`).

:class:`TwinStage` turns rows into per-window channels, recorded with every window
(:data:`TWIN_COLUMNS`): for the positions and the velocities, the residual's spread (log10
of its variance about the window's mean) and its shift (log10 of its mean's square; both
above :data:`CHANNEL_FLOOR`), each
variable's residual in units of its own scale (its RMS over the symbols' calibration rows,
floored at ``FLOOR`` of the variable's spread, so a twin exact to rounding does not read
rounding as signal). The alarm's monitor calibrates them like the IDT components, a group
with its own baseline (``idt_desk.detection.monitor.UNIONS``); :mod:`~idt_desk.detection.
attribution` reads them, with each variable's shift and the hypotheses, at every alarm.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["CHANNEL_FLOOR", "FLOOR", "KINDS", "RESOLUTION", "TWIN_COLUMNS", "TWIN_METRICS",
           "Hypothesis", "Twin", "TwinEvidence", "TwinStage", "twin_over"]

#: What a state variable is, for its residual: a position (an angle, a height) or a velocity.
KINDS = ("position", "velocity")
#: The channels of a window, by kind and statistic: what the monitor watches and a recording
#: keeps (NaN for a loop without a twin).
TWIN_METRICS = ("R_spread_pos", "R_shift_pos", "R_spread_vel", "R_shift_vel")
#: The channels and the twin group's alarm flag, as window columns.
TWIN_COLUMNS = (*TWIN_METRICS, "x_twin")
#: A residual below this share of its variable's spread (over the calibration rows) is
#: rounding: the scale a residual is measured in never falls below it.
FLOOR = 1e-6
#: The channels' own floor (in squared units of the scale): a residual under 1e-4 of its
#: scale is rounding, drawn and judged as a flat floor rather than as decades of jitter.
CHANNEL_FLOOR = 1e-8
#: The channels' resolution (decades): their baseline σ is read as at least this, so a twin
#: exact to rounding, whose channels sit on the floor to the ninth digit, does not take the
#: ninth digit's jitter for a change (a 2 % change of the residual's power is none).
RESOLUTION = 0.01


@dataclass(frozen=True)
class Hypothesis:
    """A change the twin can simulate, and what it does to each row's S'.

    Its effect is linear in its size over one step (a force's acceleration is; a change of
    gravity's or damping's is to first order), so the size that explains a residual's bias is
    fitted by least squares along ``delta`` (:meth:`value`): the alarm says the size
    measured, not the simulated one.

    Attributes
    ----------
    name
        Short name (``force_x``, ``gravity``).
    cls
        The class of change it stands for: ``sensor``, ``actuator``, ``force`` or ``dynamics``.
    words
        What it is, without a size, for an alarm's evidence ("an external force on torso
        along x", "gravity").
    delta
        Per row, S' under the change minus S' without it (rows × state variables).
    size
        The change of the parameter that ``delta`` simulates (1 N; 0.1 for gravity ×1.1).
    base
        The parameter's nominal value (0 for an added force, 1 for a factor).
    unit
        How a value of it reads: ``"{:+.3g} N"``, ``"×{:.3g}"`` (a format of the value).
    component
        The part it acts on (a sensor's variable, an actuator, a body; None: the whole
        model, as gravity).
    spread
        A zero-mean change (noise): ``delta`` is then, per row, the directions it spreads S'
        along per unit of its σ (rows × state variables × k), not a mean.
    simulate
        The change of S' over the same rows simulated exactly (None: only ``delta``'s linear
        effect is known): for a mean, ``simulate(k)`` at ``k`` times the simulated change; for
        a spread, ``simulate(c)`` with ``c`` each row's coefficients along its directions.
        The isolation refines its best candidates with it (a change far from linear: a
        stuck sensor, a mass ×1.5).

    """

    name: str
    cls: str
    words: str
    delta: np.ndarray
    size: float = 1.0
    base: float = 0.0
    unit: str = "{:+.3g}"
    component: str | None = None
    spread: bool = False
    simulate: Any = field(default=None, compare=False, repr=False)

    def value(self, k: float) -> str:
        """The parameter's value in words at ``k`` times the simulated change."""
        return self.unit.format(self.base + k * self.size)


@runtime_checkable
class Twin(Protocol):
    """A loop's nominal model: what a source declares (``Source.twin``).

    Attributes
    ----------
    description
        What the model is, in words ("an unperturbed copy of HalfCheetah-v5 (MuJoCo)").
    kinds
        Per state variable, ``position`` or ``velocity`` (:data:`KINDS`).

    """

    description: str
    kinds: Sequence[str]

    def predict(self, s: np.ndarray, a: np.ndarray | None) -> np.ndarray:
        """S' predicted from each row of S (and A; None for a passive loop)."""
        ...

    def hypotheses(self, s: np.ndarray, a: np.ndarray | None) -> list[Hypothesis]:
        """The changes it can simulate, each with its effect on these rows' S'."""
        ...


@dataclass
class TwinEvidence:
    """What the twin saw in one window, against its baseline windows.

    Attributes
    ----------
    z
        Each channel of :data:`TWIN_METRICS` in σ of its baseline windows.
    ratio
        Each channel's spread as a factor of its baseline mean (``R_spread_pos`` ×1.3…).
    bias
        Each variable's mean residual in the window, in σ of the baseline windows' means.
    t
        Each variable's mean residual's change from the baseline's, in units of its own
        standard error in the window (σ / √W of the window's residual): a bias stands out of
        the window's own scatter, where zero-mean noise (a sensor's) leaves t near 1 however
        far its mean is from a baseline at rounding.
    hypotheses
        Each hypothesis's direction in the same units (its delta over the window's rows).
    names
        The state's variable names (the bias's order).

    """

    z: dict[str, float]
    ratio: dict[str, float]
    bias: np.ndarray
    t: np.ndarray
    hypotheses: list[tuple[Hypothesis, np.ndarray]] = field(default_factory=list)
    names: tuple[str, ...] = ()
    #: What the bank of fault hypotheses said of the window
    #: (:class:`idt_desk.detection.isolation.Isolation`; None: not asked, or no baseline rows).
    isolation: Any = None

    def to_dict(self) -> dict[str, Any]:
        """The numbers, JSON-able (a trial's record, for a rule judged afresh)."""
        return {"z": {k: round(v, 4) for k, v in self.z.items()},
                "ratio": {k: float(f"{v:.6g}") for k, v in self.ratio.items()},
                "bias": [float(f"{x:.6g}") for x in self.bias],
                "t": [float(f"{x:.6g}") for x in self.t], "names": list(self.names),
                "hypotheses": {h.name: [h.cls, h.words, [float(f"{x:.6g}") for x in d],
                                        h.size, h.base, h.unit]
                               for h, d in self.hypotheses},
                **({} if self.isolation is None else {"isolation": self.isolation.to_dict()})}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TwinEvidence:
        """Back from :meth:`to_dict` (the hypotheses' deltas are not kept: their directions).

        A record written before the hypotheses had sizes (three fields) reads as size 1.
        """
        hyps = [(Hypothesis(n, h[0], h[1], np.empty((0, len(h[2]))), *h[3:6]),
                 np.asarray(h[2], dtype=np.float64))
                for n, h in d.get("hypotheses", {}).items()]
        return cls(dict(d["z"]), dict(d.get("ratio", {})), np.asarray(d["bias"], dtype=float),
                   np.asarray(d["t"], dtype=float), hyps, tuple(d.get("names", ())))


class TwinStage:
    """Rows in, each window's residual channels out; and the evidence of any window of a block.

    Parameters
    ----------
    twin
        The loop's nominal model.
    window
        W, the transitions of a window.
    state_names
        The state's variable names (evidence names them).

    Examples
    --------
    A toy twin that knows x' = 0.9 x + u exactly; noise added to what is measured after row
    2,000 spreads the positions' residual:

    >>> import numpy as np
    >>> from idt_desk.metrics.twin import Hypothesis, TwinStage
    >>> class Toy:
    ...     description, kinds = "x' = 0.9 x + u", ("position",)
    ...     def predict(self, s, a): return 0.9 * s + a
    ...     def hypotheses(self, s, a): return []
    >>> rng = np.random.default_rng(0)
    >>> u = rng.normal(size=(4000, 1)); x = np.zeros((4001, 1))
    >>> for t in range(4000): x[t + 1] = 0.9 * x[t] + u[t] + 1e-3 * rng.normal()
    >>> seen = x + np.where(np.arange(4001)[:, None] > 2000, 0.1 * rng.normal(size=(4001, 1)), 0)
    >>> stage = TwinStage(Toy(), window=300, state_names=("x",))
    >>> stage.fit(seen[:1000], u[:1000], seen[1:1001])
    >>> w = stage.push(seen[:-1], u, seen[1:], ends=np.array([1000, 4000]))
    >>> bool(w["R_spread_pos"][1] > w["R_spread_pos"][0] + 1)  # ×10 and more: noise
    True
    """

    def __init__(self, twin: Twin, window: int, state_names: Sequence[str],
                 action_names: Sequence[str] = ()) -> None:
        self.twin = twin
        self.window = int(window)
        self.names = tuple(state_names)
        self.action_names = tuple(action_names)
        kinds = tuple(twin.kinds)
        if len(kinds) != len(self.names) or any(k not in KINDS for k in kinds):
            raise ValueError(f"twin {twin.description!r}: give each of the {len(self.names)} "
                             f"state variables a kind of {', '.join(KINDS)}")
        self._idx = {k[:3]: np.flatnonzero(np.array(kinds) == k) for k in KINDS}
        #: Each variable's residual scale (None before :meth:`fit`).
        self.scale: np.ndarray | None = None
        d = len(self.names)
        self._z = np.empty((0, d))  # standardised residuals of the latest rows
        self._s = np.empty((0, d))
        self._a: np.ndarray | None = None
        self.n_seen = 0
        # The latest block's windows: each variable's mean residual, and the rows' ends.
        self._block_shift = np.empty((0, d))
        self._block_var = np.empty((0, d))
        self._block_ends = np.empty(0, dtype=np.int64)
        self._block = {}  # the latest block's channels
        # The baseline windows' channels and shifts, gathered; their statistics once frozen.
        self._gathered: dict[str, list[np.ndarray]] = {}
        self._base: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
        # The baseline's residual rows (each once): their sums, for the isolation's mean and
        # covariance; the row they reach.
        self._rows_sum = np.zeros(d)
        self._rows_outer = np.zeros((d, d))
        self._rows_n = 0
        self._rows_upto = 0
        #: The baseline rows' residual mean and covariance (the stage's units), once frozen.
        self.row_mean: np.ndarray | None = None
        self.row_cov: np.ndarray | None = None
        #: Each variable's spread and each action's over the calibration rows (the isolation's
        #: finite differences' scale).
        self.spread: np.ndarray | None = None
        self.action_spread: np.ndarray | None = None
        #: The clean residual's largest share of its variable's spread over the calibration
        #: rows, and whether that is rounding (≤ :data:`FLOOR`): an exact twin. An inexact
        #: one's residual moves with the gait, and its alarm is kept apart from the IDT's
        #: (``Monitor.apart``); it still names the class.
        self.misfit = 0.0
        self.exact = True

    def residual(self, s: np.ndarray, a: np.ndarray | None, s_next: np.ndarray
                 ) -> np.ndarray:
        """S' − twin(S, A), row by row."""
        pred = np.asarray(self.twin.predict(s, a), dtype=np.float64)
        if pred.shape != np.shape(s_next):
            raise ValueError(f"twin {self.twin.description!r} predicted {pred.shape} for S' of "
                             f"{np.shape(s_next)}")
        return np.asarray(s_next, dtype=np.float64) - pred

    def fit(self, s: np.ndarray, a: np.ndarray | None, s_next: np.ndarray) -> None:
        """Each variable's residual scale from these rows (the symbols' calibration rows)."""
        r = self.residual(s, a, s_next)
        spread = np.asarray(s, dtype=np.float64).std(axis=0)
        # Rows the twin cannot predict (NaN: a state it cannot read) are left out.
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            rms = np.nan_to_num(np.sqrt(np.nanmean(r ** 2, axis=0)))
        self.scale = np.maximum(np.maximum(rms, FLOOR * spread), 1e-12)
        self.spread = spread
        # Exact: every variable's clean residual at rounding (an exact copy's is 1e-15 of the
        # spread on MuJoCo; one 1 % off, 1e-3 to 1e-2).
        moving = spread > 0
        self.misfit = float(np.max(rms[moving] / spread[moving])) if moving.any() else 0.0
        self.exact = bool(self.misfit <= FLOOR)
        self.action_spread = None if a is None else np.asarray(a, dtype=np.float64).std(axis=0)

    def push(self, s: np.ndarray, a: np.ndarray | None, s_next: np.ndarray,
             ends: np.ndarray) -> dict[str, np.ndarray]:
        """Take rows; the channels of the windows ending at ``ends`` (rows since the first).

        Every row after :meth:`fit` passes here once, whether or not it ends a window.
        """
        if self.scale is None:
            raise RuntimeError("TwinStage.push before fit")
        z = self.residual(s, a, s_next) / self.scale
        keep = self.window + len(s)
        self._z = np.concatenate([self._z, z])[-keep:]
        self._s = np.concatenate([self._s, np.asarray(s, dtype=np.float64)])[-keep:]
        if a is not None:
            a = np.asarray(a, dtype=np.float64)
            self._a = a if self._a is None else np.concatenate([self._a, a])[-keep:]
        self.n_seen += len(s)
        ends = np.asarray(ends, dtype=np.int64)
        W = self.window
        first = self.n_seen - len(self._z)  # row index of the tail's first row
        if ends.size == 0:  # no window ends here (a stream judged from its first rows)
            d = len(self.names)
            mean = var = np.empty((0, d))
            out = {f"R_{c}_{kind}": np.empty(0) for kind in self._idx
                   for c in ("spread", "shift")}
            self._block_shift, self._block_var = mean, var
            self._block_ends, self._block = ends, out
            return out
        # Each window's rows as they are (two passes, no running sums): residuals at rounding
        # beside noise a million times larger keep their digits, whatever the blocks.
        rows = np.lib.stride_tricks.sliding_window_view(self._z, W, axis=0)[ends - W - first]
        if np.isnan(rows).any():  # rows the twin could not predict: the others' statistics
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(rows, axis=2)
                var = np.nanmean((rows - mean[:, :, None]) ** 2, axis=2)
        else:
            mean = rows.mean(axis=2)
            var = ((rows - mean[:, :, None]) ** 2).mean(axis=2)
        out = {}
        for kind, cols in self._idx.items():
            if cols.size:
                out[f"R_spread_{kind}"] = np.log10(var[:, cols].mean(axis=1) + CHANNEL_FLOOR)
                out[f"R_shift_{kind}"] = np.log10((mean[:, cols] ** 2).mean(axis=1)
                                                  + CHANNEL_FLOOR)
            else:
                out[f"R_spread_{kind}"] = out[f"R_shift_{kind}"] = np.full(len(ends), np.nan)
        self._block_shift, self._block_var = mean, var
        self._block_ends, self._block = ends, out
        return out

    # -- the baseline and the evidence --------------------------------------------------------

    def gather(self, rows: slice, restart: bool = False) -> None:
        """The latest block's ``rows`` are baseline windows (``restart``: a new baseline)."""
        if restart or self._base is not None:
            self._gathered, self._base = {}, None
            d = len(self.names)
            self._rows_sum, self._rows_outer, self._rows_n = np.zeros(d), np.zeros((d, d)), 0
            self._rows_upto = 0
        for key, col in (*self._block.items(), ("shift", self._block_shift)):
            self._gathered.setdefault(key, []).append(np.asarray(col)[rows])
        ends = self._block_ends[rows]
        if len(ends):
            # Every row of these windows once: from where the last gathering stopped.
            first = self.n_seen - len(self._z)
            lo = max(int(ends[0]) - self.window, self._rows_upto, first)
            hi = int(ends[-1])
            if hi > lo:
                z = self._z[lo - first:hi - first]
                z = z[np.all(np.isfinite(z), axis=1)]
                self._rows_sum += z.sum(axis=0)
                self._rows_outer += z.T @ z
                self._rows_n += len(z)
                self._rows_upto = hi

    def freeze(self) -> None:
        """The baseline is complete: its statistics, every later window is read against."""
        stats = {}
        for key, parts in self._gathered.items():
            x = np.concatenate(parts)
            with np.errstate(invalid="ignore"):
                stats[key] = (np.nanmean(x, axis=0), np.nanstd(x, axis=0, ddof=1))
        self._base, self._gathered = stats, {}
        n = self._rows_n
        if n > len(self.names):
            mean = self._rows_sum / n
            self.row_mean = mean
            self.row_cov = (self._rows_outer - n * np.outer(mean, mean)) / (n - 1)
        else:
            self.row_mean = self.row_cov = None

    def fitted(self) -> dict[str, Any]:
        """The calibration rows' scales and the baseline's statistics (JSON-able lists).

        What :meth:`load_fitted` takes: a stage fitted once (a profile, ``idt-desk fit``)
        reads every later stream's residuals against it.

        Raises
        ------
        ValueError
            Before :meth:`fit` and :meth:`freeze`.
        """
        if self.scale is None or self._base is None:
            raise ValueError("the twin's residual scales or baseline are not fitted yet")

        def listed(x: Any) -> Any:
            return None if x is None else np.asarray(x, dtype=np.float64).tolist()

        return {"description": self.twin.description, "names": list(self.names),
                "kinds": list(self.twin.kinds), "misfit": self.misfit, "exact": self.exact,
                "scale": listed(self.scale), "spread": listed(self.spread),
                "action_spread": listed(self.action_spread),
                "base": {k: [listed(m), listed(sd)] for k, (m, sd) in self._base.items()},
                "row_mean": listed(self.row_mean), "row_cov": listed(self.row_cov)}

    def load_fitted(self, d: Mapping[str, Any]) -> None:
        """Take scales and a baseline :meth:`fitted` on another stream of the same loop.

        Raises
        ------
        ValueError
            Other state variables or kinds, or a malformed field, named in one line.
        """
        names = tuple(str(n) for n in d.get("names") or ())
        if names != self.names:
            raise ValueError("the twin's residuals were fitted on other state variables")
        if tuple(d.get("kinds") or ()) != tuple(self.twin.kinds):
            raise ValueError("the twin's residuals were fitted with variables of other kinds "
                             "(position, velocity, other)")
        dim = len(self.names)

        def arr(x: Any, shape: tuple[int, ...] | None = None) -> np.ndarray | None:
            if x is None:
                return None
            out = np.asarray(x, dtype=np.float64)
            if shape is not None and out.shape != shape:
                raise ValueError(f"an array of shape {out.shape}, not {shape}")
            return out

        try:
            scale = arr(d["scale"], (dim,))
            spread = arr(d.get("spread"), (dim,))
            base = {str(k): (arr(v[0]), arr(v[1])) for k, v in d["base"].items()}
            row_mean, row_cov = arr(d.get("row_mean"), (dim,)), arr(d.get("row_cov"),
                                                                     (dim, dim))
            action_spread = arr(d.get("action_spread"))
            misfit, exact = float(d["misfit"]), bool(d["exact"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise ValueError(f"the twin's fitted residuals: {type(exc).__name__}: {exc}"
                             ) from None
        if scale is None or not np.all(scale > 0):
            raise ValueError("the twin's residual scales must be positive")
        self.scale, self.spread, self.action_spread = scale, spread, action_spread
        self.misfit, self.exact = misfit, exact
        self._gathered, self._base = {}, base
        self.row_mean, self.row_cov = row_mean, row_cov

    @property
    def has_baseline(self) -> bool:
        """Whether the baseline's statistics are set."""
        return self._base is not None

    def evidence(self, row: int, hypotheses: bool = True) -> TwinEvidence | None:
        """What the twin saw in window ``row`` of the latest block (None before a baseline).

        ``hypotheses``: simulate each of the twin's hypotheses on the window's rows (one
        twin step per row each; an alarm's, not every window's).
        """
        if self._base is None:
            return None
        base = self._base

        def z_of(key: str, x: float) -> float:
            mu, sd = base[key]
            return float((x - mu) / max(sd, RESOLUTION)) if np.isfinite(x) else 0.0

        z = {k: z_of(k, float(v[row])) for k, v in self._block.items()}
        ratio = {k: float(10 ** (v[row] - base[k][0])) for k, v in self._block.items()
                 if k.startswith("R_spread") and np.isfinite(v[row])}
        mu, sd = base["shift"]
        # A mean residual under the channels' floor (1e-4 of the scale) is rounding.
        sd = np.maximum(np.nan_to_num(sd, nan=np.inf), np.sqrt(CHANNEL_FLOOR))
        change = self._block_shift[row] - mu
        bias = change / sd
        t = change / np.sqrt((self._block_var[row] + CHANNEL_FLOOR) / self.window)
        ev = TwinEvidence(z, ratio, bias, t, names=self.names)
        if hypotheses:
            rows = self.window_rows(row)
            s = self._s[rows]
            a = None if self._a is None else self._a[rows]
            for h in self.twin.hypotheses(s, a):
                ev.hypotheses.append((h, np.mean(h.delta / self.scale, axis=0) / sd))
        return ev

    def window_rows(self, row: int) -> slice:
        """The rows of window ``row`` of the latest block, in the tail (``_z``, ``_s``, ``_a``)."""
        end = int(self._block_ends[row]) - (self.n_seen - len(self._s))
        return slice(max(end - self.window, 0), end)

    def rows(self, rows: slice) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The tail's residual (in the stage's units), S and A over ``rows`` (copies)."""
        a = None if self._a is None else self._a[rows].copy()
        return self._z[rows].copy(), self._s[rows].copy(), a

    def kinds_of(self) -> Mapping[str, np.ndarray]:
        """The state's columns by kind (``pos``, ``vel``)."""
        return dict(self._idx)


def twin_over(twin: Twin, window: int, names: Sequence[str], s: np.ndarray,
              a: np.ndarray | None, s_next: np.ndarray, ends: np.ndarray, *, fit: slice,
              baseline: slice, action_names: Sequence[str] = ()
              ) -> tuple[TwinStage, dict[str, np.ndarray]]:
    """A finished run's rows through a :class:`TwinStage` in one block, as a session would.

    The scale fitted on rows ``fit`` (the symbols' calibration rows), the channels of the
    windows ending at ``ends``, their baseline the windows ``baseline``: the stage says what
    the twin saw in any of those windows (:meth:`TwinStage.evidence`). For analyses of
    recorded runs (``reproduce cheetah``, ``reproduce cheetah-live``).
    """
    stage = TwinStage(twin, window, names, action_names)
    stage.fit(s[fit], None if a is None else a[fit], s_next[fit])
    channels = stage.push(s, a, s_next, ends)
    stage.gather(baseline, restart=True)
    stage.freeze()
    return stage, channels
