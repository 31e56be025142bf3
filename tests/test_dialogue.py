"""The dialogue source against the suite's own Ollama-protocol server, with the real client."""

from __future__ import annotations

import math
import time
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import sentencepiece as spm
from idt_desk_sources.dialogue import DialogueSource
from idt_desk_sources.replay import ReplaySource

from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.live.source import check_source
from idt_desk.metrics.tokens import load_tokenizer, pooled_metrics
from idt_desk.recordings import export_recording, load_recording
from tests.cli_call import call
from tests.fake_ollama import FakeOllama

MODELS = {"student_model": "student:1b", "teacher_model": "teacher:1b"}


@pytest.fixture
def server():
    with FakeOllama() as srv:
        yield srv


def _session(server, tmp_path=None, baseline=5, detector="persistence", **settings
             ) -> Session:
    src = DialogueSource(host=server.host, **{**MODELS, **settings})
    return Session(SessionConfig(source="dialogue", speed=None, baseline_windows=baseline,
                                 detector=detector),
                   source=src, record=None if tmp_path is None else tmp_path / "rec")


def _hold(session: Session, at_least: int) -> int:
    """Start, let ``at_least`` turns pass, pause between turns; the turns done."""
    session.start()
    _wait(session, lambda s: s.n_transitions >= at_least)
    session.pause()
    _wait(session, lambda s: s.state == "paused")
    return session.snapshot(limit=1).n_transitions


def _student_calls(server) -> int:
    return sum(r["model"] == "student:1b" for r in server.requests if r["path"] == "/api/chat")


def _wait(session: Session, cond, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond(session.snapshot(limit=1)):
        assert time.monotonic() < end, session.snapshot(limit=1)
        time.sleep(0.02)


# -- the metrics --------------------------------------------------------------------------


def _entropy(tokens) -> float:
    counts = Counter(tokens)
    n = sum(counts.values())
    return -sum(c / n * math.log2(c / n) for c in counts.values()) if n else 0.0


def test_pooled_metrics_by_hand():
    # S = "a a", A = "b", S' = "b": H(S)=0, H(A)=0, H(S')=0, H(S,A)=h(1/3), H(S,A,S')=1.
    v = pooled_metrics(np.array([1, 1]), np.array([2]), np.array([2]), 5)
    h13 = -(1 / 3 * math.log2(1 / 3) + 2 / 3 * math.log2(2 / 3))
    assert v["H_S"] == v["H_A"] == v["H_S_next"] == 0.0
    assert v["H_SA"] == pytest.approx(h13)
    assert v["H_SAS"] == pytest.approx(1.0)
    assert v["MI"] == pytest.approx(h13 - 1.0)  # negative: pooling is not a joint
    assert math.isnan(v["P"])  # no entropy in any marginal: undefined, not 0
    assert v["dH"] == pytest.approx(-h13)
    assert v["K_SAS"] == 2 and v["unique_frac"] == pytest.approx(0.5)


def test_per_turn_metrics_equal_an_independent_computation(server, tmp_path):
    ses = _session(server, tmp_path)
    ses.schedule(4, "modulate", name="input_filter", params={"keep_turns": 2})
    ses.schedule(7, "perturb", name="topic_shift", params={"variant": 1})
    run_headless(ses, steps=10)
    rec = load_recording(tmp_path / "rec")
    assert rec.complete, rec.warnings
    turns = rec.turns
    assert [t["turn"] for t in turns] == list(range(1, 11))
    assert rec.config["tokenizer"]["vocab"] == 32000
    sp = spm.SentencePieceProcessor(model_file=str(load_tokenizer().path))
    by_turn = {t["turn"]: t for t in turns}
    gated = [t["turn"] for t in turns if t["context_start"] > 1]
    assert gated and all(by_turn[t]["context_start"] == t - 2 for t in gated)
    assert turns[7]["next_prompt"].startswith("Let's change the subject entirely")
    assert turns[8]["prompt"] == turns[7]["next_prompt"]
    for turn, (_, w) in zip(turns, rec.windows.iterrows(), strict=True):
        s_text = [x for j in range(turn["context_start"], turn["turn"])
                  for x in (by_turn[j]["prompt"], by_turn[j]["reply"])] + [turn["prompt"]]
        s = [tok for text in s_text for tok in sp.encode(text)]
        a, n = sp.encode(turn["reply"]), sp.encode(turn["next_prompt"])
        hs, ha, hn = _entropy(s), _entropy(a), _entropy(n)
        hsa, hsan = _entropy(s + a), _entropy(s + a + n)
        mi = hsa + hn - hsan
        assert w["P"] == pytest.approx(mi / (hs + ha + hn), rel=1e-12)
        assert w["H_f"] == pytest.approx(hsan - hsa, rel=1e-12)
        assert w["H_b"] == pytest.approx(hsan - hn, rel=1e-12)
        assert w["dH"] == pytest.approx(hn - hsa, rel=1e-12)
        assert w["start"] == turn["i"] and w["end"] == turn["i"] + 1
    # Every turn's texts and settings are in the recording beside the metrics.
    assert turns[0]["student"] == {"backend": "ollama", "model": "student:1b"}
    assert turns[0]["options"]["temperature"] == 0.7 and turns[0]["options"]["top_k"] == 40
    assert turns[7]["injected"] == {"type": "topic_shift", "variant": 1}
    assert turns[8]["prompt_injected"] == {"type": "topic_shift", "variant": 1}


def test_replay_recomputes_the_metrics_identically(server, tmp_path):
    ses = _session(server, tmp_path)
    ses.schedule(6, "perturb", name="non_sequitur", params={})
    run_headless(ses, steps=9)
    rec = load_recording(tmp_path / "rec")
    # The recording states what applies to a dialogue: tokenizer and baseline turns, no
    # symbol settings (bins, window, stride, calibration, preset).
    session_cfg = rec.config["session"]
    assert session_cfg["metric_path"] == "turns" and session_cfg["baseline_windows"] == 5
    assert not set(SessionConfig.SYMBOL_FIELDS) & set(session_cfg)
    assert rec.config["preset"] is None
    start = rec.events[rec.events["kind"] == "recording_start"].iloc[0]["pipeline"]
    assert "bins" not in start and start["detector"] == "persistence"
    replay = Session(SessionConfig(source="replay", speed=None),
                     source=ReplaySource(path=str(tmp_path / "rec")))
    run_headless(replay)
    w = replay.snapshot().windows
    for col in ("P", "H_f", "H_b", "dH", "x_IDT"):
        np.testing.assert_array_equal(w[col], rec.windows[col].to_numpy())
    assert [e["i"] for e in replay.snapshot().events if e["kind"] == "perturbation_pulse"] == [6]
    # Export keeps the texts: turns.parquet beside the tables.
    paths = export_recording(rec, tmp_path / "out", "parquet")
    turns = pd.read_parquet(tmp_path / "out" / "turns.parquet")
    assert tmp_path / "out" / "turns.parquet" in paths
    assert list(turns["reply"]) == [t["reply"] for t in rec.turns]


def test_recording_started_mid_dialogue_replays(server, tmp_path):
    ses = _session(server)
    ses.limit = 8
    ses.schedule(5, "note", text="recording from here")
    ses.start()
    _wait(ses, lambda s: s.n_transitions >= 3)
    ses.start_recording(tmp_path / "late")
    assert ses.wait(30)
    ses.stop()
    rec = load_recording(tmp_path / "late")
    history = [t for t in rec.turns if t.get("history")]
    assert history and [t["turn"] for t in history] == list(range(1, len(history) + 1))
    replay = Session(SessionConfig(source="replay", speed=None),
                     source=ReplaySource(path=str(tmp_path / "late")))
    run_headless(replay)
    np.testing.assert_array_equal(replay.snapshot().windows["P"], rec.windows["P"].to_numpy())


# -- the paper schedule, modulation, Auto -------------------------------------------------


def test_paper_schedule_injects_at_turn_31(server, tmp_path):
    ses = _session(server, tmp_path, baseline=30)
    ses.schedule(0, "perturb", name="paper_schedule", params={"type": "non_sequitur"})
    run_headless(ses, steps=33)
    rec = load_recording(tmp_path / "rec")
    injected = [t["turn"] for t in rec.turns if t["injected"]]
    assert injected == [31]
    assert rec.turns[30]["next_prompt"].startswith("I had a sandwich yesterday")
    pulses = rec.events[rec.events["kind"] == "perturbation_pulse"]
    assert list(pulses["i"]) == [30] and list(pulses["name"]) == ["non_sequitur"]
    base = rec.events[rec.events["kind"] == "baseline"]
    assert list(base["i"]) == [30]  # the baseline is turns 1-30
    assert np.isnan(rec.windows["x_IDT"].to_numpy()[:30]).all()
    assert np.isfinite(rec.windows["x_IDT"].to_numpy()[30:]).all()


def test_hold_lowers_the_students_sampling(server):
    ses = _session(server, condition="normal")
    ses.schedule(2, "modulate", name="hold", params={"temperature": 0.2, "top_k": 5})
    run_headless(ses, steps=4)
    student = [r["options"] for r in server.requests
               if r["path"] == "/api/chat" and r["model"] == "student:1b"]
    assert [(o["temperature"], o["top_k"]) for o in student] == \
        [(0.7, 40), (0.7, 40), (0.2, 5), (0.2, 5)]
    assert all(o["num_predict"] == 150 and o["num_ctx"] == 4096 and o["top_p"] == 0.9
               and o["repeat_penalty"] == 1.1 for o in student)


def test_context_gating_limits_what_the_student_is_sent(server):
    ses = _session(server)
    ses.schedule(3, "modulate", name="input_filter", params={"keep_turns": 1})
    run_headless(ses, steps=5)
    sent = [len(r["messages"]) for r in server.requests
            if r["path"] == "/api/chat" and r["model"] == "student:1b"]
    # system + (turns kept x 2) + the prompt: 0, 1, 2 earlier turns, then 1 kept.
    assert sent == [2, 4, 6, 4, 4]


def test_auto_controller_gates_the_context_on_an_alarm(server):
    ses = _session(server, baseline=4, detector="paper")  # the gating, on a 4-turn baseline
    ses.set_auto({"modulation": "input_filter", "params": {"keep_turns": 1}, "persist": 1,
                  "release": 50})
    for at in range(6, 12):
        ses.schedule(at, "perturb", name="custom", params={"text": "zebra " * 40})
    run_headless(ses, steps=14)
    snap = ses.snapshot()
    on = [e for e in snap.events if e["kind"] == "modulation_on"]
    assert on and on[0]["auto"] and on[0]["name"] == "input_filter"
    turns = snap.info["transcript"]
    after = [t for t in turns if t["i"] > on[0]["i"]]
    assert after and all(t["context_start"] == t["turn"] - 1 for t in after)


def test_conforms_to_the_source_interface(server):
    check_source(DialogueSource, {"host": server.host, **MODELS})


# -- failures -------------------------------------------------------------------------------


@pytest.mark.parametrize(("failure", "phrase"), [
    ("error", "reported an error during the reply of student:1b: model runner crashed"),
    ("drop", "dropped during the reply of student:1b"),
    ("stall", "sent nothing for 1 s during the reply of student:1b"),
    ("half_json", "malformed stream line"),
    ("no_done", "ended the reply stream of student:1b before it was done"),
])
def test_a_failure_mid_reply_pauses_keeps_the_partial_and_resumes(server, tmp_path, failure,
                                                                   phrase):
    ses = _session(server, tmp_path, timeout=1.0)
    n = _hold(ses, 2)
    # The next call is the student's reply of turn n + 1 (its teacher prompt is in hand).
    server.failures.append(failure)
    ses.resume()
    _wait(ses, lambda s: s.paused_reason is not None)
    snap = ses.snapshot()
    assert phrase in snap.paused_reason and snap.paused_reason.startswith("student: ")
    ev = [e for e in snap.events if e["kind"] == "source_paused"][-1]
    assert ev["turn"] == n + 1 and ev["role"] == "student"
    if failure in ("error", "drop", "half_json", "no_done"):
        assert ev["partial"].startswith("student says") and ev["partial_kept"]
    assert snap.n_transitions == n
    ses.limit = n + 3
    ses.resume()
    assert ses.wait(30)
    ses.stop()
    rec = load_recording(tmp_path / "rec")
    assert rec.complete, rec.warnings
    assert [t["turn"] for t in rec.turns] == list(range(1, n + 4))
    assert (rec.events["kind"] == "source_paused").sum() == 1
    assert ses.snapshot().paused_reason is None
    # The failed reply was asked again: one more student call than turns.
    assert _student_calls(server) == n + 4


def test_a_teacher_failure_keeps_the_students_reply(server):
    ses = _session(server)
    n = _hold(ses, 1)
    # Turn n + 1: the student's reply arrives ("fine" is no failure), the teacher's drops.
    server.failures.extend(["fine", "drop"])
    ses.resume()
    _wait(ses, lambda s: s.paused_reason is not None)
    assert ses.snapshot().paused_reason.startswith("teacher: ")
    ses.limit = n + 2
    ses.resume()
    assert ses.wait(30)
    ses.stop()
    # Turn n + 1's reply was not asked again: one student call per turn.
    assert _student_calls(server) == n + 2
    turns = ses.snapshot().info["transcript"]
    assert [t["turn"] for t in turns] == list(range(1, n + 3))


def test_unreachable_host_names_it_and_how_to_start_ollama(tmp_path):
    rc, _, err = call(["run", "--source", "dialogue", "--set", "host=http://127.0.0.1:9",
                       "--steps", "3", "--quiet", "--record", str(tmp_path / "r")])
    assert rc == 2
    line = err.strip().splitlines()[-1]
    assert line == ("idt-desk run: teacher: Ollama is not answering at http://127.0.0.1:9: "
                    "start it with `ollama serve` (or set the dialogue's host to where it "
                    "runs)")
    assert load_recording(tmp_path / "r").complete


def test_missing_model_says_which_pull_to_run(server):
    ses = _session(server, teacher_model="llama3.1:8b")
    ses.start()
    _wait(ses, lambda s: s.state == "paused")
    assert ses.snapshot().paused_reason == (
        f"teacher: the model llama3.1:8b is not on the Ollama server at {server.host}: run "
        "`ollama pull llama3.1:8b`")
    ses.stop()


def test_stop_during_a_stall_returns_at_once(server):
    server.stall_seconds = 20.0
    ses = _session(server, timeout=60.0)
    server.failures.append("stall")  # the opening teacher prompt stalls
    ses.start()
    _wait(ses, lambda s: len(server.requests) >= 2)  # /api/show, then the chat
    time.sleep(0.3)
    assert ses.snapshot(limit=1).n_transitions == 0
    ses.stop(timeout=2)  # raises if the worker is still reading


@pytest.mark.parametrize(("env", "host"), [
    ("", "http://127.0.0.1:11434"),
    ("0.0.0.0", "http://127.0.0.1:11434"),  # a server's bind-all address: this machine
    ("gpu-box", "http://gpu-box:11434"),
    ("gpu-box:8080", "http://gpu-box:8080"),
    ("https://gpu.example.org", "https://gpu.example.org:443"),
    ("http://10.0.0.2:11434/", "http://10.0.0.2:11434"),
])
def test_default_host_reads_ollama_host_as_the_client_does(monkeypatch, env, host):
    from idt_desk_sources.dialogue._backends import default_host

    monkeypatch.setenv("OLLAMA_HOST", env)
    assert default_host() == host


def test_a_dialogues_alarm_defaults_count_turns(server):
    ses = _session(server, baseline=30)
    c = ses.config
    # One window per turn, an injection is one turn: no persistence over several, a budget
    # in turns (loop time of a dialogue).
    assert (c.detector, c.persist, c.false_alarms) == ("persistence", 1, "1/100turns")
    assert ses.monitor.describe() == ("calibrated |z| > k (each window), "
                                      "≤ 1 false alarm / 100 turns")
    assert ses.monitor.overlap == 1.0


def test_run_reports_a_dialogue_in_turns(server):
    rc, out, _err = call(["run", "--source", "dialogue", "--set", f"host={server.host}",
                          "--set", "student_model=student:1b", "--set",
                          "teacher_model=teacher:1b", "--steps", "4", "--quiet",
                          "--baseline-windows", "3"])
    assert rc == 0
    assert "dialogue: 4 turns, state stopped" in out
    assert "baseline 3 turns" in out and "windows" not in out.split("alarm:")[1]
    assert "length confound: r with log(1 + tokens) of S' over turns 1-3: P " in out


@pytest.mark.parametrize("baseline, warned", [(30, []), (33, ["contradiction"])])
def test_a_schedule_is_no_perturbation_of_the_baseline_its_injections_are(server, baseline,
                                                                          warned):
    """The paper schedule, on from turn 1, injects at turn 31: after a 30-turn baseline (no
    word), inside a 33-turn one (the injection is said to fall into it)."""
    ses = _session(server, baseline=baseline)
    ses.schedule(0, "perturb", name="paper_schedule", params={"type": "contradiction"})
    run_headless(ses, steps=32)
    overlaps = [e for e in ses.events_since(0) if e["kind"] == "baseline_overlap"]
    assert [e["name"] for e in overlaps] == warned
    assert all(e["i"] == 30 and e["end"] == baseline for e in overlaps)


def test_an_armed_schedule_is_no_onset_and_no_shaded_period(server):
    """Being on, the paper schedule starts no latency and the plots shade no period for it
    (they shaded the whole baseline and the panel said 'Paper schedule on: not detected
    yet'); a replay of a recording made before the event said so takes it so too."""
    from idt_desk_widgets.periods import periods_of

    ses = _session(server, baseline=30)
    ses.schedule(0, "perturb", name="paper_schedule", params={"type": "contradiction"})
    run_headless(ses, steps=3)
    assert ses.snapshot(1).onset is None
    (on,) = [e for e in ses.events_since(0) if e["kind"] == "perturbation_on"]
    assert on["scheduled"] is True and periods_of([on], now=3.0) == []
    noise = {"kind": "perturbation_on", "name": "noise", "t": 1.0}
    assert [p[:4] for p in periods_of([on, noise], now=3.0)] == [
        (1.0, 3.0, "perturbation", "noise")]
    shipped = ReplaySource(path="assets/recordings/dialogue-smollm2-contradictions")
    ons = [ev for _i, ev in shipped._events if ev["kind"] == "perturbation_on"]
    assert [(ev["name"], ev.get("scheduled")) for ev in ons] == [("paper_schedule", True)]


def test_the_embedder_loads_before_the_first_turn_so_a_stop_never_waits_for_it(server,
                                                                             monkeypatch):
    """The structural baselines' model loads when the loop begins, in its thread, before the
    source's first step; a stop asked during the first turn ends the session at once."""
    import threading

    from idt_desk.metrics import embeddings

    order: list[tuple[str, str]] = []
    real_load, real_step = embeddings.load_embedder, DialogueSource.step

    def load(*a, **k):
        order.append(("load", threading.current_thread().name))
        return real_load(*a, **k)

    def step(self, n):
        order.append(("step", threading.current_thread().name))
        return real_step(self, n)

    monkeypatch.setattr(embeddings, "load_embedder", load)
    monkeypatch.setattr(DialogueSource, "step", step)
    src = DialogueSource(host=server.host, **MODELS)
    s = Session(SessionConfig(source="dialogue", speed=None, baselines=True), source=src)
    s.start()
    _wait(s, lambda snap: any(k == "step" for k, _ in order) or snap.state != "running")
    t0 = time.monotonic()
    s.stop()
    assert time.monotonic() - t0 < 5.0
    assert [k for k, _ in order][:2] == ["load", "step"]
    assert order[0][1] == order[1][1] == f"idt-{src.name}"  # the loop's thread, not ours
