"""Who the learner is, without a login, and the page's side of the learners' store (records/).

A random id is kept in the browser as a cookie (COOKIE): a reload, a closed tab or a restarted app
finds the same learner. A new browser gets a new id; the page writes the cookie with a small
script in a hidden frame (st.context.cookies only reads), and the server reads it back at the next
connection. Nothing personal is kept beyond the name a student types in a classroom.

`begin()` (app.py, every run) finds the id and reads the learner's record once per browser
session; the features rebuild their state from `record()` (lessons/progress.py, ui/predict.py).
`save(...)` writes one fact as it happens. A database that cannot be used never stops a page: the
learner is told once that their work cannot be saved, and everything goes on in memory.
"""
from __future__ import annotations

import re
import secrets

import streamlit as st

from records.database import db_path
from records.store import Record, Store, StoreError

COOKIE = "batching_lab_learner"
COOKIE_DAYS = 365
ID_KEY = "learner_id"
RECORD_KEY = "learner_record"
PROBLEM_KEY = "learner_save_problem"
_ID = re.compile(r"[0-9a-f]{32}")


@st.cache_resource(show_spinner=False)
def _store(path: str) -> Store:
    return Store(path)


def store() -> Store:
    """The process's store for the database BATCHING_LAB_DB names (or the cache folder's)."""
    return _store(str(db_path()))


def _cookie_id() -> str | None:
    try:
        value = st.context.cookies.get(COOKIE)
    except Exception:           # no browser behind this run (AppTest, a bare script)
        return None
    return value if isinstance(value, str) and _ID.fullmatch(value) else None


def _write_cookie(learner: str) -> None:
    """Keep the id in this browser: a script in a hidden frame sets the cookie for the app's address."""
    assert _ID.fullmatch(learner)          # only hex reaches the script
    st.html("<style>.st-key-learner_cookie{display:none}</style>")
    with st.container(key="learner_cookie"):
        st.iframe(
            f"<script>document.cookie = '{COOKIE}={learner}; path=/; max-age={COOKIE_DAYS * 86400}; "
            "SameSite=Lax';</script>", height=1)   # the container is hidden


def begin() -> None:
    """Find this browser's learner (or make one) and read their record, once per session."""
    if ID_KEY not in st.session_state:
        st.session_state[ID_KEY] = _cookie_id() or secrets.token_hex(16)
    learner = st.session_state[ID_KEY]
    if _has_browser() and _cookie_id() != learner:
        _write_cookie(learner)           # until the next connection brings the cookie back
    if RECORD_KEY not in st.session_state:
        try:
            store().touch(learner)
            st.session_state[RECORD_KEY] = store().load(learner)
        except StoreError as exc:
            _failed(exc)
            st.session_state[RECORD_KEY] = Record()
    if st.session_state.get(PROBLEM_KEY):
        with st.sidebar:
            st.warning(f"Your work cannot be saved ({st.session_state[PROBLEM_KEY]}). Everything still works in "
                       "this tab, but a reload or a restart will lose it.", icon=":material/cloud_off:")


def _has_browser() -> bool:
    try:
        return st.context.headers.get("Host") is not None
    except Exception:
        return False


def learner_id() -> str | None:
    """This session's learner, or None where begin() has not run (a page tested on its own)."""
    return st.session_state.get(ID_KEY)


def record() -> Record:
    """What the store held for this learner when the session began (empty without one)."""
    return st.session_state.get(RECORD_KEY) or Record()


def save(action: str, *args) -> bool:
    """Write one fact: Store.<action>(learner, *args). False (and the learner told) where it could not."""
    learner = learner_id()
    if learner is None:
        return False
    try:
        getattr(store(), action)(learner, *args)
    except StoreError as exc:
        _failed(exc)
        return False
    st.session_state.pop(PROBLEM_KEY, None)
    return True


def _failed(exc: StoreError) -> None:
    if not st.session_state.get(PROBLEM_KEY):
        st.toast(f"Cannot save your work: {exc}. It is kept in this tab only.", icon=":material/cloud_off:")
    st.session_state[PROBLEM_KEY] = str(exc)


def start_over() -> None:
    """Forget this learner (their rows too) and begin as a new one, in this browser."""
    save("forget")
    for key in list(st.session_state.keys()):
        del st.session_state[key]
    st.session_state[ID_KEY] = secrets.token_hex(16)     # begin() writes its cookie over the old one


def remembered_name() -> str:
    """The name this learner typed in a classroom before ("" for none)."""
    return record().name or ""


def keep_name(name: str) -> None:
    """Tie a classroom name to this learner's id (the teacher's table shows it)."""
    if name and name != record().name:
        if save("set_name", name):
            st.session_state.setdefault(RECORD_KEY, Record()).name = name
