"""A dialogue's length confound: the token counts, the length-adjusted metrics, the verdicts.

The adjusted metric M_adj = M − mean M over length-matched surrogates of S' (baseline
prompts joined and cut to S''s token count, same S and A) is checked against a computation
of its own here (SentencePiece directly, entropies from ``collections.Counter``), live
against the suite's Ollama-protocol server with teacher prompts of scripted lengths, and in
two scripted dialogues where an injection differs from the ordinary prompts only in length,
or only in content.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
import sentencepiece as spm
from idt_desk_sources.dialogue import DialogueSource
from idt_desk_sources.dialogue._texts import LENGTH_TARGETS, compose_prompt, sentences
from idt_desk_sources.replay import ReplaySource

from idt_desk.detection.turns import detect_injection, response_z
from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.metrics.tokens import DialogueMetrics, LengthNull, length_confound, load_tokenizer
from idt_desk.recordings import load_recording
from tests.cli_call import call
from tests.fake_ollama import FakeOllama

MODELS = {"student_model": "student:1b", "teacher_model": "teacher:1b"}
SHIPPED = "assets/recordings/dialogue-smollm2-contradictions"


@pytest.fixture
def server():
    with FakeOllama() as srv:
        yield srv


def _entropy(tokens) -> float:
    counts = Counter(tokens)
    n = sum(counts.values())
    return -sum(c / n * math.log2(c / n) for c in counts.values()) if n else 0.0


def _metrics(s, a, n) -> dict[str, float]:
    hs, ha, hn = _entropy(s), _entropy(a), _entropy(n)
    hsa, hsan = _entropy(s + a), _entropy(s + a + n)
    return {"P": (hsa + hn - hsan) / (hs + ha + hn), "H_f": hsan - hsa, "H_b": hsan - hn,
            "dH": hn - hsa}


def _independent_adjusted(turns, baseline: int, sp) -> list[dict[str, float]]:
    """M_adj of every turn, computed from the texts with lists and Counters."""
    by_turn = {t["turn"]: t for t in turns}
    pool: list[list[int]] = []
    out = []
    for row, t in enumerate(turns):
        s = [x for j in range(t["context_start"], t["turn"])
             for text in (by_turn[j]["prompt"], by_turn[j]["reply"]) for x in sp.encode(text)]
        s += sp.encode(t["prompt"])
        a, n = sp.encode(t["reply"]), sp.encode(t["next_prompt"])
        real = _metrics(s, a, n)
        if len(pool) >= 8:
            starts = [sum(len(p) for p in pool[:j]) for j in range(len(pool))]
            stream = [x for p in pool for x in p] * (2 + len(n) // sum(map(len, pool)))
            m = min(8, len(pool))
            surr = [stream[starts[(i * len(pool)) // m]:][:len(n)] for i in range(m)]
            null = [_metrics(s, a, r) for r in surr]
            out.append({k: real[k] - sum(x[k] for x in null) / m for k in real})
        else:
            out.append({k: math.nan for k in real})
        if row < baseline:
            pool.append(n)
    return out


# -- live, against the fake server -----------------------------------------------------------


def test_adjusted_metrics_live_equal_an_independent_computation(server, tmp_path):
    # Teacher prompts of 4..26 words in a scrambled order, replies of 24: the lengths vary.
    server.words = lambda model, seed, _msg: 4 + (seed * 7) % 23 \
        if model.startswith("teacher") else 24
    src = DialogueSource(host=server.host, **MODELS)
    ses = Session(SessionConfig(source="dialogue", speed=None, baseline_windows=12),
                  source=src, record=tmp_path / "rec")
    run_headless(ses, steps=22)
    rec = load_recording(tmp_path / "rec")
    assert rec.complete, rec.warnings
    turns = rec.turns
    assert len({len(t["next_prompt"].split()) for t in turns}) > 8  # the lengths do vary
    sp = spm.SentencePieceProcessor(model_file=str(load_tokenizer().path))
    want = _independent_adjusted(turns, 12, sp)
    w = rec.windows.reset_index(drop=True)
    for j, t in enumerate(turns):
        assert w.loc[j, "n_S_next"] == len(sp.encode(t["next_prompt"]))
        assert w.loc[j, "n_A"] == len(sp.encode(t["reply"]))
        for m in ("P", "H_f", "H_b", "dH"):
            got = w.loc[j, f"{m}_adj"]
            if j < 8:
                assert math.isnan(got) and math.isnan(want[j][m])
            else:
                assert got == pytest.approx(want[j][m], rel=1e-9, abs=1e-12)
    # The adjusted metrics are detectors of their own: no verdict in the baseline turns,
    # a verdict (0 or 1) after it, and their union is the x_IDT_adj column.
    assert w["x_P_adj"][:12].isna().all() and w["x_P_adj"][12:].isin([0.0, 1.0]).all()
    union = w[[f"x_{m}_adj" for m in ("P", "H_f", "H_b", "dH")]][12:].max(axis=1)
    assert (w["x_IDT_adj"][12:] == union).all()
    # At the end of the baseline the session reports the length confound over it.
    conf = ses.snapshot(limit=1).info["length_confound"]
    assert conf["turns"] == 12
    first = {c: w[c].to_numpy()[:12] for c in w.columns}
    assert conf["P"]["n_S_next"]["r"] == pytest.approx(
        length_confound([first], 12)["P"]["n_S_next"]["r"], rel=1e-12)
    # Replay recomputes them from the texts, identically.
    replay = Session(SessionConfig(source="replay", speed=None),
                     source=ReplaySource(path=str(tmp_path / "rec")))
    run_headless(replay)
    again = replay.snapshot(limit=100).windows
    np.testing.assert_array_equal(again["P_adj"], w["P_adj"].to_numpy())


def test_teacher_length_regimes_reach_their_targets(server):
    count = load_tokenizer()

    def prompts(regime: str, background_words: int) -> list[int]:
        # The fake teacher asks in 8 words and explains in one sentence of the given words.
        server.words = lambda model, seed, msg: (background_words if "explain" in msg else 8) \
            if model.startswith("teacher") else 24
        src = DialogueSource(host=server.host, teacher_length=regime, **MODELS)
        src.reset(seed=0)
        texts = [t["next_prompt"] for t in src.step(4).turns]
        src.close()
        assert all(p.endswith("?") for p in texts)  # the teacher's question ends it
        return [len(count.encode(p)) for p in texts]

    short = prompts("short", 12)
    matched, long = prompts("matched", 12), prompts("long", 30)
    assert max(short) < 25
    for regime, n in (("matched", matched), ("long", long)):
        target = LENGTH_TARGETS[regime]
        assert all(abs(k - target) <= 0.3 * target for k in n), (regime, n)
    explain = [r for r in server.requests if r["path"] == "/api/chat"
               and "explain" in r["messages"][-1]["content"]]
    assert explain  # the longer regimes asked for background; the short one did not
    assert all(r["messages"][0]["role"] == "system" for r in explain)


def test_compose_prompt_keeps_whole_sentences_nearest_the_target():
    bg = sentences("One two three. Four five six seven! Eight nine? A fragment without end")
    assert bg == ["One two three.", "Four five six seven!", "Eight nine?"]
    words = lambda text: len(text.split())  # noqa: E731
    q = "Why is that?"
    assert compose_prompt(bg, q, 3, words) == q
    assert compose_prompt(bg, q, 7, words) == "One two three. Why is that?"
    assert compose_prompt(bg, q, 10, words) == "One two three. Four five six seven! Why is that?"
    assert compose_prompt(bg, q, 100, words).startswith("One two three. Four five six seven! "
                                                       "Eight nine?")


# -- the surrogates ---------------------------------------------------------------------------


def test_surrogates_are_baseline_prompts_cut_to_the_length():
    null = LengthNull(baseline_turns=10, min_pool=3, surrogates=2)
    vocab = 200  # token ids below it
    prompts = [np.arange(10 * k, 10 * k + 2 + k) for k in range(12)]  # 2, 3, ... tokens
    s, a = np.array([1, 2, 3]), np.array([4, 5])
    row = {"P": 0.1, "H_f": 0.2, "H_b": 0.3, "dH": 0.4}
    for k, p in enumerate(prompts):
        if k < 3:
            assert math.isnan(null.adjust(s, a, p, row, vocab)["P_adj"])
        else:
            null.adjust(s, a, p, row, vocab)
    assert null.pooled == 10  # only the baseline's prompts
    surr = null.surrogate_texts(7)
    assert [len(r) for r in surr] == [7, 7]
    # Two surrogates from 10 prompts start at prompts 0 and 5, running on into the next.
    np.testing.assert_array_equal(surr[0], [0, 1, 10, 11, 12, 20, 21])
    np.testing.assert_array_equal(surr[1], [50, 51, 52, 53, 54, 55, 56])
    assert [len(r) for r in null.surrogate_texts(200)] == [200, 200]  # wraps round
    short = LengthNull(baseline_turns=5)  # fewer baseline turns than a pool needs
    for p in prompts:
        assert math.isnan(short.adjust(s, a, p, row, vocab)["P_adj"])


# -- the verdicts: length only, content only ----------------------------------------------------

V1 = ("cells antibodies fever lymph nodes memory vaccine virus bacteria signal defence response "
      "barrier skin mucus inflammation white blood marrow thymus spleen protein receptor "
      "pathogen immunity adaptive innate tissue repair infection").split()
V2 = ("harbour timber keel clinker carvel mast sail rudder plank rivet oak pine shipwright hull "
      "deck anchor tide voyage trade cargo merchant galley oar rope canvas compass").split()
INJECTED = (31, 46, 61, 76, 91)


def _scripted(kind: str, seed: int) -> dict[str, np.ndarray]:
    """100 turns; ordinary prompts are 8-20 words of V1, replies 25; at the injected turns
    S' is 60 words of V1 (``length``: only longer) or as many words of V2 as the ordinary
    prompt it replaces (``content``: only the vocabulary differs). The student sees the
    previous exchange and the prompt (a gated context)."""
    rng = np.random.default_rng(seed)

    def text(vocab, n):
        return " ".join(rng.choice(vocab, n)) + "?"

    lengths = rng.integers(8, 21, 102)
    prompts = [text(V1, lengths[t]) for t in range(102)]
    for k in INJECTED:
        prompts[k] = text(V1, 60) if kind == "length" else \
            text(V2, lengths[k]) if kind == "content" else prompts[k]
    turns = [{"turn": t, "prompt": prompts[t - 1], "reply": " ".join(rng.choice(V1, 25)) + ".",
              "next_prompt": prompts[t], "context_start": max(1, t - 1)} for t in range(1, 101)]
    return DialogueMetrics(load_tokenizer()).push(turns)


def _verdicts(kind: str) -> dict[str, tuple[int, float]]:
    """Per metric: injections detected (of 15) and the mean signed z at the injected turn."""
    out = {}
    runs = [_scripted(kind, seed) for seed in range(3)]
    for m in ("P", "H_b", "P_adj", "H_b_adj"):
        hits = sum(detect_injection(r[m], k)[0] for r in runs for k in INJECTED)
        z = np.mean([response_z(r[m], k)[0] for r in runs for k in INJECTED])
        out[m] = (hits, float(z))
    return out


def test_an_injection_that_is_only_longer_moves_the_raw_metrics_not_the_adjusted():
    v = _verdicts("length")
    # Raw: P up and H_b down at the injection, the length signature.
    assert v["P"][1] > 1.5 and v["H_b"][1] < -1.5 and v["H_b"][0] >= 3
    # Adjusted: a longer ordinary prompt is what the surrogates are.
    assert abs(v["P_adj"][1]) < 0.75 and abs(v["H_b_adj"][1]) < 0.75
    assert v["P_adj"][0] <= 1 and v["H_b_adj"][0] <= 1


def test_an_injection_that_only_says_something_else_moves_the_adjusted_metrics():
    v = _verdicts("content")
    # New vocabulary at the usual length: P drops and H_b rises beyond the length null.
    assert v["P_adj"][1] < -2.0 and v["H_b_adj"][1] > 1.5
    assert v["P_adj"][0] >= 6 and v["P_adj"][0] > v["P"][0]


def test_no_injection_leaves_every_metric_near_its_baseline():
    v = _verdicts("none")
    assert all(abs(z) < 1.0 for _hits, z in v.values())


# -- the confound, reported ------------------------------------------------------------------


def test_length_confound_matches_numpy_and_shrinks_once_adjusted():
    runs = [_scripted("none", seed) for seed in range(2)]
    conf = length_confound(runs, 30)
    y = np.concatenate([r["P"][:30] - r["P"][:30].mean() for r in runs])
    x = np.concatenate([np.log1p(r["n_S_next"][:30]) - np.log1p(r["n_S_next"][:30]).mean()
                        for r in runs])
    assert conf["P"]["n_S_next"]["r"] == pytest.approx(np.corrcoef(y, x)[0, 1], rel=1e-9)
    assert conf["P"]["n_S_next"]["r"] > 0.6  # longer prompts, higher P
    assert abs(conf["P_adj"]["n_S_next"]["r"]) < conf["P"]["n_S_next"]["r"] / 2
    lo, hi = conf["P"]["n_S_next"]["ci"]
    assert lo < conf["P"]["n_S_next"]["r"] < hi


def test_analyze_a_dialogue_recording_reports_the_confound(tmp_path):
    rc, out, err = call(["analyze", SHIPPED, "--out", str(tmp_path)])
    assert rc == 0, err
    summary = json.loads((tmp_path / "summary.json").read_text())
    conf = summary["length_confound"]
    # The shipped dialogue's P is mostly the teacher prompt's length.
    assert conf["P"]["n_S_next"]["r"] > 0.8 and conf["H_b"]["n_S_next"]["r"] < -0.7
    assert abs(conf["P_adj"]["n_S_next"]["r"]) < 0.5
    assert [i["turn"] for i in summary["injections"]] == [31, 46, 61, 76, 91]
    first = summary["injections"][0]
    assert first["type"] == "contradiction" and len(first["P_adj"]["z"]) == 3
    assert "length confound" in out and "injection at turn 31" in out
    rows = __import__("pandas").read_csv(tmp_path / "windows.csv")
    rec = load_recording(SHIPPED)
    np.testing.assert_allclose(rows["P"], rec.windows["P"], rtol=1e-9)  # the session's own
