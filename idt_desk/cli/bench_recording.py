"""``idt-desk bench recording``: the transitions log against the CSV writer, one run, ratios.

For each source (the pendulum, the shipped RL agent) the same session runs at maximum speed
unrecorded, recording the transitions log (format 2) and recording the CSV table (format 1,
the writer before it), in interleaved rounds; then each recording is loaded and replayed.
Printed: bytes per transition of the whole run folder, wall time against the unrecorded run,
and load and replay time, each with its ratio to the CSV writer's in the same run; and what
the blocks' checksums cost: the log written without them (``arrows.SEAL`` off) in the same
rounds.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["bench_recording"]

#: (source, seconds of loop time) each benchmark round runs.
CASES = (("pendulum", 600.0), ("gym", 300.0))


def _session_wall(source: str, seconds: float, record: Path | None) -> tuple[float, int]:
    """Wall seconds of ``seconds`` of ``source``'s loop at maximum speed, and transitions."""
    from idt_desk.live.session import Session, SessionConfig, run_headless

    session = Session(SessionConfig(source=source, speed=None), record=record)
    steps = round(seconds * session.source.rate)
    t0 = time.perf_counter()
    snap = run_headless(session, steps=steps)
    return time.perf_counter() - t0, snap.n_transitions


def _replay_wall(path: Path) -> float:
    """Wall seconds to replay a recording at maximum speed (load included)."""
    from idt_desk.live.session import Session, SessionConfig, run_headless

    t0 = time.perf_counter()
    session = Session(SessionConfig(source="replay", settings={"path": str(path)},
                                    speed=None))
    run_headless(session)
    return time.perf_counter() - t0


def bench_recording(cases: tuple[tuple[str, float], ...] = CASES, rounds: int = 3,
                    print_fn: Callable[[str], None] = print) -> dict[str, dict[str, float]]:
    """Bytes, recording cost, load and replay of the log against the CSV writer (medians)."""
    from idt_desk.recordings import arrows, load_recording, recording_size, writer

    print_fn(f"recording benchmark: each case at maximum speed, unrecorded, recording the "
             f"transitions log and recording the CSV table; median of {rounds} interleaved "
             "rounds")
    out: dict[str, dict[str, float]] = {}
    for source, seconds in cases:
        _session_wall(source, min(seconds, 20.0), None)  # warm-up: kernels, imports, policy
        walls: dict[str, list[float]] = {"plain": [], "arrows": [], "unsealed": [], "csv": []}
        sizes: dict[str, list[float]] = {"arrows": [], "csv": []}
        loads: dict[str, list[float]] = {"arrows": [], "csv": []}
        replays: dict[str, list[float]] = {"arrows": [], "csv": []}
        with tempfile.TemporaryDirectory(prefix="idt-bench-rec-") as tmp:
            for r in range(rounds):
                for mode in ("plain", "arrows", "unsealed", "csv"):
                    path = None if mode == "plain" else Path(tmp) / f"{mode}{r}"
                    writer.TRANSITIONS_LAYOUT = "csv" if mode == "csv" else "arrows"
                    arrows.SEAL = mode != "unsealed"
                    try:
                        wall, n = _session_wall(source, seconds, path)
                    finally:
                        writer.TRANSITIONS_LAYOUT = "arrows"
                        arrows.SEAL = True
                    walls[mode].append(wall)
                    if path is None or mode == "unsealed":
                        continue
                    sizes[mode].append(recording_size(path)[0] / n)
                    t0 = time.perf_counter()
                    rec = load_recording(path)
                    loads[mode].append(time.perf_counter() - t0)
                    if not rec.complete or len(rec.transitions) != n:
                        raise RuntimeError(f"{path}: {rec.warnings}")
                    replays[mode].append(_replay_wall(path))
        med = {k: statistics.median(v) for k, v in walls.items()}
        row = {"transitions": float(n), "plain_s": med["plain"],
               **{f"{m}_{what}": statistics.median(d[m]) for m in ("arrows", "csv")
                  for what, d in (("bytes", sizes), ("load_s", loads),
                                  ("replay_s", replays))},
               "arrows_cost": med["arrows"] / med["plain"],
               "unsealed_cost": med["unsealed"] / med["plain"],
               "csv_cost": med["csv"] / med["plain"]}
        out[source] = row
        print_fn(f"\n{source}: {seconds:g} s of loop time, {n:,} transitions")
        print_fn(f"{'':24}{'log (arrows)':>14}{'CSV (before)':>14}{'log / CSV':>11}")
        print_fn(f"{'bytes per transition':24}{row['arrows_bytes']:>14,.1f}"
                 f"{row['csv_bytes']:>14,.1f}{row['arrows_bytes'] / row['csv_bytes']:>11.3f}")
        print_fn(f"{'wall vs unrecorded':24}{row['arrows_cost']:>13.3f}x{row['csv_cost']:>13.3f}x"
                 f"{row['arrows_cost'] / row['csv_cost']:>11.3f}")
        print_fn(f"{'load (s)':24}{row['arrows_load_s']:>14.3f}{row['csv_load_s']:>14.3f}"
                 f"{row['arrows_load_s'] / row['csv_load_s']:>11.3f}")
        print_fn(f"{'replay (s)':24}{row['arrows_replay_s']:>14.3f}"
                 f"{row['csv_replay_s']:>14.3f}"
                 f"{row['arrows_replay_s'] / row['csv_replay_s']:>11.3f}")
        print_fn(f"(unrecorded: {med['plain']:.2f} s wall, median)")
        print_fn(f"checksums: recording with them {row['arrows_cost']:.3f}x the unrecorded "
                 f"wall, without them {row['unsealed_cost']:.3f}x: they cost "
                 f"{row['arrows_cost'] / row['unsealed_cost'] - 1:+.1%} of the recording's time")
    return out
