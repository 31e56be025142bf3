"""Per-turn token metrics of a dialogue: the second metric path.

See the paper's §11.3 and the README's section "The per-turn metrics".

A dialogue's loop is one transition per turn (paper §11.2):

- S  = the accumulated context the student answers: the texts of the earlier turns it still
  sees (teacher prompt and student reply of each, from ``context_start`` on) and this turn's
  teacher prompt;
- A  = the student's reply of this turn;
- S' = the teacher's next prompt.

Each text becomes subword tokens (a SentencePiece model, :func:`load_tokenizer`) and then a
token-frequency distribution. The reading of the paper's formulas used here:

- H(X) is the plug-in entropy, in bits, of X's token counts;
- a joint such as H(S, A) is the entropy of the token counts of S and A *pooled*
  (concatenated), and H(S, A, S') that of all three pooled;
- with those, the window formulas apply unchanged: MI = H(S,A) + H(S') − H(S,A,S'),
  P = MI / (H(S) + H(A) + H(S')), H_f = H(S,A,S') − H(S,A), H_b = H(S,A,S') − H(S'),
  ΔH = H_f − H_b = H(S') − H(S,A).

Two consequences a reader should know. Pooling is not a joint distribution: MI is the
Jensen–Shannon-like gain of keeping S' apart from (S, A), so it is largest when S' uses
tokens that S and A do not (a prompt on a new topic) and smallest when the three texts share
their vocabulary; and MI (hence P) can be negative, e.g. when every text is one repeated
token. And S grows each turn, so H(S) and H(S,A) rise slowly over a dialogue while A and S'
stay short; the baseline (turns 1–30) absorbs the slow trend only so far.

The choice/effect conditions are read the same way: H(A|S) = H(S,A) − H(S) and
MI(A;S'|S) = H(S,A) + H(S,S') − H(S,A,S') − H(S).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["TOKENIZER", "DialogueMetrics", "Tokenizer", "load_tokenizer", "pooled_metrics"]

#: The tokenizer a dialogue session uses unless told otherwise: Mistral's 32,000-piece
#: SentencePiece model (v1), shipped inside the ``mistral-common`` package. It is the same
#: kind (SentencePiece BPE with byte fallback) and size as the Llama-2 tokenizer the paper
#: used, and it is on disk with no download.
TOKENIZER = "mistral-common:tokenizer.model.v1"


class Tokenizer:
    """A SentencePiece model loaded from a file: text -> token ids (np.int32)."""

    def __init__(self, name: str, path: Path) -> None:
        import sentencepiece as spm

        self.name = name
        self.path = Path(path)
        self._sp = spm.SentencePieceProcessor(model_file=str(self.path))
        self.vocab = int(self._sp.get_piece_size())
        self.sha256 = hashlib.sha256(self.path.read_bytes()).hexdigest()

    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` (no BOS/EOS)."""
        return np.asarray(self._sp.encode(text), dtype=np.int32)

    def describe(self) -> dict[str, Any]:
        """What a recording keeps about the tokenizer."""
        return {"name": self.name, "kind": "sentencepiece", "vocab": self.vocab,
                "file": self.path.name, "sha256": self.sha256}


_LOADED: dict[str, Tokenizer] = {}


def load_tokenizer(name: str = TOKENIZER) -> Tokenizer:
    """The tokenizer called ``name``: ``mistral-common:FILE`` or a path to a ``.model`` file."""
    if name in _LOADED:
        return _LOADED[name]
    if name.startswith("mistral-common:"):
        spec = importlib.util.find_spec("mistral_common")
        if spec is None or spec.origin is None:
            raise ValueError(f"tokenizer {name}: the package mistral-common is not installed "
                             "(pip install mistral-common)")
        path = Path(spec.origin).parent / "data" / name.split(":", 1)[1]
    else:
        path = Path(name)
    if not path.is_file():
        raise ValueError(f"tokenizer {name}: no SentencePiece model at {path}")
    _LOADED[name] = tok = Tokenizer(name, path)
    return tok


def _entropy(counts: np.ndarray) -> float:
    """Plug-in entropy (bits) of a vector of counts; 0 for an empty text."""
    nz = counts[counts > 0].astype(np.float64)
    n = nz.sum()
    if n == 0:
        return 0.0
    return float(math.log2(n) - (nz * np.log2(nz)).sum() / n)


def pooled_metrics(s: np.ndarray, a: np.ndarray, s_next: np.ndarray, vocab: int
                   ) -> dict[str, float]:
    """The per-turn metrics of token-id arrays S, A and S' (module docstring).

    Returns the columns a metric window has (``idt_desk.session.WINDOW_COLUMNS``) that token
    counts define. ``unique_frac`` is the share of distinct tokens in the pooled text (how far
    from saturation the plug-in estimates are, as for a window of symbols).
    """
    cs = np.bincount(s, minlength=vocab)
    ca = np.bincount(a, minlength=vocab)
    cn = np.bincount(s_next, minlength=vocab)
    h_s, h_a, h_n = _entropy(cs), _entropy(ca), _entropy(cn)
    sa = cs + ca
    h_sa = _entropy(sa)
    h_sn = _entropy(cs + cn)
    pooled = sa + cn
    h_san = _entropy(pooled)
    mi = h_sa + h_n - h_san
    denom = h_s + h_a + h_n
    n_tokens = int(pooled.sum())
    k = int(np.count_nonzero(pooled))
    return {
        "P": mi / denom if denom > 0 else math.nan,
        "H_f": h_san - h_sa, "H_b": h_san - h_n, "dH": h_n - h_sa, "MI": mi,
        "H_S": h_s, "H_A": h_a, "H_S_next": h_n, "H_SA": h_sa, "H_SAS": h_san,
        "H_A_given_S": h_sa - h_s, "MI_A_S_next_given_S": h_sa + h_sn - h_san - h_s,
        "K_SAS": float(k), "unique_frac": k / n_tokens if n_tokens else math.nan,
    }


class DialogueMetrics:
    """Turns in, one metric row per turn out; keeps the dialogue's tokenised history.

    A turn is a mapping with ``turn`` (1, 2, ...), ``prompt`` (the teacher prompt the student
    answered), ``reply``, ``next_prompt`` and ``context_start`` (the first earlier turn whose
    prompt and reply are still in S: 1 for the whole dialogue, later under context gating).
    Earlier turns are looked up in the history, so a turn only needs its own texts.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._history: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def remember(self, turn: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """Tokenise a turn's prompt and reply into the history (idempotent)."""
        t = int(turn["turn"])
        if t not in self._history:
            enc = self.tokenizer.encode
            self._history[t] = (enc(str(turn["prompt"])), enc(str(turn["reply"])))
        return self._history[t]

    def context_ids(self, turn: Mapping[str, Any]) -> np.ndarray:
        """Token ids of S for ``turn``: the gated earlier turns and this turn's prompt."""
        t = int(turn["turn"])
        prompt, _ = self.remember(turn)
        parts: list[np.ndarray] = []
        for j in range(int(turn.get("context_start", 1)), t):
            if j not in self._history:
                raise ValueError(f"turn {t}: its context starts at turn "
                                 f"{turn.get('context_start')}, but turn {j} is unknown")
            parts.extend(self._history[j])
        parts.append(prompt)
        return np.concatenate(parts)

    def push(self, turns: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
        """Metric columns of each turn (history-only turns, ``history: true``, give none)."""
        rows = []
        for turn in turns:
            self.remember(turn)
            if turn.get("history"):
                continue
            s = self.context_ids(turn)
            a = self._history[int(turn["turn"])][1]
            n = self.tokenizer.encode(str(turn["next_prompt"]))
            rows.append(pooled_metrics(s, a, n, self.tokenizer.vocab))
        keys = rows[0].keys() if rows else ()
        return {k: np.array([r[k] for r in rows], dtype=np.float64) for k in keys}

    def history_turns(self) -> list[int]:
        """Turn numbers held in the history."""
        return sorted(self._history)
