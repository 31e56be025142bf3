"""The RL parts of the dashboard: cheetah view, episode-return plot, agency panel."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

import gymnasium
from idt_desk_widgets.agency import PASSIVE_TEXT, AgencyPanel
from idt_desk_widgets.main_window import MainWindow
from idt_desk_widgets.returns_plot import ReturnPlot
from idt_desk_widgets.views import RENDER_PIXELS, VIEWS, CheetahView, make_view
from PySide6.QtGui import QColor

from idt_desk.live.plugins import discover, register
from idt_desk.live.source import Batch, Source

ENV = "HalfCheetah-v5"
WAIT = 30_000


def _info(env, episode: int = 0, step: int = 0, ret: float = 0.0,
          returns: list | None = None) -> dict:
    """The gym source's info (the interface of issue 8) from a real environment."""
    u = env.unwrapped
    m, d = u.model, u.data
    return {
        "env_id": ENV, "qpos": d.qpos.copy(), "qvel": d.qvel.copy(),
        "body_xz": d.xpos[:, [0, 2]].copy(), "body_parent": [int(k) for k in m.body_parentid],
        "body_names": [m.body(i).name for i in range(m.nbody)],
        "episode": episode, "episode_step": step, "episode_return": ret,
        "episode_returns": list(returns or []), "forward_velocity": float(d.qvel[0]),
    }


@pytest.fixture(scope="module")
def cheetah():
    env = gymnasium.make(ENV)
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(40):
        env.step(rng.uniform(-1, 1, 6))
    yield env
    env.close()


def _render_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "idt-render" and t.is_alive()]


def _points(curve) -> int:
    x, _y = curve.getData()
    return 0 if x is None else len(x)


def _non_blank(img) -> int:
    """How many distinct colours a QImage has on a coarse grid (1: blank)."""
    return len({img.pixelColor(x, y).rgb() for x in range(0, img.width(), 7)
                for y in range(0, img.height(), 7)})


def test_cheetah_view_is_registered(qtbot):
    assert VIEWS["cheetah"] is CheetahView
    view = make_view("cheetah")
    qtbot.addWidget(view)
    assert isinstance(view, CheetahView)


def test_skeleton_draws_every_body_from_its_parent(qtbot, monkeypatch, cheetah):
    monkeypatch.setenv("IDT_DESK_RENDER", "skeleton")
    view = CheetahView()
    qtbot.addWidget(view)
    view.resize(320, 260)
    view.show()
    info = _info(cheetah, episode=2, step=40, ret=-3.5)
    view.update_info(info)
    assert view.worker is None and not _render_threads()  # forced skeleton: no thread
    xz, parent = info["body_xz"], info["body_parent"]
    # HalfCheetah: world, torso, three bodies per leg; world's child (the torso) has no line.
    assert len(xz) == 8
    assert len(view.segments) == 6
    for (i, j), (a, b) in zip(view.segment_ids, view.segments, strict=True):
        assert j == parent[i] and i > 0 and j > 0
        assert a == pytest.approx(tuple(xz[i])) and b == pytest.approx(tuple(xz[j]))
    assert {i for i, _ in view.segment_ids} == set(range(2, 8))
    assert view.centre_x == pytest.approx(xz[1, 0])  # the camera follows the torso
    assert "skeleton" in view.caption.text() and "IDT_DESK_RENDER" in view.caption.text()
    assert view.text.text() == "episode 2 · step 40\nreturn -3.5 · v = " \
        f"{info['forward_velocity']:+.2f} m/s"
    img = view.canvas.grab().toImage()
    assert _non_blank(img) > 3
    # The back leg's colour is drawn.
    colours = {img.pixelColor(x, y).name() for x in range(img.width())
               for y in range(img.height())}
    assert QColor(200, 95, 40).name() in colours


def test_render_delivers_frames_and_stops_its_thread(qtbot, cheetah):
    view = CheetahView(render=True)
    qtbot.addWidget(view)
    view.resize(340, 300)
    view.show()
    env = cheetah
    rng = np.random.default_rng(1)
    t0 = time.monotonic()

    def step_and_check() -> bool:
        env.step(rng.uniform(-1, 1, 6))
        view.update_info(_info(env))
        return view.mode in ("render", "failed")

    qtbot.waitUntil(step_and_check, timeout=WAIT)
    if view.mode == "failed":
        reason = view.caption_reason
        view.close_view()
        print(f"no OpenGL context could be created: {reason}")
        pytest.skip(f"no OpenGL context could be created: {reason}")
    print(f"first frame after {time.monotonic() - t0:.1f} s ({view.worker.backend})")
    assert view.image is not None
    w, h = view.worker.rendered_size
    assert (view.image.width(), view.image.height()) == (w, h)
    assert w * h == pytest.approx(RENDER_PIXELS, rel=0.1)  # about 320 × 240 pixels
    aspect = view.canvas.width() / view.canvas.height()
    assert w / h == pytest.approx(min(max(aspect, 0.75), 2.0), rel=0.05)  # the view's shape
    assert _non_blank(view.image) > 20  # a rendered scene, not a blank image
    assert view.caption.text().startswith(f"MuJoCo render ({view.worker.backend})")
    first = view.frames_shown
    for _ in range(20):  # new states become new frames
        env.step(rng.uniform(-1, 1, 6))
        view.update_info(_info(env))
        qtbot.wait(35)
    assert view.frames_shown > first
    worker = view.worker
    assert worker.thread.name == "idt-render" and worker.thread.is_alive()
    view.close_view()
    assert not worker.thread.is_alive() and worker.state == "stopped"
    assert not _render_threads()


def test_no_gl_falls_back_to_the_skeleton_with_the_reason(qtbot, monkeypatch, cheetah):
    # A backend that cannot exist here stands for "no GL".
    monkeypatch.setenv("IDT_DESK_RENDER", "cgl")
    view = CheetahView(render=True)
    qtbot.addWidget(view)
    view.show()
    view.update_info(_info(cheetah))
    qtbot.waitUntil(lambda: (view.update_info(_info(cheetah)), view.mode)[1] == "failed",
                    timeout=WAIT)
    assert view.caption.text().startswith("skeleton: no OpenGL: cgl")
    assert view.worker is None and not _render_threads()
    assert len(view.segments) == 6  # still drawn


def test_return_plot_shows_episode_returns(qtbot):
    plot = ReturnPlot()
    qtbot.addWidget(plot)
    assert _points(plot.curve) == 0
    assert "no episode finished yet" in plot.getPlotItem().titleLabel.text
    # One episode: an x range two episodes wide, ticks on whole episodes (not a smear).
    plot.update_info({"episode_returns": [[0, 5.0]]})
    lo, hi = plot.getPlotItem().viewRange()[0]
    assert (lo, hi) == (-0.5, 1.5)
    ticks = plot.getPlotItem().getAxis("bottom").tickValues(lo, hi, 300)
    assert all(float(v).is_integer() for _spacing, values in ticks for v in values)
    pairs = [[0, -120.5], [1, 30.25], [2, 410.0]]
    plot.update_info({"episode_returns": pairs})
    x, y = plot.curve.getData()
    assert list(x) == [0, 1, 2] and list(y) == [-120.5, 30.25, 410.0]
    assert "last 410," in plot.getPlotItem().titleLabel.text
    # Unchanged list: not redrawn.
    plot.curve.setData([9], [9])
    plot.update_info({"episode_returns": [list(p) for p in pairs]})
    assert list(plot.curve.getData()[0]) == [9]
    # Bounded: the latest 500.
    many = [[k, float(k)] for k in range(800)]
    plot.update_info({"episode_returns": many})
    x, _y = plot.curve.getData()
    assert len(x) == 500 and x[0] == 300 and x[-1] == 799
    plot.clear_data()
    assert _points(plot.curve) == 0


def _agency(holds=(True, True, False)) -> dict:
    out = {"window_end": 12_000, "draws": 200}
    for key, h, v in zip(("choice", "effect", "asymmetry"), holds, (2.41, 0.35, 0.004),
                         strict=True):
        out[key] = {"value": v, "null_mean": 0.01, "null_std": 0.002,
                    "p": 0.005 if h else 0.4, "holds": h}
    return out


def test_agency_panel_fills_table5(qtbot):
    panel = AgencyPanel()
    qtbot.addWidget(panel)
    panel.set_passive(False)
    panel.show()
    assert panel.table.isVisible() and not panel.passive_label.isVisible()
    panel.update_snapshot(SimpleNamespace())  # no agency attribute yet
    panel.update_snapshot(SimpleNamespace(agency=None))
    assert panel.rows["choice"][3].text() == "…"
    panel.update_snapshot(SimpleNamespace(agency=_agency()))
    rows = {k: [w.text() for w in ws] for k, ws in panel.rows.items()}
    assert "H(A|S)" in rows["choice"][0] and "MI(A;S'|S)" in rows["effect"][0]
    assert "|ΔH|" in rows["asymmetry"][0]
    assert rows["choice"][1] == "2.410 bits" and rows["choice"][2] == "null 0.010 ± 0.002"
    assert rows["choice"][3] == rows["effect"][3] == "yes, p < 0.01"
    assert rows["asymmetry"][3] == "not distinguishable"
    assert "#3aa757" in panel.rows["choice"][3].styleSheet()  # green
    assert "#b9bec6" in panel.rows["asymmetry"][3].styleSheet()  # grey
    assert "2 of 3" in panel.footer.text()
    assert "12,000" in panel.footer.text() and "200 draws" in panel.footer.text()
    panel.update_snapshot(SimpleNamespace(agency=_agency((True, True, True))))
    assert panel.rows["asymmetry"][3].text() == "yes, p < 0.01"
    assert "3 of 3" in panel.footer.text()
    assert "Saturation" not in panel.footer.text()
    # A saturated window: the panel says why nothing can hold there.
    zero = {k: {"value": 0.0, "null_mean": 0.0, "null_std": 0.0, "p": 1.0, "holds": False}
            for k in ("choice", "effect", "asymmetry")}
    panel.update_snapshot(SimpleNamespace(agency=zero, windows={"unique_frac": np.ones(3)}))
    assert "0 of 3" in panel.footer.text() and "Saturation 100%" in panel.footer.text()
    assert "one repeated cycle" not in panel.footer.text()
    # A settled deterministic gait (6 distinct triples of 300): it acts, on one cycle; the
    # panel says why nothing holds rather than leaving "0 of 3" to read as no agency.
    panel.update_snapshot(SimpleNamespace(agency={**zero, "window_end": 5},
                                          windows={"unique_frac": np.full(3, 0.02)}))
    assert "0 of 3" in panel.footer.text()
    assert "The agent acts, but on one repeated cycle: 2% of the window" in panel.footer.text()
    panel.reset()
    assert panel.rows["effect"][1].text() == "—" and panel.rows["effect"][3].text() == "…"


def test_the_agency_verdicts_do_not_flip_with_the_gaits_phase(qtbot):
    """A healthy gait: choice holds in some windows and not in others, by phase. The panel
    judges over its last looks, so the headline stays while the latest look flips."""
    panel = AgencyPanel()
    qtbot.addWidget(panel)
    panel.set_passive(False)
    footers, badges = [], []
    for j in range(12):  # choice holds in 7 of every 10 looks; effect and asymmetry always
        look = _agency((j % 10 not in (2, 5, 8), True, True))
        look["window_end"] = 1000 * (j + 1)
        panel.update_snapshot(SimpleNamespace(agency=look))
        footers.append(panel.footer.text().split(" (the latest")[0])
        badges.append(panel.rows["choice"][3].styleSheet())
    # From the second look on: "3 of 3 ... most of the last n looks", whatever the latest.
    assert all(f.startswith("<b>3 of 3</b> conditions hold on most of the last")
               for f in footers[1:]), footers
    assert all("#3aa757" in b for b in badges)  # choice green throughout
    assert panel.rows["choice"][3].text() == "yes, p < 0.01"  # no count: it is the tooltip's
    assert "held in 7 of the last 10 looks" in panel.rows["choice"][3].toolTip()
    # The latest look without choice (its value 0 bits) under a verdict of the looks that
    # holds: the row never reads "0.000 bits — yes".
    look = _agency((False, True, True))
    look["choice"]["value"] = 0.0
    look["window_end"] = 13_000
    panel.update_snapshot(SimpleNamespace(agency=look))
    assert panel.rows["choice"][1].text() == "0.000 bits"
    assert panel.rows["choice"][3].text() == "yes in 7 of 10 looks"
    assert panel.rows["choice"][3].toolTip().startswith("The latest look: not distinguishable")
    # Choice lost for good: the verdict turns once it holds in under half of the looks.
    for j in range(12, 20):
        look = _agency((False, True, True))
        look["window_end"] = 1000 * (j + 1)
        panel.update_snapshot(SimpleNamespace(agency=look))
    assert panel.rows["choice"][3].text().startswith("not distinguishable")
    assert panel.footer.text().startswith("<b>2 of 3</b>")


def test_agency_panel_reads_the_core_conditions(qtbot):
    """The core's own output (exact choice, shuffled effect, bootstrapped asymmetry)."""
    from idt_desk.detection.agency import agency_conditions

    rng = np.random.default_rng(0)
    s = rng.integers(0, 4, 1000)
    a = rng.integers(0, 3, 1000)
    n = (s + a) % 5  # the action decides the outcome: choice and effect hold
    agency = agency_conditions(s, a, n, draws=50, seed=1)
    agency["window_end"] = 5000
    panel = AgencyPanel()
    qtbot.addWidget(panel)
    panel.set_passive(False)
    panel.update_snapshot(SimpleNamespace(agency=agency))
    rows = {k: [w.text() for w in ws] for k, ws in panel.rows.items()}
    assert rows["choice"][3] == "yes (exact)" and rows["choice"][2].startswith("exact")
    assert rows["effect"][3].startswith("yes, p < ")
    assert rows["effect"][2].startswith("null ")
    assert rows["asymmetry"][2].startswith("bootstrap ΔH ")
    assert float(rows["effect"][1].split()[0]) == pytest.approx(agency["effect"]["value"],
                                                                abs=5e-4)


class FakeCheetah(Source):
    """HalfCheetah under random actions, with the gym source's info and episode ends."""

    name = "fake_cheetah"
    label = "Fake cheetah"
    description = "HalfCheetah-v5 under random actions (tests)."
    state_names = ("rootz", "rooty")
    action_names = ("a0",)
    has_reward = True
    rate = 20.0
    chunk = 20
    view = "cheetah"
    EPISODE = 60

    def reset(self, seed: int | None = None) -> None:
        self.env = gymnasium.make(ENV)
        self.obs, _ = self.env.reset(seed=seed)
        self.rng = np.random.default_rng(seed)
        self.episode, self.step_i, self.ret, self.returns = 0, 0, 0.0, []

    def step(self, n: int) -> Batch:
        s, a, s2, r, ep, events = [], [], [], [], [], []
        for i in range(n):
            act = self.rng.uniform(-1, 1, 6)
            obs, rew, term, trunc, _ = self.env.step(act)
            s.append(self.obs[:2].copy())
            a.append(act[:1])
            s2.append(obs[:2].copy())
            r.append(rew)
            ep.append(self.episode)
            self.ret += rew
            self.step_i += 1
            self.obs = obs
            if term or trunc or self.step_i >= self.EPISODE:
                events.append({"kind": "episode_end", "row": i, "episode": self.episode,
                               "return": self.ret, "length": self.step_i})
                self.returns.append([self.episode, self.ret])
                self.episode, self.step_i, self.ret = self.episode + 1, 0, 0.0
                self.obs, _ = self.env.reset()
        info = _info(self.env, self.episode, self.step_i, self.ret, self.returns[-500:])
        return Batch(np.array(s), np.array(s2), np.array(a), np.array(r), np.array(ep),
                     events=events, info=info)

    def close(self) -> None:
        self.env.close()


def test_window_with_cheetah_source(qtbot, tmp_path):
    register(FakeCheetah)
    w = MainWindow(source="pendulum", speed=None, record_dir=tmp_path)
    qtbot.addWidget(w)
    w.show()
    # The pendulum: passive, no return plot.
    assert w.agency.passive_label.isVisible() and not w.agency.table.isVisible()
    assert w.agency.passive_label.text() == PASSIVE_TEXT
    assert "no choice or effect" in w.agency.passive_label.text()
    assert w.returns.isHidden()
    w.source_panel.entries = discover()
    w.source_panel.source_combo.addItem(FakeCheetah.label, FakeCheetah.name)
    w.select_source(FakeCheetah.name, {})
    assert isinstance(w.view, CheetahView)
    assert not w.returns.isHidden() and w.agency.table.isVisible()
    w.pipeline_panel.window_spin.setValue(100)
    w.pipeline_panel.stride_spin.setValue(20)
    assert w.start_session()
    qtbot.waitUntil(lambda: _points(w.returns.curve) >= 3, timeout=WAIT)
    x, y = w.returns.curve.getData()
    assert list(x[:3]) == [0, 1, 2] and np.all(np.isfinite(y))
    qtbot.waitUntil(lambda: w.view.mode in ("render", "failed"), timeout=WAIT)
    assert len(w.view.segments) == 6 or w.view.mode == "render"
    w.stop_session(wait=True)
    # The agency panel reads snap.agency where the session has it.
    w.agency.update_snapshot(SimpleNamespace(agency=_agency()))
    assert w.agency.rows["effect"][3].text() == "yes, p < 0.01"
    w.close()
    assert not w.timer.isActive() and not w.session.running
    assert not _render_threads()  # the view's thread is gone with the window


def test_band_labels_name_the_parameters_that_differ_from_the_declared_ones(qtbot):
    from idt_desk_widgets.periods import periods_of
    from idt_desk_widgets.plots import MetricPlots

    plots = MetricPlots()
    qtbot.addWidget(plots)
    plots.set_source({"act_noise_1": "Action noise 1 %", "hold": "Hold"}, True, False,
                     defaults={"act_noise_1": {"percent": 1.0},
                               "hold": {"mode": "scale", "scale": 0.5, "probability": 0.5}})
    events = [
        {"kind": "perturbation_on", "name": "act_noise_1", "t": 1.0,
         "params": {"percent": 5.0, "scale": [1.0, 2.0]}},
        {"kind": "perturbation_off", "name": "act_noise_1", "t": 2.0},
        {"kind": "modulation_on", "name": "hold", "t": 3.0,
         "params": {"mode": "repeat", "scale": 0.5, "probability": 0.5}},
    ]
    periods = periods_of(events, now=4.0)
    assert [p[:4] for p in periods] == [(1.0, 2.0, "perturbation", "act_noise_1"),
                                        (3.0, 4.0, "modulation", "hold")]
    labels = [plots._label(p[3], p[4]) for p in periods]
    assert labels == ["Action noise 1 % · percent=5", "Hold · mode=repeat"]
    assert plots._label("hold", (("mode", "scale"),)) == "Hold"


def test_the_agency_panel_never_says_passive_for_an_agent_or_contradicts_its_numbers(
        qtbot, tmp_path):
    # The real RL source's class knows its actions only once built: before Start the panel
    # waits for data (dashes), it does not call it a passive system.
    w = MainWindow(source="gym", speed=None, record_dir=tmp_path)
    qtbot.addWidget(w)
    w.show()
    assert w.agency.table.isVisible() and not w.agency.passive_label.isVisible()
    assert all(row[1].text() == "—" for row in w.agency.rows.values())
    w.select_source("replay", {})
    assert "once the session runs" in w.agency.passive_label.text()
    w.close()
    # A dialogue's per-turn conditions: no test, so no "exact"; a tiny positive value is not
    # printed as 0.000 beside a verdict that it is above 0; a negative one does not hold.
    panel = AgencyPanel()
    qtbot.addWidget(panel)
    panel.set_passive(False)
    method = "per turn, pooled counts"
    panel.update_snapshot(SimpleNamespace(agency={
        "choice": {"value": -0.003, "holds": False, "method": method},
        "effect": {"value": 0.0004, "holds": True, "method": method},
        "asymmetry": {"value": 4.289, "holds": True, "method": method},
        "window_end": 75, "where": "turn 75"}))
    rows = {k: (r[1].text(), r[3].text()) for k, r in panel.rows.items()}
    assert rows["effect"] == ("4.0e-04 bits", "> 0 (no test)")
    assert rows["choice"] == ("-0.003 bits", "not distinguishable")
    assert rows["asymmetry"] == ("4.289 bits", "> 0 (no test)")


def test_the_policy_setting_lists_the_shipped_agents_and_marks_those_upside_down(
        qtbot, tmp_path):
    from idt_desk_sources.gym._source import POLICY_DIR, default_policy
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QComboBox

    w = MainWindow(source="gym", speed=None, record_dir=tmp_path)
    qtbot.addWidget(w)
    box = w.source_panel.settings_form.editors["policy"]
    assert isinstance(box, QComboBox) and box.isEditable()
    labels = [box.itemText(i) for i in range(box.count())]
    values = [box.itemData(i) for i in range(box.count())]
    # The empty setting first, named as what it resolves to; then every shipped zip, ranked.
    shipped = sorted(str(p) for p in POLICY_DIR.glob("*.zip"))
    assert values[0] == "" and sorted(values[1:]) == shipped
    assert values[1] == str(default_policy("HalfCheetah-v5"))
    assert w.source_panel.settings_form.values()["policy"] == ""
    for label, value in zip(labels[1:], values[1:], strict=True):
        card = json.loads(Path(value).with_suffix(".json").read_text())
        assert f"{card['return_deterministic']['mean']:,.0f}" in label
        assert ("upside down" in label) == (card["upside_down_share"] >= 0.01)
        assert card["algorithm"] in label
    tip = box.itemData(1, Qt.ItemDataRole.ToolTipRole)
    assert "closed loop" in tip and "CV" in tip
    # Picking a line gives its zip; any other text is taken as typed.
    box.setCurrentIndex(2)
    assert w.source_panel.settings_form.values()["policy"] == values[2]
    box.setEditText("/somewhere/else/policy.zip")
    assert w.source_panel.settings_form.values()["policy"] == "/somewhere/else/policy.zip"
    # After Start the form shows what the source resolved: a shipped zip by its label.
    w.source_panel.settings_form.set_values({"policy": values[1]})
    assert box.currentText() == labels[1]
    assert w.source_panel.settings_form.values()["policy"] == values[1]
    w.source_panel.settings_form.set_values({"policy": "mine.zip"})
    assert box.currentText() == "mine.zip"
