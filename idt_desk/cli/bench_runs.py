"""``idt-desk bench runs``: listing and refreshing many runs vs reading every events.jsonl whole.

Builds N ended runs (copies of one real recording with a few hundred events; 3 more are left
open and beating) in a temporary folder, then times, in the same process: a cold
:class:`~idt_desk.recordings.runs.RunIndex` listing, a warm refresh (what a fleet view does
every few seconds), and the baseline a listing without status files would need: every run's
``events.jsonl`` read and parsed whole. Ratios are against that baseline, measured in the same
run. ``--ssh URL_PREFIX`` (``ssh://host``: the temporary folder's path is appended) times the
same over SFTP.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = ["bench_runs", "fleets"]


def _template(path: Path) -> None:
    from idt_desk.recordings import RecordingWriter

    rec = RecordingWriter(path, {"session": {}}, ["x"], ["u"], ["start", "end", "P"])
    z = np.zeros((1000, 1))
    rec.add_event({"kind": "session_start", "i": 0, "t": 0.0, "wall": time.time(),
                   "pipeline": {"calibration_windows": 20, "baseline_windows": 800}})
    rec.add_transitions(0, None, z, z, z, None, None)
    for j in range(300):  # a long run's episode ends and notes
        rec.add_event({"kind": "episode_end", "i": j, "t": float(j), "wall": time.time()})
    rec.close()


def fleets(counts: tuple[int, ...], ssh: str | None = None
           ) -> Iterator[tuple[int, str, str, Path]]:
    """(count, where, location, folder) of each fleet the benchmarks time.

    ``count`` ended runs in 10 sweeps and 3 more open and beating, in a temporary folder, read
    locally, then over ``ssh``. The folder and its open runs last while its entries are used.
    """
    from idt_desk.recordings import RecordingWriter

    for n in counts:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "runs"
            _template(Path(tmp) / "template")
            for j in range(n):
                shutil.copytree(Path(tmp) / "template", root / f"sweep{j % 10}" / f"r{j:05d}")
            live = [RecordingWriter(root / "live" / f"r{j}", {"session": {}}, ["x"], ["u"],
                             ["start", "end"]) for j in range(3)]
            try:
                for where in ("local", *(["ssh"] if ssh else [])):
                    yield n, where, str(root) if where == "local" else f"{ssh}{root}", root
            finally:
                for rec in live:
                    rec.close()


def _whole(root: Path) -> int:
    """The baseline: every run's events.jsonl read and parsed whole."""
    n = 0
    for ev in root.rglob("events.jsonl"):
        n += sum(1 for line in ev.read_bytes().splitlines() if json.loads(line))
    return n


def bench_runs(counts: tuple[int, ...] = (10, 100, 1000), ssh: str | None = None) -> None:
    """Print, for each count, cold list / warm refresh / whole-events times and ratios."""
    from idt_desk.recordings.runs import RunIndex

    print(f"{'runs':>6} {'where':>6} {'cold list s':>12} {'refresh s':>10} "
          f"{'opened':>7} {'events whole s':>15} {'whole/cold':>11} {'whole/refresh':>14}")
    for n, where, location, root in fleets(counts, ssh):
        t0 = time.perf_counter()
        index = RunIndex(location)
        index.refresh()
        cold = time.perf_counter() - t0
        time.sleep(1.1)  # the open writers beat once
        t0 = time.perf_counter()
        index.refresh()
        warm = time.perf_counter() - t0
        index.close()
        t0 = time.perf_counter()
        _whole(root)
        whole = time.perf_counter() - t0
        print(f"{n + 3:>6} {where:>6} {cold:>12.3f} {warm:>10.3f} "
              f"{index.opened:>7} {whole:>15.3f} {whole / cold:>11.2f} "
              f"{whole / warm:>14.1f}", flush=True)
