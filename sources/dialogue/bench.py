"""What the IDT costs a dialogue against the embedding baselines, measured in one run.

``idt-desk bench dialogue`` replays the turns of a dialogue recording (by default the shipped
100-turn SmolLM2 dialogue) one turn at a time, as a live session meets them, through

- **IDT**: the per-turn token metrics (:class:`idt_desk.metrics.tokens.DialogueMetrics`): the
  SentencePiece tokenizer on the turn's prompt, reply and next prompt, the counts of the
  accumulated context, the entropies and P, H_f, H_b, ΔH;
- **embeddings**: the structural baselines
  (:class:`idt_desk.metrics.embeddings.StructuralBaselines`): all-MiniLM-L6-v2 on the
  turn's prompt and reply, three cosines (paper §11.5);
- optionally **judge**: one LLM-judge call a turn with a configured backend (the source's
  judge), for the paper's third kind of evaluator.

Each is timed per turn over the same turns, in rounds, interleaved, the best round kept; the
model loads are timed apart. Ratios are what the bench reports.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from idt_desk.plugin import assets

__all__ = ["HELP", "SHIPPED", "add_arguments", "bench_dialogue", "run"]

#: ``idt-desk bench dialogue``'s one-line help.
HELP = "per-turn cost of the IDT's token metrics vs the embedding baselines (and a judge)"

#: The shipped dialogue recording the bench replays by default.
SHIPPED = assets.path("recordings", "dialogue-smollm2-contradictions")


Push = Callable[[list[dict[str, Any]]], object]


def _per_turn(make: Callable[[], Push], turns: Sequence[dict[str, Any]]) -> list[float]:
    """Seconds of each turn through a fresh instance (a dialogue from its start)."""
    push = make()
    out = []
    for turn in turns:
        t0 = time.perf_counter()
        push([turn])
        out.append(time.perf_counter() - t0)
    return out


def bench_dialogue(recording: Path = SHIPPED, turns: int = 100, rounds: int = 3,
                   judge: str = "off", judge_model: str = "llama3.1:8b", host: str = "",
                   print_fn: Callable[[str], None] = print) -> dict[str, Any]:
    """Median seconds per turn of each evaluator, its load time, and the ratios.

    Raises
    ------
    ValueError
        The embeddings extra is missing, or the recording has no turns.

    """
    from idt_desk.plugin import (
        TOKENIZER,
        DialogueMetrics,
        embeddings,
        load_recording,
        load_tokenizer,
    )

    rec = load_recording(recording)
    dialogue = [t for t in rec.turns if not t.get("history")][:turns]
    if not dialogue:
        raise ValueError(f"{recording}: no dialogue turns to replay")
    if not embeddings.available():
        raise ValueError(embeddings.MISSING)
    load: dict[str, float] = {}
    t0 = time.perf_counter()
    tok = load_tokenizer(TOKENIZER)
    load["IDT"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    emb = embeddings.load_embedder()
    load["embeddings"] = time.perf_counter() - t0
    runs: dict[str, Callable[[], Push]] = {
        "IDT": lambda: DialogueMetrics(tok).push,
        "embeddings": lambda: embeddings.StructuralBaselines(emb).push,
    }
    if judge != "off":
        from idt_desk_sources.dialogue import DialogueSource

        src = DialogueSource(judge=judge, judge_model=judge_model, judge_host=host)
        t0 = time.perf_counter()
        src.judge(1, dialogue[0]["prompt"], dialogue[0]["reply"])  # loads the model
        load["judge"] = time.perf_counter() - t0
        runs["judge"] = lambda: lambda ts: src.judge(int(ts[0]["turn"]), ts[0]["prompt"],
                                                      ts[0]["reply"])
    best: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, make in runs.items():
            # The judge is slow and steady: one round of it is enough.
            if name == "judge" and name in best:
                continue
            times = _per_turn(make, dialogue)
            if name not in best or sum(times) < sum(best[name]):
                best[name] = times
    med = {k: statistics.median(v) for k, v in best.items()}
    print_fn(f"dialogue benchmark: {len(dialogue)} turns of {recording.name}, one turn at a "
             f"time (best of {rounds} rounds; the judge: one round)")
    print_fn(f"{'evaluator':>11} {'median ms/turn':>15} {'p90 ms/turn':>12} "
             f"{'load (s)':>9} {'x IDT':>8}")
    for name, v in best.items():
        p90 = sorted(v)[int(0.9 * (len(v) - 1))]
        print_fn(f"{name:>11} {1e3 * med[name]:>15.2f} {1e3 * p90:>12.2f} "
                 f"{load[name]:>9.2f} {med[name] / med['IDT']:>8.1f}")
    return {"turns": len(dialogue), "median_seconds": med, "load_seconds": load,
            "ratio": {k: med[k] / med["IDT"] for k in med}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``idt-desk bench dialogue`` options to ``parser`` (and ``func=run``)."""
    parser.add_argument("--recording", type=Path, default=SHIPPED,
                        help="a dialogue recording (default: the shipped SmolLM2 dialogue)")
    parser.add_argument("--turns", type=int, default=100, help="turns replayed (100)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best kept)")
    parser.add_argument("--judge", choices=("off", "ollama", "builtin"), default="off",
                        help="also time an LLM judge with this backend (off)")
    parser.add_argument("--judge-model", default="llama3.1:8b", help="the judge's Ollama model")
    parser.add_argument("--host", default="", help="the judge's Ollama host")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``idt-desk bench dialogue`` from parsed arguments."""
    from idt_desk.plugin import InputError, check_int

    check_int("--turns", args.turns, 1, 100_000)
    check_int("--rounds", args.rounds, 1, 100)
    try:
        bench_dialogue(args.recording, args.turns, args.rounds, args.judge, args.judge_model,
                       args.host)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return 0
