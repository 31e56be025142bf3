"""The plots' whole-session store: the newest windows as they are, older ones merged."""

from __future__ import annotations

import numpy as np
import pytest
from idt_desk_widgets.history import PlotHistory


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
