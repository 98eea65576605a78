"""The Playground's live views: headline strip, charts, streaming texts, rejected requests.

Every function takes the Tables of one snapshot (plus the setup) and draws with the pure
builders in analysis/; nothing here runs or steers the engine.
"""
from __future__ import annotations


import pandas as pd
import streamlit as st

from analysis import frame_metrics, kv, latency, membership, queue
from analysis.tables import MARK_COLUMNS, Tables
from engine import metrics
from engine.metrics import REQUEST_COLUMNS, STEP_COLUMNS
from playground.setup import Setup
from ui import widgets

LIVE_WINDOW_STEPS = 120       # the batch-membership chart scrolls over this many recent steps
TIMELINE_LIMIT = 80           # most recent requests on the Gantt chart
TEXTS_SHOWN = 4

DEFINITIONS = metrics.DEFINITIONS + (
    "- **Waiting / running now**: requests in the queue / in the batch at the end of the latest step.\n")


def empty_tables() -> Tables:
    return Tables(pd.DataFrame(columns=STEP_COLUMNS),
                  pd.DataFrame(columns=REQUEST_COLUMNS + ["partial_text"]),
                  pd.DataFrame(columns=MARK_COLUMNS))


def largest_batch(steps: pd.DataFrame) -> int:
    """Most requests that shared one step so far (a step's `running` = its members)."""
    return int(steps["running"].max()) if len(steps) else 0


def status_line(state: str, tables: Tables, setup: Setup, arrived: int, message: str = "") -> None:
    steps, reqs, old = tables.steps, tables.requests, tables.retired
    n = len(steps)
    status = reqs["status"] if len(reqs) else pd.Series(dtype=str)
    taken = n + old.steps
    unserved = int(status.isin(metrics.UNSERVED).sum()) + sum(map(old.count, metrics.UNSERVED))
    rate = ""
    if n >= 2:
        recent = steps.iloc[-min(n, 50):]
        span = float(recent["t_end_s"].iloc[-1] - recent["t_start_s"].iloc[0])
        if span > 0:
            rate = f" · {len(recent) / span:.1f} steps/s"
    st.markdown(
        f"**Engine: {state}** · steps: {taken} · arrived: {arrived}/{setup.num_requests} · "
        f"finished: {int((status == 'finished').sum()) + old.count('finished')} · rejected: "
        f"{unserved} · largest batch: "
        f"{largest_batch(steps)} of {setup.max_num_seqs} slots{rate}")
    if message:     # the engine's words, which may quote a request's own values
        (st.error if state == "error" else st.info)(widgets.plain(widgets.without_paths(message)))


def headline(tables: Tables, setup: Setup) -> None:
    h = frame_metrics.headline(tables.requests, tables.steps, setup.ttft_slo_s, setup.tpot_slo_s,
                               setup.max_num_seqs, tables.retired)
    items = [
        ("TTFT p50", widgets.fmt(h["ttft_p50_s"], "s"),
         "Time to first token, median over finished requests."),
        ("TTFT p95", widgets.fmt(h["ttft_p95_s"], "s"),
         "Time to first token that 95% of finished requests beat."),
        ("TPOT p50", widgets.fmt(h["tpot_p50_s"], "ms", digits=0, scale=1000),
         "Time per output token after the first, median."),
        ("TPOT p95", widgets.fmt(h["tpot_p95_s"], "ms", digits=0, scale=1000),
         "Time per output token, 95th percentile."),
        ("Throughput", widgets.fmt(h["throughput_tok_s"], "tok/s", digits=1),
         "Output tokens made (by every request) per second of run."),
        ("Goodput", widgets.fmt(h["goodput_req_s"], "req/s"),
         "Finished requests per second that met both SLO targets."),
        ("Waiting now", str(h["waiting_now"]), "Requests in the queue after the latest step."),
        ("Running now", str(h["running_now"]), "Requests in the batch in the latest step."),
        ("Wasted slot-steps", f"{h['wasted_slot_steps']:,}",
         "Empty batch slots (max_num_seqs minus requests) summed over every busy step."),
    ]
    for row in (items[:5], items[5:]):
        for col, (label, value, help_text) in zip(st.columns(5), row):
            col.metric(label, value, help=help_text)


def _plot(fig, key: str) -> None:
    st.plotly_chart(fig, key=key, config=widgets.PLOT_CONFIG, width="stretch")


def batch_figure(tables: Tables, setup: Setup, upto_step: int | None = None):
    slots = max(setup.max_num_seqs, largest_batch(tables.steps))
    return membership.batch_membership(tables.steps, slots, window=LIVE_WINDOW_STEPS,
                                   upto_step=upto_step, marks=tables.marks)


def batch_chart(tables: Tables, setup: Setup, upto_step: int | None = None) -> None:
    _plot(batch_figure(tables, setup, upto_step), "pg_batch")


def replay_scrubber(tables: Tables) -> int | None:
    """After pausing: a slider over the steps the run keeps (its window). Returns the chosen
    step number."""
    steps = tables.steps
    if len(steps) == 0:
        return None
    first, latest = int(steps["step"].iloc[0]), int(steps["step"].iloc[-1])
    key, last_key = "pg_scrub", "pg_scrub_last"
    last = st.session_state.get(last_key)
    if last != latest:    # new steps since: follow them if the slider was at the end
        chosen = st.session_state.get(key)
        if chosen in (None, last) or not first <= chosen <= latest:
            st.session_state[key] = latest
        st.session_state[last_key] = latest
    if first == latest:
        return latest
    return st.slider("Replay: step", first, latest, key=key,
                     help="Step back through the run (the latest steps it keeps): the batch chart "
                          "and the request timeline show the engine as it was at this step.")


def step_detail(tables: Tables, step: int) -> None:
    steps = tables.steps
    row = steps[steps["step"] == step]
    if len(row) == 0:
        return
    r = row.iloc[0]
    members = list(r["members"])          # (request id, phase, tokens) of each member
    who = widgets.plain(", ".join(f"{rid} ({phase} {n})" for rid, phase, n in members[:12]))
    more = f" and {len(members) - 12} more" if len(members) > 12 else ""
    st.caption(f"Step {step} at {r['t_start_s']:.2f}–{r['t_end_s']:.2f} s "
               f"({(r['t_end_s'] - r['t_start_s']) * 1000:.0f} ms): {len(members)} running, "
               f"{int(r['waiting'])} waiting, {int(r['prefill_tokens'])} prefill + "
               f"{int(r['decode_tokens'])} decode tokens — {who}{more}")


def time_figures(tables: Tables, setup: Setup, now_s: float | None = None) -> dict:
    """The time charts' builders by chart key, in page order (tools.bench_live_refresh times them)."""
    steps, reqs, marks = tables.steps, tables.requests, tables.marks
    return {
        "pg_timeline": lambda: latency.request_timeline(reqs, now_s=now_s, limit=TIMELINE_LIMIT),
        "pg_ttft": lambda: latency.latency_over_time(reqs, "ttft_s", setup.ttft_slo_s, marks),
        "pg_tpot": lambda: latency.latency_over_time(reqs, "tpot_s", setup.tpot_slo_s, marks),
        "pg_queue": lambda: queue.queue_over_time(steps, marks),
        "pg_throughput": lambda: queue.throughput_over_time(steps, reqs, setup.ttft_slo_s,
                                                             setup.tpot_slo_s, marks),
        "pg_kv": lambda: kv.kv_usage(steps, marks),
    }


def time_charts(tables: Tables, setup: Setup, now_s: float | None = None) -> None:
    """The request timeline across the page, then the other time charts two to a row."""
    figures = time_figures(tables, setup, now_s)
    _plot(figures.pop("pg_timeline")(), "pg_timeline")
    rows = list(figures.items())
    for i in range(0, len(rows), 2):
        for col, (key, build) in zip(st.columns(2), rows[i:i + 2]):
            with col:
                _plot(build(), key)


def latest_texts(tables: Tables, n: int = TEXTS_SHOWN) -> pd.DataFrame:
    """Up to n requests with text: those decoding now first, then the latest finished."""
    reqs = tables.requests
    if len(reqs) == 0:
        return pd.DataFrame(columns=["request", "status", "tokens", "text"])
    finished = reqs["status"] == "finished"
    text = reqs["output_text"].where(finished, reqs["partial_text"]).fillna("").astype(str)
    has = text.str.len() > 0
    live = reqs[has & ~finished].sort_values("first_token_s", ascending=False).index
    done = reqs[has & finished].sort_values("finish_s", ascending=False).index
    picked = reqs.loc[live.append(done)[:n]]
    return pd.DataFrame({"request": picked["id"], "status": picked["status"],
                         "tokens": picked["output_tokens"], "text": text.loc[picked.index]})


def generated_texts(tables: Tables) -> None:
    st.markdown("**Latest generated text**")
    df = latest_texts(tables)
    if len(df) == 0:
        st.caption("Generated text streams in here once requests start decoding.")
        return
    cols = st.columns(2)
    for i, (_, r) in enumerate(df.iterrows()):
        with cols[i % 2]:
            tail = r["text"][-300:].replace("\n", " ")
            st.caption(f"**{widgets.plain(r['request'])}** · {r['status']} · {r['tokens']} tokens")
            st.text(("…" if len(r["text"]) > 300 else "") + tail)


def rejected_table(tables: Tables) -> None:
    reqs = tables.requests
    if len(reqs) == 0:
        return
    bad = reqs[reqs["status"].isin(metrics.UNSERVED)]
    if len(bad) == 0:
        return
    st.subheader(f"Rejected requests ({len(bad)})")
    st.dataframe(bad[["id", "tenant", "arrival_s", "prompt_tokens", "status", "error"]]
                 .rename(columns={"error": "reason"}), hide_index=True, width="stretch")


def definitions() -> None:
    with st.expander("Metric definitions"):
        st.markdown(DEFINITIONS)
