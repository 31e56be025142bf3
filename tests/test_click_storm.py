"""A click storm on the window, for every built-in source.

Random actions on every enabled button, check box and combo box (the source picker
excepted), one every 50 ms for ``STORM_SECONDS`` (12 s) and at least three a second
(longer where a loaded machine acts slower), a third of them on Start / Stop
/ Reset / Pause. A storm fails on an exception in a Qt slot or a worker thread, a session
that ends in error, a Qt warning (also ``qt_log_level_fail``), a thread left running (the
autouse fixture), a stopped session's source still in memory after the storm, or resident
memory that grows more than ``GROWTH_MIB`` beyond a warmed-up window.

Replay a failure with its seed: ``IDT_STORM_SEED=<seed> pytest tests/test_click_storm.py``.
The soak benchmark (minutes per source, the memory curve) is ``idt-desk bench storm``.
"""

from __future__ import annotations

import os
import zlib

import pytest

pytest.importorskip("pytestqt")

from idt_desk_widgets.main_window import MainWindow
from idt_desk_widgets.storm import ClickStorm

from idt_desk.live.session import Session, SessionConfig, run_headless

from .fake_ollama import FakeOllama

#: 12 s a storm (20 before: the four storms were the suite's slowest file); the soak,
#: minutes a source, is ``idt-desk bench storm``.
STORM_SECONDS = float(os.environ.get("IDT_STORM_SECONDS", "12"))
#: Memory the storm may add to a warmed-up window (first uses of other detectors' kernels,
#: figure exporters at 4×, plot buffers filling), counted after the C heap gives its free
#: pages back (``storm.rss_mib``): a 20 s RL storm adds 26–27 MiB (seeds 8637 and 1,
#: measured here), most of it first uses; 12 s storms at random seeds added 7 (RL), 38 and
#: 66 (pendulum), -10 and 29 (replay). Before the fix an RL storm grew ~4.5 MB a second (~5
#: MB a session), ~90 MiB in 20 s, measured with ``idt-desk bench storm``: in 12 s, 54 MiB
#: on top of the first uses. The soak is what measures a slow leak. A dialogue storm that
#: picks the built-in backend loads SmolLM2 once per role (~200 MB each), kept for the
#: process by design (sources/dialogue/_backends.py): measured, a 100 s dialogue storm
#: levels off ~510 MB above its warm-up and stays there for the last 60 s (90 sessions).
GROWTH_MIB = 100.0
GROWTH_MIB_DIALOGUE = 600.0


def _seed(source: str) -> int:
    env = os.environ.get("IDT_STORM_SEED")
    return int(env) if env else zlib.crc32(source.encode()) % 10_000


@pytest.fixture
def server():
    with FakeOllama() as srv:
        yield srv


def _settings(source: str, tmp_path, server) -> dict:
    if source == "dialogue":
        return {"host": server.host, "student_model": "student:1b",
                "teacher_model": "teacher:1b"}
    if source == "replay":
        path = tmp_path / "pendulum-rec"
        run_headless(Session(SessionConfig(source="pendulum", speed=None), record=path),
                     steps=6000)
        return {"path": str(path)}
    return {}


@pytest.mark.parametrize("source", ["pendulum", "gym", "dialogue", "replay"])
def test_the_window_survives_a_click_storm(qtbot, tmp_path, server, source):
    if source == "gym":
        pytest.importorskip("mujoco")
    # At maximum speed the warm-up's first window comes in seconds (the cheetah at 1× needs
    # a minute); the storm then picks speeds at random.
    w = MainWindow(source=source, settings=_settings(source, tmp_path, server), speed=None,
                   record_dir=tmp_path / "recordings")
    qtbot.addWidget(w)
    w.resize(1400, 900)
    w.show()
    seed = _seed(source)
    storm = ClickStorm(w, seed=seed, scratch=tmp_path / "scratch")
    warm = storm.warm_up()
    # At least three actions a second of storm; a loaded machine takes longer to act them.
    min_actions = int(STORM_SECONDS * 3) + 1
    rep = storm.run(STORM_SECONDS, sample_every=1.0, min_actions=min_actions, min_sessions=3)
    where = f"{rep.summary()}; replay with IDT_STORM_SEED={seed}"
    assert not rep.errors, where + "\n" + "\n".join(rep.errors)
    # The storm did exercise the window: sessions started and stopped, controls beyond them.
    assert rep.actions >= min_actions, where
    assert rep.sessions_started >= 3, where
    assert len(rep.by_control) >= 8, where
    assert w.session is None or not w.session.running
    # Every stopped session's source (env, policy, model, client) is released: before the
    # fix they waited, in reference cycles, for a full collection that seldom came.
    assert rep.sources_alive == 0, where
    # And memory stays bounded: after a warm-up session (libraries, models, kernels loaded)
    # the storm adds at most GROWTH_MIB.
    growth = rep.memory[-1][1] - warm
    bound = GROWTH_MIB_DIALOGUE if source == "dialogue" else GROWTH_MIB
    assert growth <= bound, \
        f"{where}: RSS grew {growth:.0f} MiB from {warm:.0f} after the warm-up (bound {bound})"
