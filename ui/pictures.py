"""Streamlit glue for the lessons' pictures (analysis/pictures.py): `show_picture(picture_id)`
draws one with its caption and, under it, its alt text (the picture told in words)."""
from __future__ import annotations

import streamlit as st

from analysis.pictures import PICTURES, Picture

PICTURE_IDS = tuple(PICTURES)


@st.cache_resource(show_spinner=False)
def _picture(picture_id: str) -> Picture:
    return PICTURES[picture_id]()      # a cost-model run: the same for everyone, drawn once per process


def show_picture(picture_id: str) -> None:
    """Draw the picture `picture_id` (one of PICTURE_IDS); an unknown id is a clear error line."""
    if picture_id not in PICTURES:
        st.error(f"No picture named {picture_id!r}: pictures are {', '.join(PICTURE_IDS)}.")
        return
    pic = _picture(picture_id)
    st.plotly_chart(pic.figure, config={"displaylogo": False, "toImageButtonOptions": {"format": "png"}},
                    width="stretch", key=f"picture_{picture_id}")
    st.caption(pic.caption)
    with st.expander("The picture in words"):
        st.markdown(pic.alt)
