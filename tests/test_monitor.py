"""Baselines, 3-sigma excursions, the IDT alarm and latency."""

from __future__ import annotations

import math

import numpy as np
import pytest

from idt_desk import Baseline, Monitor, detect, detection_latency, first_post_onset_window


def _table(n=200, shift_at=120, shift=(0.0, 0.0, 0.0, 0.0), seed=0):
    rng = np.random.default_rng(seed)
    locs = (0.33, 1.0, 1.5, -0.5)
    names = ("P", "H_f", "H_b", "dH")
    t = {m: rng.normal(loc, 0.01, n) for m, loc in zip(names, locs, strict=True)}
    for (m, d) in zip(("P", "H_f", "H_b", "dH"), shift, strict=True):
        t[m][shift_at:] += d
    t["start"] = np.arange(n) * 50
    return t


def test_baseline_mean_and_sample_std():
    x = {"P": np.array([1.0, 2.0, 3.0, 4.0])}
    b = Baseline.fit(x, metrics=["P"])
    assert b.mean["P"] == 2.5
    assert b.std["P"] == pytest.approx(np.std([1, 2, 3, 4], ddof=1))
    assert b.band("P") == pytest.approx((2.5 - 3 * b.std["P"], 2.5 + 3 * b.std["P"]))


def test_excursion_rule_is_strictly_beyond_k_sigma():
    b = Baseline({"P": 0.0}, {"P": 1.0}, n_windows=10, k=3.0)
    f = b.excursions({"P": np.array([2.9, 3.0, 3.0001, -3.5, np.nan])})
    np.testing.assert_array_equal(f["P"], [False, False, True, True, False])


def test_idt_alarm_is_the_union_of_components():
    t = _table(shift=(0.0, 0.0, 0.2, 0.0))
    det = detect(t, window=300, n_baseline=100)
    assert not det.flags["P"][120:].any()
    assert det.flags["H_b"][120:].all()
    np.testing.assert_array_equal(
        det.flags["IDT"], det.flags["P"] | det.flags["H_f"] | det.flags["H_b"] | det.flags["dH"]
    )


def test_latency_counts_windows_from_the_first_window_that_sees_the_onset():
    starts = np.arange(100) * 50
    # W=300: window k covers [50k, 50k+300). Onset at 1000 is first seen by window 15.
    assert first_post_onset_window(starts, 300, 1000) == 15
    assert first_post_onset_window(starts, 300, 0) == 0
    flags = np.zeros(100, dtype=bool)
    assert math.isnan(detection_latency(flags, 15))
    flags[[3, 22]] = True
    assert detection_latency(flags, 15) == 7.0
    flags[15] = True
    assert detection_latency(flags, 15) == 0.0


def test_detect_with_onset_uses_pre_onset_windows_and_reports_reward():
    t = _table(shift_at=60, shift=(-0.1, 0.0, 0.0, 0.0))
    rng = np.random.default_rng(9)
    t["reward"] = rng.normal(5.0, 0.1, 200)
    t["reward"][150:] -= 2.0  # reward reacts later than P
    det = detect(t, window=300, onset=60 * 50)
    onset_idx = first_post_onset_window(t["start"], 300, 3000)
    assert det.onset_index == onset_idx
    assert det.baseline.n_windows == onset_idx
    assert det.latency["P"] == 60 - onset_idx
    assert det.latency["reward"] == 150 - onset_idx
    assert det.latency["IDT"] <= det.latency["P"]
    assert math.isnan(det.latency["H_f"]) or det.latency["H_f"] >= 0
    summary = det.summary()
    assert summary["detected"]["P"] is True and summary["detected"]["reward"] is True


def test_live_monitor_matches_offline_detection_for_any_batching():
    t = _table(shift=(0.05, -0.1, 0.0, 0.3))
    offline = detect(t, window=300, n_baseline=40)
    mon = Monitor(n_baseline=40)
    got = {m: [] for m in ("P", "H_f", "H_b", "dH", "IDT")}
    for lo, hi in [(0, 7), (7, 39), (39, 41), (41, 200)]:
        f = mon.update({m: t[m][lo:hi] for m in ("P", "H_f", "H_b", "dH")})
        for m in got:
            got[m].append(f[m])
    for m in got:
        flags = np.concatenate(got[m])
        assert not flags[:40].any()  # baseline windows are never flagged
        np.testing.assert_array_equal(flags[40:], offline.flags[m][40:])
    assert mon.baseline is not None and mon.baseline.mean == offline.baseline.mean


def test_monitor_recalibrates():
    mon = Monitor(n_baseline=5, metrics=["P"])
    mon.update({"P": np.arange(10.0)})
    assert mon.baseline is not None
    mon.recalibrate(3)
    assert mon.baseline is None and mon.baseline_progress == (0, 3)
    mon.update({"P": np.array([1.0, 1.1, 0.9, 50.0])})
    assert mon.baseline.mean["P"] == pytest.approx(1.0)


def test_baseline_needs_two_windows():
    with pytest.raises(ValueError, match="at least 2"):
        Baseline.fit({"P": np.array([1.0])}, metrics=["P"])
    with pytest.raises(ValueError, match="onset"):
        detect(_table(), window=300)
