"""Tokens per second of the built-in model's llama.cpp build, against another build, in one run.

``idt-desk bench llama`` runs SmolLM2-135M-Instruct in the model's own process (as the
dialogue does) and times a 400-token prompt read from an empty cache and 64 tokens generated
greedily, in interleaved rounds, the best round of each build kept. ``--against DIR`` times a
second llama-cpp-python installed into DIR (``pip install --target DIR``, built with other
``CMAKE_ARGS``) in the same rounds, so the ratio between the two is measured under the same
load. Each build's instruction sets are printed from llama.cpp's own system info.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["HELP", "add_arguments", "bench_llama", "run"]

#: ``idt-desk bench llama``'s one-line help.
HELP = "tokens/s of the built-in model's llama.cpp build (against another build)"

#: The prompt: about 400 tokens of plain English.
TEXT = " ".join(["The immune system has many parts that work together."] * 40)


def bench_llama(against: str | None = None, rounds: int = 3, threads: int = 1,
                generate: int = 64,
                print_fn: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """Best prompt and generation tokens/s of each build (``installed``, ``against``).

    Raises
    ------
    idt_desk_sources.dialogue._backends.BackendError
        A build is missing, or its process failed (a build this CPU cannot run ends with
        its signal, e.g. SIGILL, in one line).

    """
    from pathlib import Path

    from idt_desk_sources.dialogue._backends import (
        BackendError,
        ModelProcess,
        builtin_model_path,
        portable_features,
    )

    builds = {"installed": ModelProcess()}
    if against and not (Path(against) / "llama_cpp").is_dir():
        raise BackendError(f"{against} holds no llama_cpp: install a build there with "
                           "pip install --no-deps --target DIR llama-cpp-python==0.3.36")
    if against:
        builds["against"] = ModelProcess(build=against)
    spec = {"path": str(builtin_model_path()), "n_ctx": 2048, "threads": int(threads),
            "role": "bench"}
    best: dict[str, dict[str, Any]] = {}
    try:
        for proc in builds.values():
            with proc.lock:
                proc.request({"op": "load", "model": spec}, 300)
        for _ in range(rounds):
            for name, proc in builds.items():
                with proc.lock:
                    r = proc.request({"op": "bench", "model": spec, "text": TEXT,
                                      "generate": generate}, 300)
                r["prompt_tps"] = r["prompt_tokens"] / r["prompt_seconds"]
                r["generate_tps"] = r["generated"] / r["generate_seconds"]
                old = best.get(name)
                if old is None or (r["prompt_seconds"] + r["generate_seconds"]
                                   < old["prompt_seconds"] + old["generate_seconds"]):
                    best[name] = r
    finally:
        for proc in builds.values():
            proc.close()
    base = best["installed"]
    print_fn(f"llama.cpp benchmark: SmolLM2-135M-Instruct Q4_1, {threads} thread(s), a "
             f"{base['prompt_tokens']}-token prompt then {generate} tokens (best of {rounds} "
             "interleaved rounds)")
    print_fn(f"{'build':>9} {'prompt tok/s':>13} {'generate tok/s':>15} {'x installed':>12}  "
             "instruction sets")
    for name, r in best.items():
        total = base["prompt_seconds"] + base["generate_seconds"]
        ratio = total / (r["prompt_seconds"] + r["generate_seconds"])
        print_fn(f"{name:>9} {r['prompt_tps']:>13.1f} {r['generate_tps']:>15.1f} "
                 f"{ratio:>12.2f}  {portable_features(r['system_info'])}")
    return best


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``idt-desk bench llama`` options to ``parser`` (and ``func=run``)."""
    parser.add_argument("--against", metavar="DIR",
                        help="another llama-cpp-python build, installed with pip install "
                             "--target DIR, timed in the same rounds")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best kept)")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads (1)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``idt-desk bench llama`` from parsed arguments."""
    from idt_desk_sources.dialogue._backends import BackendError

    from idt_desk.plugin import InputError, check_int

    check_int("--rounds", args.rounds, 1, 100)
    check_int("--threads", args.threads, 1, 64)
    try:
        bench_llama(args.against, args.rounds, args.threads)
    except BackendError as exc:
        raise InputError(str(exc)) from None
    return 0
