"""Hostile recordings: nothing a recording names is imported or run, by any reader.

A recording is data a user may get from anyone. Each family of attack here is one that a
hostile pass found working: an env id that makes ``gymnasium.make`` import a module. Every
file these tests plant (modules, links) lies inside the test's own temporary folder.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import idt_desk
from idt_desk.cli import main

#: A module that says it was imported by writing a file beside itself.
MARKER = "import pathlib\npathlib.Path(__file__).with_suffix('.ran').write_text('imported')\n"


def _recording(path: Path) -> Path:
    x = np.cumsum(np.random.default_rng(0).normal(size=(801, 2)), axis=0)
    with idt_desk.Recorder(path, ["x", "v"], ["u"], window=20, stride=5,
                           calibration_windows=2, baseline_windows=5) as rec:
        rec.add(x[:-1], np.zeros((800, 1)), x[1:])
    return path


def _edit(path: Path, change) -> None:
    config = json.loads((path / "config.json").read_text())
    change(config)
    (path / "config.json").write_text(json.dumps(config))


def _call(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as exc:  # a SystemExit from inside a replay must not escape
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, err.getvalue()


def _twin_id(env_id: str):
    def change(c: dict) -> None:
        c["source"]["details"] = {"twin": {"env_id": env_id}}
    return change


def _gym_settings(env_id: str):
    def change(c: dict) -> None:
        c["source"]["name"] = c["session"]["source"] = "gym"
        c["source"]["settings"] = c["session"]["settings"] = {"env_id": env_id}
    return change


@pytest.mark.parametrize("where", ["twin", "settings"])
@pytest.mark.parametrize("name", ["idt_marker_mod:Env", "unittest.__main__:X",
                                  "idt_desk.cli.__main__:X"])
def test_an_env_id_in_a_recording_is_never_imported(tmp_path, monkeypatch, where, name):
    """``antigravity:X`` in a recording's twin opened the user's browser on replay; a module
    in the working folder named by it ran. The marker sits beside the recording, in the
    working folder and on the path."""
    marker = tmp_path / "idt_marker_mod.py"
    marker.write_text(MARKER)
    rec = _recording(tmp_path / "rec")
    (rec / "idt_marker_mod.py").write_text(MARKER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    _edit(rec, (_twin_id if where == "twin" else _gym_settings)(name))
    before = set(sys.modules)
    rc, err = _call(["run", "--source", "replay", "--set", f"path={rec}", "--speed", "max"])
    assert "Traceback" not in err
    assert not marker.with_suffix(".ran").exists()
    assert not (rec / "idt_marker_mod.ran").exists()
    new = set(sys.modules) - before
    assert not any(m.startswith(("idt_marker_mod", "unittest.__main__", "idt_desk.cli.__main__"))
                   for m in new), new
    # The replay itself goes on without a twin, saying why (its events name the refusal).
    from idt_desk_sources.replay import ReplaySource

    from idt_desk.live.session import Session, SessionConfig, run_headless

    source = ReplaySource(path=str(rec))
    twin = source.twin()
    assert twin is None and "not an id in Gymnasium's registry" in source.twin_note
    run_headless(Session(SessionConfig(speed=None), source=source))
    assert not marker.with_suffix(".ran").exists()
    assert rc == 0 or err.strip().count("\n") == 0, err


def test_a_registered_id_still_builds_its_twin():
    from idt_desk.gym.twin import TwinUnavailable, mujoco_twin, registered_id

    assert registered_id("HalfCheetah-v5") == "HalfCheetah-v5"
    twin, why = mujoco_twin("HalfCheetah-v5")
    assert twin is not None and why == ""
    for bad in ("antigravity:X", "HalfCheetah-v5:x", "no-such-env-v0", 42, ""):
        with pytest.raises(TwinUnavailable, match="registry"):
            registered_id(bad)
