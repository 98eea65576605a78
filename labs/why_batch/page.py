"""Lab: why batch. Decode step time and tokens/s against batch size: this machine's step model at
once, then measured on the real model, with the step model's prediction kept beside it."""
import streamlit as st

from labs import knee_rule
from labs.why_batch import experiment as lab
from ui import load_line, machine_speed, measure, predict, session, widgets

st.title("Why batch")
st.caption("One decode step reads every weight of the model once, however many sequences ride in it. "
           "Here the real engine times decode steps at growing batch sizes on this machine.")
load_line.show(load_line.NO_ARRIVALS)

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
named = {"batch sizes": ", ".join(map(str, sizes)), "context": f"{settings[1]} tokens", "timed steps": settings[2],
         "passes": settings[3]}        # what the predictions are scored on
question = predict.question("why_batch", settings=named, help="If the step took no longer with 8 sequences, the answer would be 1×; "
                            "if it took 8× as long, batching would gain nothing.")
guess = predict.gate(question)
knee_q = predict.question("why_batch_knee", choices=tuple(sizes), settings=named, share=f"{knee_rule.KNEE_SHARE:.0%}",
                          help=f"The rule: {knee_rule.RULE}.")
knee_guess = predict.gate(knee_q)
speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated
predicted = lab.predicted_scaling(step_model, sizes, settings[1])
got = measure.stored_or_measure("why_batch", settings, lambda m, **kw: lab.batch_scaling(m, *settings, **kw),
                                "Measure step times", lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), *settings)),
                                "Timing decode steps…", stop=False, lab="why_batch")
measure.simulated_first_caption(step_model, profiled, "Measure step times", got is not None,
                                "every step time, chart and number",
                                "the table keeps the step model's prediction beside each measured step")
measured = got is not None
source = "measured" if measured else "simulated"
rows = got[0] if measured else predicted
table = lab.scaling_table(rows)
knee = lab.knee(rows)
fit = lab.linear_fit(rows)
first, last = table.iloc[0], table.iloc[-1]
ratio = last.tokens_per_s / first.tokens_per_s
at = table.set_index("batch")
step_ratio = (at.step_ms[lab.CLAIM_BATCH] / at.step_ms[1]) if {1, lab.CLAIM_BATCH} <= set(at.index) else float("nan")
if measured:
    predict.record("why_batch", named, **{f"step_ms_{int(r.batch)}": f"{r.step_ms:.1f} ms" for r in table.itertuples()})
if step_ratio == step_ratio:
    predict.reveal(question, guess, step_ratio, f"Batch {lab.CLAIM_BATCH}: {at.step_ms[lab.CLAIM_BATCH]:.1f} ms a step; "
                   f"batch 1: {at.step_ms[1]:.1f} ms.", measured_text=f"×{step_ratio:.2f}", source=source)
else:
    st.info(f"Your first guess compares batch {lab.CLAIM_BATCH} with batch 1: add both to the batch sizes to see it.")
if knee is not None:
    predict.reveal(knee_q, knee_guess, knee, f"Batch {knee} makes {at.tokens_per_s[knee]:.0f} tokens/s, "
                   f"{at.tokens_per_s[knee] / table.tokens_per_s.max():.0%} of the best "
                   f"({table.tokens_per_s.max():.0f}).", source=source)
predict.show_verdict(lab.amortization_verdict(table, step_model if measured else None, settings[1]), source)

c = st.columns(4)
c[0].metric(f"tokens/s at batch {int(first.batch)}", widgets.fmt(first.tokens_per_s, digits=0))
c[1].metric(f"tokens/s at batch {int(last.batch)}", widgets.fmt(last.tokens_per_s, digits=0),
            delta=f"×{ratio:.1f}")
c[2].metric(f"step time, batch {int(first.batch)} → {int(last.batch)}",
            f"{first.step_ms:.0f} → {last.step_ms:.0f} ms", delta=f"×{last.step_ms / first.step_ms:.1f}",
            delta_color="inverse")
c[3].metric("the knee", f"batch {knee}" if knee else "—", help=knee_rule.RULE[0].upper() + knee_rule.RULE[1:] + ".")

shown_as = "measured" if measured else "predicted"
widgets.plot(lab.amortization(table, knee, fit, shown_as))
if knee:
    st.markdown(lab.knee_words(table, knee, fit, shown_as) + " "
                + (f"Each point is the mean of {int(table.runs.min())} passes; the bars span the lowest and "
                   "highest pass." if measured else "Each point is the step model's prediction."))
else:
    st.markdown("**No knee:** measure at least two batch sizes.")
widgets.plot(lab.step_time(table, fit, shown_as))
st.markdown(lab.fit_words(fit, shown_as))
if measured:
    table = table.assign(predicted_ms=[r["step_ms"] for r in predicted])
columns = {"batch": "batch size", "step_ms": "step (ms)", "tokens_per_s": "tokens/s", "ms_per_token": "ms per token",
           "gain_per_doubling": "gain per doubling", "step_ms_lo": "step, fastest pass (ms)",
           "step_ms_hi": "step, slowest pass (ms)", "runs": "passes",
           "predicted_ms": "step (ms), step model's prediction"}
if not measured:                  # a prediction is one number a size: no passes to count or span
    columns = {c: name for c, name in columns.items() if c not in ("step_ms_lo", "step_ms_hi", "runs")}
shown = table[[c for c in columns if c in table]]
shown["gain_per_doubling"] = lab.gains_shown(shown["gain_per_doubling"])
widgets.table(shown.rename(columns=columns), csv="why_batch")
widgets.definitions("Each batch size: `batch` sequences of `context` tokens are prefilled (not timed), then "
                    "every sequence decodes one token per step; a pass keeps the median of its timed steps, "
                    "and the table shows the mean over the passes, with the fastest and slowest pass. "
                    "tokens/s = batch / step time; ms per token = step time / batch. "
                    "Gain per doubling = throughput at the next size / throughput here, per doubling of the batch. "
                    f"The knee: {knee_rule.RULE}.",
                    with_metrics=False)
