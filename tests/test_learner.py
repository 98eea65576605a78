"""What a learner does comes back (ui/learner.py over records/): a new session of the same learner
(a reload, or a restarted app: the store is a file) finds its progress, its locked predictions with
their reveals, its checked quiz answers and its lab's numbers; two tabs do not overwrite each other;
a database that cannot be used never breaks a page."""
import os
import sqlite3
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lessons.catalog import load_lessons
from records.database import DB_ENV
from ui.predict import PREDICTIONS_KEY

LESSONS_APP = str(Path(__file__).parent / "apps" / "lessons_app.py")
ME = "a1" * 16


@pytest.fixture(autouse=True)
def own_db(tmp_path, monkeypatch):
    path = tmp_path / "learners.sqlite3"
    monkeypatch.setenv(DB_ENV, str(path))
    return path


def lab_script():
    import streamlit as st

    from lessons import progress
    from ui import learner, predict
    learner.begin()
    q = predict.question("knee", choices=("1", "8", "64"), settings={"requests": st.session_state.get("n", 200)})
    guess = predict.gate(q)
    if st.button("read", key="read"):
        progress.mark_read("why-batch")
    predict.reveal(q, guess, "8", "because")
    predict.record("knee", {"requests": 200}, knee="8")
    st.markdown(f"READ {sorted(progress.progress()['read'])} KNEE {predict.measurement('knee', 'knee')}")


def session(script=lab_script, learner: str = ME) -> AppTest:
    at = AppTest.from_function(script, default_timeout=30)
    at.session_state["learner_id"] = learner          # what the browser's cookie gives a new session
    return at.run()


def commit(at: AppTest, guess: str) -> AppTest:
    at.radio(key="predict_knee__guess").set_value(guess).run()
    return at.button(key="predict_knee__commit").click().run()


def test_a_new_session_of_the_same_learner_finds_everything():
    first = commit(session(), "64")
    first.button(key="read").click().run()
    assert not first.exception
    again = session()                                  # a reload (or a restart: the store is a file)
    assert not again.exception
    assert any("Locked" in c.value for c in again.caption), "the prediction is committed and locked"
    [entry] = again.session_state[PREDICTIONS_KEY].values()
    assert (entry["guess"], entry["measured"], entry["verdict"]) == ("64", "8", "not what happened")
    assert again.markdown[-1].value == "READ ['why-batch'] KNEE 8"
    other = session(learner="b2" * 16)                  # another browser: nothing of the first
    assert not any("Locked" in c.value for c in other.caption)
    assert other.session_state[PREDICTIONS_KEY] == {}


def test_two_tabs_of_one_learner_keep_both():
    a, b = session(), session()                         # both open before either commits
    commit(a, "64")
    b.session_state["n"] = 400                          # the other tab asks with other settings
    commit(b.run(), "8")
    b.button(key="read").click().run()
    c = session()
    kept = {dict(e["settings"])["requests"]: e["guess"] for e in c.session_state[PREDICTIONS_KEY].values()}
    assert kept == {"200": "64", "400": "8"}
    c.session_state["n"] = 400
    c.run()
    assert c.markdown[-1].value.startswith("READ ['why-batch']")


def test_checked_quiz_answers_come_back_after_a_reload():
    lesson = load_lessons()[0][0]
    q0 = lesson.quiz[0]
    at = AppTest.from_file(LESSONS_APP, default_timeout=30)
    at.session_state["learner_id"] = ME
    at.run()
    at.session_state["goto"] = f"lesson-{lesson.id}"
    at.run()
    at.radio(key=f"quiz:{lesson.id}:0").set_value(q0.answer)
    at.button(key=f"check:{lesson.id}:0").click().run()
    assert [s.value for s in at.success] == [f"**Correct.** {q0.explanation}"]
    again = AppTest.from_file(LESSONS_APP, default_timeout=30)
    again.session_state["learner_id"] = ME
    again.session_state["goto"] = f"lesson-{lesson.id}"
    again.run()
    assert not again.exception
    assert again.radio(key=f"quiz:{lesson.id}:0").value == q0.answer
    assert [s.value for s in again.success] == [f"**Correct.** {q0.explanation}"]
    assert "checks 1/" in next(c.value for c in again.sidebar.caption if c.value.startswith("Lessons read"))


def test_start_over_forgets_the_learner(own_db):
    commit(session(), "64")
    at = AppTest.from_file(LESSONS_APP, default_timeout=30)
    at.session_state["learner_id"] = ME
    at.run()
    at.button(key="learner_start_over").click().run()
    assert not at.exception and at.session_state["learner_id"] != ME
    assert sqlite3.connect(own_db).execute("SELECT COUNT(*) FROM predictions").fetchone()[0] == 0
    assert not any("Locked" in c.value for c in session().caption), "the old id finds nothing either"


def broken(path: Path, how: str, monkeypatch) -> None:
    from records import database
    from records.store import Store
    from ui import learner
    learner._store.clear()
    if how == "corrupt":
        path.write_bytes(b"not a database at all " * 300)
    elif how == "newer":
        c = sqlite3.connect(path)
        c.execute("PRAGMA user_version = 99")
        c.close()
    elif how == "read-only":                 # as a file on a read-only disk opens
        Store(path).check()
        monkeypatch.setattr(database, "connect", lambda p, t=5.0: sqlite3.connect(
            f"file:{p}?mode=ro", uri=True, isolation_level=None))


@pytest.mark.parametrize("how", ["corrupt", "newer", "read-only"])     # full: tests/test_records.py
def test_a_database_that_cannot_be_used_never_breaks_the_page(own_db, how, monkeypatch):
    broken(own_db, how, monkeypatch)
    at = commit(session(), "64")
    assert not at.exception
    assert any("cannot be saved" in w.value for w in at.sidebar.warning), "the learner is told"
    assert any("Locked" in c.value for c in at.caption), "and the page works on, in memory"
    at.button(key="read").click().run()
    assert at.markdown[-1].value == "READ ['why-batch'] KNEE 8"


def test_a_locked_database_mid_session_is_said_and_the_work_goes_on(own_db, monkeypatch):
    monkeypatch.setattr("records.database.TIMEOUT_S", 0.3)
    at = session()
    from ui import learner
    learner._store.clear()                              # a store with the short timeout
    holder = sqlite3.connect(own_db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        commit(at, "64")
    finally:
        holder.execute("ROLLBACK")
    assert not at.exception
    assert any("cannot be saved" in w.value and "locked" in w.value for w in at.sidebar.warning)
    assert any("Locked" in c.value for c in at.caption)
