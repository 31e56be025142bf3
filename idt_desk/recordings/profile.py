"""Baseline profiles: the IDT fitted on a known-good run once, every later session judged by it.

A session learns "normal" from its own beginning: the symbols on its first windows, the twin's
residual scales on the same rows, then the detectors' baseline on the next ``baseline_windows``
windows (2,200 on the RL source, about 1.5 hours of HalfCheetah's loop time). Until then it
cannot alarm, and a loop broken from its first step becomes its own baseline. A profile holds
all a session fits before it can judge a window, so a session that takes one is armed at its
first complete window, as a detector saved on a reference set is (alibi-detect's
``save_detector`` / ``load_detector``) and an SPC chart set up on a phase-I run is used on
every later one:

- the symbols (:meth:`Symbolizer.to_dict <idt_desk.metrics.symbolize.Symbolizer.to_dict>`)
  and the view an ``auto`` preset chose;
- the twin's residual scales and the baseline's residual statistics and covariance
  (:meth:`TwinStage.fitted <idt_desk.metrics.twin.TwinStage.fitted>`);
- every detector's baseline and thresholds, and the phase table where one is used
  (:meth:`Monitor.fitted <idt_desk.detection.monitor.Monitor.fitted>`);
- the pipeline settings they were fitted under (preset by value, detector, budget), and the
  loop: its variables' names, rate, episode length, env id and source.

The file is one JSON document: nothing in it is unpickled or imported, and it is read only
when it is a regular file under :data:`MAX_BYTES`. ``format`` and ``version`` say what it is;
a damaged file, a foreign one or one of another version is refused in one line
(:class:`ProfileError`), as is a loop it does not fit (other variables, another env id or
preset, another rate: :meth:`Profile.check_loop`). Its digest (SHA-256 of its canonical JSON)
names it in the recordings of the sessions that used it; those recordings hold it by value,
so they replay identically without the file.

:class:`FitCheck` checks a session's first :data:`FIT_CHECK_WINDOWS` judged windows against
the profile's own spread: a loop that sits outside it is either broken or another loop than
the profile's (another agent, another gait), and the session says so and how to refit.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from idt_desk.detection.detectors import Calibration
from idt_desk.detection.phase import PhaseBaseline
from idt_desk.errors import InputError
from idt_desk.metrics.symbolize import Symbolizer
from idt_desk.recordings.files import json_safe, replace_whole
from idt_desk.settings import DEFAULTS

__all__ = ["FIT_CHECK_WINDOWS", "FIT_CHECK_Z", "FIXED", "FORMAT", "MAX_BYTES", "VERSION",
           "FitCheck", "Profile", "ProfileError", "profile_document", "save_baseline"]

#: What the document's ``format`` says.
FORMAT = "idt-desk baseline profile"
#: The version this code writes and reads.
VERSION = 1
#: The largest profile read (a HalfCheetah profile with its twin is about 60 KB).
MAX_BYTES = 16 << 20
#: The first judged windows checked against the profile's spread.
FIT_CHECK_WINDOWS = 50
#: Their mean z (any IDT component) beyond which the loop does not sit in that spread (the
#: baseline's own mean z is 0; a window's σ is 1, so the mean of 50 healthy windows sits far
#: inside 2 even when they are correlated).
FIT_CHECK_Z = 2.0
#: The pipeline settings a profile fixes: its thresholds are fitted to them. A session's that
#: are unset (None, or the settings table's default) become the profile's; one set otherwise
#: is refused.
FIXED = ("detector", "false_alarms", "persist", "k", "drift", "ewma_lambda", "phase_baseline",
         "twin", "correction", "baseline_windows", "calibration_windows")


class ProfileError(InputError):
    """A profile that cannot be used here: damaged, foreign, of another version, another loop's.

    The message says why in one line, naming the file.
    """


def canonical(doc: Any) -> bytes:
    """The document's canonical JSON (sorted keys, no spaces, NaN as null): what is digested."""
    return json.dumps(json_safe(doc), sort_keys=True, separators=(",", ":"),
                      allow_nan=False).encode("utf-8")


def _names(x: Any) -> tuple[str, ...] | None:
    return None if x is None else tuple(str(n) for n in x)


def _listed(names: tuple[str, ...] | None) -> str:
    if names is None:
        return "none (a passive loop)"
    shown = ", ".join(names[:4]) + (" …" if len(names) > 4 else "")
    return f"{len(names)} ({shown})"


@dataclass(frozen=True)
class Profile:
    """A baseline profile read and checked: its document, digest and where it came from.

    Build one with :meth:`read` (a file), :meth:`of` (a path, a profile or the setting a
    recording holds) or :meth:`parse` (a document); :meth:`save` writes it.
    """

    document: dict[str, Any]
    digest: str
    path: str | None = None
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # -- reading -----------------------------------------------------------------------------

    @classmethod
    def read(cls, path: str | os.PathLike) -> Profile:
        """Read a profile file: a regular file of at most :data:`MAX_BYTES`, one JSON document.

        Raises
        ------
        ProfileError
            Not there, not a regular file, too large, not JSON, not a profile, another
            version, or a field missing or malformed.
        """
        p = Path(path)
        where = str(p)
        try:
            st = os.stat(p)
        except OSError as exc:
            raise ProfileError(f"{where}: cannot be read ({exc.strerror or exc})") from None
        if not stat.S_ISREG(st.st_mode):
            raise ProfileError(f"{where}: not a regular file")
        if st.st_size > MAX_BYTES:
            raise ProfileError(f"{where}: {st.st_size:,} bytes, more than the {MAX_BYTES:,} a "
                               "baseline profile may have")
        try:
            with open(p, "rb") as f:
                raw = f.read(MAX_BYTES + 1)
        except OSError as exc:
            raise ProfileError(f"{where}: cannot be read ({exc.strerror or exc})") from None
        try:
            doc = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise ProfileError(f"{where}: not a baseline profile (not text)") from None
        except json.JSONDecodeError as exc:
            raise ProfileError(f"{where}: not a baseline profile (damaged JSON at line "
                               f"{exc.lineno}, column {exc.colno}: {exc.msg})") from None
        return cls.parse(doc, where)

    @classmethod
    def parse(cls, doc: Any, path: str | None = None) -> Profile:
        """Check a document and make it a profile (``path``: where it was read, for messages).

        Raises
        ------
        ProfileError
            Not a profile, another version, or a field missing or malformed (named).
        """
        where = path or "baseline profile"
        if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
            raise ProfileError(f"{where}: not a baseline profile (its 'format' is not "
                               f"{FORMAT!r}; fit one with idt-desk fit)")
        version = doc.get("version")
        if version != VERSION:
            by = doc.get("made_by")
            raise ProfileError(f"{where}: a profile of version {version!r}"
                               f"{f' (made by {by})' if isinstance(by, str) else ''}; this "
                               f"idt-desk reads version {VERSION}: fit it again here")
        raw = canonical(doc)
        doc = json.loads(raw)  # JSON's own values: NaN is null, tuples are lists
        try:
            _check_document(doc)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            text = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            raise ProfileError(f"{where}: a damaged profile ({text.strip(chr(39))})") from None
        return cls(doc, hashlib.sha256(raw).hexdigest(), path)

    @classmethod
    def of(cls, value: Any) -> Profile:
        """A profile from a path, a :class:`Profile`, or the setting a recording holds it by.

        Raises
        ------
        ProfileError
            See :meth:`read` and :meth:`parse`; a setting whose digest does not match.
        TypeError
            Anything else.
        """
        if isinstance(value, Profile):
            return value
        if isinstance(value, str | os.PathLike):
            return cls.read(value)
        if isinstance(value, Mapping) and "document" in value:
            path = value.get("path")
            got = cls.parse(value["document"], str(path) if path else None)
            if value.get("digest") not in (None, got.digest):
                raise ProfileError(f"{got.name}: damaged (its digest is {got.digest[:12]}, "
                                   f"the recording says {str(value['digest'])[:12]})")
            return got
        raise TypeError(f"baseline must be a profile's path or an idt_desk Profile, got "
                        f"{type(value).__name__}")

    # -- what it holds -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The file's path, or "the baseline profile" with its digest."""
        return self.path or f"baseline profile {self.digest[:12]}"

    @property
    def loop(self) -> dict[str, Any]:
        """The loop it was fitted on.

        Its ``source``, ``env_id``, ``state_names``, ``action_names``, ``rate``,
        ``episode_steps``.
        """
        return self.document["loop"]

    @property
    def pipeline(self) -> dict[str, Any]:
        """The pipeline settings it was fitted under (the preset by value: ``preset_spec``)."""
        return self.document["pipeline"]

    @property
    def fitted(self) -> dict[str, Any]:
        """What the pipeline fitted (:meth:`idt_desk.pipeline.Pipeline.fitted`)."""
        return self.document["fitted"]

    @property
    def n_windows(self) -> int:
        """Windows its baseline was fitted on."""
        return int(self.fitted["monitor"]["n_windows"])

    def setting(self) -> dict[str, Any]:
        """The pipeline setting that carries it: path, digest and the document by value."""
        return {"path": self.path, "digest": self.digest, "document": self.document}

    def reference(self) -> dict[str, Any]:
        """What names it in a session's events: path, digest, what it was fitted on."""
        return {"path": self.path, "digest": self.digest,
                "fitted_on": self.document.get("fitted_on", []),
                "windows": self.n_windows, "created": self.document.get("created")}

    def describe(self) -> str:
        """One line: "profile runs/p.json (3a5f…), 1,180 windows of 3 runs, mewma, 1/10h"."""
        runs = self.document.get("fitted_on") or []
        of = f" of {len(runs)} run{'s' * (len(runs) != 1)}" if runs else ""
        p = self.pipeline
        return (f"profile {self.name} ({self.digest[:12]}), {self.n_windows:,} windows{of}, "
                f"{p.get('detector')}, {p.get('false_alarms')}")

    # -- writing -----------------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> Profile:
        """Write it to ``path`` (replaced whole; a link there is replaced, never followed).

        Returns the profile as read from there (its ``path`` set).
        """
        p = Path(path)
        if p.is_dir():
            raise ProfileError(f"{p}: a folder; give the profile's file name (e.g. "
                               f"{p / 'baseline.json'})")
        if not p.parent.is_dir():
            raise ProfileError(f"{p}: its folder {p.parent} does not exist")
        data = json.dumps(json_safe(self.document), indent=1, allow_nan=False).encode("utf-8")
        replace_whole(p, data + b"\n")
        return Profile(self.document, self.digest, str(p))

    # -- using it ----------------------------------------------------------------------------

    def settle(self, config: Any) -> None:
        """Put the profile's settings into a session's ``config`` (before its defaults).

        A :data:`FIXED` setting the config leaves unset (None, or the settings table's
        default) becomes the profile's; one set to another value is refused. The preset
        becomes the profile's where none is named (a named one is checked by
        :meth:`check_loop`). ``config.profile`` is set to :meth:`setting`.

        Raises
        ------
        ProfileError
            A setting given that differs from the profile's, named.
        """
        p = self.pipeline
        theirs = {**{k: p.get(k) for k in FIXED},
                  "twin": self.fitted.get("twin") is not None}
        for key in FIXED:
            mine = getattr(config, key)
            if mine is None or (key in DEFAULTS and mine == DEFAULTS[key]) or \
                    mine == theirs[key]:
                setattr(config, key, theirs[key])
                continue
            if key == "twin":
                raise ProfileError(f"{self.name}: fitted with a twin (it judges the residual of "
                                   "the physics); this loop has none" if theirs[key] else
                                   f"{self.name}: fitted without a twin; this session asks "
                                   "for one (twin=False, --no-twin)")
            raise ProfileError(f"{self.name}: fitted with {key} {theirs[key]!r}; this session "
                               f"asks for {mine!r} (leave it unset, or fit a profile with it)")
        if config.preset is None and not config.preset_spec:
            config.preset_spec = dict(p["preset_spec"])
        config.profile = self.setting()

    def check_loop(self, source: Any, preset: Any = None) -> None:
        """Refuse a loop the profile was not fitted on, in one line naming the difference.

        ``source`` declares the loop (its ``state_names``, ``action_names``, ``passive``,
        ``rate``, ``episode_steps``, ``env_id`` where it has one); ``preset`` is the
        session's, resolved (None: not checked yet).

        Raises
        ------
        ProfileError
            Other state or action variables, another env id, rate, episode length or preset.
        """
        loop = self.loop
        why = ""
        mine_s = tuple(source.state_names)
        mine_a = None if getattr(source, "passive", False) else tuple(source.action_names)
        theirs_s, theirs_a = _names(loop["state_names"]), _names(loop.get("action_names"))
        env_mine, env_theirs = getattr(source, "env_id", None), loop.get("env_id")
        if env_mine and env_theirs and env_mine != env_theirs:
            why = f"fitted on {env_theirs}; this loop is {env_mine}"
        elif mine_s != theirs_s:
            pairs = enumerate(zip(mine_s, theirs_s, strict=False))
            first = next((j for j, (a, b) in pairs if a != b), min(len(mine_s), len(theirs_s)))
            why = (f"fitted on state variables {_listed(theirs_s)}; this loop has "
                   f"{_listed(mine_s)} (they differ at variable {first})")
        elif mine_a != theirs_a:
            why = (f"fitted on action variables {_listed(theirs_a)}; this loop has "
                   f"{_listed(mine_a)}")
        elif not math.isclose(float(source.rate), float(loop["rate"]), rel_tol=1e-9):
            why = (f"fitted at {float(loop['rate']):g} transitions a second; this loop runs at "
                   f"{float(source.rate):g}")
        elif loop.get("episode_steps") and source.episode_steps and \
                int(loop["episode_steps"]) != int(source.episode_steps):
            why = (f"fitted on episodes of {int(loop['episode_steps']):,} steps; this loop's "
                   f"are {int(source.episode_steps):,}")
        elif preset is not None:
            mine, spec = preset.to_dict(), dict(self.pipeline["preset_spec"])
            diff = [k for k in ("name", "bins", "window", "stride", "state_groups",
                                "action_groups", "parts", "angles", "angle_mode")
                    if json_safe(mine.get(k)) != json_safe(spec.get(k))]
            if diff:
                said = ", ".join(f"{k} {spec.get(k)!r}" for k in diff[:3])
                now = ", ".join(f"{k} {mine.get(k)!r}" for k in diff[:3])
                why = f"fitted with preset {said}; this session's has {now}"
        if why:
            raise ProfileError(f"{self.name}: {why}")

    def arm(self, pipeline: Any) -> None:
        """Load the fitted symbols, twin and baseline into ``pipeline``.

        See :meth:`idt_desk.pipeline.Pipeline.load_fitted`.

        Raises
        ------
        ProfileError
            What the pipeline refused, named.
        """
        try:
            pipeline.load_fitted(self.fitted)
        except ValueError as exc:
            raise ProfileError(f"{self.name}: {exc}") from None


def _check_document(doc: Mapping[str, Any]) -> None:
    """Every part a session reads, rebuilt once: a damaged field is said at load, not later."""
    loop = doc["loop"]
    if not isinstance(loop.get("state_names"), list) or not loop["state_names"]:
        raise ValueError("loop.state_names must be a list of names")
    if loop.get("action_names") is not None and not isinstance(loop["action_names"], list):
        raise ValueError("loop.action_names must be a list of names or null")
    if not (isinstance(loop.get("rate"), int | float) and loop["rate"] > 0):
        raise ValueError("loop.rate must be a positive number")
    pipe = doc["pipeline"]
    if not isinstance(pipe, Mapping) or not isinstance(pipe.get("preset_spec"), Mapping):
        raise ValueError("pipeline.preset_spec must be the preset by value")
    fitted = doc["fitted"]
    sym = fitted.get("symbols")
    if sym is not None:
        for key in ("state", "action"):
            if sym.get(key) is not None and not Symbolizer.from_dict(sym[key]).calibrated:
                raise ValueError(f"fitted.symbols.{key} is not calibrated")
    mon = fitted["monitor"]
    if not isinstance(mon.get("metrics"), list) or not mon["metrics"]:
        raise ValueError("fitted.monitor.metrics must list the metrics judged")
    if not (isinstance(mon.get("n_windows"), int) and mon["n_windows"] >= 2):
        raise ValueError("fitted.monitor.n_windows must be a count of at least 2")
    for c in (mon.get("calibrations") or {}).values():
        Calibration.from_dict(c)
    if mon.get("phase_baseline") is not None:
        PhaseBaseline.from_dict(mon["phase_baseline"])
    twin = fitted.get("twin")
    if twin is not None and len(twin["scale"]) != len(loop["state_names"]):
        raise ValueError("fitted.twin.scale must have one value per state variable")


def profile_document(session: Any, fitted_on: list[dict[str, Any]] | None = None
                     ) -> dict[str, Any]:
    """The profile of a session whose baseline is complete.

    What its pipeline fitted, the settings it fitted under and its loop.

    ``session`` is a :class:`~idt_desk.live.session.Session` (or anything with its
    ``source``, ``preset``, ``pipeline``, ``pipeline_settings()``); ``fitted_on`` lists the
    runs (``{"run": path, "transitions": n}``) it was fitted on.

    Raises
    ------
    ProfileError
        Symbols or baseline not fitted yet (the progress said), or a dialogue's turn path.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        made_by = f"idt-desk {version('idt-desk')}"
    except PackageNotFoundError:  # a source tree not installed
        made_by = "idt-desk"
    try:
        fitted = session.pipeline.fitted()
    except ValueError as exc:
        raise ProfileError(f"no baseline to save yet: {exc}") from None
    src = session.source
    pipe = {k: v for k, v in session.pipeline_settings().items() if k != "profile"}
    pipe.update(preset=None, preset_spec=session.preset.to_dict())
    return {"format": FORMAT, "version": VERSION, "made_by": made_by,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "fitted_on": list(fitted_on or []),
            "loop": {"source": getattr(src, "recorded_source", None) or src.name,
                     "env_id": getattr(src, "env_id", None),
                     "state_names": list(src.state_names),
                     "action_names": None if src.passive else list(src.action_names),
                     "rate": float(src.rate), "episode_steps": src.episode_steps},
            "pipeline": pipe, "fitted": fitted}


def save_baseline(session: Any, path: str | os.PathLike,
                  fitted_on: list[dict[str, Any]] | None = None) -> Profile:
    """Save the baseline a session fitted (:func:`profile_document`) to ``path``."""
    return Profile.parse(profile_document(session, fitted_on)).save(path)


class FitCheck:
    """A session's first :data:`FIT_CHECK_WINDOWS` judged windows against the profile's spread.

    Each judged metric's mean z over those windows (the detectors' own standardisation: the
    IDT's components, the twin's residual channels, the reward; not the median: a window's H_f
    is skewed, its median z below 0 on a healthy loop) beyond :data:`FIT_CHECK_Z`: the loop
    does not sit where the profile's did. Either it is broken, or it is not the loop the
    profile was fitted on (another agent, another gait); the alarm cannot tell which, so the
    verdict says both, and how to refit if it is healthy.
    """

    def __init__(self, profile: Profile, windows: int = FIT_CHECK_WINDOWS) -> None:
        self.profile = profile
        self.windows = int(windows)
        self._z: dict[str, list[float]] = {}
        self._n = 0
        #: The verdict once made (None before).
        self.verdict: dict[str, Any] | None = None

    def add(self, z: Mapping[str, np.ndarray]) -> dict[str, Any] | None:
        """Take judged windows' z (per metric); the verdict on the window that completes it."""
        if self.verdict is not None or not z:
            return None
        need = self.windows - self._n
        for m, v in z.items():
            self._z.setdefault(m, []).extend(np.asarray(v, dtype=np.float64)[:need].tolist())
        self._n += min(need, len(next(iter(z.values()))))
        if self._n < self.windows:
            return None
        med = {}
        for m, v in self._z.items():
            x = np.asarray(v)
            x = np.clip(x[~np.isnan(x)], -1e3, 1e3)  # a flat channel's ±inf: far off
            med[m] = float(np.mean(x)) if x.size else math.nan
        off = {m: v for m, v in med.items() if math.isfinite(v) and abs(v) > FIT_CHECK_Z}
        fits = not off
        if fits:
            said = (f"the first {self.windows} windows sit within the profile's spread "
                    f"(mean |z| ≤ {FIT_CHECK_Z:g})")
        else:
            top = max(off, key=lambda m: abs(off[m]))
            said = (f"the first {self.windows} windows sit outside the profile's spread "
                    f"({top} mean {off[top]:+.1f}σ): this loop is broken, or it is not the "
                    "loop the profile was fitted on (another agent, another gait); if it is "
                    "healthy, refit the baseline on it (the window's Recalibrate, "
                    "refit_baseline() of IDTMonitor or Recorder)")
        self.verdict = {"fits": fits, "windows": self.windows,
                        "mean_z": {m: (None if not math.isfinite(v) else round(v, 3))
                                     for m, v in med.items()},
                        "said": said, "profile": self.profile.digest}
        return self.verdict
