"""ui/live_chart.py: figures become strict JSON, the component's folder is complete and local
(plotly.js from the installed package, nothing from the network), and a keyed chart keeps its
element while its data changes (so the browser updates the plot in place)."""
import base64
import datetime
import json
import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from streamlit.testing.v1 import AppTest

from analysis import figure_json as fj
from ui import live_chart as lc


def strict(obj) -> str:
    return json.dumps(obj, allow_nan=False)     # raises on NaN / inf, as a browser's JSON.parse would


def test_json_safe_turns_numpy_nan_and_dates_into_plain_json():
    value = {"f": np.array([1.5, np.nan, np.inf, -np.inf]), "i": np.arange(3, dtype=np.int64),
             "b": np.array([True, False]), "s": np.array(["a", "b"]), "n": np.float32(2.5),
             "k": np.int64(7), "x": float("nan"), "t": (1, None),
             "d": datetime.date(2024, 1, 2), "ts": pd.Timestamp("2024-01-02 03:04:05"),
             "nested": [{"z": np.array([[1.0, np.nan], [3.0, 4.0]])}]}
    safe = fj.json_safe(value)
    strict(safe)
    assert safe["f"] == [1.5, None, None, None]
    assert safe["i"] == [0, 1, 2] and safe["b"] == [True, False] and safe["s"] == ["a", "b"]
    assert safe["n"] == 2.5 and safe["k"] == 7 and safe["x"] is None and safe["t"] == [1, None]
    assert safe["d"] == "2024-01-02" and safe["ts"].startswith("2024-01-02T03:04:05")
    assert safe["nested"][0]["z"] == [[1.0, None], [3.0, 4.0]]


def test_json_safe_refuses_what_it_cannot_write():
    with pytest.raises(TypeError, match="object has no JSON form"):
        fj.json_safe({"bad": object()})


def test_a_real_figure_with_gaps_becomes_strict_json():
    fig = go.Figure(go.Heatmap(z=np.array([[1.0, np.nan], [np.nan, 2.0]]), x=np.arange(2)),
                    layout=dict(height=420, annotations=[dict(text="mark", font=dict(size=10))]))
    d = fj.figure_dict(fig)
    text = strict(d)
    assert "NaN" not in text and d["data"][0]["type"] == "heatmap"
    z = d["data"][0]["z"]                  # plotly sends numbers as typed arrays, which keep NaN
    if isinstance(z, dict):
        z = np.frombuffer(base64.b64decode(z["bdata"]), z["dtype"]).reshape(
            [int(n) for n in z["shape"].split(",")])
    np.testing.assert_array_equal(np.asarray(z, dtype=float), [[1.0, np.nan], [np.nan, 2.0]])
    assert fj.figure_height(d) == 420
    assert d["layout"]["font"]["size"] == fj.MIN_FONT_PX                # never below 12 px
    assert d["layout"]["annotations"][0]["font"]["size"] == fj.MIN_FONT_PX


def test_presenter_font_raises_every_text_size():
    fig = {"data": [], "layout": {"title": {"text": "t", "font": {"size": 14}},
                                  "annotations": [{"text": "a", "font": {"size": 10}}]}}
    d = fj.figure_dict(fig, font_px=18)
    assert d["layout"]["font"]["size"] == 18
    assert d["layout"]["title"]["font"]["size"] == 18
    assert d["layout"]["annotations"][0]["font"]["size"] == 18
    assert fig["layout"]["annotations"][0]["font"]["size"] == 10      # the caller's figure is untouched


def test_height_defaults_when_the_layout_has_none():
    assert fj.figure_height({"layout": {}}) == fj.DEFAULT_HEIGHT


def test_folder_holds_the_component_and_the_packaged_plotly(tmp_path):
    folder = lc.prepare_folder(tmp_path)
    names = {p.name for p in folder.iterdir()}
    assert {"index.html", "live_chart.js", "plotly.min.js"} <= names
    assert (folder / "plotly.min.js").read_bytes() == lc.PLOTLY_JS.read_bytes()
    assert not (folder / "plotly.min.js").is_symlink()
    html = (folder / "index.html").read_text()
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', html)
    assert scripts == ["plotly.min.js", lc.TEMPLATE_JS, "live_chart.js"]
    assert all((folder / s).exists() for s in scripts)
    # plotly's default template, as the browser applies it to figures sent without one
    template = json.loads((folder / lc.TEMPLATE_JS).read_text().split("=", 1)[1].rstrip().rstrip(";"))
    assert template["layout"]["colorway"] == list(pio.templates["plotly"].layout.colorway)
    assert lc.prepare_folder(tmp_path) == folder                       # made once, then reused


def test_nothing_is_loaded_from_the_network():
    for path in lc.FRONTEND.iterdir():
        text = path.read_text()
        assert not re.search(r"https?://|//cdn|cdn\.plot\.ly", text), path.name
    js = (lc.FRONTEND / "live_chart.js").read_text()
    assert "Plotly.react" in js and "Plotly.newPlot" not in js        # updates in place


CHART_APP = """
import numpy as np
import streamlit as st
from ui.live_chart import live_chart
n = st.session_state.get("n", 3)
live_chart({"data": [{"type": "bar", "x": np.arange(n), "y": np.full(n, np.nan)}],
            "layout": {"height": 300}}, key="demo")
"""


def test_a_keyed_chart_keeps_its_element_while_its_data_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    lc._component.cache_clear()
    at = AppTest.from_string(CHART_APP).run()
    assert not at.exception
    first = at.get("component_instance")[0].proto
    args = json.loads(first.json_args)
    assert args["height"] == 300 and args["config"]["displaylogo"] is False
    assert json.loads(args["figure_json"])["data"][0]["y"] == [None] * 3     # strict JSON: NaN is null
    at.session_state["n"] = 7
    at.run()
    second = at.get("component_instance")[0].proto
    assert json.loads(json.loads(second.json_args)["figure_json"])["data"][0]["x"] == list(range(7))
    assert second.id == first.id                        # same element: the plot is updated, not redrawn
    assert len(at.get("component_instance")) == 1
    lc._component.cache_clear()


def test_figures_go_to_the_browser_without_plotlys_default_template():
    """The template is the same for every figure and is most of a small one: the browser holds
    it once (template.js) instead of receiving it with every refresh."""
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]), layout=dict(title=dict(text="t")))
    assert "template" in fig.to_plotly_json()["layout"]          # plotly put it there
    out = fj.figure_dict(fig)
    assert "template" not in out["layout"] and out["layout"]["title"]["text"] == "t"
    assert len(json.dumps(out)) < len(json.dumps(fj.json_safe(fig.to_plotly_json()))) / 2
