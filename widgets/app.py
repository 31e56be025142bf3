"""Entry point of the desktop GUI: the one module of ``idt_desk`` that may import Qt.

It is imported only by ``idt-desk gui`` (and plain ``idt-desk``), never by the core.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["bench_follow", "bench_gui", "bench_storm", "run_gui"]


def run_gui(
    source: str = "pendulum",
    settings: dict[str, Any] | None = None,
    start: bool = False,
    speed: float | None = 1.0,
    screenshot: Path | None = None,
    quit_after: float | None = None,
    record: Path | None = None,
    schedule: Any = None,
    size: tuple[int, int] | None = None,
    watch_folder: Path | None = None,
    fleet: Any = None,
    fleet_location: str = "",
    startup_times: bool = False,
    baseline: Path | None = None,
) -> int:
    """Open the main window; optionally start, screenshot after ``quit_after`` s, and quit.

    ``startup_times``: say when the window was shown and when its first window was plotted,
    in seconds after the command started (the process's own start: the interpreter and the
    imports counted), then quit (``idt-desk gui --startup-times``: what the README's
    start-up figures are measured with).

    ``schedule``: (transition, command, arguments) to apply, or a function of the built
    source that gives them (a source that is slow to load is built in the window).
    ``watch_folder``: a folder of runs (``idt-desk watch FOLDER``); the window follows a run
    that starts there later in its turn. ``fleet``: the runs of a watched folder (a
    :class:`~idt_desk.recordings.runs.RunIndex`), shown as a table the window opens on.
    ``baseline``: a baseline profile every Start takes (``--baseline``).
    """
    from idt_desk_widgets.main_window import MainWindow
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY") and \
            not os.environ.get("QT_QPA_PLATFORM") and sys.platform.startswith("linux"):
        print("idt-desk: no display found. Run under a desktop session, or with "
              "`xvfb-run -a idt-desk ...`, or headless with `idt-desk run`.", file=sys.stderr)
        return 2
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "idt-desk"])
    app.setApplicationName("IDT Desk")
    # ``record`` is the recording itself (as `run --record`), later ones go beside it.
    win = MainWindow(source=source, settings=settings or {}, speed=speed,
                     record_dir=None if record is None else record.expanduser().parent,
                     watch_folder=watch_folder, fleet=fleet, fleet_location=fleet_location)
    if baseline is not None:
        win.load_profile(baseline)
    win.record_panel.next_record_path = None if record is None else record.expanduser()
    app.aboutToQuit.connect(win.shutdown)
    remembered = _window_settings()
    if size is not None:
        win.resize(*size)
    else:
        # The last size and place (the user's), kept inside this screen's available area.
        state = remembered.value("main_window/geometry")
        if state is not None:
            win.restoreGeometry(state)
        win.fit_to_screen()
        if screenshot is None:  # a picture for the docs remembers nothing
            app.aboutToQuit.connect(lambda: remembered.setValue("main_window/geometry",
                                                                win.saveGeometry()))
    win.show()
    if startup_times:
        _report_startup(app, win)
    if record is not None:
        win.record_panel.record_button.setChecked(True)
    if start:
        # The window paints and takes Cancel while the source loads (the RL source: seconds).
        win.start_session(schedule=schedule, background=True)
    delay = quit_after if quit_after is not None else (3.0 if screenshot else None)
    if delay is not None:

        def finish() -> None:
            if screenshot is not None:
                win.refresh()
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                win.grab().save(str(screenshot))
                print(f"screenshot saved to {screenshot}")
            win.close()
            app.quit()

        QTimer.singleShot(int(delay * 1000), finish)
    received = _close_on_signals(app, win)
    rc = app.exec()
    win.shutdown()
    if received:
        print(f"idt-desk gui: stopped by {received[0].name}"
              + (f"; the recording in {win.record_panel.last_recording} is complete"
                 if win.record_panel.last_recording is not None else ""), file=sys.stderr)
        return 128 + int(received[0])
    return int(rc)


def _report_startup(app: Any, win: Any) -> None:
    """Print the window's start-up times once its first window is plotted, then quit."""
    import time

    import psutil
    from PySide6.QtCore import QTimer

    born = psutil.Process().create_time()
    shown = time.time() - born
    poll = QTimer(win)
    poll.setInterval(10)

    def look() -> None:
        if win.plots.history.total > 0:
            poll.stop()
            print(f"idt-desk gui: window shown {shown:.2f} s and its first window plotted "
                  f"{time.time() - born:.2f} s after the command started", file=sys.stderr)
            win.close()
            app.quit()

    poll.timeout.connect(look)
    poll.start()


def _window_settings() -> Any:
    """Where the window's size and place are remembered: Qt's ``QSettings``.

    On Linux ``$XDG_CONFIG_HOME/IDT Desk/idt-desk.conf``.
    """
    from PySide6.QtCore import QSettings

    return QSettings("IDT Desk", "idt-desk")


def _close_on_signals(app: Any, win: Any) -> list[Any]:
    """Let SIGINT and SIGTERM close the window; return the signals received (a list).

    The window closes as its close button closes it: the session stops, the recording is
    completed (``session_end`` logged).

    Qt's event loop does not run Python code by itself, so a 200 ms timer gives the
    interpreter the moment to run the handlers.
    """
    import signal

    from PySide6.QtCore import QTimer

    received: list[Any] = []

    def handler(signum: int, frame: Any) -> None:
        if not received:
            received.append(signal.Signals(signum))
            QTimer.singleShot(0, lambda: (win.close(), app.quit()))

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, handler)
    tick = QTimer(app)
    tick.timeout.connect(lambda: None)
    tick.start(200)
    return received


def bench_storm(minutes: float = 5.0, source: str = "pendulum", seed: int = 0,
                lifecycle_only: bool = False, print_fn: Any = print) -> int:
    """Storm the window for ``minutes``: print actions, errors and RSS every 10 s; 1 on errors.

    ``lifecycle_only``: only Start and Stop, as fast as the window takes them.
    """
    import tempfile

    if not os.environ.get("DISPLAY") and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from idt_desk_widgets.main_window import MainWindow
    from idt_desk_widgets.storm import ClickStorm, print_report
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(["idt-desk"])
    with tempfile.TemporaryDirectory(prefix="idt-storm-") as tmp:
        win = MainWindow(source=source, speed=None, record_dir=Path(tmp) / "recordings")
        win.resize(1400, 900)
        win.show()
        app.processEvents()
        storm = ClickStorm(win, seed=seed, scratch=Path(tmp) / "scratch",
                           **({"lifecycle_share": 1.0,
                               "lifecycle": ("start_button", "stop_button")}
                              if lifecycle_only else {}))
        print_fn(f"storm: {source}, {minutes:g} min, seed {seed}"
                 + (", Start/Stop only" if lifecycle_only else ""))
        warm = storm.warm_up()
        print_fn(f"  warm-up session (to its first window) done: RSS {warm:,.0f} MiB")

        def sample(t: float, rss: float) -> None:
            print_fn(f"  {t:6.0f} s  {storm.report.actions:6d} actions  "
                     f"{storm.report.sessions_started:5d} sessions  RSS {rss:7.0f} MiB  "
                     f"{len(storm.report.errors)} errors")

        rep = storm.run(minutes * 60, sample_every=10.0, on_sample=sample)
        print_report(rep)
        end = rep.memory[-1][1]
        print_fn(f"  RSS after the warm-up {warm:,.0f} MiB, after the storm {end:,.0f} MiB "
                 f"({end - warm:+,.0f} MiB); {rep.by_control.get('Start', 0)} Start and "
                 f"{rep.by_control.get('Stop', 0)} Stop clicks")
        win.close()
    return 1 if rep.errors else 0


def bench_gui(seconds: float = 10.0, print_fn: Any = print, source: str = "pendulum",
              record: bool = False, history: int = 0) -> dict[str, float]:
    """The GUI's frame rate, and the loop's rate in the window against headless, one run.

    The real window and its 30 Hz QTimer run ``seconds`` at real time and at maximum speed
    (every tick pulls a snapshot and repaints); then the same source runs ``seconds`` at
    maximum speed with no window (a :class:`~idt_desk.live.session.Session` in its worker, as
    ``idt-desk run`` runs it). Each after a warm-up (JIT, calibration, first paints).
    ``record``: every run records its session (into a temporary folder), the window's and the
    headless one alike.
    A source whose session has a process of its own (``own_process``) is also run at maximum
    speed as a thread of the window's process, the design it replaced. Offscreen when there is
    no display. Returns the frame rates, the loop rates, ``loop_ratio`` (window / headless at
    maximum speed) and ``one_process_ratio`` (the thread's, when measured).

    ``history``: instead, the frame rate at real time of a window whose session first ran to
    ``history`` windows against a fresh one's, in the same run (:func:`_history_runs`).
    """
    import time

    if not os.environ.get("DISPLAY") and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from idt_desk_widgets.main_window import MainWindow
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(["idt-desk"])
    results: dict[str, float] = {}

    def pump(until: float) -> None:
        while time.monotonic() < until:
            app.processEvents()
            time.sleep(0.001)

    from idt_desk.live.plugins import load_source

    if history:
        return _history_runs(app, source, seconds, history, print_fn)
    warm = 2.0 if source == "pendulum" else 15.0
    runs: list[tuple[str, float | None, bool | None]] = [
        ("real time (1x)", 1.0, None), ("maximum speed", None, None)]
    if load_source(source).own_process:  # and as it ran before it had a process of its own
        runs.append(("max, one process", None, False))
    tmp = Path(tempfile.mkdtemp(prefix="idt-bench-gui-"))
    for label, speed, own in runs:
        win = MainWindow(source=source, speed=speed, own_process=own, record_dir=tmp)
        win.record_panel.record_button.setChecked(record)
        win.show()
        win.start_session()
        count = _count_frames(win)
        pump(time.monotonic() + warm)
        count["n"] = 0
        n0 = win.session.snapshot(limit=1).n_transitions
        t0 = time.monotonic()
        pump(t0 + seconds)
        dt = time.monotonic() - t0
        fps = count["n"] / dt
        rate = (win.session.snapshot(limit=1).n_transitions - n0) / dt
        win.close()
        results[label] = fps
        results[f"{label} loop"] = rate
        print_fn(f"{label:>16}: GUI timer {fps:5.1f} frames/s (target >= 25), {source} "
                 f"{rate:,.0f} transitions/s")
    ratio = results["maximum speed"] / results["real time (1x)"]
    print_fn(f"frame rate at maximum speed / at real time: {ratio:.2f}")
    results["ratio"] = ratio
    headless = _headless_rate(source, seconds, warm, tmp / "headless" if record else None)
    shutil.rmtree(tmp, ignore_errors=True)
    results["headless loop"] = headless
    results["loop_ratio"] = results["maximum speed loop"] / headless
    print_fn(f"{'headless':>16}: {source} {headless:,.0f} transitions/s at maximum speed")
    print_fn(f"loop in the window / headless, at maximum speed: {results['loop_ratio']:.2f} "
             "(target >= 0.9)")
    if "max, one process loop" in results:
        results["one_process_ratio"] = results["max, one process loop"] / headless
        print_fn(f"the same with the loop in the window's own process (a thread): "
                 f"{results['one_process_ratio']:.2f}")
    return results


#: The window's size in :func:`_history_runs` (a laptop's screen).
BENCH_SIZE = (1366, 768)
#: Windows between two switches of the perturbation while a long history is made.
SWITCH_EVERY = 1500
#: Seconds a window draws in turn with the other in :func:`_history_runs` (and the first
#: fifth of a second of each turn, not counted: its catching up).
SLICE, SETTLE = 1.0, 0.2


def _history_runs(app: Any, source: str, seconds: float, n: int, print_fn: Any
                  ) -> dict[str, float]:
    """Frames at real time: a session with ``n`` windows behind it against a fresh one.

    Whether drawing grows with the history (issue 78: after 6,000 windows the window drew
    at 1-3 frames/s). The long session runs at maximum speed to ``n`` windows first,
    switching the source's first perturbation on or off and its first impulse every
    :data:`SWITCH_EVERY` windows (so its plots hold shaded periods, impulses and alarmed
    windows, as a long session's do), then at real time beside a fresh session's window.
    The two draw in turns of :data:`SLICE` s (the other's timer stopped), ``seconds`` each,
    so a busy machine weighs on both alike: in *Whole history*, then with the long one on
    the latest 60 s. Both at :data:`BENCH_SIZE`; each figure is the GUI timer's frames/s and
    the window thread's CPU time per frame.
    """
    import time

    from idt_desk_widgets.main_window import MainWindow

    from idt_desk.live.plugins import load_source

    perts = load_source(source).perturbations
    state = next((p.name for p in perts if not p.impulse and not p.scheduled), None)
    impulse = next((p.name for p in perts if p.impulse), None)
    out: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="idt-bench-history-"))
    warm = 2.0 if source == "pendulum" else 15.0

    def pump(until: float) -> None:
        while time.monotonic() < until:
            app.processEvents()
            time.sleep(0.001)

    def window(speed: float | None) -> Any:
        win = MainWindow(source=source, speed=speed, record_dir=tmp)
        win.resize(*BENCH_SIZE)
        win.show()
        win.start_session()
        return win

    def turns(wins: dict[str, Any]) -> dict[str, tuple[float, float]]:
        """Each window's frames/s and CPU ms a frame, drawing in turns."""
        counts = {k: _count_frames(w) for k, w in wins.items()}
        spent = {k: [0, 0.0, 0.0] for k in wins}  # frames, seconds, CPU seconds
        for _ in range(max(1, round(seconds / SLICE))):
            for k, w in wins.items():
                for other in wins.values():
                    other.timer.stop()
                w.timer.start()
                pump(time.monotonic() + SETTLE)
                counts[k]["n"] = 0
                t0, cpu0 = time.monotonic(), time.thread_time()
                pump(t0 + SLICE)
                spent[k][0] += counts[k]["n"]
                spent[k][1] += time.monotonic() - t0
                spent[k][2] += time.thread_time() - cpu0
        for w in wins.values():
            w.timer.start()
        return {k: (f / dt, 1000 * cpu / max(f, 1)) for k, (f, dt, cpu) in spent.items()}

    def line(label: str, win: Any, fps: float, ms: float, fresh: float | None = None) -> str:
        rows = win.plots.history
        text = (f"{label:>31}: GUI timer {fps:5.1f} frames/s, {ms:5.1f} ms of the window's "
                f"thread a frame ({rows.total:,} windows, {rows.n:,} rows held)")
        return text if fresh is None else text + f"; against fresh {fps / fresh:.2f}"

    try:
        long = window(None)
        t0, switched, on = time.monotonic(), 0, False
        while (made := long.session.snapshot(limit=1).n_windows) < n:
            if made // SWITCH_EVERY > switched:
                switched = made // SWITCH_EVERY
                if state is not None:
                    on = not on
                    long.session.perturb(state, on=on)
                if impulse is not None:
                    long.session.perturb(impulse)
            pump(time.monotonic() + 0.05)
        print_fn(f"history: {made:,} windows at maximum speed in {time.monotonic() - t0:.1f} s "
                 f"({state or 'no perturbation'} switched and {impulse or 'no impulse'} "
                 f"every {SWITCH_EVERY:,} windows), then at real time beside a fresh "
                 f"session, the two drawing in turns of {SLICE:g} s; {BENCH_SIZE[0]}x"
                 f"{BENCH_SIZE[1]} windows")
        long.session.set_speed(1.0)
        fresh = window(1.0)
        pump(time.monotonic() + warm)
        for view, label in (("all", "whole history"), ("latest", "latest 60 s")):
            nav = long.navigator.mode
            nav.setCurrentIndex(nav.findData(view))
            got = turns({"fresh": fresh, "long": long})
            (f_fps, f_ms), (l_fps, l_ms) = got["fresh"], got["long"]
            print_fn(line("fresh session, whole history", fresh, f_fps, f_ms))
            print_fn(line(f"{n:,} windows, {label}", long, l_fps, l_ms, f_fps))
            out[f"fresh ({view})"], out[f"long ({view})"] = f_fps, l_fps
            out[f"ms fresh ({view})"], out[f"ms long ({view})"] = f_ms, l_ms
        fresh.close()
        long.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["history_ratio"] = min(out[f"long ({v})"] / out[f"fresh ({v})"]
                               for v in ("all", "latest"))
    print_fn(f"frame rate with {n:,} windows / fresh (the lower of the two views): "
             f"{out['history_ratio']:.2f} (target >= 0.8)")
    return out


def _headless_rate(source: str, seconds: float, warm: float, record: Path | None = None
                   ) -> float:
    """The source's loop rate at maximum speed with no window (transitions/s).

    ``record``: the recording's folder (None: not recorded).
    """
    import time

    from idt_desk.live.plugins import load_source
    from idt_desk.live.session import Session, SessionConfig

    session = Session(SessionConfig(source=source, speed=None), source=load_source(source)(),
                      record=record)
    session.start()
    try:
        time.sleep(warm)
        n0, t0 = session.snapshot(limit=1).n_transitions, time.monotonic()
        time.sleep(seconds)
        return (session.snapshot(limit=1).n_transitions - n0) / (time.monotonic() - t0)
    finally:
        session.stop()


def _count_frames(win: Any) -> dict[str, int]:
    """Count the window's frames: its GUI timer's ``refresh`` calls go to ``count["n"]``."""
    count = {"n": 0}
    orig = win.refresh

    def counted() -> None:
        count["n"] += 1
        orig()

    win.timer.timeout.disconnect()
    win.timer.timeout.connect(counted)
    return count


def bench_follow(seconds: float = 20.0, rate: float = 100_000.0, batch: int = 10_000,
                 warmup: float = 3.0, print_fn: Any = print) -> dict[str, float]:
    """Whether the window following a recording keeps up with a fast writer: the figures.

    A writer process (``python -m idt_desk.cli._bench_writer``: ``idt_desk.Recorder``, 2-D
    state, 1-D action, ``batch`` transitions an ``add``, window 300, stride 50) writes as
    fast as it can up to ``rate`` transitions/s; the real window follows it (the replay
    source, ``follow=true``; offscreen when there is no display). After the follower has
    calibrated its baseline and ``warmup`` more seconds, ``seconds`` are measured: the
    writer's rate (from its output), the follower's (the session's transitions), the GUI's
    frames/s (``refresh`` calls, as :func:`bench_gui` counts them) and the lag at the end.
    Then the writer stops and the follower must end with every row it wrote.

    Returns the figures: ``writer_rate``, ``follower_rate``, ``ratio`` (follower / writer),
    ``fps``, ``lag`` (rows), ``lag_s`` (lag / writer rate), ``writer_rows`` and
    ``follower_rows`` (at the end of the measurement), ``final_writer_rows`` and
    ``final_follower_rows`` (after the writer ended), ``caught_up_s`` (from the writer's
    end to the follower's).
    """
    import subprocess
    import tempfile
    import threading
    import time

    if not os.environ.get("DISPLAY") and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from idt_desk_widgets.main_window import MainWindow
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(["idt-desk"])

    def pump(until: Any, limit: float, what: str) -> None:
        """Run the event loop until ``until()`` holds; RuntimeError after ``limit`` s."""
        t_end = time.monotonic() + limit
        while not until():
            if time.monotonic() > t_end:
                raise RuntimeError(f"bench follow: {what} within {limit:g} s")
            app.processEvents()
            time.sleep(0.001)

    batch = max(1, min(batch, int(rate / 10)))  # as the writer cuts it
    with tempfile.TemporaryDirectory(prefix="idt-follow-") as tmp:
        run = Path(tmp) / "run"
        proc = subprocess.Popen(
            [sys.executable, "-m", "idt_desk.cli._bench_writer", str(run), "--rate", f"{rate:g}",
             "--batch", str(batch), "--seconds", "3600", "--stdin"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        written: dict[str, Any] = {"at": time.monotonic(), "n": 0, "done": None}

        def read_writer() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                kind, n, _t = line.split()
                written["at"], written["n"] = time.monotonic(), int(n)
                if kind == "done":
                    written["done"] = int(n)

        reader = threading.Thread(target=read_writer, daemon=True)
        reader.start()
        win = None
        try:
            events = run / "events.jsonl"
            pump(lambda: proc.poll() is not None or (
                events.exists() and b"recording_start" in events.read_bytes()), 60.0,
                "the writer did not start")
            if proc.poll() is not None:
                raise RuntimeError(f"bench follow: the writer exited ({proc.returncode})")
            win = MainWindow(source="replay", settings={"path": str(run), "follow": True,
                                                        "silence": 30.0, "wait": 60.0},
                             speed=None, record_dir=Path(tmp) / "recordings")
            win.resize(1400, 900)
            win.show()
            if not win.start_session():
                raise RuntimeError(f"bench follow: the window did not start: "
                                   f"{win.banner.text()}")
            count = _count_frames(win)
            session = win.session
            assert session is not None
            # Warm-up: kernels load, symbols and the detector calibrate (once, seconds).
            pump(lambda: session.snapshot(1).baseline is not None or not session.running,
                 120.0, "the follower did not calibrate its baseline")
            t_end = time.monotonic() + warmup
            pump(lambda: time.monotonic() > t_end or not session.running, warmup + 1, "")
            if not session.running:
                raise RuntimeError(f"bench follow: the follower stopped: {session.error}")
            count["n"] = 0
            t0, w0, f0 = time.monotonic(), written["n"], session.snapshot(1).n_transitions
            wt0 = written["at"]
            print_fn(f"follow: the writer targets {rate:,.0f} transitions/s ({batch:,} an "
                     f"add, window 300, stride 50); measuring {seconds:g} s from a lag of "
                     f"{w0 - f0:,} rows")
            next_say = t0 + 5.0
            while (now := time.monotonic()) - t0 < seconds:
                app.processEvents()
                time.sleep(0.001)
                if now >= next_say:
                    f = session.snapshot(1).n_transitions
                    print_fn(f"  {now - t0:5.1f} s  writer {written['n']:>12,}  follower "
                             f"{f:>12,}  lag {written['n'] - f:>10,}")
                    next_say += 5.0
            t1 = time.monotonic()
            w1, wt1 = written["n"], written["at"]
            f1 = session.snapshot(1).n_transitions
            fps = count["n"] / (t1 - t0)
            writer_rate = (w1 - w0) / max(wt1 - wt0, 1e-9)
            follower_rate = (f1 - f0) / (t1 - t0)
            # The writer stops (closing the recording); the follower ends with every row.
            assert proc.stdin is not None
            proc.stdin.close()
            pump(lambda: written["done"] is not None or proc.poll() is not None, 60.0,
                 "the writer did not close its recording")
            t_done = time.monotonic()
            pump(lambda: not session.running, 60.0 + (w1 - f1) / max(follower_rate, 1.0),
                 "the follower did not reach the writer's end")
            caught_up = time.monotonic() - t_done
            final_f = session.snapshot(1).n_transitions
            final_w = written["done"] if written["done"] is not None else -1
        finally:
            if proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.close()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if win is not None:
                win.close()
    ratio = follower_rate / writer_rate if writer_rate > 0 else float("nan")
    lag = w1 - f1
    res = {"writer_rate": writer_rate, "follower_rate": follower_rate, "ratio": ratio,
           "fps": fps, "lag": float(lag), "lag_s": lag / writer_rate if writer_rate else 0.0,
           "writer_rows": float(w1), "follower_rows": float(f1),
           "final_writer_rows": float(final_w), "final_follower_rows": float(final_f),
           "caught_up_s": caught_up}
    print_fn(f"{'':>10}  {'transitions/s':>14}  {'rows at the end':>16}")
    print_fn(f"{'writer':>10}  {writer_rate:>14,.0f}  {w1:>16,}")
    print_fn(f"{'follower':>10}  {follower_rate:>14,.0f}  {f1:>16,}")
    print_fn(f"follower / writer: {ratio:.3f}   lag at the end: {lag:,} rows "
             f"({res['lag_s']:.2f} s of writing)")
    print_fn(f"GUI: {fps:.1f} frames/s (target >= 25)")
    print_fn(f"after the writer ended ({final_w:,} rows) the follower had "
             f"{final_f:,} in {caught_up:.1f} s"
             + ("" if final_f == final_w else "  << ROWS MISSING"))
    return res
