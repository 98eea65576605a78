"""The Playground's views: status, headline strip, review bar, charts, streaming texts.

The page is one fixed skeleton: the same elements in the same order in every state (idle,
starting, running, paused, finished), so a refresh only gives each element new data. Charts
are live_charts (ui/live_chart.py): each keeps its plot and redraws it in place.
Every function takes the Tables of one snapshot (plus the setup) and draws with the pure
builders in analysis/; nothing here runs or steers the engine.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st

from analysis import frame_metrics, kv, latency, membership, queue_charts, style
from analysis.figure_json import figure_dict, ready
from analysis.tables import MARK_COLUMNS, Tables
from engine.core import metrics
from engine.core.metrics import LIVE_REQUEST_COLUMNS, STEP_COLUMNS
from playground import status
from playground.setup import Setup
from ui import widgets
from ui.live_chart import live_chart, show_figure

# Each refresh reruns the page's live part, which costs the server CPU for every viewer: the
# rates are the ones a learner needs (the batch chart twice a second, the time charts once), where
# a refresh is cheap; playground/pace.py slows both alike where it costs this machine more.
REFRESH_S = 0.5               # status, headline and batch chart: twice a second while running
TIME_CHARTS_EVERY_S = 0.8     # time charts and texts are rebuilt when this old: every other refresh
LIVE_WINDOW_STEPS = 120       # the batch-membership chart scrolls over this many recent steps
TIMELINE_LIMIT = 80           # most recent requests on the Gantt chart
REJECTED_COLUMNS = ["id", "tenant", "arrival_s", "prompt_tokens", "status", "reason"]
TEXTS_SHOWN = 4
LIVE_SPAN_S = 60.0            # the time charts show the latest minute, full width from the start
PRESENTER_CHARTS = ("pg_ttft", "pg_tpot", "pg_queue", "pg_throughput")   # its fewer panels

DEFINITIONS = metrics.DEFINITIONS + (
    "- **Waiting / running now**: requests in the queue / holding a batch slot now.\n"
    "- **Headline percentiles** count a request from its first token (TTFT) or its second (TPOT) "
    "on, in flight or finished, and say *provisional* while few requests have finished.\n")


def empty_tables() -> Tables:
    return Tables(pd.DataFrame(columns=STEP_COLUMNS),
                  pd.DataFrame(columns=LIVE_REQUEST_COLUMNS),
                  pd.DataFrame(columns=MARK_COLUMNS))


PAGE_STYLE = """<style>
/* Streamlit's "Running..." badge and Stop button would flash in the header on every refresh. */
[data-testid='stStatusWidget'] { visibility: hidden; }
/* The whole width for the charts, and the buttons close to the top of the screen. */
@media (min-width: 640px) {
  /* Top padding clears the navigation bar across the top (about 3.75rem), so the title is not cut off. */
  [data-testid='stMainBlockContainer'] { padding: 4.25rem 2rem 4rem 2rem; max-width: none; }
}
/* An element waiting for its next refresh is faded by Streamlit: on a page that refreshes
   twice a second that reads as flicker. Keep it as it is until its new data comes. */
[data-testid='stElementContainer'][data-stale='true'] { opacity: 1 !important; transition: none !important; }
/* The instant feedback on Start (ui/instant_feedback.py) is a script: nothing to see or lay out. */
.st-key-pg_instant { display: none; }
/* Headline numbers shrink with the window rather than being cut off. */
[data-testid='stMetricValue'] { font-size: clamp(1.4rem, 2.3vw, 2.25rem); }
</style>"""


def page_style() -> None:
    st.html(PAGE_STYLE)


def largest_batch(steps: pd.DataFrame) -> int:
    """Most requests that shared one step so far (a step's members)."""
    return int(steps["members"].map(len).max()) if len(steps) else 0


def status_line(state: str, tables: Tables, setup: Setup, sent: int, shared: bool = False) -> None:
    st.markdown(status.status_text(state, tables, setup, sent, shared))


def engine_note(text: str = "") -> None:
    """One slot saying that the run is a simulation (always drawn, empty for the real engine)."""
    if text:
        st.caption(text)
    else:
        st.empty()


def rejected_so_far(tables: Tables) -> int:
    """Requests turned away or failed over the whole run (the window's and those it dropped)."""
    reqs, old = tables.requests, tables.retired
    shown = int(reqs["status"].isin(metrics.UNSERVED).sum()) if len(reqs) else 0
    return shown + sum(map(old.count, metrics.UNSERVED))


def notice_line(text: str = "", level: str = "info") -> None:
    """One slot for a line of news (starting, warming up, the engine's own message): always
    drawn, empty when there is nothing to say, so the elements below never move."""
    if not text:
        st.empty()
    else:
        {"error": st.error, "warning": st.warning}.get(level, st.info)(text)


def provisional_note(h: dict) -> str | None:
    """Under a percentile while few requests have finished: how many it is over so far."""
    if not h["provisional"]:
        return None
    return f"provisional: {h['finished']:,} finished"


def headline(h: dict, presenter: bool = False) -> None:
    """The key numbers: h is frame_metrics.headline's (playground.comparison.headline)."""
    so_far = (" Counted from each request's first token (TTFT) or second token (TPOT) on, in flight "
              f"or finished; provisional until {frame_metrics.PROVISIONAL_UNTIL} requests have finished.")
    note = provisional_note(h)
    ttft_note, tpot_note = (note if h["ttft_n"] else None), (note if h["tpot_n"] else None)   # none before a value
    items = [
        ("TTFT p50", widgets.fmt(h["ttft_p50_s"], "s"), "Time to first token, median." + so_far, ttft_note),
        ("TTFT p95", widgets.fmt(h["ttft_p95_s"], "s"), "Time to first token that 95% of requests beat." + so_far,
         ttft_note),
        ("TPOT p50", widgets.fmt(h["tpot_p50_s"], "ms", digits=0, scale=1000),
         "Time per output token after the first, median." + so_far, tpot_note),
        ("TPOT p95", widgets.fmt(h["tpot_p95_s"], "ms", digits=0, scale=1000),
         "Time per output token, 95th percentile." + so_far, tpot_note),
        ("Throughput", widgets.fmt(h["throughput_tok_s"], "tok/s", digits=1),
         "Output tokens made (by every request) per second of run.", None),
        ("Goodput", widgets.fmt(h["goodput_req_s"], "req/s"),
         "Finished requests per second that met both SLO targets.", None),
        ("Waiting now", f"{h['waiting_now']:,}", "Requests in the queue now.", None),
        ("Running now", f"{h['running_now']:,}", "Requests holding a batch slot now.", None),
        ("Wasted slot-steps", f"{h['wasted_slot_steps']:,}",
         "Batch slots left empty while requests waited for one, summed over the steps, each step against "
         "its own max_num_seqs.", None),
    ]
    rows = [[items[i] for i in (1, 3, 4, 5, 6)]] if presenter else [items[:5], items[5:]]
    for row in rows:
        for col, (label, value, help_text, delta) in zip(st.columns(5), row):
            col.metric(label, value, delta, delta_color="off", delta_arrow="off", help=help_text)


# ----------------------------------------------------------------------------- review
# The review bar is always drawn; while the engine runs it is disabled and follows the latest
# step. "pg_follow" says whether the view stays on the latest step when new steps come (after
# "Step once", or when the learner left it at the end).

SCRUB, FOLLOW = "pg_scrub", "pg_follow"


def follow_latest() -> None:
    """Put the review on the latest step (Step once, Start, Reset call this)."""
    st.session_state[FOLLOW] = True


def _move(delta: int, first: int, latest: int) -> None:
    chosen = min(max(st.session_state.get(SCRUB, latest) + delta, first), latest)
    st.session_state[SCRUB] = chosen
    st.session_state[FOLLOW] = chosen >= latest


def _scrubbed(latest: int) -> None:
    st.session_state[FOLLOW] = st.session_state[SCRUB] >= latest


def review_bar(tables: Tables, reviewable: bool) -> int | None:
    """Previous / next step buttons around a scrubber over the steps the run keeps. Returns the
    step the view shows (None before the first step)."""
    steps = tables.steps
    first, latest = (int(steps["step"].iloc[0]), int(steps["step"].iloc[-1])) if len(steps) else (0, 0)
    state = st.session_state
    if not reviewable or state.get(FOLLOW, True) or SCRUB not in state:
        state[SCRUB] = latest
    state[SCRUB] = min(max(state[SCRUB], first), latest)
    chosen, off = state[SCRUB], not reviewable or first == latest
    left, mid, right = st.columns([2, 8, 2], vertical_alignment="bottom")
    left.button("Back", key="pg_prev", icon=":material/chevron_left:", width="stretch",
                help="The step before this one.", on_click=_move, args=(-1, first, latest), disabled=off or chosen <= first)
    mid.slider("Review: step", first, max(latest, first + 1), key=SCRUB, on_change=_scrubbed,
               args=(latest,), disabled=off,
               help="Pause (or press Step once), then step back through the run: the headline, "
                    "the batch chart, the queue and the request timeline show the engine as it "
                    "was at the end of this step.")
    right.button("Next", key="pg_next", icon=":material/chevron_right:", width="stretch",
                 help="The step after this one.", on_click=_move, args=(1, first, latest), disabled=off or chosen >= latest)
    return chosen if len(steps) else None


def step_detail(tables: Tables, step: int | None) -> None:
    steps = tables.steps
    at = int(np.searchsorted(steps["step"].to_numpy(), step)) if step is not None else len(steps)   # steps in order
    if at >= len(steps) or steps["step"].iat[at] != step:
        st.caption("Each engine step appears here once the run starts.")
        return
    r = steps.iloc[at]
    members = list(r["members"])          # (request id, phase, tokens) of each member
    who = widgets.plain(", ".join(f"{rid} ({phase} {n})" for rid, phase, n in members[:12]))
    more = f" and {len(members) - 12} more" if len(members) > 12 else ""
    st.caption(f"Step {step} at {r['t_start_s']:.2f}–{r['t_end_s']:.2f} s "
               f"({(r['t_end_s'] - r['t_start_s']) * 1000:.0f} ms): a batch of {len(members)} of "
               f"{int(r['max_num_seqs'])} slots; then {int(r['running'])} running, "
               f"{int(r['waiting'])} waiting; {int(r['prefill_tokens'])} prefill + "
               f"{int(r['decode_tokens'])} decode tokens — {who}{more}")


# ----------------------------------------------------------------------------- charts


def batch_figure(tables: Tables, setup: Setup, presenter: bool = False):
    slots = max(setup.max_num_seqs, largest_batch(tables.steps))   # steps that record their own limit use it
    return membership.batch_membership(tables.steps, slots, window=LIVE_WINDOW_STEPS,
                                       marks=tables.marks, presenter=presenter)


def batch_chart(tables: Tables, setup: Setup, presenter: bool = False) -> None:
    live_chart(batch_figure(tables, setup, presenter), "pg_batch", font_px=style.font_px(presenter))


def time_figures(tables: Tables, setup: Setup, now_s: float | None = None, presenter: bool = False,
                 ghost: Tables | None = None, ghost_name: str = "previous run") -> dict:
    """The time charts' builders by chart key, in page order (tools.bench_live_refresh times them);
    in presenter mode only PRESENTER_CHARTS. The x-axis holds the latest LIVE_SPAN_S up to now_s;
    `ghost` (another run's tables) is drawn faintly behind TTFT, TPOT, queue and throughput."""
    steps, reqs, marks = tables.steps, tables.requests, tables.marks
    x = dict(presenter=presenter,
             x_range=style.live_x_range(now_s, LIVE_SPAN_S) if now_s is not None else None)
    behind = dict(ghost=ghost, ghost_name=ghost_name)
    builders = {
        "pg_timeline": lambda: latency.request_timeline(reqs, now_s=now_s, limit=TIMELINE_LIMIT, marks=marks, **x),
        "pg_ttft": lambda: latency.latency_over_time(reqs, "ttft_s", setup.ttft_slo_s, marks, **x, **behind),
        "pg_tpot": lambda: latency.latency_over_time(reqs, "tpot_s", setup.tpot_slo_s, marks, **x, **behind),
        "pg_queue": lambda: queue_charts.queue_over_time(steps, marks, **x, **behind),
        "pg_throughput": lambda: queue_charts.throughput_over_time(steps, reqs, setup.ttft_slo_s,
                                                             setup.tpot_slo_s, marks, **x, **behind),
        "pg_kv": lambda: kv.kv_usage(steps, marks, **x),
    }
    return {k: b for k, b in builders.items() if k in PRESENTER_CHARTS} if presenter else builders


def ready_charts(builders: dict, presenter: bool = False) -> dict:
    """time_figures' builders, built and ready to send: the page keeps these between two
    rebuilds and sends the same text again."""
    font = style.font_px(presenter)
    return {key: ready(figure_dict(build(), font)) for key, build in builders.items()}


def time_charts(figures: dict) -> None:
    """ready_charts' figures: the request timeline across the page, then the others two to a row."""
    rows = list(figures.items())
    if rows and rows[0][0] == "pg_timeline":
        show_figure(rows.pop(0)[1], "pg_timeline")
    for i in range(0, len(rows), 2):
        for col, (key, fig) in zip(st.columns(2), rows[i:i + 2]):
            with col:
                show_figure(fig, key)


# ----------------------------------------------------------------------------- texts, rejects


def latest_texts(tables: Tables, n: int = TEXTS_SHOWN) -> pd.DataFrame:
    """Up to n requests with text: those decoding now first (the latest to start first), then the
    latest finished. A loop over the rows: there are few, and each pandas selection costs more
    than the loop on a page that refreshes while the engine runs."""
    live, done = [], []
    for rid, status, tokens, out, partial, first, finish in tables.requests[
            ["id", "status", "output_tokens", "output_text", "partial_text", "first_token_s", "finish_s"]
    ].itertuples(index=False, name=None):
        finished = status == "finished"
        text = out if finished else partial
        if isinstance(text, str) and text:
            when = finish if finished else first
            (done if finished else live).append((-when if when == when else math.inf, rid, status, tokens, text))
    picked = [row[1:] for row in sorted(live, key=lambda r: r[0]) + sorted(done, key=lambda r: r[0])][:n]
    return pd.DataFrame(picked, columns=["request", "status", "tokens", "text"])


def generated_texts(df: pd.DataFrame, simulated: bool = False) -> None:
    """TEXTS_SHOWN slots, two to a row, filled from latest_texts (empty slots stay in place)."""
    st.markdown("**Latest generated text**")
    st.caption("A simulated engine writes no text: its token ids are stand-ins." if simulated else
               "Generated text streams in here once requests start decoding." if len(df) == 0
               else "The requests decoding now, then the latest finished.")
    cols = st.columns(2)
    rows = [r for _, r in df.iterrows()]
    for i in range(TEXTS_SHOWN):
        with cols[i % 2]:
            if i < len(rows):
                r = rows[i]
                tail = r["text"][-300:].replace("\n", " ")
                st.caption(f"**{widgets.plain(r['request'])}** · {r['status']} · {widgets.plural(int(r['tokens']), 'token')}")
                st.text(("…" if len(r["text"]) > 300 else "") + tail)
            else:
                st.caption(" ")
                st.text("")


def rejected(tables: Tables) -> pd.DataFrame:
    """The requests turned away or failed, with the reason (none, the usual case, costs the least)."""
    reqs = tables.requests
    bad = reqs["status"].isin(metrics.UNSERVED) if len(reqs) else None
    if bad is None or not bad.any():
        return pd.DataFrame(columns=REJECTED_COLUMNS)
    return reqs.loc[bad, ["id", "tenant", "arrival_s", "prompt_tokens", "status", "error"]].rename(
        columns={"error": "reason"})


def rejected_table(bad: pd.DataFrame) -> None:
    st.subheader(f"Rejected requests ({len(bad)})")
    if len(bad):
        st.dataframe(bad, hide_index=True, width="stretch")
    else:
        st.caption("None so far: every request that arrived was admitted.")


def definitions() -> None:
    with st.expander("Metric definitions"):
        st.markdown(DEFINITIONS)
