"""The teacher's view on the Classroom page, behind the instructor token: each student's progress by
lesson from the learners' store (records/), a CSV of it, and a reset for a new class.

The token is checked by the server it belongs to (GET /lab/instructor), not by this app.
"""
from __future__ import annotations

import streamlit as st

from lessons.views import load_site
from records.class_table import LessonInfo, class_table, to_csv
from records.store import StoreError
from remote.lab_control import LabControl, LabRefused
from ui import learner, widgets
from course.predictions import ASKS


def lessons() -> list[LessonInfo]:
    return [LessonInfo(l.id, f"{l.order} · {l.title}", len(l.quiz)) for l in load_site().lessons]


def view(control: LabControl) -> None:
    """The class's progress table, its CSV and the reset; nothing without the instructor's token."""
    try:
        control.check_token()
    except LabRefused as exc:
        st.error(widgets.plain(f"The class's progress needs the instructor token: {exc.message}"))
        return
    except Exception as exc:          # the server is away: say so, the rest of the page goes on
        st.error(widgets.plain(f"Could not check the token with the engine: {exc}"))
        return
    st.markdown("**The class's progress** (students who typed a name on this page; read, predictions made and "
                "how many came close, quiz answers)")
    try:
        rows = learner.store().class_rows()
    except StoreError as exc:
        st.warning(widgets.plain(f"Cannot read the learners' database: {exc}"), icon=":material/cloud_off:")
        return
    table = class_table(rows, lessons(), {a.id: a.lesson for a in ASKS.values()})
    with st.container(key="cr_class"):
        if not table:
            st.caption("No student has typed a name yet.")
        else:
            st.dataframe(table, hide_index=True, width="stretch")
            st.download_button("Download as CSV", to_csv(table), file_name="class-progress.csv", mime="text/csv",
                               key="cr_class_csv", icon=":material/download:")
    with st.popover("Reset for a new class", icon=":material/group_remove:"):
        st.caption("Removes every student's name, so the table starts empty. Each learner keeps their own "
                   "progress in their browser, without a name.")
        if st.button("Remove every name", key="cr_class_reset", type="primary"):
            try:
                gone = learner.store().reset_class()
            except StoreError as exc:
                st.warning(widgets.plain(f"Cannot reset: {exc}"), icon=":material/cloud_off:")
            else:
                st.toast(f"{gone} name{'s' if gone != 1 else ''} removed: a new class can begin.")
                st.rerun()
