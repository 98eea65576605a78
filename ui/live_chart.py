"""A plotly chart that updates in place: `live_chart(fig, key=...)`.

st.plotly_chart draws a new plot for every new figure, so a chart that refreshes twice a second
goes blank for a frame each time. This Streamlit component keeps one plot per key and hands
each new figure to Plotly.react, which changes only what differs: no blank frame, no new element.

The browser side is ui/live_chart/ (index.html + live_chart.js). plotly.js comes from the
installed plotly package, never from the network: the first call copies the component's files
and plotly.min.js into a folder under the results cache and declares the component from there.
"""
from __future__ import annotations

import datetime
import functools
import hashlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import plotly
import plotly.io as pio
import streamlit.components.v1 as components

from engine.results import cache_dir

FRONTEND = Path(__file__).with_name("live_chart")
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
TEMPLATE_JS = "template.js"     # plotly's default template, applied in the browser
DEFAULT_HEIGHT = 380        # plotly's own default is 450; the analysis builders set 380
MIN_FONT_PX = 12
CONFIG = {"displayModeBar": False, "displaylogo": False, "responsive": True}


# ----------------------------------------------------------------------------- the figure as JSON


def json_safe(value):
    """`value` as plain JSON data: numpy arrays and numbers become lists and Python numbers,
    NaN and infinities become null (JSON has neither), dates become ISO text."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "iubU":      # integers, booleans and text are JSON as they are
            return value.tolist()
        if value.dtype.kind == "f":
            clean = value.astype(object)
            clean[~np.isfinite(value)] = None
            return clean.tolist()
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return json_safe(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "isoformat"):          # pandas Timestamp, numpy datetime64 via .item()
        return value.isoformat()
    raise TypeError(f"a chart value of type {type(value).__name__} has no JSON form: {value!r:.80}")


def _raise_fonts(value, least: int) -> None:
    """Every font size set in a layout (titles, annotations, axes...) made at least `least` px."""
    if isinstance(value, list):
        for v in value:
            _raise_fonts(v, least)
    elif isinstance(value, dict):
        font = value.get("font")
        if isinstance(font, dict) and isinstance(font.get("size"), (int, float)):
            font["size"] = max(font["size"], least)
        for k, v in value.items():
            if isinstance(v, (dict, list)) and k not in ("data", "x", "y", "z"):
                _raise_fonts(v, least)


def figure_dict(fig, font_px: int | None = None) -> dict:
    """A plotly Figure (or a figure dict) as JSON-safe {"data": [...], "layout": {...}}.
    font_px is the smallest text size (presenter mode); it never goes below MIN_FONT_PX."""
    raw = fig if isinstance(fig, dict) else fig.to_plotly_json()
    # plotly's default template is ~60% of a small figure's JSON, the same every time: the
    # browser side holds it once (template.js) and applies it to a figure that has none.
    layout = {k: v for k, v in raw.get("layout", {}).items() if k != "template"}
    out = json_safe({"data": raw.get("data", []), "layout": layout})
    least = max(font_px or MIN_FONT_PX, MIN_FONT_PX)
    out["layout"].setdefault("font", {}).setdefault("size", least)
    _raise_fonts(out["layout"], least)
    return out


def figure_height(figure: dict) -> int:
    height = figure.get("layout", {}).get("height")
    return int(height) if isinstance(height, (int, float)) and height > 0 else DEFAULT_HEIGHT


# ----------------------------------------------------------------------------- the component


def _digest(paths) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def prepare_folder(root: str | Path | None = None) -> Path:
    """The folder the component is served from: ui/live_chart/'s files, plotly.min.js, and
    plotly's default template as TEMPLATE_JS.
    Named by a digest of those files, so a changed file or plotly version makes a new folder."""
    sources = sorted(FRONTEND.iterdir())
    folder = Path(root or cache_dir()) / f"live_chart-{plotly.__version__}-{_digest(sources)}"
    if not (folder / PLOTLY_JS.name).exists():
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for src in sources:
            shutil.copy(src, partial / src.name)
        template = json.dumps(json_safe(pio.templates["plotly"].to_plotly_json()))
        (partial / TEMPLATE_JS).write_text(f"window.PLOTLY_TEMPLATE = {template};\n")
        shutil.copy(PLOTLY_JS, partial / PLOTLY_JS.name)     # a copy: the file server refuses links out
        try:
            partial.rename(folder)
        except OSError:                                       # another session made it first
            shutil.rmtree(partial, ignore_errors=True)
    return folder


@functools.cache
def _component():
    return components.declare_component("live_chart", path=str(prepare_folder()))


def live_chart(fig, key: str, font_px: int | None = None) -> None:
    """Draw `fig` (a plotly Figure or figure dict) in the chart `key`, updating it in place."""
    figure = figure_dict(fig, font_px)
    _component()(figure=figure, height=figure_height(figure), config=CONFIG, key=key)
