"""Issue 78: no false alarm at arming from a twin whose baseline held one rare window.

The twin of a clean MuJoCo loop sits on its channels' floor (log10 of 1e-8, to the ninth
digit) but for rare windows that one transition lifts off it (a residual of 1e-7 where the
others' are 1e-12): on the shipped SAC 2 on HalfCheetah-v5, 0.3 % of the windows, six in a
row (every window that holds that transition). A baseline holding such a run has its mean a
quarter of a resolution off the floor, and its covariance made nearly singular by the few
windows that leave the floor together. Whitened as it was, that covariance put a weight of
thousands on a direction of almost no variance, and the floor's windows, as nearly every judged
window is, read 12-95 σ along it: the MEWMA's T² was over its threshold within three windows
of arming and stayed there (7 of 40 controls of SAC 2 alarmed in their first 20 armed
windows, where the budget of 1/10h allows 0.06 in 40). The whitening now adds each channel's
resolution to the covariance it inverts: a change under every resolution moves the whitened
components by at most √c, and a window off the floor is still tens of σ.
"""

from __future__ import annotations

import numpy as np

from idt_desk.detection.detectors import (
    DetectorSpec,
    alarm_episodes,
    calibrate,
    joint_statistic,
    whitening,
)
from idt_desk.metrics.twin import RESOLUTION, TWIN_METRICS
from idt_desk.pipeline import build_monitor

#: The windows of the one event in the baseline of SAC 2's control at env seed 3000
#: (R_spread_pos, R_shift_pos, R_spread_vel, R_shift_vel; ends 105,200-105,450): six in a row.
EVENT = np.array([[-7.2996303623, -7.9942062808, -7.2708114251, -7.9937201830],
                  [-7.2996304222, -7.9942060735, -7.2708123479, -7.9937158388],
                  [-7.2996304689, -7.9942060211, -7.2708127038, -7.9937145611],
                  [-7.2996305335, -7.9942056916, -7.2708129029, -7.9937134810],
                  [-7.2996305679, -7.9942055158, -7.2708129444, -7.9937132340],
                  [-7.2996307028, -7.9942048237, -7.2708132975, -7.9937112735]])
#: How far the floor's windows rise above log10(1e-8) (the rounding's residual), measured.
JITTER = np.array([3e-7, 1.5e-9, 1e-6, 5e-9])
#: HalfCheetah with every default: 2,200 baseline windows, 1/10h at 20 steps/s, stride 50.
BASELINE, ARL = 2200, 14_400.0


def _floor(n: int, rng: np.random.Generator) -> np.ndarray:
    return -8.0 + np.abs(rng.normal(size=(n, 4))) * JITTER


def _baseline(rng: np.random.Generator, event_at: int | None = 1000) -> np.ndarray:
    x = _floor(BASELINE, rng)
    if event_at is not None:
        x[event_at:event_at + 6] = EVENT
    return x


def _monitor():
    return build_monitor(TWIN_METRICS, baseline_windows=BASELINE, detector="mewma",
                         false_alarms="1/10h", rate=20.0, stride=50, window=300)


def _judge(x: np.ndarray) -> np.ndarray:
    """The twin's alarm on each window after the baseline, as a live monitor flags it."""
    mon = _monitor()
    flags = mon.update({m: x[:, j] for j, m in enumerate(TWIN_METRICS)})
    return flags["twin"][BASELINE:]


def test_a_baseline_with_one_rare_window_run_does_not_alarm_on_the_floor_after_arming():
    """The mechanism, then the fix. Whitened as it was (the correlation, as is), the baseline's
    one event makes a direction whose weight is in the thousands, along which the floor's
    windows read tens of σ: T² over the threshold from the first armed windows. With the
    resolution added, 220 armed windows on the floor raise no alarm, for any of ten
    baselines."""
    rng = np.random.default_rng(78)
    base = _baseline(rng)
    after = _floor(220, rng)
    cal = calibrate(DetectorSpec("mewma"), {m: base[:, j] for j, m in enumerate(TWIN_METRICS)},
                    ARL, overlap=6, min_std={m: RESOLUTION for m in TWIN_METRICS})
    z_base = np.column_stack([cal.standardise(m, base[:, j])
                              for j, m in enumerate(TWIN_METRICS)])
    z = np.column_stack([cal.standardise(m, after[:, j]) for j, m in enumerate(TWIN_METRICS)])
    # Every floor window is within a quarter of a resolution of the baseline's mean...
    mean = np.array([cal.mean[m] for m in TWIN_METRICS])
    assert np.abs(after - mean).max() < 0.25 * RESOLUTION
    # ...which the old whitening (the correlation's, applied to z) read as tens of σ.
    sd = np.std(z_base, axis=0, ddof=1)
    old = whitening(z_base / sd)
    assert np.abs(old).max() > 1_000
    t2_old, _ = joint_statistic(0.05, z @ old)
    assert (t2_old[:4] > cal.joint["threshold"]).any()
    # The whitening in force: bounded by the resolution, and the floor judged quiet.
    w = np.asarray(cal.joint["whitening"])
    assert np.linalg.norm(z @ w, axis=1).max() < 2.0  # at most √4 for sub-resolution changes
    t2, _ = joint_statistic(0.05, z @ w)
    assert alarm_episodes(t2, cal.joint["threshold"]) == 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        x = np.vstack([_baseline(rng, event_at=int(rng.integers(0, BASELINE - 6))),
                       _floor(220, rng)])
        assert np.nansum(_judge(x)) == 0, seed


def test_the_twin_still_alarms_when_a_window_leaves_the_floor_after_arming():
    """What the twin is for: a run of windows off the floor after arming (the same event's
    size, 70 resolutions) is alarmed at once, whether the baseline held one or none."""
    for event_at in (1000, None):
        rng = np.random.default_rng(7)
        after = _floor(60, rng)
        after[10:16] = EVENT
        flags = _judge(np.vstack([_baseline(rng, event_at), after]))
        assert np.nansum(flags[:10]) == 0
        assert flags[10:13].any(), event_at


def test_the_whitening_with_resolutions_is_bounded_by_them_and_is_the_plain_one_above_them():
    """Unit variance at most in every direction; a change under every resolution moves the
    whitened components by at most √c; channels far above their resolution whitened as
    before (T² is rotation invariant: the same T²)."""
    rng = np.random.default_rng(3)
    n = 3000
    common = rng.normal(size=n)
    z = np.column_stack([common + 1e-4 * rng.normal(size=n), common + 1e-4 * rng.normal(size=n),
                         rng.normal(size=n), 0.02 * rng.normal(size=n)])
    z = z / z.std(axis=0, ddof=1).max()
    r = np.array([0.5, 0.5, 0.1, 1.0])
    w = whitening(z, resolution=r)
    cov = np.cov((z @ w).T)
    assert np.linalg.eigvalsh(cov).max() <= 1.0 + 1e-9
    for _ in range(200):
        dz = r * rng.uniform(-1.0, 1.0, size=4)
        assert np.linalg.norm(dz @ w) <= 2.0 + 1e-12
    # Far above the resolutions: the same T² as the plain whitening.
    x = rng.multivariate_normal(np.zeros(3), [[1, 0.8, 0.3], [0.8, 1, 0.5], [0.3, 0.5, 1]], n)
    plain, fine = whitening(x), whitening(x, resolution=np.full(3, 1e-6))
    np.testing.assert_allclose(((x @ fine) ** 2).sum(axis=1), ((x @ plain) ** 2).sum(axis=1),
                               rtol=1e-9)
