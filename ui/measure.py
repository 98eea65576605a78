"""A lab's real run as its page shows it: the stored result for the page's settings, or the button
that measures it on this machine's engine (with its expected time), Re-measure, and the caption
that says whether the page shows the real run or the simulator's answer."""
from __future__ import annotations

import streamlit as st

from ui import session
from ui.widgets import error_message, plain


def _measure_buttons(name: str, settings, has_result: bool, label: str, estimate,
                     asks_again: bool = False) -> str | None:
    """The lab's run button, or, once a result exists, where it came from and a re-measure button.

    Returns "run", "refresh" or None. `settings` identifies the current settings (any value
    with a repr); `estimate` says how long a measurement takes on this machine (text, or a
    function that returns it); `asks_again`: Re-measure asks for new predictions before it runs.
    """
    fresh = st.session_state.get(f"{name}__fresh") == repr(settings)
    if not has_result:
        estimate = estimate() if callable(estimate) else estimate
        if st.button(label, key=f"{name}__run", type="primary",
                     help=f"Runs on the real engine on this machine ({estimate}); the result is "
                          "stored, so the next visit shows it at once."):
            return "run"
        st.caption(f"Nothing measured for these settings yet. Expected run time: {estimate}. "
                   "The page stays idle until you press the button.")
        return None
    cols = st.columns([4, 1])
    if fresh:
        cols[0].caption("Measured just now on this machine (and stored for the next visit).")
    else:
        cols[0].caption(":material/history: **Cached result from this machine**: measured earlier "
                        "with exactly these settings.")
    if cols[1].button("Re-measure", key=f"{name}__refresh",
                      help="Run it again on the real engine on this machine and replace the stored result; "
                           "its progress bar gives the expected time."
                           + (" A new run asks for new predictions first." if asks_again else "")):
        return "refresh"
    return None


class _progress_bar:
    """`with _progress_bar("…", expected) as cb: experiment(progress=cb)`: a bar the experiment
    advances, each of its lines followed by the run's expected time in all."""

    def __init__(self, text: str, expected: str):
        self.text, self.expected = text, expected

    def __enter__(self):
        self.bar = st.progress(0.0, text=f"{self.text} (expected in all: {self.expected})")

        def cb(fraction: float, text: str = ""):
            self.bar.progress(max(0.0, min(1.0, float(fraction))),
                              text=f"{text or self.text} (expected in all: {self.expected})")
        return cb

    def __exit__(self, *exc):
        self.bar.empty()
        return False


def _step_model_source(step_model, profiled: bool) -> str:
    """Whose step times the simulator used: this machine's step model (a quick estimate or a
    calibration, named by its label), or the hand-set guess when none was measured. It ends a
    sentence: the label has brackets of its own, so it follows a colon rather than sits in more."""
    return (f"this machine's step model: {plain(step_model.label)}" if profiled else
            "a guessed step model, since this machine has none yet (the Playground makes a quick estimate "
            f"on its first visit): {plain(step_model.label)}")


def simulated_caption(step_model, profiled: bool, button: str, measured: bool) -> None:
    """A lab whose chart keeps the simulation as dotted lines and draws the real run over it."""
    then = ("The markers are the real engine's measurement, drawn on top." if measured else
            f"**Run it on the real engine**: press **{button}** to measure it and overlay the real points.")
    st.caption(f":material/science: **Simulated**: the same scheduler on a virtual clock, each step's time "
               f"from {_step_model_source(step_model, profiled)}. It answers at once; the dotted lines are "
               f"the simulation. {then}")


def simulated_first_caption(step_model, profiled: bool, button: str, measured: bool, what: str,
                            kept: str = "") -> None:
    """A lab that shows the simulator's answer until the real run replaces it. `what`: what on the
    page the answer is ("every number and chart"); `kept`: what stays simulated beside the real
    run, if anything ("the table keeps the simulated columns beside the real ones")."""
    source = _step_model_source(step_model, profiled)
    if measured:
        st.caption(f":material/science: {what[0].upper() + what[1:]} below is the real engine's measurement"
                   f"{'; ' + kept if kept else ''}. Without one, this page shows the simulator's answer: the "
                   f"same scheduler on a virtual clock, each step's time from {source}.")
    else:
        st.caption(f":material/science: **Simulated**: the same scheduler on a virtual clock, each step's time "
                   f"from {source}. It answers at once: {what} below is the simulation's. **Run it on the real "
                   f"engine**: press **{button}** to measure it{' (' + kept + ')' if kept else ''}.")


def stored_or_measure(name: str, settings, run, button: str, estimate, text: str, stop: bool = True,
                      lab: str | None = None):
    """A lab's experiment as a page shows it: `run(model, **kw)` is one of its experiment.py's runs.

    Returns what is stored for these settings (looked up without loading the model). Draws the
    run / re-measure button; pressing it measures on the loaded model under a progress bar and
    draws the page again (st.rerun does not return), which then finds the stored result. While
    nothing is stored the page ends here (st.stop), or with stop=False this returns None. A
    failure to look up or to measure is shown as an error line, never as a traceback. Re-measure
    sets aside the guesses of `lab` (ui.predict.unlock) and runs once the new ones are committed,
    so the learner guesses before the wait, and the new result shows at once beside the new guess.
    """
    try:
        got = run(session.model_name(), peek=True)   # the name is enough to look up stored results
    except Exception as exc:
        st.error(error_message("Could not read the stored result", exc))
        got = None
    action = _measure_buttons(name, settings, got is not None, button, estimate, asks_again=bool(lab))
    if lab:
        from ui import predict
        if action == "refresh":       # the guesses first: the run starts once the new ones are in
            predict.unlock(lab, then=(name, repr(settings)))
            st.rerun()
        if action is None and got is not None and predict.remeasure_due(lab, name, repr(settings)):
            action = "refresh"
    if action is not None:
        try:
            # The estimate is worked out here, once a run is asked for: a page showing a stored
            # result would otherwise simulate the runs at every redraw after a refit.
            with _progress_bar(text, estimate() if callable(estimate) else estimate) as cb:
                run(session.model(), progress=cb, refresh=action == "refresh")
        except Exception as exc:     # say so, and leave the page as it was before the button
            st.error(error_message("The measurement failed", exc))
        else:
            st.session_state[f"{name}__fresh"] = repr(settings)   # _measure_buttons: "measured just now"
            st.rerun()
    if got is None and stop:
        st.stop()
    return got


def measured_or_simulated(name: str, settings, run, button: str, estimate, text: str, step_model,
                          profiled: bool, what: str, kept: str = "", lab: str | None = None):
    """A lab part's opening: what is stored for `settings` (stored_or_measure, which draws the run
    button), the caption that says whether the page shows the real run or the simulator's answer
    (simulated_first_caption), and which it is. Returns (stored result or None, "measured" or
    "simulated"); the page draws the simulated run itself where nothing is stored."""
    got = stored_or_measure(name, settings, run, button, estimate, text, stop=False, lab=lab)
    simulated_first_caption(step_model, profiled, button, got is not None, what, kept)
    return got, "measured" if got is not None else "simulated"
