"""Per-turn token metrics of a dialogue: the second metric path.

See the paper's §11.3 and assets/docs/dialogue.md, "The per-turn metrics".

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

Length, and the length-adjusted metrics
---------------------------------------
Plug-in entropies of short texts grow with their length, and with pooled counts MI is close
to H(S') when S' is short beside S: over the 100 turns of a built-in dialogue P correlates
with the log token count of S' at about 0.9. A prompt that is only longer than usual raises
P; one only shorter lowers it. Every turn's row therefore carries the token counts ``n_S``,
``n_A`` and ``n_S_next``, and for each metric M of P, H_f, H_b and ΔH a *length-adjusted*
M_adj (:class:`LengthNull`): M less its mean over length-matched surrogates,

    M_adj(t) = M(S_t, A_t, S'_t) − mean_j M(S_t, A_t, R_j),

where each R_j is ordinary teacher text of exactly S'_t's token count: the S' of the
dialogue's baseline turns, concatenated from the j-th on (in turn order, wrapping round) and
cut to n_S' tokens. The null is "an ordinary prompt of this length, in this very context".

- It controls for the length of S', without a model of how M depends on length: no fit, so
  nothing to extrapolate when an injection is longer or shorter than any baseline prompt.
- S and A are the same in the real and the surrogate terms, so their lengths, their content
  and the slow growth of the context cancel. M_adj therefore reads S' only: how unusual the
  teacher's prompt is for its length, given the context and the reply. A change in the
  student's reply (the turn after an injection) shows in the raw metrics, not in M_adj.
- It does not control for anything but length: vocabulary, topic and repetition of S'
  against the baseline's prompts stay in M_adj, which is the point. Surrogates longer than
  one prompt join several prompts, which then differ from one long prompt in repetition.
- It is causal, so the same live, recorded and replayed: the surrogates of turn t come from
  the baseline turns before it (at least :data:`MIN_POOL_TURNS` of them; NaN before), and
  from the end of the baseline on from all of it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ADJUSTED", "BASELINE_TURNS", "CONFOUND_METRICS", "LENGTH_COLUMNS", "MIN_POOL_TURNS",
           "TOKENIZER", "DialogueMetrics", "LengthNull", "Tokenizer", "length_confound",
           "load_tokenizer", "pooled_metrics"]

#: Token counts of a turn's S, A and S' (columns of every turn's row).
LENGTH_COLUMNS = ("n_S", "n_A", "n_S_next")

#: The length-adjusted metric of each raw one (module docstring).
ADJUSTED = {"P": "P_adj", "H_f": "H_f_adj", "H_b": "H_b_adj", "dH": "dH_adj"}

#: Baseline prompts in the surrogates' pool before a length-adjusted value is given.
MIN_POOL_TURNS = 8

#: Turns 1..BASELINE_TURNS are a dialogue's baseline (paper §11.4): the one number the
#: token metrics, the per-turn rule (``idt_desk.detection.turns``) and the dialogue source use.
BASELINE_TURNS = 30

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

    Returns the columns a metric window has (``idt_desk.live.session.WINDOW_COLUMNS``) that token
    counts define. ``unique_frac`` is the share of distinct tokens in the pooled text (how far
    from saturation the plug-in estimates are, as for a window of symbols).
    """
    return _pooled(_Context(s, a, vocab), len(s), len(a), s_next, vocab)


def _pooled(ctx: _Context, n_s: int, n_a: int, s_next: np.ndarray, vocab: int
            ) -> dict[str, float]:
    """:func:`pooled_metrics` with the counts of S and A already made (``ctx``)."""
    cn = np.bincount(s_next, minlength=vocab)
    row, pooled = ctx.metrics(cn)
    h_sn = _entropy(ctx.cs + cn)
    n_tokens = int(pooled.sum())
    k = int(np.count_nonzero(pooled))
    return {
        **row, "MI": row["H_SA"] + row["H_S_next"] - row["H_SAS"],
        "H_A_given_S": ctx.h_sa - ctx.h_s,
        "MI_A_S_next_given_S": ctx.h_sa + h_sn - row["H_SAS"] - ctx.h_s,
        "K_SAS": float(k), "unique_frac": k / n_tokens if n_tokens else math.nan,
        "n_S": float(n_s), "n_A": float(n_a), "n_S_next": float(len(s_next)),
    }


class _Context:
    """The counts and entropies of S and A, shared by every S' judged in their context."""

    def __init__(self, s: np.ndarray, a: np.ndarray, vocab: int) -> None:
        self.cs = np.bincount(s, minlength=vocab)
        ca = np.bincount(a, minlength=vocab)
        self.sa = self.cs + ca
        self.h_s, self.h_a, self.h_sa = _entropy(self.cs), _entropy(ca), _entropy(self.sa)

    def metrics(self, cn: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
        """P, H_f, H_b, dH and the entropies of an S' given as counts; the pooled counts."""
        h_n = _entropy(cn)
        pooled = self.sa + cn
        h_san = _entropy(pooled)
        mi = self.h_sa + h_n - h_san
        denom = self.h_s + self.h_a + h_n
        return {"P": mi / denom if denom > 0 else math.nan, "H_f": h_san - self.h_sa,
                "H_b": h_san - h_n, "dH": h_n - self.h_sa, "H_S": self.h_s, "H_A": self.h_a,
                "H_S_next": h_n, "H_SA": self.h_sa, "H_SAS": h_san}, pooled


class LengthNull:
    """The length-matched surrogates of the adjusted metrics (module docstring).

    Rows go in turn by turn (:meth:`adjust`), with their token arrays; the S' of the first
    ``baseline_turns`` rows form the surrogates' pool. A row is adjusted against up to
    ``surrogates`` surrogates starting at evenly spaced baseline prompts of the pool so far
    (NaN while it holds fewer than ``min_pool``). A baseline shorter than ``min_pool`` turns
    never fills it: M_adj is NaN throughout.
    """

    METRICS = tuple(ADJUSTED)

    def __init__(self, baseline_turns: int = BASELINE_TURNS, min_pool: int = MIN_POOL_TURNS,
                 surrogates: int = 8) -> None:
        self.baseline_turns = int(baseline_turns)
        self.min_pool = int(min_pool)
        self.surrogates = int(surrogates)
        self.rows_seen = 0
        self._pool: list[np.ndarray] = []
        self._stream: np.ndarray | None = None  # the pool's prompts joined (built on use)
        self._starts = np.zeros(0, dtype=np.int64)  # where each prompt starts in it

    @property
    def pooled(self) -> int:
        """Baseline prompts in the surrogates' pool so far."""
        return len(self._pool)

    def surrogate_texts(self, n: int) -> list[np.ndarray]:
        """The token arrays of the surrogates of an S' of ``n`` tokens (empty: too few)."""
        k = len(self._pool)
        if k < self.min_pool:
            return []
        if self._stream is None:
            self._starts = np.cumsum([0] + [len(p) for p in self._pool[:-1]])
            self._stream = np.concatenate(self._pool)
        total = len(self._stream)
        reps = 1 + (n + total) // max(total, 1)
        stream = np.tile(self._stream, reps)
        m = min(self.surrogates, k)
        return [stream[s: s + n] for s in self._starts[[(i * k) // m for i in range(m)]]]

    def adjust(self, s: np.ndarray, a: np.ndarray, s_next: np.ndarray,
               row: Mapping[str, float], vocab: int, context: _Context | None = None
               ) -> dict[str, float]:
        """The adjusted metrics of the next turn (then its S' joins the pool if due).

        ``context``: the counts of S and A when the caller has them (the real turn's).
        """
        surr = self.surrogate_texts(len(s_next))
        if surr:
            ctx = context if context is not None else _Context(s, a, vocab)
            null = [ctx.metrics(np.bincount(r, minlength=vocab))[0] for r in surr]
            out = {ADJUSTED[m]: float(row[m] - np.mean([x[m] for x in null]))
                   for m in self.METRICS}
        else:
            out = {ADJUSTED[m]: math.nan for m in self.METRICS}
        if self.rows_seen < self.baseline_turns and len(s_next):
            self._pool.append(np.asarray(s_next))
            self._stream = None
        self.rows_seen += 1
        return out


class DialogueMetrics:
    """Turns in, one metric row per turn out; keeps the dialogue's tokenised history.

    A turn is a mapping with ``turn`` (1, 2, ...), ``prompt`` (the teacher prompt the student
    answered), ``reply``, ``next_prompt`` and ``context_start`` (the first earlier turn whose
    prompt and reply are still in S: 1 for the whole dialogue, later under context gating).
    Earlier turns are looked up in the history, so a turn only needs its own texts.
    """

    def __init__(self, tokenizer: Tokenizer, baseline_turns: int = BASELINE_TURNS) -> None:
        self.tokenizer = tokenizer
        self._history: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        #: The surrogates of the adjusted metrics (from the first ``baseline_turns`` S').
        self.length = LengthNull(baseline_turns)

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
        """Metric columns of each turn (history-only turns, ``history: true``, give none).

        The columns of :func:`pooled_metrics` and the length-adjusted ones (:data:`ADJUSTED`).
        """
        rows = []
        for turn in turns:
            self.remember(turn)
            if turn.get("history"):
                continue
            s = self.context_ids(turn)
            a = self._history[int(turn["turn"])][1]
            n = self.tokenizer.encode(str(turn["next_prompt"]))
            vocab = self.tokenizer.vocab
            ctx = _Context(s, a, vocab)  # S and A: counted once for the turn and its null
            row = _pooled(ctx, len(s), len(a), n, vocab)
            row.update(self.length.adjust(s, a, n, row, vocab, ctx))
            rows.append(row)
        keys = rows[0].keys() if rows else ()
        return {k: np.array([r[k] for r in rows], dtype=np.float64) for k in keys}


#: The metrics whose length confound is reported, raw then adjusted.
CONFOUND_METRICS = (*ADJUSTED, *ADJUSTED.values())


def length_confound(dialogues: Sequence[Mapping[str, Any]], baseline_turns: int = BASELINE_TURNS
                    ) -> dict[str, Any]:
    """How much of each metric the token counts explain, over the baseline turns.

    ``dialogues`` are per-turn tables (columns of :meth:`DialogueMetrics.push`, turn order),
    one per dialogue. For each metric of :data:`CONFOUND_METRICS` and each count of
    :data:`LENGTH_COLUMNS`: Pearson's r of the metric with log(1 + count) over the first
    ``baseline_turns`` turns of every dialogue, each dialogue's means removed first (so a
    dialogue that is longer-winded all along does not make a correlation by itself), with
    Fisher's 95 % CI and p (:func:`idt_desk.stats.correlation`); ``per_dialogue`` has
    each dialogue's own r.
    """
    from idt_desk.stats import correlation

    def within(col: str, log: bool) -> tuple[np.ndarray, list[np.ndarray]]:
        parts = []
        for d in dialogues:
            v = np.asarray(d[col], dtype=np.float64)[:baseline_turns]
            v = np.log1p(v) if log else v
            ok = np.isfinite(v)
            parts.append(v - (v[ok].mean() if ok.any() else 0.0))
        return (np.concatenate(parts) if parts else np.empty(0)), parts

    out: dict[str, Any] = {}
    counts = {c: within(c, True) for c in LENGTH_COLUMNS}
    for m in CONFOUND_METRICS:
        if not dialogues or any(m not in d for d in dialogues):
            continue
        y, ys = within(m, False)
        block: dict[str, Any] = {}
        for c, (x, xs) in counts.items():
            res = correlation(y, x)
            res["per_dialogue"] = [correlation(a, b)["r"] for a, b in zip(ys, xs, strict=True)]
            block[c] = res
        out[m] = block
    return out
