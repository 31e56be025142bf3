"""The switches panel: a source's perturbations and modulations, and automatic modulation.

Each declared perturbation or modulation is a toggle button over its parameter form; the
"Automatic modulation" group engages a modulation on a persistent alarm. The panel is
rebuilt for each source (:meth:`SwitchPanel.build`) and follows the loop's active switches
(:meth:`SwitchPanel.follow`); toggles emit ``perturb_toggled``, ``modulate_toggled`` and
``auto_toggled``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from idt_desk_widgets.forms import (
    ParamForm,
    compact_combo,
    compact_form,
    set_quietly,
    setting_box,
)
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from idt_desk.live.source import Source
from idt_desk.settings import SETTINGS

#: What Auto does, and what the modulation study says it cannot do (``assets/docs/rl.md``).
AUTO_TIP = ("Engage the chosen modulation once the IDT alarm has held for the windows below, "
            "and release it after the quiet ones. It engages what you choose: on the shipped "
            "RL agents no modulation recovered return lost to any perturbation, and the "
            "alarm's signature cannot tell one perturbation from another, so there is "
            "nothing for it to choose by (the RL page, What each button does).")

__all__ = ["SwitchPanel", "declared"]


def declared(cls: Any) -> tuple[dict[str, str], dict[str, Any]]:
    """What ``cls`` declares, for the plots and alarms: (name -> label, plot options).

    The plot options are ``MetricPlots.set_source``'s: whether there is a modulation or an
    impulse, each switch's default parameters and what an impulse is called ("impulse
    (kick)"; a dialogue's is an "injection"). For a replay, ``cls`` is the recorded source's
    class: its switches are what the replay draws.
    """
    names = {p.name: p.label for p in (*cls.perturbations, *cls.modulations)}
    impulses = [p.label for p in cls.perturbations if p.impulse]
    if cls.metric_path == "turns":
        word = "injection"
    elif len(impulses) == 1:
        word = f"impulse ({impulses[0].lower()})"
    else:
        word = "impulse"
    return names, {
        "has_modulation": bool(cls.modulations), "has_impulse": bool(impulses),
        "defaults": {d.name: {q.name: q.default for q in d.params}
                     for d in (*cls.perturbations, *cls.modulations)},
        "impulse_label": word}


def _clear_layout(layout: QVBoxLayout) -> None:
    """Remove and delete every widget of ``layout``."""
    while layout.count():
        w = layout.takeAt(0).widget()
        if w is not None:
            w.setParent(None)
            w.deleteLater()


class SwitchPanel(QWidget):
    """The "Perturbations" and "Modulation" groups, one under the other.

    ``perturb_buttons`` / ``perturb_forms`` and ``modulate_buttons`` / ``modulate_forms``
    hold each declared switch's toggle and parameter form by name; ``auto_check``,
    ``auto_combo``, ``auto_persist`` and ``auto_release`` are the automatic modulation's.
    """

    #: A perturbation's toggle was clicked: (name, on).
    perturb_toggled = Signal(str, bool)
    #: A modulation's toggle was clicked: (name, on).
    modulate_toggled = Signal(str, bool)
    #: Automatic modulation was switched on or off.
    auto_toggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)  # the two groups sit in the panel's column
        self.perturb_box = QGroupBox("Perturbations", self)
        self.perturb_layout = QVBoxLayout(self.perturb_box)
        self.modulate_box = QGroupBox("Modulation", self)
        self.modulate_layout = QVBoxLayout(self.modulate_box)
        lay.addWidget(self.perturb_box)
        lay.addWidget(self.modulate_box)
        self.perturb_buttons: dict[str, QPushButton] = {}
        self.perturb_forms: dict[str, ParamForm] = {}
        self.modulate_buttons: dict[str, QPushButton] = {}
        self.modulate_forms: dict[str, ParamForm] = {}
        self.auto_check = QCheckBox(self)
        self.auto_check.hide()

    def build(self, cls: type[Source]) -> None:
        """Show the perturbations and modulations ``cls`` declares."""
        self.build_perturbations(cls)
        self.build_modulations(cls)

    def build_perturbations(self, cls: type[Source]) -> None:
        """The Perturbations box of ``cls``."""
        _clear_layout(self.perturb_layout)
        self.perturb_buttons = {}
        self.perturb_forms = {}
        if not cls.perturbations:
            self.perturb_layout.addWidget(QLabel("This source declares no perturbations."))
        for pert in cls.perturbations:
            self._add_toggle(pert, f"{pert.help} (target: {pert.target})", "perturb",
                             self.perturb_box, self.perturb_layout, self.perturb_buttons,
                             self.perturb_forms, self.perturb_toggled.emit)

    def _add_toggle(self, spec: Any, tip: str, prefix: str, box: QGroupBox,
                    layout: QVBoxLayout, buttons: dict, forms: dict,
                    slot: Callable[[str, bool], Any]) -> None:
        """A declared perturbation or modulation: a toggle button and its parameter form."""
        button = QPushButton(spec.label, box)
        button.setObjectName(f"{prefix}_{spec.name}")
        button.setCheckable(True)
        button.setToolTip(tip)
        form = ParamForm(spec.params, box)
        button.toggled.connect(lambda on, n=spec.name: slot(n, on))
        layout.addWidget(button)
        layout.addWidget(form)
        buttons[spec.name] = button
        forms[spec.name] = form

    def build_modulations(self, cls: type[Source], source: Source | None = None) -> None:
        """The Modulation box of ``cls``; a replay's says why it has none.

        ``source``: the replay once it runs (its recording has an action channel or not).
        """
        _clear_layout(self.modulate_layout)
        self.modulate_buttons = {}
        self.modulate_forms = {}
        self.auto_check = QCheckBox("Auto (engage on persistent alarm)", self.modulate_box)
        self.auto_check.setToolTip(AUTO_TIP)
        self.auto_combo = compact_combo(QComboBox(self.modulate_box))
        self.auto_persist = setting_box(SETTINGS["auto_persist"], parent=self.modulate_box)
        self.auto_release = setting_box(SETTINGS["auto_release"], parent=self.modulate_box)
        for w in (self.auto_combo, self.auto_persist, self.auto_release):
            w.hide()
        if not cls.modulations:
            passive = ("is passive: it has no action channel, so there is no interface to "
                       "modulate (Hold, input filter and dimensionality reduction act on an "
                       "agent's observations and actions, paper §4.3).")
            if cls.replays and (source is None or not source.passive):
                why = ("plays back what was recorded: a recorded agent's actions cannot be "
                       "modulated any more (its recorded modulations are shaded on the "
                       "plots).")
            elif not cls.action_names or cls.replays:
                why = passive
            else:
                why = "declares no modulations."
            label = QLabel(f"<i>{cls.label}</i> {why}", self.modulate_box)
            label.setObjectName("modulation_disabled")
            label.setWordWrap(True)
            self.modulate_layout.addWidget(label)
            for name in ("Hold", "Input filter", "Dimensionality reduction"):
                b = QPushButton(name, self.modulate_box)
                b.setEnabled(False)
                self.modulate_layout.addWidget(b)
            self.auto_check.setEnabled(False)
            self.modulate_layout.addWidget(self.auto_check)
            return
        for mod in cls.modulations:
            self._add_toggle(mod, mod.help, "modulate", self.modulate_box, self.modulate_layout,
                             self.modulate_buttons, self.modulate_forms,
                             self.modulate_toggled.emit)
            self.auto_combo.addItem(mod.label, mod.name)
        auto = QGroupBox("Automatic modulation", self.modulate_box)
        form = compact_form(QFormLayout(auto))
        form.addRow(self.auto_check)
        for w in (self.auto_combo, self.auto_persist, self.auto_release):
            w.show()
        form.addRow("Modulation", self.auto_combo)
        unit = "turns" if cls.metric_path == "turns" else "windows"
        form.addRow(f"Engage after ({unit})", self.auto_persist)
        form.addRow(f"Release after quiet ({unit})", self.auto_release)
        self.auto_check.toggled.connect(self.auto_toggled.emit)
        self.modulate_layout.addWidget(auto)

    def auto_settings(self) -> dict[str, Any] | None:
        """What automatic modulation engages and when (None: the source has no modulation).

        Raises ValueError (or KeyError) when the modulation's form holds a bad value.
        """
        if not self.modulate_buttons:
            return None
        name = self.auto_combo.currentData()
        return {"modulation": name, "params": self.modulate_forms[name].values(),
                "persist": self.auto_persist.value(), "release": self.auto_release.value()}

    def set_live(self, live: bool) -> None:
        """The toggles act on a running ``live`` session only; Auto needs a modulation."""
        for b in (*self.perturb_buttons.values(), *self.modulate_buttons.values()):
            b.setEnabled(live)
        self.auto_check.setEnabled(bool(self.modulate_buttons))

    def release_all(self) -> None:
        """Every toggle up, quietly (a new session starts with none on)."""
        for button in (*self.perturb_buttons.values(), *self.modulate_buttons.values()):
            set_quietly(button, False)

    def follow(self, perturbations: Collection[str], modulations: Collection[str]) -> None:
        """The toggles show the loop's active switches (scheduled ones, auto modulation)."""
        for names, buttons in ((perturbations, self.perturb_buttons),
                               (modulations, self.modulate_buttons)):
            for name, button in buttons.items():
                if button.isChecked() != (name in names):
                    set_quietly(button, name in names)
