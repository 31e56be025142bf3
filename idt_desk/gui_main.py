"""Entry point of the desktop GUI: the one module of ``idt_desk`` that may import Qt.

It is imported only by ``idt-desk gui`` (and plain ``idt-desk``), never by the core.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["bench_gui", "bench_storm", "run_gui"]


def run_gui(
    source: str = "pendulum",
    settings: dict[str, Any] | None = None,
    start: bool = False,
    speed: float | None = 1.0,
    screenshot: Path | None = None,
    quit_after: float | None = None,
    record: Path | None = None,
    schedule: list[tuple[int, str, dict]] | None = None,
    size: tuple[int, int] | None = None,
) -> int:
    """Open the main window; optionally start, screenshot after ``quit_after`` s, and quit."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from widgets.main_window import MainWindow

    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY") and \
            not os.environ.get("QT_QPA_PLATFORM") and sys.platform.startswith("linux"):
        print("idt-desk: no display found. Run under a desktop session, or with "
              "`xvfb-run -a idt-desk ...`, or headless with `idt-desk run`.", file=sys.stderr)
        return 2
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "idt-desk"])
    app.setApplicationName("IDT Desk")
    win = MainWindow(source=source, settings=settings or {}, speed=speed, record_dir=record)
    app.aboutToQuit.connect(win.shutdown)
    if size is not None:
        win.resize(*size)
    win.show()
    if record is not None:
        win.record_button.setChecked(True)
    if start:
        win.start_session(schedule=schedule)
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
              + (f"; the recording in {win.last_recording} is complete"
                 if win.last_recording is not None else ""), file=sys.stderr)
        return 128 + int(received[0])
    return int(rc)


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
    from PySide6.QtWidgets import QApplication

    from widgets.main_window import MainWindow
    from widgets.storm import ClickStorm, print_report

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


def bench_gui(seconds: float = 10.0, print_fn: Any = print, source: str = "pendulum"
              ) -> dict[str, float]:
    """Frames per second of the GUI timer, a source at maximum speed vs at real time.

    The real window and its 30 Hz QTimer run for ``seconds`` each way; every timer tick
    pulls a snapshot and repaints. Offscreen when there is no display.
    """
    import time

    if not os.environ.get("DISPLAY") and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtWidgets import QApplication

    from widgets.main_window import MainWindow

    app = QApplication.instance() or QApplication(["idt-desk"])
    results: dict[str, float] = {}
    for label, speed in (("real time (1x)", 1.0), ("maximum speed", None)):
        win = MainWindow(source=source, speed=speed)
        win.show()
        win.start_session()
        count = {"n": 0}
        orig = win.refresh

        def counted(orig: Any = orig, count: dict = count) -> None:
            count["n"] += 1
            orig()

        win.timer.timeout.disconnect()
        win.timer.timeout.connect(counted)
        t_end = time.monotonic() + 2.0  # warm-up: JIT, calibration, first paints
        while time.monotonic() < t_end:
            app.processEvents()
            time.sleep(0.001)
        count["n"] = 0
        n0 = win.session.snapshot(limit=1).n_transitions
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            app.processEvents()
            time.sleep(0.001)
        dt = time.monotonic() - t0
        fps = count["n"] / dt
        rate = (win.session.snapshot(limit=1).n_transitions - n0) / dt
        win.close()
        results[label] = fps
        print_fn(f"{label:>16}: GUI timer {fps:5.1f} frames/s (target >= 25), {source} "
                 f"{rate:,.0f} transitions/s")
    ratio = results["maximum speed"] / results["real time (1x)"]
    print_fn(f"frame rate at maximum speed / at real time: {ratio:.2f}")
    results["ratio"] = ratio
    return results
