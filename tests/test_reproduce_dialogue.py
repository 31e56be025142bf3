"""`idt-desk reproduce dialogue`, its statistics, the structural baselines and the judge."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from idt_desk_sources.dialogue import DialogueSource
from idt_desk_sources.dialogue._texts import INJECTIONS, parse_judge
from idt_desk_sources.dialogue.reproduce import Dialogue, read_turns, run_dialogue
from idt_desk_sources.dialogue.reproduce.detection import detect_injection, response_z
from idt_desk_sources.replay import ReplaySource

from idt_desk.live.session import Session, SessionConfig, run_headless
from idt_desk.metrics import embeddings
from idt_desk.recordings import load_recording
from idt_desk.stats import cohens_d, correlation
from tests.cli_call import call
from tests.fake_ollama import FakeOllama

MODELS = ["--student-model", "student:1b", "--teacher-model", "teacher:1b"]


@pytest.fixture
def server():
    with FakeOllama() as srv:
        yield srv


def _chats(server) -> int:
    return sum(r["path"] == "/api/chat" for r in server.requests)


# -- the statistics, against values worked out by hand --------------------------------------


def test_cohens_d_by_hand():
    # x = 1, 2, 3: mean 2, s² = 1; y = 4, 5, 6, 7: mean 5.5, s² = 5/3.
    # pooled σ = sqrt((2·1 + 3·5/3) / 5) = sqrt(7/5); d = −3.5 / sqrt(1.4) = −2.95804.
    assert cohens_d([1, 2, 3], [4, 5, 6, 7]) == pytest.approx(-2.958039891549808, rel=1e-12)
    assert cohens_d([4, 5, 6, 7], [1, 2, 3, float("nan")]) == pytest.approx(2.958039891549808)
    assert cohens_d([1], [2, 3]) is None  # one value has no spread
    assert cohens_d([2, 2], [1, 1]) == math.inf and cohens_d([1, 1], [1, 1]) is None


def test_correlation_by_hand():
    # x = 1..5, y = 2, 4, 5, 4, 5: Σdxdy = 6, Σdx² = 10, Σdy² = 6, r = 6 / sqrt(60) = 0.774597.
    # Fisher: atanh(r) = 1.031719, ± 1.959964 / sqrt(2) = ± 1.385904 -> tanh(−0.354185),
    # tanh(2.417622) = −0.340082, 0.984236. t = r·sqrt(3) / sqrt(1 − r²) = 3 / sqrt(2)
    # = 2.121320 on 3 df: p = 0.124027 (a t table: 2.353 is p 0.10, 1.638 is p 0.20).
    c = correlation([1, 2, 3, 4, 5], [2, 4, 5, 4, 5])
    assert c["r"] == pytest.approx(0.7745966692414834, rel=1e-12)
    assert c["ci"][0] == pytest.approx(-0.340082, abs=2e-6)
    assert c["ci"][1] == pytest.approx(0.984236, abs=2e-6)
    assert c["p"] == pytest.approx(0.124027, abs=2e-6)
    assert c["n"] == 5


def test_detection_rule_and_latency_by_hand():
    base = [1.0, 2.0] * 15  # turns 1-30: mean 1.5, σ (ddof 1) = 0.508548
    # 3σ band: 1.5 ± 1.525643 -> anything above 3.025643 or below −0.025643 is out.
    v = base + [1.0] * 20
    assert detect_injection(v, 31) == (False, None)
    v[32] = 3.1  # turn 33: two turns after the injection after turn 31
    assert detect_injection(v, 31) == (True, 2)
    v[32], v[30] = 3.0, -0.03  # inside again at 33; turn 31 itself just out, below
    assert detect_injection(v, 31) == (True, 0)
    v[30] = 1.0
    v[33] = 9.0  # turn 34 is outside the three turns looked at (31, 32, 33)
    assert detect_injection(v, 31) == (False, None)
    # NaN turns are skipped, and a baseline without spread detects nothing at random.
    assert detect_injection([float("nan")] * 40, 31) == (False, None)
    # The signed distances in σ: (3 − 1.5) / 0.508548 = +2.949576, 0, and a missing turn.
    z = response_z([*base, 3.0, 1.5], 31)
    assert z[0] == pytest.approx(2.949576, abs=1e-6) and z[1] == 0.0 and z[2] is None


# -- the structural baselines --------------------------------------------------------------


def test_minilm_cosines_match_the_published_values():
    # The sentence-transformers README's example for all-MiniLM-L6-v2: 0.6660, 0.1046, 0.1411.
    e = embeddings.load_embedder().encode(
        ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."])
    assert e.shape == (3, 384)
    sims = e @ e.T
    assert sims[0, 1] == pytest.approx(0.6660, abs=6e-4)
    assert sims[0, 2] == pytest.approx(0.1046, abs=6e-4)
    assert sims[1, 2] == pytest.approx(0.1411, abs=6e-4)
    assert embeddings.cosine(e[0], e[1]) == pytest.approx(sims[0, 1], rel=1e-6)


def test_structural_baselines_per_turn():
    emb = embeddings.load_embedder()
    texts = ["What does a white blood cell do?", "It fights infection in the body.",
             "How do vaccines work?", "They train the immune system with a harmless part.",
             "I had a sandwich yesterday.", "Sandwiches are tasty."]
    turns = [{"turn": j + 1, "prompt": texts[2 * j], "reply": texts[2 * j + 1]}
             for j in range(3)]
    e = emb.encode(texts)
    b = embeddings.StructuralBaselines(emb)
    # One turn at a time (the live session) and the first as history (a replay started late).
    first = b.push([{**turns[0], "history": True}])
    assert all(len(v) == 0 for v in first.values())
    out = b.push(turns[1:])
    np.testing.assert_allclose(out["cos_sim"], [e[2] @ e[3], e[4] @ e[5]], atol=1e-5)
    np.testing.assert_allclose(out["adjacent"], [e[3] @ e[1], e[5] @ e[3]], atol=1e-5)
    np.testing.assert_allclose(out["drift"], [e[3] @ e[1], e[5] @ e[1]], atol=1e-5)
    # The off-topic turn is the least similar to its prompt's neighbours.
    whole = embeddings.StructuralBaselines(emb).push(turns)
    assert math.isnan(whole["adjacent"][0]) and whole["drift"][0] == pytest.approx(1.0)
    assert whole["drift"][2] < whole["drift"][1]


def test_session_records_and_replays_the_baselines(server, tmp_path):
    src = DialogueSource(host=server.host, student_model="student:1b",
                         teacher_model="teacher:1b")
    ses = Session(SessionConfig(source="dialogue", speed=None, baseline_windows=3),
                  source=src, record=tmp_path / "rec")
    ses.schedule(4, "perturb", name="topic_shift", params={})
    run_headless(ses, steps=7)
    rec = load_recording(tmp_path / "rec")
    assert rec.config["baselines"]["model"] == "all-MiniLM-L6-v2"
    w = rec.windows
    emb = embeddings.load_embedder()
    e = emb.encode([rec.turns[3]["prompt"], rec.turns[3]["reply"]])
    assert w["cos_sim"].iloc[3] == pytest.approx(float(e[0] @ e[1]), abs=1e-5)
    assert math.isnan(w["adjacent"].iloc[0]) and w["drift"].iloc[0] == pytest.approx(1.0)
    replay = Session(SessionConfig(source="replay", speed=None),
                     source=ReplaySource(path=str(tmp_path / "rec")))
    run_headless(replay)
    rw = replay.snapshot().windows
    for col in embeddings.BASELINE_COLUMNS:
        np.testing.assert_allclose(rw[col], w[col].to_numpy(), atol=1e-5, equal_nan=True)
    # Off: the columns stay NaN and the recording says so.
    off = Session(SessionConfig(source="dialogue", speed=None, baselines=False),
                  source=DialogueSource(host=server.host, student_model="student:1b",
                                        teacher_model="teacher:1b"))
    run_headless(off, steps=2)
    assert np.isnan(off.snapshot().windows["cos_sim"]).all()


# -- the judge -----------------------------------------------------------------------------


def test_parse_judge():
    assert parse_judge("relevance: 5\ncoherence: 6\nhelpfulness: 4") == {
        "relevance": 5, "coherence": 6, "helpfulness": 4}
    assert parse_judge("**Relevance** - 7/7, Coherence=2. Helpfulness: 12") == {
        "relevance": 7, "coherence": 2, "helpfulness": None}  # 12 is not on the scale
    assert parse_judge("I cannot rate this.") == dict.fromkeys(
        ("relevance", "coherence", "helpfulness"))


def test_judge_scores_are_recorded_with_the_turn(server, tmp_path):
    src = DialogueSource(host=server.host, student_model="student:1b",
                         teacher_model="teacher:1b", judge="ollama", judge_model="judge:1b")
    ses = Session(SessionConfig(source="dialogue", speed=None), source=src,
                  record=tmp_path / "rec")
    run_headless(ses, steps=3)
    turns = load_recording(tmp_path / "rec").turns
    judged = [r for r in server.requests if r.get("model") == "judge:1b"
              and r["path"] == "/api/chat"]
    assert len(judged) == 3
    for t in turns:
        j = t["judge"]
        assert j["model"] == "judge:1b" and all(1 <= j[s] <= 7 for s in
                                                 ("relevance", "coherence", "helpfulness"))
        assert t["reply"] in json.dumps(judged[t["turn"] - 1]["messages"])


# -- the protocol, end to end --------------------------------------------------------------


def test_protocol_end_to_end_with_two_injections(server, tmp_path):
    out = tmp_path / "out"
    argv = ["reproduce", "dialogue", "--tests", "7,3", "--conditions", "normal", "--turns",
            "48", "--host", server.host, *MODELS, "--judge", "ollama", "--judge-model",
            "judge:1b", "--workers", "1", "--out", str(out), "--no-progress"]
    rc, stdout, err = call(argv)
    assert rc == 0, err
    assert "Table 6" in stdout and "9/9 trials per condition" in stdout
    rows = pd.read_csv(out / "turns.csv")
    assert len(rows) == 96 and set(rows["test"]) == {3, 7}
    t7 = rows[rows["test"] == 7].set_index("turn")
    # The injections are the S' of turns 31 and 46, answered in turns 32 and 47.
    assert list(t7.index[t7["injected"].notna()]) == [31, 46]
    assert t7.loc[31, "next_prompt"] == INJECTIONS["contradiction"][0]
    assert t7.loc[32, "prompt"] == INJECTIONS["contradiction"][0]
    assert t7.loc[47, "answers_injection"] == "contradiction"
    assert rows["judge"].between(1, 7).all() and rows["cos_sim"].notna().all()
    summary = json.loads((out / "summary.json").read_text())
    real = [r for r in summary["injections"] if not r["control"]]
    control = [r for r in summary["injections"] if r["control"]]
    assert [r["turn"] for r in real] == [31, 46] and [r["turn"] for r in control] == [31, 46]
    # The summary's verdicts are the rule applied to the CSV's columns.
    for r in real + control:
        series = rows[rows["test"] == r["test"]].sort_values("turn")
        for d in ("P", "H_b", "dH", "P_adj", "H_b_adj", "dH_adj", "cos_sim", "judge"):
            assert (r[f"detected_{d}"], r[f"latency_{d}"]) == detect_injection(
                series[d].to_numpy(), r["turn"])
            assert r[f"z_{d}"] == pytest.approx(response_z(series[d].to_numpy(), r["turn"]))
    block = summary["detection"]["normal"]["P"]
    assert block["injections"] == 2 and block["control_turns"] == 2
    assert block["detected"] == sum(r["detected_P"] for r in real)
    # Matched false alarms: with 2 control turns none may exceed the threshold, which is
    # therefore the larger control peak |z|; an injection counts when its peak exceeds it.
    m = block["matched"]

    def peak(r):
        return max(abs(z) for z in r["z_P"] if z is not None)

    assert m["allowed_false_alarms"] == 0 and m["false_alarms"] == 0
    assert m["threshold_sigma"] == pytest.approx(max(peak(r) for r in control))
    assert m["detected"] == sum(peak(r) > m["threshold_sigma"] for r in real)
    d7 = next(d for d in summary["cohens_d"]["per_dialogue"] if d["test"] == 7)
    hit = t7.loc[[31, 32, 46, 47], "P"]
    assert d7["P"] == pytest.approx(cohens_d(hit, t7.loc[1:30, "P"]))
    c7 = next(c for c in summary["correlations"] if c["test"] == 7)
    assert c7["P~cos_sim"]["r"] == pytest.approx(np.corrcoef(t7["P"], t7["cos_sim"])[0, 1])
    assert c7["P~cos_sim"]["ci"][0] < c7["P~cos_sim"]["r"] < c7["P~cos_sim"]["ci"][1]
    assert summary["table6"]["P~cos_sim"]["conditions"] == 2
    # The length confound: r of each metric with log(1 + tokens) over turns 1-30, each
    # dialogue's means removed, against numpy on the CSV's columns.
    conf = summary["length_confound"]
    assert set(conf) == {"P", "H_f", "H_b", "dH", "P_adj", "H_f_adj", "H_b_adj", "dH_adj"}

    def within(col, log):
        parts = []
        for _t, g in rows.sort_values(["test", "turn"]).groupby("test", sort=False):
            v = g[col].to_numpy()[:30]
            v = np.log1p(v) if log else v
            parts.append(v - np.nanmean(v))
        return np.concatenate(parts)

    for m in ("P", "H_b", "P_adj"):
        for c in ("n_S_next", "n_A", "n_S"):
            got = conf[m][c]
            y, x = within(m, False), within(c, True)
            ok = np.isfinite(y)
            assert got["r"] == pytest.approx(np.corrcoef(y[ok], x[ok])[0, 1], rel=1e-9)
            # The adjusted metric starts once 8 baseline prompts are pooled (turn 9).
            assert got["n"] == (60 if m != "P_adj" else 44)
            assert len(got["per_dialogue"]) == 2
    ordinary = rows.loc[rows["injected"].isna(), "n_S_next"]
    assert summary["prompt_tokens"]["ordinary"]["median"] == pytest.approx(ordinary.median())
    assert summary["prompt_tokens"]["injected"]["n"] == 2
    assert "P − length null" in stdout and "## The length confound" in stdout
    assert summary["models"]["student"] == {"backend": "ollama", "model": "student:1b"}
    assert summary["tokenizer"]["name"].startswith("mistral-common")
    assert (out / "figure4.png").stat().st_size > 10_000
    assert "| normal | P |" in (out / "table.md").read_text()

    # Run again: nothing is asked of the models, the report is the same.
    before = _chats(server)
    rc, _, _ = call(argv)
    assert rc == 0 and _chats(server) == before
    assert pd.read_csv(out / "turns.csv").equals(rows)


def test_an_interrupted_dialogue_is_reported_and_carried_on(server, tmp_path):
    out = tmp_path / "out"
    argv = ["reproduce", "dialogue", "--tests", "10", "--conditions", "constrained",
            "--turns", "34", "--host", server.host, *MODELS, "--retries", "0",
            "--workers", "1", "--out", str(out), "--no-progress"]
    # The uninterrupted dialogue, for comparison (the server's texts depend on prompt + seed).
    ref = run_dialogue(Dialogue(10, "constrained", 0, 34,
                                (("host", server.host), ("student_model", "student:1b"),
                                 ("teacher_model", "teacher:1b")), 0, None))
    assert ref["complete"] and len(ref["turns"]) == 34
    server.failures[:] = [None] * 39 + ["drop"]  # the 20th turn's student reply breaks
    rc, stdout, _ = call(argv)
    assert rc == 1 and "unfinished" in stdout
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["unfinished"]) == 1 and "student" in summary["dialogues"][0]["error"]
    path = next((out / "dialogues").glob("test10-*.jsonl"))
    kept = read_turns(path)
    assert 15 <= len(kept) < 34
    # A report on what is kept asks nothing of the models, and says what is missing.
    before = len(server.requests)
    rc, stdout, _ = call([*argv, "--report-only"])
    assert rc == 1 and "without --report-only" in stdout and len(server.requests) == before
    assert json.loads((out / "summary.json").read_text())["turns"] == len(kept)
    # A crash mid-write leaves half a line: it is dropped, the turn asked again.
    with open(path, "a") as f:
        f.write('{"turn": ' + str(len(kept) + 1) + ', "prom')
    rc, _, _ = call(argv)
    assert rc == 0
    turns = read_turns(path)
    assert [t["reply"] for t in turns] == [t["reply"] for t in ref["turns"]]
    assert [t["next_prompt"] for t in turns] == [t["next_prompt"] for t in ref["turns"]]
    assert [t["turn"] for t in turns if t["injected"]] == [31]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["unfinished"] == [] and summary["dialogues"][0]["resumed_from"] == len(kept)


def test_bad_options_are_one_line_errors(tmp_path):
    for extra, words in ((["--tests", "5"], "the paper's tests are"),
                         (["--conditions", "hot"], "--conditions"),
                         (["--turns", "20"], "at least 33")):
        rc, _, err = call(["reproduce", "dialogue", *extra, "--out", str(tmp_path)])
        assert rc == 2 and words in err, err


def test_bench_dialogue_times_every_evaluator_on_the_same_turns(server):
    rc, out, err = call(["bench", "dialogue", "--turns", "4", "--rounds", "1", "--judge",
                         "ollama", "--judge-model", "judge:1b", "--host", server.host])
    assert rc == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert set(rows) == {"IDT", "embeddings", "judge"}
    assert float(rows["IDT"][-1]) == 1.0  # the ratio column is against the IDT's own time
    assert all(float(r[1]) > 0 for r in rows.values())
    # The judge was asked about each replayed turn once (and once more to load it).
    assert sum(r.get("model") == "judge:1b" for r in server.requests
               if r["path"] == "/api/chat") == 5
