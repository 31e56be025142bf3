"""Whether the frozen symbols still cover the data, and whether a change survives wider bins.

The symbols' bins are cut once, over the range of the first windows (``Symbolizer``). A loop
that leaves that range has its values clamped into the edge bins, and a shift of P, H_f or
H_b can then come from the clamping rather than from the coupling. :class:`RangeWatch` says
when that happens (``symbols_out_of_range``) and re-checks it: the baseline's windows and
the latest ones are symbolised again with bins widened to cover both (mean and scale
frozen, :meth:`~idt_desk.metrics.symbolize.Symbolizer.widened`), and each IDT component's
shift is stated in baseline standard deviations with either set of bins. A shift seen with
the wider bins is in the loop; one only the calibrated bins show was the edge bins.

Nothing is said before the baseline exists (clamping then is part of what the baseline is
gathered with), nor after when the re-check finds no component moved in either binning: a
settled HalfCheetah gait calibrated on its first episode clamps a few per cent of every later
window, harmlessly. Both other cases happen. A kicked pendulum gains energy and its rates
leave the calibrated range for good: re-calibrating is right. A settled RL gait lives on a
narrow cycle; 1 % action noise spreads its states past the first windows' range at once (22 %
clamped on the shipped default), and the shift the IDT sees is the perturbation itself:
re-calibrating then would take the perturbed loop as normal.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from idt_desk.detection.monitor import IDT_METRICS
from idt_desk.live.alarms import Later
from idt_desk.metrics.engine import sliding_metrics
from idt_desk.metrics.symbolize import Symbolizer

if TYPE_CHECKING:
    from idt_desk.live.seams import CalibrationHost

__all__ = ["VERDICTS", "RangeWatch", "RowRing", "recheck", "recheck_text", "shift_verdict"]


#: A :func:`recheck` verdict in a few words (an event's details, the terminal's status).
VERDICTS = {"shift": "the shift holds with wider bins",
            "artefact": "no shift with wider bins: an edge-bin artefact",
            "none": "no shift with wider bins either"}


class RowRing:
    """The latest raw (S, A, S') rows of a stream, by transition index, in one growing ring."""

    def __init__(self) -> None:
        self._data = np.empty((0, 0))
        #: Rows taken in so far (the index the next row gets).
        self.total = 0
        self._widths: tuple[int, int, int] | None = None

    def add(self, s: np.ndarray, a: np.ndarray | None, s_next: np.ndarray, keep: int) -> None:
        """Append rows; at least the latest ``keep`` stay readable."""
        s, s_next = np.asarray(s, np.float64), np.asarray(s_next, np.float64)
        a = np.empty((len(s), 0)) if a is None else np.asarray(a, np.float64).reshape(len(s), -1)
        block = np.hstack([s, a, s_next])
        if self._widths is None:
            self._widths = (s.shape[1], a.shape[1], s_next.shape[1])
            self._data = np.empty((0, block.shape[1]))
        cap = len(self._data)
        if max(keep, len(block)) > cap:  # grow: the rows still held keep their indices
            held = min(self.total, cap)
            old = self.rows(self.total - held, self.total, stacked=True) if held else block[:0]
            cap = 1 << max(int(keep), len(block), 1024).bit_length()
            self._data = np.empty((cap, block.shape[1]))
            self._data[np.arange(self.total - held, self.total) % cap] = old
        if len(block):
            self._data[np.arange(self.total, self.total + len(block)) % cap] = block
        self.total += len(block)

    def rows(self, first: int, end: int, stacked: bool = False) -> Any:
        """Rows ``[first, end)`` as (s, a or None, s_next); None when no longer held."""
        cap = len(self._data)
        if first < 0 or end > self.total or first < self.total - cap or end <= first:
            return None
        block = self._data[np.arange(first, end) % cap]
        if stacked:
            return block
        ds, da, _ = self._widths or (0, 0, 0)
        return block[:, :ds], (block[:, ds:ds + da] if da else None), block[:, ds + da:]


def _windows(sym_s: Symbolizer, sym_a: Symbolizer | None, rows: tuple, window: int,
             stride: int, correction: str | None) -> dict[str, np.ndarray]:
    s, a, s_next = rows
    return sliding_metrics(sym_s.transform(s), sym_s.transform(s_next),
                           None if sym_a is None else sym_a.transform(a), window, stride,
                           correction)


def recheck(sym_s: Symbolizer, sym_a: Symbolizer | None, reference: tuple, recent: tuple, *,
            window: int, stride: int, correction: str | None = None, k: float = 3.0,
            cache: dict[str, Any] | None = None) -> dict[str, Any]:
    """Each IDT component's shift, recent windows against reference ones, in two binnings.

    ``reference`` and ``recent`` are raw rows (s, a or None, s_next); each is cut into its
    own windows (W ``window``, ``stride``). With the calibrated bins (``sym_s``, ``sym_a``)
    and with bins widened to cover both sets of rows, a component's shift is the recent
    windows' mean minus the reference windows' mean, over the reference windows' standard
    deviation (ddof 1). ``shifted`` names the components the loop moved: at least ``k``
    from the baseline in the widened bins, or at least ``k`` in the calibrated bins and
    still, same sign, at least half that in the widened ones. ``verdict``: ``"shift"`` when
    there are any; ``"artefact"`` when the calibrated bins show a shift of ``k`` that the
    widened ones do not keep (the clamping made it); ``"none"`` when neither binning does.
    ``cache``: a dict kept with ``reference`` (its windows in the calibrated bins, which do
    not change, are computed once into it).
    """
    wide = (sym_s.widened(reference[0], reference[2], recent[0], recent[2]),
            None if sym_a is None else sym_a.widened(reference[1], recent[1]))
    cache = {} if cache is None else cache
    if "calibrated" not in cache:
        cache["calibrated"] = _windows(sym_s, sym_a, reference, window, stride, correction)
    shift: dict[str, dict[str, float]] = {}
    for label, (ss, sa), ref in (
            ("calibrated", (sym_s, sym_a), cache["calibrated"]),
            ("widened", wide, _windows(*wide, reference, window, stride, correction))):
        now = _windows(ss, sa, recent, window, stride, correction)
        for m in IDT_METRICS:
            r, x = ref[m][np.isfinite(ref[m])], now[m][np.isfinite(now[m])]
            sd = float(np.std(r, ddof=1)) if len(r) > 1 else math.nan
            z = (float(np.mean(x)) - float(np.mean(r))) / sd if len(x) and sd > 0 else math.nan
            shift.setdefault(m, {})[label] = round(z, 2) if math.isfinite(z) else math.nan
    verdict, shifted = shift_verdict(shift, k)
    return {"verdict": verdict, "shifted": shifted, "shift": shift, "k": float(k)}


def shift_verdict(shift: Mapping[str, Mapping[str, float]], k: float) -> tuple[str, list[str]]:
    """The verdict and the moved components of :func:`recheck`'s shifts (see there)."""
    def moved(m: str) -> bool:
        cal, wide = shift[m]["calibrated"], shift[m]["widened"]
        return abs(wide) >= k or (abs(cal) >= k and cal * wide > 0 and abs(wide) >= abs(cal) / 2)

    shifted = [m for m in IDT_METRICS if moved(m)]
    clamped = any(abs(shift[m]["calibrated"]) >= k for m in IDT_METRICS)
    return ("shift" if shifted else ("artefact" if clamped else "none")), shifted


def recheck_text(check: Mapping[str, Any]) -> str:
    """A :func:`recheck` in one or two sentences, for the alarm panel and the terminal."""
    shift, k = check["shift"], float(check["k"])

    def sd(m: str, b: str) -> str:
        name, v = ("ΔH" if m == "dH" else m), shift[m][b]
        return f"{name} {v:+.1f} sd" if math.isfinite(v) else f"{name} undefined"

    head = "Re-checked with bins widened to cover the baseline and the latest windows: "
    if check["verdict"] == "shift":
        names = check["shifted"]
        return (head + ", ".join(sd(m, "widened") for m in names) + " from the baseline ("
                "calibrated bins: " + ", ".join(f"{shift[m]['calibrated']:+.1f}" for m in names)
                + "). The loop itself changed, not only its edge bins: re-calibrating now "
                "would take the changed loop as the new normal.")
    finite = [m for m in IDT_METRICS if math.isfinite(shift[m]["calibrated"])]
    top = max(finite, key=lambda m: abs(shift[m]["calibrated"]), default=None)
    if top is None:
        return head + "the IDT components cannot be compared (undefined windows)."
    if check["verdict"] == "artefact":
        return (head + f"no IDT component is beyond ±{k:g} sd ({sd(top, 'widened')}, where "
                f"the calibrated bins gave {shift[top]['calibrated']:+.1f}). The change was "
                "the edge bins: re-calibrate.")
    return (head + f"no IDT component is beyond ±{k:g} sd of the baseline in either binning "
            f"(largest: {sd(top, 'calibrated')} in the calibrated bins).")


class RangeWatch:
    """Warn once the symbols' calibrated range has stopped covering the data; re-check it.

    Clamping comes in bursts (a pendulum whose energy grew passes its old extremes a few
    times a swing), so the rule looks at the mean out-of-range fraction of the latest
    ``persist`` windows: above ``warn`` raises the warning once a baseline exists and a
    re-check finds that it matters (:meth:`_worth_saying`); below a fifth of ``warn`` clears
    it, and so does a re-check that finds no component moved in either binning (a
    ``symbols_in_range`` event either way). While the warning holds, every ``persist`` windows
    (and at once when it is raised) the latest ``persist`` windows are re-checked against the
    baseline's (:func:`recheck`): the result is the warning's ``recheck``. The raising event
    carries the first one; a ``symbols_recheck`` event each one whose verdict differs from the
    last (a perturbation may come while it holds).

    Parameters
    ----------
    warn, persist, later
        The fraction, the windows it is averaged over, and how events are queued.
    session
        The session whose rows (:meth:`add_rows`), symbols and baseline are re-checked
        (None: no re-check; a dialogue's turns have no rows to re-check).
    """

    #: Clamping over this many times ``warn`` is heavy: the bar turns red while the notice
    #: is said. Heavy clamping alone is not said: a clean default cheetah clamps 42 % of its
    #: windows for a while in a stumbling episode (said at 4,872 s before) with no IDT
    #: component moved in either binning.
    HEAVY = 4
    #: Most memory the raw rows may take; a longer baseline is not re-checked.
    MAX_BYTES = 256 * 2**20

    def __init__(self, warn: float, persist: int, later: Later,
                 session: CalibrationHost | None = None) -> None:
        self.warn = warn
        self.recent: deque[float] = deque(maxlen=persist)
        self.later = later
        self.session = session
        #: The warning in force ({"fraction", "since_i", "recheck"?}), or None.
        self.warning: dict[str, Any] | None = None
        self._rows = RowRing()
        #: Raw rows of the windows the baseline in force was gathered from (None: none yet).
        self.reference: tuple | None = None
        self._cache: dict[str, Any] = {}  # what recheck() keeps of the reference
        self._since_check = 0
        self._verdict: str | None = None  # the latest re-check's, while the warning holds
        #: Windows since a re-check found the clamping harmless (None: none since it began).
        self._quiet: int | None = None

    def _spans(self) -> tuple[int, int]:
        """Rows of the baseline's windows, and of the latest ``persist`` windows."""
        p = self.session.preset
        return (p.window + (self.session.monitor.n_baseline - 1) * p.stride,
                p.window + (self.recent.maxlen - 1) * p.stride)

    def add_rows(self, s: np.ndarray, a: np.ndarray | None, s_next: np.ndarray,
                 backlog: int) -> None:
        """Keep a session's new raw rows, as long as a window still to come may need them.

        ``backlog``: rows taken in but not yet judged (buffered for the symbols' calibration).
        """
        if self.session is None:
            return
        keep = max(self._spans()) + len(s) + backlog
        width = np.shape(s)[1] * 2 + (0 if a is None else np.size(a) // max(len(s), 1))
        if keep * width * 8 > self.MAX_BYTES:
            return  # a baseline too long to hold (limits allow 10,000 windows of any stride)
        self._rows.add(s, a, s_next, keep=keep)

    def update(self, table: Mapping[str, np.ndarray], baseline_row: int | None = None) -> None:
        """Take in new windows' out-of-range fractions.

        ``baseline_row``: the row of ``table`` at which a baseline was completed; the rows
        of its windows become the reference.
        """
        if self.session is not None and self.session.monitor.baseline is None:
            self.reference = None  # a baseline being gathered again
            self._quiet = None
        recent = self.recent
        for j, frac in enumerate(table["out_of_range"]):
            if j == baseline_row and self.session is not None:
                end = int(table["end"][j])
                self.reference = self._rows.rows(end - self._spans()[0], end)
                self._cache = {}
            recent.append(float(frac))
            if len(recent) < recent.maxlen:
                continue
            mean = sum(recent) / len(recent)
            at = int(table["end"][j])
            if self.warning is None and mean > self.warn:
                armed = baseline_row is None or j >= baseline_row  # rows before: gathering
                said, check = self._worth_saying(at, mean, armed)
                if not said:
                    continue
                self._verdict = check and check["verdict"]
                # Published whole: a snapshot taken meanwhile never sees it without its check.
                self.warning = {"fraction": mean, "since_i": at,
                                **({"recheck": {**check, "at": at}} if check else {})}
                self.later("symbols_out_of_range", at=at, fraction=mean, windows=len(recent),
                           **({"recheck": check} if check else {}))
            elif self.warning is not None:
                self.warning["fraction"] = mean
                if mean < self.warn / 5:
                    self.warning = None
                    self.later("symbols_in_range", at=at, fraction=mean)
                else:
                    self._since_check += 1
                    if self._since_check >= recent.maxlen and (check := self._recheck(at)):
                        if check["verdict"] == "none":
                            # The clamping goes on but moves nothing (a perturbation over, a
                            # settled gait left clamped a little): as when it is not said.
                            self.warning, self._quiet = None, 1
                            self.later("symbols_in_range", at=at, fraction=mean,
                                       recheck=check)
                            continue
                        self.warning["recheck"] = {**check, "at": at}
                        if check["verdict"] != self._verdict:
                            self.later("symbols_recheck", at=at, recheck=check)
                        self._verdict = check["verdict"]

    def _worth_saying(self, at: int, mean: float, armed: bool = True
                      ) -> tuple[bool, dict[str, Any] | None]:
        """Whether clamping of ``mean`` (> ``warn``) at transition ``at`` is said now; its re-check.

        ``armed``: False for a window judged before the baseline was completed.

        Clamping is judged against the baseline. Before there is one it is what the baseline is
        gathered with, and nothing is said yet. With one, it is said when a re-check finds an IDT
        component moved in either binning (the alarm's shift holds, or the edge bins made it), or
        when nothing can re-check it (no rows: a dialogue; a baseline too long to hold). Clamping
        the re-check finds harmless, however heavy, is re-checked every ``persist`` windows while it
        lasts: a settled gait calibrated on its first episode leaves that range by a few per cent in
        every later one, and said so, a clean session was told to re-calibrate before anything
        happened.
        """
        ses = self.session
        if ses is None:
            return True, None
        if ses.monitor.baseline is None or not armed:
            return False, None
        if self.reference is None:
            return True, None
        if self._quiet is not None and self._quiet < self.recent.maxlen:
            self._quiet += 1
            return False, None
        check = self._recheck(at)
        if check is None or check["verdict"] != "none":
            self._quiet = None
            return True, check
        self._quiet = 1
        return False, None

    def _recheck(self, at: int) -> dict[str, Any] | None:
        """Re-check the latest windows up to transition ``at`` (see :func:`recheck`).

        None: nothing to check with (no baseline yet, or its rows no longer held).
        """
        self._since_check = 0
        ses = self.session
        if ses is None or self.reference is None:
            return None
        recent = self._rows.rows(at - self._spans()[1], at)
        if recent is None:
            return None
        pipe = ses.pipeline
        return recheck(pipe.sym_s, pipe.sym_a, self.reference, recent,
                       window=ses.preset.window, stride=ses.preset.stride,
                       correction=ses.config.correction, k=ses.monitor.k, cache=self._cache)
