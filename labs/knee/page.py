"""Lab: the knee. Sweep max_num_seqs on the simulator at once (every value 1 to 64), then on the
real engine, each setting several times; throughput against p95 TPOT and p95 TTFT, with the knee
by the labs' one rule."""
import pandas as pd
import streamlit as st

from labs import knee_rule
from labs.knee import experiment as lab
from labs.runs import simulated_name
from ui import calculators, predict, session, widgets


@st.cache_resource(max_entries=4, show_spinner=False)
def simulated_runs(step_model):
    """The simulated sweep's runs for this step model (read-only; re-scored per SLO below)."""
    return lab.simulated_runs(step_model)

st.title("Find the knee")
st.caption("The same workload under growing batch limits (max_num_seqs). More slots buy throughput, then "
           "mostly latency. The knee is the operating point, not the engine's maximum.")

with st.sidebar:
    widgets.choice(st.multiselect, "max_num_seqs values", [1, 2, 4, 8, 16, 32, 64], lab.VALUES, key="kn_values",
                   help="Each value is one run of the same workload with at most this many requests per step.")
    widgets.slider("TPOT SLO (ms)", 10, 300, 60, step=5, key="kn_tpot_ms",
                   help="Requests whose average gap between tokens is longer than this miss the SLO.")
    widgets.slider("TTFT SLO (s)", 0.5, 60.0, 10.0, step=0.5, key="kn_ttft_s",
                   help="Requests that wait longer than this for their first token miss the SLO. Every request "
                        "arrives at once here, so TTFT is mostly time spent queueing.")
    widgets.slider("Runs per setting", 1, 5, lab.REPEATS, key="kn_repeats",
                   help="Each run draws the workload with another seed. The charts show the mean and the range "
                        "of the runs: a point whose bars overlap its neighbour's is not really different.")
widgets.write_link(["kn_values", "kn_tpot_ms", "kn_ttft_s", "kn_repeats"])
values, repeats = sorted(st.session_state.kn_values) or [1], st.session_state.kn_repeats
tpot, ttft = st.session_state.kn_tpot_ms / 1000, st.session_state.kn_ttft_s

spec = lab.SPEC
st.markdown(f"The workload: {spec.num_requests} requests arriving at once, prompts "
            f"{spec.prompt_len.lo}–{spec.prompt_len.hi} tokens, outputs {spec.output_len.lo}–{spec.output_len.hi}, "
            f"run {repeats} times per setting (seeds 0–{repeats - 1}). **The knee** here: {knee_rule.RULE}. "
            "Past it, more slots can add at most the last few percent of throughput, while latency keeps growing.")
question = predict.Question("knee", "At which max_num_seqs will the knee be?", choices=tuple(values),
                            help=f"Remember the rule: {knee_rule.RULE}.")
guess = predict.gate(question)
step_model, profiled = calculators.machine_step_model()
sim = lab.knee_table(simulated_runs(step_model), ttft, tpot)
sim_name = simulated_name(step_model)
sim_knee = lab.find_knee(sim)
got = widgets.stored_or_measure("knee", (tuple(values), repeats),
                                lambda m, **kw: lab.max_num_seqs_runs(m, values, repeats, **kw), "Run the sweep",
                                lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), values, repeats)),
                                "Sweeping max_num_seqs…", stop=False)
widgets.simulated_caption(step_model, profiled, "Run the sweep", got is not None)
if got is None:      # the simulated answer, at once; the real measurement waits for the button
    among = lab.find_knee(sim[sim.max_num_seqs.isin(values)])
    widgets.simulated_answer(f"{guess}", f"among your values the knee is at max_num_seqs "
                             f"**{among if among is not None else values[0]}** (over every value 1–64: {sim_knee})",
                             f"{spec.num_requests} requests arrive at once, so past {spec.num_requests} slots "
                             "nothing changes.")
    left, right = st.columns(2)
    with left:
        widgets.plot(lab.throughput_vs_latency(pd.DataFrame(), "tpot_p95_ms", sim_knee, tpot * 1000, sim, sim_name))
    with right:
        widgets.plot(lab.throughput_vs_latency(pd.DataFrame(), "ttft_p95_s", sim_knee, ttft, sim, sim_name))
    st.stop()

table = lab.knee_table(got, ttft, tpot)
knee = lab.find_knee(table)
if knee is None:
    st.info("No knee: a sweep needs at least two settings.")
    knee = int(table.max_num_seqs.iloc[0])
k = table[table.max_num_seqs == knee].iloc[0]
top = table.iloc[-1]
best_good = table.loc[table.goodput_req_s.idxmax()]
predict.record("knee", knee=str(knee), tpot_p95_knee=f"{k.tpot_p95_ms:.0f} ms")
predict.reveal(question, guess, knee,
               f"max_num_seqs {knee} makes {k.output_tok_s:.0f} tok/s, {k.output_tok_s / table.output_tok_s.max():.0%} "
               f"of the best ({table.output_tok_s.max():.0f}), at p95 TPOT {k.tpot_p95_ms:.0f} ms against "
               f"{top.tpot_p95_ms:.0f} ms at {int(top.max_num_seqs)}. Throughput saturates once a step holds "
               "enough sequences to keep the machine busy; after that, each extra slot mostly makes every "
               "step longer for everyone in it.")

cols = st.columns(4)
cols[0].metric("Knee (max_num_seqs)", knee, help=knee_rule.RULE[0].upper() + knee_rule.RULE[1:] + ".")
cols[1].metric("Throughput at the knee", widgets.fmt(k.output_tok_s, "tok/s", 0),
               delta=f"{k.output_tok_s / table.output_tok_s.max():.0%} of the best", delta_color="off")
cols[2].metric("p95 TPOT at the knee", widgets.fmt(k.tpot_p95_ms, "ms", 0),
               delta=f"{top.tpot_p95_ms:.0f} ms at {int(top.max_num_seqs)}", delta_color="off")
cols[3].metric("Best goodput at max_num_seqs", int(best_good.max_num_seqs),
               help=f"{best_good.goodput_req_s:.2f} requests/s within TPOT ≤ {tpot * 1000:g} ms and TTFT ≤ {ttft:g} s")

left, right = st.columns(2)
with left:
    widgets.plot(lab.throughput_vs_latency(table, "tpot_p95_ms", knee, tpot * 1000, sim, sim_name))
with right:
    widgets.plot(lab.throughput_vs_latency(table, "ttft_p95_s", knee, ttft, sim, sim_name))
st.markdown(f"Going from the knee ({knee}) to {int(top.max_num_seqs)} slots changes throughput by "
            f"{top.output_tok_s / k.output_tok_s - 1:+.0%} and p95 TPOT by {top.tpot_p95_ms / k.tpot_p95_ms - 1:+.0%}. "
            f"Goodput (requests/s meeting both SLOs): {k.goodput_req_s:.2f} at the knee, "
            f"{top.goodput_req_s:.2f} at {int(top.max_num_seqs)}.")
widgets.table(table.rename(columns={"output_tok_s": "output tok/s", "tpot_p95_ms": "p95 TPOT (ms)",
                                    "ttft_p95_s": "p95 TTFT (s)", "tpot_p50_ms": "p50 TPOT (ms)",
                                    "ttft_p50_s": "p50 TTFT (s)", "goodput_req_s": "goodput (req/s)",
                                    "met_share": "share within SLO"}).round(3), csv="knee")
widgets.definitions(f"\n- **Knee**: {knee_rule.RULE}.\n- Each row is the mean of the setting's runs; a column "
                    "ending in _lo / _hi is the lowest / highest run.")
