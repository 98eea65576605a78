"""A lesson's quiz questions: parsed from its front matter, and shown to one learner.

A question's choices each carry ``text`` and, for a wrong choice, ``why`` it is wrong. A question may
open with the learner's own lab measurement (``measured: {with: ..., without: ..., example: ...,
answers: <function>}``) and work its choices out from it: the function, in course/quiz_answers.py,
returns the numbers its texts quote as ``{name:format}``, so that its right answer depends on what
the learner measured; ``answer`` may then name one of those numbers. No Streamlit here.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping

from course.quiz_answers import ANSWERS
from course.registry import LABS

LAB_IDS = [lab.url_path for lab in LABS]   # what `lab:<id>` links and measured values may name
MEASURE = re.compile(r"\{(\w+)\.(\w+)\}")
NUMBER = re.compile(r"^\s*(-?\d[\d,]*(?:\.\d+)?|-?\.\d+)\s*(\S*)")


def number(text: str | None) -> float | None:
    """A value a lab recorded, as text with its unit ("21.0 ms", "1.23 s", "2.10 requests/s", "16"), as a
    number; times in ms ("1.23 s" is 1230). None for text that is not a number."""
    if text is None:
        return None
    m = NUMBER.match(str(text))
    if not m:
        return None
    value = float(m.group(1).replace(",", ""))
    return value * 1000 if m.group(2) == "s" else value


@dataclass(slots=True)
class Shown:
    """A question as one learner sees it: with their own measurement, or with its worked fallback."""
    lead: str
    question: str
    choices: list[str]
    answer: int
    explanation: str
    why: list[str]
    measured: bool       # True when the learner's own values were used


@dataclass(slots=True)
class QuizQuestion:
    question: str
    choices: list[str]
    answer: int          # index into choices of the right choice (for the example values, if answer_rule)
    explanation: str     # why the right choice is right
    why: list[str]       # per choice: why it is wrong ("" for the right one, unless answer_rule)
    measured_with: str = ""      # a lead sentence with {lab.name} values from the learner's run
    measured_without: str = ""   # the same lead, worded for when nothing was measured
    example: dict = field(default_factory=dict)   # "lab.name" -> the number measured_without supposes
    answers: Callable | None = None   # course/quiz_answers.py: the values -> the numbers the texts quote
    answer_rule: str = ""        # the name of the number that is the right choice's index, when it depends on the values

    def measures(self) -> list[tuple[str, str]]:
        """(lab id, value name) of every value the lead sentence quotes."""
        return [(m.group(1), m.group(2)) for m in MEASURE.finditer(self.measured_with)]

    def lead(self, lookup: Callable[[str, str], "str | None"]) -> str:
        """The lead sentence with the learner's values, or its worded fallback if any is missing."""
        return self.render(lookup).lead

    def shown(self, values: Mapping[str, float]) -> Shown:
        """The question with `values` ("lab.name" -> number); ValueError if they make an unfair one
        (its answers function says so, or two choices come out alike)."""
        numbers = self.answers(dict(values)) if self.answers else {}
        if numbers is None:
            raise ValueError(f"the values {dict(values)} make an unfair question")

        def fill(text: str) -> str:
            try:
                return text.format_map(numbers)
            except KeyError as e:
                raise ValueError(f"{text!r} quotes {e}, which its answers function does not give") from None
            except (AttributeError, IndexError) as e:   # {x.y} or {x[0]}: only {name:format} is quoted
                raise ValueError(f"{text!r} quotes something other than a number by name: {e}") from None
        choices = [fill(c) for c in self.choices]
        if len(set(choices)) != len(choices):
            raise ValueError(f"the values {dict(values)} make two choices alike: {choices}")
        answer = self.answer
        if self.answer_rule:
            answer = numbers.get(self.answer_rule)
            if not isinstance(answer, int) or not 0 <= answer < len(choices):
                raise ValueError(f"answer {self.answer_rule!r} is {answer!r}, not a choice")
        return Shown("", fill(self.question), choices, answer, fill(self.explanation), [fill(w) for w in self.why],
                     False)

    def render(self, lookup: Callable[[str, str], "str | None"]) -> Shown:
        """The question for this learner: their values where every one was measured and makes a fair
        question, else the worked example (whose lead says "Suppose ...")."""
        if not self.measured_with:
            return Shown("", self.question, list(self.choices), self.answer, self.explanation, list(self.why), False)
        texts = {f"{lab}.{name}": lookup(lab, name) for lab, name in self.measures()}
        numbers = {k: number(v) for k, v in texts.items()}
        if all(v is not None for v in numbers.values()):
            try:
                shown = self.shown(numbers)
                shown.lead = MEASURE.sub(lambda m: texts[f"{m.group(1)}.{m.group(2)}"], self.measured_with)
                shown.measured = True
                return shown
            except (ValueError, ArithmeticError):
                pass
        shown = self.shown(self.example)
        shown.lead = self.measured_without
        return shown


def choice_order(n_choices: int, seed: str) -> list[int]:
    """A shuffled order of a question's choices, the same every time for the same seed."""
    order = list(range(n_choices))
    random.Random(seed).shuffle(order)
    return order


def _choices(n: int, items) -> tuple[list[str], list[str]]:
    if not isinstance(items, list) or len(items) < 2:
        raise ValueError(f"quiz question {n}: choices must be a list of at least two")
    texts, whys = [], []
    for k, c in enumerate(items, 1):
        if not isinstance(c, dict) or not isinstance(c.get("text"), str) or not c["text"].strip():
            raise ValueError(f"quiz question {n}, choice {k}: needs a non-empty 'text'")
        texts.append(c["text"].strip())
        whys.append(str(c.get("why") or "").strip())
    if len(set(texts)) != len(texts):
        raise ValueError(f"quiz question {n}: choices are not unique")
    return texts, whys


def _measured(n: int, m, lesson: str) -> dict:
    """The 'measured' mapping as QuizQuestion fields."""
    if m is None:
        return {}
    if isinstance(m, dict) and ("let" in m or "valid" in m):
        raise ValueError(f"quiz question {n}: 'measured.let' and 'measured.valid' are gone: work the numbers out "
                         "in a function of course/quiz_answers.py and name it as 'measured.answers'")
    if not isinstance(m, dict) or not all(isinstance(m.get(k), str) and m[k].strip() for k in ("with", "without")):
        raise ValueError(f"quiz question {n}: 'measured' needs 'with' and 'without' sentences")
    names = [(g.group(1), g.group(2)) for g in MEASURE.finditer(m["with"])]
    if not names:
        raise ValueError(f"quiz question {n}: 'measured.with' quotes no {{lab.name}} value")
    unknown = sorted({lab for lab, _ in names} - set(LAB_IDS))
    if unknown:
        raise ValueError(f"quiz question {n}: unknown lab id(s) {unknown} in 'measured.with'")
    if MEASURE.search(m["without"]):
        raise ValueError(f"quiz question {n}: 'measured.without' must not quote measured values")
    example = m.get("example")
    keys = {f"{lab}.{name}" for lab, name in names}
    if not isinstance(example, dict) or set(example) != keys or \
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in example.values()):
        raise ValueError(f"quiz question {n}: 'measured.example' must give a number for each of {sorted(keys)}")
    name = m.get("answers")
    if (lesson, name) not in ANSWERS:
        known = sorted(f for l, f in ANSWERS if l == lesson)
        raise ValueError(f"quiz question {n}: 'measured.answers' is {name!r}, not a function of course/quiz_answers.py "
                         f"for lesson {lesson!r} (it has {known})")
    return {"measured_with": m["with"].strip(), "measured_without": m["without"].strip(), "example": dict(example),
            "answers": ANSWERS[(lesson, name)], "answer_rule": ""}


def parse_quiz(items: list, lesson: str = "") -> list[QuizQuestion]:
    """A lesson's quiz from its front matter; `lesson` (its id) is where its measured questions' answers are."""
    out = []
    for n, q in enumerate(items, 1):
        if not isinstance(q, dict):
            raise ValueError(f"quiz question {n} is not a mapping")
        missing = [k for k in ("question", "choices", "answer", "explanation") if k not in q]
        if missing:
            raise ValueError(f"quiz question {n} is missing {', '.join(missing)}")
        choices, whys = _choices(n, q["choices"])
        answer = q["answer"]
        rule = answer if isinstance(answer, str) else ""
        if rule:
            answer = 0
        elif isinstance(answer, bool) or not isinstance(answer, int):
            raise ValueError(f"quiz question {n}: answer must be exactly one choice index, got {answer!r}")
        if not 0 <= answer < len(choices):
            raise ValueError(f"quiz question {n}: answer {answer} is out of range 0..{len(choices) - 1}")
        if not str(q["question"]).strip() or not str(q["explanation"]).strip():
            raise ValueError(f"quiz question {n}: question and explanation must not be empty")
        lacking = [k + 1 for k, w in enumerate(whys) if (rule or k != answer) and not w]
        if lacking:
            raise ValueError(f"quiz question {n}: wrong choice(s) {lacking} need a 'why'")
        if whys[answer] and not rule:
            raise ValueError(f"quiz question {n}: the right choice takes no 'why' (that is the explanation)")
        if any("{=" in t for t in [str(q["question"]), str(q["explanation"]), *choices, *whys]):
            raise ValueError(f"quiz question {n}: '{{= ...}}' formulas are gone: quote a number of its "
                             "'measured.answers' function as {name:format}")
        fields = _measured(n, q.get("measured"), lesson)
        if rule and not fields:
            raise ValueError(f"quiz question {n}: an answer named by its answers function needs a 'measured' value")
        question = QuizQuestion(str(q["question"]).strip(), choices, answer, str(q["explanation"]).strip(), whys,
                                **{**fields, "answer_rule": rule})
        if fields:
            try:
                question.answer = question.shown(question.example).answer
            except (ValueError, ArithmeticError) as e:
                raise ValueError(f"quiz question {n}: its example values do not work: {e}") from None
        out.append(question)
    return out
