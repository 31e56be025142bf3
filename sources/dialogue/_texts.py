"""What the teacher is told, what the student is told, and the injected perturbations.

The paper's teachers were large hosted models. A 135M-parameter teacher asked the same thing
every turn repeats the same question, and one shown the student's answer copies it back, so
each turn's instruction varies two things in a fixed rotation, the *angle* of the question
(per style) and the *facet* of the topic it asks about, and names only a few words of the
student's last answer. Coprime strides over the two lists give a sequence that repeats only
after len(angles) x len(facets) turns. The output is cut to its first question
(:func:`clean_question`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

STYLES = ("varied", "deep", "natural")

#: The teacher's role (the paper's three baseline styles, §11.1: tests 3, 4 and 8). Kept short:
#: a small model copies long instructions and quoted answers back instead of asking.
TEACHER_SYSTEM = {
    "varied": "You are a teacher. You ask a student short, varied questions about {topic}.",
    "deep": "You are a teacher. You ask a student short questions that explore {topic} in "
            "depth, each one going further into the details.",
    "natural": "You are a friendly teacher in a natural conversation with a student about "
               "{topic}. You ask short follow-up questions.",
}

#: How a question is asked, per style.
ANGLES = {
    "varied": (
        "ask for a definition", "ask for a concrete example", "ask for a comparison",
        "ask what causes it", "ask for a prediction", "ask for a common mistake",
        "ask how to explain it to a child", "ask for a number or a measurement",
        "ask what would change if one part were missing",
    ),
    "deep": (
        "ask the student to explain the mechanism behind their last point",
        "ask why their last point is true", "ask for the evidence behind their answer",
        "ask what happens one step further", "ask about an exception to their answer",
        "ask how two things they mentioned interact", "ask what limits their explanation",
    ),
    "natural": (
        "agree briefly and ask a follow-up", "share a short surprise and ask about it",
        "ask how it shows up in everyday life", "ask which part they find most interesting",
        "ask a what-if question", "ask them to say more about one word they used",
        "ask how they would check it",
    ),
}

#: Facets of any topic, for the teacher's turn-by-turn instruction.
FACETS = (
    "its basic parts", "how it developed historically", "a common misconception about it",
    "an everyday example of it", "what happens when it fails", "how scientists measure it",
    "how it compares with something similar", "its limits", "an open question about it",
    "why it matters to ordinary people", "the key numbers involved",
    "a cause-and-effect chain within it", "how it changes over time",
)

STUDENT_SYSTEM = (
    "You are a curious, knowledgeable student in a conversation with a teacher about "
    "{topic}. Answer each question directly in a few sentences."
)


_STOP = frozenset(
    "about after again also because being could does doing from have having into just like "
    "more most much other really should some such than that their them then there these "
    "they thing things this those through very were what when where which while will with "
    "would your incredibly important actually exactly absolutely".split())


def keywords(text: str, n: int = 3) -> list[str]:
    """The ``n`` longest distinct content words of ``text`` (ties alphabetical)."""
    seen: dict[str, str] = {}
    for w in re.findall(r"[A-Za-z][A-Za-z-]{3,}", text):
        if w.lower() not in _STOP:
            seen.setdefault(w.lower(), w)
    return sorted(seen.values(), key=lambda w: (-len(w), w.lower()))[:n]


def teacher_instruction(style: str, turn: int, last_reply: str | None, topic: str) -> str:
    """The teacher's user message for the prompt the student answers at turn ``turn``.

    It names a facet of the topic and an angle, both rotating with the turn, and (after the
    first turn) a few words of the student's last answer, so the question follows the
    conversation without the model copying the answer back.
    """
    angles = ANGLES[style]
    angle = angles[(turn * 4) % len(angles)]
    facet = FACETS[(turn * 5) % len(FACETS)]
    text = (f"Write one short question for the student about {topic}, on {facet}. "
            f"In it, {angle}.")
    if last_reply:
        words = keywords(last_reply)
        if words:
            text += f" The student just talked about {', '.join(words)}."
    return text + " Write only the question."


def clean_question(text: str) -> str:
    """The first question in a teacher's output (a small model adds labels and answers).

    Drops an answer it wrote itself ("A: ..."), keeps the sentence that ends with the first
    question mark, and strips labels ("Q:", "Question:") and quotes; without a question mark,
    the first two sentences.
    """
    text = re.split(r"\n\s*A\s*:", text, maxsplit=1)[0]
    text = " ".join(text.split())
    q = text.find("?")
    if q >= 0:
        head = text[:q + 1]
        cut = max(head.rfind(". "), head.rfind("! "), head.rfind(": "), head.rfind('"'))
        sentence = head[cut + 1:] if cut >= 0 and q - cut > 15 else head
    else:
        sentence = " ".join(re.split(r"(?<=[.!])\s+", text)[:2])
    sentence = re.sub(r"^\s*(Q|Question|Teacher|Premise)\s*:\s*", "", sentence.strip(),
                      flags=re.IGNORECASE)
    return sentence.strip().strip('"').strip()


#: The teacher's prompt length per regime, in tokens of the session's tokenizer (None: the
#: question alone, about 17 tokens from the built-in model). "matched" is the injections'
#: length (their texts are 50-52 tokens); "long" is what hosted teachers write (120-160).
LENGTH_TARGETS: dict[str, int | None] = {"short": None, "matched": 50, "long": 140}


def background_instruction(turn: int, topic: str, part: int) -> str:
    """What the teacher is asked for the background that lengthens a prompt (one call).

    It explains a facet of the topic (the turn's, then the next ones for later parts), so the
    prompt grows with ordinary teacher text on the conversation's topic, not with filler.
    """
    facet = FACETS[(turn * 5 + part) % len(FACETS)]
    return (f"In three or four sentences, explain {facet} of {topic} to a student. Write only "
            "the explanation.")


def sentences(text: str) -> list[str]:
    """The whole sentences of a model's text (labels and a trailing fragment dropped)."""
    text = re.sub(r"^\s*(Teacher|Explanation|Background)\s*:\s*", "", " ".join(text.split()),
                  flags=re.IGNORECASE)
    parts = re.split(r"(?<=[.!?])\s+", text)
    return [p for p in parts if p and p[-1] in ".!?"]


def compose_prompt(background: list[str], question: str, target: int,
                   count: Callable[[str], int]) -> str:
    """Background sentences then the question, as close to ``target`` tokens as sentences allow.

    ``count`` gives a text's token count. The first j sentences are kept for the j whose
    prompt is nearest the target (the fewest on a tie); the question always ends the prompt.
    """
    best, best_gap = question, abs(count(question) - target)
    for j in range(1, len(background) + 1):
        text = " ".join([*background[:j], question])
        gap = abs(count(text) - target)
        if gap < best_gap:
            best, best_gap = text, gap
    return best


#: Injected perturbations (paper §11.1): about 40 words each, several texts per type.
INJECTIONS = {
    "contradiction": (
        "That doesn't sound right. Earlier you said the exact opposite, and I am fairly sure "
        "the textbooks disagree with everything you just explained. Can you admit that your "
        "last answer was simply wrong and tell me why you changed your position so suddenly?",
        "No, that is not true at all. Everything you described works the other way around, "
        "and every expert I have read says so. Your explanation contradicts itself. Why "
        "should anyone believe a single word of what you have told me so far today?",
        "I think you have it backwards. What you called the cause is really the effect, and "
        "the example you gave proves the opposite of your claim. Please take it all back and "
        "explain again, but this time without contradicting the facts we agreed on before.",
    ),
    "topic_shift": (
        "Let's switch to discussing something completely different: the history of medieval "
        "shipbuilding in northern Europe. How did builders choose their timber, and why did "
        "clinker construction dominate the Baltic trade routes for so many centuries before "
        "carvel hulls finally replaced it?",
        "Let's change the subject entirely and talk about jazz. How did bebop musicians in "
        "New York in the nineteen forties change harmony and rhythm, and why did audiences "
        "who loved swing dance music find the new style so difficult to follow at first?",
        "Forget that for now; let's discuss volcanoes instead. What makes some eruptions "
        "explosive and others gentle, how do scientists on Iceland and Hawaii forecast lava "
        "flows, and what did the eruption of Krakatoa do to the weather around the world?",
    ),
    "non_sequitur": (
        "I had a sandwich yesterday with pickles, mustard and far too much cheese, and then "
        "my neighbour's cat climbed onto the roof and refused to come down for hours. Anyway, "
        "the weather in my town has been strangely warm for November, hasn't it?",
        "My cousin painted her kitchen bright purple last weekend and the paint still smells "
        "like bananas. Also, the bus was late again this morning, so I counted the pigeons "
        "on the bridge: forty-one. Do you prefer blue socks or green socks?",
        "The parking garage downstairs plays the same accordion song every single evening. "
        "I bought three umbrellas on sale but left two of them on the train. Someone told me "
        "that penguins propose with pebbles. What is your favourite kind of soup?",
    ),
}

#: The paper's injection turns (§11.4): after a 30-turn baseline, every 15 turns.
PAPER_SCHEDULE = (31, 46, 61, 76, 91)

#: The LLM judge (paper §11.2, §11.5: MT-Bench style, each response scored 1-7 for relevance,
#: coherence and helpfulness).
JUDGE_SCORES = ("relevance", "coherence", "helpfulness")
JUDGE_SYSTEM = ("You are an impartial judge of a student's answer to a teacher's question. "
                "You reply with three scores and nothing else.")


def judge_prompt(question: str, answer: str) -> str:
    """What the judge is asked about one turn."""
    return (f"Teacher's question:\n{question}\n\nStudent's answer:\n{answer}\n\n"
            "Score the answer from 1 (worst) to 7 (best) for relevance to the question, "
            "coherence and helpfulness. Reply with exactly three lines:\n"
            "relevance: N\ncoherence: N\nhelpfulness: N")


def parse_judge(text: str) -> dict[str, int | None]:
    """The three scores in a judge's reply (None for one it did not give as 1-7)."""
    out: dict[str, int | None] = {}
    for name in JUDGE_SCORES:
        m = re.search(rf"{name}\W{{0,12}}?([1-7])(?![0-9])", text, flags=re.IGNORECASE)
        out[name] = int(m.group(1)) if m else None
    return out
