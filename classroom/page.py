"""Classroom: one shared engine, a whole class sending to it and watching the same batch.

The app must be attached to a Batching Lab server (`make classroom` does both). A student
picks a name (their tenant), sends a prompt or a burst, and finds their own requests
outlined in the shared batch chart and their own TTFT/TPOT beside the class's. The
instructor, with the token, changes the policy live, runs background load and resets.
This page only reads boards that classroom.feed builds once for every viewer.
"""
from __future__ import annotations

import httpx2 as httpx
import pandas as pd
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from classroom.board import BACKGROUND, CLASS, Board, own_counts, readable, requests_of, student
from classroom.feed import shared_feed
from classroom.names import check_name
from engine.core.config import SchedulerPolicy
from engine.core.knobs import knobs_of
from engine.core.metrics import Counts
from engine.runs.workload import WorkloadSpec
from remote import attach
from remote.lab_control import LabControl, LabRefused
from remote.load import LoadGenerator, served_model
from classroom import teacher
from ui import learner, widgets
from ui.live_chart import show_figure

INSTRUCTOR_KNOBS = ("mode", "max_num_seqs", "order", "enable_chunked_prefill", "kv_capacity_tokens")
LOAD_KNOBS = ("rate", "num_requests")
BURST_MAX, OUTPUT_MAX = 16, 256
POLICY, WORKLOAD = knobs_of(SchedulerPolicy), knobs_of(WorkloadSpec)

st.html("""<style>
/* The shared chart above the fold on a projector (1280x720): less padding above the title. */
@media (min-width: 640px) {
  [data-testid='stMainBlockContainer'] { padding-top: 2.5rem; padding-bottom: 3rem; }
}
[data-testid='stElementContainer'][data-stale='true'] { opacity: 1 !important; transition: none !important; }
</style>""")
st.markdown("### :material/groups: Classroom: one engine, everyone's requests")
st.markdown("1. Type **your name** under the chart: it is your colour on the chart and your row in the table.  \n"
            "2. Press **Send** (one request) or **Send a burst** (many at once).  \n"
            "3. Find **your colour** in the shared batch chart (your cells carry a dot) and compare "
            "**your TTFT and TPOT** with the class's in the table.")
try:
    choice = attach.from_env()
except ValueError as exc:
    st.error(widgets.plain(exc))
    st.stop()
if choice.kind != "server":
    st.info("The classroom needs the app attached to a Batching Lab server: run `make classroom`, "
            "or start `python -m engine serve` and set BATCHING_LAB_ENGINE_URL to its address.")
    st.stop()

feed = shared_feed(choice.url)
session_id = get_script_run_ctx().session_id if get_script_run_ctx() else "script"


@st.cache_resource(show_spinner=False)
def model_name(url: str) -> str:
    return served_model(url)


def generator(name: str) -> LoadGenerator:
    """This session's load generator: its requests carry the student's name as their tenant."""
    gen = st.session_state.get("cr_generator")
    if gen is None or gen.tenant != name:
        gen = LoadGenerator(choice.api_url, model_name(choice.api_url), name)
        st.session_state["cr_generator"] = gen
    return gen


# ----------------------------------------------------------------------------- who are you


# The buttons act in callbacks: Streamlit calls them as it takes the click in, before the page
# runs again. An action in the page's code ran only if the run got as far as its button; a
# run cut short before it (by a refresh on a loaded machine) lost the click.
def send(burst: bool) -> None:
    """Send and Send a burst: the prompt, as this student, with the values the boxes hold now."""
    try:
        me = check_name(st.session_state.get("cr_name", ""))
    except ValueError:
        return                       # the name just changed to one not allowed: the page says why
    n = int(st.session_state["cr_burst"]) if burst else 1
    generator(me).send_prompt(st.session_state["cr_prompt"], int(st.session_state["cr_tokens"]), n=n,
                              ignore_eos=True)
    st.toast(f"Sent {n} request{'s' if n != 1 else ''} as {me}.")


def who_are_you() -> str:
    """The name box and the send buttons; returns the student's checked name ("" for none)."""
    st.session_state.setdefault("cr_name", learner.remembered_name())     # this learner's name, kept
    name = st.text_input("Your name (your requests carry it as their tenant)", key="cr_name", max_chars=64)
    me = ""
    with st.container():      # always drawn, so the charts below keep their frames (see draw_top)
        if name:
            try:
                me = check_name(name)
            except ValueError as exc:
                st.error(widgets.plain(exc))
    if me:
        learner.keep_name(me)
        with st.container(border=True, key="cr_send"):
            st.text_input("Your prompt", "Tell me a short story about a busy kitchen.", key="cr_prompt")
            cols = st.columns(3)
            cols[0].number_input("Output tokens", 1, OUTPUT_MAX, 64, key="cr_tokens")
            burst = cols[1].number_input("Burst size", 1, BURST_MAX, 8, key="cr_burst")
            cols[2].button("Send", key="cr_send_one", type="primary", on_click=send, args=(False,))
            cols[2].button(f"Send a burst of {int(burst)}", key="cr_send_burst", on_click=send, args=(True,))
    else:
        st.caption("Pick a name to send requests; you can watch without one.")
    return me


# ----------------------------------------------------------------------------- instructor


def knob_widget(k, value):
    key = f"cr_knob_{k.name}"
    if k.kind == "choice":
        return st.selectbox(k.label, k.choices, index=k.choices.index(value), help=k.help, key=key)
    if k.kind == "bool":
        return st.toggle(k.label, value=bool(value), help=k.help, key=key)
    cast = int if k.kind == "int" else float
    return st.number_input(k.label, cast(k.lo), cast(k.hi), cast(value), help=k.help, key=key)


def instructor_act(action: str) -> None:
    """An Instructor button's action (a callback, like send): apply the knobs that differ from the
    engine's policy, start or stop the background load, or reset. A refusal is kept for the panel."""
    control = LabControl(choice.url, st.session_state.get("cr_token", ""))
    try:
        if action == "apply":
            policy = control.policy()
            changes = {n: st.session_state[f"cr_knob_{n}"] for n in INSTRUCTOR_KNOBS}
            control.set_policy(**{n: v for n, v in changes.items() if v != policy[n]})
        elif action == "start":
            control.start_load(**{n: st.session_state[f"cr_load_{n}"] for n in LOAD_KNOBS})
        elif action == "stop":
            control.stop_load()
        else:
            control.reset()
    except LabRefused as exc:
        st.session_state["cr_refused"] = f"The engine refused: {exc}"
    except httpx.HTTPError as exc:
        st.session_state["cr_refused"] = f"Could not reach the engine at {choice.url}: {exc}"
    else:
        st.session_state.pop("cr_refused", None)
        feed.board(session_id, fresh=True)
        st.toast("Done: the whole class sees it from the next refresh.")


def instructor_panel(board: Board) -> None:
    with st.expander("Instructor", icon=":material/key:"):
        token = st.text_input("Instructor token", type="password", key="cr_token")
        with st.form("cr_policy_form", border=False):
            for n in INSTRUCTOR_KNOBS:
                knob_widget(POLICY[n], board.policy[n])
            st.form_submit_button("Apply to the engine", type="primary", on_click=instructor_act, args=("apply",))
        load_cols = st.columns(len(LOAD_KNOBS) + 2)
        for n, col in zip(LOAD_KNOBS, load_cols):
            col.number_input(WORKLOAD[n].label, WORKLOAD[n].lo, WORKLOAD[n].ui_hi, WORKLOAD[n].default,
                             key=f"cr_load_{n}")
        load_cols[-2].button("Start background load", key="cr_load_start", on_click=instructor_act, args=("start",))
        load_cols[-2].button("Stop background load", key="cr_load_stop", on_click=instructor_act, args=("stop",))
        load_cols[-1].button("Reset the engine", key="cr_reset", on_click=instructor_act, args=("reset",),
                             help="Abort everything in flight and start a fresh engine with this policy.")
        if st.session_state.get("cr_refused"):
            st.error(widgets.plain(st.session_state.pop("cr_refused")))
        if token:
            per_student(board)
            teacher.view(LabControl(choice.url, token))


def per_student(board: Board) -> None:
    """The instructor's view: a table of each student's latest requests, in their colour."""
    requests = board.tables.requests
    tenants = [t for t in dict.fromkeys(requests["tenant"].astype(str)) if student(t) != BACKGROUND] \
        if len(requests) else []
    st.markdown("**Each student's latest requests** (times in seconds since the class's run began)")
    if not tenants:
        st.caption("No student has sent a request yet.")
    for i, tenant in enumerate(tenants):      # one a row: at 1280 px two side by side cut off their last columns
        color = board.colors.get(tenant, "#999")
        st.markdown(f"<span style='color:{color}'>■</span> **{widgets.plain(tenant)}**", unsafe_allow_html=True)
        st.dataframe(requests_of(requests, tenant), hide_index=True, width="stretch", key=f"cr_student_{i}_{tenant}")


# ----------------------------------------------------------------------------- the shared view


def status_line(board: Board, me: str) -> None:
    steps = board.tables.steps
    last = steps.iloc[-1] if len(steps) else None
    kv = f"{last['kv_used_blocks'] / last['kv_total_blocks']:.0%}" if last is not None and last["kv_total_blocks"] else "—"
    load = board.load
    counts = Counts.of_step(last) if last is not None and "arrived" in steps.columns else Counts()
    slots = int(last["max_num_seqs"]) if last is not None and "max_num_seqs" in steps.columns and last["max_num_seqs"] \
        else board.policy["max_num_seqs"]
    mine = ""
    if me and len(board.tables.requests):
        running, waiting = own_counts(last, board.tables.requests, me)
        mine = f" · **yours:** {running} running, {waiting} waiting"
    st.markdown(
        f"**{board.policy.get('mode', 'continuous').capitalize()} batching** · "
        f"**Running:** {counts.running} of {slots} slots · **waiting:** {counts.waiting}{mine} · "
        f"{counts.text()} · **KV used:** {kv} · background load: {'on' if load['running'] else 'off'} · "
        f"viewers: {feed.viewers} · refresh every {feed.interval_s():.1f} s")


def tenant_table(board: Board, me: str) -> None:
    table = board.tenants.copy()
    table.insert(0, "", ["← you" if who == me else "" for who in table["student"]])
    table["TTFT p50 (s)"] = [f"{v:.2f}" if v == v else "—" for v in table["TTFT p50 (s)"]]
    table["TPOT p50 (ms)"] = [f"{v:.0f}" if v == v else "—" for v in table["TPOT p50 (ms)"]]
    st.dataframe(table, hide_index=True, width="stretch", key="cr_tenants")
    if CLASS in set(table["student"]):
        st.caption("Where each student's recent requests are now, and TTFT and TPOT as the engine measured "
                   "them: medians over finished requests (— until one has finished).")


def own_requests() -> None:
    gen = st.session_state.get("cr_generator")
    if gen is None or not gen.records:
        return
    table = gen.table()
    table["arrival_s"] = pd.NA                           # this app's clock, not the class's
    st.caption("Your latest requests, timed by this app from the stream (network included):")
    st.dataframe(readable(table.tail(10).iloc[::-1]).drop(columns=["sent at (s)"]), hide_index=True,
                 width="stretch", key="cr_own")


def draw_top() -> None:
    """The status line and the shared batch chart: the first thing on the page."""
    board = feed.board(session_id)
    with st.container():      # always drawn: a warning that comes or goes leaves the chart's frame in place
        if feed.error:
            st.warning(widgets.plain(feed.error))
    if board is None:
        st.info("Waiting for the engine's first answer…")
        return
    me = st.session_state.get("cr_me", "")
    status_line(board, me)
    # Charts that update in place (ui/live_chart.py): each viewer's browser redraws only what
    # changed, where st.plotly_chart drew three new plots for every viewer at every refresh.
    # The board's figures are built, and their JSON text made, once per refresh for every session;
    # each session sends them.
    show_figure(board.batch_chart(me), key="cr_membership")


def draw_rest() -> None:
    """The queue and KV charts and the tables, under the name box."""
    board = feed.board(session_id)
    if board is None:
        return
    if not st.session_state.get("cr_panel"):
        st.rerun(scope="app")     # the engine answered after the page was drawn: draw the instructor panel too
    me = st.session_state.get("cr_me", "")
    left, right = st.columns(2)
    with left:
        show_figure(board.texts["queue"], key="cr_queue")
    with right:
        show_figure(board.texts["kv"], key="cr_kv")
    tenant_table(board, me)
    own_requests()
    if abs(feed.interval_s() - st.session_state.get("cr_every", 0)) > 0.25:
        st.rerun(scope="app")                  # the class grew or shrank: refresh at the new pace


st.session_state["cr_every"] = feed.interval_s()
first = feed.board(session_id)
st.session_state["cr_panel"] = first is not None     # the instructor panel is drawn below in this run
st.fragment(run_every=st.session_state["cr_every"])(draw_top)()
st.session_state["cr_me"] = who_are_you()
st.fragment(run_every=st.session_state["cr_every"])(draw_rest)()
if first is not None:
    instructor_panel(first)
