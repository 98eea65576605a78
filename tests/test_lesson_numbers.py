"""Numbers a lesson quotes about its lab come from the lab's own code.

A lesson writes such a number as a marker, ``{{lab:slo_goodput.RATES=1, 2, 4 and 8}}``: the
reader sees ``1, 2, 4 and 8``, and this test checks that text against ``RATES`` in
labs/slo_goodput/experiment.py. Any other number in a "Try it in the lab" section must be one
the learner is asked to set or to compare (SETTINGS below), so a lab fact cannot hide in plain text.
"""
import importlib
import re
from dataclasses import is_dataclass
from pathlib import Path
from typing import Mapping

import pytest

from lessons.catalog import FOLDER, LAB_NUMBER, LabNumber, find_lab_numbers, load_lessons, render_numbers

LESSONS, _ = load_lessons()
GLOSSARY_TEXT = (FOLDER / "glossary.md").read_text(encoding="utf-8")
TRY_IT = "## Try it in the lab"
LABS = Path(__file__).resolve().parent.parent / "labs"

# Plain numbers allowed in each lesson's "Try it" section: values the learner sets or compares.
SETTINGS = {
    "why-batch": {"8", "1", "2"},                       # "a step at batch 8 than at batch 1"; B > 2 t0/c
    "static-vs-continuous": {"0", "2"},                 # the Seed field; "within a step or two"
    "costs-of-continuous": {"64", "1,024", "2"},        # budget and KV slider settings to try
    "latency-metrics": {"800", "60"},                   # SLO slider settings to try
    "queueing": {"1"},                                  # M/M/1
    "batch-policy": {"256"},                            # a value to add
    "tail-latency": {"100", "0%", "10%"},               # slider settings; the ~100-sample rule
    "scheduler-policy": set(),
    "two-schedulers": {"16", "1"},                      # Playground settings to try
    "beyond-one-replica": set(),
    "token-budget": set(),
}


def lab_value(mark: LabNumber):
    """The value a marker names: a constant of labs/<lab>/experiment.py (or of a shared labs/<name>.py,
    such as knee_rule), then attributes, keys or indexes; a dataclass class stands for its
    defaults (SchedulerPolicy.max_wait_ms)."""
    lab_folder = LABS / mark.lab
    value = importlib.import_module(f"labs.{mark.lab}.experiment" if lab_folder.is_dir() else f"labs.{mark.lab}")
    for part in mark.name.split("."):
        if isinstance(value, type) and is_dataclass(value):
            value = value()
        if isinstance(value, Mapping):
            value = value[part]
        elif part.isdigit() and isinstance(value, (list, tuple)):
            value = value[int(part)]
        else:
            value = getattr(value, part)
    return value


def written(value, style: str = "") -> str:
    """How a lesson writes a value: 1024 -> "1,024", 2.5 -> "2.5", [1, 2, 4] -> "1, 2 and 4"."""
    if isinstance(value, (list, tuple)):
        items = [written(v, style) for v in value]
        return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    if style == "percent":
        value = value * 100
    elif style == "gain":
        value = (value - 1) * 100
    elif style:
        raise ValueError(f"unknown number style {style!r}")
    value = round(float(value), 6)
    text = f"{int(value):,}" if value.is_integer() else f"{value:g}"
    return text + ("%" if style else "")


def marks():
    out = [(l.path.name, m) for l in LESSONS for m in find_lab_numbers(l.body)]
    return out + [("glossary.md", m) for m in find_lab_numbers(GLOSSARY_TEXT)]


def mismatches(items) -> list[str]:
    return [f"{where}: '{m.text}' but labs/{m.lab} {m.name} is written '{written(lab_value(m), m.style)}'"
            for where, m in items if m.text != written(lab_value(m), m.style)]


def bare_numbers(lesson_body: str) -> set[str]:
    """Numbers in the "Try it" section outside markers, formulas and percentile names."""
    text = lesson_body[lesson_body.index(TRY_IT):]
    text = re.sub(r"\$[^$]*\$", "", LAB_NUMBER.sub("", text))
    text = re.sub(r"\bp\d+\b", "", text)
    return {n.rstrip(",.") for n in re.findall(r"\d[\d,.]*%?", text)}


def test_every_lab_number_matches_the_lab_constant():
    assert len(marks()) >= 30
    assert {l.path.name for l in LESSONS if l.labs != ["playground"]} <= {w for w, _ in marks()}, \
        "every lesson with a lesson lab quotes its lab through markers"
    assert mismatches(marks()) == []


def test_a_planted_mismatch_is_caught():
    body = next(l.body for l in LESSONS if l.id == "latency-metrics")
    planted = body.replace("{{lab:slo_goodput.LOADS:percent=50%, 100%, 150% and 200%}}",
                           "{{lab:slo_goodput.LOADS:percent=50%, 100% and 150%}}")
    assert planted != body
    found = mismatches([("planted", m) for m in find_lab_numbers(planted)])
    assert len(found) == 1 and "'50%, 100% and 150%'" in found[0] and "'50%, 100%, 150% and 200%'" in found[0]
    with pytest.raises(AttributeError):
        lab_value(LabNumber("slo_goodput", "NO_SUCH_CONSTANT", "", "1"))


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.id)
def test_no_lab_number_hides_in_plain_text(lesson):
    extra = bare_numbers(lesson.body) - SETTINGS[lesson.id]
    assert not extra, f"{lesson.path.name}: numbers {sorted(extra)} in '{TRY_IT}': quote lab facts with a marker"


def test_a_plain_lab_number_is_caught():
    body = next(l.body for l in LESSONS if l.id == "latency-metrics")
    planted = body.replace("{{lab:slo_goodput.SPEC.num_requests=64}}", "40")
    assert bare_numbers(planted) - SETTINGS["latency-metrics"] == {"40"}


def test_the_reader_sees_only_the_number():
    assert render_numbers("at {{lab:slo_goodput.RATES=1, 2, 4 and 8}} req/s") == "at 1, 2, 4 and 8 req/s"
    assert written(1.2, "gain") == "20%" and written([0.3, 0.5], "percent") == "30% and 50%"
    assert written(1024) == "1,024" and written((1.0, 2.5)) == "1 and 2.5" and written(500.0) == "500"
