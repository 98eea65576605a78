"""Lab: dynamic batching. Static batches with max_wait_ms swept: a longer wait fills batches
(more throughput per second of engine work) and delays every first token. The simulator answers
at once; the real sweep, when run, is drawn over it."""
import streamlit as st

from engine.core.config import SchedulerPolicy
from engine.core.knobs import knobs_of
from labs.dynamic_batching import experiment as lab
from labs.runs import simulated_name
from ui import load_line, machine_speed, measure, predict, session, widgets

WAIT = knobs_of(SchedulerPolicy)["max_wait_ms"]


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_table(step_model, rate: float, waits: tuple, slots: int, repeats: int):
    """The sweep on the simulator for these settings (read-only)."""
    return lab.wait_table(lab.simulated_wait_runs(step_model, rate, waits, slots, repeats))


@st.cache_resource(max_entries=16, show_spinner=False)
def arrival_rate(step_model, slots: int) -> float:
    return lab.rate_for(step_model, lab.LOAD, slots)


st.title("Dynamic batching: waiting to fill a batch")
st.caption("A dynamic batcher (Triton's, or this engine in static mode) holds arriving requests until a batch "
           "is full or the oldest has waited max_wait_ms, then runs the batch to its end. How long should "
           "it wait?")
load_line.show(lab.SPEC)

with st.sidebar:
    widgets.choice(st.multiselect, "max_wait_ms values", [0, 100, 250, 500, 1000, 2000, 4000], lab.WAITS_MS,
                   key="db_waits", help=WAIT.help)
    widgets.slider("Batch slots (max_num_seqs)", 2, 16, lab.SLOTS, key="db_slots",
                   help="A batch starts as soon as this many requests wait, whatever the wait.")
    widgets.slider("Runs per setting", 1, 5, lab.REPEATS, key="db_repeats",
                   help="Each run draws the arrivals with another seed. The chart shows the mean and the range.")
widgets.write_link(["db_waits", "db_slots", "db_repeats"])
waits = sorted(st.session_state.db_waits) or [0]
slots, repeats = st.session_state.db_slots, st.session_state.db_repeats
speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated
rate = arrival_rate(step_model, slots)

spec = lab.SPEC
st.markdown(f"The workload: {spec.num_requests} requests arriving at random at {rate:g} per second, "
            f"{lab.LOAD:.0%} of what this machine's step model says the batcher serves with {slots} slots; prompts "
            f"{spec.prompt_len.lo}–{spec.prompt_len.hi} tokens, {spec.output_len.lo} output tokens each "
            f"(all the same length, so no batch waits for one long member). Each max_wait_ms is run {repeats} times.")
named = {"max_wait_ms": ", ".join(f"{w:g}" for w in waits), "batch slots": slots, "runs per setting": repeats}
question = predict.question("dynamic_batching", choices=lab.OUTCOMES, first=f"{waits[0]:g}", last=f"{waits[-1]:,g}",
                            settings=named)     # what the prediction is scored on
guess = predict.gate(question)
settings = (rate, tuple(waits), slots, repeats)
sim = simulated_table(step_model, *settings)
sim_name = simulated_name(step_model)
got = measure.stored_or_measure(
    "dynamic_batching", settings, lambda m, **kw: lab.wait_runs(m, rate, waits, slots, repeats, **kw), "Run the sweep",
    lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), rate, waits, slots, repeats)),
    "Sweeping max_wait_ms…", stop=False, lab="dynamic_batching")
measure.simulated_caption(step_model, profiled, "Run the sweep", got is not None)
measured = got is not None
source = "measured" if measured else "simulated"
table = lab.wait_table(got) if measured else sim      # until the real sweep, the numbers are the simulation's
first, last = table.iloc[0], table.iloc[-1]
predict.reveal(question, guess, lab.outcome(table),
               f"p50 TTFT {first.ttft_p50_s:.2f} → {last.ttft_p50_s:.2f} s; delivered {first.output_tok_s:.0f} → "
               f"{last.output_tok_s:.0f} tok/s.", source=source)
predict.show_verdict(lab.waiting_verdict(table, slots), source)

cols = st.columns(4)
widgets.changes(cols, [
        ("p50 TTFT", f"{first.ttft_p50_s:.2f}", f"{last.ttft_p50_s:.2f} s",
         f"At max_wait_ms {first.max_wait_ms:g} → {last.max_wait_ms:g}."),
        ("Mean batch", f"{first.mean_batch:.1f}", f"{last.mean_batch:.1f}",
         "Sequences per engine step, averaged over the steps."),
        ("Tok/s of engine work", f"{first.busy_tok_s:.0f}", f"{last.busy_tok_s:.0f}",
         "Output tokens / seconds the engine spent in steps: how much each second of work makes."),
        ("Tok/s delivered", f"{first.output_tok_s:.0f}", f"{last.output_tok_s:.0f}",
         "Output tokens / the whole run's duration: what the users received per second.")])
widgets.plot(lab.ttft_and_throughput(table if measured else None, sim, sim_name))
if not measured:
    st.caption("The table is the simulation's.")
columns = {"max_wait_ms": "max_wait_ms", "ttft_p50_s": "p50 TTFT (s)", "ttft_p95_s": "p95 TTFT (s)",
           "mean_batch": "mean batch", "busy_tok_s": "tok/s of engine work", "output_tok_s": "tok/s delivered",
           "runs": "runs"}
widgets.table(table[list(columns)].rename(columns=columns), csv="dynamic_batching")
widgets.definitions("\n- **Tokens per second of engine work** = output tokens / the seconds the engine spent "
                    "in steps (idle time waiting for arrivals or for a batch to fill is left out)."
                    "\n- **Tokens delivered per second** = output tokens / the run's duration, first arrival to "
                    "last finish."
                    "\n- **Mean batch** = sequences per engine step, averaged over the steps."
                    "\n- Each row is the mean of the setting's runs; the chart's bars span the lowest and highest.")
