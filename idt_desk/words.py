r"""Durations in words, one way everywhere: waits, estimates and "active 3 min ago".

>>> duration_text(42), duration_text(130), duration_text(3_900), duration_text(200_000)
('42 s', '2 min 10 s', '1 h 05 min', '2 d 8 h')
>>> ago_text(130), eta_text(12_000, 2_400.0), eta_text(100, 0.0)
('2 min ago', 'about 5 s', '')
>>> shown("seed-9\n\x1b[2Jok\udcff")
'seed-9\\n\\x1b[2Jok\\xff'
"""

from __future__ import annotations

import math
import sys
import unicodedata
from typing import Any

__all__ = ["METRIC_WORDS", "ago_text", "change_text", "duration_text", "eta_text", "say",
           "shown"]

#: What each metric of a window is, for a reader of the window (its name in the paper's words,
#: then a sentence: what it measures and how it reads). The equations are the concepts
#: page's (``assets/docs/concepts.md``), stated the same way.
METRIC_WORDS = {
    "P": ("bi-predictability",
          "how tightly state, action and outcome constrain one another: P = MI(S, A; S') / "
          "(H(S) + H(A) + H(S')), from 0 (unrelated) to ½ (each determines the other); a "
          "change of the loop's coupling moves it"),
    "H_f": ("forward uncertainty",
            "H_f = H(S' | S, A), in bits: how uncertain the outcome is given the state and the "
            "action; 0 when every (S, A) has one outcome, higher when the loop is noisier"),
    "H_b": ("backward uncertainty",
            "H_b = H(S, A | S'), in bits: how uncertain the state and action are given the "
            "outcome; 0 when each outcome has one cause"),
    "dH": ("predictive asymmetry",
           "ΔH = H_f − H_b, in bits: near 0 for passive physics, away from 0 once an agent "
           "acts (forward and backward predictability differ)"),
}

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def shown(text: object, limit: int = 500) -> str:
    r"""``text`` safe to print on a terminal or a table's cell: one line, nothing it obeys.

    Control characters (a newline that would forge a row, ESC sequences that clear the
    screen or set the window's title, bidirectional overrides) are written as escapes,
    ``\n`` or ``\x1b``; a file name's undecodable bytes (Python's surrogate escapes) as
    ``\xff``. Longer than ``limit`` characters: cut, saying how much was left out.
    """
    s = str(text)
    if s.isprintable() and len(s) <= limit:
        return s
    out = []
    for ch in s[:limit]:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0xDC80 <= code <= 0xDCFF:  # a byte os.fsdecode could not decode
            out.append(f"\\x{code - 0xDC00:02x}")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    if len(s) > limit:
        out.append(f"… ({len(s) - limit:,} more characters)")
    return "".join(out)


def say(text: object = "", file: Any = None) -> None:
    """Print ``text`` to a terminal as one line, :func:`shown`.

    What a recording holds (a perturbation's name, an error, a caveat) never reaches the
    terminal raw: not a control sequence, nor a newline that would forge a line of output.
    ``file``: where to (default standard output, looked up at the call).
    """
    print(shown(text, 100_000), file=sys.stdout if file is None else file)


def duration_text(seconds: float) -> str:
    """``seconds`` as people say it: two units at most (``2 min 10 s``, ``1 h 05 min``)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        m, s = divmod(s, 60)
        return f"{m} min {s} s" if s else f"{m} min"
    if s < 86400:
        h, m = divmod(round(s / 60), 60)
        return f"{h} h {m:02d} min"
    d, h = divmod(round(s / 3600), 24)
    return f"{d} d {h} h" if h else f"{d} d"


def ago_text(seconds: float) -> str:
    """How long ago, in its largest unit only (``3 min ago``): a table's column."""
    s = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.0f} {unit} ago"
    return f"{s:.0f} s ago"


def eta_text(transitions: float, per_s: float) -> str:
    """How long ``transitions`` take at ``per_s`` a second (``about 2 min``; "" unknown)."""
    if not per_s or not math.isfinite(per_s) or per_s <= 0 or not math.isfinite(transitions):
        return ""
    return f"about {duration_text(max(0.0, transitions) / per_s)}"


def change_text(change: float, line: float) -> str:
    """A relative change in percent, signed, to one decimal; to two near a rule's ``line``.

    Where one decimal would put it on the line (−0.97 % is not "−1.0 %" against a line at
    1 %), two are shown.

    >>> change_text(-0.0097, 0.01), change_text(-0.0231, 0.01), change_text(0.138, 0.01)
    ('-0.97 %', '-2.3 %', '+13.8 %')
    """
    x = 100.0 * change
    one = f"{x:+.1f}"
    if abs(float(one)) == round(100.0 * line, 1) and abs(x) != 100.0 * line:
        return f"{x:+.2f} %"
    return f"{one} %"
