"""Lab: why batch. Decode step time and tokens/s against batch size, measured on the real model."""
import streamlit as st

from labs.why_batch import experiment as lab
from ui import widgets

st.title("Why batch")
st.caption("One decode step reads every weight of the model once, however many sequences ride in it. "
           "Here the real engine times decode steps at growing batch sizes on this machine.")

with st.sidebar:
    widgets.choice(st.multiselect, "Batch sizes", [1, 2, 4, 8, 16, 32, 64, 128], lab.BATCH_SIZES, key="wb_sizes",
                   help="How many sequences share one decode step. Each size is measured separately.")
    widgets.slider("Context length (tokens)", 16, 512, lab.CONTEXT, step=16, key="wb_context",
                   help="How many tokens each sequence already holds before the timed steps. Longer "
                        "contexts make attention, the part that is not shared, more expensive.")
    widgets.slider("Timed decode steps per size", 2, 16, lab.STEPS, key="wb_steps",
                   help="Each sequence decodes this many tokens; the page shows the median step time.")
widgets.write_link(["wb_sizes", "wb_context", "wb_steps"])

sizes = sorted(st.session_state.wb_sizes) or [1]
settings = (sizes, st.session_state.wb_context, st.session_state.wb_steps)
got = widgets.stored_or_measure("why_batch", settings, lambda m, **kw: lab.batch_scaling(m, *settings, **kw),
                                "Measure step times", "about 45 s up to batch 128", "Timing decode steps…")

rows, _ = got
table = lab.scaling_table(rows)
bend = lab.bend(rows)
fit = lab.linear_fit(rows)
first, last = table.iloc[0], table.iloc[-1]

c = st.columns(4)
c[0].metric(f"tokens/s at batch {int(first.batch)}", widgets.fmt(first.tokens_per_s, digits=0))
c[1].metric(f"tokens/s at batch {int(last.batch)}", widgets.fmt(last.tokens_per_s, digits=0),
            delta=f"×{last.tokens_per_s / first.tokens_per_s:.1f}")
c[2].metric(f"step time, batch {int(first.batch)} → {int(last.batch)}",
            f"{first.step_ms:.0f} → {last.step_ms:.0f} ms", delta=f"×{last.step_ms / first.step_ms:.1f}",
            delta_color="inverse")
c[3].metric("the bend", f"batch {bend}" if bend else "not reached",
            help="The first batch size from which doubling the batch gains less than 20% throughput.")

widgets.plot(lab.amortization(table, bend, fit))
if bend:
    st.markdown(f"**Where it bends:** from batch **{bend}**, doubling the batch adds less than 20% "
                f"throughput on this machine. Below it every doubling nearly doubles tokens/s.")
else:
    st.markdown("**No bend yet:** every measured doubling still adds at least 20% throughput; add larger "
                "batch sizes to find it.")
widgets.plot(lab.step_time(table, fit))
if fit["c_ms"] > 0:
    st.markdown(
        f"A straight line through the measured step times (a model fitted to them) gives "
        f"t(B) ≈ {fit['t0_ms']:.1f} ms + {fit['c_ms']:.2f} ms × B: the fixed part is shared, the slope is paid per "
        f"sequence. Throughput B / t(B) then tends to 1000 / {fit['c_ms']:.2f} ≈ {widgets.fmt(fit['ceiling_tok_s'], digits=0)} "
        f"tokens/s and reaches half of that near B = t0 / c ≈ {widgets.fmt(fit['half_batch'], digits=0)}.")
else:
    st.markdown("The step times measured here do not rise with the batch, so a straight line through them has no "
                "positive slope: measure again, or add larger batch sizes.")
show = table.rename(columns={"batch": "batch size", "step_ms": "step (ms)", "tokens_per_s": "tokens/s",
                             "ms_per_token": "ms per token", "gain_per_doubling": "gain per doubling"})
widgets.table(show.round(2))
widgets.definitions("Each batch size: `batch` sequences of `context` tokens are prefilled (not timed), then "
                    "every sequence decodes one token per step; the step time is the median of the timed "
                    "steps. tokens/s = batch / step time; ms per token = step time / batch. "
                    "Gain per doubling = throughput at the next size / throughput here, per doubling of the batch.",
                    with_metrics=False)
