"""The built-in offline model (the `llm` extra, installed by the README's test command)."""

from __future__ import annotations

import llama_cpp  # noqa: F401  - the extra must be installed: a missing one fails, not skips
from idt_desk_sources.dialogue import DialogueSource

from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.recordings import load_recording
from tests.fake_ollama import FakeOllama

BUILTIN = {"student_backend": "builtin", "teacher_backend": "builtin"}


def test_a_real_five_turn_smollm2_dialogue_is_recorded_and_deterministic(tmp_path):
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


def test_a_stop_interrupts_the_built_in_model_while_it_reads_the_prompt():
    """llama.cpp reads a prompt before the first piece (minutes for 4,000 tokens on a shared
    core): a stop asked then ends the reply at once, and the model goes on working after."""
    import pytest
    from idt_desk_sources.dialogue._backends import BuiltinBackend, Stopped

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
