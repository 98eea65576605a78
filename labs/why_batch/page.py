"""Lab: why batch. Decode step time and tokens/s against batch size: this machine's step model at
once, then measured on the real model, with the step model's prediction kept beside it."""
import streamlit as st

from labs import knee_rule
from labs.why_batch import experiment as lab
from ui import calculators, predict, session, widgets

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
                   help="Each sequence decodes this many tokens in each pass; a pass keeps the median step time.")
    widgets.slider("Passes (repeats)", 1, 5, lab.REPEATS, key="wb_repeats",
                   help="How many times every batch size is timed. The charts show the mean and, as error "
                        "bars, the lowest and highest pass: how noisy this machine is right now.")
widgets.write_link(["wb_sizes", "wb_context", "wb_steps", "wb_repeats"])

sizes = sorted(st.session_state.wb_sizes) or [1]
settings = (sizes, st.session_state.wb_context, st.session_state.wb_steps, st.session_state.wb_repeats)
question = predict.Question(
    "why_batch", f"Batch {sizes[0]} makes some number of tokens per second. How many times that will batch "
    f"{sizes[-1]} make?", lo=0.1, hi=10000.0, default=1.0, unit="×",
    help=f"{sizes[-1] // sizes[0]}× as many sequences share each step. If the step took no longer, the answer "
         f"would be {sizes[-1] // sizes[0]}×; if it took {sizes[-1] // sizes[0]}× as long, 1×.")
guess = predict.gate(question)
step_model, profiled = calculators.machine_step_model()
predicted = lab.predicted_scaling(step_model, sizes, settings[1])
got = widgets.stored_or_measure("why_batch", settings, lambda m, **kw: lab.batch_scaling(m, *settings, **kw),
                                "Measure step times", lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), *settings)),
                                "Timing decode steps…", stop=False)
widgets.simulated_first_caption(step_model, profiled, "Measure step times", got is not None,
                                "every step time, chart and number",
                                "the table keeps the step model's prediction beside each measured step")
measured = got is not None
rows = got[0] if measured else predicted
table = lab.scaling_table(rows)
knee = lab.knee(rows)
fit = lab.linear_fit(rows)
first, last = table.iloc[0], table.iloc[-1]
ratio = last.tokens_per_s / first.tokens_per_s
more = int(last.batch / first.batch)
because = (f"{more}× the sequences made each step {last.step_ms / first.step_ms:.1f}× as long, so tokens/s "
           f"grew {ratio:.1f}×. One step reads every weight once however many sequences ride in it: "
           f"that part is shared. What grows with the batch (attention over each sequence's own context, "
           f"the output layer for each token) is paid per sequence, and it caps the gain.")
if measured:
    predict.record("why_batch", **{f"step_ms_{int(r.batch)}": f"{r.step_ms:.1f} ms" for r in table.itertuples()})
    predict.reveal(question, guess, ratio, because, measured_text=f"×{ratio:.1f}")
else:
    widgets.simulated_answer(f"×{guess:g}", f"this machine's step model predicts **×{ratio:.1f}**", because)

c = st.columns(4)
c[0].metric(f"tokens/s at batch {int(first.batch)}", widgets.fmt(first.tokens_per_s, digits=0))
c[1].metric(f"tokens/s at batch {int(last.batch)}", widgets.fmt(last.tokens_per_s, digits=0),
            delta=f"×{ratio:.1f}")
c[2].metric(f"step time, batch {int(first.batch)} → {int(last.batch)}",
            f"{first.step_ms:.0f} → {last.step_ms:.0f} ms", delta=f"×{last.step_ms / first.step_ms:.1f}",
            delta_color="inverse")
c[3].metric("the knee", f"batch {knee}" if knee else "—", help=knee_rule.RULE[0].upper() + knee_rule.RULE[1:] + ".")

source = "measured" if measured else "predicted"
widgets.plot(lab.amortization(table, knee, fit, source))
if knee:
    st.markdown(f"**The knee:** batch **{knee}** already makes {knee_rule.KNEE_SHARE:.0%} of the best tokens/s "
                f"{source} here ({widgets.fmt(table.tokens_per_s.max(), digits=0)}); larger batches add at most "
                f"the last {1 - knee_rule.KNEE_SHARE:.0%}. "
                + (f"Each point is the mean of {int(table.runs.min())} passes; the bars span the lowest and "
                   "highest pass." if measured else "Each point is the step model's prediction."))
else:
    st.markdown("**No knee:** measure at least two batch sizes.")
widgets.plot(lab.step_time(table, fit, source))
if fit["c_ms"] > 0:
    st.markdown(
        f"A straight line through the {source} step times (a model fitted to them) gives "
        f"t(B) ≈ {fit['t0_ms']:.1f} ms + {fit['c_ms']:.2f} ms × B: the fixed part is shared, the slope is paid per "
        f"sequence. Throughput B / t(B) then tends to 1000 / {fit['c_ms']:.2f} ≈ {widgets.fmt(fit['ceiling_tok_s'], digits=0)} "
        f"tokens/s and reaches half of that near B = t0 / c ≈ {widgets.fmt(fit['half_batch'], digits=0)}.")
else:
    st.markdown(f"The step times {source} here do not rise with the batch, so a straight line through them has no "
                "positive slope: measure again, or add larger batch sizes.")
if measured:
    table = table.assign(predicted_ms=[r["step_ms"] for r in predicted])
show = table.rename(columns={"batch": "batch size", "step_ms": "step (ms)", "tokens_per_s": "tokens/s",
                             "ms_per_token": "ms per token", "gain_per_doubling": "gain per doubling",
                             "runs": "passes", "predicted_ms": "step (ms), step model's prediction"})
widgets.table(show.round(2), csv="why_batch")
widgets.definitions("Each batch size: `batch` sequences of `context` tokens are prefilled (not timed), then "
                    "every sequence decodes one token per step; a pass keeps the median of its timed steps, "
                    "and the table shows the mean over the passes (_lo / _hi: the lowest and highest pass). "
                    "tokens/s = batch / step time; ms per token = step time / batch. "
                    "Gain per doubling = throughput at the next size / throughput here, per doubling of the batch. "
                    f"The knee: {knee_rule.RULE}.",
                    with_metrics=False)
