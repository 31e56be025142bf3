"""Speed benchmarks with same-run baselines (``idt-desk bench ...``).

Each benchmark measures a plain baseline in the same process, right next to the fast path,
and prints the ratio: the machines these run on are noisy, ratios travel better than
absolute rates.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from idt_desk.metrics.engine import sliding_metrics
from idt_desk.metrics.reference import reference_metrics

__all__ = ["bench_engine"]


def _best_of(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_engine(
    n: int = 1_000_000,
    window: int = 300,
    strides: tuple[int, ...] = (1, 50),
    ref_windows: int = 200,
    repeats: int = 3,
    seed: int = 0,
    print_fn: Callable[[str], None] = print,
) -> list[dict[str, float]]:
    """Transitions per second of the engine vs the np.unique recount, same run.

    The stream has HalfCheetah-sized alphabets (S, S' from 3**17 symbols, A from 3**6) drawn
    at random, so nearly every (S, A, S') is unique: the hash tables see the most inserts and
    deletions, the worst case for the engine. Symbol hashing is inside the timed region.
    """
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 3**17, n)
    a = rng.integers(0, 3**6, n)
    s_next = rng.integers(0, 3**17, n)
    sliding_metrics(s[:1000], s_next[:1000], a[:1000], window, 1)  # JIT / cache load
    rows = []
    print_fn(
        f"engine benchmark: W={window}, {n:,} transitions, alphabets |S|=|S'|=3^17, |A|=3^6 "
        f"(best of {repeats})"
    )
    print_fn(f"{'stride':>6} {'engine (tr/s)':>15} {'numpy ref (tr/s)':>17} {'ratio':>9}")
    for stride in strides:
        t_eng = _best_of(lambda st=stride: sliding_metrics(s, s_next, a, window, st), repeats)
        m = window + (ref_windows - 1) * stride
        t_ref = _best_of(
            lambda st=stride, m=m: reference_metrics(s[:m], s_next[:m], a[:m], window, st),
            max(1, repeats - 1),
        )
        eng_rate = n / t_eng
        # The recount advances `stride` transitions per window it computes.
        ref_rate = ref_windows * stride / t_ref
        rows.append({"stride": stride, "engine": eng_rate, "reference": ref_rate,
                     "ratio": eng_rate / ref_rate})
        print_fn(f"{stride:>6} {eng_rate:>15,.0f} {ref_rate:>17,.0f} {eng_rate / ref_rate:>8,.0f}x")
    return rows


def bench_memory(
    seconds: float = 1800.0,
    source: str = "pendulum",
    samples: int = 10,
    print_fn: Callable[[str], None] = print,
) -> list[tuple[float, int, float]]:
    """Resident memory over a long headless session at maximum speed.

    Prints (wall seconds, transitions, RSS MiB) at ``samples`` points and the ratio of the
    last RSS to the first one taken after warm-up (flat memory: about 1.0).
    """
    import psutil

    from idt_desk.live.session import Session, SessionConfig

    proc = psutil.Process()
    session = Session(SessionConfig(source=source, speed=None))
    session.start()
    rows = []
    t0 = time.monotonic()
    print_fn(f"memory benchmark: {source} at maximum speed for {seconds:g} s, no recording")
    print_fn(f"{'wall (s)':>9} {'transitions':>14} {'windows':>10} {'RSS (MiB)':>10}")
    try:
        for k in range(samples + 1):
            target = t0 + seconds * k / samples
            while time.monotonic() < target and session.running:
                time.sleep(min(1.0, max(0.0, target - time.monotonic())))
            snap = session.snapshot(limit=1)
            rss = proc.memory_info().rss / 2**20
            rows.append((time.monotonic() - t0, snap.n_transitions, rss))
            print_fn(f"{rows[-1][0]:>9.0f} {snap.n_transitions:>14,} {snap.n_windows:>10,} "
                     f"{rss:>10.1f}")
    finally:
        session.stop()
    first = rows[1][2] if len(rows) > 1 else rows[0][2]
    print_fn(f"RSS after warm-up {first:.1f} MiB, at the end {rows[-1][2]:.1f} MiB: "
             f"ratio {rows[-1][2] / first:.3f}")
    return rows
