"""The live package's seams: collaborators own their state and reach the session by name.

A helper of :class:`~idt_desk.live.session.Session` takes one of the protocols in
``idt_desk.live.seams``, never ``session: Any``, and touches no other object's underscore
attributes; commands are dispatched by a table; each collaborator works with a stand-in.
"""

from __future__ import annotations

import ast
import time
from pathlib import Path

import numpy as np
import pytest

from idt_desk.live import seams
from idt_desk.live.commands import HANDLERS, Commands
from idt_desk.live.config import MAX_SPEED_CHUNKS
from idt_desk.live.session import Session, SessionConfig
from idt_desk.live.worker import LoopState, Pacer

LIVE = Path(__file__).resolve().parents[1] / "idt_desk" / "live"


def _reach_ins(tree: ast.AST) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls`` (dunders aside)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
                not node.attr.startswith("__"):
            base = node.value
            if not (isinstance(base, ast.Name) and base.id in ("self", "cls")):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def _any_sessions(tree: ast.AST) -> list[str]:
    """Parameters named like a session or host annotated ``Any``."""
    return [f"{node.lineno}: {node.arg}" for node in ast.walk(tree)
            if isinstance(node, ast.arg) and node.annotation is not None
            and ast.unparse(node.annotation) in ("Any", "typing.Any")
            and node.arg in ("session", "ses", "host", "owner")]


def test_no_helper_reaches_into_another_objects_private_state():
    bad = {}
    for f in sorted(LIVE.glob("*.py")):
        tree = ast.parse(f.read_text())
        found = _reach_ins(tree) + _any_sessions(tree)
        if found:
            bad[f.name] = found
    assert bad == {}


def test_the_checker_sees_a_reach_in():
    """The AST check above fails on the forms it forbids (it is not vacuous)."""
    tree = ast.parse("def f(session: Any):\n    session._event('x')\n    self.s._r = 1\n")
    assert len(_reach_ins(tree)) == 2
    assert _any_sessions(tree) == ["1: session"]


def _members(proto: type) -> set[str]:
    """A protocol's attributes and methods, its bases' in this module included."""
    names: set[str] = set()
    for base in proto.__mro__:
        if base.__module__ == seams.__name__:
            names |= set(getattr(base, "__annotations__", {}))
            names |= {n for n in vars(base) if not n.startswith("_")}
    return names


def test_a_session_and_its_collaborators_offer_what_the_seams_name():
    s = Session(SessionConfig(source="pendulum", speed=None))
    offered = {seams.EventLog: s, seams.CalibrationHost: s, seams.RecordedHost: s,
               seams.CommandHost: s, seams.LoopHost: s, seams.LoopControl: s.loop_state,
               seams.Pace: s.pacer, seams.CommandQueue: s.commands, seams.Recording: s.sink,
               seams.AlarmState: s.alarms, seams.Runnable: s}
    for proto, obj in offered.items():
        missing = sorted(n for n in _members(proto) if not hasattr(obj, n))
        assert missing == [], f"{proto.__name__}: {type(obj).__name__} lacks {missing}"
    # Every protocol of the module is checked here (but the dialogue's, below).
    protocols = {v for v in vars(seams).values() if isinstance(v, type) and
                 v.__module__ == seams.__name__}
    assert protocols - set(offered) == {seams.Dialogue}


def test_a_dialogue_session_offers_its_turn_path():
    pytest.importorskip("llama_cpp")
    s = Session(SessionConfig(source="dialogue", speed=None))
    missing = sorted(n for n in _members(seams.Dialogue) if not hasattr(s.turns, n))
    assert missing == []
    s.source.close()


def test_every_session_command_has_a_handler_and_an_unknown_one_is_refused():
    s = Session(SessionConfig(source="pendulum", speed=None))
    assert set(HANDLERS) == {"pause", "resume", "speed", "perturb", "modulate", "auto",
                             "calibrate_baseline", "reconfigure", "note", "record"}
    with pytest.raises(ValueError, match=r"unknown command 'explode'.*known: auto"):
        s.schedule(10, "explode")
    with pytest.raises(ValueError, match="unknown command"):
        Commands().put("explode", {})


class _Host:
    """A stand-in for the session: what the note, pause and resume handlers touch."""

    def __init__(self) -> None:
        self.n_transitions = 7
        self.loop_state, self.pacer, self.commands = LoopState(), Pacer(), Commands()
        self.logged: list[tuple[str, int | None, dict]] = []

    def event(self, kind: str, at: int | None = None, **fields: object) -> None:
        self.logged.append((kind, at, fields))


def test_commands_run_against_a_stand_in_in_schedule_order():
    host = _Host()
    c = host.commands
    c.schedule(9, "note", {"text": "late"})
    c.schedule(3, "pause", {})
    c.schedule(5, "note", {"text": "early"})
    assert c.next_due() == 3
    c.apply_due(host)  # n_transitions = 7: the two due, in transition order
    assert [k for k, _, _ in host.logged] == ["pause", "note"]
    assert host.logged[1][2] == {"text": "early"}
    assert host.loop_state.state == "paused" and host.loop_state.held
    assert c.next_due() == 9
    c.put("resume", {})
    c.put("note", {"bad": "no text"})  # a bad command is logged, the loop goes on
    c.drain(host)
    assert host.loop_state.state == "running" and not host.loop_state.held
    assert host.logged[-1][0] == "error" and "KeyError" in host.logged[-1][2]["message"]


def test_impulses_are_taken_once():
    c = Commands()
    c.arm_impulse("kick")
    assert c.take_impulses() == ["kick"]
    assert c.take_impulses() == []


def test_loop_state_keeps_the_first_error_and_a_stop_wakes_a_held_loop():
    run = LoopState()
    run.start()
    run.pause("server down")
    assert run.held and run.paused_reason == "server down"
    run.fail("OSError: disk full")
    run.fail("RuntimeError: later")
    assert run.state == "error" and run.error == "OSError: disk full"
    run.request_stop()
    assert run.stop_requested and not run.held


def test_the_pacer_gives_big_chunks_at_max_speed_and_waits_at_real_time():
    p = Pacer()
    assert p.allowance(0, None, 200.0, 10) == 10 * MAX_SPEED_CHUNKS
    assert p.allowance(0, None, 50.0, 10) == 10  # a slow source: one chunk at a time
    p.reset()
    # Real time at 100 transitions a second: nothing is due at once (it sleeps a slice).
    assert p.allowance(0, 1.0, 100.0, 10) == 0
    p.stepped(5, 0.0, 5)
    assert p.throughput > 0
    # A speed the machine cannot keep (10^8 transitions a second asked) falls behind at
    # once, yet each step stays the size of a maximum-speed one: the window gets the GIL.
    p.reset()
    p.allowance(0, 100_000.0, 1000.0, 10)
    time.sleep(0.05)  # 5 million transitions due by now
    assert p.allowance(0, 100_000.0, 1000.0, 10) == 10 * MAX_SPEED_CHUNKS


def test_a_pendulum_session_runs_the_same_through_its_collaborators(tmp_path):
    """A scheduled run gives its events at their exact transitions, recorded and not."""
    events = {}
    for record in (None, tmp_path / "rec"):
        s = Session(SessionConfig(source="pendulum", speed=None, seed=3, baseline_windows=50),
                    record=record)
        s.schedule(9000, "perturb", name="gravity", params={"factor": 1.3})
        s.schedule(9500, "note", text="n")
        s.limit = 12000
        s.start()
        assert s.wait(60)
        s.stop()
        events[record is None] = [(e["kind"], e["i"]) for e in s.events_since(0)
                                  if e["kind"] in ("perturbation_on", "note", "baseline")]
        assert s.state == "stopped"
        snap = s.snapshot(limit=10)
        assert np.isfinite(snap.windows["P"]).all()
    assert events[True] == events[False]
    assert ("perturbation_on", 9000) in events[True] and ("note", 9500) in events[True]


def test_a_paced_loop_that_fell_behind_never_races_to_make_it_up():
    """Behind by 0.3 s of wall time at 50× a 20 Hz loop (300 transitions due), it makes up
    at most CATCH_UP s (100 transitions) before it is paced again: never a loop that runs
    faster than asked for seconds after the machine was busy."""
    import time

    from idt_desk.live.worker import CATCH_UP, Pacer

    pacer, per_s = Pacer(), 50.0 * 20.0
    assert pacer.allowance(0, 50.0, 20.0, 10) >= 0  # anchors the pace
    time.sleep(0.3)
    done, granted = 0, 0
    while (n := pacer.allowance(done, 50.0, 20.0, 10)) > 0 and granted < 10_000:
        done += n
        granted += n
    assert 0 < granted <= per_s * (CATCH_UP + 0.05)
    # A slow loop (a dialogue: a turn every few seconds) still gets its one step when due.
    slow = Pacer()
    assert slow.allowance(0, 1.0, 2.0, 1) == 0  # anchored: nothing due yet
    time.sleep(0.6)
    assert slow.allowance(0, 1.0, 2.0, 1) == 1
