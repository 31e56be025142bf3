"""The writer of ``idt-desk bench follow``: a loop recording as fast as it can.

``python -m idt_desk.cli._bench_writer PATH [--rate R] [--seconds S] [--batch B] [--stdin]``
writes a recording with :class:`idt_desk.Recorder` (2-D state, 1-D action, window 300,
stride 50) for ``S`` seconds (with ``--stdin``: or until its standard input closes), ``B``
transitions per ``add``, paced to at most ``R`` transitions a second (no other sleep). After
every ``add`` it prints ``written N T`` (N transitions handed to the Recorder, T seconds
since the first); once the recording is closed, ``done N T``. The benchmark reads these
lines for the writer's rate and closes the writer's input to end the run.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import numpy as np

import idt_desk

#: The pipeline the writer runs (and the follower rebuilds from the recording).
PIPE = dict(window=300, stride=50, calibration_windows=20, baseline_windows=200)


def batch(rng: np.random.Generator, i0: int, n: int) -> tuple[np.ndarray, ...]:
    """S, A, S' of ``n`` transitions from transition ``i0`` on (vectorised, no Python loop).

    The state drifts slowly around a circle with noise; S' is the next row's S.
    """
    k = i0 + np.arange(n + 1, dtype=np.float64)
    y = np.column_stack([np.sin(k * 0.05), np.cos(k * 0.05)]) + rng.normal(0, 0.1, (n + 1, 2))
    a = rng.normal(0, 1.0, (n, 1))
    return y[:-1], a, y[1:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m idt_desk.cli._bench_writer")
    p.add_argument("path")
    p.add_argument("--rate", type=float, default=100_000.0,
                   help="most transitions per second (default 100,000)")
    p.add_argument("--seconds", type=float, default=25.0, help="how long to write")
    p.add_argument("--batch", type=int, default=10_000, help="transitions per add")
    p.add_argument("--stdin", action="store_true",
                   help="also stop (closing the recording) when standard input closes")
    args = p.parse_args(argv)
    stop = threading.Event()
    if args.stdin:
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    # Never more than a tenth of a second's worth per add: a low rate stays smooth.
    size = max(1, min(args.batch, int(args.rate / 10) or 1))
    rng = np.random.default_rng(0)
    n = 0
    # No rate, as Recorder's default: the loop's time is its step count and the budget is
    # 1 false alarm in 1000 windows.
    with idt_desk.Recorder(args.path, ["x", "v"], ["u"], chunk=size, flush_seconds=0.1,
                           **PIPE) as rec:
        rec.flush()  # recording_start reaches the file: a follower can begin
        t0 = time.monotonic()
        pace_t, pace_n = t0, 0  # pacing counts from here
        while (now := time.monotonic()) - t0 < args.seconds and not stop.is_set():
            ahead = (n - pace_n) / args.rate - (now - pace_t)
            if ahead > 0:
                time.sleep(ahead)
            elif ahead < -0.5:  # fell behind (a one-off stall): no burst to catch up
                pace_t, pace_n = now, n
            s, a, s2 = batch(rng, n, size)
            rec.add(s, a, s2)
            n += size
            print(f"written {n} {time.monotonic() - t0:.4f}", flush=True)
    print(f"done {n} {time.monotonic() - t0:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
