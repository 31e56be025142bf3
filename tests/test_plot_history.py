"""The plots' whole-session store: the newest windows as they are, older ones merged."""

from __future__ import annotations

import numpy as np
import pytest
from idt_desk_widgets.history import PixelColumns, PlotHistory, cell_rows, grid_step, peak_rows


def _windows(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.normal(0.4, 0.05, n)
    p[rng.random(n) < 0.05] = np.nan  # undefined windows
    flag = (rng.random(n) < 0.02).astype(float)
    flag[:10] = np.nan  # no verdict before the baseline
    return {"t": np.arange(n) * 0.075 + 0.3, "P": p, "x_IDT": flag,
            "end": 300.0 + 75.0 * np.arange(n)}


def _feed(hist: PlotHistory, w: dict[str, np.ndarray], sizes, held: int) -> dict:
    """Feed ``w`` as snapshots of the latest ``held`` windows, ``sizes`` new ones at a time."""
    total = 0
    out = hist.view()
    for k in sizes:
        total = min(total + k, len(w["t"]))
        lo = max(0, total - held)
        out = hist.update({c: v[lo:total] for c, v in w.items()}, total)
    return out


def test_a_short_session_is_kept_as_it_is():
    w = _windows(100)
    out = _feed(PlotHistory(64 * 8), w, [7] * 20, held=50)
    for c in w:
        np.testing.assert_array_equal(out[c], w[c])
    assert out["t"].flags.writeable is False


@pytest.mark.parametrize("sizes", [[1] * 5000, [37] * 200, [500] * 10, [5000]])
def test_a_long_session_is_whole_newest_exact_older_merged(sizes):
    n, cap = 5000, 256
    w = _windows(n)
    hist = PlotHistory(cap)
    out = _feed(hist, w, sizes, held=5000)
    assert hist.total == n and hist.missed == 0 and hist.n <= cap
    t = out["t"]
    assert np.all(np.diff(t) >= 0)
    assert t[0] == w["t"][0] and t[-1] == w["t"][-1]  # from the first window to the newest
    # At least half the store holds the newest windows exactly.
    k = hist.n - hist.merged
    assert k >= cap // 2
    for c in w:
        np.testing.assert_array_equal(out[c][hist.merged:], w[c][-k:])
    # One resolution for the whole session: every merged pair spans one group of windows
    # (the oldest as fine as the newest merged), and the archive is at least half used.
    dt = 0.075
    spans = t[1:hist.merged:2] - t[0:hist.merged:2]
    assert spans.max() <= (hist.factor - 1) * dt + 1e-9
    assert hist.merged >= cap // 4
    # The merged rows keep the extremes: P's lowest and highest over the whole session.
    assert np.nanmin(out["P"]) == np.nanmin(w["P"]) and np.nanmax(out["P"]) == \
        np.nanmax(w["P"])
    # Every alarmed window stays alarmed in a row spanning its time; none is invented.
    flagged_t = w["t"][w["x_IDT"] == 1.0]
    rows = out["x_IDT"] == 1.0
    for ft in flagged_t:
        j = np.searchsorted(t, ft)
        near = rows[max(j - 1, 0):j + 1]
        assert near.any(), ft
    for m in range(0, hist.merged, 2):  # a merged pair spans [t_lo, t_hi]
        if rows[m]:
            assert ((flagged_t >= t[m]) & (flagged_t <= t[m + 1])).any(), m


def test_the_result_does_not_depend_on_how_it_was_fed():
    w = _windows(3000, seed=3)
    a = _feed(PlotHistory(128), w, [1] * 3000, held=100)
    b = _feed(PlotHistory(128), w, [99] * 31, held=100)
    for c in w:
        np.testing.assert_array_equal(a[c], b[c])


def test_windows_the_snapshots_never_held_are_counted_missing():
    w = _windows(1000)
    hist = PlotHistory(1024)
    _feed(hist, w, [300] * 4, held=100)
    assert hist.missed == 600 and hist.n == 400
    # A new session (fewer windows than taken in): it starts again.
    out = hist.update({c: v[:5] for c, v in w.items()}, 5)
    assert hist.total == 5 and len(out["t"]) == 5


def test_capacity_is_checked():
    with pytest.raises(ValueError, match="multiple of 8"):
        PlotHistory(100)


def _brute_rows(x, y, lo, hi, columns):
    """PixelColumns.rows written out column by column: what it must pick."""
    i0 = max(int(np.searchsorted(x, lo)) - 1, 0)
    i1 = min(int(np.searchsorted(x, hi, "right")) + 1, len(x))
    if i1 - i0 <= 2 * columns:
        return np.arange(i0, i1)
    col = np.clip(np.floor((x[i0:i1] - lo) * columns / (hi - lo)), -1, columns)
    out = set()
    for c in np.unique(col):
        idx = i0 + np.flatnonzero(col == c)
        v = y[idx]
        ok = ~np.isnan(v)
        if ok.any():
            out |= {idx[ok][np.argmin(v[ok])], idx[ok][np.argmax(v[ok])]}
            if (~ok).any():
                out.add(idx[~ok][0])
        else:
            out.add(idx[0])
    return np.array(sorted(out))


@pytest.mark.parametrize("view", [(0.0, 1500.0), (300.0, 700.0), (-10.0, 1600.0),
                                  (1490.0, 2000.0)])
def test_a_curve_gets_each_pixel_columns_lowest_and_highest_rows(view):
    rng = np.random.default_rng(5)
    n = 20_000
    x = np.sort(rng.random(n)) * 1500
    y = rng.normal(size=n)
    y[rng.random(n) < 0.05] = np.nan  # undefined windows
    y[8000:8400] = np.nan  # a long gap
    lo, hi = view
    rows = peak_rows(x, y, lo, hi, 400)
    np.testing.assert_array_equal(rows, _brute_rows(x, y, lo, hi, 400))
    # Bounded by the width, not the history: two rows a column and a NaN where a column
    # has one, and one row beyond each edge.
    assert len(rows) <= 3 * 400 + 2
    inside = (x >= lo) & (x <= hi)
    if inside.sum() > 800:
        assert len(rows) < inside.sum()
        # The view's peak and dip are drawn, and the gap stays one.
        assert np.nanmax(y[rows]) == np.nanmax(y[inside])
        assert np.nanmin(y[rows]) == np.nanmin(y[inside])
    if lo < x[8200] < hi:
        assert np.isnan(y[rows][(x[rows] > x[8000]) & (x[rows] < x[8399])]).all()


def test_a_curve_with_few_rows_in_view_is_drawn_as_it_is():
    x = np.arange(100.0)
    y = np.sin(x)
    np.testing.assert_array_equal(peak_rows(x, y, 0, 99, 400), np.arange(100))
    # The rows in view and one on each side, so the line runs on to the edges.
    np.testing.assert_array_equal(peak_rows(x, y, 10.5, 20.5, 400), np.arange(10, 22))
    cols = PixelColumns(x, 10.5, 20.5, 400)
    assert cols.whole and (cols.i0, cols.i1) == (10, 22)


def test_markers_keep_one_a_grid_cell():
    rng = np.random.default_rng(2)
    x = np.sort(rng.random(5000)) * 100
    y = rng.normal(size=5000)
    rows = np.flatnonzero(rng.random(5000) < 0.5)
    dx, dy = grid_step(100, 500, 1.5), grid_step(6, 100, 1.5)
    assert 1.5 <= dx * 500 / 100 < 3.0 and 1.5 <= dy * 100 / 6 < 3.0
    kept = cell_rows(rows, x, dx, y, dy)
    cells = {(int(np.floor(x[j] / dx)), int(np.floor(y[j] / dy))) for j in rows}
    # One a cell: each kept row the first of its cell, every cell of a row kept once.
    assert len(kept) == len(cells) < len(rows)
    assert np.all(np.diff(kept) > 0) and set(kept) <= set(rows)
    first = {}
    for j in rows:
        first.setdefault((int(np.floor(x[j] / dx)), int(np.floor(y[j] / dy))), j)
    assert set(kept) == set(first.values())
    # Along x only (the undefined windows' marks): the first row of each column of cells.
    along = cell_rows(rows, x, 0.5)
    assert len(along) == len({int(np.floor(x[j] / 0.5)) for j in rows})


def test_the_grid_holds_while_the_view_grows():
    """A view that grows with the data keeps its cells until its span doubles."""
    assert grid_step(1000.0, 800, 1.5) == grid_step(1050.0, 800, 1.5) == 2.0
    assert grid_step(1050.0 * 2, 800, 1.5) == 4.0
    assert grid_step(0.0, 800, 1.5) == grid_step(float("nan"), 800, 1.5) == 1.0


def test_the_version_changes_with_the_rows():
    w = _windows(300)
    hist = PlotHistory(64)
    v0 = hist.version
    _feed(hist, w, [100], held=100)
    v1 = hist.version
    hist.update({c: v[:100] for c, v in w.items()}, 100)  # nothing new
    assert v1 != v0 and hist.version == v1
    _feed(hist, w, [100, 100], held=300)
    assert hist.version != v1
