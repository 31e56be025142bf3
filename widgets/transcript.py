"""The dialogue's live view: the transcript, streaming as the tokens arrive.

Teacher and student are told apart by colour and name; an injected teacher prompt is
highlighted with its type; each student reply carries its turn's P (red when the turn was an
IDT excursion). Finished turns are appended once (the document is never rebuilt per frame);
the reply being written streams in a line below them.
"""

from __future__ import annotations

import html
import math
from typing import Any

from PySide6.QtWidgets import QLabel, QTextBrowser, QVBoxLayout, QWidget

__all__ = ["TranscriptView", "confound_text"]

_TEACHER = "#1f5fa8"
_STUDENT = "#2e7d32"
_INJECTED_BG = "#ffe3c2"
#: Characters of the reply being written shown below the transcript.
PARTIAL_CHARS = 240


def _who(desc: Any) -> str:
    if not isinstance(desc, dict):
        return "…"
    return f"{desc.get('model', '?')} ({desc.get('backend', '?')})"


def _block(role: str, text: str, turn: int, note: str = "", bg: str = "") -> str:
    """One paragraph: who and which turn, a note, the text (on a background if injected)."""
    color = _TEACHER if role == "teacher" else _STUDENT
    body = html.escape(text)
    if bg:
        body = f'<span style="background-color:{bg};">{body}</span>'
    return (f'<span style="color:{color};font-weight:bold;">{role.capitalize()} · {turn}'
            f'</span>{note}<br>{body}<br>')


def confound_text(confound: dict[str, Any]) -> str:
    """One line: each metric's r with the log token count of S' over the baseline turns."""
    names = {"P": "P", "H_b": "H<sub>b</sub>", "dH": "ΔH", "P_adj": "P − length null"}
    parts = []
    for m, name in names.items():
        c = (confound.get(m) or {}).get("n_S_next") or {}
        if c.get("r") is None:
            continue
        ci = c.get("ci")
        parts.append(f"{name} {c['r']:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else ""))
    return (f"Length confound, turns 1–{confound.get('turns')}: r with log tokens of the "
            "teacher's prompt — " + ", ".join(parts))


class TranscriptView(QWidget):
    """Transcript of a dialogue source (its ``view`` is ``dialogue``)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.backends = QLabel("student: …  ·  teacher: …", self)
        self.backends.setObjectName("transcript_backends")
        self.backends.setWordWrap(True)
        self.backends.setStyleSheet("color: #505660;")
        self.text = QTextBrowser(self)
        self.text.setObjectName("transcript")
        self.text.setOpenLinks(False)
        self.confound = QLabel("", self)
        self.confound.setObjectName("transcript_confound")
        self.confound.setWordWrap(True)
        self.confound.setStyleSheet("color: #505660;")
        self.confound.setToolTip(
            "Pearson r of each metric with log(1 + token count) of the teacher's next prompt "
            "(S') over the baseline turns, with its 95 % CI. Near ±1: the metric mostly "
            "measures how long the prompt is. 'P − length null' is P less its mean over "
            "ordinary baseline prompts cut to the same token count, in the same context.")
        self.confound.hide()
        self.partial = QLabel("", self)
        self.partial.setObjectName("transcript_partial")
        self.partial.setWordWrap(True)
        self.partial.setStyleSheet("color: #7a7f87; font-style: italic;")
        layout.addWidget(self.backends)
        layout.addWidget(self.confound)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.partial)
        self.setMinimumHeight(220)
        self._shown = 0  # turns appended
        # Follow the dialogue unless the user scrolls back; scrolling to the end follows again.
        self._follow = True
        bar = self.text.verticalScrollBar()
        bar.valueChanged.connect(self._scrolled)
        bar.rangeChanged.connect(self._grown)
        self._partial_key: tuple = ()
        self._backends_key: tuple = ()
        self._confound_key: Any = None

    def reset(self) -> None:
        """A new session: empty transcript."""
        self.text.clear()
        self.confound.hide()
        self._confound_key = None
        self.partial.setText("")
        self._shown = 0
        self._partial_key = ()

    def update_info(self, info: dict[str, Any]) -> None:
        """Append the turns not shown yet; show the reply being written."""
        turns = info.get("transcript") or ()
        # Live, the source says which backends it chose; a replay has them in its turns.
        key = (info.get("student_backend") or (turns[-1].get("student") if turns else None),
               info.get("teacher_backend") or (turns[-1].get("teacher") if turns else None))
        if key != self._backends_key:
            self._backends_key = key
            self.backends.setText(f"student: {_who(key[0])}  ·  teacher: {_who(key[1])}")
        if turns and (turns[-1]["i"] + 1 < self._shown or turns[0]["i"] > self._shown):
            self.reset()  # a new session or a bounded history that moved on
        # Called every frame: look at the whole transcript only when a turn has arrived.
        new = [t for t in turns if t["i"] >= self._shown] \
            if turns and turns[-1]["i"] >= self._shown else []
        if new:
            first = self._shown == 0
            for j, t in enumerate(new):
                for block in self._turn_html(t, first and j == 0):
                    self.text.append(block)  # a paragraph each: never merged
            self._shown = new[-1]["i"] + 1
        confound = info.get("length_confound")
        if confound is not self._confound_key:
            self._confound_key = confound
            self.confound.setText(confound_text(confound) if confound else "")
            self.confound.setVisible(bool(confound))
        partial = info.get("partial")
        pkey = (partial.get("turn"), partial.get("role"), len(partial.get("text", "")),
                bool(partial.get("interrupted"))) if isinstance(partial, dict) else ()
        if pkey != self._partial_key:
            self._partial_key = pkey
            if pkey:
                text = " ".join(str(partial.get("text", "")).split())
                if len(text) > PARTIAL_CHARS:  # the latest words: the label stays small
                    text = "…" + text[-PARTIAL_CHARS:]
                what = ("was interrupted; kept" if partial.get("interrupted")
                        else "is writing")
                self.partial.setText(f"{partial['role'].capitalize()} · {partial['turn']} "
                                     f"{what}: {text}")
            else:
                self.partial.setText("")

    def _scrolled(self, value: int) -> None:
        self._follow = value >= self.text.verticalScrollBar().maximum() - 4

    def _grown(self, _low: int, high: int) -> None:
        if self._follow:
            self.text.verticalScrollBar().setValue(high)

    @staticmethod
    def _turn_html(t: dict[str, Any], first: bool) -> list[str]:
        parts = []
        if first:  # later turns' prompts were shown as the turn before's next prompt
            parts.append(_block("teacher", t["prompt"], t["turn"]))
        p = t.get("P", math.nan)
        color = "#c62828" if t.get("alarm") else "#505660"
        p_text = f"{p:.3f}" if p == p else "undefined"
        adj = t.get("P_adj", math.nan)
        if adj == adj:
            p_text += f" (less its length null: {adj:+.3f})"
        parts.append(_block("student", t["reply"], t["turn"],
                            f' <span style="color:{color};">P = {p_text}</span>'))
        inj = t.get("injected")
        if inj:
            # The injection is turn t's S' (the plots, the event log and --perturb @t say
            # turn t), and the prompt the student answers in turn t + 1.
            parts.append(_block("teacher", t["next_prompt"], t["turn"] + 1,
                                f' <span style="color:#b45309;">injected at turn {t["turn"]}: '
                                f'{html.escape(str(inj.get("type")))}</span>', _INJECTED_BG))
        else:
            parts.append(_block("teacher", t["next_prompt"], t["turn"] + 1))
        return parts
