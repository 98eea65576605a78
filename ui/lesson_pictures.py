"""Streamlit glue for the lessons' pictures (analysis/pictures_course.py): `show_picture(picture_id)`
draws one with its caption and, under it, its alt text (the picture told in words).

A picture is a simulated run, the same for everyone and every machine: each is drawn once and kept
on disk beside the results cache, under a digest of the code that draws it (analysis/ and engine/),
so a change to that code draws it afresh. `warm()` loads or draws them all on a background thread
the first time the lesson pages are built, with the calculators' defaults, so that the first
learner to open a lesson does not wait for its runs (about ten seconds for all of them on two
cores) or for the step-time calculator's first read of this machine's step model (which imports
torch: 20-30 s on a busy two-core machine).
"""
from __future__ import annotations

import hashlib
import os
import pickle
import threading
import time
from pathlib import Path

import streamlit as st

from analysis.pictures import Picture
from analysis.pictures_course import PICTURES
from analysis.pictures_budget import PICTURES as BUDGET_PICTURES
from engine.runs.results import cache_dir

PICTURES = {**PICTURES, **BUDGET_PICTURES}
PICTURE_IDS = tuple(PICTURES)
DRAWN_BY = ("analysis", "engine")          # the folders whose code a picture depends on
_drawn: dict[str, Picture] = {}
_locks = {picture_id: threading.Lock() for picture_id in PICTURES}


def code_digest() -> str:
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha1()
    for folder in DRAWN_BY:
        for path in sorted((root / folder).rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _stored(picture_id: str) -> Path:
    return Path(cache_dir()) / f"picture-{picture_id}-{code_digest()}.pkl"


def picture(picture_id: str) -> Picture:
    """The picture, from this process, else from disk, else drawn (a second caller waits for the first)."""
    with _locks[picture_id]:
        if picture_id not in _drawn:
            path = _stored(picture_id)
            try:
                _drawn[picture_id] = pickle.loads(path.read_bytes())
            except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
                _drawn[picture_id] = PICTURES[picture_id]()
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                try:
                    tmp.write_bytes(pickle.dumps(_drawn[picture_id]))
                    tmp.replace(path)
                except OSError:
                    pass            # a read-only cache only costs the next process a redraw
        return _drawn[picture_id]


def warm() -> None:
    """Load or draw every picture on a daemon thread, once per process."""
    if not getattr(warm, "started", False):
        warm.started = True
        threading.Thread(target=_draw_all, name="bl-pictures", daemon=True).start()


def _draw_all() -> None:
    """At the pages' own priority, and busy at most half the time. This thread shares the pages'
    process: while it imports a module, the pages wait for that module's lock, and while it runs
    Python, for Python's one lock. Ranked below everything else by the OS, it could hold either for
    minutes on a busy machine (its import of torch, with a page's first run waiting behind it). So
    it keeps the pages' priority, and pauses after each picture as long as the picture took,
    leaving the pages at least half of the time."""
    from analysis import course
    from ui import calculators
    calculators.warm()                         # this machine's step model (and the torch it imports)
    course.load_example(course.LOADS[-1])      # the queueing calculators' defaults
    for p in PICTURE_IDS:
        start = time.perf_counter()
        picture(p)
        time.sleep(time.perf_counter() - start)
    calculators.warm_sweeps()                  # lesson 6's worked example, last: seconds of simulation


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
