"""Lesson 12's picture: one long prompt arriving into running streams, under a small and a large token
budget, on the course's recorded step model (course/examples.py), so it is the same on every machine.
The gaps between one stream's tokens show where each budget puts the long prompt's cost."""
from __future__ import annotations

import functools

import plotly.graph_objects as go

from course.examples import COURSE_MODEL
from course.pictures import Picture
from analysis.style import COLORS
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.request import Request
from engine.sim.simulate import SimProfile, simulate

STREAMS = 4              # requests already decoding when the long prompt arrives
STREAM_PROMPT, STREAM_OUTPUT = 32, 80
LONG_PROMPT, LONG_OUTPUT = 896, 8
LONG_ARRIVES_S = 1.0
BUDGETS = (128, 1024)    # a small budget, and one that holds the whole long prompt


def _requests() -> list[Request]:
    streams = [Request(id=f"stream-{k}", prompt_token_ids=[1] * STREAM_PROMPT, max_new_tokens=STREAM_OUTPUT,
                       arrival_s=0.0) for k in range(STREAMS)]
    return [*streams, Request(id="long", prompt_token_ids=[2] * LONG_PROMPT, max_new_tokens=LONG_OUTPUT,
                              arrival_s=LONG_ARRIVES_S)]


@functools.lru_cache(maxsize=4)
def budget_run(budget: int) -> dict:
    """One budget's run: the first stream's token times, the long prompt's arrival and first token, and the
    steps that carried a piece of it."""
    policy = SchedulerPolicy(max_num_seqs=STREAMS + 1, max_num_batched_tokens=budget)
    engine = simulate(EngineConfig(), policy, SimProfile("course", "course", COURSE_MODEL), _requests())
    stream, long = engine.requests["stream-0"], engine.requests["long"]
    chunks = [s for s in engine.steps if any(rid == "long" and phase == "prefill" for rid, phase, _ in s.members)]
    times = list(stream.token_times)
    gaps = [b - a for a, b in zip(times, times[1:])]
    return {"times": times[1:], "gaps": gaps, "ttft": long.first_token_s - long.arrival_s,
            "first_token_s": long.first_token_s, "chunks": len(chunks), "longest_gap": max(gaps),
            "usual_gap": sorted(gaps)[len(gaps) // 2]}


def budget_gaps() -> Picture:
    """The gaps between one stream's tokens over time, under each budget, with the long prompt's first token."""
    fig = go.Figure()
    words = []
    for budget, color in zip(BUDGETS, (COLORS["running"], COLORS["p95"])):
        r = budget_run(budget)
        fig.add_trace(go.Scatter(name=f"budget {budget:,} tokens", x=r["times"], y=[g * 1000 for g in r["gaps"]],
                                 mode="lines+markers", line=dict(color=color, shape="hv"), marker=dict(size=4)))
        fig.add_vline(x=r["first_token_s"], line_dash="dot", line_color=color,
                      annotation_text=f"its first token, budget {budget:,}", annotation_textangle=-90,
                      annotation_position="top left")
        words.append(f"with a budget of {budget:,} the long prompt took {r['chunks']} "
                     f"step{'s' if r['chunks'] != 1 else ''} and its first token came {r['ttft']:.1f} s after it "
                     f"arrived, while the stream's longest gap was {r['longest_gap'] * 1000:,.0f} ms (its usual gap "
                     f"{r['usual_gap'] * 1000:,.0f} ms)")
    fig.add_vline(x=LONG_ARRIVES_S, line_color="#333", annotation_text="long prompt arrives",
                  annotation_position="top right")
    fig.update_layout(height=360, margin=dict(l=60, r=20, t=50, b=40), legend=dict(orientation="h", y=-0.25),
                      title=dict(text="One stream's gaps while a long prompt prefills"),
                      xaxis=dict(title=dict(text="seconds (simulated)")),
                      yaxis=dict(title=dict(text="gap before this token (ms)"), rangemode="tozero"))
    alt = (f"{STREAMS} streams decode on the course's recorded step model when a prompt of {LONG_PROMPT} tokens "
           f"arrives at {LONG_ARRIVES_S:g} s. " + "; ".join(words).capitalize() + ".")
    return Picture(fig, alt, "The budget decides where a long prompt's cost lands: in the newcomer's wait for its "
                             "first token, or in the running streams' gaps.")


PICTURES = {"budget_gaps": budget_gaps}
