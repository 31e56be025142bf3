"""The System panel of a replay whose recording holds nothing to draw the system from.

A recording keeps the loop's observations, actions and rewards, not a robot's full physical
state (the cheetah's MuJoCo ``qpos``), nor anything of a loop that ``idt_desk.Recorder``
wrote: the replay shows where it stands instead (progress, loop time, the episode and its
return) in words, never a raw dump of its info.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QLabel, QProgressBar, QVBoxLayout, QWidget

__all__ = ["ReplayView"]


class ReplayView(QWidget):
    """Progress of a replay (or of following a recording) and its episode counters.

    :meth:`update_info` takes the replay source's info: ``replay_position``,
    ``replay_rows``, ``time``, ``following`` and ``writer`` (following), ``episode``,
    ``episode_step``, ``episode_return``, ``episode_returns``.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("replay_view")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.title = QLabel("waiting for the recording", self)
        self.title.setObjectName("replay_title")
        self.title.setWordWrap(True)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(True)
        self.text = QLabel("", self)
        self.text.setObjectName("replay_text")
        self.text.setWordWrap(True)
        self.note = QLabel("The recording holds the loop's observations, actions and rewards, "
                           "not the system's full state: it is not drawn here.", self)
        self.note.setWordWrap(True)
        self.note.setStyleSheet("QLabel { color: #6b7079; }")
        for w in (self.title, self.progress, self.text, self.note):
            lay.addWidget(w)
        lay.addStretch(1)

    def update_info(self, info: dict[str, Any]) -> None:
        """Show the replay's progress and its episode (unchanged texts are not reset)."""
        pos, rows = info.get("replay_position"), info.get("replay_rows")
        following = info.get("following")
        if following:
            title = f"Following {following} (the writer: {info.get('writer', '?')})"
        else:
            title = "Replaying the recording"
        if pos is not None and rows:
            done = int(pos) / int(rows)
            value = round(1000 * done)
            if self.progress.value() != value:
                self.progress.setValue(value)
            fmt = f"{int(pos):,} of {int(rows):,} transitions read" if following else \
                f"{100 * done:.0f} % — {int(pos):,} of {int(rows):,} transitions"
            if self.progress.format() != fmt:
                self.progress.setFormat(fmt)
        lines = []
        if "time" in info:
            lines.append(f"loop time {float(info['time']):,.2f} s")
        if "episode" in info:
            lines.append(f"episode {int(info['episode'])} · step "
                         f"{int(info.get('episode_step', 0)):,} · return so far "
                         f"{float(info.get('episode_return', 0.0)):,.1f}")
        returns = info.get("episode_returns") or []
        if returns:
            last = returns[-1]
            lines.append(f"last finished: episode {int(last[0])}, return "
                         f"{float(last[1]):,.1f}")
        text = "\n".join(lines)
        for label, value in ((self.title, title), (self.text, text)):
            if label.text() != value:
                label.setText(value)
