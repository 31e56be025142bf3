"""The alarm panel: a light per component, the IDT ensemble alarm, latency, saturation."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGridLayout, QGroupBox, QLabel, QProgressBar, QWidget

from idt_desk.session import Snapshot

__all__ = ["AlarmPanel"]

_GREY, _GREEN, _RED = "#b9bec6", "#3aa757", "#d93025"
_LIGHTS = (("P", "P"), ("H_f", "H_f"), ("H_b", "H_b"), ("dH", "ΔH"), ("reward", "reward"))


class _Light(QLabel):
    def __init__(self, text: str, big: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setMinimumHeight(34 if big else 24)
        self._big = big
        self.state = ""
        self.set_state("idle")

    def set_state(self, state: str) -> None:
        """Idle (grey: no baseline yet), ok (green) or alarm (red)."""
        if state == self.state:
            return  # style sheets are costly to re-apply at 30 Hz
        self.state = state
        color = {"idle": _GREY, "ok": _GREEN, "alarm": _RED}[state]
        size = "15px" if self._big else "12px"
        self.setStyleSheet(
            f"QLabel {{ background: {color}; color: white; border-radius: 6px; "
            f"font-weight: bold; font-size: {size}; padding: 2px 6px; }}"
        )


class AlarmPanel(QGroupBox):
    """Excursion lights, the IDT alarm, latency since the last onset, saturation, calibration."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("IDT alarms", parent)
        grid = QGridLayout(self)
        self.lights: dict[str, _Light] = {}
        for col, (key, text) in enumerate(_LIGHTS):
            light = _Light(text, parent=self)
            light.setObjectName(f"light_{key}")
            self.lights[key] = light
            grid.addWidget(light, 0, col)
        self.idt = _Light("IDT alarm", big=True, parent=self)
        self.idt.setObjectName("light_IDT")
        self.idt.setToolTip("Union of the P, H_f, H_b and ΔH excursions (paper §10.5)")
        grid.addWidget(self.idt, 1, 0, 1, len(_LIGHTS))
        self.latency = QLabel("No perturbation yet", self)
        self.latency.setObjectName("latency")
        self.latency.setWordWrap(True)
        grid.addWidget(self.latency, 2, 0, 1, len(_LIGHTS))
        self.saturation = QProgressBar(self)
        self.saturation.setObjectName("saturation")
        self.saturation.setRange(0, 100)
        self.saturation.setFormat("saturation %p%")
        self.saturation.setToolTip(
            "Distinct (S, A, S') symbols / W in the latest window. Near 100% every transition "
            "is unique and plug-in entropies saturate (all-unique gives P = 1/3): estimator "
            "artefact, not coupling."
        )
        grid.addWidget(self.saturation, 3, 0, 1, len(_LIGHTS))
        self._chunk = ""
        self.calibration = QLabel("", self)
        self.calibration.setObjectName("calibration")
        self.calibration.setWordWrap(True)
        grid.addWidget(self.calibration, 4, 0, 1, len(_LIGHTS))
        self.set_reward_visible(False)

    def set_reward_visible(self, visible: bool) -> None:
        """Show the reward light only for sources with reward."""
        self.lights["reward"].setVisible(visible)

    def reset(self) -> None:
        """Back to the idle look (a new session)."""
        for light in (*self.lights.values(), self.idt):
            light.set_state("idle")
        self.latency.setText("No perturbation yet")
        self.saturation.setValue(0)
        self.calibration.setText("")

    def update_snapshot(self, snap: Snapshot) -> None:
        """Refresh from a session snapshot."""
        ready = snap.baseline is not None
        for key, light in self.lights.items():
            light.set_state("idle" if not ready else
                            ("alarm" if snap.alarm.get(key) else "ok"))
        self.idt.set_state("idle" if not ready else ("alarm" if snap.alarm.get("IDT") else "ok"))
        onset = snap.onset
        if onset is None:
            self.latency.setText("No perturbation yet")
        elif onset.get("latency") is not None:
            self.latency.setText(f"Detected <b>{onset['latency']}</b> windows after the onset "
                                 f"of <i>{onset['name']}</i>")
        else:
            first = onset.get("first_window")
            since = "" if first is None else f" ({snap.n_windows - first} windows since)"
            self.latency.setText(f"<i>{onset['name']}</i> on: not detected yet{since}")
        u = snap.windows.get("unique_frac")
        if u is not None and len(u) and u[-1] == u[-1]:
            pct = round(100 * float(u[-1]))
            self.saturation.setValue(pct)
            chunk = _RED if pct >= 90 else ("#f4b400" if pct >= 60 else _GREEN)
            if chunk != self._chunk:
                self._chunk = chunk
                self.saturation.setStyleSheet(f"QProgressBar::chunk {{ background: {chunk}; }}")
        cal, need = snap.calibration
        pr = snap.preset
        if cal < need:
            text = f"Symbols: calibrating {cal}/{need} transitions"
        else:
            text = (f"Symbols: {pr['name']} — {pr['bins']} bins, W = {pr['window']}, "
                    f"stride {pr['stride']}")
        got, want = snap.baseline_progress
        if snap.baseline is None:
            text += f"<br>Baseline: gathering {got}/{want} windows"
        else:
            text += f"<br>Baseline: μ ± {snap.baseline.k:g}σ of {snap.baseline.n_windows} windows"
        if text != self.calibration.text():
            self.calibration.setText(text)
