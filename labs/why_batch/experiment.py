"""Why batch: decode step time and tokens/s against batch size, measured on the real model
(each size timed in REPEATS separate passes), the knee (labs.knee_rule) and a straight-line
model of the step time."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.style import (
    COLORS,
    MODEL_COLOR,
    empty_figure,
    is_empty,
    layout,
    room_above,
    vline,
)
from engine.core.config import SchedulerPolicy
from course import claims
from engine.runs.results import cache_path
from engine.runs.workload import WorkloadSpec
from engine.sim.step_times import measure_batch_scaling
from labs import knee_rule
from labs.part import Part
from labs.repeats import REPEATS, error_bars, spread
from labs.runs import cached, estimate, fingerprint

BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64]
CLAIM_BATCH = 8   # the claim compares a step of this many sequences with a step of one
CONTEXT = 128     # tokens each sequence holds before the timed steps
STEPS = 4         # timed decode steps per batch size, in each pass


def batch_scaling(model, batch_sizes=BATCH_SIZES, context: int = CONTEXT, steps: int = STEPS,
                  repeats: int = REPEATS, progress=None, refresh: bool = False,
                  peek: bool = False) -> tuple[list[dict], bool] | None:
    """measure_batch_scaling `repeats` times, cached per machine and settings: (rows, was_cached);
    each row carries the pass it came from in "repeat"."""
    sizes = sorted(set(int(b) for b in batch_sizes))
    path = cache_path("scaling", fingerprint(model), sizes, context, steps, repeats)

    def measure(m):
        rows = []
        for k in range(repeats):
            sub = progress and (lambda f, text, k=k: progress((k + f) / repeats, f"pass {k + 1}/{repeats}: {text}"))
            rows += [{**r, "repeat": k} for r in measure_batch_scaling(m, sizes, context, steps, sub)]
        return rows
    return cached(path, model, measure, refresh, peek)


def predicted_scaling(step_model, batch_sizes=BATCH_SIZES, context: int = CONTEXT) -> list[dict]:
    """The step model's decode step for each batch size, as one pass of batch_scaling's rows:
    what the simulator charges for these steps, at once."""
    rows = []
    for b in sorted(set(int(x) for x in batch_sizes)):
        ms = step_model.decode_ms(b, context)
        rows.append({"batch": b, "step_ms": ms, "tokens_per_s": b * 1000 / ms, "ms_per_token": ms / b, "repeat": 0})
    return rows


def estimate_s(model, sizes, context: int = CONTEXT, steps: int = STEPS, repeats: int = REPEATS):
    """(seconds, this machine's step model) the measurement takes (labs.runs.estimate)."""
    return estimate(model, [scaling_job(b, context, steps) for b in sizes] * repeats)


def scaling_job(batch: int, context: int, steps: int):
    """Timing one batch size (engine.sim.step_times.measure_batch_scaling) as a run the simulator can
    time: `batch` prompts of `context` tokens prefilled in one step, then `steps` decode steps."""
    tokens = batch * (context + steps + 1)
    policy = SchedulerPolicy(max_num_seqs=batch, max_num_batched_tokens=max(batch * context, 16),
                             kv_capacity_tokens=max(tokens, 16))
    spec = WorkloadSpec(num_requests=batch, rate=0, prompt_kind="fixed", prompt_lo=context, prompt_hi=context,
                        output_kind="fixed", output_lo=steps + 1, output_hi=steps + 1)
    return policy, [Part(spec)]


def scaling_table(rows: list[dict]) -> pd.DataFrame:
    """One row per batch size: the mean over the passes (with each column's _lo / _hi range),
    and the throughput gain per doubling of the batch from each size to the next."""
    raw = pd.DataFrame(rows)
    df = spread(raw, "batch", ["step_ms", "tokens_per_s", "ms_per_token"])
    tps, b = df["tokens_per_s"].to_numpy(float), df["batch"].to_numpy(float)
    gain = np.full(len(df), np.nan)
    for i in range(len(df) - 1):
        doublings = math.log2(b[i + 1] / b[i])
        gain[i] = (tps[i + 1] / tps[i]) ** (1 / doublings)
    df["gain_per_doubling"] = gain
    return df


def gains_shown(gains: pd.Series) -> pd.Series:
    """The gain-per-doubling column as the table shows it: "×1.71", and "—" for the largest batch
    (there is no next size to gain towards; a blank number showed as "None")."""
    return gains.map(lambda g: f"×{g:.2f}" if g == g else "—")


def knee(rows: list[dict]) -> int | None:
    """The knee of tokens/s against batch size, by the labs' one rule (labs.knee_rule)."""
    df = scaling_table(rows)
    k = knee_rule.knee(df["batch"].tolist(), df["tokens_per_s"].tolist())
    return None if k is None else int(k)


def knee_words(table: pd.DataFrame, knee_batch: int, fit: dict, shown_as: str) -> str:
    """The knee's sentence, from the numbers shown: what the batches past the knee added, or, where the
    knee is the largest batch tried, that tokens/s was still climbing where the sweep stopped (with the
    straight-line fit's ceiling, where it lies above the best point)."""
    tps = table.set_index("batch")["tokens_per_s"]
    best, best_batch, largest = float(tps.max()), int(tps.idxmax()), int(tps.index.max())
    if knee_batch < largest:
        share = tps[knee_batch] / best
        return (f"**The knee:** batch **{knee_batch}** already makes {share:.0%} of the best tokens/s {shown_as} "
                f"here ({best:,.0f}, at batch {best_batch}); the larger batches tried add the last {1 - share:.0%}.")
    words = (f"**The knee** is the largest batch tried, **{knee_batch}** ({best:,.0f} tokens/s {shown_as}): every "
             f"smaller batch made less than {knee_rule.KNEE_SHARE:.0%} of that, so tokens/s was still climbing "
             "where the sweep stopped, and the rule can only name a knee among the sizes tried.")
    ceiling = fit.get("ceiling_tok_s", math.nan)
    if math.isfinite(ceiling) and ceiling > best:
        words += (f" The straight-line fit below puts the ceiling near {ceiling:,.0f} tokens/s, "
                  f"{ceiling / best - 1:.0%} above it: add larger batch sizes to find the knee.")
    return words


def fit_words(fit: dict, shown_as: str) -> str:
    """The straight-line fit in words, each number shown with the digits the arithmetic beside it
    needs: the slope with as many significant digits (three or more) as make 1000 / slope, worked
    out by hand, the ceiling it names (1000 / 1.76 is 568, not the 569 of a slope of 1.7575)."""
    if not fit["c_ms"] > 0:
        return (f"The step times {shown_as} here do not rise with the batch, so a straight line through them has "
                "no positive slope: measure again, or add larger batch sizes.")
    ceiling = round(fit["ceiling_tok_s"])
    for digits in range(3, 10):
        c = f"{fit['c_ms']:.{digits}g}"
        if round(1000 / float(c)) == ceiling:
            break
    return (f"A straight line through the {shown_as} step times (a model fitted to them) gives "
            f"t(B) ≈ {fit['t0_ms']:.1f} ms + {c} ms × B: the fixed part is shared, the slope is paid per sequence. "
            f"Throughput B / t(B) then tends to 1000 / {c} ≈ {fit['ceiling_tok_s']:,.0f} tokens/s and reaches "
            f"half of that near B = t0 / c ≈ {fit['half_batch']:,.0f}.")


NOISE_FLOOR = 0.35   # the two steps the claim compares may stray from the step model by this much more than each other


def model_check(table: pd.DataFrame, step_model, context: int = CONTEXT) -> str | None:
    """The run against this machine's step model (engine/core/step_fit: the profile refit on the app's own
    steps): how far each of the claim's two steps ran from the model's prediction. If one strayed far more
    than the other (beyond NOISE_FLOOR or three times the model's current error), the machine's load
    changed between them and the ratio is not the engine's: why, in words; else None."""
    at = table.set_index("batch")["step_ms"]
    off = {b: at[b] / step_model.decode_ms(b, context) for b in (1, CLAIM_BATCH)}
    error = getattr(step_model, "error", None) or 0.0
    allowed = max(NOISE_FLOOR, 3 * error)
    if max(off.values()) / min(off.values()) - 1 <= allowed:
        return None
    return (f"Against this machine's step model, batch 1 ran at ×{off[1]:.2f} of its prediction and batch "
            f"{CLAIM_BATCH} at ×{off[CLAIM_BATCH]:.2f}: they disagree by more than {allowed:.0%} (the model's "
            "current error allows for less), so the machine's load changed between them. Measure again.")


def amortization_verdict(table: pd.DataFrame, step_model=None, context: int = CONTEXT) -> claims.Verdict:
    """The claim `batching_amortizes`: tokens/s of a step of CLAIM_BATCH sequences against a step of one.
    Undecided where the passes disagree with each other, or (given this machine's `step_model`) the run
    strays from the model's prediction unevenly."""
    have = set(table["batch"].astype(int))
    if not {1, CLAIM_BATCH} <= have:
        return claims.judge("batching_amortizes", math.nan, "", "",
                            f"the claim compares batch {CLAIM_BATCH} with batch 1, and this sweep lacks "
                            f"{' and '.join(str(b) for b in (1, CLAIM_BATCH) if b not in have)}.")
    one = table[table["batch"] == 1].iloc[0]
    many = table[table["batch"] == CLAIM_BATCH].iloc[0]
    gain = many.tokens_per_s / one.tokens_per_s
    numbers = (f"A step of {CLAIM_BATCH} sequences took {many.step_ms:.1f} ms against {one.step_ms:.1f} ms for one: "
               f"×{many.step_ms / one.step_ms:.2f} the time for ×{CLAIM_BATCH} the tokens, so tokens/s grew "
               f"×{gain:.2f}.")
    if "runs" in table and (table["runs"] > 1).all() and "step_ms_hi" in table:
        spread_share = float(((table["step_ms_hi"] - table["step_ms_lo"]) / table["step_ms"]).max())
        if spread_share > 0.5:
            return claims.judge("batching_amortizes", gain, "", "", f"{numbers} But the passes disagree by up to "
                                f"{spread_share:.0%} of a step: the machine was too busy for one reading; measure again.")
    strayed = model_check(table, step_model, context) if step_model is not None else None
    if strayed:
        return claims.judge("batching_amortizes", gain, "", "", f"{numbers} {strayed}")
    return claims.judge("batching_amortizes", gain,
                        numbers + " The weights are read once per step and shared by every sequence in it.",
                        numbers + " Here the work each sequence brings on its own (attention over its context, "
                        "its own rows through every layer) outweighs what the step shares.")


def linear_fit(rows: list[dict]) -> dict:
    """Least-squares fit step_ms = t0 + c * batch: a model drawn from the measurements.

    Its throughput ceiling is 1000 / c tokens/s and it reaches half of it at batch t0 / c.
    """
    df = pd.DataFrame(rows)
    if len(df) < 2:
        return {"t0_ms": math.nan, "c_ms": math.nan, "ceiling_tok_s": math.nan, "half_batch": math.nan}
    c, t0 = np.polyfit(df["batch"].to_numpy(float), df["step_ms"].to_numpy(float), 1)
    if abs(c) < 1e-9 * max(abs(t0), 1.0):        # flat step times leave a slope of rounding error
        c = 0.0
    return {"t0_ms": float(t0), "c_ms": float(c),
            "ceiling_tok_s": 1000 / c if c > 0 else math.inf,
            "half_batch": t0 / c if c > 0 else math.inf}


# ----------------------------------------------------------------------------- figures

FIGURE_TEXTS = {   # figure: (title, what good looks like, x axis, y axis)
    "amortization": ("Amortization: one decode step shared by the whole batch",
                     "Good: tokens/s climbs steeply while ms per token falls. From the knee (dashed) on, the "
                     f"batch already gives {knee_rule.KNEE_SHARE:.0%} of the best tokens/s.",
                     "batch size (sequences in one decode step)", "tokens / s"),
    "step_time": ("Decode step time against batch size",
                  "Good (for batching): a flat start, where extra sequences ride almost free. "
                  "The slope is the per-sequence cost that eventually caps throughput.",
                  "batch size", "step time (ms)"),
}


def amortization(table: pd.DataFrame, knee_batch: int | None = None, fit: dict | None = None,
                 source: str = "measured") -> go.Figure:
    """Tokens/s (left axis) and ms per token (right axis) against batch size, the knee marked.
    `source`: "measured", or "predicted" (the step model's)."""
    title, good, *axes = FIGURE_TEXTS["amortization"]
    if source == "measured":          # a prediction has no passes, so no bars
        good += " Bars: the lowest and highest of the passes."
    texts = (title, good, *axes)
    if is_empty(table, "batch", "tokens_per_s", "ms_per_token"):
        return go.Figure(empty_figure(*texts))
    b = table["batch"].to_numpy(float)
    traces = [
        go.Scatter(name=f"tokens/s ({source}{', mean' if source == 'measured' else ''})", x=b, y=table["tokens_per_s"], mode="lines+markers",
                   line=dict(color=COLORS["tokens"], width=2.5), error_y=error_bars(table, "tokens_per_s"),
                   hovertemplate="batch %{x}: %{y:.0f} tokens/s<extra></extra>"),
        go.Scatter(name=f"ms per token ({source})", x=b, y=table["ms_per_token"], mode="lines+markers",
                   yaxis="y2", line=dict(color=COLORS["p95"], width=2),
                   hovertemplate="batch %{x}: %{y:.2f} ms per token<extra></extra>"),
    ]
    if fit and np.isfinite(fit.get("c_ms", math.nan)) and fit["c_ms"] > 0:
        xs = np.geomspace(b.min(), b.max(), 60)
        traces.append(go.Scatter(
            name=f"model: linear fit t = {fit['t0_ms']:.1f} + {fit['c_ms']:.2f}·B ms",
            x=xs, y=1000 * xs / (fit["t0_ms"] + fit["c_ms"] * xs), mode="lines",
            line=dict(color=MODEL_COLOR, width=1.5, dash="dot"),
            hovertemplate="model, batch %{x:.0f}: %{y:.0f} tokens/s<extra></extra>"))
    # On a log axis plotly reads an annotation's x, and the axis range, in log10 units, while a shape's x
    # stays in data units: a label placed at x = 32 stood at 10^32 and stretched the axis to it.
    marks = []
    if knee_batch is not None:
        line, label = vline(knee_batch, f"knee: batch {knee_batch}<br>≥ {knee_rule.KNEE_SHARE:.0%} of the best")
        # the label stays inside the plot, on a phone too: two short lines, on the side with more room
        right_half = math.log(knee_batch / b.min()) > 0.5 * math.log(b.max() / b.min())
        side = "right" if right_half else "left"
        marks = [(line, {**label, "x": math.log10(knee_batch), "xanchor": side})]
    pad = 0.08 * max(math.log10(b.max() / b.min()), 1.0)
    # room above both axes' points for the knee's label along the top: the best tokens/s is often at
    # the knee, and batch 1's ms per token at the far left
    tops = {axis: max(float(np.nanmax(t.y)) for t in traces if (t.yaxis or "y") == axis) for axis in ("y", "y2")}
    if "tokens_per_s_hi" in table:
        tops["y"] = max(tops["y"], float(table["tokens_per_s_hi"].max()))
    return go.Figure(data=traces, layout=layout(
        *texts, xaxis=dict(type="log", tickvals=b, ticktext=[f"{int(v)}" for v in b],
                           range=[math.log10(b.min()) - pad, math.log10(b.max()) + pad]),
        yaxis=room_above(tops["y"]),
        yaxis2=dict(title=dict(text="ms per token"), overlaying="y", side="right", **room_above(tops["y2"]),
                    tickmode="auto", showgrid=False),     # its own round ticks, not the left axis's lines
        margin=dict(l=60, r=60, t=80, b=50), shapes=[s for s, _ in marks], annotations=[n for _, n in marks]))


def step_time(table: pd.DataFrame, fit: dict | None = None, source: str = "measured") -> go.Figure:
    """Decode step time against batch size (`source`: "measured" or "predicted"), with the
    straight-line fit drawn as a model."""
    texts = FIGURE_TEXTS["step_time"]
    if is_empty(table, "batch", "step_ms"):
        return go.Figure(empty_figure(*texts))
    b = table["batch"].to_numpy(float)
    traces = [go.Scatter(name=f"{source}{' (mean)' if source == 'measured' else ''}", x=b, y=table["step_ms"], mode="lines+markers",
                         line=dict(color=COLORS["running"], width=2.5), error_y=error_bars(table, "step_ms"),
                         hovertemplate="batch %{x}: %{y:.1f} ms a step<extra></extra>")]
    if fit and np.isfinite(fit.get("c_ms", math.nan)):
        traces.append(go.Scatter(name=f"model: {fit['t0_ms']:.1f} + {fit['c_ms']:.2f}·B ms", x=b,
                                 y=fit["t0_ms"] + fit["c_ms"] * b, mode="lines",
                                 line=dict(color=MODEL_COLOR, width=1.5, dash="dot")))
    return go.Figure(data=traces, layout=layout(*texts, yaxis=dict(rangemode="tozero")))
