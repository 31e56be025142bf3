"""What the metric plots hand their items is bounded by their pixels, not by the history.

Issue 78: after 6,000 windows in *Whole history* the window drew at 1-3 frames/s, every
frame handing every curve, dot scatter and marker the whole history. These tests count what
the items hold after a 20,000-window session (the speed itself is `idt-desk bench gui
--history 20000`'s to show), and that what is seen stays: peaks, alarmed windows, gaps,
the cursor's values, the periods' names on hover.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyqtgraph as pg
import pytest
from idt_desk_widgets.plots import DOT_CELL, MAX_UNDEFINED, TWIN, UNDEFINED_CELL, MetricPlots
from PySide6.QtCore import QEvent, QObject, QPointF
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

N = 20_000
DT = 0.075  # the pendulum's windows: 75 transitions apart at 1,000 a second


def _session(n: int = N) -> dict[str, np.ndarray]:
    """A long session's windows: slow waves, an alarm over the second half, a spike far back,
    and undefined P (every third window) near the end."""
    t = 0.3 + DT * np.arange(n)
    phase = 2 * np.pi * np.arange(n) / n
    w = {"t": t, "P": 0.4 + 0.05 * np.sin(phase), "H_f": 1.0 + 0.2 * np.cos(phase),
         "H_b": 1.2 + 0.1 * np.sin(2 * phase), "dH": 0.01 * np.sin(3 * phase),
         "reward": np.full(n, np.nan), "P_adj": np.full(n, np.nan),
         "H_S": np.zeros(n), "H_A": np.zeros(n), "H_S_next": np.zeros(n)}
    for key in ("cos_sim", "adjacent", "drift"):
        w[key] = np.full(n, np.nan)
    for k, (key, _t, _c) in enumerate(TWIN):
        w[key] = 0.5 * k + np.sin(phase + k)
    w["H_f"][n // 10] = 9.0  # one spike, long since merged
    w["P"][n - n // 10::3] = np.nan
    alarmed = (np.arange(n) >= n // 2).astype(float)
    for key in ("x_P", "x_H_f", "x_H_b", "x_dH", "x_IDT", "x_twin"):
        w[key] = alarmed.copy()
    return w


def _switches(t_end: float) -> list[dict]:
    out = []
    for k in range(12):  # a perturbation every tenth of the session, and a kick
        t0 = (k + 0.5) * t_end / 13
        out += [{"kind": "perturbation_on", "t": t0, "name": "sensor_noise"},
                {"kind": "perturbation_pulse", "t": t0, "name": "kick"},
                {"kind": "perturbation_off", "t": t0 + t_end / 40, "name": "sensor_noise"}]
    return out


def _snap(w: dict[str, np.ndarray], total: int, held: int = 2000) -> SimpleNamespace:
    lo = max(0, total - held)
    t_end = float(w["t"][total - 1])
    return SimpleNamespace(windows={c: v[lo:total] for c, v in w.items()}, n_windows=total,
                           baseline=None, sim_time=t_end, state="running", error=None,
                           switches=[e for e in _switches(0.3 + DT * (len(w["t"]) // 1000 * 1000))
                                     if e["t"] <= t_end])


@pytest.fixture
def plots(qtbot):
    p = MetricPlots()
    p.resize(700, 640)
    p.show()
    qtbot.waitExposed(p)
    yield p
    # Not qtbot.addWidget: pyqtgraph's GraphicsView.close() crashes (SIGSEGV in
    # setViewport(None)) while Python still holds the view, as this fixture does.
    p.hide()
    p.deleteLater()


def _run(plots: MetricPlots, w: dict[str, np.ndarray], n: int = N, step: int = 2000) -> None:
    """Feed the plots as the window's timer does: the latest windows, ``step`` new ones a time."""
    for total in [*range(step, n, step), n]:
        plots.update_snapshot(_snap(w, total))
        QApplication.processEvents()


def _columns(plots: MetricPlots) -> int:
    return round(plots.plots["P"].getViewBox().width())


def _curves(plots: MetricPlots) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    items = {**{k: c for k, c in plots.curves.items() if plots.plots[k].isVisible()},
             **{k: c for k, c in plots.extra.items() if k in {t[0] for t in TWIN}}}
    return {k: c.getData() for k, c in items.items()}


@pytest.mark.parametrize("follow", ["all", "latest"])
def test_what_each_item_is_handed_is_bounded_by_the_pixels(plots, follow):
    w = _session()
    if follow == "latest":
        plots.set_follow("latest", 300.0)  # more rows in view than twice the columns
    _run(plots, w)
    cols = _columns(plots)
    x_all = plots.history.view()["t"]
    lo, hi = plots.x_range()
    in_view = int(((x_all >= lo) & (x_all <= hi)).sum())
    assert plots.history.total == N and in_view > 2 * cols + 2  # decimation has work to do
    assert plots.plots["R_spread_pos"].isVisible()
    for key, (x, _y) in _curves(plots).items():
        # Each pixel column's lowest and highest (and a NaN where it has one), and one row
        # beyond each edge.
        assert x is not None and 0 < len(x) <= 3 * cols + 2, (key, len(x), cols)
        if follow == "latest":
            assert x[0] < lo < x[1]  # the line runs on to the left edge
    for key, dots in plots.dots.items():
        if plots.plots[key].isVisible():
            # A smooth curve's alarmed windows: a cell or two a column of cells.
            assert 0 < len(dots.data) <= 2 * cols / DOT_CELL, (key, len(dots.data), cols)
    marks = plots.undefined.data
    assert 0 < len(marks) <= cols / UNDEFINED_CELL + 2 < MAX_UNDEFINED


def test_peaks_alarms_and_gaps_stay_in_sight(plots):
    w = _session()
    _run(plots, w)
    h = plots.history.view()
    _x, y = plots.curves["H_f"].getData()
    # The spike of a window merged long ago, and the whole history's dip, are drawn.
    assert np.nanmax(y) == 9.0 and np.nanmin(y) == np.nanmin(h["H_f"])
    # P's undefined windows are gaps in the drawn curve as in the history.
    xp, yp = plots.curves["P"].getData()
    assert np.isnan(yp).any() and (np.isnan(yp) == np.isnan(h["P"][np.searchsorted(
        h["t"], xp)])).all()
    # Every dot is an alarmed window's value, and every alarmed window has a dot within a
    # cell of it (the others lie under their cell's first).
    box = plots.plots["H_f"].getViewBox()
    (x0, x1), (y0, y1) = box.viewRange()
    px, py = (x1 - x0) / box.width(), (y1 - y0) / box.height()
    dots = plots.dots["H_f"].data
    rows = np.searchsorted(h["t"], dots["x"])
    assert (h["t"][rows] == dots["x"]).all() and (h["x_H_f"][rows] == 1).all()
    np.testing.assert_array_equal(h["H_f"][rows], dots["y"])
    alarmed = np.flatnonzero(h["x_H_f"] == 1)
    near = np.abs(h["t"][alarmed, None] - dots["x"][None, :]) <= 2 * DOT_CELL * px
    near &= np.abs(h["H_f"][alarmed, None] - dots["y"][None, :]) <= 2 * DOT_CELL * py
    assert near.any(axis=1).all()


def test_the_cursor_reads_the_whole_history_not_what_is_drawn(plots):
    w = _session()
    _run(plots, w)
    h = plots.history.view()
    drawn = set(plots.curves["H_b"].getData()[0].tolist())
    j = next(j for j in range(len(h["t"]) // 2, len(h["t"])) if h["t"][j] not in drawn)
    plots.show_cursor(float(h["t"][j]))
    assert f"t = {h['t'][j]:,.2f} s" in plots.cursor_text
    assert f"H_b {h['H_b'][j]:.3f}" in plots.cursor_text


def test_a_view_zoomed_in_by_hand_gets_its_rows_as_they_are(plots):
    w = _session()
    _run(plots, w)
    h = plots.history.view()
    t_mid = float(h["t"][-500])
    plots.freeze(True)
    plots.plots["P"].setXRange(t_mid, t_mid + 10.0, padding=0)
    x, y = plots.curves["dH"].getData()
    rows = np.flatnonzero((h["t"] >= t_mid) & (h["t"] <= t_mid + 10.0))
    np.testing.assert_array_equal(x[1:-1], h["t"][rows])  # and one beyond each edge
    np.testing.assert_array_equal(y[1:-1], h["dH"][rows])


class _Paints(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def eventFilter(self, obj, ev):
        if ev.type() == QEvent.Type.Paint:
            self.n += 1
        return False


def test_a_frame_is_painted_once(plots, qtbot):
    """pyqtgraph moved the views in the paint; what followed them asked for a second one."""
    w = _session(6000)
    _run(plots, w, 6000 - 60)
    for _ in range(5):
        QApplication.processEvents()
        qtbot.wait(5)
    paints = _Paints()
    plots.viewport().installEventFilter(paints)
    counts = []
    for total in range(6000 - 50, 6001, 10):
        paints.n = 0
        plots.update_snapshot(_snap(w, total))
        for _ in range(5):
            QApplication.processEvents()
            qtbot.wait(5)
        counts.append(paints.n)
    assert counts == [1] * len(counts)


def test_a_periods_name_shows_on_hover_on_every_plot(plots, qtbot):
    w = _session(4000)
    _run(plots, w, 4000)
    t0, t1, _kind, name, _p = plots._periods_key[0]
    assert name == "sensor_noise" and t1 > t0
    view = plots.plots["H_f"].getViewBox()
    at = view.mapViewToScene(QPointF(0.5 * (t0 + t1), float(np.mean(view.viewRange()[1]))))
    QTest.mouseMove(plots.viewport(), plots.mapFromScene(at))
    qtbot.waitUntil(lambda: plots._shades["H_f"].toolTip() == "sensor_noise", timeout=2000)
    assert plots._shades["P"].names_at(0.5 * (t0 + t1)) == "sensor_noise"
    kick = plots._pulses_key[0][0]
    assert plots._lines["dH"].names_at(kick, tolerance=1e-6) == "kick"
    assert plots._lines["dH"].names_at(t1) == ""


def _grown(w: dict[str, np.ndarray], k: int, **values: float) -> dict[str, np.ndarray]:
    """``w`` and ``k`` more windows like its last, ``DT`` apart (``values`` overriding)."""
    out = {}
    for c, v in w.items():
        extra = np.full(k, values.get(c, v[-1]))
        if c == "t":
            extra = v[-1] + DT * np.arange(1, k + 1)
        out[c] = np.concatenate([v, extra])
    return out


def test_a_window_that_changes_no_pixel_is_not_drawn_again(plots):
    """With 20,000 windows in Whole history a new one moves the view by 0.03 pixel: the
    plots are drawn again once what is seen would change, a spike at once."""
    w = _session()
    _run(plots, w)
    drawn = plots.curves["H_f"].getData()[0]
    w = _grown(w, 1)
    plots.update_snapshot(_snap(w, N + 1))
    assert plots.curves["H_f"].getData()[0] is drawn  # not handed over again
    assert plots._last[0][-1] == w["t"][-1]  # but the cursor reads it
    plots.show_cursor(float(w["t"][-1]))
    assert f"t = {w['t'][-1]:,.2f} s" in plots.cursor_text
    # A spike in the newest window is drawn at once.
    w = _grown(w, 1, H_f=50.0)
    plots.update_snapshot(_snap(w, N + 2))
    x, y = plots.curves["H_f"].getData()
    assert x[-1] == w["t"][-1] and y[-1] == 50.0
    # Quiet windows: drawn again before the view has moved by half a pixel.
    total = N + 2
    redrawn = []
    for _ in range(60):
        w = _grown(w, 1, H_f=float(w["H_f"][-2]))
        total += 1
        before = plots.curves["H_f"].getData()[0]
        plots.update_snapshot(_snap(w, total))
        redrawn.append(plots.curves["H_f"].getData()[0] is not before)
        lo, hi = plots.x_range()
        pixel = (hi - lo) / plots.plots["P"].getViewBox().width()
        pad = 0.01 * (w["t"][-1] - w["t"][0])
        assert abs(w["t"][-1] + pad - hi) < 0.5 * pixel
    assert any(redrawn) and redrawn.count(False) > len(redrawn) // 2


def test_the_p_curve_stays_below_the_names_of_periods_and_impulses(plots, qtbot):
    """At 1366×768 the perturbations' names overprinted the P curve: its range now keeps the
    rows its names take free."""
    import pyqtgraph as pg

    w = _session(4000)
    plots.update_snapshot(_snap(w, 4000))
    labels = [c for items in (*plots._regions, *plots._pulses) for c in items[0].childItems()
              if isinstance(c, pg.InfLineLabel) and c.isVisible()]
    assert labels and plots._label_floor < 1.0
    lo, hi = plots.plots["P"].viewRange()[1]
    x0, x1 = plots.x_range()
    seen = (w["t"][:4000] >= x0) & (w["t"][:4000] <= x1)
    p = w["P"][:4000][seen]
    p = p[np.isfinite(p)]
    # The data's top sits under the lowest name's row (rows are fractions of the height).
    lowest = min(label.orthoPos for label in labels)
    del labels  # the items go with the next snapshot's periods: hold none of them
    assert (p.max() - lo) / (hi - lo) < lowest - 0.04
    # Without names the data takes the plot's height again.
    plots.update_snapshot(SimpleNamespace(**{**vars(_snap(w, 4000)), "switches": []}))
    assert plots._label_floor == 1.0
    lo, hi = plots.plots["P"].viewRange()[1]
    assert (p.max() - lo) / (hi - lo) > 0.8


def test_each_metric_axis_says_what_its_metric_is(plots):
    tip = plots.plots["P"].getAxis("left").toolTip()
    assert tip.startswith("P, bi-predictability: how tightly state, action and outcome")
    assert "forward uncertainty" in plots.plots["H_f"].getAxis("left").toolTip()
    assert "H_f − H_b" in plots.plots["dH"].getAxis("left").toolTip()


def test_the_residuals_curves_stay_below_their_legend(plots, qtbot):
    """At 1366×768 the residual plot's legend (one row of four names) lay over the curves'
    peaks: the plot's range keeps the legend's rows free, whatever its height."""
    w = _session(4000)
    for height in (640, 900):
        plots.resize(700, height)
        QApplication.processEvents()
        plots.update_snapshot(_snap(w, 4000))
        QApplication.processEvents()  # laid out: the range fits the height it is given
        plot = plots.plots["R_spread_pos"]
        assert plot.isVisible()
        box = plot.getViewBox()
        lo, hi = plot.viewRange()[1]
        top = max(float(np.nanmax(c.getData()[1])) for c in
                  (plots.curves["R_spread_pos"],
                   *(plots.extra[k] for k, _t, _c in TWIN if k != "R_spread_pos")))
        # Where the highest point is drawn, in pixels from the plot's top, and the legend's
        # bottom in the same pixels.
        data_y = box.mapViewToScene(pg.Point(0.0, top)).y() - box.sceneBoundingRect().top()
        legend = plot.legend.sceneBoundingRect()
        legend_bottom = legend.bottom() - box.sceneBoundingRect().top()
        assert lo < top < hi and data_y > legend_bottom, (height, data_y, legend_bottom)
