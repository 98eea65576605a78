"""The one line every lab page shows about how its requests arrive: read off the workload, so it says
"all at once" of a batch and "open load" of arrivals at a rate, and every lab page shows it."""
from dataclasses import replace

import pytest
from streamlit.testing.v1 import AppTest

from engine.runs.workload import WorkloadSpec
from ui import load_line
from course.registry import LESSON_LABS

from tests.test_lab_pages import ROOT, TIMEOUT


def test_the_words_follow_the_workload():
    spec = WorkloadSpec()
    assert load_line.words(replace(spec, rate=0)) == load_line.AT_ONCE
    assert "open load, random (Poisson)" in load_line.words(replace(spec, rate=2.0))
    assert "bursty" in load_line.words(replace(spec, rate=2.0, burstiness=3.0))
    assert "evenly spaced" in load_line.words(replace(spec, rate=2.0, burstiness=0.5))
    line = load_line.text(("warm-up", replace(spec, rate=0)), ("then", load_line.CLOSED))
    assert line == f"Load: warm-up: {load_line.AT_ONCE}; then: {load_line.CLOSED}."


@pytest.mark.parametrize("path", [lab.path for lab in LESSON_LABS], ids=[lab.url_path for lab in LESSON_LABS])
def test_every_lab_page_says_how_its_load_arrives(lab_env, path):
    at = AppTest.from_file(str(ROOT / path), default_timeout=TIMEOUT).run()
    assert not at.exception, [e.message for e in at.exception]
    lines = [c.value for c in at.caption if c.value.startswith(":material/input: Load: ")]
    assert len(lines) == 1, [c.value for c in at.caption]
