"""Playground: run the real engine live, move any knob while it runs, watch what changes.

The page is a fixed skeleton (see playground/view.py): one fragment holds the live part and,
while the engine runs, refreshes at this viewer's pace (playground/pace.py), giving each element new data.
"""
import time

import streamlit as st

from engine.runs.live import KEEP_STEPS, TERMINAL
from playground import comparison, controls, engines, prediction, slot, view
from playground.checks import check
from playground.pace import RefreshPace
from playground.review import step_end, tables_at
from ui import session, widgets
from ui.instant_feedback import instant_feedback

PAUSED = ("Paused: the run's clock is stopped, arrivals included, so nothing arrives and no wait "
          "grows until you press Resume (Step once runs one step, then stops the clock again).")
PAUSED_SHARED = ("Paused: your traffic has stopped and this view is frozen. The shared engine goes on "
                 "serving everyone else's requests; Resume sends yours again from where they stopped.")
KEEPALIVE_S = 10            # a paused run's page still says "I am here" this often
STARTING = "pg_starting"    # Start was pressed: the page says so first, then builds the run
IN_FULL_RUN = "pg_in_full_run"
PACE = "pg_pace"            # this viewer's RefreshPace: how often its live part refreshes

view.page_style()
head, toggle = st.columns([3, 1], vertical_alignment="bottom")
if st.session_state.get("pg_presenter"):
    head.markdown("## Playground")        # a smaller title: the batch chart stays above the fold
else:
    head.title("Playground")
presenter = toggle.toggle("Presenter mode", key="pg_presenter",
                          help="For a class: larger chart text, the key numbers, four charts and "
                               "the knobs moved most, on the page.")
# Every element above the live charts is drawn in every state, if only as an empty container:
# Streamlit rebuilds a chart's iframe when an element above it comes or goes, and a rebuilt chart
# is blank until its next draw (seconds on a small machine).
intro = st.container()
if not presenter and slot.run() is None and not st.session_state.get(STARTING):   # after Start the charts need the room
    intro.caption("A real SmolLM2 engine on this machine (or, chosen under Engine in the sidebar, a "
                  "simulation of one, faster than real time). Press Start, then move any slider while it "
                  "runs: once a slider rests, policy and SLO changes apply at the next engine step "
                  "and show as one dashed line on the time charts; workload changes apply to "
                  "requests arriving from then on.")

# The presets and the rate slider are sized to the chosen engine's step times (this machine's, or
# a simulated one's), so the model loads before the setup is read.
try:
    model = session.model()
    sized_for = controls.engine_on_load()
    # This machine's step model is refit from every real step (engine.step_fit): the presets are
    # sized again from it only between runs, so a preset does not read "modified" mid-run.
    held, current = st.session_state.get("pg_sizing"), slot.run()
    if held is None or held[0] != sized_for or current is None or current.state in TERMINAL:
        held = st.session_state["pg_sizing"] = (sized_for, engines.sizing_model(sized_for, model))
    step_model = held[1]
except Exception as exc:
    st.error(widgets.error_message("Cannot load the model", exc))
    st.stop()
# The setup is read from the session (and the page address) before any widget is drawn.
controls.size_for(sized_for, step_model)
link_problems = controls.init_from_link(step_model)


# ----- buttons
# A button's callback runs before the page is drawn: a failure in it is kept in "pg_error"
# and shown as an error line below the buttons.

def _reported(what: str, action) -> None:
    try:
        action()
    except Exception as exc:
        st.session_state["pg_error"] = widgets.error_message(what, exc)


def _start():
    st.session_state[STARTING] = True     # the page first says "starting", then builds the run
    view.follow_latest()


def _new_run():
    """A fresh run; the one it replaces stays as the grey reference (playground.comparison)."""
    comparison.keep_previous(slot.run())
    return slot.new_run(controls.current_setup(), *controls.current_engine(), controls.instructor_token())


def _build_and_start():
    lab = slot.run()
    if lab is None or not lab.can_continue or lab.engine_choice != controls.current_engine()[0]:
        lab = _new_run()
    lab.start()


def _step():
    lab = slot.run()
    if lab is None or lab.state in TERMINAL:
        lab = _new_run()
    lab.step_once()
    view.follow_latest()                  # the view moves to the new step


def _reset():
    comparison.keep_previous(slot.run())
    slot.reset_run()
    view.follow_latest()


def _apply_changes(lab) -> None:
    """Slider changes reach the engine once the sliders rest (PlaygroundRun.apply_when_rested)."""
    if lab is None or lab.state in TERMINAL:
        return
    try:
        decision = lab.apply_when_rested(controls.current_setup())
    except ValueError as exc:
        st.toast(widgets.error_message("Not applied", exc))
        return
    if decision is not None and decision.message:
        st.toast(widgets.plain(decision.message))


lab = slot.run()
_apply_changes(lab)
if lab is not None:
    lab.set_speed(controls.current_engine()[1])      # a simulation's speed applies at once
starting = st.session_state.get(STARTING, False)
# The sidebar is drawn before the buttons. On a page's first load, a button pressed before the
# sidebar's widgets had reached the browser sent a rerun without their values, and Streamlit set
# them to their first choices and minimums (static mode, max_num_seqs 1) under the learner's run.
setup = controls.sidebar(step_model, lab.engine_choice if lab else None)
controls.write_link(setup, slot.token(), *controls.current_engine())
prediction.show(step_model, setup.policy(), setup.workload(), started=lab is not None or starting)
state = "starting" if starting else lab.state if lab is not None else "idle"
cols = st.columns(5)
# One primary button: the way on from here (Resume while paused, else Start).
cols[0].button("Start", key="start", on_click=_reported, args=("Cannot start", _start),
               type="secondary" if state == "paused" else "primary",
               width="stretch", disabled=state in ("starting", "running"),
               help="Start a fresh run with the settings on the left (or go on, if you raised "
                    "the number of requests after it finished). The run before it stays on "
                    "the charts in grey, to compare with.")
cols[1].button("Pause", key="pause", on_click=_reported, args=("Cannot pause", lambda: slot.run().pause()),
               width="stretch", disabled=state != "running", help="Stop the run between two steps: its clock stops too, so no arrivals pile up while you explain.")
cols[2].button("Resume", key="resume", on_click=_reported, args=("Cannot resume", lambda: slot.run().resume()),
               type="primary" if state == "paused" else "secondary", width="stretch", disabled=state != "paused", help="Let a paused engine run on.")
cols[3].button("Step once", key="step", on_click=_reported, args=("Cannot step", _step), width="stretch",
               disabled=state in ("starting", "running") or controls.current_engine()[0] == engines.SERVER,
               help="Run exactly one engine step, then pause: watch who joins and leaves. (A shared "
                    "server's engine steps on its own, for everyone.)")
cols[4].button("Reset", key="reset", on_click=_reported, args=("Cannot reset", _reset), width="stretch",
               disabled=lab is None or starting, help="Stop and forget this run.")
with st.container(key="pg_instant"):        # hidden: says "starting" in the browser at the click
    instant_feedback("start", "Engine:", "Engine: starting", "· loading the model / warming up…")

if presenter:
    controls.presenter_strip()
with st.container():            # one element, whether or not it holds a message
    if "pg_error" in st.session_state:
        st.error(st.session_state.pop("pg_error"))
    for problem in link_problems:
        st.warning(widgets.plain(problem))


# ----- the live part
# One fragment, the same elements in every state. While the engine runs (or a slider change
# waits to be applied) it refreshes at this viewer's pace (playground/pace.py: every
# view.REFRESH_S, less often where a refresh costs this machine more); the time charts and texts
# are rebuilt every other refresh or so and reused in between. Paused or finished, the review bar picks a
# step and every view shows the run as it was at the end of that step.

def _read(lab):
    """(state, news for the notice line, tables, now on the engine clock)."""
    if lab is None:
        state = "starting" if st.session_state.get(STARTING) else "idle"
        news = ("Starting: loading the model / warming up…" if state == "starting" else
                "Press **Start** to send the workload to the engine, or **Step once** to watch "
                "it one step at a time.")
        return state, news, view.empty_tables(), None
    lab.heartbeat()
    if lab.state == "running" and lab.steps_taken == 0:   # no snapshot: it would wait for the step
        waiting = lab.arrived == 0
        return ("waiting for the first request" if waiting else "warming up",
                "Waiting for the first request to arrive…" if waiting else
                "Starting: warming up — the first step is running (one-time setup, then the "
                "first prompts are prefilled)…", view.empty_tables(), None)
    snap, tables = lab.read()
    news = widgets.plain(widgets.without_paths(snap.message))
    if snap.state == "paused" and not news:
        news = PAUSED_SHARED if lab.seat else PAUSED
    return snap.state, news, tables, snap.now_s


def _every(name: str, build, every_s: float, fresh: bool):
    """build(), or the value it gave less than every_s ago (fresh=True: build now)."""
    cached = st.session_state.get(name)
    now = time.monotonic()
    if fresh or cached is None or now - cached[0] >= every_s:
        cached = (now, build())
        st.session_state[name] = cached
    return cached[1]


def live_view():
    """The live part, and on a refresh of it alone (not a whole page run), its CPU time measured."""
    cpu = time.thread_time()
    try:
        _live_view()
    finally:
        if not st.session_state.get(IN_FULL_RUN):
            pace.record(time.thread_time() - cpu)


def _live_view():
    lab = slot.run()
    state, news, tables, now = _read(lab)
    running = state not in ("idle", "starting", "paused", *TERMINAL)
    _apply_changes(lab)
    in_effect = lab.setup if lab else controls.current_setup()
    # Presenter mode keeps what a class reads from the back of the room: the status, the key
    # numbers and the charts, so the batch chart sits above the fold at 1280x720 with the
    # sidebar open; the notes, notices, review bar and step detail stay in the full page.
    with widgets.errors_shown("Reading the run"):
        view.status_line(state, tables, in_effect, lab.arrived if lab else 0, shared=bool(lab and lab.seat))
        if not presenter:
            note = (engines.simulation_note(lab.cost) if lab and lab.simulated else
                    engines.server_note(lab.seat) if lab and lab.seat else
                    engines.real_note(model) if lab else "")
            view.engine_note(f"{note} {pace.words()}" if note and _busy(lab) else note)   # while it refreshes
    view.notice_line(news, "error" if state == "error" else "info")
    rejected = view.rejected_so_far(tables) if lab else None
    notices = [] if presenter else check(controls.current_setup(), lab.max_model_len if lab else max_model_len,
                                         rejected, controls.knobs()["rate"].hi)
    # Before a run the notices lead; during one they follow the batch chart. Both places are
    # always drawn, so a notice that comes or goes mid-run leaves the charts below in place.
    _notices(notices if lab is None else [], st.container())
    chosen = None if presenter else view.review_bar(tables, reviewable=not running and lab is not None)
    if chosen is not None and chosen != int(tables.steps["step"].iloc[-1]):
        tables, now = tables_at(tables, chosen), step_end(tables, chosen)
    ref = comparison.reference()
    with widgets.errors_shown("Drawing the live views"):
        numbers = comparison.headline(tables, in_effect)     # the headline strip's and the comparison's
        # The batch chart first, then the key numbers: at 1280x720 a chart is above the fold after Start.
        view.batch_chart(tables, in_effect, presenter)
        _notices(notices if lab is not None else [], st.container())
        view.headline(numbers, presenter)
        if not presenter:
            view.step_detail(tables, chosen)
        # The built time charts are kept per mode: presenter mode has its own charts and fonts.
        builders = view.time_figures(tables, in_effect, now_s=now, presenter=presenter,
                                     ghost=ref.tables if ref else None,
                                     ghost_name=ref.name if ref else "previous run")
        figures = _every(f"pg_time_figures_{presenter}", lambda: view.ready_charts(builders, presenter),
                         pace.time_charts_every_s(), fresh=not running)
        view.time_charts(figures)
        if not presenter:
            texts = _every("pg_texts", lambda: view.latest_texts(tables), pace.time_charts_every_s(),
                           fresh=not running)
            view.generated_texts(texts, simulated=bool(lab and lab.simulated))
            view.rejected_table(view.rejected(tables))
        comparison.panel(lab, tables, in_effect, numbers, reviewing=not running and lab is not None)
    if st.session_state.get(IN_FULL_RUN):
        return             # the rest of the page, the sidebar included, is still to be drawn
    if (running, _busy(lab), pace.interval_s()) != st.session_state.get("pg_drawn_as"):
        st.rerun()         # the run started, paused, finished or stopped, or the pace moved: redraw buttons and refresh rate


def _notices(notices, place) -> None:
    for notice in notices:
        (place.warning if notice.level == "warning" else place.info)(notice.text)


def _busy(lab) -> bool:
    """The live part refreshes while the engine runs or a slider change waits to be applied."""
    return lab is not None and (lab.state == "running" or lab.pending)


max_model_len = min(2048, model.max_model_len)
busy = _busy(lab)
pace = st.session_state.setdefault(PACE, RefreshPace())
st.session_state["pg_drawn_as"] = (state == "running", busy, pace.interval_s())
# A rerun from inside the live part while the whole page is drawn would stop the page before
# its sidebar, and Streamlit would forget the sidebar widgets' values; so only a refresh of the
# live part alone reruns the page (its next tick, if the run changed state meanwhile).
st.session_state[IN_FULL_RUN] = True
try:
    st.fragment(live_view, run_every=pace.interval_s() if busy else None)()
finally:
    st.session_state[IN_FULL_RUN] = False
if lab is not None and not busy:
    st.fragment(lambda: lab.heartbeat(), run_every=KEEPALIVE_S)()


# ----- downloads and definitions

if not presenter:
    st.subheader("Download this run")
    st.caption("The same files `python -m engine run` writes, so any tool built on them reads these. "
               f"A live run keeps its latest {KEEP_STEPS:,} steps and the requests that ended in them, "
               "so a longer run downloads that window.")
    d1, d2 = st.columns(2)
    d1.download_button("requests.csv", data=lab.requests_csv if lab else "",
                       file_name="requests.csv", mime="text/csv", disabled=lab is None,
                       on_click="ignore", key="dl_requests")
    d2.download_button("steps.csv", data=lab.steps_csv if lab else "",
                       file_name="steps.csv", mime="text/csv", disabled=lab is None,
                       on_click="ignore", key="dl_steps")
    view.definitions()

# ----- Start: the page above already says "starting"; now build the run and draw it running.
if starting:
    _reported("Cannot start", _build_and_start)
    st.session_state.pop(STARTING, None)
    st.rerun()
