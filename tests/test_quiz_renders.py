"""Every measured quiz question renders as it did when its answers were worked out in the front
matter's own formula language (before course/quiz_answers.py): the same lead, question, choices,
right answer, explanation and reasons, with the learner's values and without them.

tests/quiz_renders.json holds those renderings. Each question is rendered with no measurement (the
worked example), with its example values, with one value missing or not a number, with every value zero, with every value scaled down and up together and one at a
time, and with the values written in seconds ("1.23 s" reads as 1,230 ms); a set of values that makes
an unfair question falls back to the example, and that is recorded too. A quiz whose wording changes
on purpose is written again with `.venv/bin/python tests/test_quiz_renders.py --write`.
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lessons.catalog import load_lessons  # noqa: E402

SAVED = Path(__file__).with_name("quiz_renders.json")
FACTORS = (0.5, 0.8, 1.25, 2.0, 4.0)


def scenarios(example: dict) -> dict[str, dict[str, str]]:
    """Named sets of recorded values ("lab.name" -> text as a lab page records it)."""
    out = {"example": {k: f"{v:.6g}" for k, v in example.items()},
           "example in seconds": {k: f"{v / 1000:.6g} s" for k, v in example.items()}}
    out["all zero"] = {k: "0" for k in example}
    out["one missing"] = dict(list(out["example"].items())[1:])
    out["one not a number"] = {**out["example"], next(iter(example)): "—"}
    for f in FACTORS:
        out[f"all x{f:g}"] = {k: f"{v * f:.6g}" for k, v in example.items()}
        for key in example:
            out[f"{key} x{f:g}"] = {k: f"{v * f if k == key else v:.6g}" for k, v in example.items()}
    return out


def render(q, values: dict[str, str] | None) -> dict:
    def lookup(lab: str, name: str):
        return None if values is None else values.get(f"{lab}.{name}")
    shown = asdict(q.render(lookup))
    shown["choices"], shown["why"] = list(shown["choices"]), list(shown["why"])
    return shown


def renderings() -> dict[str, dict]:
    lessons, errors = load_lessons()
    assert not errors, errors
    out = {}
    for lesson in lessons:
        for n, q in enumerate(lesson.quiz):
            if not q.measured_with:
                continue
            cases = {"without a measurement": render(q, None)}
            cases.update({name: render(q, values) for name, values in scenarios(q.example).items()})
            out[f"{lesson.id}:{n}"] = cases
    return out


SNAPSHOT = json.loads(SAVED.read_text(encoding="utf-8")) if SAVED.exists() else {}
NOW = renderings()


def test_every_saved_question_is_still_measured():
    assert SNAPSHOT, f"{SAVED.name} is missing: write it with --write"
    assert set(SNAPSHOT) <= set(NOW), sorted(set(SNAPSHOT) - set(NOW))


@pytest.mark.parametrize("key", sorted(SNAPSHOT))
def test_a_measured_question_renders_as_saved(key):
    saved, now = SNAPSHOT[key], NOW.get(key, {})
    assert saved["without a measurement"]["measured"] is False
    assert any(case["measured"] for case in saved.values()), "some values make a fair question"
    assert not saved["one missing"]["measured"] and not saved["one not a number"]["measured"]
    for name, case in saved.items():
        assert now.get(name) == case, f"{key}, {name}"


def test_the_comparison_can_fail():
    key = sorted(SNAPSHOT)[0]
    changed = json.loads(json.dumps(NOW[key]))
    changed["example"]["choices"][0] += " "
    assert changed != SNAPSHOT[key]


if __name__ == "__main__" and "--write" in sys.argv:
    SAVED.write_text(json.dumps(NOW, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(NOW)} questions, {sum(len(c) for c in NOW.values())} renderings to {SAVED}")
