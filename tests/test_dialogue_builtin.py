"""The built-in offline model (the `llm` extra, installed by the README's test command).

llama.cpp runs in a child process of its own: these tests never load it into the test worker,
and kill that process by a signal mid-turn to show what a native crash does (a pause with one
line, the turns kept), not a lost worker.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import time

import pytest
from idt_desk_sources.dialogue import DialogueSource
from idt_desk_sources.dialogue._backends import MODEL_PROCESS, BackendError, BuiltinBackend

from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import load_recording
from tests.fake_ollama import FakeOllama

BUILTIN = {"student_backend": "builtin", "teacher_backend": "builtin"}


@pytest.fixture
def short_replies(monkeypatch):
    """Replies of a few dozen tokens (150 and 60 by default): the same model, process and
    turns, a third of the CPU time (what these tests show does not depend on the length)."""
    from idt_desk_sources.dialogue import _source

    monkeypatch.setitem(_source.STUDENT_OPTIONS, "num_predict", 40)
    monkeypatch.setitem(_source.TEACHER_OPTIONS, "num_predict", 24)


def test_a_real_five_turn_smollm2_dialogue_is_recorded_and_deterministic(tmp_path,
                                                                         short_replies):
    ses = Session(SessionConfig(source="dialogue", speed=None, baseline_windows=3, seed=7),
                  source=DialogueSource(**BUILTIN), record=tmp_path / "rec")
    ses.schedule(3, "perturb", name="topic_shift", params={})
    snap = run_headless(ses, steps=5)
    assert snap.error is None and snap.paused_reason is None
    rec = load_recording(tmp_path / "rec")
    assert rec.complete, rec.warnings
    turns = rec.turns
    assert [t["turn"] for t in turns] == [1, 2, 3, 4, 5]
    assert all(t["reply"].strip() and t["next_prompt"].strip() for t in turns)
    assert turns[0]["student"]["model"] == "SmolLM2-135M-Instruct"
    assert turns[0]["student"]["backend"] == "builtin" and turns[0]["student"]["threads"] == 1
    assert turns[3]["injected"]["type"] == "topic_shift"
    # The rotating teacher instruction keeps the questions apart.
    prompts = [t["prompt"] for t in turns] + [turns[-1]["next_prompt"]]
    assert len(set(prompts)) == len(prompts)
    assert rec.windows["P"].notna().all()
    # Same seed, another source and session: the same text.
    again = Session(SessionConfig(source="dialogue", speed=None, seed=7),
                    source=DialogueSource(**BUILTIN))
    run_headless(again, steps=2)
    texts = [(t["prompt"], t["reply"], t["next_prompt"])
             for t in again.snapshot().info["transcript"]]
    assert texts == [(t["prompt"], t["reply"], t["next_prompt"]) for t in turns[:2]]


def test_auto_uses_ollama_when_it_answers_else_the_builtin_model(monkeypatch):
    # Where it looks: $OLLAMA_HOST as the ollama CLI reads it (here: nothing listens on 9).
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:9")
    assert DialogueSource()._kind("student") == "builtin"
    with FakeOllama() as server:
        monkeypatch.setenv("OLLAMA_HOST", server.host.removeprefix("http://"))
        src = DialogueSource(student_model="student:1b")
        assert src._kind("teacher") == "ollama"
        assert src._backend("student").describe() == {"backend": "ollama",
                                                      "model": "student:1b"}
        assert any(r["path"] == "/api/show" for r in server.requests)
    # A host set explicitly is Ollama, answering or not (then an error, not a fallback).
    assert DialogueSource(host="http://127.0.0.1:9")._kind("student") == "ollama"


def test_the_extra_is_installed_and_llama_cpp_never_loads_in_this_process():
    # A missing extra fails, not skips; the model runs only in its own process.
    assert importlib.util.find_spec("llama_cpp") is not None
    BuiltinBackend(threads=1, role="check")
    assert MODEL_PROCESS.pid is not None and MODEL_PROCESS.pid != os.getpid()
    assert "llama_cpp" not in sys.modules


def test_the_installed_llama_cpp_is_the_portable_build():
    """The README's commands build llama.cpp for AVX2 with AVX-512 and AMX off: what this CPU
    advertises (AMX here, without the tile state a guest can use) does not decide it."""
    BuiltinBackend(threads=1, role="check")
    features = {part.split("=")[0].strip(): part.split("=")[1].strip()
                for part in MODEL_PROCESS.system_info.split("|") if "=" in part}
    assert features.get("AVX2") == "1", MODEL_PROCESS.system_info
    assert not {k for k, v in features.items() if k.startswith(("AVX512", "AMX")) and v == "1"}


OPTIONS = {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "num_predict": 40,
           "repeat_penalty": 1.1, "seed": 0}


@pytest.mark.parametrize("sig", [signal.SIGILL, signal.SIGKILL])
def test_a_model_process_killed_mid_reply_is_one_line_and_the_next_call_starts_another(sig):
    backend = BuiltinBackend(threads=1, role="kill-test")
    pid, pieces = MODEL_PROCESS.pid, []

    def on_text(text: str) -> None:
        pieces.append(text)
        if len(pieces) == 2:
            os.kill(pid, sig)

    with pytest.raises(BackendError) as err:
        backend.chat([{"role": "user", "content": "Tell me about the immune system."}],
                     OPTIONS, on_text, lambda: False)
    msg = str(err.value)
    assert msg.startswith(f"the built-in model stopped: {sig.name} (")
    assert msg.endswith("; the session keeps its turns") and "\n" not in msg
    assert err.value.partial == pieces[-1] and pieces[-1]  # what had arrived is kept
    reply = backend.chat([{"role": "user", "content": "Say hello."}], OPTIONS,
                         lambda _t: None, lambda: False)
    assert reply.strip() and MODEL_PROCESS.pid not in (None, pid)


def test_a_silent_model_process_is_stopped_after_the_timeout():
    backend = BuiltinBackend(threads=1, role="hang-test", timeout=2.0)
    pid = MODEL_PROCESS.pid
    os.kill(pid, signal.SIGSTOP)  # a hang: alive, saying nothing
    t0 = time.monotonic()
    with pytest.raises(BackendError, match="sent nothing for 2 s, so its process was stopped"):
        backend.chat([{"role": "user", "content": "Say hello."}], OPTIONS,
                     lambda _t: None, lambda: False)
    assert time.monotonic() - t0 < 10
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert backend.chat([{"role": "user", "content": "Say hello."}], OPTIONS,
                        lambda _t: None, lambda: False).strip()


def test_a_model_crash_mid_turn_pauses_the_session_which_keeps_its_turns(tmp_path,
                                                                         short_replies):
    """SIGILL in the model's process while the student answers turn 3: the session pauses
    with one line in its event log, the two turns made stay recorded, and a resume carries
    on with a new process."""
    ses = Session(SessionConfig(source="dialogue", speed=None, baseline_windows=3, seed=3),
                  source=DialogueSource(**BUILTIN), record=tmp_path / "rec")
    ses.limit = 4
    ses.start()
    killed = None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and ses.running:
            snap = ses.snapshot(limit=1)
            partial = (snap.info or {}).get("partial") or {}
            if (killed is None and snap.n_transitions == 2 and partial.get("role") == "student"
                    and partial.get("turn") == 3 and partial.get("text")):
                killed = MODEL_PROCESS.pid
                os.kill(killed, signal.SIGILL)
            if killed is not None and snap.paused_reason:
                break
            time.sleep(0.02)
        snap = ses.snapshot(limit=1)
        assert killed is not None and ses.running, "the session must outlive the model"
        assert snap.paused_reason.startswith("student: the built-in model stopped: SIGILL (")
        assert snap.paused_reason.endswith("the session keeps its turns")
        paused = [e for e in ses.events_since(0) if e["kind"] == "source_paused"]
        assert len(paused) == 1 and paused[0]["turn"] == 3 and paused[0]["partial_kept"]
        assert snap.n_transitions == 2
        ses.resume()
        deadline = time.monotonic() + 240
        while ses.running and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        ses.stop()
    rec = load_recording(tmp_path / "rec")
    assert rec.complete, rec.warnings
    assert [t["turn"] for t in rec.turns] == [1, 2, 3, 4]
    assert MODEL_PROCESS.pid not in (None, killed)
    assert "llama_cpp" not in sys.modules


def test_a_stop_interrupts_the_built_in_model_while_it_reads_the_prompt():
    """llama.cpp reads a prompt before the first piece (minutes for 4,000 tokens on a shared
    core): a stop asked then ends the reply at once, and the model goes on working after."""
    from idt_desk_sources.dialogue._backends import Stopped

    backend = BuiltinBackend(threads=1, role="stop-test")
    long = " ".join(["The immune system has many parts that work together."] * 150)
    messages = [{"role": "user", "content": long + " Summarise this."}]
    options = {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "num_predict": 20,
               "repeat_penalty": 1.1, "seed": 0}
    asked, pieces = [0], []

    def stop() -> bool:
        asked[0] += 1
        return asked[0] > 5  # asked while llama.cpp computes, before any piece

    with pytest.raises(Stopped):
        backend.chat(messages, options, pieces.append, stop)
    assert pieces == [] and asked[0] > 5
    reply = backend.chat([{"role": "user", "content": "Say hello."}], options,
                         pieces.append, lambda: False)
    assert reply.strip() and pieces


def test_bench_llama_times_the_installed_build_and_refuses_a_folder_without_one(tmp_path):
    from idt_desk_sources.dialogue.bench_llama import bench_llama

    lines: list[str] = []
    best = bench_llama(rounds=1, print_fn=lines.append)
    r = best["installed"]
    assert r["prompt_tokens"] > 300 and r["generated"] == 64
    assert r["prompt_tps"] > 0 and r["generate_tps"] > 0
    assert lines[-1].split()[0] == "installed" and "AVX2" in lines[-1]
    with pytest.raises(BackendError, match="holds no llama_cpp"):
        bench_llama(against=str(tmp_path), rounds=1, print_fn=lines.append)
