"""The lessons' pictures drawn from the course's worked examples (course/examples.py): the same runs
whose numbers the lesson text quotes. No Streamlit. PICTURES here lists every lesson picture,
these and course/pictures.py's.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from course import examples as course, examples_serving as course_serving
from course.pictures import PICTURES as RUN_PICTURES, Picture, step_model_words as _on
from course.pictures_budget import PICTURES as BUDGET_PICTURES
from course.pictures_cluster import PICTURES as CLUSTER_PICTURES
from course.pictures_operator import ON_STEP_MODEL as OPERATOR_ON_STEP_MODEL, PICTURES as OPERATOR_PICTURES
from analysis.style import COLORS, REQUEST_COLORS
from engine.core.step_model import StepModel
from engine.sim.roofline import roofline_profile

ROOFLINE = "a100-80gb:llama-3.1-8b"
ROOF_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024)
ROOF_CONTEXT = 128


def weights_per_step(name: str = ROOFLINE, context: int = ROOF_CONTEXT) -> Picture:
    """A decode step on a roofline model: weight bytes read once per step, shared by every sequence in it;
    the step's time against batch size, and where the arithmetic overtakes the weight read."""
    m = roofline_profile(name)
    parts = [m.breakdown([(context, 1, True)] * b) for b in ROOF_BATCHES]
    weight_mb = m.weight_bytes / 1e6
    kv_mb = m.kv_bytes_per_token * (context + 1) / 1e6
    cross = next(b for b, p in zip(ROOF_BATCHES, parts) if p["gemm_compute_ms"] > p["gemm_memory_ms"])
    # stacked, not side by side: both stay readable on a phone
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.16,
                        subplot_titles=["bytes read per generated token", "one step's time"])
    xs = list(ROOF_BATCHES)
    fig.add_trace(go.Scatter(name="weights, read once per step: their share per token", x=xs,
                             y=[weight_mb / b for b in xs], mode="lines+markers",
                             line=dict(color=COLORS["prefill"], width=3)), row=1, col=1)
    fig.add_trace(go.Scatter(name="each sequence's own KV cache (not shared)", x=xs, y=[kv_mb] * len(xs),
                             mode="lines", line=dict(color=COLORS["kv"], width=3)), row=1, col=1)
    fig.add_trace(go.Scatter(name="step time", x=xs, y=[p["step_ms"] for p in parts], mode="lines+markers",
                             line=dict(color="#333", width=3)), row=2, col=1)
    fig.add_trace(go.Scatter(name="weight read alone (memory roof)", x=xs, y=[p["gemm_memory_ms"] for p in parts],
                             mode="lines", line=dict(color=COLORS["prefill"], dash="dash")), row=2, col=1)
    fig.add_trace(go.Scatter(name="matrix arithmetic alone (compute roof)", x=xs,
                             y=[p["gemm_compute_ms"] for p in parts], mode="lines",
                             line=dict(color=COLORS["bad"], dash="dot")), row=2, col=1)
    top = max(p["step_ms"] for p in parts)
    # on a log axis a shape takes data positions and an annotation log10 ones
    edge = math.sqrt(cross * ROOF_BATCHES[ROOF_BATCHES.index(cross) - 1])
    fig.add_vrect(x0=1, x1=edge, fillcolor="#9cbdf0", opacity=0.15, line_width=0, row=2, col=1)
    fig.add_vrect(x0=edge, x1=ROOF_BATCHES[-1], fillcolor="#f4a582", opacity=0.15, line_width=0, row=2, col=1)
    last = math.log10(ROOF_BATCHES[-1])
    for text, x in (("memory-bound", math.log10(edge) / 2), ("compute-bound", (math.log10(edge) + last) / 2)):
        fig.add_annotation(x=x, y=top * 1.05, text=text, showarrow=False, row=2, col=1)
    fig.update_layout(height=680, margin=dict(l=60, r=20, t=60, b=40), legend=dict(orientation="h", y=-0.15))
    fig.update_yaxes(title_text="MB read per generated token", type="log", row=1, col=1)
    fig.update_xaxes(title_text="sequences in the step (B)", type="log", row=1, col=1)
    fig.update_xaxes(title_text="sequences in the step (B)", type="log", row=2, col=1)
    fig.update_yaxes(title_text="ms", range=[0, top * 1.12], row=2, col=1)
    first, last = parts[0], parts[-1]
    alt = (f"Above: bytes a decode step reads for each token it generates, for {m.model.name} on the roofline model "
           f"of an {m.device.name} ({m.device.dtype}), at {context} tokens of context. The weights, "
           f"{weight_mb / 1000:.1f} GB, are read once per step however many sequences share it, so their share per "
           f"token falls from {weight_mb / 1000:.1f} GB at one sequence to {weight_mb / ROOF_BATCHES[-1]:.0f} MB at "
           f"{ROOF_BATCHES[-1]}; each sequence's own KV cache, {kv_mb:.0f} MB, is not shared. Below: the step's time "
           f"stays near the time to read the weights, {first['gemm_memory_ms']:.1f} ms, from one sequence "
           f"({first['step_ms']:.1f} ms a step) until the matrix arithmetic takes longer than the read, between "
           f"{ROOF_BATCHES[ROOF_BATCHES.index(cross) - 1]} and {cross} sequences: memory-bound before, "
           f"compute-bound after, where every added sequence adds its own arithmetic time "
           f"({last['step_ms']:.0f} ms a step at {ROOF_BATCHES[-1]}).")
    return Picture(fig, alt, f"One decode step on the roofline model of an {m.device.name} running {m.model.name} "
                             "(spec-sheet figures, a model): the weight read is paid once per step, so a fuller "
                             "step is nearly free until arithmetic takes over.")


def queue_growth(step_model: StepModel = course.COURSE_MODEL) -> Picture:
    """The waiting queue over time, the same workload at a moderate and a high share of capacity, with step
    times from `step_model` (the learner's own on the lesson page)."""
    mu = course.capacity(cost=step_model)
    fig = go.Figure()
    words = []
    for load, color in zip(course.LOADS, (COLORS["running"], COLORS["waiting"])):
        rows, moments, rate = course.at_load(load, cost=step_model)
        mean_w = sum(r["e2e_s"] for r in rows) / len(rows)
        mean_q = sum(r["queue_s"] for r in rows) / len(rows)
        fig.add_trace(go.Scatter(name=f"ρ = {load:.0%} ({rate:.2f} req/s): mean wait {mean_q:.2f} s",
                                 x=[m.t_end_s for m in moments], y=[len(m.waiting) for m in moments],
                                 mode="lines", line=dict(color=color, shape="hv")))
        words.append(f"at {load:.0%} of capacity ({rate:.2f} requests/s) the queue reaches "
                     f"{max(len(m.waiting) for m in moments)} at most, a request waits {mean_q:.2f} s for a slot "
                     f"and spends {mean_w:.1f} s in the system on average")
    fig.update_layout(height=360, margin=dict(l=60, r=20, t=70, b=40), legend=dict(orientation="h", y=-0.25),
                      title=dict(text=f"Waiting requests over time<br>capacity μ = {mu:.2f} requests/s"),
                      xaxis=dict(title=dict(text="seconds (simulated)")),
                      yaxis=dict(title=dict(text="waiting requests"), rangemode="tozero"))
    alt = (f"Two runs of the same {course.QUEUE_SPEC.num_requests} requests through the engine's scheduler on the "
           f"step model {step_model.label!r}, with {course.QUEUE_SLOTS} batch slots and a capacity of {mu:.2f} "
           f"requests/s, arriving at random: " + "; ".join(words) + ". The busier run's queue builds in bigger "
           "waves and drains more slowly: little slack is left to empty it.")
    return Picture(fig, alt, "The queue at a moderate and at a high utilization: the same requests, arriving at "
                             f"random, simulated on {_on(step_model)}.")


def knee_curve() -> Picture:
    """Throughput against p95 TPOT for each max_num_seqs, the knee starred, the TPOT target as a line."""
    rows = course.knee_sweep()
    k = next(r for r in rows if r["knee"])
    best = max(r["tok_s"] for r in rows)
    fig = go.Figure(go.Scatter(name="one max_num_seqs", x=[r["tpot_p95_ms"] for r in rows],
                               y=[r["tok_s"] for r in rows], mode="lines+markers+text",
                               text=[str(r["max_num_seqs"]) for r in rows], textposition="bottom right",
                               line=dict(color=COLORS["tokens"])))
    fig.add_trace(go.Scatter(name=f"the knee: {k['max_num_seqs']}", x=[k["tpot_p95_ms"]], y=[k["tok_s"]],
                             mode="markers", marker=dict(symbol="star", size=18, color=COLORS["p95"])))
    fig.add_vline(x=course.KNEE_TPOT_SLO_MS, line_dash="dot", annotation_text=f"TPOT target {course.KNEE_TPOT_SLO_MS} ms")
    fig.update_layout(height=400, margin=dict(l=60, r=20, t=95, b=40), legend=dict(orientation="h", y=-0.25),
                      title=dict(text="Throughput against p95 TPOT<br>"
                                      f"{course.knee_gpu_name().replace(' on an ', ', ')}<br>"
                                      "(roofline, simulated) per max_num_seqs"),
                      xaxis=dict(title=dict(text="p95 TPOT (ms)"), rangemode="tozero"),
                      yaxis=dict(title=dict(text="output tokens per second"), rangemode="tozero"))
    after = rows[rows.index(k) + 1] if rows.index(k) + 1 < len(rows) else k
    alt = (f"One point per max_num_seqs ({', '.join(str(r['max_num_seqs']) for r in rows)}), the same "
           f"{rows[0]['requests']} requests on the roofline model of {course.knee_gpu_name()}: throughput rises "
           f"from {rows[0]['tok_s']:.0f} to {best:.0f} tokens/s while p95 TPOT grows from "
           f"{rows[0]['tpot_p95_ms']:.0f} to {rows[-1]['tpot_p95_ms']:.0f} ms. The knee, the smallest setting within "
           f"90% of the best, is {k['max_num_seqs']} ({k['tok_s']:.0f} tokens/s at {k['tpot_p95_ms']:.0f} ms); "
           f"doubling it to {after['max_num_seqs']} adds {after['tok_s'] / k['tok_s'] - 1:.0%} throughput and "
           f"takes p95 TPOT to {after['tpot_p95_ms']:.0f} ms. The dotted line is a TPOT target of "
           f"{course.KNEE_TPOT_SLO_MS} ms.")
    return Picture(fig, alt, "The knee of a max_num_seqs sweep (simulated on a GPU's roofline model): past the star, "
                             "more slots buy little throughput and cost every stream time.")


def tail_split(step_model: StepModel = course.COURSE_MODEL) -> Picture:
    """One TTFT distribution, then the same requests split by prompt length, with step times from `step_model`."""
    rows = course_serving.tail_run(course_serving.TAIL_SHORT.prompt_hi, step_model)
    s = course_serving.tail_stats(rows)
    groups = [("all requests", rows, "#333"),
              (f"prompts ≤ {course_serving.LONG_PROMPT} tokens", [r for r in rows if r["prompt_tokens"] <= course_serving.LONG_PROMPT],
               COLORS["p50"]),
              (f"prompts > {course_serving.LONG_PROMPT} tokens", [r for r in rows if r["prompt_tokens"] > course_serving.LONG_PROMPT],
               COLORS["p95"])]
    fig = go.Figure()
    for name, rs, color in groups:
        v = sorted(r["ttft_s"] for r in rs)
        fig.add_trace(go.Scatter(name=f"{name} ({len(v)})", x=v, y=[(i + 1) / len(v) for i in range(len(v))],
                                 mode="lines", line=dict(color=color, shape="hv", width=3 if name == "all requests" else 2)))
    for q, dash in ((50, "dash"), (99, "dot")):
        fig.add_vline(x=s[f"p{q}"], line_dash=dash, line_color="#333", annotation_text=f"p{q} {s[f'p{q}']:.2f} s")
    fig.update_layout(height=360, margin=dict(l=60, r=20, t=50, b=40), legend=dict(orientation="h", y=-0.25),
                      title=dict(text="TTFT: share of requests at or under each time"),
                      xaxis=dict(title=dict(text="TTFT (s)")), yaxis=dict(title=dict(text="share of requests"),
                                                                          range=[0, 1.02]))
    alt = (f"Cumulative TTFT of {s['n']} requests on the step model {step_model.label!r}, {s['n_long']} of them with "
           f"prompts over {course_serving.LONG_PROMPT} tokens. Over all of them p50 is {s['p50']:.2f} s and p99 "
           f"{s['p99']:.2f} s. Split by prompt length, the long prompts' median alone is {s['long_p50']:.2f} s, "
           f"while the short prompts' median is {s['short_p50']:.2f} s and their p99 {s['short_p99']:.2f} s: "
           "short requests that arrived behind a long prefill waited for it.")
    return Picture(fig, alt, "One tail, split: the overall p99 belongs to the long prompts and to the short "
                             "requests queued behind them.")


def starvation(step_model: StepModel = course.COURSE_MODEL) -> Picture:
    """The age of the oldest waiting request, step by step, under fcfs and sjf on the same requests, with step
    times from `step_model`."""
    fig = go.Figure()
    words = []
    for order, color in (("fcfs", COLORS["running"]), ("sjf", COLORS["waiting"])):
        times, ages, longest = course_serving.oldest_wait(order, step_model)
        fig.add_trace(go.Scatter(name=order, x=times, y=ages, mode="lines", line=dict(color=color)))
        words.append(f"under {order} the oldest waiting request reaches {max(ages):.1f} s (the longest wait: a "
                     f"{longest['prompt_tokens']}-token prompt, {longest['queue_s']:.1f} s)")
    fig.update_layout(height=340, margin=dict(l=60, r=20, t=50, b=40), legend=dict(orientation="h", y=-0.25),
                      title=dict(text="How long the oldest waiting request has waited"),
                      xaxis=dict(title=dict(text="seconds (simulated)")),
                      yaxis=dict(title=dict(text="age of the oldest waiting request (s)"), rangemode="tozero"))
    oldest = {order: max(course_serving.oldest_wait(order, step_model)[1]) for order in ("fcfs", "sjf")}
    verdict = ("shortest-job-first keeps passing over the long prompts while short ones keep arriving, and their "
               f"wait climbs to {oldest['sjf'] / oldest['fcfs']:.1f} times first-come, first-served's longest"
               if oldest["sjf"] > oldest["fcfs"] else
               "here shortest-job-first's oldest wait stays no longer than first-come, first-served's: at this speed "
               "the short newcomers left the long prompts enough gaps")
    alt = (f"The same {course_serving.STARVE_SPEC.num_requests} requests, most with short prompts and a few long ones, "
           f"arriving at {100 * course_serving.STARVE_LOAD:.0f}% of what the engine serves on {_on(step_model)}, under "
           "two orders: " + "; ".join(words) + ". " + verdict[0].upper() + verdict[1:] + ".")
    return Picture(fig, alt, "Starvation below capacity: the same requests under first-come, first-served and under "
                             f"shortest-job-first, simulated on {_on(step_model)}.")


def two_schedulers(step_model: StepModel = course.COURSE_MODEL) -> Picture:
    """Who decides what: the cluster scheduler places pods on nodes, a gateway routes each request to a
    replica, each replica's engine batches its own steps, an autoscaler reads the waiting queue; beside it,
    the replicas' waiting queues from a simulated run through a gateway, with step times from `step_model`."""
    g = course_serving.gateway_run(step_model)
    fig = make_subplots(rows=2, cols=1, row_heights=[0.5, 0.5], vertical_spacing=0.1,
                        subplot_titles=["who decides what", "waiting requests per replica (simulated)"])
    # four deciders (gateway, each engine, autoscaler, cluster scheduler); the ReplicaSet only carries out
    # the autoscaler's count
    boxes = {"gateway": (0.5, 6.1, "#d9ead3", "decides which replica<br>gets each request"),
             "replica 0": (0.0, 4.4, "#cfe2f3", "its engine decides<br>every step's batch"),
             "replica 1": (1.0, 4.4, "#cfe2f3", "its engine decides<br>every step's batch"),
             "autoscaler": (0.0, 2.3, "#f4cccc", "decides how many<br>replicas (waiting)"),
             "ReplicaSet": (1.0, 2.3, "#eeeeee", "the Deployment's;<br>creates pods only"),
             "cluster scheduler": (1.0, 0.6, "#f2e6c9", "decides which node<br>runs each new pod")}
    for name, (x, y, color, what) in boxes.items():
        fig.add_shape(type="rect", x0=x - 0.47, x1=x + 0.47, y0=y - 0.55, y1=y + 0.55, fillcolor=color,
                      line=dict(color="#777"), layer="below", row=1, col=1)
        fig.add_annotation(x=x, y=y, text=f"<b>{name}</b><br>{what}", showarrow=False, font=dict(size=11),
                           row=1, col=1)
    arrows = [((0.5, 7.05), (0.5, 6.65), "requests in"), ((0.1, 4.95), (0.35, 5.55), ""),
              ((0.9, 4.95), (0.65, 5.55), ""), ((0.0, 2.85), (0.0, 3.85), "waiting"),
              ((0.53, 2.3), (0.47, 2.3), ""), ((1.0, 1.15), (1.0, 1.75), "new pod")]
    for (x1, y1), (x0, y0), label in arrows:
        head, tail = ((x0, y0), (x1, y1)) if label == "requests in" else ((x1, y1), (x0, y0))
        fig.add_annotation(x=head[0], y=head[1], ax=tail[0], ay=tail[1], xref="x", yref="y", axref="x",
                           ayref="y", arrowhead=2, arrowwidth=1.5, showarrow=True, text="")
        if label:
            fig.add_annotation(x=(x0 + x1) / 2 + 0.12, y=(y0 + y1) / 2, text=label, showarrow=False,
                               xanchor="left", font=dict(size=10, color="#555"), row=1, col=1)
    fig.update_xaxes(visible=False, range=[-0.55, 1.55], row=1, col=1)
    fig.update_yaxes(visible=False, range=[-0.1, 7.2], row=1, col=1)
    per = {}
    for t, k, w, _ in g["samples"]:
        per.setdefault(k, ([], []))
        per[k][0].append(t)
        per[k][1].append(w)
    for k, (ts, ws) in sorted(per.items()):
        fig.add_trace(go.Scatter(name=f"replica {k} waiting", x=ts, y=ws, mode="lines",
                                 line=dict(color=REQUEST_COLORS[k], shape="hv", width=1)), row=2, col=1)
    total, latest = [], {}
    for t, k, w, _ in g["samples"]:
        latest[k] = w
        total.append((t, sum(latest.values())))
    fig.add_trace(go.Scatter(name="waiting, both replicas (what the autoscaler reads)", x=[t for t, _ in total],
                             y=[w for _, w in total], mode="lines", line=dict(color="#333", shape="hv", width=2)),
                  row=2, col=1)
    fig.add_hline(y=course_serving.WAITING_ALARM, line_dash="dot", line_color=COLORS["bad"], row=2, col=1,
                  annotation_text=f"threshold {course_serving.WAITING_ALARM}", annotation_position="top left")
    fig.add_vline(x=course_serving.RAMP_AT_S, line_dash="dash", row=2, col=1, annotation_text="traffic steps up")
    if g["alarm_s"] is not None:
        fig.add_vline(x=g["alarm_s"], line_dash="dot", line_color=COLORS["bad"], row=2, col=1,
                      annotation_text="autoscaler asks", annotation_position="bottom right")
    fig.update_xaxes(title_text="seconds (simulated)", row=2, col=1)
    fig.update_yaxes(title_text="waiting", rangemode="tozero", row=2, col=1)
    fig.update_layout(height=820, margin=dict(l=20, r=20, t=60, b=40), legend=dict(orientation="h", y=-0.1))
    before, after = g["rates"]
    asks = (f"Their summed waiting count stays at or above {course_serving.WAITING_ALARM} for {course_serving.ALARM_FOR_S:.0f} s from "
            f"about {g['alarm_s'] - course_serving.ALARM_FOR_S:.0f} s, so an autoscaler watching it asks for a third replica "
            f"at {g['alarm_s']:.0f} s." if g["alarm_s"] is not None else
            f"Their summed waiting count never stays at {course_serving.WAITING_ALARM} or more for "
            f"{course_serving.ALARM_FOR_S:.0f} s, so an autoscaler watching it asks for nothing.")
    alt = ("Above, four deciders: a gateway decides which replica gets each arriving request; inside each replica "
           "the engine's own scheduler decides at every step which sequences run; an autoscaler reads the replicas' "
           "waiting counts and decides how many replicas there should be; the Deployment's ReplicaSet creates pods "
           "to match that count, deciding nothing itself; the cluster scheduler decides which node runs each new "
           "pod, once, and never sees a request. Below: two replicas of "
           f"{course.QUEUE_SLOTS} slots on {_on(step_model)}, each serving {g['mu']:.2f} requests/s, behind a gateway that sends each "
           f"request to the replica holding fewer ({g['routed'][0]} and {g['routed'][1]} requests). Traffic is "
           f"{before:.2f} requests/s until {course_serving.RAMP_AT_S:.0f} s, then {after:.2f}: the waiting queues, near "
           "zero before, start to climb. " + asks)
    return Picture(fig, alt, "Four deciders at four time scales: how many replicas now and then, which node once "
                             "per pod, which replica once per request, which sequences every step; the waiting "
                             "queue is what tells the autoscaler to add one.")


# The pictures drawn on the step model they are given (the learner's own, on the lesson page); the others
# are the same for everyone
ON_STEP_MODEL = ("queue_growth", "starvation", "two_schedulers", "tail_split", *OPERATOR_ON_STEP_MODEL)
PICTURES = {**RUN_PICTURES, **CLUSTER_PICTURES, **BUDGET_PICTURES, **OPERATOR_PICTURES, "weights_per_step": weights_per_step, "queue_growth": queue_growth,
            "knee_curve": knee_curve, "tail_split": tail_split, "starvation": starvation,
            "two_schedulers": two_schedulers}
