"""A plotly chart that updates in place: `live_chart(fig, key=...)`.

st.plotly_chart draws a new plot for every new figure, so a chart that refreshes twice a second
goes blank for a frame each time. This Streamlit component keeps one plot per key and hands
each new figure to Plotly.react, which changes only what differs: no blank frame, no new element.

The browser side is ui/live_chart/ (index.html + live_chart.js). plotly.js comes from the
installed plotly package, never from the network: the first call copies the component's files
and plotly.min.js into a folder under the results cache and declares the component from there.
"""
from __future__ import annotations

import functools
import hashlib
import json
import shutil
from pathlib import Path

import plotly
import plotly.io as pio
import streamlit.components.v1 as components

from engine.runs.results import cache_dir
from analysis.figure_json import ReadyFigure, figure_dict, json_safe, ready

FRONTEND = Path(__file__).with_name("live_chart")
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
TEMPLATE_JS = "template.js"     # plotly's default template, applied in the browser
CONFIG = {"displayModeBar": False, "displaylogo": False, "responsive": True}


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
    show_figure(figure_dict(fig, font_px), key)


def show_figure(figure: dict | ReadyFigure, key: str) -> None:
    """Draw a figure already made: a figure_dict (serialized here), or a ReadyFigure, its JSON text
    made once (analysis.figure_json), which a refresh that shows it again sends as it is."""
    r = figure if isinstance(figure, ReadyFigure) else ready(figure)
    _component()(figure_json=r.text, height=r.height, config=CONFIG, key=key)
