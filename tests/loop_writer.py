"""A stand-in for someone else's loop: writes a recording with idt_desk.Recorder, in chunks.

``python -m tests.loop_writer PATH N CHUNK DELAY [HOLD]``: N transitions of a seeded 2-D
system pushed by a 1-D action, CHUNK at a time with DELAY seconds between chunks, the loop's
own perturbation marked at N // 2. With HOLD (a file's path), the writer waits before its last
chunk for as long as that file exists: a test decides when the writer ends, not the machine's
load. Used by the follower tests as a separate process.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import idt_desk

#: The pipeline the writer runs (and a follower must reproduce).
PIPE = dict(window=100, stride=20, calibration_windows=20, baseline_windows=100)


def stream(n: int, seed: int = 3) -> tuple[np.ndarray, ...]:
    """S, A, S' and reward of the seeded loop (noise twentyfold from n // 2 on)."""
    rng = np.random.default_rng(seed)
    y = np.zeros((n + 1, 2))
    a = np.zeros((n, 1))
    for k in range(n):
        a[k, 0] = np.tanh(-y[k, 0] - 0.5 * y[k, 1]) + rng.normal(0, 0.3)
        noise = 0.05 if k < n // 2 else 1.0
        y[k + 1] = y[k] + 0.1 * np.array([y[k, 1], a[k, 0]]) + rng.normal(0, noise, 2)
    return y[:-1], a, y[1:], -np.abs(y[1:, 0])


def main(path: str, n: int, chunk: int, delay: float, hold: str | None = None) -> None:
    s, a, s2, r = stream(n)
    with idt_desk.Recorder(path, ["x", "v"], ["u"], rate=100.0, reward=True,
                           flush_seconds=0.1, **PIPE) as rec:
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            while hold is not None and hi == n and os.path.exists(hold):
                time.sleep(0.02)
            if lo <= n // 2 < hi:
                rec.add(s[lo:n // 2], a[lo:n // 2], s2[lo:n // 2], reward=r[lo:n // 2])
                rec.perturb("noise", sigma=1.0)
                lo = n // 2
            rec.add(s[lo:hi], a[lo:hi], s2[lo:hi], reward=r[lo:hi])
            rec.flush()
            time.sleep(delay)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]),
         *sys.argv[5:6])
