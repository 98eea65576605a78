"""Chart builders: small hand-built tables with answers worked out by hand."""
import math
import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from analysis import frame_metrics, kv, latency, membership, queue_charts, style
from analysis.tables import Tables
from engine.core import metrics
from engine.runs import run_files
from tools.bench_charts import builders, synthetic_trace

NAN = float("nan")


P, D = "prefill", "decode"


def make_steps(members, **cols):
    """A steps table with one row per step's members; other columns get simple defaults."""
    n = len(members)
    counts = [len(m) for m in members]
    data = {
        "step": list(range(n)),
        "t_start_s": [0.1 * i for i in range(n)],
        "t_end_s": [0.1 * (i + 1) for i in range(n)],
        "waiting": [0] * n,
        "running": counts,
        "prefill_tokens": [0] * n,
        "decode_tokens": [sum(phase == D for _, phase, _ in m) for m in members],
        "kv_used_blocks": [c * 2 for c in counts],
        "kv_total_blocks": [10] * n,
        "members": members,
    }
    data.update(cols)
    return pd.DataFrame(data)


# a -> row 0 and b -> row 1; a leaves, c takes row 0; d joins into row 2;
# step 5 is idle; e joins an empty batch and takes row 0.
MEMBERS = [
    (("a", P, 10), ("b", P, 5)),
    (("a", D, 1), ("b", D, 1)),
    (("b", D, 1), ("c", P, 7)),
    (("b", D, 1), ("c", D, 1), ("d", P, 3)),
    (("d", D, 1),),
    (),
    (("e", P, 4),),
]
EXPECTED_IDS = [
    ["a", "b", ""],
    ["a", "b", ""],
    ["c", "b", ""],
    ["c", "b", "d"],
    ["", "", "d"],
    ["", "", ""],
    ["e", "", ""],
]


def drawn(fig: dict) -> go.Figure:
    """A builder's figure (plotly's JSON as dicts) as plotly checks it: go.Figure raises on any
    property plotly.js does not know, and its attributes keep the assertions short."""
    assert isinstance(fig, dict) and set(fig) == {"data", "layout"}, type(fig)
    return go.Figure(fig)


def assert_empty_figure(fig):
    assert isinstance(fig, go.Figure)
    assert len(fig.data) == 0
    assert any(a.text == style.NO_DATA for a in fig.layout.annotations)
    assert fig.layout.title.text
    fig.to_json()


# ------------------------------------------------------------------------- slots


def test_members_text_is_the_steps_csv_format():
    assert run_files.members_text((("r3", "prefill", 128), ("r7", "decode", 1))) == "r3:prefill:128 r7:decode:1"
    assert run_files.members_text(()) == ""


def test_slot_grid_keeps_rows_and_fills_lowest_free_row():
    grid = membership.slot_grid(make_steps(MEMBERS), max_slots=3)
    assert grid.ids.tolist() == EXPECTED_IDS
    assert grid.steps.tolist() == list(range(7))
    assert grid.phase[0].tolist() == [1, 1, 0]  # both prefill
    assert grid.phase[3].tolist() == [2, 2, 1]  # c, b decode; d prefill
    assert grid.tokens[0].tolist() == [10, 5, 0]
    assert grid.tokens[3].tolist() == [1, 1, 3]
    assert grid.empty_cells() == sum(row.count("") for row in EXPECTED_IDS)


def test_slot_grid_reuses_a_row_freed_in_the_same_step():
    grid = membership.slot_grid(make_steps([(("a", D, 1), ("b", D, 1), ("c", D, 1)),
                                            (("a", D, 1), ("c", D, 1), ("d", P, 9), ("e", P, 2))]), 4)
    # b left row 1 this step: d (listed first) takes it, e takes the next free row
    assert grid.ids.tolist() == [["a", "b", "c", ""], ["a", "d", "c", "e"]]


def test_slot_grid_grows_when_policy_allows_more_than_max_slots():
    grid = membership.slot_grid(make_steps([(("a", D, 1), ("b", D, 1), ("c", D, 1))]), 2)
    assert grid.n_slots == 3
    assert grid.ids.tolist() == [["a", "b", "c"]]


@pytest.mark.parametrize("seed", range(20))
def test_slot_grid_rows_follow_the_rule_under_random_joins_and_leaves(seed):
    """Each step's cells hold exactly its members, with their phase, tokens and prefix-cache hit;
    a request keeps its row while it stays; a joining request takes the lowest row free after the
    leavers left."""
    rng = np.random.default_rng(seed)
    batch, members, n_ids = [], [], 0
    for _ in range(60):
        if rng.random() < 0.3:                                     # some leave, some join
            batch = [r for r in batch if rng.random() < 0.7]
            for _ in range(int(rng.integers(0, 4))):
                batch.append(f"r{n_ids}")
                n_ids += 1
        members.append(tuple((r, P if rng.random() < 0.2 else D, int(rng.integers(1, 9))) for r in batch))
    hits = [tuple((r, int(rng.integers(1, 50))) for r, _, _ in step if rng.random() < 0.2) for step in members]
    max_slots = int(rng.integers(1, 6))
    grid = membership.slot_grid(make_steps(members, prefix_hits=hits), max_slots)
    row_of: dict = {}
    for i, step in enumerate(members):
        ids = grid.ids[i].tolist()
        assert sorted(r for r in ids if r) == sorted(r for r, _, _ in step)
        for rid, phase, tok in step:
            j = ids.index(rid)
            assert (grid.phase[i, j], grid.tokens[i, j]) == ((1 if phase == P else 2), tok)
            assert grid.cached[i, j] == dict(hits[i]).get(rid, 0)
        row_of = {r: row_of[r] for r, _, _ in step if r in row_of}    # the leavers' rows are free
        for rid, _, _ in step:
            if rid in row_of:
                assert ids.index(rid) == row_of[rid]                # stays in its row
            else:
                lowest = min(set(range(grid.n_slots)) - set(row_of.values()))
                assert ids.index(rid) == lowest                     # the lowest free row
                row_of[rid] = lowest


def test_slot_grid_of_nothing():
    grid = membership.slot_grid(make_steps([]), 4)
    assert grid.ids.shape == (0, 4)


def test_wasted_slot_steps_counts_empty_slots_while_requests_waited():
    steps = make_steps(MEMBERS, waiting=[0, 5, 1, 4, 1, 2, 0])
    # empty slots per step (3 slots): 1, 1, 1, 0, 2, 3, 2; waiting: 0, 5, 1, 4, 1, 2, 0
    assert frame_metrics.wasted_slot_steps(steps, 3) == 0 + 1 + 1 + 0 + 1 + 2 + 0
    # 4 slots: empty 2, 2, 2, 1, 3, 4, 3
    assert frame_metrics.wasted_slot_steps(steps, 4) == 0 + 2 + 1 + 1 + 1 + 2 + 0
    assert frame_metrics.wasted_slot_steps(make_steps(MEMBERS), 3) == 0, "nobody waiting: nothing wasted"
    assert membership.member_counts(steps).tolist() == [2, 2, 2, 3, 1, 0, 1]
    # members may be lists (as they come back from JSON)
    steps["members"] = [[list(m) for m in step] for step in MEMBERS]
    assert frame_metrics.wasted_slot_steps(steps, 3) == 5


def test_batch_membership_figure():
    steps = make_steps(MEMBERS)
    fig = drawn(membership.batch_membership(steps, 3))
    heat = fig.data[0]
    assert isinstance(heat, go.Heatmap)
    # heatmap, prefill marks and id labels (each in two inks) + legend entries (no change marks)
    assert [t.name for t in fig.data[5:]] == ["prefill step (╱)", "decode step (plain)", "empty slot"]
    z = np.asarray(heat.z)
    assert z.shape == (3, 7)  # slots x steps
    assert ((z == 0) == (np.array(EXPECTED_IDS).T == "")).all()  # 0 = empty slot
    # a request keeps one colour through prefill and decode (a at slot 0, steps 0 and 1)
    assert z[0, 0] == z[0, 1] != 0
    assert np.asarray(heat.text)[2, 3] == "d prefill"
    assert np.asarray(heat.customdata)[2, 3] == 3
    assert fig.layout.title.text and fig.layout.title.subtitle.text
    assert fig.layout.xaxis.title.text == "engine step"
    assert fig.layout.yaxis.title.text == "batch slot"
    fig.to_json()


def test_batch_membership_window_and_scrub_keep_true_rows():
    steps = make_steps(MEMBERS)
    fig = drawn(membership.batch_membership(steps, 3, window=2, upto_step=4))
    heat = fig.data[0]
    assert list(heat.x) == [3, 4]
    # history before the window is replayed, so d is still in row 2
    assert np.asarray(heat.text)[:, 1].tolist() == ["empty slot", "empty slot", "d decode"]
    marks = pd.DataFrame({"step": [1, 3], "t_s": [0.2, 0.4], "label": ["x", "max_num_seqs 8→2"]})
    fig = drawn(membership.batch_membership(steps, 3, window=3, marks=marks))
    assert [a.text for a in fig.layout.annotations] == []  # steps 1 and 3 are outside 4..6
    fig = drawn(membership.batch_membership(steps, 3, marks=marks))
    assert [a.text for a in fig.layout.annotations] == ["x", "max_num_seqs 8→2"]
    assert len(fig.layout.shapes) == 2


def test_batch_membership_caps_columns():
    steps = make_steps([(("a", D, 1),)] * 50)
    fig = drawn(membership.batch_membership(steps, 2, max_steps=20))
    assert list(fig.data[0].x) == list(range(30, 50))
    assert "last 20 steps" in fig.layout.title.subtitle.text


# ------------------------------------------------------------------------- requests


def make_requests():
    rows = [
        # id, arrival, sched, first, finish, out, ttft, tpot, status
        ("r1", 0.0, 0.5, 0.1, 2.0, 10, 0.1, 0.01, "finished"),
        ("r2", 1.0, 1.1, 1.2, 1.2, 1, 0.2, NAN, "finished"),
        ("r3", 2.0, 2.1, 2.3, 2.5, 5, 0.3, 0.03, "finished"),
        ("r4", 3.0, 3.2, 3.4, 4.0, 5, 0.4, 0.04, "finished"),
        ("r5", 4.0, 4.5, 5.0, 10.0, 20, 1.0, 0.02, "finished"),
        ("r6", 5.0, NAN, NAN, NAN, 0, NAN, NAN, "rejected"),
        ("r7", 6.0, 6.5, NAN, NAN, 0, NAN, NAN, "running"),
    ]
    df = pd.DataFrame(rows, columns=["id", "arrival_s", "first_scheduled_s", "first_token_s",
                                     "finish_s", "output_tokens", "ttft_s", "tpot_s", "status"])
    df["tenant"] = ["a", "b", "a", "b", "a", "a", "b"]
    df["prompt_tokens"] = [10, 20, 30, 40, 50, 60, 70]
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    df["queue_s"] = df["first_scheduled_s"] - df["arrival_s"]
    df["preemptions"] = [0, 0, 1, 0, 0, 0, 0]
    df["error"] = ["", "", "", "", "", "queue full (max_waiting=4)", ""]
    df["output_text"] = ""
    return df


def test_headline_numbers_match_hand_computed_percentiles():
    steps = make_steps(MEMBERS, waiting=[0, 0, 0, 0, 0, 2, 3])
    h = frame_metrics.headline(make_requests(), steps, slo_ttft=0.35, slo_tpot=0.035, max_slots=3)
    # finished TTFTs 0.1 0.2 0.3 0.4 1.0: p95 sits 0.8 of the way from 0.4 to 1.0
    assert h["ttft_p50_s"] == pytest.approx(0.3)
    assert h["ttft_p95_s"] == pytest.approx(0.4 + 0.8 * 0.6)
    # TPOTs 0.01 0.02 0.03 0.04 (r2 made one token, so has none): p95 = 0.03 + 0.85 * 0.01
    assert h["tpot_p50_s"] == pytest.approx(0.025)
    assert h["tpot_p95_s"] == pytest.approx(0.0385)
    # first arrival 0 s, last finish 10 s
    assert h["duration_s"] == pytest.approx(10.0)
    assert h["throughput_tok_s"] == pytest.approx((10 + 1 + 5 + 5 + 20) / 10)
    # r1, r2 (no TPOT passes), r3 meet both SLOs; r4 and r5 miss TTFT
    assert h["goodput_req_s"] == pytest.approx(0.3)
    assert h["finished"] == 5
    assert h["waiting_now"] == 3
    assert h["running_now"] == 1
    # empty slots 1, 1, 1, 0, 2, 3, 2 against waiting 0, 0, 0, 0, 0, 2, 3
    assert h["wasted_slot_steps"] == 2 + 2


def test_headline_without_slos_counts_every_finished_request():
    h = frame_metrics.headline(make_requests(), None)
    assert h["goodput_req_s"] == pytest.approx(0.5)
    assert h["wasted_slot_steps"] == 0 and h["waiting_now"] == 0


def test_meets_slo():
    ok = frame_metrics.meets_slo(make_requests(), slo_ttft=0.35, slo_tpot=0.035)
    assert ok.tolist() == [True, True, True, False, False, False, False]


def test_request_timeline():
    req = make_requests()
    fig = drawn(latency.request_timeline(req, now_s=7.0))
    assert [t.name for t in fig.data] == ["queued", "prefill", "decode", "rejected / failed"]
    queued, prefill, decode, rejected = fig.data
    assert len(queued.y) == 7
    i = list(queued.y).index("r7")
    assert queued.base[i] == 6.0 and queued.x[i] == pytest.approx(0.5)
    assert prefill.x[i] == pytest.approx(0.5)  # still prefilling: drawn up to now
    assert math.isnan(decode.x[i])  # not decoding yet
    j = list(queued.y).index("r5")
    assert decode.base[j] == 5.0 and decode.x[j] == pytest.approx(2.0)  # cut at now = 7
    assert list(rejected.y) == ["r6"] and list(rejected.x) == [5.0]
    assert fig.layout.yaxis.type == "category"
    fig.to_json()
    # a setting change is the same dashed line here as on the other time charts
    marks = pd.DataFrame({"step": [3], "t_s": [4.2], "label": ["max_num_seqs 8→2"]})
    fig = drawn(latency.request_timeline(req, now_s=7.0, marks=marks))
    assert [s.x0 for s in fig.layout.shapes if s.line.dash == "dash"] == [4.2]
    assert "max_num_seqs 8→2" in [a.text for a in fig.layout.annotations]
    assert fig.data[-1].name == style.MARK_NAME


def test_request_timeline_scrub_and_limit():
    req = make_requests()
    fig = drawn(latency.request_timeline(req, now_s=4.5))
    queued, prefill, decode, _ = fig.data
    assert list(queued.y) == ["r1", "r2", "r3", "r4", "r5"]  # r6, r7 not arrived yet
    assert decode.x[0] == pytest.approx(1.9)  # r1 decodes 0.1 -> 2.0
    assert queued.x[4] == pytest.approx(0.5) and math.isnan(prefill.x[4])
    fig = drawn(latency.request_timeline(req, limit=3))
    assert list(fig.data[0].y) == ["r5", "r6", "r7"]


def test_request_timeline_keeps_the_requests_in_the_batch_past_capacity():
    """Past capacity the newest arrivals all wait; the requests being served stay on the chart."""
    n, now = 300, 50.0
    arrival = np.linspace(0, 40, n)
    serving = np.arange(n) < 4                            # the four oldest: in the batch at `now`
    req = pd.DataFrame({"id": [f"r{i}" for i in range(n)], "arrival_s": arrival,
                        "first_scheduled_s": np.where(serving, arrival + 1, np.nan),
                        "first_token_s": np.where(serving, arrival + 2, np.nan),
                        "finish_s": np.nan, "status": "running"})
    ids = list(drawn(latency.request_timeline(req, now_s=now, limit=20)).data[0].y)
    assert ids == [f"r{i}" for i in range(4)] + [f"r{i}" for i in range(n - 16, n)]
    finished = req.assign(finish_s=np.where(serving, now - 1, np.nan))   # done: the newest 20 only
    assert list(drawn(latency.request_timeline(finished, now_s=now, limit=20)).data[0].y) == \
        [f"r{i}" for i in range(n - 20, n)]


def test_latency_over_time():
    req = make_requests()
    marks = pd.DataFrame({"step": [3], "t_s": [2.2], "label": ["max_num_seqs 8→2"]})
    fig = drawn(latency.latency_over_time(req, "ttft_s", slo=0.5, marks=marks, window=2))
    points, p50, p95, mark_key = fig.data
    assert mark_key.name == style.MARK_NAME  # a legend entry for the drawn change mark
    assert len(points.x) == 5  # every request with a first token
    assert list(points.x) == sorted(points.x)
    assert list(p50.y) == pytest.approx([0.1, 0.15, 0.25, 0.35, 0.7])
    assert len(fig.layout.shapes) == 2  # SLO line + one policy mark
    assert "max_num_seqs 8→2" in [a.text for a in fig.layout.annotations]
    # a target above every point so far is still on the chart: the y-axis reaches it
    high = drawn(latency.latency_over_time(req, "ttft_s", slo=50.0))
    assert 50.0 in high.layout.yaxis.autorangeoptions.include and max(high.data[0].y) < 50
    fig = drawn(latency.latency_over_time(req, "tpot_s", slo=0.035))
    assert len(fig.data[0].x) == 4  # r2 has no TPOT
    assert max(fig.data[0].y) == pytest.approx(40)  # milliseconds
    assert fig.layout.yaxis.title.text == "TPOT (ms)"
    assert fig.layout.shapes[0].y0 == pytest.approx(35)
    fig.to_json()


# ------------------------------------------------------------------------- steps


def test_queue_over_time_and_downsampling_keeps_peaks():
    steps = make_steps(MEMBERS, waiting=[0, 1, 2, 3, 2, 1, 0])
    fig = drawn(queue_charts.queue_over_time(steps))
    assert [t.name for t in fig.data] == ["waiting", "running"]
    assert list(fig.data[0].y) == [0, 1, 2, 3, 2, 1, 0]
    n = 5 * style.MAX_POINTS
    long = make_steps([(("a", D, 1),)] * n, waiting=[0] * (n - 1) + [99])
    long.loc[1234, "waiting"] = 42
    fig = drawn(queue_charts.queue_over_time(long))
    assert len(fig.data[0].y) <= style.MAX_POINTS
    assert 42 in fig.data[0].y and 99 in fig.data[0].y


def test_throughput_over_time():
    steps = make_steps([(("a", D, 1), ("b", D, 1))] * 20)  # t_end 0.1 .. 2.0, 2 decode tokens each
    req = pd.DataFrame({
        "id": ["a", "b", "c"], "arrival_s": [0.0, 0.0, 0.0], "first_token_s": [0.05, 0.05, 1.5],
        "finish_s": [0.9, 1.5, 1.9], "ttft_s": [0.05, 0.05, 1.5], "tpot_s": [0.1, 0.1, 0.1],
        "output_tokens": [9, 15, 3], "status": ["finished"] * 3,
    })
    fig = drawn(queue_charts.throughput_over_time(steps, req, slo_ttft=1.0, bin_s=1.0))
    tokens, finished, goodput = fig.data
    assert len(fig.data) == 3
    # bins [0.05, 1.05) and [1.05, 2.05): steps ending in each x 2 tokens + first tokens
    assert list(tokens.y) == pytest.approx([10 * 2 + 2, 10 * 2 + 1])
    assert list(finished.y) == pytest.approx([1, 2])
    assert list(goodput.y) == pytest.approx([1, 1])  # c missed the TTFT SLO
    assert fig.layout.yaxis2.overlaying == "y"
    fig.to_json()


def test_kv_usage_marks_preemptions():
    steps = make_steps(MEMBERS, preempted=[0, 0, 1, 0, 2, 0, 0])
    fig = drawn(kv.kv_usage(steps))
    usage, preempt = fig.data
    assert list(usage.y) == pytest.approx([40, 40, 40, 60, 20, 0, 20])
    assert list(preempt.x) == pytest.approx([0.3, 0.5])
    assert list(preempt.customdata) == [1, 2]
    fig = drawn(kv.kv_usage(make_steps(MEMBERS)))  # no preempted column: no markers
    assert len(fig.data[1].x) == 0


# ------------------------------------------------------------------------- summaries


def test_cdf():
    req = make_requests()
    fig = drawn(latency.cdf(req, "ttft_s"))
    assert len(fig.data) == 1
    assert list(fig.data[0].x) == [0.1, 0.2, 0.3, 0.4, 1.0]
    assert list(fig.data[0].y) == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    fig = drawn(latency.cdf(req, "ttft_s", by="tenant", slo=0.5))
    assert [t.name for t in fig.data] == ["a (n=3)", "b (n=2)"]
    assert len(fig.layout.shapes) == 1
    big = pd.DataFrame({"ttft_s": np.linspace(0.1, 2, 100), "prompt_tokens": np.arange(100)})
    fig = drawn(latency.cdf(big, "ttft_s", by="prompt_tokens"))
    assert len(fig.data) == 4  # quantile buckets of a numeric column
    assert sum(int(t.name.split("n=")[1][:-1]) for t in fig.data) == 100


# ------------------------------------------------------------------------- empty input


EMPTY_STEPS = make_steps([])
EMPTY_REQUESTS = make_requests().iloc[0:0]


@pytest.mark.parametrize("build", [
    lambda s, r: drawn(membership.batch_membership(s, 4)),
    lambda s, r: drawn(membership.batch_membership(s, 4, window=10, upto_step=3)),
    lambda s, r: drawn(latency.request_timeline(r)),
    lambda s, r: drawn(latency.latency_over_time(r, "ttft_s", slo=1.0)),
    lambda s, r: drawn(latency.latency_over_time(r, "tpot_s")),
    lambda s, r: drawn(queue_charts.queue_over_time(s)),
    lambda s, r: drawn(queue_charts.throughput_over_time(s, r, 1.0, 0.1)),
    lambda s, r: drawn(kv.kv_usage(s)),
    lambda s, r: drawn(latency.cdf(r, "ttft_s", by="tenant")),
])
@pytest.mark.parametrize("tables", ["no columns", "no rows"])
def test_empty_input_gives_an_empty_valid_figure(build, tables):
    if tables == "no columns":
        assert_empty_figure(build(pd.DataFrame(), pd.DataFrame()))
    else:
        assert_empty_figure(build(EMPTY_STEPS, EMPTY_REQUESTS))


def test_requests_not_yet_measured_give_empty_figures():
    waiting = make_requests().iloc[5:7]  # rejected + running: no first token, no finish
    assert_empty_figure(drawn(latency.latency_over_time(waiting, "ttft_s")))
    assert_empty_figure(drawn(latency.cdf(waiting, "tpot_s")))


def test_empty_headline():
    h = frame_metrics.headline(pd.DataFrame(), pd.DataFrame(), 1.0, 0.1, 8)
    assert math.isnan(h["ttft_p50_s"]) and math.isnan(h["throughput_tok_s"])
    assert h["waiting_now"] == 0 and h["wasted_slot_steps"] == 0 and h["finished"] == 0
    h = frame_metrics.headline(EMPTY_REQUESTS, EMPTY_STEPS, 1.0, 0.1, 8)
    assert math.isnan(h["tpot_p95_s"]) and h["running_now"] == 0


# ------------------------------------------------------------------------- benchmark trace


def test_bench_trace_and_every_builder_run():
    steps, requests, marks = synthetic_trace(n_requests=40, n_steps=2000, max_slots=4)
    assert len(steps) == 2000 and len(requests) == 40
    assert (requests["status"] == "finished").all()
    assert membership.member_counts(steps).max() <= 4
    # decode tokens + first tokens = every output token, but for the tokens sampled at the end of
    # a recompute (lowering max_num_seqs preempts the requests over the limit): one per preemption at most
    made, decoded = requests["output_tokens"].sum(), steps["decode_tokens"].sum() + len(requests)
    assert decoded <= made <= decoded + requests["preemptions"].sum()
    assert (steps["running"] <= steps["max_num_seqs"]).all()
    for name, build in builders(steps, requests, marks, 4).items():
        out = build()
        if name == "headline":
            assert isinstance(out, dict) and out, name
            continue
        fig = drawn(out)
        assert fig.layout.title.text and fig.layout.title.subtitle.text, name
        assert fits_a_phone(fig.layout.title.text), (name, fig.layout.title.text)
        fig.to_json()


PHONE_TITLE_CHARS = 32     # a live chart's title (16 px) across a 390-px phone screen, beside the chart's margins


def fits_a_phone(title: str) -> bool:
    return all(len(re.sub(r"<[^>]+>", "", line)) <= PHONE_TITLE_CHARS for line in title.split("<br>"))


def test_the_phone_title_check_can_fail():
    # cut off on a phone as "Batch membership: who runs in each s…"
    assert not fits_a_phone("Batch membership: who runs in each step")
    assert fits_a_phone("Batch membership by step")


# ------------------------------------------------------------------------- readable without colour


def test_membership_hover_names_the_request_in_every_cell():
    heat = drawn(membership.batch_membership(make_steps(MEMBERS), 3)).data[0]
    text = np.asarray(heat.text).T   # steps x slots, like EXPECTED_IDS
    for row, ids in zip(text, EXPECTED_IDS):
        for cell, rid in zip(row, ids):
            assert cell.split()[0] == rid if rid else cell == "empty slot"


def test_membership_marks_prefill_cells_not_only_by_shade():
    fig = drawn(membership.batch_membership(make_steps(MEMBERS), 3))
    heat, on_light, on_dark = fig.data[:3]      # prefill marks in black ink, then in white
    assert on_light.marker.symbol == on_dark.marker.symbol == "line-ne"
    marked = {(int(x), int(y)) for t in (on_light, on_dark) for x, y in zip(t.x, t.y)}
    phases = np.array([[P if rid and cell.endswith(P) else "" for cell, rid in zip(row, ids)]
                       for row, ids in zip(np.asarray(heat.text).T, EXPECTED_IDS)])
    expected = {(step, slot) for step, slot in zip(*np.nonzero(phases == P))}
    assert marked == expected == {
        (0, 0), (0, 1), (2, 0), (3, 2), (6, 0)}
    # prefill and decode of one request share its colour: only the mark tells them apart
    z = np.asarray(heat.z)
    for trace, ink in ((on_light, "black"), (on_dark, "white")):   # the mark contrasts with its cell
        assert trace.marker.line.color == ink
        assert all(style.ink_on(style.REQUEST_COLORS[int(z[y, x]) - 1]) == ink for x, y in zip(trace.x, trace.y))
    assert z[1, 0] == z[1, 1] and z[2, 3] == z[2, 4]


def test_membership_colours_never_repeat_in_a_window_of_at_most_palette_size():
    # ids 0, 9, 18 ... all prefer hue 0 (id mod 9); 9 requests in the window need 9 hues
    n = len(style.REQUEST_COLORS)
    members = [tuple((f"r{9 * i}", D, 1) for i in range(n))] * 3
    z = np.asarray(drawn(membership.batch_membership(make_steps(members), n)).data[0].z)
    assert sorted(z[:, 0].tolist()) == list(range(1, n + 1))
    assert (z == z[:, :1]).all()    # each request keeps its colour
    # more requests than hues: those in the batch together still differ
    waves = [tuple((f"r{9 * (i + 4 * w)}", D, 1) for i in range(4)) for w in range(6)]
    z = np.asarray(drawn(membership.batch_membership(make_steps(waves), 4)).data[0].z)
    for step in z.T:
        assert len(set(step.tolist())) == len(step)


def test_membership_labels_long_stretches_only():
    steps = make_steps([(("long", D, 1), ("s", D, 1))] + [(("long", D, 1),)] * 29)
    black, white = drawn(membership.batch_membership(steps, 2, window=120)).data[3:5]
    labels = [*black.text, *white.text]
    assert labels == ["long"]                       # a 1-step stretch has no room for "s"
    assert [*black.x, *white.x][0] == pytest.approx(14.5)   # centred on its 30 cells


def test_membership_x_axis_spans_the_window_from_the_first_step():
    steps = make_steps([(("a", D, 1),)] * 150)
    ranges = {tuple(drawn(membership.batch_membership(steps.iloc[:k], 1, window=120)).layout.xaxis.range)
              for k in range(1, 121)}
    assert ranges == {(-0.5, 119.5)}
    later = drawn(membership.batch_membership(steps, 1, window=120)).layout.xaxis.range
    assert tuple(later) == (29.5, 149.5)


def test_membership_legend_lists_what_is_drawn():
    steps = make_steps([(("a", D, 1), ("b", D, 1))] * 4)       # no prefill, no empty slot
    names = [t.name for t in drawn(membership.batch_membership(steps, 2)).data if t.showlegend is not False]
    assert names == ["decode step (plain)"]
    marks = pd.DataFrame({"step": [2], "t_s": [0.3], "label": ["max_num_seqs 2→4"]})
    names = [t.name for t in drawn(membership.batch_membership(steps, 3, marks=marks)).data
             if t.showlegend is not False]
    assert names == ["decode step (plain)", "empty slot", style.MARK_NAME]


def test_change_marks_get_one_short_label_and_the_full_one_on_hover():
    steps = make_steps([(("a", D, 1),)] * 100)    # marks 2 of 100 steps apart: labels would touch
    marks = pd.DataFrame({"step": [1, 3], "t_s": [0.2, 0.4],
                          "label": ["max_num_seqs 8→2, order fcfs→sjf, rate 4.0→5.0",
                                    "max_num_batched_tokens 512→2048 +2 more"]})
    notes = drawn(membership.batch_membership(steps, 1, marks=marks)).layout.annotations
    assert notes[0].text == "3 changes"
    assert notes[1].text.startswith("max_num_batch") and notes[1].text.endswith("… +2 more")
    assert len(notes[1].text) <= style.MARK_LABEL_CHARS
    assert notes[0].hovertext == marks["label"][0]
    assert notes[1].yshift < notes[0].yshift == 0     # close marks step down a row
    marks["detail"] = ["a", "every change of the second mark"]
    notes = drawn(queue_charts.queue_over_time(steps, marks)).layout.annotations
    assert notes[1].hovertext == "every change of the second mark"


def _font_sizes(value, key=""):
    """Every font size set anywhere in a figure's JSON."""
    if isinstance(value, dict):
        if "font" in key and isinstance(value.get("size"), (int, float)):
            yield value["size"]
        for k, v in value.items():
            yield from _font_sizes(v, k)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _font_sizes(v, key)



def every_builder(presenter):
    steps = make_steps(MEMBERS, waiting=[0, 1, 2, 3, 2, 1, 0], preempted=[0, 1, 0, 0, 0, 0, 0])
    req = make_requests()
    marks = pd.DataFrame({"step": [3], "t_s": [0.35], "label": ["max_num_seqs 8→2, order fcfs→sjf"]})
    ghost = Tables(steps, req, marks)
    return [
        drawn(membership.batch_membership(steps, 3, marks=marks, presenter=presenter)),
        drawn(membership.batch_membership(EMPTY_STEPS, 3, presenter=presenter)),
        drawn(latency.request_timeline(req, presenter=presenter)),
        drawn(latency.latency_over_time(req, "ttft_s", 0.5, marks, presenter=presenter, ghost=ghost)),
        drawn(latency.cdf(req, "ttft_s", by="tenant", slo=0.5, presenter=presenter)),
        drawn(queue_charts.queue_over_time(steps, marks, presenter=presenter, ghost=ghost)),
        drawn(queue_charts.throughput_over_time(steps, req, 0.5, 0.1, marks, presenter=presenter, ghost=ghost)),
        drawn(kv.kv_usage(steps, marks, presenter=presenter)),
    ]


@pytest.mark.parametrize("presenter, least", [(False, 12), (True, 16)])
def test_every_chart_text_is_at_least_12_px_or_16_for_presenters(presenter, least):
    for fig in every_builder(presenter):
        js = fig.to_plotly_json()
        assert js["layout"]["font"]["size"] >= least      # what ticks and hover inherit
        sizes = list(_font_sizes(js))
        assert sizes and min(sizes) >= least, fig.layout.title.text


def test_time_charts_hold_a_given_x_range():
    assert style.live_x_range(3.0, 60.0) == (0.0, 60.0)
    assert style.live_x_range(100.0, 60.0) == (40.0, 100.0)
    steps, req = make_steps(MEMBERS), make_requests()
    for fig in [drawn(latency.latency_over_time(req, x_range=(0, 60))), drawn(queue_charts.queue_over_time(steps, x_range=(0, 60))),
                drawn(queue_charts.throughput_over_time(steps, req, x_range=(0, 60))), drawn(kv.kv_usage(steps, x_range=(0, 60))),
                drawn(latency.request_timeline(req, x_range=(0, 60)))]:
        assert tuple(fig.layout.xaxis.range) == (0, 60)


def test_ghost_run_is_a_faint_grey_named_trace_behind_the_others():
    steps, req = make_steps(MEMBERS, waiting=[0, 1, 2, 3, 2, 1, 0]), make_requests()
    earlier = Tables(steps.assign(waiting=steps["waiting"] * 2),
                     req.assign(ttft_s=req["ttft_s"] * 3, tpot_s=req["tpot_s"] * 3), pd.DataFrame())
    figs = {
        "ttft": drawn(latency.latency_over_time(req, "ttft_s", ghost=earlier)),
        "tpot": drawn(latency.latency_over_time(req, "tpot_s", ghost=earlier)),
        "queue": drawn(queue_charts.queue_over_time(steps, ghost=earlier)),
        "throughput": drawn(queue_charts.throughput_over_time(steps, req, ghost=earlier, ghost_name="pinned run")),
    }
    for name, fig in figs.items():
        first = fig.data[0]
        assert first.name.startswith("pinned run" if name == "throughput" else "previous run"), name
        assert first.line.color == style.GHOST_COLOR, name
        assert not any(t.line.color == style.GHOST_COLOR for t in fig.data[1:]
                       if hasattr(t, "line") and t.line), name
    assert list(figs["queue"].data[0].y) == [0, 2, 4, 6, 4, 2, 0]
    assert max(figs["ttft"].data[0].y) == pytest.approx(3 * max(figs["ttft"].data[3].y))
    # without a ghost: no such trace
    assert not any("previous run" in (t.name or "") for t in drawn(queue_charts.queue_over_time(steps)).data)


def test_the_batch_chart_draws_each_steps_own_slots():
    """After max_num_seqs 4 -> 2, the later steps' rows 2 and 3 are no slot at all (blank), not
    empty slots, while the earlier steps keep their four; a chart of steps all at 2 has two rows."""
    from engine.core.engine import StepRecord
    from engine.core.metrics import STEP_COLUMNS, step_row
    recs = [StepRecord(i, i, i + 1, 0, n, 0, n, 0, 8, tuple((f"r{j}", "decode", 1) for j in range(n)),
                       max_num_seqs=limit)
            for i, (n, limit) in enumerate([(3, 4)] * 3 + [(2, 2)] * 3)]
    steps = pd.DataFrame([step_row(r) for r in recs], columns=STEP_COLUMNS)
    heat = drawn(membership.batch_membership(steps, 2)).data[0]
    z = np.array(heat.z, dtype=float)                  # (slots, steps)
    assert z.shape == (4, 6)
    assert (z[3, :3] == 0).all() and np.isnan(z[2:, 3:]).all()      # empty then, no slot after
    later = drawn(membership.batch_membership(steps.iloc[3:], 4)).data[0]
    assert np.array(later.z, dtype=float).shape == (2, 3)


def test_a_chart_s_own_margins_leave_room_for_its_subtitle():
    """A chart may set its margins, but its top one never below what its title and subtitle lines
    take: the dynamic batching chart set t=80 and drew a three-line subtitle over its plot."""
    from analysis.style import layout, subtitle_chars
    own = dict(l=60, r=60, t=80, b=50)
    lo = layout("A title", "word " * 60, "x", "y", margin=own)
    assert lo["title"]["subtitle"]["text"].count("<br>") >= 2, "three lines or more"
    assert lo["margin"]["t"] == layout("A title", "word " * 60, "x", "y", wrap=subtitle_chars())["margin"]["t"] > 80
    assert (lo["margin"]["l"], lo["margin"]["r"], lo["margin"]["b"]) == (60, 60, 50), "the rest as the chart set it"
    short = layout("A title", "one line", "x", "y", margin=dict(t=120))
    assert short["margin"]["t"] == 120, "more room than needed stays"


def test_every_chart_wraps_its_subtitle_to_a_phone_s_line():
    """Subtitles ran off their charts where a page drew them side by side (the static-vs-continuous
    replay: "grey = empty s") or on a phone (the costs lab's KV chart, 581 px in a 358-px chart): every
    chart's subtitle is wrapped to subtitle_chars (a live chart rewraps it to its own width)."""
    from analysis import queue_charts
    from analysis.style import subtitle_chars
    steps = make_steps(MEMBERS)
    for fig in (drawn(membership.batch_membership(steps, 3)), drawn(queue_charts.queue_over_time(steps))):
        lines = fig.layout.title.subtitle.text.split("<br>")
        assert len(lines) >= 2 and max(map(len, lines)) <= subtitle_chars(), lines


def test_a_long_chart_title_is_wrapped_to_fit_a_phone():
    """Lab charts' titles ran off a 390-px phone's chart ("Waiting to fill a batch: TTFT, work rate and
    delivered rate", 397 px in a 358-px chart): a title longer than a phone's line takes two."""
    from analysis.style import layout, title_chars
    long = "Waiting to fill a batch: TTFT, work rate and delivered rate"
    lo, short = layout(long, "s", "x", "y"), layout("Batch membership by step", "s", "x", "y")
    lines = lo["title"]["text"].split("<br>")
    assert len(lines) == 2 and max(map(len, lines)) <= title_chars() and " ".join(lines) == long
    assert short["title"]["text"] == "Batch membership by step"
    assert lo["margin"]["t"] > short["margin"]["t"], "room for the second line"


def test_a_long_axis_title_is_wrapped_with_room_below_it():
    """The dynamic batching chart's x-axis title ('max_wait_ms (how long the oldest request may wait for
    the batch to fill)', 362 px) ran past a 358-px phone chart: an axis title longer than a subtitle's
    line takes two, and the bottom margin grows with it, even where a chart set its own."""
    from analysis.style import layout, subtitle_chars
    long = "max_wait_ms (how long the oldest request may wait for the batch to fill, in milliseconds)"
    lo, short = layout("t", "s", long, "y", margin=dict(b=50)), layout("t", "s", "max_wait_ms", "y")
    lines = lo["xaxis"]["title"]["text"].split("<br>")
    assert len(lines) == 2 and max(map(len, lines)) <= subtitle_chars() and " ".join(lines) == long
    assert short["xaxis"]["title"]["text"] == "max_wait_ms" and short["margin"]["b"] == 90
    assert lo["margin"]["b"] > short["margin"]["b"] and lo["height"] > short["height"]


def test_a_pause_between_bursts_is_a_gap_in_the_lines_over_time():
    """Two bursts 75 s apart: the queue's lines stop at the pause instead of joining the
    last value before it (0 waiting) to the first after it (8 waiting), which reads as a queue
    climbing while nothing happened. Steps 0.1 s apart are no gap."""
    from analysis import kv, queue_charts
    ends = [0.1, 0.2, 0.3, 75.3, 75.4]
    steps = make_steps([(("a", D, 1),)] * 5, t_start_s=[e - 0.1 for e in ends], t_end_s=ends,
                       waiting=[3, 1, 0, 8, 7])
    for fig, name in ((queue_charts.queue_over_time(steps), "waiting"), (queue_charts.queue_over_time(steps), "running")):
        line = next(t for t in fig["data"] if t["name"] == name)
        x, y = np.asarray(line["x"], float), np.asarray(line["y"], float)
        drawn = ~np.isnan(y[:-1]) & ~np.isnan(y[1:])                 # segments between two values
        assert (np.diff(x)[drawn] < 1.0).all(), (x, y)
        assert np.isnan(y).sum() == 1 and len(x) == 6
        go.Figure(fig)
    quiet = make_steps([(("a", D, 1),)] * 5)
    assert not np.isnan(np.asarray(queue_charts.queue_over_time(quiet)["data"][0]["y"], float)).any()


def test_load_x_range_fits_the_load_it_shows():
    """A 10 s load read 0-120 s on the Any engine page: the axis now ends at the load's last event once
    nothing streams, follows now while requests stream, and keeps the latest span at most."""
    assert style.load_x_range(now_s=60.0, last_s=10.0, busy=False, span_s=120.0) == (0.0, 10.5)
    assert style.load_x_range(now_s=8.0, last_s=7.0, busy=True, span_s=120.0) == (0.0, 8.0)
    assert style.load_x_range(now_s=1.0, last_s=None, busy=False, span_s=120.0) == (0.0, 5.0)   # never narrower
    assert style.load_x_range(now_s=300.0, last_s=290.0, busy=True, span_s=120.0) == (180.0, 300.0)


def test_itl_over_time_is_one_point_per_gap_and_gauges_chart_what_the_page_published():
    gaps = pd.DataFrame({"id": ["#1", "#1", "#2"], "token_s": [0.3, 0.35, 0.5], "itl_s": [0.05, 0.05, 0.2]})
    fig = drawn(latency.latency_over_time(gaps, "itl_s", window=2))
    points, p50, p95 = fig.data
    assert list(points.x) == [0.3, 0.35, 0.5] and list(points.y) == pytest.approx([50, 50, 200])
    assert list(points.text) == ["#1", "#1", "#2"] and fig.layout.yaxis.title.text == "ITL (ms)"
    readings = pd.DataFrame({"t": [0.0, 1.0, 2.0], "running": [1, 4, 2], "waiting": [0, 3, 0]})
    fig = drawn(latency.gauges_over_time(readings, "llama.cpp (llama-server)", x_range=(0, 5)))
    assert [d.name for d in fig.data] == ["running", "waiting"] and list(fig.data[1].y) == [0, 3, 0]
    assert "llama.cpp (llama-server)" in fig.layout.title.subtitle.text and tuple(fig.layout.xaxis.range) == (0, 5)
    # The title is short enough for a half-width chart (it was cut off at 1280 px)
    assert "<br>" not in fig.layout.title.text and len(fig.layout.title.text) <= style.title_chars()
    # A gauge the engine does not publish is not drawn as a line of zeros
    only = readings.assign(waiting=float("nan"))
    assert [d.name for d in drawn(latency.gauges_over_time(only, "TGI")).data] == ["running"]
    assert_empty_figure(drawn(latency.gauges_over_time(readings.iloc[:0], "vLLM")))
