"""The documentation's pictures, retaken from the current build: ``idt-desk pictures``.

Each picture is a window state reached by a script, not by hand: a source, its settings, the
switches scheduled at loop times, and the loop time at which the session is paused and the
window (or one panel of it) is saved. The session runs as fast as it can and pauses exactly
at that transition (a scheduled ``pause``), so a picture shows the same windows, alarms and
events whatever the machine: a session's windows and events do not depend on its speed
(``assets/docs/run.md``). A picture whose inputs are not on this machine (the paper authors'
policy, cloned beside the repository) is skipped with the reason.

Run it under a display (``xvfb-run -a idt-desk pictures``), then look at every picture.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PICTURES", "Picture", "take_pictures"]

#: Where the documentation's pictures live, from the repository's root.
IMG = Path("assets/docs/img")
#: The authors' public policies, cloned beside the repository (``assets/docs/rl.md``).
AUTHORS = Path("../idt_pipeline")


@dataclass(frozen=True)
class Picture:
    """One documentation picture: the session that makes it and when it is taken.

    ``switches`` are ``--perturb`` specs (``NAME[:k=v]@START[-END]``, seconds of loop time);
    ``at`` is the loop time (seconds; a dialogue: turns) at which the session pauses and the
    picture is taken (None: at the source's end, a replay's); ``preset`` is picked in the side
    panel before the start (empty: the source's first); ``panel`` names the window's
    attribute to save instead of the whole window; ``needs`` are files without which the
    picture is skipped.
    """

    name: str
    source: str
    settings: dict[str, Any] = field(default_factory=dict)
    switches: tuple[str, ...] = ()
    at: float | None = None
    #: The window's size: a common laptop screen's (what a new user sees; 1400×900 hid what
    #: 1366×768 cuts, and the pictures showed none of it).
    size: tuple[int, int] = (1366, 768)
    panel: str = ""
    needs: tuple[Path, ...] = ()
    what: str = ""
    #: Writes what the picture's session reads into a scratch folder; returns settings.
    prepare: Callable[[Path], dict[str, Any]] | None = None
    preset: str = ""
    #: The window opens on the table of the runs under the prepared ``path`` (``idt-desk
    #: watch`` on a folder of runs) and is saved once it lists them; no session runs.
    fleet: bool = False


def _watched_loop(scratch: Path) -> dict[str, Any]:
    """The loop of ``assets/docs/watch.md``, run to its end: the recording ``watch`` shows."""
    import gymnasium as gym
    from stable_baselines3 import SAC

    import idt_desk

    env = gym.make("HalfCheetah-v5")
    policy = SAC.load("assets/policies/halfcheetah-v5-sac-seed1.zip", device="cpu",
                      buffer_size=1)
    obs, _ = env.reset(seed=0)
    episode = 0
    run = scratch / "runs" / "cheetah"
    with idt_desk.Recorder(run, state_names=[f"obs_{j}" for j in range(17)],
                           action_names=[f"torque_{j}" for j in range(6)],
                           rate=1 / env.unwrapped.dt, reward=True, preset="cheetah") as rec:
        for _step in range(60_000):
            action, _ = policy.predict(obs, deterministic=True)
            nxt, reward, terminated, truncated, _ = env.step(action)
            rec.add(obs, action, nxt, reward=reward, episode=episode)
            obs = nxt
            if terminated or truncated:
                obs, episode = env.reset()[0], episode + 1
    env.close()
    return {"path": str(run), "follow": True, "silence": 10.0, "wait": 60.0}


#: The sweep of ``assets/docs/watch.md``: (algorithm, learning rate, seed).
SWEEP = [("ppo", lr, seed) for lr in (3e-4, 1e-3) for seed in (1, 2)] + \
        [("a2c", lr, seed) for lr in (7e-4, 3e-3) for seed in (1, 2)]


def _train(root: str, algo: str, lr: float, seed: int, steps: int = 60_000) -> None:
    """One training of the sweep, recorded by ``IDTCallback(record=…)`` (a worker process)."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import A2C, PPO

    from idt_desk.gym import IDTCallback

    torch.set_num_threads(1)
    model = (PPO if algo == "ppo" else A2C)("MlpPolicy", gym.make("Pendulum-v1"),
                                            learning_rate=lr, seed=seed, device="cpu")
    model.learn(steps, callback=IDTCallback(
        window=200, stride=50, calibration_windows=20, baseline_windows=100,
        record=f"{root}/{algo}-lr{lr:g}/seed-{seed}"))


def _sweep(scratch: Path) -> dict[str, Any]:
    """The sweep of ``assets/docs/watch.md`` run to its end, two trainings at a time."""
    from concurrent.futures import ProcessPoolExecutor

    root = scratch / "runs"
    with ProcessPoolExecutor(2) as pool:
        for job in [pool.submit(_train, str(root), *c) for c in SWEEP]:
            job.result()
    return {"path": str(root)}


_SAC2 = "assets/policies/halfcheetah-v5-sac-seed2.zip"
#: The RL pictures' baseline (windows): the 800 the pages' runs and studies used, armed at
#: 2,062.5 s (the source's default, 2,200, is armed at 5,562.5 s).
STUDY_BASELINE = 800

#: Every screenshot the documentation shows (the figures of the reproductions come from
#: their own commands: ``idt-desk reproduce ...``, named in each page).
PICTURES = (
    Picture("screenshot.png", "pendulum", switches=("sensor_noise@70-75", "kick@80"), at=90.0,
            what="README and index: the pendulum, sensor noise at 70-75 s, a kick at 80 s"),
    Picture("alarms.png", "pendulum",
            switches=("sensor_noise:sigma_angle=0.05,sigma_rate=0.3@70",), at=76.0,
            panel="alarms", what="alarms.md: the alarm panel after sensor noise at 70 s"),
    Picture("screenshot_cheetah.png", "gym", switches=("force_torso_10N:force=30@2100-2600",),
            at=2492.0, what="rl.md: the shipped default, a 30 N push from 2,100 s"),
    Picture("screenshot_shipped_default_act_noise_1.png", "gym",
            switches=("act_noise_1@2500",), at=2800.0,
            what="rl.md and rl-detection.md: the shipped default, 1 % action noise from 2,500 s"),
    Picture("screenshot_cheetah_live_act_noise_4.png", "gym", switches=("act_noise_4@2150",),
            at=2400.0, preset="cheetah-live",
            what="rl-estimator.md: the live cheetah preset, 4 % action noise from 2,150 s: the "
                 "twin names the class of change"),
    *(Picture(f"screenshot_twin_{cls}.png", "gym", switches=(f"{name}@2100",), at=2250.0,
              what=f"rl-twin.md: the shipped default, {name} from 2,100 s: the twin names {cls}")
      for cls, name in (("sensor", "obs_noise_3"), ("actuator", "act_noise_3"),
                        ("force", "force_torso_10N"), ("dynamics", "gravity_110"))),
    Picture("screenshot_sac2_act_noise_1.png", "gym", {"policy": _SAC2},
            switches=("act_noise_1@2500",), at=2800.0,
            what="rl-detection.md: SAC seed 2 (chaotic), 1 % action noise from 2,500 s"),
    Picture("screenshot_sac2_obs_noise_3.png", "gym", {"policy": _SAC2},
            switches=("obs_noise_3@2500",), at=2800.0,
            what="rl-detection.md: SAC seed 2 (chaotic), 3 % observation noise from 2,500 s"),
    Picture("screenshot_authors_sac3_act_noise_1.png", "gym",
            {"env_id": "HalfCheetah-v4", "policy": str(AUTHORS / "sac_claude_seed3.zip")},
            switches=("act_noise_1@2500",), at=2800.0,
            needs=(AUTHORS / "sac_claude_seed3.zip",),
            what="rl-detection.md: the authors' SAC seed 3, 1 % action noise from 2,500 s"),
    Picture("screenshot_dialogue.png", "replay",
            {"path": "assets/recordings/dialogue-smollm2-contradictions"},
            what="dialogue.md: the shipped dialogue replayed to its end"),
    Picture("screenshot_watch.png", "replay", prepare=_watched_loop,
            what="watch.md: idt-desk watch on the page's own loop, followed to its end"),
    Picture("screenshot_fleet.png", "replay", prepare=_sweep, fleet=True,
            what="watch.md: idt-desk watch on the page's sweep of eight SB3 trainings"),
)


def take_pictures(out: Path, only: tuple[str, ...] = (), timeout: float = 600.0,
                  say: Callable[[str], None] = print) -> list[Path]:
    """Take the pictures named in ``only`` (all: empty) into ``out``; the files written."""
    from PySide6.QtWidgets import QApplication

    if not os.environ.get("DISPLAY") and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    app = QApplication.instance() or QApplication(["idt-desk"])
    unknown = [n for n in only if n not in {p.name for p in PICTURES}]
    if unknown:
        raise ValueError(f"no picture named {', '.join(unknown)}; known: "
                         f"{', '.join(p.name for p in PICTURES)}")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for pic in PICTURES:
        if only and pic.name not in only:
            continue
        missing = [str(p) for p in pic.needs if not p.exists()]
        if missing:
            say(f"skipped {pic.name}: needs {', '.join(missing)}")
            continue
        t0 = time.monotonic()
        path = _take(app, pic, out / pic.name, timeout)
        say(f"{path}  ({pic.what}; {time.monotonic() - t0:.0f} s)")
        written.append(path)
    return written


def _take(app: Any, pic: Picture, path: Path, timeout: float) -> Path:
    """Run ``pic``'s session to its moment, pause it there and save the window."""
    import tempfile

    from idt_desk_widgets.main_window import MainWindow

    from idt_desk.cli.validate import schedule_switches

    def schedule(source: Any) -> list[tuple[int, str, dict]]:
        moments = schedule_switches(pic.switches, source)
        if pic.at is not None:
            moments.append((round(pic.at * source.rate), "pause", {}))
        return moments

    with tempfile.TemporaryDirectory(prefix="idt-pictures-") as tmp:
        settings = dict(pic.settings)
        if pic.prepare is not None:
            settings.update(pic.prepare(Path(tmp)))
        if pic.fleet:
            return _take_fleet(app, pic, path, settings["path"], timeout)
        win = MainWindow(source=pic.source, settings=settings, speed=None,
                         record_dir=Path(tmp))
        try:
            win.resize(*pic.size)
            win.show()
            if pic.preset:
                win.pipeline_panel.preset_combo.setCurrentText(pic.preset)
            if pic.source == "gym":  # the pages' runs: perturbed at 2,100-2,500 s, armed before
                win.pipeline_panel.baseline_spin.setValue(STUDY_BASELINE)
            if not win.start_session(schedule=schedule):
                raise RuntimeError(f"{pic.name}: the session did not start: "
                                   f"{win.banner.text()}")
            session = win.session
            assert session is not None
            deadline = time.monotonic() + timeout
            while session.running and not session.snapshot(1).state == "paused":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{pic.name}: not at its moment within {timeout:g} s")
                app.processEvents()
                time.sleep(0.005)
            for _ in range(20):  # the window catches up with the paused session
                win.refresh()
                app.processEvents()
                time.sleep(0.02)
            widget = getattr(win, pic.panel) if pic.panel else win
            if not widget.grab().save(str(path)):
                raise RuntimeError(f"{pic.name}: could not write {path}")
        finally:
            win.stop_session(wait=True)
            win.close()
    return path


def _take_fleet(app: Any, pic: Picture, path: Path, folder: str, timeout: float) -> Path:
    """The window opened on the runs under ``folder``, saved once it lists them."""
    from idt_desk_widgets.main_window import MainWindow

    from idt_desk.recordings.runs import RunIndex

    win = MainWindow(source="replay", settings={"path": "", "follow": True}, speed=None,
                     fleet=RunIndex(folder), fleet_location=folder)
    try:
        win.resize(*pic.size)
        win.show()
        view = win.fleet
        assert view is not None
        deadline = time.monotonic() + timeout
        while view.refreshes < 2:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{pic.name}: the runs were not listed within {timeout:g} s")
            app.processEvents()
            time.sleep(0.005)
        if not win.grab().save(str(path)):
            raise RuntimeError(f"{pic.name}: could not write {path}")
    finally:
        win.close()
    return path
