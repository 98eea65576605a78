"""The lessons' pictures (analysis/pictures.py) render from cost-model runs, with alt text, and
say what the run shows."""
import pytest
from streamlit.testing.v1 import AppTest

from analysis import pictures
from ui.pictures import PICTURE_IDS

LESSON_IDS = ("static_vs_continuous", "request_lifecycle", "two_schedulers", "kv_preemption")


@pytest.mark.parametrize("picture_id", LESSON_IDS)
def test_each_picture_renders_with_alt_text(picture_id):
    assert picture_id in PICTURE_IDS
    pic = pictures.PICTURES[picture_id]()
    assert sum(1 for t in pic.figure.data if t.x is not None and len(t.x)) >= 2, "traces with points"
    assert len(pic.alt) > 100 and pic.caption


def test_static_finishes_after_continuous_on_the_same_requests():
    rows = {mode: pictures.run_recorded(pictures.SchedulerPolicy(mode=mode, max_num_seqs=pictures.SLOTS))[0]
            for mode in ("static", "continuous")}
    assert sorted(r["id"] for r in rows["static"]) == sorted(r["id"] for r in rows["continuous"])
    ends = {mode: max(r["finish_s"] for r in rs) for mode, rs in rows.items()}
    assert ends["static"] > ends["continuous"]
    assert f"{ends['static']:.2f} s" in pictures.static_vs_continuous().alt


def test_kv_picture_shows_the_victim_losing_its_blocks():
    pic = pictures.kv_preemption()
    assert "preempted" in pic.alt
    victim = pic.figure.layout.title.text.split(", ")[-1].removesuffix(" preempted")
    after = [t for t in pic.figure.data if t.name == victim and list(t.y) == [0] * len(t.y)]
    assert all(len(t.x) == 0 for t in after), "after the preemption the victim holds no block"
    with pytest.raises(ValueError, match="kv_tokens=1024"):     # a cache big enough never preempts
        pictures.kv_preemption(kv_tokens=1024)


def test_lifecycle_marks_ttft_itl_and_e2e():
    pic = pictures.request_lifecycle()
    labels = [a.text for a in pic.figure.layout.annotations]
    assert "TTFT" in labels and "E2E" in labels and any(t.startswith("ITL") for t in labels)
    assert "TPOT" in pic.figure.layout.title.text


def picture_page():
    import streamlit as st

    from ui.pictures import show_picture
    show_picture(st.session_state.get("picture", "two_schedulers"))


def test_show_picture_draws_chart_caption_and_words():
    at = AppTest.from_function(picture_page, default_timeout=60).run()
    assert not at.exception and len(at.get("plotly_chart")) == 1 and at.caption and at.expander
    at.session_state["picture"] = "no_such_picture"
    at.run()
    assert at.error and "two_schedulers" in at.error[0].value
