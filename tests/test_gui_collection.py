"""The window's garbage collection runs on the GUI thread only (``idt_desk_widgets.memory``).

A collection on a session's worker finalises Qt objects caught in reference cycles from the
wrong thread: a suite run once lost its worker process so, in a window switching to a newly
started run (``test_watch_folder``). Before the change about half of a GUI session's
collections ran on the worker.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest

pytest.importorskip("pytestqt")

from idt_desk_widgets.main_window import MainWindow
from idt_desk_widgets.memory import Collector


def test_a_running_sessions_garbage_is_collected_on_the_gui_thread_only(qtbot):
    threads: list[bool] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            threads.append(threading.current_thread() is threading.main_thread())

    assert gc.isenabled()
    gc.callbacks.append(seen)
    try:
        w = MainWindow(source="pendulum", settings={}, speed=None)
        qtbot.addWidget(w)
        w.show()
        assert w.start_session(), w.banner.text()
        assert not gc.isenabled()  # the window's Collector runs the collections
        worker = w.session
        qtbot.waitUntil(lambda: worker.snapshot(1).n_windows > 200, timeout=30_000)
        # A source's worker that allocates more than the pendulum's (which, warm, may make
        # few lasting objects): a thread holding ever new containers for a moment each.
        done = threading.Event()

        def allocate() -> None:
            while not done.is_set():
                held = [[] for _ in range(5_000)]
                time.sleep(0.005)
                del held

        other = threading.Thread(target=allocate, daemon=True)
        other.start()
        t = time.monotonic()
        try:
            qtbot.waitUntil(lambda: len(threads) >= 30 and time.monotonic() - t > 2,
                            timeout=30_000)
        except qtbot.TimeoutError:
            raise AssertionError(
                f"{len(threads)} collections in 30 s; thresholds {gc.get_threshold()}, counts "
                f"{gc.get_count()}, ticker active {w.collector.ticker.isActive()}") from None
        finally:
            done.set()
            other.join(10)
        assert worker.running
        w.stop_session(wait=True)
        w.close()
    finally:
        gc.callbacks.remove(seen)
    assert all(threads), f"{threads.count(False)} of {len(threads)} collections ran on " \
                         "another thread"
    assert gc.isenabled()  # the window's shutdown gave automatic collection back


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


def test_the_collector_collects_what_pythons_thresholds_say_and_nothing_before(qtbot):
    c = Collector()
    try:
        assert not gc.isenabled()
        gc.collect()
        assert c.collect_due() == -1  # nothing allocated since: nothing due
        node = _Node()
        ref = weakref.ref(node)
        del node
        keep = [[] for _ in range(3 * gc.get_threshold()[0])]  # young objects, over t0
        assert ref() is not None  # no automatic collection freed the cycle
        assert c.collect_due() >= 0
        assert ref() is None  # the young generation's collection did
        assert gc.get_count()[0] < gc.get_threshold()[0]
        del keep
    finally:
        c.stop()
    assert gc.isenabled()


def test_a_collector_dropped_without_stop_gives_automatic_collection_back(qtbot):
    from shiboken6 import delete

    a, b = Collector(), Collector()
    assert not gc.isenabled()
    a.stop()
    assert not gc.isenabled()  # b still runs the collections
    delete(b)  # destroyed without its stop (a window that was never shut down)
    assert gc.isenabled()
