"""Run one heavy call in a child process, so that it never holds the caller's GIL.

A calibrated detector's fit simulates null paths of millions of samples with numpy FFTs that
hold the GIL for a tenth of a second at a time: in a thread beside a paced loop it slows the
loop's thread to half its speed (measured: a pendulum at 4x real time took 14.9 s of wall
time for 7.5 s of loop time). In a child process the loop keeps its speed. The child is a
fresh interpreter (``python -c``), not a multiprocessing fork or spawn: it never imports the
caller's ``__main__`` (a training script without a ``__main__`` guard would run again) and
works inside daemonic pool workers. The call and its result travel as pickles over the
child's pipes. Should the child fail to start or die, the call runs in a thread instead: the
same code, so the same result.
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Offloaded"]


class Offloaded:
    """``fn(*args)`` running in a child process (a thread if that fails); poll, then take it.

    ``fn`` must be a module-level function (the child imports it by name) and its arguments
    and result picklable.
    """

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._fn, self._args = fn, args
        self._result: tuple[str, Any] | None = None
        self._waiter = threading.Thread(target=self._run, name="idt-fit waiter", daemon=True)
        self._waiter.start()

    def _run(self) -> None:
        try:
            self._result = ("ok", self._in_child())
        except _ChildFailed:
            try:  # the same call, here: slower beside a loop, but never lost
                self._result = ("ok", self._fn(*self._args))
            except BaseException as exc:
                self._result = ("error", exc)
        except BaseException as exc:  # the call itself raised, in the child
            self._result = ("error", exc)

    def _in_child(self) -> Any:
        payload = pickle.dumps((self._fn.__module__, self._fn.__qualname__, self._args))
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
        try:
            proc = subprocess.run(
                [sys.executable, "-c", "from idt_desk.detection._offload import child; child()"],
                input=payload, capture_output=True, env=env, check=False)
        except OSError as exc:
            raise _ChildFailed(str(exc)) from None
        try:
            status, value = pickle.loads(proc.stdout)
        except Exception:
            raise _ChildFailed(proc.stderr.decode(errors="replace")[-500:]) from None
        if status == "error":
            raise value
        return value

    def done(self) -> bool:
        """Whether the call has returned (or raised)."""
        return not self._waiter.is_alive()

    def result(self) -> Any:
        """Wait for the call; its value, or its exception raised here."""
        self._waiter.join()
        assert self._result is not None
        status, value = self._result
        if status == "error":
            raise value
        return value


class _ChildFailed(Exception):
    """The child process could not run the call (not the call's own error)."""


def child() -> None:
    """The child's body: read (module, name, args) from stdin, write (status, value) out."""
    module, name, args = pickle.loads(sys.stdin.buffer.read())
    fn: Any = importlib.import_module(module)
    for part in name.split("."):
        fn = getattr(fn, part)
    try:
        out = ("ok", fn(*args))
    except Exception as exc:
        out = ("error", exc)
    sys.stdout.buffer.write(pickle.dumps(out))
    sys.stdout.buffer.flush()
