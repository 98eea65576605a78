"""The lessons' pictures (course/pictures.py, course/pictures_examples.py) render from simulated
runs, with alt text, and say what the run shows."""
import os
import re
import threading
import pytest
from streamlit.testing.v1 import AppTest

from course import examples_serving as course_serving, pictures
from ui.lesson_pictures import PICTURE_IDS, PICTURES     # every lesson's pictures, whichever module draws them


@pytest.mark.parametrize("picture_id", PICTURE_IDS)
def test_each_picture_renders_with_alt_text(picture_id):
    pic = PICTURES[picture_id]()
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

    from ui.lesson_pictures import show_picture
    show_picture(st.session_state.get("picture", "two_schedulers"))


def test_show_picture_draws_chart_caption_and_words():
    at = AppTest.from_function(picture_page, default_timeout=60).run()
    assert not at.exception and len(at.get("plotly_chart")) == 1 and at.caption and at.expander
    at.session_state["picture"] = "no_such_picture"
    at.run()
    assert at.error and "two_schedulers" in at.error[0].value


def test_two_schedulers_has_the_gateway_route_and_the_autoscaler_read_the_queue():
    pic = PICTURES["two_schedulers"]()
    words = pic.alt
    assert "four deciders" in words and "gateway decides which replica gets each arriving request" in words
    assert "never sees a request" in words and "autoscaler reads" in words and "ReplicaSet creates pods" in words
    assert "least-loaded" not in words
    boxes = [a.text.replace("<br>", " ") for a in pic.figure.layout.annotations if a.text and a.text.startswith("<b>")]
    labels = " ".join(boxes)
    assert "which replica gets each request" in labels and "which node runs each new pod" in labels
    assert "replicas (waiting)" in labels and "<b>ReplicaSet</b> the Deployment's; creates pods only" in labels
    deciders = [b for b in boxes if "decides" in b]
    assert len(deciders) == 5 and len({b.split("</b>")[1] for b in deciders}) == 4   # two replicas, one kind
    assert pic.caption.startswith("Four deciders")
    g = course_serving.gateway_run()
    assert sum(g["routed"]) == len(course_serving.ramp_requests(g["mu"]))     # every request routed once
    assert g["alarm_s"] is not None and g["alarm_s"] > course_serving.RAMP_AT_S


def test_the_roofline_picture_turns_compute_bound_where_the_arithmetic_passes_the_read():
    pic = PICTURES["weights_per_step"]()
    assert "memory-bound before" in pic.alt and "compute-bound after" in pic.alt
    assert "between 64 and 128 sequences" in pic.alt


def test_a_picture_is_kept_on_disk_under_the_digest_of_the_code_that_draws_it(tmp_path, monkeypatch):
    from ui import lesson_pictures as glue
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(glue, "_drawn", {})
    drawn = []
    monkeypatch.setitem(glue.PICTURES, "kv_preemption", lambda: drawn.append(1) or pictures.kv_preemption())
    first = glue.picture("kv_preemption")
    assert drawn == [1] and list((tmp_path / "results").glob("picture-kv_preemption-*.pkl"))
    monkeypatch.setattr(glue, "_drawn", {})                     # a new process: read from disk
    assert glue.picture("kv_preemption").alt == first.alt and drawn == [1]
    monkeypatch.setattr(glue, "_drawn", {})
    monkeypatch.setattr(glue, "code_digest", lambda: "changed-code")   # the code changed: drawn afresh
    glue.picture("kv_preemption")
    assert drawn == [1, 1]


PHONE_TITLE_CHARS = 52      # a title line plotly draws at its default size across a 390-px phone screen


def title_lines(figure) -> list[str]:
    """Every line of a figure's title and subplot titles, as drawn (tags taken out)."""
    texts = [figure.layout.title.text or ""] + [a.text or "" for a in figure.layout.annotations
                                                if a.yref == "paper" and a.y is not None and a.y >= 1]
    return [re.sub(r"<[^>]+>", "", line) for t in texts for line in t.split("<br>")]


@pytest.mark.parametrize("picture_id", PICTURE_IDS)
def test_each_pictures_title_fits_a_phone(picture_id):
    lines = title_lines(PICTURES[picture_id]().figure)
    assert all(len(line) <= PHONE_TITLE_CHARS for line in lines), [l for l in lines if len(l) > PHONE_TITLE_CHARS]


def test_the_title_check_can_fail():
    import plotly.graph_objects as go
    too_long = go.Figure(layout=dict(title=dict(text="Waiting requests over time, capacity μ = 1.80 requests/s")))
    assert max(map(len, title_lines(too_long))) > PHONE_TITLE_CHARS
    assert max(map(len, title_lines(go.Figure(layout=dict(title=dict(text="Waiting<br>capacity")))))) <= PHONE_TITLE_CHARS


def test_the_warm_up_keeps_the_pages_priority_and_pauses_after_each_picture(monkeypatch):
    """The warm-up thread shares the pages' process, so the pages wait on what it holds (a module's
    import lock, Python's own lock): ranked below them by the OS, it can keep a page's first run
    waiting for minutes on a busy machine. It keeps their priority and pauses after each picture
    instead."""
    import time
    from ui import calculators
    from ui import lesson_pictures as glue
    seen, pauses = [], []
    thread = threading.Thread(target=glue._draw_all)

    def spy(owner, name):
        real = getattr(owner, name)

        def instead(*args):          # another warm-up (a lesson page's in this process) goes on as it was
            if threading.current_thread() is not thread:
                return real(*args)
            if name == "sleep":
                pauses.append(args[0])
            else:
                seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        monkeypatch.setattr(owner, name, instead)
    for owner, name in ((calculators, "warm"), (glue, "warm_examples"), (glue, "picture"), (time, "sleep")):
        spy(owner, name)
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread.start()
    thread.join(timeout=60)
    assert seen == [base] * (2 + len(PICTURE_IDS))
    assert len(pauses) == len(PICTURE_IDS) and all(p >= 0 for p in pauses)


def test_a_picture_on_the_learners_step_model_is_drawn_and_kept_per_step_model(tmp_path, monkeypatch):
    """queue_growth runs on the step model it is given: another model is another picture, in this process and
    on disk; a picture the same for everyone ignores the model."""
    from course.examples import COURSE_MODEL
    from ui import lesson_pictures as glue
    from tests.test_lesson_examples import FASTER
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(glue, "_drawn", {})
    recorded, faster = glue.picture("queue_growth", COURSE_MODEL), glue.picture("queue_growth", FASTER)
    assert recorded.alt != faster.alt and FASTER.label in faster.alt and "recorded" in recorded.caption
    assert len(list((tmp_path / "results").glob("picture-queue_growth-*.pkl"))) == 2
    assert glue.picture("kv_preemption", FASTER) is glue.picture("kv_preemption", COURSE_MODEL)
