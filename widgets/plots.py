"""The metric plots: stacked, x-linked live plots of P, H_f, H_b, ΔH (and reward).

They draw the baseline bands, the alarmed windows, the shaded perturbation and modulation
periods with their names, the impulses and the undefined windows, follow the data or stay
frozen, and show the values under the cursor. The navigator above them is
:mod:`.navigator`, their legend :mod:`.legend`, the periods they shade :mod:`.periods`,
a saved figure :mod:`.figure_export`; the reward's episode returns are :mod:`.returns_plot`.

One file: the stacked plots share one x axis, one band and marker model and one
decimation path, driven by one refresh (:meth:`MetricPlots.update_snapshot`).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pyqtgraph as pg
from idt_desk_widgets.figure_export import save_figure
from idt_desk_widgets.history import PixelColumns, PlotHistory, cell_rows, grid_step
from idt_desk_widgets.legend import SHORT_WORDS, Legend, Swatch, band_label
from idt_desk_widgets.periods import event_x, format_params, periods_of, pulses_of
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QLabel

from idt_desk.live.session import Snapshot, undefined_reason
from idt_desk.words import METRIC_WORDS

__all__ = ["METRICS", "NON_NEGATIVE", "SHOWN_WHEN_DEFINED", "STRUCTURAL", "TWIN", "MetricPlots"]

#: (window column, axis label (HTML), curve colour)
METRICS = (
    ("P", "P", (40, 110, 220)),
    ("H_f", "H<sub>f</sub> (bits)", (200, 110, 20)),
    ("H_b", "H<sub>b</sub> (bits)", (130, 60, 180)),
    ("dH", "ΔH (bits)", (20, 140, 120)),
    ("R_spread_pos", "physics residual", (170, 40, 40)),
    ("P_adj", "P − len. null", (40, 60, 140)),
    ("reward", "reward / step", (120, 120, 120)),
    ("cos_sim", "cosine", (200, 50, 90)),
)
#: The structural baselines of a dialogue (``idt_desk.metrics.embeddings``), drawn together in the
#: ``cos_sim`` plot when a session computes them: (column, legend, colour).
STRUCTURAL = (
    ("cos_sim", "prompt–reply", (200, 50, 90)),
    ("adjacent", "adjacent replies", (230, 150, 30)),
    ("drift", "reply vs reply 1", (90, 90, 90)),
)
#: The residual of the physics (``idt_desk.metrics.twin``), drawn together in one plot in
#: decades against the baseline's mean (0: as in the baseline): (column, legend, colour).
TWIN = (
    ("R_spread_pos", "positions' spread", (170, 40, 40)),
    ("R_shift_pos", "positions' shift", (230, 140, 140)),
    ("R_spread_vel", "velocities' spread", (40, 70, 170)),
    ("R_shift_vel", "velocities' shift", (130, 160, 230)),
)
#: Plots shown once a session computes their column (a dialogue's length-adjusted P, its
#: structural baselines, the twin's residual), hidden again for a new session.
SHOWN_WHEN_DEFINED = ("P_adj", "cos_sim", "R_spread_pos")
#: Metrics that cannot be negative: their ±kσ band is clipped at 0 (ΔH and reward may be).
NON_NEGATIVE = frozenset({"P", "H_f", "H_b"})
_BAND = (60, 170, 90, 45)
_MEAN = (60, 140, 70)
_DOT = (220, 30, 30)
_PERTURB = (230, 80, 60, 38)
_MODULATE = (60, 120, 230, 32)
_PULSE = (200, 60, 40)
#: Label colours of perturbation and modulation periods (darker than their shading).
_TEXT = {"perturbation": (170, 45, 35), "modulation": (35, 75, 165), "pulse": _PULSE}
#: Heights (fraction of the P plot, from its bottom) of the rows of period / impulse names.
_LABEL_ROWS = (0.93, 0.81, 0.69, 0.57)
_UNDEFINED = (130, 130, 130)
#: Shaded periods, impulse markers and undefined-window markers kept on the plots (bounded).
MAX_PERIODS = 40
MAX_PULSES = 40
MAX_UNDEFINED = 500
#: Grid cells (pixels, 1-2 of them) of the drawn alarm dots (5 px) and undefined marks (9 px):
#: of markers in one cell only the first is drawn, the others lie under it.
DOT_CELL = 1.5
UNDEFINED_CELL = 3.0
#: Smallest y span shown (bits; P is a ratio): a constant metric is not magnified to noise.
MIN_SPAN = 1e-3


class MetricPlots(pg.GraphicsLayoutWidget):
    """The IDT's four metrics (plus reward) against the loop's time, sharing one x axis.

    Fed by :meth:`update_snapshot` from the GUI timer; draws the baseline mean and ±kσ band
    once calibrated (clipped at 0 for the non-negative P, H_f and H_b), red dots on
    excursions, shades perturbation (red) and modulation (blue) periods from the session's
    events with their names, marks one-shot impulses (a kick) with a labelled vertical line,
    and marks windows whose P is undefined with a grey triangle on the P plot's lower edge.
    One legend row above the plots explains all of these.

    The x axis follows the data (:meth:`set_follow`: the whole session, or the latest
    ``span`` seconds or turns) until it is frozen (:meth:`freeze`, or a drag or wheel turn on
    a plot, which only moves x); the y ranges fit what is in view. Hovering shows a cursor
    line and the values of the nearest window (:attr:`cursor_text`, ``cursorChanged``).
    """

    #: The view was frozen (a drag, a wheel turn, centre_on) or follows the data again.
    frozenChanged = Signal(bool)
    #: The values under the cursor in words ("" when the pointer left the plots).
    cursorChanged = Signal(str)

    def __init__(self, parent: Any = None) -> None:
        pg.setConfigOptions(antialias=False, useOpenGL=False)
        super().__init__(parent)
        self.setBackground("w")
        self.plots: dict[str, pg.PlotItem] = {}
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.dots: dict[str, pg.ScatterPlotItem] = {}
        self.bands: dict[str, pg.LinearRegionItem] = {}
        self.means: dict[str, pg.InfiniteLine] = {}
        self.legend = Legend(colCount=7, labelTextColor=(60, 60, 60), labelTextSize="8.5pt",
                             sampleType=Swatch, horSpacing=4, frame=False)
        self.legend.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
        # pyqtgraph's legends ignore transformations (to keep their size in a zoomed view);
        # these are not in a zoomed view, and must grow with a figure exported at 2×.
        self.legend.setFlag(self.legend.GraphicsItemFlag.ItemIgnoresTransformations, False)
        self.addItem(self.legend, row=0, col=0)
        self._legend_key: tuple = ()
        self._band_text = "alarm band"
        self._shades: dict[str, _Marks] = {}
        self._lines: dict[str, _Marks] = {}
        self._brushes = {kind: pg.mkBrush(*c) for kind, c in (("perturbation", _PERTURB),
                                                               ("modulation", _MODULATE))}
        #: What was drawn last (see _draw): redrawn only when the rows or the view change.
        self._drawn: tuple = ()
        self._dotted: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._dot_grid: dict[str, tuple[float, float]] = {}
        self._undefined_dx = 1.0
        #: The right end of the frame last drawn in Whole history (_settle, _unchanged).
        self._still: dict[str, Any] | None = None
        #: Pixel columns per screen pixel for the curves (a figure saved at 2x: 2).
        self._px_scale = 1.0
        first = None
        for row, (key, label, color) in enumerate(METRICS, start=1):
            p = self.addPlot(row=row, col=0)
            p.setLabel("left", label)
            if key in METRIC_WORDS:  # the axis names a metric by its symbol: say what it is
                name, meaning = METRIC_WORDS[key]
                p.getAxis("left").setToolTip(f"{label.split(' (')[0]}, {name}: {meaning}")
            # No clipToView or auto-downsampling: the curves get only their rows in view, a
            # pixel column's lowest and highest (_draw); pyqtgraph's own would walk and copy
            # the whole history every frame, and a NaN in it takes its slow path.
            p.setMenuEnabled(False)
            p.hideButtons()
            # A drag or a wheel turn moves time only (and freezes the view); y fits the data.
            p.setMouseEnabled(x=True, y=False)
            p.getViewBox().sigRangeChangedManually.connect(self._moved_by_hand)
            # Ranges are managed here (see _follow): pyqtgraph's per-frame auto-range makes
            # every axis regenerate its ticks each frame, which halves the frame rate.
            p.disableAutoRange()
            for side in ("left", "bottom"):
                p.getAxis(side).enableAutoSIPrefix(False)
            p.getAxis("left").setWidth(62)  # equal widths keep the x-linked plots aligned
            if first is None:
                first = p
            else:
                p.setXLink(first)
            band = pg.LinearRegionItem((0, 0), orientation="horizontal", movable=False,
                                       brush=pg.mkBrush(*_BAND), pen=pg.mkPen(None))
            band.setZValue(-20)
            band.setVisible(False)
            p.addItem(band, ignoreBounds=True)
            dashed = pg.mkPen(_MEAN, width=1, style=Qt.PenStyle.DashLine)
            mean = pg.InfiniteLine(angle=0, pen=dashed)
            mean.setVisible(False)
            p.addItem(mean, ignoreBounds=True)
            curve = p.plot(pen=pg.mkPen(color, width=1))
            dots = pg.ScatterPlotItem(size=5, pen=None, brush=pg.mkBrush(*_DOT))
            p.addItem(dots)
            self.plots[key], self.curves[key], self.dots[key] = p, curve, dots
            self.bands[key], self.means[key] = band, mean
            # The periods and impulses: one item paints them all, on each plot (their names
            # on P are _Anchor items).
            shades = _Marks()
            lines = _Marks(pg.mkPen(_PULSE, width=1, style=Qt.PenStyle.DashDotLine))
            shades.setZValue(-30)
            lines.setZValue(-10)
            p.addItem(shades, ignoreBounds=True)
            p.addItem(lines, ignoreBounds=True)
            self._shades[key], self._lines[key] = shades, lines
        # Windows whose P is undefined: grey triangles on the P plot's lower edge, with the
        # reason as a tooltip.
        self.undefined = pg.ScatterPlotItem(size=9, symbol="t1", pen=None,
                                            brush=pg.mkBrush(*_UNDEFINED), hoverable=True,
                                            tip=lambda x, y, data: f"t = {x:.2f} s: {data}")
        self.undefined.setZValue(10)
        self.plots["P"].addItem(self.undefined, ignoreBounds=True)
        self._undefined_key: tuple = ()
        self._reasons: dict[float, str] = {}
        #: Each plot's y range as set: (bottom, top, when, the share of it the data may take).
        self._yrange: dict[str, tuple[float, float, float, float]] = {}
        #: The share of the P plot's height below its names' lowest row (1: no names).
        self._label_floor = 1.0
        #: The name-carrying items on P of each shaded period, of each impulse.
        self._regions: list[tuple[_Anchor, ...]] = []
        self._periods_key: tuple = ()
        self._pulses: list[tuple[_Anchor, ...]] = []
        self._pulses_key: tuple = ()
        self._label_span = 0.0
        #: Display names of perturbations and modulations (name -> label) for the plots.
        self.names: dict[str, str] = {}
        self.defaults: dict[str, dict[str, Any]] = {}
        self._has_modulation = False
        self._has_impulse = False
        self._seen_undefined = False
        self.hint = QLabel("", self)
        self.hint.setObjectName("plot_hint")
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.hint.setWordWrap(True)
        self.hint.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.hint.setStyleSheet("QLabel { color: #505660; background: rgba(255,255,255,215); "
                                "border: 1px solid #d6d9de; border-radius: 8px; "
                                "padding: 14px; font-size: 15px; }")
        self.hint.hide()
        self._hint_on = False
        #: The x axis: the loop's own time, or the turn number of a dialogue.
        self.x_label = "loop time (s)"
        self._whole_ticks = False
        # The other structural baselines share the cosine plot, with a legend of their own.
        cos = self.plots["cos_sim"]
        self.extra: dict[str, pg.PlotDataItem] = {}
        # Top left, on a light ground: the curves stay readable behind it.
        legend = cos.addLegend(offset=(4, 1), labelTextSize="8pt", colCount=3,
                               labelTextColor=(60, 60, 60), brush=pg.mkBrush(255, 255, 255, 200),
                               verSpacing=-6)
        legend.setFlag(legend.GraphicsItemFlag.ItemIgnoresTransformations, False)
        for key, text, color in STRUCTURAL:
            if key != "cos_sim":
                self.extra[key] = cos.plot(pen=pg.mkPen(color, width=1))
            legend.addItem(self.curves[key] if key == "cos_sim" else self.extra[key], text)
        # The twin's four channels share the residual's plot, with a legend of their own.
        twin = self.plots["R_spread_pos"]
        legend = twin.addLegend(offset=(4, 1), labelTextSize="8pt", colCount=4,
                                labelTextColor=(60, 60, 60),
                                brush=pg.mkBrush(255, 255, 255, 200), verSpacing=-6)
        legend.setFlag(legend.GraphicsItemFlag.ItemIgnoresTransformations, False)
        for key, text, color in TWIN:
            if key != "R_spread_pos":
                self.extra[key] = twin.plot(pen=pg.mkPen(color, width=1))
            legend.addItem(self.curves[key] if key == "R_spread_pos" else self.extra[key], text)
        twin.setToolTip("The residual of the physics: S' against what the loop's own model "
                        "(its twin) predicts from S and A, in decades against the baseline "
                        "(0: as in the baseline). Noise in what is measured spreads the "
                        "positions'; a push or heavier gravity shifts the velocities'; a "
                        "changed action leaves it where it was. Red dots: the twin's alarm.")
        #: The user hid the residual's plot (the navigator's toggle).
        self.twin_hidden = False
        self._twin_rel: dict[str, np.ndarray] = {}
        #: (history version, baseline) _twin_rel was computed for; how often it was.
        self._twin_for: tuple[int, Any] = (-1, None)
        self._twin_n = 0
        self._optional = {"reward": False, **{key: False for key in SHOWN_WHEN_DEFINED}}
        # Navigation: what x follows, whether it is frozen, the cursor.
        self.follow = "all"
        self.span = 60.0
        self.frozen = False
        self._setting_x = False
        self._last: tuple[np.ndarray, dict[str, np.ndarray], Any] | None = None
        #: Every window of the session (snapshots hold only the latest ones).
        self.history = PlotHistory()
        self.cursor_text = ""
        cursor_pen = pg.mkPen((90, 90, 90), width=1, style=Qt.PenStyle.DotLine)
        self.cursor_lines: dict[str, pg.InfiniteLine] = {}
        for key, plot in self.plots.items():
            line = pg.InfiniteLine(angle=90, movable=False, pen=cursor_pen)
            line.setZValue(20)
            line.setVisible(False)
            plot.addItem(line, ignoreBounds=True)
            self.cursor_lines[key] = line
        self.scene().sigMouseMoved.connect(self._mouse_moved)
        self.plots["P"].getViewBox().sigXRangeChanged.connect(self._x_changed)
        # Other pixels: other columns (a wider window draws more of the history).
        self.plots["P"].getViewBox().sigResized.connect(self._resized)
        # A plot with a legend of its own keeps the legend's rows free: its height decides
        # how much of it the data may take (it is laid out after its first data shows it).
        for key in ("cos_sim", "R_spread_pos"):
            self.plots[key].getViewBox().sigResized.connect(self._legend_plot_resized)
        self._layout_rows()
        self._update_legend()

    # -- configuration ----------------------------------------------------------------------

    def set_reward_visible(self, visible: bool) -> None:
        """Show the reward plot (sources with reward) or hide it."""
        self._optional["reward"] = visible
        self._layout_rows()

    def set_structural_visible(self, visible: bool, key: str = "cos_sim") -> None:
        """Show a plot of :data:`SHOWN_WHEN_DEFINED` (by default the structural baselines')."""
        self._optional[key] = bool(visible) and not (key == "R_spread_pos" and self.twin_hidden)
        self._layout_rows()

    def set_twin_hidden(self, hidden: bool) -> None:
        """Hide the residual's plot (the user's choice), or show it again where it is defined."""
        self.twin_hidden = hidden
        defined = self._last is not None and bool(np.isfinite(self._last[1]["R_spread_pos"]).any())
        self.set_structural_visible(defined, "R_spread_pos")

    def _layout_rows(self) -> None:
        for key, on in self._optional.items():
            self.plots[key].setVisible(on)
        bottom = [key for key, _l, _c in METRICS if self._optional.get(key, True)][-1]
        for key, plot in self.plots.items():
            # One time axis for the x-linked stack: only the lowest plot shows it.
            if key == bottom:
                plot.showAxis("bottom")
                plot.setLabel("bottom", self.x_label)
            else:
                plot.hideAxis("bottom")
        self._fit_axis_labels()

    #: A plot's height (px) below which its axis label drops its unit ("ΔH", not "ΔH (bits)").
    SHORT_LABELS_BELOW = 110

    def _fit_axis_labels(self) -> None:
        """Axis labels no longer than their plot is tall (their units go when it is short).

        A rotated "reward / step" ran into "ΔH (bits)" above it on a 1024×700 window, whose
        plots are about 70 px tall.
        """
        shown = sum(1 for key, _l, _c in METRICS if self._optional.get(key, True))
        # The plots share the height left by the legend and the time axis (about 45 px).
        room = self.height() - self.legend.boundingRect().height() - 45
        short = room / max(shown, 1) < self.SHORT_LABELS_BELOW
        for key, label, _color in METRICS:
            text = _SHORT_AXIS.get(key, label) if short else label
            axis = self.plots[key].getAxis("left")
            if axis.labelText != text:
                axis.setLabel(text)

    def set_source(self, names: dict[str, str], has_modulation: bool, has_impulse: bool,
                   defaults: dict[str, dict[str, Any]] | None = None,
                   impulse_label: str = "impulse") -> None:
        """What the legend and the period labels need to know about the selected source.

        ``defaults`` (declared parameter defaults by perturbation / modulation name) lets a
        band's label name the parameters that differ from them ("Hold · mode=repeat");
        ``impulse_label`` is the legend's word for a one-shot marker ("impulse (kick)",
        "injection").
        """
        self.names = dict(names)
        self.defaults = dict(defaults or {})
        self._has_modulation = has_modulation
        self._has_impulse = has_impulse
        self._impulse_label = impulse_label
        self._update_legend()

    def show_hint(self, text: str | None) -> None:
        """A centred message over the (empty) plots: what to do, what is happening."""
        self._hint_on = bool(text)
        if not text:
            if not self.hint.isHidden():
                self.hint.hide()
            return
        if text != self.hint.text():
            self.hint.setText(text)
            self._place_hint()
        if self.hint.isHidden():
            self._place_hint()
            self.hint.show()

    def _place_hint(self) -> None:
        w = min(460, max(self.width() - 40, 100))
        self.hint.setFixedWidth(w)
        self.hint.setFixedHeight(self.hint.heightForWidth(w))
        self.hint.move((self.width() - w) // 2, (self.height() - self.hint.height()) // 2)

    def resizeEvent(self, ev: Any) -> None:
        """Keep the hint centred and the legend within the width (short words if narrow)."""
        if hasattr(self, "legend"):
            compact = ev.size().width() < self.COMPACT_BELOW
            if compact != (ev.oldSize().width() < self.COMPACT_BELOW) or \
                    ev.oldSize().width() < 0:
                self._legend_key = ()  # the words change with the width
                self._update_legend()
            self._wrap_legend(fit=False)  # before the scene takes the new width
        super().resizeEvent(ev)
        if hasattr(self, "_optional"):
            self._fit_axis_labels()
        if getattr(self, "_hint_on", False):  # (pyqtgraph resizes during construction)
            self._place_hint()

    def _wrap_legend(self, fit: bool = True) -> None:
        """As many legend entries per row as fit the widget's width (the rest wrap).

        ``fit``: lay the scene out again at the widget's width (the legend's minimum width
        bounds it).
        """
        cos = self.plots.get("cos_sim")
        for legend, avail in ((self.legend, self.width() - 24),
                              (None if cos is None else cos.legend, self.width() - 90)):
            items = [] if legend is None else legend.items
            if not items:
                continue
            # The text's own width (a LabelItem stretches to its layout cell).
            widths = [s.boundingRect().width() + getattr(lab, "item", lab).boundingRect().width()
                      + 16 for s, lab in items]
            cols = len(items)
            while cols > 1 and sum(max(widths[j::cols]) for j in range(cols)) > max(avail, 100):
                cols -= 1
            # LegendItem sizes itself from its items' current (stretched) widths: bound it, or
            # a legend laid out wide stays wide after the window narrows.
            legend.setMaximumWidth(sum(max(widths[j::cols]) for j in range(cols)) + 8)
            if cols != legend.columnCount:
                legend.setColumnCount(cols)
            legend.updateSize()
        if fit and self.centralWidget is not None:
            self.ci.layout.invalidate()
            self.centralWidget.setGeometry(self.range)

    #: Below this width the legend speaks in short words ("mean", "kick"): at 1024 px the
    #: centre pane is about 320 px wide, and the full words took a row each (five rows).
    COMPACT_BELOW = 560

    def _update_legend(self) -> None:
        entries = [("dash", _MEAN, "baseline mean"),
                   ("box", _BAND, self._band_text),
                   ("dot", _DOT, "alarmed window"),
                   ("box", _PERTURB, "perturbation")]
        if not self._band_text:  # none is drawn: none is listed
            entries = entries[2:]
        if self._has_modulation:
            entries.append(("box", _MODULATE, "modulation"))
        if self._has_impulse:
            entries.append(("vline", _PULSE, getattr(self, "_impulse_label", "impulse")))
        if self._seen_undefined:
            entries.append(("tri", _UNDEFINED, "P undefined"))
        if self.width() < self.COMPACT_BELOW:
            entries = [(kind, color, SHORT_WORDS.get(text, text)) for kind, color, text in entries]
        key = tuple(entries)
        if key == self._legend_key:
            return
        self._legend_key = key
        self.legend.clear()
        self.legend.columnCount = len(entries)
        for kind, color, text in entries:
            self.legend.addItem(Swatch(kind, color), text)
        self._wrap_legend()

    # -- navigation -------------------------------------------------------------------------

    def set_follow(self, mode: str, span: float | None = None) -> None:
        """Follow ``"all"`` (the whole session) or the ``"latest"`` ``span`` x units.

        Choosing what to follow also unfreezes the view.
        """
        if mode not in ("all", "latest"):
            raise ValueError(f"follow 'all' or 'latest', not {mode!r}")
        if span is not None:
            if not (math.isfinite(span) and span > 0):
                raise ValueError(f"the span must be a positive number, not {span!r}")
            self.span = float(span)
        self.follow = mode
        self.freeze(False)

    def freeze(self, on: bool = True) -> None:
        """Stop (or resume) following the data; a frozen view keeps its x range."""
        on = bool(on)
        if on == self.frozen:
            return
        self.frozen = on
        if not on and self._last is not None:
            self._follow(*self._last)
        self.frozenChanged.emit(on)

    def centre_on(self, x: float) -> None:
        """Freeze the view with ``x`` (an event's time or turn) at its centre, same width."""
        xr = self.plots["P"].viewRange()[0]
        half = 0.5 * max(xr[1] - xr[0], 1e-6)
        self.freeze(True)
        self.plots["P"].setXRange(x - half, x + half, padding=0)

    def x_range(self) -> tuple[float, float]:
        """The x range in view."""
        lo, hi = self.plots["P"].viewRange()[0]
        return float(lo), float(hi)

    def _moved_by_hand(self, *_args: Any) -> None:
        self.freeze(True)

    def _x_changed(self, *_args: Any) -> None:
        """A move not made by _follow (by hand, centre_on): y fits the data now in view."""
        if not self._setting_x and self._last is not None:
            self._still = None
            self._draw()
            self._fit_y(*self._last, force=True)
            self._draw_marks()
            if self._regions or self._pulses:
                self._stack_labels()

    def _resized(self, *_args: Any) -> None:
        self._still = None  # other pixels
        if self._last is not None:
            self._draw()
            self._draw_marks()

    def _legend_plot_resized(self, *_args: Any) -> None:
        if self._last is not None:
            self._fit_y(*self._last)  # re-fits a plot whose legend's share changed

    def _mouse_moved(self, pos: QPointF) -> None:
        """A dotted line at the pointer's time on every plot; the nearest window's values."""
        x = None
        for plot in self.plots.values():
            if plot.isVisible() and plot.sceneBoundingRect().contains(pos):
                x = plot.getViewBox().mapSceneToView(pos).x()
                break
        self.show_cursor(x)

    def leaveEvent(self, ev: Any) -> None:
        """The pointer left the plots: the cursor and its values go (they stuck before)."""
        self.show_cursor(None)
        super().leaveEvent(ev)

    def show_cursor(self, x: float | None) -> None:
        """The cursor at ``x`` (None: hidden) and the values of the window nearest to it."""
        text = ""
        if x is not None and self._last is not None and len(self._last[0]):
            xs, w = self._last[0], self._last[1]
            j = int(np.clip(np.searchsorted(xs, x), 1, len(xs) - 1)) if len(xs) > 1 else 0
            if len(xs) > 1 and abs(xs[j - 1] - x) <= abs(xs[j] - x):
                j -= 1
            unit = "turn" if self.x_label == "turn" else "t"
            where = f"turn {xs[j]:.0f}" if unit == "turn" else f"t = {xs[j]:,.2f} s"
            parts = [where]
            for key, name in (("P", "P"), ("H_f", "H_f"), ("H_b", "H_b"), ("dH", "ΔH"),
                              ("reward", "reward")):
                if self.plots[key].isVisible():
                    v = float(w[key][j])
                    parts.append(f"{name} {v:.3f}" if math.isfinite(v) else f"{name} —")
            flag = w.get("x_IDT")
            if flag is not None and flag[j] == 1.0:
                parts.append("alarmed")
            text = " · ".join(parts)
        for line in self.cursor_lines.values():
            if x is None:
                line.setVisible(False)
            else:
                line.setValue(x)
                line.setVisible(True)
        if text != self.cursor_text:
            self.cursor_text = text
            self.cursorChanged.emit(text)

    # -- data -------------------------------------------------------------------------------

    def clear_data(self) -> None:
        """Forget everything drawn (a new session); the view follows the data again."""
        self._yrange.clear()
        self._last = None
        self.history.clear()
        self.show_cursor(None)
        self.freeze(False)
        for key in self.plots:
            self.curves[key].setData([], [])
            self.dots[key].setData([], [])
            self.bands[key].setVisible(False)
            self.means[key].setVisible(False)
        for curve in self.extra.values():
            curve.setData([], [])
        self._drawn = ()
        self._dotted = {}
        self._still = None
        self._twin_rel, self._twin_for = {}, (-1, None)
        for key in SHOWN_WHEN_DEFINED:
            self.set_structural_visible(False, key)
        self._set_periods([])
        self._set_pulses([])
        self.undefined.setData([], [])
        self._undefined_key = ()
        self._reasons = {}
        self._seen_undefined = False
        self._update_legend()

    def update_snapshot(self, snap: Snapshot) -> None:
        """Redraw from a session snapshot (called on the GUI timer).

        The snapshot's windows are the session's latest; the plots draw every window of the
        session (:class:`~idt_desk_widgets.history.PlotHistory`).
        """
        w = self.history.update(snap.windows, snap.n_windows)
        x = w["t"]
        b = snap.baseline
        label = band_label(b)
        if b is not None and not any(_band(b, key) is not None for key, *_ in METRICS):
            label = ""  # the alarm judges what no plot shows (one IDT per body part): no band
        if b is not None and label != self._band_text:
            self._band_text = label
            self._legend_key = ()
            self._update_legend()
        # Shown once a session computes them, hidden again by clear_data (a new session):
        # the column is scanned only while the plot is hidden, not every frame.
        for key in SHOWN_WHEN_DEFINED:
            if not self._optional[key] and np.isfinite(w[key]).any() and \
                    not (key == "R_spread_pos" and self.twin_hidden):
                self.set_structural_visible(True, key)
        if self._optional["R_spread_pos"] and (self._twin_for[0] != self.history.version
                                                or self._twin_for[1] is not b):
            self._twin_rel = _against_baseline(w, b)
            self._twin_for = (self.history.version, b)
            self._twin_n += 1
        for key, _label, _color in METRICS:
            if not self.plots[key].isVisible() or key == "R_spread_pos":
                continue
            band = _band(b, key)
            if band is not None:
                self.bands[key].setRegion(band)
                self.bands[key].setVisible(True)
                self.means[key].setValue(b.mean[key])
                self.means[key].setVisible(True)
            else:
                self.bands[key].setVisible(False)
                self.means[key].setVisible(False)
        now = float(x[-1]) if len(x) else snap.sim_time
        switches = snap.switches
        if self.x_label == "turn":
            switches = [{**ev, "t": event_x(ev, turns=True)} if "i" in ev else ev
                        for ev in switches]
        periods, pulses = periods_of(switches, now), pulses_of(switches)
        if self._unchanged(x, w, b, periods, pulses):
            self._last = (x, w, b)  # the cursor reads every window
            return
        self._set_periods(periods)
        self._set_pulses(pulses)
        self._follow(x, w, snap.baseline)
        if self._regions or self._pulses:
            self._stack_labels()
        self.show_hint(None if len(x) else _waiting_text(snap))
        # pyqtgraph moves the views to their new ranges when it paints; the lines and labels
        # that follow them then ask for a second paint of the whole scene, every frame. Moved
        # now, one paint draws the frame.
        for plot in self.plots.values():
            plot.getViewBox().updateMatrix()
        self._settle()

    #: Data units a pixel may move before a frame of *Whole history* is drawn again (half).
    STILL_PX = 0.5

    def _settle(self) -> None:
        """Remember the right end of what was just drawn in *Whole history* (_unchanged).

        Its last pixel column: each curve's lowest and highest value there, half a pixel
        wider (and whether it has a gap), the grid cells of the dots and undefined marks
        about it.
        """
        self._still = None
        if self.frozen or self.follow != "all" or self._last is None:
            return
        x, w, b = self._last
        lo, hi = self.x_range()
        box = self.plots["P"].getViewBox()
        unit = (hi - lo) / max(box.width(), 1.0)
        if len(x) < 2 or not unit > 0 or len(x) < (x[-1] - x[0]) / unit:
            return  # fewer windows than pixels: each new one shows
        start = lo + math.floor((x[-1] - lo) / unit) * unit
        i = int(np.searchsorted(x, start, "left"))
        series = self._series(x, w)
        ends = []
        for curve, y in series:
            end = y[i:]
            ok = end[~np.isnan(end)]
            # Half a pixel of the curve's plot: a value beyond its column's by less is not seen.
            view = curve.getViewBox()
            ylo, yhi = view.viewRange()[1]
            tol = self.STILL_PX * (yhi - ylo) / max(view.height(), 1.0)
            ends.append((float(ok.min()) - tol if ok.size else math.inf,
                         float(ok.max()) + tol if ok.size else -math.inf,
                         bool(ok.size < end.size)))
        dots = {}
        for key, (xs, ys) in self._dotted.items():
            if not self.plots[key].isVisible():
                continue
            dx, dy = self._dot_grid.get(key, (0.0, 0.0))
            near = xs >= start - dx
            dots[key] = (dx, dy, set(zip(np.floor(xs[near] / dx).tolist(),
                                         np.floor(ys[near] / dy).tolist(), strict=True))
                         if dx > 0 and dy > 0 else set())
        marks = self.undefined.data["x"] if len(self.undefined.data) else np.empty(0)
        self._still = {"total": self.history.total, "missed": self.history.missed,
                       "baseline": b, "lo": lo, "hi": hi, "unit": unit,
                       "curves": [id(c) for c, _y in series], "ends": ends, "dots": dots,
                       "marks": set(np.floor(marks / self._undefined_dx).tolist())}

    def _unchanged(self, x: np.ndarray, w: dict[str, np.ndarray], b: Any,
                   periods: list, pulses: list) -> bool:
        """Whether the new windows would change no pixel of *Whole history*: not drawn again.

        With more windows than pixels a new one moves the view by a fraction of a pixel, and
        the data's end stays where it was on the screen (in *Whole history* it is always the
        same fraction of the width): drawn again, the new window would land in the last
        pixel column, mostly within its values, and change nothing seen (the plots were
        drawn again for it every frame, at a high speed many times a second). So the frame is
        skipped while the view has moved less than :attr:`STILL_PX` pixel since it was
        drawn, no new window leaves the last column's range on any curve (by half a pixel)
        or opens a gap there, needs a dot or an undefined mark in a grid cell without one,
        and no period or impulse changed but an open period's end by as little. A spike, an
        alarm or an event is drawn at once.
        """
        st = self._still
        k = self.history.total - st["total"] if st is not None else 0
        if st is None or k <= 0 or k > len(x) or self.frozen or self.follow != "all" or \
                b is not st["baseline"] or self.history.missed != st["missed"]:
            return False
        periods, pulses = periods[-MAX_PERIODS:], pulses[-MAX_PULSES:]
        if pulses != list(self._pulses_key) or len(periods) != len(self._periods_key):
            return False
        x0, x1 = float(x[0]), float(x[-1])
        pad = 0.01 * (x1 - x0)  # _follow's padding
        moved = max(abs(x0 - pad - st["lo"]), abs(x1 + pad - st["hi"])) / st["unit"]
        if moved >= self.STILL_PX:
            return False
        for (t0, t1, *rest), (u0, u1, *was) in zip(periods, self._periods_key, strict=True):
            if t0 != u0 or rest != was or abs(t1 - u1) >= self.STILL_PX * st["unit"]:
                return False
        series = self._series(x, w)
        if [id(c) for c, _y in series] != st["curves"]:
            return False
        new = slice(len(x) - k, len(x))
        for (_c, y), (low, high, gap) in zip(series, st["ends"], strict=True):
            v = y[new]
            nan = np.isnan(v)
            if (nan.any() and not gap) or (v[~nan] < low).any() or (v[~nan] > high).any():
                return False
        for key, (dx, dy, cells) in st["dots"].items():
            flag = w.get("x_twin" if key == "R_spread_pos" else f"x_{key}")
            if key == "R_spread_pos" and len(self._twin_rel.get(key, ())) != len(x):
                return False
            hit = np.flatnonzero(flag[new] == 1.0) if flag is not None else []
            for j in hit:
                jj = len(x) - k + j
                y = (np.nanmax([self._twin_rel[c][jj] for c, _t, _c in TWIN])
                     if key == "R_spread_pos" else w[key][jj])
                if not (dx > 0 and dy > 0) or (math.floor(x[jj] / dx),
                                               math.floor(y / dy)) not in cells:
                    return False
        undefined = np.flatnonzero(np.isnan(w["P"][new]))
        return all(math.floor(x[len(x) - k + j] / self._undefined_dx) in st["marks"]
                   for j in undefined)

    def _series(self, x: np.ndarray, w: dict[str, np.ndarray]
                ) -> list[tuple[pg.PlotDataItem, np.ndarray]]:
        """Every curve to draw now, with its values (all the history's rows ``x``, ``w``)."""
        out = []
        for key, _label, _color in METRICS:
            if not self.plots[key].isVisible():
                continue
            if key == "R_spread_pos":
                rel = self._twin_rel
                if len(rel.get(key, ())) != len(x):
                    continue
                out += [(self.curves[key], rel[key]),
                        *((self.extra[k], rel[k]) for k, _t, _c in TWIN[1:])]
            elif key == "cos_sim":
                out += [(self.curves[key], w[key]),
                        *((self.extra[k], w[k]) for k, _t, _c in STRUCTURAL[1:])]
            else:
                out.append((self.curves[key], w[key]))
        return out

    def _draw(self) -> None:
        """Hand each curve its rows for the x range in view (:class:`.history.PixelColumns`).

        Bounded by the plots' width in pixels, whatever the history's length; redone only
        when the rows, the view or the plots shown have changed. The cursor's values are
        read from the whole history (:meth:`show_cursor`), never from what is drawn.
        """
        if self._last is None:
            return
        x, w, _b = self._last
        lo, hi = self.x_range()
        columns = max(round(self.plots["P"].getViewBox().width() * self._px_scale), 1)
        series = self._series(x, w)
        key = (self.history.version, len(x), lo, hi, columns, self._twin_n,
               tuple(id(c) for c, _y in series))
        if key == self._drawn:
            return
        self._drawn = key
        view = PixelColumns(x, lo, hi, columns)
        for curve, y in series:
            rows = view.rows(y)
            curve.setData(x[rows], y[rows], connect="finite")

    def _draw_marks(self) -> None:
        """The alarm dots and the undefined windows' marks in view, one a grid cell.

        The cells are powers of two in data units (:func:`grid_step`), so a view that grows
        with the data keeps them: the dots are handed over again only when they changed.
        """
        if self._last is None:
            return
        x, w, _b = self._last
        lo, hi = self.x_range()
        box = self.plots["P"].getViewBox()
        dx = grid_step(hi - lo, box.width(), DOT_CELL)
        i0 = int(np.searchsorted(x, lo, "left"))
        i1 = int(np.searchsorted(x, hi, "right"))
        for key, _label, _color in METRICS:
            plot = self.plots[key]
            if not plot.isVisible():
                continue
            if key == "R_spread_pos":
                flag, rel = w["x_twin"], self._twin_rel
                if len(rel.get(key, ())) != len(x):
                    continue
                rows = i0 + np.flatnonzero(flag[i0:i1] == 1.0)
                y = np.full(len(x), np.nan)
                if rows.size:
                    y[rows] = np.nanmax(np.vstack([rel[k][rows] for k, _t, _c in TWIN]),
                                        axis=0)
            else:
                flag = w.get(f"x_{key}")
                if flag is None:
                    continue
                rows = i0 + np.flatnonzero(flag[i0:i1] == 1.0)
                y = w[key]
            ylo, yhi = plot.viewRange()[1]
            dy = grid_step(yhi - ylo, plot.getViewBox().height(), DOT_CELL)
            self._dot_grid[key] = (dx, dy)
            rows = cell_rows(rows, x, dx, y, dy)
            xs, ys = x[rows], y[rows]
            last = self._dotted.get(key)
            if last is not None and np.array_equal(last[0], xs) and \
                    np.array_equal(last[1], ys, equal_nan=True):
                continue
            self._dotted[key] = (xs, ys)
            self.dots[key].setData(xs, ys)
        self._undefined_dx = grid_step(hi - lo, box.width(), UNDEFINED_CELL)
        self._set_undefined(w, i0, i1, self._undefined_dx)

    def _follow(self, x: np.ndarray, w: dict[str, np.ndarray], baseline: Any) -> None:
        """Scroll x to the data (unless frozen); move y ranges only when the data leaves them.

        A y range also shrinks when the data has become much narrower (at most twice a
        second), so the y axes are rarely redrawn.
        """
        self._last = (x, w, baseline)
        if len(x) == 0:
            return
        x0, x1 = float(x[0]), float(x[-1])
        if not self.frozen:
            if self.follow == "latest":
                x0 = max(x0, x1 - self.span)
            self._setting_x = True
            try:
                self.plots["P"].setXRange(x0, x1 if x1 > x0 else x0 + 1.0, padding=0.01)
            finally:
                self._setting_x = False
        lo, hi = self.x_range()
        # Turns are whole numbers: a few turns get a tick each, never "1.5".
        whole = self.x_label == "turn" and hi - lo < 12
        if whole != self._whole_ticks:
            self._whole_ticks = whole
            for plot in self.plots.values():
                axis = plot.getAxis("bottom")
                axis.setTickSpacing(1, 1) if whole else axis.setTickSpacing()
        self._draw()
        self._fit_y(x, w, baseline)
        self._draw_marks()

    def _fit_y(self, x: np.ndarray, w: dict[str, np.ndarray], baseline: Any,
               force: bool = False) -> None:
        """Each visible plot's y range around its data in the x range in view (and the band).

        ``force``: fit now (the view moved), not only when the data left the range.
        """
        xr = self.x_range()
        view = (x >= xr[0]) & (x <= xr[1])
        now = time.monotonic()
        for key, plot in self.plots.items():
            if not plot.isVisible():
                continue
            if key == "cos_sim":
                y = np.concatenate([w[k][view] for k, _t, _c in STRUCTURAL])
            elif key == "R_spread_pos":
                rel = self._twin_rel
                y = np.concatenate([rel[k][view] for k, _t, _c in TWIN if k in rel]) \
                    if rel and len(rel["R_spread_pos"]) == len(view) else np.empty(0)
            else:
                y = w[key][view]
            y = y[np.isfinite(y)]
            if not y.size:
                continue
            lo, hi = float(y.min()), float(y.max())
            band = _band(baseline, key)
            if band is not None:
                lo, hi = min(lo, band[0]), max(hi, band[1])
            if hi - lo < MIN_SPAN:
                # A (nearly) constant metric gets a readable range around it, not ±1e-16.
                mid = 0.5 * (lo + hi)
                lo = mid - 0.5 * MIN_SPAN
                if key in NON_NEGATIVE and mid >= 0:
                    lo = max(lo, 0.0)
                hi = lo + MIN_SPAN
            span = max(hi - lo, 1e-6 * max(abs(lo), abs(hi)))
            # The P plot keeps its top for the periods' and impulses' names (their rows), a
            # plot with a legend of its own for the legend: the data stays below, never under
            # a name.
            floor = self._label_floor if key == "P" else _legend_floor(plot)
            cur = self._yrange.get(key)
            outside = cur is None or lo < cur[0] or \
                hi > cur[0] + (cur[1] - cur[0]) * cur[3] or cur[3] != floor
            loose = cur is not None and (cur[1] - cur[0]) * cur[3] > 3.0 * span and \
                (force or now - cur[2] > 0.5)
            if outside or loose:
                bottom = lo - 0.1 * span
                if key in NON_NEGATIVE and lo >= 0:
                    bottom = max(bottom, -0.03 * span)  # no empty negative bits below 0
                top = bottom + (hi + 0.1 * span - bottom) / floor
                new = (bottom, top, now, floor)
                self._yrange[key] = new
                plot.setYRange(new[0], new[1], padding=0)

    def _set_undefined(self, w: dict[str, np.ndarray], i0: int, i1: int, dx: float) -> None:
        """Grey triangles at the t of windows whose P is undefined (NaN, not calibration).

        The latest :data:`MAX_UNDEFINED` of them, those in rows ``i0:i1`` (in view), one a
        cell ``dx`` wide.
        """
        p = w["P"]
        # Windows without a verdict yet still have a defined P; NaN P is the only signal.
        idx = np.flatnonzero(np.isnan(p) & np.isfinite(w["t"]))[-MAX_UNDEFINED:]
        if idx.size and not self._seen_undefined:
            self._seen_undefined = True
            self._update_legend()
        idx = cell_rows(idx[(idx >= i0) & (idx < i1)], w["t"], dx)
        yr = self.plots["P"].viewRange()[1]
        key = (tuple(w["t"][idx].tolist()), tuple(yr))
        if key == self._undefined_key:
            return
        self._undefined_key = key
        y = yr[0] + 0.06 * (yr[1] - yr[0])
        ts = w["t"][idx].tolist()
        # Reasons of windows already marked are kept, not recomputed every frame.
        cache = {t: self._reasons[t] for t in ts if t in self._reasons}
        for t, j in zip(ts, idx, strict=True):
            if t not in cache:
                cache[t] = self.undefined_reason(w, int(j))
        self._reasons = cache
        reasons = [cache[t] for t in ts]
        self.undefined.setData(w["t"][idx], np.full(idx.size, y), data=reasons)

    @staticmethod
    def undefined_reason(w: dict[str, np.ndarray], j: int) -> str:
        """Why window j's P is undefined, in the core's words."""
        return f"P undefined — {undefined_reason(w, j) or 'not a number'}"

    def _set_periods(self, periods: list[tuple[float, float, str, str]]) -> None:
        periods = periods[-MAX_PERIODS:]  # bounded: long sessions keep the latest periods
        key = tuple(periods)
        if key == self._periods_key:
            return
        same_shape = len(key) == len(self._periods_key) and all(
            a[0] == b[0] and a[2:] == b[2:] for a, b in zip(key, self._periods_key, strict=True))
        self._periods_key = key
        spans = [(t0, t1, self._brushes[kind], self._label(name, params))
                 for t0, t1, kind, name, params in periods]
        for shades in self._shades.values():
            shades.set_marks(spans)
        if same_shape and len(self._regions) == len(periods):
            # Only open periods grew: move their ends instead of rebuilding the items.
            for (t0, t1, *_), items in zip(periods, self._regions, strict=True):
                for r in items:
                    r.setRegion((t0, t1))
            return
        for items in self._regions:
            for item in items:
                self.plots["P"].removeItem(item)
        self._regions = []
        for t0, t1, kind, name, params in periods:
            r = _Anchor(t0, t1, self._label(name, params))  # its name, shown or not
            r.setZValue(-30)
            # The name at the top of the band, on the top plot only.
            _Label(r, text=self._label(name, params), position=_LABEL_ROWS[0],
                   anchors=[(0, 0.5), (0, 0.5)], color=_TEXT[kind],
                   fill=(255, 255, 255, 190))
            self.plots["P"].addItem(r, ignoreBounds=True)
            self._regions.append((r,))
        self._stack_labels(force=True)

    def _label(self, name: str, params: tuple[tuple[str, Any], ...]) -> str:
        """A band's label: the name, and the parameters that differ from the declared ones."""
        default = self.defaults.get(name, {})
        changed = format_params({k: v for k, v in params
                                 if k in default and v != default[k]})
        label = self.names.get(name, name)
        return f"{label} · {changed}" if changed else label

    def _set_pulses(self, pulses: list[tuple[float, str]]) -> None:
        """Vertical lines at one-shot impulses (a kick), labelled with the name on P."""
        pulses = pulses[-MAX_PULSES:]
        key = tuple(pulses)
        if key == self._pulses_key:
            return
        self._pulses_key = key
        marks = [(t, self.names.get(name, name)) for t, name in pulses]
        for lines in self._lines.values():
            lines.set_marks(lines=marks)
        for items in self._pulses:
            for item in items:
                self.plots["P"].removeItem(item)
        self._pulses = []
        for t, text in marks:
            line = _Anchor(t, tip=text)
            line.setZValue(-10)
            _Label(line, text=text, position=_LABEL_ROWS[0], anchors=[(0, 0.5), (0, 0.5)],
                   color=_TEXT["pulse"], fill=(255, 255, 255, 190))
            self.plots["P"].addItem(line, ignoreBounds=True)
            self._pulses.append((line,))
        self._stack_labels(force=True)

    def _stack_labels(self, force: bool = False) -> None:
        """Put the names of periods and impulses in rows so that none overlaps another.

        Redone when they change, when the time axis has stretched or moved by 2 % (a label's
        width in seconds grows with it), or when the P plot's size in pixels has changed (the
        window resized, the event log opened: the same seconds, other room). A name that would
        run past the right edge is written left of its line; one with no free row, or whose
        line has scrolled out on the left, is hidden, and stays reachable: its band or marker
        shows it on hover (every plot's), and the event log lists it.
        """
        xr = self.plots["P"].viewRange()[0]
        span = max(xr[1] - xr[0], 1e-9)
        box = self.plots["P"].getViewBox()
        px = (round(box.width()), round(box.height()))
        if not force and abs(span - self._label_span) < 0.02 * self._label_span and \
                abs(xr[1] - getattr(self, "_label_right", xr[1])) < 0.02 * span and \
                px == getattr(self, "_label_px", px):
            return
        self._label_span = span
        self._label_right = xr[1]
        self._label_px = px
        width_px = max(box.width(), 1.0)
        height_px = max(box.height(), 1.0)
        labels = []
        for items in (*self._regions, *self._pulses):
            line = items[0]
            for child in line.childItems():
                if isinstance(child, pg.InfLineLabel):
                    labels.append((line.value(), child))
        # Rows a label's height apart from the top (its text and the fill's margins: rows
        # 16 px apart were assumed, 22 px boxes were drawn, and two rows' boxes overlapped),
        # at most as many as _LABEL_ROWS and none in the plot's lowest sixth.
        text_h = max((c.textItem.boundingRect().height() for _, c in labels), default=16.0) + 1
        step = max(text_h / height_px, _LABEL_ROWS[0] - _LABEL_ROWS[1])
        rows = [_LABEL_ROWS[0] - k * step for k in range(len(_LABEL_ROWS))
                if k == 0 or _LABEL_ROWS[0] - k * step >= 0.17]
        placed = []
        for t, label in labels:
            if t < xr[0]:
                # Its line has scrolled out on the left: the name would be cut at the axis.
                label.setVisible(False)
                continue
            # The whole name's width, whatever is shown now (a narrower plot may have cut
            # it, see below); ``pad`` is the text item's margins.
            whole = label.__dict__.setdefault("_whole_format", label.format)
            full = whole.format(value=label.line.value())
            shown = label.textItem.toPlainText()
            fm = QFontMetricsF(label.textItem.font())
            pad = label.textItem.boundingRect().width() - fm.horizontalAdvance(shown)
            w = (fm.horizontalAdvance(full) + pad + 6) * span / width_px
            # A name that would run past the right edge is written to the left of its line.
            flip = t + w > xr[1] and t - w >= xr[0]
            text, fmt = full, whole
            if t + w > xr[1] and t - w < xr[0]:
                # Too long for either side of its line (a narrow window): cut to the wider
                # side with an ellipsis rather than run past the plot's edge (the event log
                # keeps the whole name; a wider window shows it again).
                left, right = t - xr[0], xr[1] - t
                flip = left > right
                room = max(left, right) * width_px / span - 6 - pad
                text = fm.elidedText(full, Qt.TextElideMode.ElideRight, max(room, 0.0))
                fmt = text.replace("{", "{{").replace("}", "}}")
                w = max(left, right)
            # pyqtgraph rewrites the text from ``format`` whenever the line moves (a period's
            # region is redrawn every frame): a cut name is a cut ``format``.
            if label.format != fmt or shown != text:
                label.format = fmt
                label.setText(text)
            placed.append((t - w if flip else t, t if flip else t + w, flip, label))
        ends = [-np.inf] * len(rows)
        used = 0
        for start, end, flip, label in sorted(placed, key=lambda x: x[0]):
            row = next((k for k, e in enumerate(ends) if start >= e), None)
            used = max(used, 0 if row is None else row + 1)
            # No free row (a narrow plot, many events): the marker stays, its name hides
            # rather than overwrite another's.
            label.setVisible(row is not None)
            if row is None:
                continue
            ends[row] = end
            anchor = (1, 0.5) if flip else (0, 0.5)
            if label.anchors[0] != anchor:
                label.anchors = [anchor, anchor]
                label.updatePosition()
            if label.orthoPos != rows[row]:
                label.setPosition(rows[row])
        # Where the P curve must stay below: the lowest row in use, less half a row (its
        # text is centred on it) and a margin; the whole height without names.
        floor = 1.0 if not used else max(rows[used - 1] - 0.6 * step, 0.3)
        if floor != self._label_floor:
            self._label_floor = floor
            if self._last is not None:
                self._fit_y(*self._last, force=True)

    def export(self, path: str, scale: float = 1.0, title: str | None = None) -> None:
        """Save the plots as PNG or SVG (by the file's extension).

        ``scale`` multiplies a PNG's pixels (2: twice the width and height on screen, for a
        paper's figure); ``title`` is written, wrapped, in a strip above the plots (the
        source, model, preset, baseline and detector, say); the window is left as it was.
        """
        # A figure shows the data, never the hover cursor (it is put back after).
        shown = [line for line in self.cursor_lines.values() if line.isVisible()]
        for line in shown:
            line.setVisible(False)
        # The curves as fine as the figure's pixels (an SVG is scaled up: 4 a pixel).
        self._px_scale = 4.0 if str(path).lower().endswith(".svg") else max(scale, 1.0)
        self._draw()
        try:
            save_figure(self, path, scale, title)
        finally:
            self._px_scale = 1.0
            self._draw()
            for line in shown:
                line.setVisible(True)


class _Marks(pg.GraphicsObject):
    """All the shaded periods (or all the impulse lines) of one plot, painted by one item.

    An item a period and plot (a LinearRegionItem and its two lines, or an InfiniteLine) made
    a long session's 40 periods and 40 impulses 1,280 items, each bounded again, hovered and
    painted every frame: most of a frame. On hover the tooltip names the periods and
    impulses under the pointer, as each item's did; the names on P are :class:`_Anchor`'s.
    """

    def __init__(self, pen: Any = None) -> None:
        super().__init__()
        self.pen = pen
        #: (start, end, brush, name) of each shaded period.
        self.spans: list[tuple[float, float, Any, str]] = []
        #: (t, name) of each impulse line.
        self.lines: list[tuple[float, str]] = []
        self.setAcceptedMouseButtons(Qt.MouseButton.NoButton)

    def set_marks(self, spans: list | None = None, lines: list | None = None) -> None:
        """What to paint: the periods (``spans``) or the impulses (``lines``)."""
        self.spans = list(spans or [])
        self.lines = list(lines or [])
        self.update()

    def boundingRect(self) -> QRectF:
        vr = self.viewRect()
        return QRectF() if vr is None else QRectF(vr)

    def viewTransformChanged(self) -> None:
        super().viewTransformChanged()
        self.prepareGeometryChange()

    def paint(self, p: Any, *_args: Any) -> None:
        vr = self.viewRect()
        if vr is None:
            return
        top, bottom = vr.top(), vr.bottom()
        for t0, t1, brush, _name in self.spans:
            if t1 >= vr.left() and t0 <= vr.right():
                p.fillRect(QRectF(t0, top, t1 - t0, bottom - top), brush)
        if self.lines:
            p.setPen(self.pen)
            for t, _name in self.lines:
                if vr.left() <= t <= vr.right():
                    # From the top down, as an InfiniteLine draws (the dashes start there).
                    p.drawLine(QPointF(t, top), QPointF(t, bottom))

    def names_at(self, x: float, tolerance: float = 0.0) -> str:
        """The names of the periods over ``x`` and of the impulses within ``tolerance``."""
        names = [name for t0, t1, _b, name in self.spans if t0 <= x <= t1]
        names += [name for t, name in self.lines if abs(t - x) <= tolerance]
        return "\n".join(dict.fromkeys(names))

    def hoverEvent(self, ev: Any) -> None:
        """The tooltip: the names under the pointer (an impulse's within 3 pixels)."""
        if ev.isExit():
            self.setToolTip("")
            return
        self.setToolTip(self.names_at(ev.pos().x(), 3 * (self.pixelWidth() or 0.0)))


class _Anchor(pg.InfiniteLine):
    """Where a shaded period starts, or an impulse stands, on the P plot: it carries the name.

    The band and the line are the plot's :class:`_Marks`; this has no area of its own. As a
    LinearRegionItem and its lines (or an InfiniteLine) each of a long session's 80 marks
    recomputed its bounding rectangle from the view's pixel vectors on every move of the
    view. ``lines`` and :meth:`getRegion` answer as a region's do.
    """

    def __init__(self, t: float, end: float | None = None, tip: str = "") -> None:
        super().__init__(pos=t, angle=90, movable=False, pen=pg.mkPen(None))
        self._end = t if end is None else float(end)
        self.setToolTip(tip)
        self.setFlag(self.GraphicsItemFlag.ItemHasNoContents, True)

    @property
    def lines(self) -> list[_Anchor]:
        """The period's start line (this), as ``LinearRegionItem.lines[0]``."""
        return [self]

    def getRegion(self) -> tuple[float, float]:
        return (float(self.value()), self._end)

    def setRegion(self, rgn: tuple[float, float]) -> None:
        self._end = float(rgn[1])
        if rgn[0] != self.value():
            self.setValue(rgn[0])

    def boundingRect(self) -> QRectF:
        return QRectF()

    def paint(self, *_args: Any) -> None:
        pass


class _Label(pg.InfLineLabel):
    """A period's or an impulse's name on the P plot, placed at less cost every frame.

    pyqtgraph's label places itself again on every move of the view, hidden or not, from its
    line's bounding rectangle (recomputed from the view's pixel vectors): with 40 names
    most of what the periods cost a frame. Along its vertical line a name's place depends on
    the y range alone (its side is :meth:`MetricPlots._stack_labels`' choice, one anchor for
    both), so it is placed again only when that changed, from the view's rectangle, and not
    while hidden (names with no room are; shown again, a label places itself).
    """

    _placed_for: tuple = ()

    def getEndpoints(self) -> tuple[Any, Any]:
        if self._endpoints[0] is None:
            view = self.line.getViewBox()
            if not isinstance(view, pg.ViewBox):
                return (None, None)
            vr = self.line.mapRectFromView(view.viewRect()).normalized()
            self._endpoints = (pg.Point(vr.left(), 0), pg.Point(vr.right(), 0))
        return self._endpoints

    def viewTransformChanged(self) -> None:
        pg.GraphicsObject.viewTransformChanged(self)
        if not self.isVisible():
            self._endpoints, self._placed_for = (None, None), ()
            return
        view = self.line.getViewBox()
        # (While the line is being added to a plot, its view is not a ViewBox yet.)
        key = (tuple(view.viewRange()[1]), view.height()) \
            if isinstance(view, pg.ViewBox) else ()
        if not key or key != self._placed_for or self.anchors[0] != self.anchors[1]:
            self._placed_for = key
            self.updatePosition()
        pg.TextItem.viewTransformChanged(self)


#: Axis labels without their units, for short plots.
_SHORT_AXIS = {"H_f": "H<sub>f</sub>", "H_b": "H<sub>b</sub>", "dH": "ΔH", "reward": "reward",
               "P_adj": "P − null", "R_spread_pos": "residual"}
#: The twin's channels: drawn against their baseline's mean, never with a band.
TWIN_KEYS = frozenset(k for k, _t, _c in TWIN)


def _against_baseline(w: dict[str, np.ndarray], b: Any) -> dict[str, np.ndarray]:
    """The twin's channels in decades against the baseline's mean, as the plot draws them.

    Before the baseline, against the first window's value.
    """
    out = {}
    for key, _t, _c in TWIN:
        y = np.asarray(w[key], dtype=np.float64)
        ref = b.mean.get(key) if b is not None else None
        if ref is None or not math.isfinite(ref):
            finite = y[np.isfinite(y)]
            ref = float(finite[0]) if finite.size else 0.0
        out[key] = y - ref
    return out


def _legend_floor(plot: pg.PlotItem) -> float:
    """The share of ``plot``'s height its data may take below its legend (1: no legend).

    In steps of 0.05 (a resize re-fits the range only when the step changes), at least 0.4.
    """
    legend = getattr(plot, "legend", None)
    height = plot.getViewBox().height()
    if legend is None or not legend.isVisible() or height <= 0:
        return 1.0
    free = 1.0 - (legend.boundingRect().height() + 4.0) / height
    return max(0.4, float(np.floor(free / 0.05)) * 0.05)


def _band(b: Any, key: str) -> tuple[float, float] | None:
    """The baseline's (lower, upper) band of a metric, lower clipped at 0 where it must be."""
    if key in TWIN_KEYS or b is None or key not in b.mean or \
            not math.isfinite(b.std.get(key, math.nan)):
        return None
    lo, hi = b.band(key)
    if key in NON_NEGATIVE:
        lo = max(lo, 0.0)
    return lo, hi


def _waiting_text(snap: Snapshot) -> str:
    """What the empty plots are waiting for."""
    if snap.error:
        return "The source stopped with an error before the first window (see above)."
    cal, need = snap.calibration
    if snap.state in ("stopped", "error"):
        return "Stopped before the first window: press Start to run again."
    if snap.n_transitions == 0:
        return "Starting…"
    paused = " (paused)" if snap.state == "paused" else ""
    if cal < need:
        pct = 100 * cal / max(need, 1)
        eta = ""
        rate = float(getattr(snap, "loop_rate", 0.0) or 0.0)
        if rate > 0 and not paused:
            left = (need - cal) / rate
            eta = f"; about {left:,.0f} s more at this speed"
            if left > 20:
                eta += " — raise <b>Speed</b> to get there sooner"
        return (f"Calibrating symbols: {cal:,} / {need:,} transitions ({pct:.0f} %){paused}"
                f"<br><small>the first windows fix the symbols' bins; the plots start "
                f"when they are done{eta}</small>")
    return f"Waiting for the first window{paused}…"
