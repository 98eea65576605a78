"""Numbers a lesson quotes about its lab come from the lab's own code.

A lesson writes such a number as a marker, ``{{number:lab.slo_goodput.RATES}}``: the reader sees
``RATES`` of labs/slo_goodput/experiment.py written out ("1, 2, 4 and 8"), and this test checks that
every such marker names a constant that exists. Any other number in a "Try it in the lab" section must
be one the learner is asked to set or to compare (SETTINGS below), so a lab fact cannot hide in plain text.
"""
import re

import pytest

from lessons.catalog import FOLDER, load_lessons
from lessons.markers import NUMBER, Number, find_numbers, lab_value, render_numbers, written

LESSONS, _ = load_lessons()
GLOSSARY_TEXT = (FOLDER / "glossary.md").read_text(encoding="utf-8")
TRY_IT = "## Try it in the lab"

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
    "benchmarking": set(),
    "kv-capacity": set(),
    "speculative-decoding": {"1"},                      # batch 1, the case the lab runs beside the large batch
    "token-budget": set(),
}


def marks():
    out = [(l.path.name, m) for l in LESSONS for m in find_numbers(l.body, "lab")]
    return out + [("glossary.md", m) for m in find_numbers(GLOSSARY_TEXT, "lab")]


def missing(items) -> list[str]:
    """The markers that name no constant of their lab, or one that cannot be written in their style."""
    out = []
    for where, m in items:
        try:
            written(lab_value(m), m.style)
        except (ImportError, AttributeError, KeyError, IndexError, TypeError, ValueError) as e:
            out.append(f"{where}: labs/{m.lab} has no {m.constant} to write as {m.style or 'it is'} ({e!r})")
    return out


def bare_numbers(lesson_body: str) -> set[str]:
    """Numbers in the "Try it" section outside markers, formulas and percentile names."""
    text = lesson_body[lesson_body.index(TRY_IT):]
    text = re.sub(r"\$[^$]*\$", "", NUMBER.sub("", text))
    text = re.sub(r"\bp\d+\b", "", text)
    return {n.rstrip(",.") for n in re.findall(r"\d[\d,.]*%?", text)}


def test_every_lab_number_names_a_lab_constant():
    assert len(marks()) >= 30
    assert {l.path.name for l in LESSONS if l.labs != ["playground"]} <= {w for w, _ in marks()}, \
        "every lesson with a lesson lab quotes its lab through markers"
    assert missing(marks()) == []


def test_a_marker_naming_no_constant_is_caught():
    body = next(l.body for l in LESSONS if l.id == "latency-metrics")
    planted = body.replace("{{number:lab.slo_goodput.LOADS:percent}}", "{{number:lab.slo_goodput.LOAD:percent}}")
    assert planted != body
    found = missing([("planted", m) for m in find_numbers(planted, "lab")])
    assert len(found) == 1 and "LOAD" in found[0]
    assert missing([("planted", Number("lab", "no_such_lab.RATES"))]) != []
    with pytest.raises(AttributeError):
        lab_value(Number("lab", "slo_goodput.NO_SUCH_CONSTANT"))


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.id)
def test_no_lab_number_hides_in_plain_text(lesson):
    extra = bare_numbers(lesson.body) - SETTINGS[lesson.id]
    assert not extra, f"{lesson.path.name}: numbers {sorted(extra)} in '{TRY_IT}': quote lab facts with a marker"


def test_a_plain_lab_number_is_caught():
    body = next(l.body for l in LESSONS if l.id == "latency-metrics")
    planted = body.replace("{{number:lab.slo_goodput.SPEC.num_requests}}", "40")
    assert planted != body
    assert bare_numbers(planted) - SETTINGS["latency-metrics"] == {"40"}


def test_the_reader_sees_only_the_number():
    from labs.slo_goodput.experiment import LOADS
    assert render_numbers("at {{number:lab.slo_goodput.LOADS:percent}} load") == f"at {written(LOADS, 'percent')} load"
    assert render_numbers("{{number:lab.slo_goodput.NO_SUCH}}") == "{{number:lab.slo_goodput.NO_SUCH}}"
    assert render_numbers("{{number:example.mu}} and {{number:example.mu}}", {"mu": 1.5}) == "1.5 and 1.5"
    assert render_numbers("{{number:example.mu}}") == "…", "no step model's numbers given: a placeholder"
    assert written(1.2, "gain") == "20%" and written([0.3, 0.5], "percent") == "30% and 50%"
    assert written(1024) == "1,024" and written((1.0, 2.5)) == "1 and 2.5" and written(500.0) == "500"
