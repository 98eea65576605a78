"""Streamlit glue for the lessons' pictures (analysis/pictures_course.py): `show_picture(picture_id)`
draws one with its caption and, under it, its alt text (the picture told in words).

A picture is a simulated run, the same for everyone: each is drawn once per process. `warm()` draws
them all on a background thread the first time the lesson pages are built, with the calculators'
defaults, so that the first learner to open a lesson does not wait for its runs (about ten seconds
for all of them on two cores) or for the step-time calculator's first read of this machine's step
model (which imports torch: 20-30 s on this busy machine).
"""
from __future__ import annotations

import threading

import streamlit as st

from analysis.pictures import Picture
from analysis.pictures_course import PICTURES

PICTURE_IDS = tuple(PICTURES)
_drawn: dict[str, Picture] = {}
_locks = {picture_id: threading.Lock() for picture_id in PICTURES}


def picture(picture_id: str) -> Picture:
    """The picture, drawn once per process (a second caller waits for the first)."""
    with _locks[picture_id]:
        if picture_id not in _drawn:
            _drawn[picture_id] = PICTURES[picture_id]()
        return _drawn[picture_id]


def warm() -> None:
    """Draw every picture on a daemon thread, once per process."""
    if not getattr(warm, "started", False):
        warm.started = True
        threading.Thread(target=_draw_all, name="bl-pictures", daemon=True).start()


def _draw_all() -> None:
    from analysis import course
    from ui import calculators
    calculators.warm()                         # this machine's step model (and the torch it imports)
    course.load_example(course.LOADS[-1])      # the queueing calculators' defaults
    for p in PICTURE_IDS:
        picture(p)


def show_picture(picture_id: str) -> None:
    """Draw the picture `picture_id` (one of PICTURE_IDS); an unknown id is a clear error line."""
    if picture_id not in PICTURES:
        st.error(f"No picture named {picture_id!r}: pictures are {', '.join(PICTURE_IDS)}.")
        return
    pic = picture(picture_id)
    st.plotly_chart(pic.figure, config={"displaylogo": False, "toImageButtonOptions": {"format": "png"}},
                    width="stretch", key=f"picture_{picture_id}")
    st.caption(pic.caption)
    with st.expander("The picture in words"):
        st.markdown(pic.alt)
