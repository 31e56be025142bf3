"""The ``auto`` preset's view: principal components, the ladder, the wrappers' default."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from idt_desk import PRESETS
from idt_desk.gym import GENERIC_PRESET, IDTMonitor, resolve_preset
from idt_desk.metrics.engine import sliding_metrics
from idt_desk.metrics.symbolize import Symbolizer
from idt_desk.metrics.views import LADDER, RESOLVED_SHARE, View
from idt_desk.pipeline import Pipeline


def _axes_by_svd(z: np.ndarray, k: int) -> np.ndarray:
    """The top k right singular vectors of z, each with its largest loading positive."""
    _, _, vt = np.linalg.svd(z, full_matrices=False)
    axes = vt[:k].T
    lead = axes[np.argmax(np.abs(axes), axis=0), np.arange(k)]
    return axes * np.sign(lead)


def test_components_bin_the_top_principal_axes_of_the_z_scores():
    rng = np.random.default_rng(3)
    latent = rng.standard_normal((800, 2)) * [3.0, 1.0]
    x = latent @ rng.standard_normal((2, 6)) + 0.05 * rng.standard_normal((800, 6))
    x *= [1, 10, 100, 0.1, 1, 5]  # units apart: the z-scores, not the raw values, are rotated
    sym = Symbolizer(6, 3, components=2).fit(x)
    z = (x - x.mean(0)) / x.std(0, ddof=1)
    proj = z @ _axes_by_svd(z, 2)
    lo, hi = proj.min(0), proj.max(0)
    digits = np.clip(np.floor((proj - lo) / ((hi - lo) / 3)), 0, 2).astype(np.int64)
    np.testing.assert_array_equal(sym.transform(x), digits[:, 0] + 3 * digits[:, 1])
    assert sym.alphabet_size == 9 and sym.to_dict()["components"] == 2
    # Written and read back, the view symbolises new rows the same way.
    again = Symbolizer.from_dict(json.loads(json.dumps(sym.to_dict())))
    new = x[:50] * 1.1
    np.testing.assert_array_equal(again.symbolize(new)[0], sym.symbolize(new)[0])
    # A row far outside is clamped and counted; the widened copy's bins cover it.
    m = x.mean(0)
    far = m + 3 * (x[[np.argmax(proj[:, 0]), np.argmin(proj[:, 1])]] - m)
    assert sym.symbolize(far)[1].all() and not sym.widened(far).symbolize(far)[1].any()
    with pytest.raises(ValueError, match="components must be from 1 to 6"):
        Symbolizer(6, 3, components=7)


def test_quantile_bins_cut_where_the_calibration_rows_lie():
    # A transient swing, then a fixed point with a little jitter: equal widths over the
    # swing's range put every settled row in one bin; quantile bins split them in thirds.
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(0, 5, (100, 2)), rng.normal(0.3, 0.01, (900, 2))])
    wide = Symbolizer(2, 3).fit(x).digits(x[100:])
    assert all(len(np.unique(wide[:, j])) == 1 for j in range(2))
    sym = Symbolizer(2, 3, quantile=True).fit(x)
    z = (x - x.mean(0)) / x.std(0, ddof=1)
    ref = np.stack([np.digitize(z[:, j], np.sort(z[:, j])[[333, 666]]) for j in range(2)], 1)
    got = sym.digits(x)
    # The edges are the interpolated quantiles, not these order statistics: a row or two
    # beside an edge may differ.
    assert (got != ref).sum() <= 4 and [np.bincount(got[:, j]).tolist() for j in range(2)] \
        == [[333, 333, 334]] * 2
    # The edges are frozen with the calibration: written, read back, widened, the same bins.
    again = Symbolizer.from_dict(json.loads(json.dumps(sym.to_dict())))
    new = x[::7] * 1.01
    np.testing.assert_array_equal(again.transform(new), sym.transform(new))
    far = x[:3] * 10
    assert sym.symbolize(far)[1].all() and not sym.widened(far).symbolize(far)[1].any()
    np.testing.assert_array_equal(sym.widened(far).transform(new), sym.transform(new))
    with pytest.raises(ValueError, match="inner edges"):
        Symbolizer.from_dict({**sym.to_dict(), "calibration": {
            k: v for k, v in sym.to_dict()["calibration"].items() if k != "edges"}})
    assert View(2, quantile=True).name == "2 quantile bins a variable"


def _loop(n: int, width: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A phase going round a 40-step cycle, seen through ``width`` noisy variables."""
    phase = 2 * np.pi * np.arange(n + 1) / 40
    s = np.stack([np.cos(phase + j) for j in range(width)], 1)
    s += 0.3 * rng.standard_normal(s.shape)
    a = np.stack([np.sin(phase[:-1]), np.cos(phase[:-1])], 1) + 0.3 * rng.standard_normal((n, 2))
    return s, a


def _calibrate(width: int, seed: int = 0) -> tuple[Pipeline, dict]:
    rng = np.random.default_rng(seed)
    s, a = _loop(1300, width, rng)
    pipe = Pipeline(PRESETS["auto"], None, state_names=[f"s{j}" for j in range(width)],
                    action_names=["a0", "a1"], calibration_windows=20)
    step = pipe.push(s[:-1], a, s[1:], {"reward": np.zeros(1300), "t": np.arange(1300.0)})
    return pipe, step


def test_the_ladder_keeps_the_first_view_that_resolves_the_calibration_windows():
    # Two noisy variables: 3 bins of each resolve the windows, and that view is kept.
    pipe, step = _calibrate(2)
    view = step.calibrated["view"]
    assert view["view"] == LADDER[0].name == pipe.view and len(view["tried"]) == 1
    assert view["tried"][0]["resolved"] >= RESOLVED_SHARE and pipe.sym_s.components is None
    # Twelve noisy views of the same phase: each variable's own bins make nearly every
    # triple new, and the top components of S (and A) resolve the windows.
    pipe, step = _calibrate(12)
    tried = step.calibrated["view"]["tried"]
    assert tried[0]["saturated"] + tried[0]["sparse"] == 1.0  # no window resolved at 3 bins
    chosen = next(v for v in LADDER if v.name == pipe.view)
    assert chosen.state_components is not None and tried[-1]["view"] == pipe.view
    assert tried[-1]["resolved"] >= RESOLVED_SHARE
    assert all(t["resolved"] < RESOLVED_SHARE for t in tried[:-1])
    assert pipe.sym_s.components == chosen.state_components
    assert step.calibrated["symbolizer"]["components"] == chosen.state_components
    # The windows the pipeline then gives are those of the chosen symbols, recomputed here.
    rng = np.random.default_rng(0)
    s, a = _loop(1300, 12, rng)
    both = pipe.sym_s.transform(np.concatenate([s[:-1], s[1:]]))
    ref = sliding_metrics(both[:1300], both[1300:], pipe.sym_a.transform(a), 300, 50)
    np.testing.assert_allclose(step.windows["P"], ref["P"], rtol=0, atol=1e-12)


def _balancing(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Episodes of 400 steps: a swing from a wide start, then jitter about a fixed point."""
    s = np.zeros((n + 1, 2))
    a = np.zeros((n, 2))
    for t in range(n):
        if t % 400 == 0:
            s[t] = rng.uniform(-5, 5, 2)
        a[t] = -0.5 * s[t] + 0.01 * rng.standard_normal(2)
        s[t + 1] = 0.8 * s[t] + 0.3 * a[t] + 0.01 * rng.standard_normal(2)
    return s, a


def test_a_loop_at_a_fixed_point_takes_quantile_bins_where_equal_widths_see_a_cycle():
    rng = np.random.default_rng(11)
    s, a = _balancing(1300, rng)
    pipe = Pipeline(PRESETS["auto"], None, state_names=["s0", "s1"], action_names=["a0", "a1"],
                    calibration_windows=20)
    step = pipe.push(s[:-1], a, s[1:], {"reward": np.zeros(1300), "t": np.arange(1300.0)})
    tried = step.calibrated["view"]["tried"]
    # Every equal-width view puts the settled jitter in one bin: the settled windows are a
    # cycle (the ones that hold a start are resolved).
    plain = [x for x in tried if "quantile" not in x["view"]]
    assert len(plain) == 8 and all(x["resolved"] < RESOLVED_SHARE and x["cycle"] >= 0.4
                                   for x in plain)
    # The first quantile view whose windows are resolved (3 bins of the four variables
    # leave this noisy a loop sparse; 2 resolve it).
    assert pipe.view == "2 quantile bins a variable" == tried[-1]["view"]
    assert [x["view"] for x in tried[-2:]] == ["3 quantile bins a variable", pipe.view]
    assert tried[-1]["resolved"] >= RESOLVED_SHARE > tried[-2]["resolved"]
    assert pipe.sym_s.quantile and step.calibrated["symbolizer"]["quantile"] is True
    # The windows given are the quantile symbols' (recomputed independently: the edges are
    # the calibration rows' medians of each z-score).
    z = (s[:1250] - s[:1250].mean(0)) / s[:1250].std(0, ddof=1)
    edges = [np.quantile(z[:, j], [0.5]) for j in range(2)]
    cal = pipe.sym_s.to_dict()["calibration"]
    np.testing.assert_allclose(cal["edges"], edges, rtol=1e-12)
    zs = (s - np.array(cal["mean"])) / np.array(cal["std"])
    digits = np.stack([np.searchsorted(edges[j], zs[:, j], side="right") for j in range(2)], 1)
    sym = digits[:, 0] + 2 * digits[:, 1]
    ref = sliding_metrics(sym[:-1], sym[1:], pipe.sym_a.transform(a), 300, 50)
    np.testing.assert_allclose(step.windows["P"], ref["P"], rtol=0, atol=1e-12)


def test_the_wrappers_default_chooses_the_view_and_a_users_bins_fix_it():
    assert GENERIC_PRESET is PRESETS["auto"] and GENERIC_PRESET.auto_view

    def last(**options):
        env = IDTMonitor(gym.make("HalfCheetah-v5"), detector=None, **options)
        env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(1600):
            *_, term, trunc, info = env.step(env.action_space.sample())
            if term or trunc:
                env.reset()
        env.close()
        return info["idt"]

    # Random torques on 17 observations: 3 bins a variable would be saturated; the view
    # chosen is a few principal components, and its windows are resolved.
    auto = last()
    assert auto["view"].startswith("S ") and auto["regime"] == "resolved"
    fixed = last(bins=3)
    assert "view" not in fixed and fixed["regime"] == "saturated"
    space = gym.spaces.Box(-1, 1, (4,))
    assert resolve_preset(None, space, space, bins=2).auto_view is False
    assert resolve_preset("auto", space, space, window=100).auto_view is True
    with pytest.raises(ValueError, match="takes no groups"):
        PRESETS["auto"].__class__("x", "", 3, 300, 50, state_groups=((0,),), auto_view=True)
    assert View(3, 4, 2).name == "S 4 / A 2 principal components, 3 bins"


def test_on_another_env_the_gym_source_and_the_window_default_to_auto(tmp_path, qtbot):
    from idt_desk_sources.gym import GymSource
    from idt_desk_widgets.main_window import MainWindow
    from stable_baselines3 import PPO

    from idt_desk.live.session import Session, SessionConfig, run_headless

    # An untrained policy for a one-joint env: what matters is the env's shape, not its gait.
    path = tmp_path / "ip.zip"
    PPO("MlpPolicy", gym.make("InvertedPendulum-v5"), seed=0, device="cpu").save(path)
    src = GymSource(env_id="InvertedPendulum-v5", policy=str(path))
    assert src.presets[0] == "auto" and "cheetah" not in src.presets
    session = Session(SessionConfig(speed=None, twin=False), source=src)
    assert session.preset.name == "auto" and session.preset.auto_view
    run_headless(session, steps=1_400)
    snap = session.snapshot()
    assert session.pipeline.view and snap.preset["view"] == session.pipeline.view
    # The alarm panel says the view the symbols were fitted with, not the preset's bins.
    from idt_desk_widgets.alarms import AlarmPanel

    panel = AlarmPanel()
    qtbot.addWidget(panel)
    panel.update_snapshot(snap)
    assert f"Symbols: auto — {session.pipeline.view}, W = 300" in panel.calibration.text()
    # The window shows the class's default (HalfCheetah's paper preset) but gives none until
    # one is chosen: the source's default for its env applies.
    w = MainWindow(speed=None, record_dir=tmp_path)
    qtbot.addWidget(w)
    w.select_source("gym", {})
    panel = w.pipeline_panel
    assert panel.preset_combo.currentText() == "cheetah" and panel.settings()["preset"] is None
    bins_label = panel._form.labelForField(panel.bins_spin)
    assert bins_label.text() == "Bins"
    panel.preset_combo.setCurrentText("auto")  # its bins are the first view it tries
    assert bins_label.text() == "Bins (first view)" and "alarm panel" in \
        panel.bins_spin.toolTip()
    panel.preset_combo.setCurrentText("gym")
    assert panel.settings()["preset"] == "gym" and bins_label.text() == "Bins"
    w.select_source("gym", {})  # the source again: its default, not chosen
    assert panel.settings()["preset"] is None
    w.close()
