"""Lab: dynamic batching. Static batches with max_wait_ms swept: a longer wait fills batches
(more throughput per second of engine work) and delays every first token. The simulator answers
at once; the real sweep, when run, is drawn over it."""
import streamlit as st

from engine.config import SchedulerPolicy
from engine.knobs import knobs_of
from labs.dynamic_batching import experiment as lab
from labs.runs import simulated_name
from ui import calculators, predict, session, widgets

WAIT = knobs_of(SchedulerPolicy)["max_wait_ms"]


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_table(step_model, waits: tuple, slots: int, repeats: int):
    """The sweep on the simulator for these settings (read-only)."""
    return lab.wait_table(lab.simulated_wait_runs(step_model, waits, slots, repeats))


st.title("Dynamic batching: waiting to fill a batch")
st.caption("A dynamic batcher (Triton's, or this engine in static mode) holds arriving requests until a batch "
           "is full or the oldest has waited max_wait_ms, then runs the batch to its end. How long should "
           "it wait?")

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

spec = lab.SPEC
st.markdown(f"The workload: {spec.num_requests} requests arriving at random at about {spec.rate:g} per second, "
            f"prompts {spec.prompt_len.lo}–{spec.prompt_len.hi} tokens, {spec.output_len.lo} output tokens each "
            f"(all the same length, so no batch waits for one long member). Static batching with {slots} slots; "
            f"each max_wait_ms is run {repeats} times.")
question = predict.Question("dynamic_batching", f"Raise max_wait_ms from {waits[0]:g} to {waits[-1]:g} ms. What "
                            "happens to the median TTFT and to the tokens per second of engine work?",
                            choices=lab.OUTCOMES)
guess = predict.gate(question)
settings = (tuple(waits), slots, repeats)
step_model, profiled = calculators.machine_step_model()
sim = simulated_table(step_model, tuple(waits), slots, repeats)
sim_name = simulated_name(step_model)
got = widgets.stored_or_measure(
    "dynamic_batching", settings, lambda m, **kw: lab.wait_runs(m, waits, slots, repeats, **kw), "Run the sweep",
    lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), waits, slots, repeats)),
    "Sweeping max_wait_ms…", stop=False)
widgets.simulated_caption(step_model, profiled, "Run the sweep", got is not None)
measured = got is not None
table = lab.wait_table(got) if measured else sim      # until the real sweep, the numbers are the simulation's
first, last = table.iloc[0], table.iloc[-1]
because = (f"From {first.max_wait_ms:g} to {last.max_wait_ms:g} ms the mean batch went from "
           f"{first.mean_batch:.1f} to {last.mean_batch:.1f} sequences a step, so each second of engine work "
           f"made {first.busy_tok_s:.0f} → {last.busy_tok_s:.0f} tokens; and the median TTFT went "
           f"{first.ttft_p50_s:.2f} → {last.ttft_p50_s:.2f} s, because a request now waits for others to "
           "arrive before its batch starts.")
if measured:
    predict.reveal(question, guess, lab.outcome(table), because)
else:
    widgets.simulated_answer(f"**{guess}**", f"**{lab.outcome(sim)}**", because)

cols = st.columns(3)
cols[0].metric("p50 TTFT", f"{first.ttft_p50_s:.2f} → {last.ttft_p50_s:.2f} s",
               help=f"At max_wait_ms {first.max_wait_ms:g} → {last.max_wait_ms:g}.")
cols[1].metric("Mean batch", f"{first.mean_batch:.1f} → {last.mean_batch:.1f}",
               help="Sequences per engine step, averaged over the steps.")
cols[2].metric("Tokens per second of engine work", f"{first.busy_tok_s:.0f} → {last.busy_tok_s:.0f}",
               help="Output tokens / seconds the engine spent in steps: how much each second of work makes.")
widgets.plot(lab.ttft_and_throughput(table if measured else None, sim, sim_name))
st.markdown("Output tokens per second over the **whole run** hardly move: arrivals, not the engine, set the pace "
            "of an open workload below capacity. What waiting buys is efficiency (fuller, cheaper-per-token "
            "steps, room for more traffic); what it costs is TTFT. Continuous batching does not have to choose: "
            "it admits a request at the next step and still fills the batch as traffic grows.")
if not measured:
    st.caption("The table is the simulation's.")
widgets.table(table.rename(columns={"max_wait_ms": "max_wait_ms", "ttft_p50_s": "p50 TTFT (s)",
                                    "ttft_p95_s": "p95 TTFT (s)", "mean_batch": "mean batch",
                                    "busy_tok_s": "tok/s of engine work", "output_tok_s": "tok/s over the run",
                                    "runs": "runs"}).round(3), csv="dynamic_batching")
widgets.definitions("\n- **Tokens per second of engine work** = output tokens / the seconds the engine spent "
                    "in steps (idle time waiting for arrivals or for a batch to fill is left out)."
                    "\n- **Mean batch** = sequences per engine step, averaged over the steps."
                    "\n- A column ending in _lo / _hi is the lowest / highest run.")
