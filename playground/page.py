"""Playground: run the real engine live, move any knob while it runs, watch what changes."""
import streamlit as st

from playground import controls, slot, view
from playground.checks import check
from engine.live import KEEP_STEPS
from playground.run import TERMINAL
from ui import session, widgets

RUNNING_REFRESH_S = 0.5     # status, headline and batch chart redraw this often while running
SLOW_REFRESH_S = 2.0        # the time charts redraw this often while running
KEEPALIVE_S = 10            # a paused run's page still says "I am here" this often

st.title("Playground")
st.caption("A real SmolLM2 engine on this machine. Press Start, then move any slider while it "
           "runs: policy and SLO changes apply at the next engine step and show as dashed "
           "lines on the time charts; workload changes apply to requests arriving from then on.")

link_problems = controls.init_from_link()
setup = controls.sidebar()
controls.write_link(setup)
for problem in link_problems:
    st.warning(widgets.plain(problem))

try:
    model = session.model()
except Exception as exc:
    st.error(widgets.error_message("Cannot load the model", exc))
    st.stop()
lab = slot.run()
if lab is not None and lab.state not in TERMINAL:
    try:
        changes = lab.apply(setup)
    except Exception as exc:
        changes = []
        st.warning(widgets.error_message("Not applied", exc))
    if changes:
        st.toast(widgets.plain("Applied at the next step: " + ", ".join(changes)))


# ----- buttons
# A button's callback runs before the page is drawn: a failure in it is kept in "pg_error"
# and shown as an error line below the buttons.

def _reported(what: str, action) -> None:
    try:
        action()
    except Exception as exc:
        st.session_state["pg_error"] = widgets.error_message(what, exc)


def _start():
    lab = slot.run()
    if lab is None or not lab.can_continue:
        lab = slot.new_run(controls.current_setup())
    lab.start()


def _step():
    lab = slot.run()
    if lab is None or lab.state in TERMINAL:
        lab = slot.new_run(controls.current_setup())
    lab.step_once()


def _reset():
    slot.reset_run()
    for key in ("pg_scrub", "pg_scrub_last"):
        st.session_state.pop(key, None)


state = lab.state if lab is not None else "idle"
cols = st.columns(5)
cols[0].button("Start", key="start", on_click=_reported, args=("Cannot start", _start), type="primary",
               width="stretch", disabled=state in ("running", "paused"),
               help="Start a fresh run with the settings on the left (or go on, if you raised "
                    "the number of requests after it finished).")
cols[1].button("Pause", key="pause", on_click=_reported, args=("Cannot pause", lambda: slot.run().pause()),
               width="stretch", disabled=state != "running", help="Freeze the engine between two steps.")
cols[2].button("Resume", key="resume", on_click=_reported, args=("Cannot resume", lambda: slot.run().resume()),
               width="stretch", disabled=state != "paused", help="Let a paused engine run on.")
cols[3].button("Step once", key="step", on_click=_reported, args=("Cannot step", _step), width="stretch",
               disabled=state == "running",
               help="Run exactly one engine step, then pause: watch who joins and leaves.")
cols[4].button("Reset", key="reset", on_click=_reported, args=("Cannot reset", _reset), width="stretch",
               disabled=lab is None, help="Stop and forget this run.")

if "pg_error" in st.session_state:
    st.error(st.session_state.pop("pg_error"))
for notice in check(setup, lab.max_model_len if lab else min(2048, model.max_model_len)):
    (st.warning if notice.level == "warning" else st.info)(notice.text)


# ----- live views
# While the engine runs, the strip and the batch chart redraw every RUNNING_REFRESH_S and the
# time charts every SLOW_REFRESH_S (each redraw costs the browser more than the server).
# Paused or finished, one fragment holds everything, with a scrubber over the whole run.
# A failure while reading the run shows as an error line in its fragment, not a traceback.

def read(lab):
    """(snapshot, tables) of this session's run, or (None, empty tables) while there is none yet."""
    if lab is None:
        tables = view.empty_tables()
        view.status_line("idle", tables, setup, 0)
        st.info("Press **Start** to send the workload to the engine, or **Step once** to "
                "watch it one step at a time.")
        return None, tables
    lab.heartbeat()
    if lab.state == "running" and lab.steps_taken == 0:   # no snapshot: it would wait for the step
        tables, waiting = view.empty_tables(), lab.arrived == 0
        view.status_line("waiting for the first request" if waiting else "warming up",
                         tables, setup, lab.arrived)
        st.info("Waiting for the first request to arrive…" if waiting else
                "Warming up: the first step is running (one-time setup, then the first prompts "
                "are prefilled)…", icon="⏳")
        return None, tables
    snap, tables = lab.read()
    view.status_line(snap.state, tables, setup, snap.arrived, snap.message)
    return snap, tables


if state == "running":
    @st.fragment(run_every=RUNNING_REFRESH_S)
    def live_fast():
        with widgets.errors_shown("Reading the running engine"):
            snap, tables = read(slot.run())
            view.headline(tables, setup)
            view.batch_chart(tables, setup)
            view.generated_texts(tables)
            if snap is not None and snap.state != "running":
                st.rerun()    # the run paused, finished or stopped: redraw buttons and scrubber

    @st.fragment(run_every=SLOW_REFRESH_S)
    def live_slow():
        with widgets.errors_shown("Drawing the time charts"):
            lab = slot.run()
            if lab is None or lab.steps_taken == 0:
                tables, now = view.empty_tables(), None
            else:
                snap, tables = lab.read()
                now = snap.now_s                 # the timeline's open bars reach up to now
            view.time_charts(tables, setup, now_s=now)
            view.rejected_table(tables)

    live_fast()
    live_slow()
else:
    @st.fragment
    def replay():
        with widgets.errors_shown("Reading the run"):
            snap, tables = read(lab)
            view.headline(tables, setup)
            upto = now = None
            if snap is not None:
                upto = view.replay_scrubber(tables)
                if upto is not None:
                    view.step_detail(tables, upto)
                    now = float(tables.steps.loc[tables.steps["step"] == upto, "t_end_s"].iloc[0])
            view.batch_chart(tables, setup, upto_step=upto)
            view.generated_texts(tables)
            view.time_charts(tables, setup, now_s=now)
            view.rejected_table(tables)

    replay()
    if lab is not None:
        @st.fragment(run_every=KEEPALIVE_S)
        def keepalive():
            with widgets.errors_shown("Reaching the run"):
                lab.heartbeat()
        keepalive()


# ----- downloads and definitions

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
