"""A replay (and a watch) of an agent's recording shows what the recording holds."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from idt_desk_sources.replay import ReplaySource
from idt_desk_widgets.main_window import MainWindow
from idt_desk_widgets.replay_view import ReplayView
from PySide6.QtWidgets import QLabel

from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import load_recording

from .toy_source import ToySource

WAIT = 30_000
STEPS = 3500  # the toy's episodes are 1,000 steps: three finished, one under way
PIPE = dict(bins=4, window=40, stride=10, calibration_windows=2, baseline_windows=20)


@pytest.fixture(scope="module")
def agent_recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("agent") / "rec"
    run_headless(Session(SessionConfig(speed=None, **PIPE), source=ToySource(), record=path),
                 steps=STEPS)
    return path


def _returns(path) -> list[list[float]]:
    """Every finished episode's return, summed from the recorded transitions."""
    tr = load_recording(path).transitions
    sums = tr.groupby("episode")["reward"].sum()
    return [[float(e), float(r)] for e, r in sums.items() if e < tr["episode"].max()]


def test_the_replay_source_counts_episode_returns(agent_recording):
    session = Session(SessionConfig(speed=None), source=ReplaySource(path=str(agent_recording)))
    snap = run_headless(session)
    expected = _returns(agent_recording)
    assert len(expected) == 3
    got = snap.info["episode_returns"]
    assert [e for e, _ in got] == [e for e, _ in expected]
    np.testing.assert_allclose([r for _, r in got], [r for _, r in expected], rtol=1e-12)
    assert snap.info["episode"] == 3 and snap.info["episode_step"] == STEPS - 3000


def test_a_replayed_agent_shows_its_reward_returns_and_agency(qtbot, agent_recording):
    w = MainWindow(source="replay", settings={"path": str(agent_recording)}, speed=None)
    qtbot.addWidget(w)
    w.show()
    assert w.start_session()
    qtbot.waitUntil(lambda: not w.session.running, timeout=WAIT)
    w.refresh()
    # The reward plot and light, and the episode returns, as for the live agent.
    assert w.plots.plots["reward"].isVisible()
    assert not w.alarms.lights["reward"].isHidden()
    assert not w.returns.isHidden()
    x, y = w.returns.curve.getData()
    expected = _returns(agent_recording)
    assert list(x) == [e for e, _ in expected]
    np.testing.assert_allclose(y, [r for _, r in expected], rtol=1e-12)
    # An agent, never called passive: the Modulation box and the Agency panel agree.
    assert w.agency.passive is False
    box = w.switches.modulate_box.findChild(QLabel, "modulation_disabled")
    assert box is not None and "passive" not in box.text()
    assert "cannot be modulated" in box.text()
    # The System panel says where the replay stands, in words (no raw dump of its info).
    assert isinstance(w.view, ReplayView)
    assert w.view.progress.value() == 1000
    assert f"{STEPS:,} of {STEPS:,} transitions" in w.view.progress.format()
    text = w.view.text.text()
    assert "episode 3 · step 500" in text and "replay_progress" not in text
    assert f"return {expected[-1][1]:,.1f}" in text
    w.close()


def test_a_replayed_passive_loop_is_called_passive(qtbot, tmp_path):
    from idt_desk_sources.pendulum import PendulumSource

    path = tmp_path / "pendulum"
    run_headless(Session(SessionConfig(speed=None, **PIPE), source=PendulumSource(),
                         record=path), steps=2000)
    w = MainWindow(source="replay", settings={"path": str(path)}, speed=None)
    qtbot.addWidget(w)
    w.show()
    assert w.start_session()
    qtbot.waitUntil(lambda: not w.session.running, timeout=WAIT)
    box = w.switches.modulate_box.findChild(QLabel, "modulation_disabled")
    assert "passive" in box.text() and w.agency.passive is True
    assert not w.plots.plots["reward"].isVisible() and w.returns.isHidden()
    w.close()
