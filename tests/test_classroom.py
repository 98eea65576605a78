"""Classroom mode against our own server (tiny model): names, the shared board, the feed's
one poll per refresh for every viewer, and the page: a student cannot change the policy,
the instructor can."""
import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from classroom import feed as feed_module
from classroom.board import CLASS, own_counts, requests_of
from classroom.feed import ClassroomFeed, refresh_interval_s
from classroom.names import check_name
from engine.core.config import SchedulerPolicy
from engine.core.metrics import Counts
from engine.model.model import load_model
from remote.load import LoadGenerator
from test_server import TOKEN, serving
from conftest import send_any_engine_load

PAGE = str(Path(__file__).resolve().parent.parent / "classroom" / "page.py")


def array(value) -> np.ndarray:
    """A figure JSON's array: a list, or plotly's typed array {"dtype", "bdata": base64}."""
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
    return np.asarray(value)


@pytest.fixture(scope="module")
def server():
    with serving(load_model("tiny", "cpu", "fp32"), "tiny",
                 policy=SchedulerPolicy(max_num_seqs=4, kv_capacity_tokens=16384)) as (url, service):
        yield url, service


def test_names():
    assert check_name("  Amy ") == "Amy"
    for bad, words in [("", "1 to 64 characters"), ("x" * 65, "got 65"), ("tenant-a", "background load")]:
        with pytest.raises(ValueError, match=words):
            check_name(bad)


def test_refresh_interval_grows_with_the_class():
    assert [refresh_interval_s(n) for n in (0, 1, 5, 10, 30, 100)] == [1.0, 1.0, 1.0, 1.5, 3.5, 5.0]


def test_one_poll_per_refresh_for_every_viewer(server, monkeypatch):
    url, _ = server
    feed = ClassroomFeed(url)
    polls = []
    poll = feed.tables.poll
    monkeypatch.setattr(feed.tables, "poll", lambda: polls.append(1) or poll())
    boards = {id(feed.board(f"session-{i}")) for i in range(10) for _ in range(3)}
    assert len(polls) == 1 and len(boards) == 1 and feed.viewers == 10
    assert feed.interval_s() == 1.5
    feed._built_at -= feed.interval_s()          # the interval has passed
    assert feed.board("session-0").version == 2 and len(polls) == 2


def test_a_refresh_that_comes_a_little_early_still_gets_a_new_board(server):
    """Each session's timer fires about one interval after its last refresh; one that fires a
    little early must not find the old board (the charts then moved every other refresh)."""
    feed = ClassroomFeed(server[0])
    first = feed.board("s")
    feed._built_at -= 0.9 * feed.interval_s()
    assert feed.board("s").version == first.version + 1
    assert feed.board("s").version == first.version + 1     # just built: not again


def test_the_board_outlines_each_tenants_own_cells(server):
    url, _ = server
    amy, bob = (LoadGenerator(url + "/v1", "tiny", name) for name in ("amy", "bob"))
    futures = amy.send_prompt("hello", 12, n=2, ignore_eos=True) + bob.send_prompt("hi", 12, n=3, ignore_eos=True)
    ids = {name: {f.result(timeout=60).id for f in fs} for name, fs in (("amy", futures[:2]), ("bob", futures[2:]))}
    feed = ClassroomFeed(url)
    board = feed.board("s")
    table = board.tenants.set_index("student")
    assert table.loc["amy", "requests"] == 2 and table.loc["bob", "requests"] == 3
    assert table.loc[CLASS, "requests"] == len(board.tables.requests) and table.loc["amy", "TTFT p50 (s)"] > 0
    assert table.loc["amy", "finished"] + table.loc["amy", "waiting"] + table.loc["amy", "running"] == 2
    heat = board.figures["membership"]["data"][0]
    z = array(heat["z"]) if not isinstance(heat["z"], list) else np.asarray(heat["z"])
    legend = {t["name"]: t["marker"]["color"] for t in board.figures["membership"]["data"]
              if t.get("mode") == "markers" and t.get("name") in ("amy", "bob")}
    assert set(legend) == {"amy", "bob"} and legend["amy"] != legend["bob"]     # one colour per student
    for name in ("amy", "bob"):
        xs, ys = board.cells[name]
        assert len(xs) == len(ids[name]) * 12          # a prefill cell and 11 decode cells each
        col = {x: j for j, x in enumerate(array(heat["x"]).tolist())}
        labels = {heat["text"][y][col[x]].rsplit(" ", 1)[0] for x, y in zip(xs, ys)}
        assert labels == {f"{name} · {i}" for i in ids[name]}        # the student's name, then the request
        assert len({int(np.asarray(z).reshape(len(heat["text"]), -1)[y][col[x]]) for x, y in zip(xs, ys)}) == 1
        mine = board.membership_for(name)
        dots = mine["data"][-1]
        assert dots["name"] == "your requests (dot)" and 1 <= len(dots["x"]) <= len(ids[name]) * 2
        assert set(zip(dots["x"], dots["y"])) <= set(zip(xs, ys))        # on the student's own cells
        assert f"{name} (you)" in [t.get("name") for t in mine["data"]]
        # the students' names on the cells wide enough to hold them
        texts = {str(t) for tr in board.figures["membership"]["data"] if tr.get("mode") == "text" for t in tr["text"]}
        assert texts <= {"amy", "bob"}
    assert len(board.figures["membership"]["data"]) == len(board.membership_for("nobody")["data"])
    # every session sends the text made once per board: the same figure, and a student's own dots on top
    assert {name: json.loads(t.text) for name, t in board.texts.items()} == board.figures
    assert board.batch_chart("nobody") is board.texts["membership"]
    assert board.batch_chart("amy") == board.membership_for("amy")
    # times are seconds since the class's run began, as the axes say
    assert board.tables.steps["t_start_s"].min() >= 0 and board.tables.steps["t_start_s"].min() < 60
    assert board.tables.requests["arrival_s"].min() >= 0
    assert board.figures["queue"]["layout"]["xaxis"]["title"]["text"] == "seconds since the class's run began"
    # the table a student and the instructor read: words for columns, no "None"
    rows = requests_of(board.tables.requests, "amy")
    assert list(rows.columns) == ["request", "status", "tokens", "sent at (s)", "TTFT (s)", "TPOT (ms)", "total (s)"]
    assert not rows.isin(["None", "nan"]).any().any() and len(rows) == 2
    assert all(len(r) <= 12 for r in rows["request"])


def test_a_students_counts_are_as_of_the_step_the_class_counts_describe(server):
    """The status line's "yours" is never more than the class's counts beside it: both as of the
    board's last step, though the request rows are read later (a burst: 1 of the class running,
    8 of "yours" running by the rows' own status)."""
    import pandas as pd
    step = {"t_start_s": 4.5, "t_end_s": 5.0, "members": [("a1", "prefill", 16)]}
    rows = pd.DataFrame({"id": [f"a{i}" for i in range(1, 9)], "tenant": "amy", "arrival_s": 4.0,
                         "finish_s": float("nan"), "status": "running"})
    assert own_counts(step, rows, "amy") == (1, 7) and own_counts(step, rows, "bob") == (0, 0)
    done = rows.assign(finish_s=[4.5] + [float("nan")] * 7)          # a1 ended before the step's end
    assert own_counts(step, done, "amy") == (0, 7)
    # over time, against the server: at every refresh, a student's counts within the class's
    url, service = server
    feed = ClassroomFeed(url)
    futures = LoadGenerator(url + "/v1", "tiny", "dora").send_prompt("hi", 24, n=8, ignore_eos=True)
    seen = []
    while not all(f.done() for f in futures) or len(seen) < 3:
        board = feed.board("s", fresh=True)
        last = board.tables.steps.iloc[-1] if len(board.tables.steps) else None
        if last is not None:
            counts = Counts.of_step(last)
            mine = own_counts(last, board.tables.requests, "dora")
            assert mine[0] <= counts.running and mine[1] <= counts.waiting, (mine, counts)
            seen.append(mine)
    assert any(running > 0 for running, _ in seen), seen


def page(url, monkeypatch) -> AppTest:
    monkeypatch.setenv("BATCHING_LAB_ENGINE_URL", url)
    feed_module._feeds.clear()
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def apply_knob(at: AppTest, token: str, widget, value) -> AppTest:
    """Type the token, set one of the instructor's knob widgets and press Apply."""
    at.text_input(key="cr_token").set_value(token)
    widget.set_value(value)
    at.button[[b.label for b in at.button].index("Apply to the engine")].click()
    return at.run()


def apply_max_num_seqs(at: AppTest, token: str, value: int) -> AppTest:
    return apply_knob(at, token, at.number_input(key="cr_knob_max_num_seqs"), value)


def test_a_student_cannot_change_the_policy_the_instructor_can(server, monkeypatch):
    url, service = server
    at = page(url, monkeypatch)
    at.text_input(key="cr_name").set_value("amy").run()
    for token, status in [("", "401"), ("guess", "403")]:
        apply_max_num_seqs(at, token, 2)
        assert any(status in e.value for e in at.error), [e.value for e in at.error]
        assert service.engine.policy.max_num_seqs == 4
    apply_max_num_seqs(at, TOKEN, 2)
    assert not at.error and service.engine.policy.max_num_seqs == 2
    assert service.engine.marks[-1].label == "max_num_seqs 4→2"


def cut_short_once(monkeypatch) -> dict:
    """Arm it, and the page's next run stops at its first read of the board and runs again, as a
    refresh that comes in while a click is being taken cuts the click's run short on a loaded
    machine. The rerun carries no click: an action the run had not reached by then is lost."""
    import streamlit as st
    armed = {"now": False}
    real = ClassroomFeed.board

    def board(self, session_id, fresh=False):
        if armed["now"] and not fresh:
            armed["now"] = False
            st.rerun()
        return real(self, session_id, fresh)
    monkeypatch.setattr(ClassroomFeed, "board", board)
    return armed


def test_a_click_counts_even_when_its_run_is_cut_short(server, monkeypatch):
    """The send buttons and the instructor's Apply act as Streamlit takes the click in."""
    import time
    url, service = server
    at = page(url, monkeypatch)
    at.text_input(key="cr_name").set_value("cora").run()
    armed = cut_short_once(monkeypatch)
    armed["now"] = True
    at.button(key="cr_send_burst").click().run()
    assert not armed["now"] and not at.exception, at.exception      # the run was cut short, once
    sent = lambda: len(at.session_state["cr_generator"].records) if "cr_generator" in at.session_state else 0
    deadline = time.monotonic() + 30
    while sent() < 8 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sent() == 8, f"the burst's click was lost: {sent()} of 8 requests sent"
    armed["now"] = True
    try:
        apply_max_num_seqs(at, TOKEN, 3)
        assert not armed["now"] and service.engine.policy.max_num_seqs == 3
    finally:
        apply_max_num_seqs(at, TOKEN, 4)
    assert service.engine.policy.max_num_seqs == 4


def set_mode(at: AppTest, mode: str) -> AppTest:
    return apply_knob(at, TOKEN, at.selectbox(key="cr_knob_mode"), mode)


def test_the_status_line_names_the_batching_mode(server, monkeypatch):
    """The class sees which batching the engine runs, and the instructor's switch shows on the page."""
    url, service = server
    at = page(url, monkeypatch)
    status = lambda: next(m.value for m in at.markdown if "slots" in m.value and "waiting" in m.value)
    assert status().startswith("**Continuous batching**"), status()
    try:
        set_mode(at, "static")
        assert service.engine.policy.mode == "static"
        feed_module._feeds.clear()                    # the next refresh reads the server again
        at.run()
        assert status().startswith("**Static batching**"), status()
    finally:
        set_mode(at, "continuous")
    assert service.engine.policy.mode == "continuous"


def test_the_page_explains_itself_without_a_server(monkeypatch):
    monkeypatch.delenv("BATCHING_LAB_ENGINE_URL", raising=False)
    at = AppTest.from_file(PAGE).run()
    assert "make classroom" in at.info[0].value


EXTERNAL = str(Path(__file__).resolve().parent.parent / "app_pages" / "external.py")


def numbers(array) -> np.ndarray:
    """A chart's array as the page sent it: a list, or plotly's typed array ({"dtype", "bdata"})."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
    return np.asarray(array, dtype=float)


def test_any_engine_page_drives_our_server_as_an_openai_compatible_one(server, monkeypatch):
    """The external-engine page, pointed at our own server: it sends the workload's requests,
    times them from the stream, reads the gauges from /metrics and says what it cannot see."""
    url, service = server
    monkeypatch.delenv("BATCHING_LAB_ENGINE_URL", raising=False)
    at = AppTest.from_file(EXTERNAL, default_timeout=60).run()
    assert "Connect" in at.info[0].value and not at.exception
    at.text_input(key="ext_url").set_value("http://127.0.0.1:1")       # nothing listens there
    at.button[0].click().run()
    assert at.error and "Could not connect" in at.error[0].value and not at.exception
    at.text_input(key="ext_url").set_value(url + "/v1")
    at.button[0].click().run()
    assert not at.error and "model **tiny**" in at.caption[0].value
    assert not at.exception                      # every chart drawn empty before the first request
    assert "this project's Batching Lab server" in at.caption[0].value.replace("\\", "")     # the kind of engine, named
    gen = send_any_engine_load(at, 3, 4, 6, timeout=60)
    table = gen.table()
    assert list(table["status"]) == ["finished"] * 3 and (table["ttft_s"] > 0).all()
    assert table["output_tokens"].between(4, 6).all()
    assert [m.value for m in at.metric][0] == "3 of 3"
    assert at.session_state["ext_gauges"][-1]["engine"] == "vllm"     # ours publishes vLLM's names
    assert any("does not publish its steps" in i.value for i in at.info)
    assert not at.exception
    # TTFT, TPOT and ITL charted per request over time from the streams, on an axis that ends with
    # the load (not 0-120 s), with short labels in place of the server's request ids
    charts = [json.loads(args["figure_json"]) for args in (json.loads(c.proto.json_args) for c in at.get("component_instance"))
              if "figure_json" in args]           # live charts (ui/live_chart.py), redrawn in place
    titles = [c["layout"]["title"]["text"] for c in charts]
    assert titles == ["Request timeline", "Running and waiting", "TTFT over time", "TPOT over time",
                      "ITL over time"]
    timeline, gauges, ttft, tpot, itl = charts
    assert list(timeline["data"][0]["y"]) == ["#1", "#2", "#3"]
    assert sorted(ttft["data"][0]["text"]) == ["#1", "#2", "#3"] and len(numbers(tpot["data"][0]["x"])) == 3
    gaps = gen.gaps()
    assert len(numbers(itl["data"][0]["x"])) == len(gaps) == (table["output_tokens"] - 1).sum()
    last = max(numbers(ttft["data"][0]["x"]).max(), numbers(tpot["data"][0]["x"]).max())
    for chart in charts:
        lo, hi = chart["layout"]["xaxis"]["range"]
        assert lo == 0 and last <= hi <= max(5.0, last + 0.5) + 1e-9, (chart["layout"]["title"]["text"], hi)


def test_many_sessions_build_figures_from_one_shared_board_at_once(server):
    """Every viewer builds its charts from the same board dicts, on its own thread, and leaves
    them as they were for the others."""
    import copy
    import threading

    from analysis.figure_json import figure_dict
    for f in LoadGenerator(server[0] + "/v1", "tiny", "amy").send_prompt("hi", 8, n=2, ignore_eos=True):
        f.result(timeout=60)
    board = ClassroomFeed(server[0]).board("s")
    before = copy.deepcopy(board.figures)
    failures = []

    def view():
        for _ in range(100):
            for shared in (board.membership_for("amy"), board.figures["queue"], board.figures["kv"]):
                try:
                    figure_dict(shared)
                except (ValueError, TypeError, KeyError) as exc:
                    failures.append(exc)
    threads = [threading.Thread(target=view) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert board.figures == before and board.figures["membership"]["data"][0]["type"] == "heatmap"
