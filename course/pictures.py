"""The lessons' pictures, drawn from the engine's own runs. No Streamlit.

Each picture runs a few requests through the real scheduler on the cost model (build_engine with
no model: step times predicted, a virtual clock, so it takes a blink), records what the engine
holds after every step, and draws it. A picture is a plotly figure with its alt text (what it
shows, in words, with the numbers of this run) and a caption.
"""
from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.style import COLORS, REQUEST_COLORS, ink_on
from course.examples import COURSE_MODEL, Moment, lifecycle_run, run, token_times
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.runs.workload import WorkloadSpec

PHASE_COLORS = {"waiting": "#c7c7c7", "prefill": COLORS["prefill"], "decode": COLORS["decode"]}
PICTURE_SPEC = WorkloadSpec(num_requests=6, rate=0, prompt_kind="uniform", prompt_lo=16, prompt_hi=48,
                            output_kind="uniform", output_lo=2, output_hi=20, seed=2)
SLOTS = 3


@dataclass(frozen=True)
class Picture:
    figure: go.Figure
    alt: str          # the picture in words, for a screen reader or a text-only reader
    caption: str


def step_model_words(step_model) -> str:
    """A step model in words, for a caption: the course's recorded one, or the one the page was given."""
    return ("the course's recorded step model (this engine in fp32 on a two-core CPU)" if step_model == COURSE_MODEL
            else f"this machine's step model ({step_model.label})")


def run_recorded(policy: SchedulerPolicy, spec: WorkloadSpec = PICTURE_SPEC,
                 config: EngineConfig | None = None) -> tuple[list[dict], list[Moment]]:
    """Run `spec` under `policy` on the engine's hand-set cost model: (request rows, a Moment after every step)."""
    return run(policy, spec, config)


def _lanes(rows: list[dict], moments: list[Moment]) -> dict[str, list]:
    """Horizontal bar pieces per phase: {phase: [(request id, start s, length s)]}, waiting included."""
    lanes = {"waiting": [], "prefill": [], "decode": []}
    for r in rows:
        if r["first_scheduled_s"] is not None and r["first_scheduled_s"] > r["arrival_s"]:
            lanes["waiting"].append((r["id"], r["arrival_s"], r["first_scheduled_s"] - r["arrival_s"]))
    for m in moments:
        for rid, phase, _ in m.members:
            lanes[phase].append((rid, m.t_start_s, m.t_end_s - m.t_start_s))
    return lanes


def _bars(lanes: dict[str, list], show_legend: bool) -> list[go.Bar]:
    names = {"waiting": "waiting in the queue", "prefill": "prefill (the prompt)", "decode": "decode (one token)"}
    patterns = {"waiting": "/", "prefill": "", "decode": "."}   # shape as well as colour
    return [go.Bar(name=names[phase], orientation="h", y=[p[0] for p in pieces], x=[p[2] for p in pieces],
                   base=[p[1] for p in pieces], marker=dict(color=PHASE_COLORS[phase], pattern_shape=patterns[phase],
                                                            line=dict(width=0.5, color="white")),
                   legendgroup=phase, showlegend=show_legend,
                   hovertemplate="%{y}: " + phase + " %{base:.2f}–%{x:.2f} s<extra></extra>")
            for phase, pieces in lanes.items() if pieces]


def static_vs_continuous(spec: WorkloadSpec = PICTURE_SPEC, slots: int = SLOTS) -> Picture:
    """The same requests under static and continuous batching, one lane per request."""
    runs = {mode: run_recorded(SchedulerPolicy(mode=mode, max_num_seqs=slots), spec)
            for mode in ("static", "continuous")}
    ends = {mode: max(r["finish_s"] for r in rows) for mode, (rows, _) in runs.items()}
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.16,
                        subplot_titles=[f"static: the batch ends together<br>last request done at {ends['static']:.2f} s",
                                        f"continuous: a free slot is refilled<br>at the next step; last done at "
                                        f"{ends['continuous']:.2f} s"])
    order = [r["id"] for r in sorted(runs["static"][0], key=lambda r: r["id"])][::-1]
    for i, (rows, moments) in enumerate(runs.values()):
        for bar in _bars(_lanes(rows, moments), show_legend=i == 0):
            fig.add_trace(bar, row=i + 1, col=1)
        fig.update_yaxes(categoryorder="array", categoryarray=order, title_text="request", row=i + 1, col=1)
    fig.update_layout(barmode="overlay", height=520, margin=dict(l=60, r=20, t=80, b=80),
                      legend=dict(orientation="h", y=-0.18))
    fig.update_xaxes(title_text="time (s, cost model)", row=2, col=1)
    n = len(runs["static"][0])
    alt = (f"Two timelines of the same {n} requests, all arriving at once, with {slots} batch slots. Each request "
           f"is a row: hatched grey while it waits, dark while its prompt is prefilled, light while it decodes. "
           f"Static batching runs {slots} requests until the longest of them is done, so short ones leave "
           f"empty slots and the rest wait; the last request finishes at {ends['static']:.2f} s. Continuous "
           f"batching starts a waiting request as soon as any slot frees; the last finishes at "
           f"{ends['continuous']:.2f} s.")
    return Picture(fig, alt, "The same requests, static (top) and continuous (bottom). Grey: waiting; dark: "
                             "prefill; light: decode. Simulated: time from the engine's hand-set cost model, no machine's.")


def request_lifecycle() -> Picture:
    """One request's life: queue, prefill, decode tokens; TTFT, TPOT, ITL and E2E marked. The
    request shown (lesson 4's worked example) is one that queued and whose token gaps vary the most."""
    rows, moments, row = lifecycle_run()
    rid, t0 = row["id"], row["arrival_s"]
    tokens = token_times(row, moments)
    start, first, end = row["first_scheduled_s"] - t0, row["first_token_s"] - t0, row["finish_s"] - t0
    gaps = [b - a for a, b in zip(tokens, tokens[1:])]
    k = max(range(len(gaps)), key=gaps.__getitem__)
    slow = next(m for m in moments if abs(m.t_end_s - t0 - tokens[k + 1]) < 1e-9)
    others = [x for x, p, _ in slow.members if x != rid and p == "prefill"]
    why = (f"the step that ended it also prefilled {', '.join(others)}" if others
           else f"that step carried {len(slow.members)} sequences")
    fig = go.Figure()
    for name, x0, x1, color in (("queue (waiting)", 0, start, PHASE_COLORS["waiting"]),
                                ("prefill", start, first, PHASE_COLORS["prefill"]),
                                ("decode", first, end, PHASE_COLORS["decode"])):
        fig.add_trace(go.Bar(name=name, orientation="h", y=["request"], x=[x1 - x0], base=[x0], width=0.35,
                             marker_color=color, hovertemplate=f"{name}: %{{base:.2f}}–%{{x:.2f}} s<extra></extra>"))
    fig.add_trace(go.Scatter(name="a token arrives", x=tokens, y=["request"] * len(tokens), mode="markers",
                             marker=dict(symbol="triangle-down", size=12, color="#333"),
                             hovertemplate="token at %{x:.2f} s<extra></extra>"))
    spans = [("TTFT", 0, first, 1.0), ("E2E", 0, end, 1.6),
             (f"ITL (longest gap, {gaps[k] * 1000:.0f} ms)", tokens[k], tokens[k + 1], -0.9)]
    for label, x0, x1, y in spans:
        fig.add_annotation(x=x1, y=y, ax=x0, ay=y, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                           arrowhead=2, arrowside="end+start", text="")
        fig.add_annotation(x=(x0 + x1) / 2, y=y + 0.25, text=label, showarrow=False)
    fig.update_layout(barmode="overlay", height=320, margin=dict(l=70, r=20, t=40, b=40),
                      xaxis=dict(title=dict(text="seconds since the request arrived (simulated)"), rangemode="tozero"),
                      yaxis=dict(range=[-1.4, 2.1], showticklabels=False), legend=dict(orientation="h", y=-0.3),
                      title=dict(text=f"TPOT = (E2E − TTFT) / (tokens − 1) = {row['tpot_s'] * 1000:.0f} ms"))
    alt = (f"One request's life, {row['prompt_tokens']} prompt tokens and {row['output_tokens']} output tokens. "
           f"It waits in the queue for {start:.2f} s, its prompt is prefilled until the first token at "
           f"{first:.2f} s (TTFT), then one token arrives per decode step until {end:.2f} s (E2E). The gaps "
           f"between tokens (ITL) are not all equal: the longest is {gaps[k] * 1000:.0f} ms, because {why}. TPOT, their average, is {row['tpot_s'] * 1000:.0f} ms.")
    return Picture(fig, alt, "One request from arrival to last token: TTFT includes the queue; TPOT averages "
                             "the gaps that ITL lists one by one.")


KV_SPEC = WorkloadSpec(num_requests=3, rate=0, prompt_kind="fixed", prompt_lo=24, prompt_hi=24,
                       output_kind="fixed", output_lo=40, output_hi=40)
KV_TOKENS = 128        # 8 blocks of 16: too few for three requests of 64 tokens each


def kv_preemption(spec: WorkloadSpec = KV_SPEC, kv_tokens: int = KV_TOKENS) -> Picture:
    """The KV block table just before and just after a preemption."""
    policy = SchedulerPolicy(max_num_seqs=spec.num_requests, kv_capacity_tokens=kv_tokens)
    _, moments = run_recorded(policy, spec, EngineConfig(kv_pool_tokens=kv_tokens))
    at = next((i for i, m in enumerate(moments) if m.preempted), None)
    if at is None:
        raise ValueError(f"kv_tokens={kv_tokens} holds these requests without a preemption: nothing to draw")
    before, after = moments[at - 1], moments[at]
    blocks = kv_tokens // EngineConfig().block_size
    victim = next(rid for rid in before.running if rid not in after.running and rid in after.waiting)
    colors = {rid: REQUEST_COLORS[i % len(REQUEST_COLORS)] for i, rid in enumerate(sorted(before.running))}
    fig = go.Figure()
    # blocks are rectangles in data units, not fixed-size markers, so they fit a phone's width too
    for y, (label, m) in enumerate((("after", after), ("before", before))):
        owner = {b: rid for rid, table in m.running.items() for b in table}
        for b in range(blocks):
            rid = owner.get(b)
            fig.add_shape(type="rect", x0=b - 0.45, x1=b + 0.45, y0=y - 0.3, y1=y + 0.3, layer="below",
                          fillcolor=colors[rid] if rid else "white", line=dict(color="#999" if not rid else "white"))
        for rid in sorted(colors):
            xs = [b for b in range(blocks) if owner.get(b) == rid]
            fig.add_trace(go.Scatter(name=rid, x=xs, y=[y] * len(xs), text=[rid] * len(xs), mode="text+markers",
                                     marker=dict(symbol="square", size=12, color=colors[rid], opacity=0),
                                     legendgroup=rid, showlegend=False, textfont=dict(color=ink_on(colors[rid]), size=10),
                                     hovertemplate=f"block %{{x}}: {rid} ({label})<extra></extra>"))
        free = [b for b in range(blocks) if b not in owner]
        fig.add_trace(go.Scatter(name="free block", x=free, y=[y] * len(free), mode="markers", legendgroup="free",
                                 marker=dict(symbol="square-open", size=1, color="#999", opacity=0), showlegend=False,
                                 hovertemplate="block %{x}: free<extra></extra>"))
    for rid in sorted(colors):          # the legend's swatches
        fig.add_trace(go.Scatter(name=rid, x=[None], y=[None], mode="markers", legendgroup=rid,
                                 marker=dict(symbol="square", size=14, color=colors[rid])))
    fig.add_trace(go.Scatter(name="free block", x=[None], y=[None], mode="markers", legendgroup="free",
                             marker=dict(symbol="square-open", size=14, color="#999")))
    fig.update_layout(height=330, margin=dict(l=90, r=20, t=60, b=70), legend=dict(orientation="h", y=-0.45),
                      title=dict(text=f"KV cache of {blocks} blocks: step {before.step} → step {after.step}, "
                                      f"{victim} preempted"),
                      xaxis=dict(title=dict(text="KV block"), dtick=1, range=[-0.7, blocks - 0.3]),
                      yaxis=dict(tickvals=[0, 1], ticktext=[f"after<br>step {after.step}", f"after<br>step {before.step}"],
                                 range=[-0.7, 1.7]))
    used = sum(len(t) for t in before.running.values())
    alt = (f"A KV cache of {blocks} blocks of {EngineConfig().block_size} tokens shared by {len(before.running)} "
           f"running requests. After step {before.step} they hold {used} of the {blocks} blocks: "
           + "; ".join(f"{rid} holds blocks {sorted(t)}" for rid, t in sorted(before.running.items()))
           + f". Every request grows by a token a step; at step {after.step} they need more new blocks than the "
           f"{blocks - used} still free, so {victim}, the newest, is preempted: its blocks are freed for the "
           "others, and it goes back to the waiting queue, to prefill again later over its prompt and every "
           "token it had generated.")
    return Picture(fig, alt, "Preemption in the block table: when no block is free, the newest request gives "
                             "all of its blocks back and must later recompute its prompt and the tokens it had generated.")


PICTURES = {"static_vs_continuous": static_vs_continuous, "request_lifecycle": request_lifecycle,
            "kv_preemption": kv_preemption}
