"""Symbolisation and windowing presets: the paper's configurations.

See the paper's §3 and §10 and assets/docs/engine.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["PRESETS", "Preset", "get_preset", "preset_from_spec"]

#: Angle handling before z-scoring: "unwrap" (continuous angle, as the authors' released
#: pendulum pipeline does), "wrap" (to (-pi, pi]) or "none".
ANGLE_MODES = ("unwrap", "wrap", "none")


@dataclass(frozen=True)
class Preset:
    """A symbolisation + windowing configuration.

    Attributes
    ----------
    name, description
        How the preset is chosen and what it reproduces.
    bins, window, stride
        Equal-width bins per variable; window length and step in transitions.
    state_groups, action_groups
        Variable indices of each composite group of S and of A (None: each variable its own
        group, i.e. S is the composite of all its variables).
    angles
        Indices of angular state variables, treated per ``angle_mode``.
    angle_mode
        One of ``ANGLE_MODES``.
    n_state, n_action
        Number of state / action variables the preset expects (None: any).
    range_margin
        Each variable's calibrated range widened by this fraction of its span on each side
        (``Symbolizer.fit``'s ``margin``; the live cheetah's: with 2 bins the same symbols,
        and a value is out of range only far beyond the first two episodes' range).
    detector
        The detector a session uses with this preset unless told otherwise (None: the
        source's). The live cheetah's is the union of each part component's EWMA: a MEWMA
        whitens its twelve components with a covariance that a baseline of about forty
        independent windows (one episode each) cannot pin down, and alarmed on 28 of 48
        unperturbed controls of the choice split at 1 in 10 h (the EWMA union: 4 of 48).
    parts
        Names of the state groups when each is an IDT of its own (empty: one IDT of the
        composite of every group). A part's S and S' are that group's composite symbol; A is
        the whole action. A window then has each part's metrics (``P@torso`` …) and, under
        the plain names, their mean over the parts (what the plots show); the detector
        watches every part's components.
    caveat
        What a user must know before trusting its alarm, said beside it (the alarm panel,
        ``idt-desk run``'s last lines); empty for none.
    auto_view
        The view (bins, or the top principal components of S and of A) is chosen on the
        calibration windows from ``idt_desk.metrics.views.LADDER``, ``bins`` being its first
        rung: the first that resolves them. Only for a preset without groups.

    """

    name: str
    description: str
    bins: int
    window: int
    stride: int
    state_groups: tuple[tuple[int, ...], ...] | None = None
    action_groups: tuple[tuple[int, ...], ...] | None = None
    angles: tuple[int, ...] = field(default=())
    angle_mode: str = "none"
    n_state: int | None = None
    n_action: int | None = None
    parts: tuple[str, ...] = ()
    #: Each variable's calibrated range widened by this fraction of its span on each side
    #: (``Symbolizer.fit``'s ``margin``).
    range_margin: float = 0.0
    #: The alarm's detector a session uses with this preset unless told otherwise (None: the
    #: source's ``default_detector``).
    detector: str | None = None
    caveat: str = ""
    auto_view: bool = False

    def __post_init__(self) -> None:
        if self.auto_view and (self.state_groups is not None or self.action_groups is not None):
            raise ValueError(f"preset {self.name}: a view chosen on the calibration windows "
                             f"(auto_view) takes no groups")
        if self.parts and (self.state_groups is None
                           or len(self.parts) != len(self.state_groups)):
            raise ValueError(f"preset {self.name}: {len(self.parts)} part names for "
                             f"{len(self.state_groups or ())} state groups")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``auto_view`` only when set: a fixed preset's is as it was)."""
        d = asdict(self)
        if not self.auto_view:
            del d["auto_view"]
        return d


_CHEETAH_S = ((0, 1, 8, 9, 10), (2, 3, 4, 11, 12, 13), (5, 6, 7, 14, 15, 16))
_CHEETAH_A = ((0, 1, 2), (3, 4, 5))
#: The names of the cheetah's state groups, as parts.
CHEETAH_PARTS = ("torso", "back_leg", "front_leg")

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "pendulum",
            "Double pendulum, the paper's batch 1: S = (theta1, theta2, omega1, omega2), "
            "angles unwrapped, 16 bins, W = 300, stride 75, no action.",
            bins=16, window=300, stride=75, angles=(0, 1), angle_mode="unwrap",
            n_state=4, n_action=0,
        ),
        Preset(
            "pendulum-live",
            "Double pendulum, live: the batch-1 configuration (16 bins, W = 300, stride 75) "
            "with the angles treated as circular, wrapped to (-pi, pi] with bins over the "
            "whole circle. A live session calibrates on its first seconds; an unwrapped "
            "angle leaves that range for good once the pendulum goes over the top.",
            bins=16, window=300, stride=75, angles=(0, 1), angle_mode="wrap",
            n_state=4, n_action=0,
        ),
        Preset(
            "pendulum-batch2",
            "Double pendulum, the paper's batch 2 (coarser bins, shorter windows, more "
            "overlap): 8 bins, W = 150, stride 25.",
            bins=8, window=150, stride=25, angles=(0, 1), angle_mode="unwrap",
            n_state=4, n_action=0,
        ),
        Preset(
            "cheetah",
            "HalfCheetah: 17 observations in three body-part groups (torso, back leg, front "
            "leg), 6 torques in two groups (back, front), 3 bins, W = 300, stride 50.",
            bins=3, window=300, stride=50, state_groups=_CHEETAH_S, action_groups=_CHEETAH_A,
            n_state=17, n_action=6,
        ),
        Preset(
            "cheetah-live",
            "HalfCheetah, live: one IDT per body part (torso, back leg, front leg: S and S' "
            "that part's observations, A all six torques), 2 bins, W = 1000 (one episode), "
            "stride 50. Chosen on training seeds, judged on held-out ones: a window of every "
            "mature agent holds neither one repeated gait cycle nor mostly unseen triples, and "
            "it sees a chaotic agent's changes sooner. Not the default: on held-out controls "
            "its alarm went off more often than its budget allows (assets/docs/rl-estimator.md).",
            bins=2, window=1000, stride=50, state_groups=_CHEETAH_S, action_groups=_CHEETAH_A,
            n_state=17, n_action=6, parts=CHEETAH_PARTS, range_margin=0.5, detector="ewma",
            caveat="its alarm went off more often than its budget allows on unperturbed "
            "held-out runs: an alarm here may be a rare clean episode (the counts: "
            "assets/docs/rl-estimator.md)",
        ),
        Preset(
            "gym",
            "Any Gymnasium agent: the paper's HalfCheetah numbers (3 bins, W = 300, stride 50) "
            "with each variable its own group.",
            bins=3, window=300, stride=50,
        ),
        Preset(
            "auto",
            "Any loop (the Gymnasium wrappers' default): W = 300, stride 50, and the view "
            "that resolves the calibration windows: 3 bins a variable, else 2, else the top "
            "principal components of S and A at fewer bins (idt_desk.metrics.views).",
            bins=3, window=300, stride=50, auto_view=True,
        ),
    )
}


def get_preset(name: str) -> Preset:
    """Look up a preset by name, with a clear error listing the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None


def preset_from_spec(spec: Mapping[str, Any]) -> Preset:
    """A preset by value, as a recording states it (``Preset.to_dict()``; lists as tuples)."""
    fields = dict(spec)
    for key in ("state_groups", "action_groups"):
        if fields.get(key) is not None:
            fields[key] = tuple(tuple(g) for g in fields[key])
    fields["angles"] = tuple(fields.get("angles", ()))
    fields["parts"] = tuple(fields.get("parts", ()))
    return Preset(**fields)
