"""Any engine: the lab's load, sent to any OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp,
Ollama, or ours).

A client sees less than the engine does. This page shows only what it can know: each request's
TTFT, TPOT and ITL timed from its own stream and charted over time, a per-request timeline from
this app's own timestamps, and running, waiting and KV usage read from the engine's Prometheus
page where it has one. It says so beside the charts. The address can come from the environment (remote/attach.py), so a
teacher can point the whole app at a GPU server before class.
"""
from __future__ import annotations


import pandas as pd
import streamlit as st

from analysis import latency, style
from engine.core import metrics
from engine.runs.arrivals import ArrivalFeed
from engine.core.knobs import knobs_of
from engine.runs.workload import WorkloadSpec
from remote import attach, prometheus
from remote.load import LoadGenerator, now_s, served_model
from ui import widgets
from ui.live_chart import live_chart

LOAD_KNOBS = ("rate", "num_requests", "output_lo", "output_hi")
WORKLOAD = knobs_of(WorkloadSpec)
GAUGE_EVERY_S = 1.0
KEEP_GAUGES = 600              # ten minutes of one-second gauge readings
WINDOW_S = 120.0               # the live charts show the latest two minutes

st.title(":material/dns: Any engine: the same load, sent to a server of your own")
st.markdown("Point the lab at **any OpenAI-compatible server**: vLLM, SGLang or TGI on your GPUs, "
            "llama.cpp's `llama-server` or Ollama on your laptop, or this project's own `python -m engine serve`. The load generator sends real "
            "streaming requests; the charts are drawn from what comes back.")

try:
    env = attach.from_env()
except ValueError as exc:
    st.error(widgets.plain(exc))
    env = attach.EngineChoice()

with st.form("ext_target"):
    cols = st.columns([3, 2, 3])
    url = cols[0].text_input("Server address", env.url or "http://127.0.0.1:8000", key="ext_url",
                             help="Where the server listens, e.g. http://10.0.0.5:8000 (a /v1 suffix is fine).")
    model = cols[1].text_input("Model name", env.model, key="ext_model",
                               help="As the server's /v1/models lists it; empty asks the server.")
    metrics_url = cols[2].text_input("Metrics page (optional)", env.metrics_url, key="ext_metrics",
                                     help="Its Prometheus page; empty means the address's /metrics.")
    connect = st.form_submit_button("Connect", type="primary")

connect_error = st.container()      # drawn either way: the live charts below keep their frames
if connect:
    try:
        base = attach.base_url(url)
        attach.check_reachable(base)                 # a classroom's app reaches only its engine
        if metrics_url.strip():
            attach.check_reachable(metrics_url)
        name = model.strip() or served_model(base + "/v1")
        choice = attach.EngineChoice("openai", base, name, metrics_url.strip())
    except Exception as exc:        # a bad address or a server that does not answer: say which
        connect_error.error(widgets.plain(f"Could not connect to {url!r}: {exc}"))
    else:
        old = st.session_state.get("ext_generator")
        if old is not None:
            old.stop()
        found = attach.kind_of(choice.url)
        st.session_state["ext_choice"] = choice
        # Ollama's OpenAI endpoint takes text prompts only
        st.session_state["ext_generator"] = LoadGenerator(choice.api_url, choice.model, "you",
                                                          prompt_as="words" if found == "ollama" else "ids")
        st.session_state["ext_gauges"] = []
        st.session_state["ext_kind"] = found
        st.session_state["ext_started"] = None

choice: attach.EngineChoice | None = st.session_state.get("ext_choice")
if choice is None:
    st.info("Give the server's address and press Connect. To try it here, start this project's "
            "server in a terminal with `make serve` and connect to http://127.0.0.1:8000.")
    st.stop()

gen: LoadGenerator = st.session_state["ext_generator"]
kind = st.session_state.get("ext_kind", "")
kind_words = attach.KIND_WORDS.get(kind, "")
st.caption(f"Connected to **{widgets.plain(choice.url)}**, model **{widgets.plain(choice.model)}**"
           + (f": {widgets.plain(kind_words)}." if kind_words else
              ": an engine this page does not recognise (its charts come from the streams)."))

with st.container(border=True, key="ext_load"):
    cols = st.columns(len(LOAD_KNOBS) + 1)
    values = {n: col.number_input(WORKLOAD[n].label, WORKLOAD[n].lo, WORKLOAD[n].ui_hi, WORKLOAD[n].default,
                                  help=WORKLOAD[n].help, key=f"ext_{n}")
              for n, col in zip(LOAD_KNOBS, cols)}
    start = cols[-1].button("Send this load", type="primary", key="ext_start")
    stop = cols[-1].button("Stop sending", key="ext_stop")
    if start:
        try:
            spec = WorkloadSpec(**{**values, "output_kind": "uniform", "id_prefix": "x"})
        except ValueError as exc:
            st.error(widgets.plain(exc))
        else:
            gen.run_feed(ArrivalFeed(spec))
            if st.session_state.get("ext_started") is None:    # the run's time axis starts here
                st.session_state["ext_started"] = now_s()
            st.toast(f"Sending {spec.num_requests} requests at {spec.rate:g} per second.")
    if stop:
        gen.stop()
    if gen.prompt_as == "words":
        st.caption("Ollama takes text prompts only: each prompt is sent as one word per token of the "
                   "workload's length (\"the the ...\"), and Ollama ignores `ignore_eos`, so a request "
                   "may stop before its output length.")
    else:
        st.caption("Prompts are sent as token ids drawn by the lab's workload generator, with "
                   "`ignore_eos` so each request generates exactly its output length.")


def read_gauges() -> None:
    """One reading of the engine's gauges per GAUGE_EVERY_S, kept for the chart."""
    readings = st.session_state.setdefault("ext_gauges", [])
    if kind == "ollama" or (readings and now_s() - readings[-1]["t"] < GAUGE_EVERY_S):
        return                      # Ollama publishes no metrics page: nothing to read
    try:
        g = prometheus.fetch(choice.metrics)
    except Exception as exc:        # no metrics page, or one without known names
        hint = " (llama-server publishes it only when started with --metrics)" if kind == "llamacpp" else ""
        st.session_state["ext_gauge_error"] = f"No gauges from {choice.metrics}{hint}: {exc}"
        return
    st.session_state.pop("ext_gauge_error", None)
    readings.append({"t": now_s(), "running": g.running, "waiting": g.waiting, "kv": g.kv_usage, "engine": g.engine})
    del readings[:max(0, len(readings) - KEEP_GAUGES)]


def run_time() -> float:
    """Seconds on this run's own axis: since this page first sent load to the server."""
    return now_s() - (st.session_state.get("ext_started") or 0.0)


X_TITLE = "seconds since you first pressed Send this load"


def x_range(table: pd.DataFrame) -> tuple[float, float]:
    """The run's time axis, fitted to the load: to now while requests stream, to the last event
    once they are done (at most the latest WINDOW_S seconds)."""
    events = pd.concat([table[c] for c in ("arrival_s", "finish_s")]) if len(table) else pd.Series(dtype=float)
    last = events.max() if events.notna().any() else None
    return style.load_x_range(run_time(), last, gen.busy, WINDOW_S)


def on_run_axis(table: pd.DataFrame) -> pd.DataFrame:
    """The requests table with its times on the run's own axis and short labels (#1, #2, ... in
    the order they were sent) in place of the server's long request ids."""
    origin = st.session_state.get("ext_started") or 0.0
    out = table.copy()
    for col in ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s"):
        out[col] = pd.to_numeric(out[col], errors="coerce") - origin
    out["id"] = [f"#{i + 1}" for i in range(len(table))]
    return out


def charted(fig: dict) -> dict:
    """A live chart's figure with the run's axis title."""
    fig["layout"].setdefault("xaxis", {})["title"] = {"text": X_TITLE}
    return fig


def headline(table: pd.DataFrame) -> None:
    done = table[table["status"] == "finished"]
    itls = gen.itls()
    cells = {
        "finished": f"{len(done)} of {len(table)}",
        "in flight": str(gen.in_flight),
        "TTFT p50": widgets.fmt(done["ttft_s"].median() if len(done) else None, "s", 3),
        "TPOT p50": widgets.fmt(done["tpot_s"].median() if len(done) else None, "s", 3),
        "ITL p95": widgets.fmt(metrics.percentile(itls, 95) if itls else None, "s", 3),
    }
    for col, (label, value) in zip(st.columns(len(cells)), cells.items()):
        col.metric(label, value)


@st.fragment(run_every=1.0)
def live() -> None:
    read_gauges()
    table = gen.table()
    headline(table)
    readings = st.session_state.get("ext_gauges", [])
    # One container, drawn with or without a line in it: Streamlit rebuilds a chart's frame (blank
    # until its next draw) when an element above it comes or goes.
    note = st.container()
    if kind == "ollama":
        note.info(attach.KIND_HIDDEN["ollama"], icon=":material/visibility_off:")
    elif st.session_state.get("ext_gauge_error"):
        note.warning(widgets.plain(st.session_state["ext_gauge_error"]))
    elif readings and readings[-1]["kv"] is not None:
        note.caption(f"KV cache in use: {readings[-1]['kv']:.0%} (from the metrics page)")
    elif readings:
        note.caption("KV cache use: this engine's metrics page does not publish it.")
    ours = on_run_axis(table)
    window = x_range(ours)
    left, right = st.columns(2)
    with left:
        timeline = latency.request_timeline(ours, now_s=run_time(), x_range=window)
        live_chart(charted(timeline), "ext_timeline")
    with right:
        frame = pd.DataFrame(readings, columns=["t", "running", "waiting", "kv", "engine"])
        frame["t"] = frame["t"] - (st.session_state.get("ext_started") or 0.0)
        engine = prometheus.ENGINE_NAMES.get(frame["engine"].iloc[-1], "the engine") if len(frame) else "the engine"
        live_chart(charted(latency.gauges_over_time(frame, engine, x_range=window)), "ext_gauges_chart")
    gaps = gen.gaps()
    gaps["token_s"] = gaps["token_s"] - (st.session_state.get("ext_started") or 0.0)
    gaps["id"] = gaps["id"].map(dict(zip(table["id"], ours["id"])))
    # two to a row: a half-width chart is what their subtitles and axis titles are wrapped for
    cells = [c for _ in range(2) for c in st.columns(2)]
    for cell, metric, frame in zip(cells, ("ttft_s", "tpot_s", "itl_s"), (ours, ours, gaps)):
        with cell:
            live_chart(charted(latency.latency_over_time(frame, metric, x_range=window, window=50)),
                       f"ext_{metric}_chart")
    hidden = attach.HIDDEN["openai"] + (" " + attach.KIND_HIDDEN["llamacpp"] if kind == "llamacpp" else "")
    with cells[3]:
        st.info(widgets.plain(hidden), icon=":material/visibility_off:")
    errors = table[table["error"].astype(bool)] if len(table) else table
    if len(errors):
        st.caption("Requests the server refused or failed, with its reason:")
        st.dataframe(errors[["id", "status", "error"]].tail(10), hide_index=True, width="stretch")


live()
