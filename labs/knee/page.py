"""Lab: the knee. Sweep max_num_seqs on the simulator at once (max_num_seqs 1 to 64), then on the
real engine, each setting several times; throughput against p95 TPOT and p95 TTFT, with the knee
by the labs' one rule."""
import pandas as pd
import streamlit as st

from course import machines
from labs import knee_rule
from labs.knee import experiment as lab
from labs.runs import simulated_name
from ui import load_line, machine_speed, measure, predict, session, widgets


@st.cache_resource(max_entries=4, show_spinner=False)
def simulated_runs(step_model, values: tuple):
    """The simulated sweep's runs for this step model, on the same requests as the real sweep over
    `values` (read-only; re-scored per SLO below)."""
    sim_values = sorted({*(v for v in lab.SIM_VALUES if v <= max(values)), *values})
    return lab.simulated_runs(step_model, sim_values, requests=lab.requests_for(values))

st.title("Find the knee")
st.caption("The same workload under growing batch limits (max_num_seqs). More slots buy throughput, then "
           "mostly latency. The knee is the operating point, not the engine's maximum.")
load_line.show(lab.SPEC)

speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated
tpot_start_ms, ttft_start_s = lab.slo_defaults(step_model)     # from this machine's step model: see the lab
with st.sidebar:
    widgets.choice(st.multiselect, "max_num_seqs values", lab.CHOICES, lab.VALUES, key="kn_values",
                   help=f"Each value is a run with at most this many requests per step. Every run gets the same "
                        f"requests: {lab.FILL} full batches of the largest value.")
    lo, hi, step = lab.TPOT_SLIDER_MS
    widgets.slider("TPOT SLO (ms)", lo, hi, tpot_start_ms, step=step, key="kn_tpot_ms",
                   help="Requests whose average gap between tokens is longer than this miss the SLO. It starts "
                        f"at {lab.TPOT_SLO_TIMES:g}× the TPOT of one request alone on this machine's step model.")
    lo, hi, step = lab.TTFT_SLIDER_S
    widgets.slider("TTFT SLO (s)", lo, hi, ttft_start_s, step=step, key="kn_ttft_s",
                   help="Requests that wait longer than this for their first token miss the SLO. Every request "
                        "arrives at once here, so TTFT is mostly time spent queueing. It starts at "
                        f"{lab.TTFT_SLO_LONE_REQUESTS}× one request's whole time alone on this machine's step model.")
    widgets.slider("Runs per setting", 1, 5, lab.REPEATS, key="kn_repeats",
                   help="Each run draws the workload with another seed. The charts show the mean and the range "
                        "of the runs: a point whose bars overlap its neighbour's is not really different.")
widgets.write_link(["kn_values", "kn_tpot_ms", "kn_ttft_s", "kn_repeats"])
values, repeats = sorted(st.session_state.kn_values) or [1], st.session_state.kn_repeats
tpot, ttft = st.session_state.kn_tpot_ms / 1000, st.session_state.kn_ttft_s

spec = lab.SPEC
st.markdown(f"The workload: the same {lab.requests_for(values)} requests for every setting ({lab.FILL} full batches "
            f"of the largest, {max(values)}), arriving at once, so every batch size fills and every setting's TTFT and "
            f"goodput are of one workload; prompts {spec.prompt_len.lo}–{spec.prompt_len.hi} tokens, "
            f"outputs {spec.output_len.lo}–{spec.output_len.hi}, so most steps are decode steps. The real sweep runs each setting "
            f"{widgets.plural(repeats, 'time')} ({'seed 0' if repeats == 1 else f'seeds 0–{repeats - 1}'}), the "
            "simulation once (seed 0). "
            f"**The knee** here: {knee_rule.RULE}.")
named = {"max_num_seqs": ", ".join(map(str, values)), "runs per setting": repeats}     # what the predictions are scored on
slos = {**named, "TPOT SLO": f"{tpot * 1000:g} ms", "TTFT SLO": f"{ttft:g} s"}
question = predict.question("knee", choices=tuple(values), settings=named, help=f"Remember the rule: {knee_rule.RULE}.")
guess = predict.gate(question)
goodput_q = predict.question("knee_goodput", choices=(*values, "none of them"), settings=slos,
                             help=f"Goodput counts requests within TPOT ≤ {tpot * 1000:g} ms and TTFT ≤ {ttft:g} s.")
goodput_guess = predict.gate(goodput_q)
sim = lab.knee_table(simulated_runs(step_model, tuple(values)), ttft, tpot)
sim_name = simulated_name(step_model)
sim_knee = lab.find_knee(sim)
got = measure.stored_or_measure("knee", (tuple(values), repeats),
                                lambda m, **kw: lab.max_num_seqs_runs(m, values, repeats, **kw), "Run the sweep",
                                lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), values, repeats)),
                                "Sweeping max_num_seqs…", stop=False, lab="knee")
measure.simulated_caption(step_model, profiled, "Run the sweep", got is not None)
measured = got is not None
source = "measured" if measured else "simulated"
table = lab.knee_table(got, ttft, tpot) if measured else sim[sim.max_num_seqs.isin(values)].reset_index(drop=True)
knee = lab.find_knee(table)
if knee is None:
    st.info("No knee: a sweep needs at least two settings.")
    knee = int(table.max_num_seqs.iloc[0])
k = table[table.max_num_seqs == knee].iloc[0]
top = table.iloc[-1]
best_good = table.loc[table.goodput_req_s.idxmax()]
if measured:
    predict.record("knee", named, knee=str(knee), tpot_p95_knee=f"{k.tpot_p95_ms:.0f} ms")
predict.reveal(question, guess, knee, f"max_num_seqs {knee} makes {k.output_tok_s:.0f} tok/s, "
               f"{k.output_tok_s / table.output_tok_s.max():.0%} of the best ({table.output_tok_s.max():.0f})"
               + ("" if measured else f"; over the simulated sweep of {int(sim.max_num_seqs.min())}–"
                  f"{int(sim.max_num_seqs.max())} the knee is {sim_knee}") + ".",
               source=source)
if best_good.goodput_req_s > 0:
    predict.reveal(goodput_q, goodput_guess,
                   predict.best_of({int(r.max_num_seqs): r.goodput_req_s for r in table.itertuples()}, highest=True),
                   f"Goodput (requests/s) within TPOT ≤ {tpot * 1000:g} ms and TTFT ≤ {ttft:g} s, by "
                   "max_num_seqs: "
                   + ", ".join(f"{int(r.max_num_seqs)}: {r.goodput_req_s:.2f}" for r in table.itertuples()) + ".",
                   source=source)
else:
    predict.reveal(goodput_q, goodput_guess, "none of them", f"No setting had a request within TPOT ≤ "
                   f"{tpot * 1000:g} ms and TTFT ≤ {ttft:g} s: loosen the targets to compare them.", source=source)
predict.show_verdict(lab.knee_verdict(table), source)

machine = machines.ENGINE if measured else machines.SIMULATOR
st.markdown(machines.badge(machine, machines.source_label(source, profiled)) + " the numbers, charts' star and table below")
cols = st.columns(4)
cols[0].metric("Knee (max_num_seqs)", knee, help=knee_rule.RULE[0].upper() + knee_rule.RULE[1:] + ".")
cols[1].metric("Throughput at the knee", widgets.fmt(k.output_tok_s, "tok/s", 0),
               delta=f"{k.output_tok_s / table.output_tok_s.max():.0%} of the best", delta_color="off")
cols[2].metric("p95 TPOT at the knee", widgets.fmt(k.tpot_p95_ms, "ms", 0),
               delta=f"{top.tpot_p95_ms:.0f} ms at {int(top.max_num_seqs)}", delta_color="off")
cols[3].metric("Best for goodput", int(best_good.max_num_seqs) if best_good.goodput_req_s > 0 else "none",
               help=f"The max_num_seqs with the most goodput: {best_good.goodput_req_s:.2f} requests/s within "
                    f"TPOT ≤ {tpot * 1000:g} ms and TTFT ≤ {ttft:g} s")

shown_table = table if measured else pd.DataFrame()
left, right = st.columns(2)
with left:
    widgets.plot(lab.throughput_vs_latency(shown_table, "tpot_p95_ms", knee, tpot * 1000, sim, sim_name))
with right:
    widgets.plot(lab.throughput_vs_latency(shown_table, "ttft_p95_s", knee, ttft, sim, sim_name))
st.markdown(f"Goodput (requests/s meeting both SLOs): {k.goodput_req_s:.2f} at the knee, "
            f"{top.goodput_req_s:.2f} at {int(top.max_num_seqs)} ({machines.source_label(source, profiled).lower()}).")
columns = {"max_num_seqs": "max_num_seqs", "output_tok_s": "output tok/s", "tpot_p95_ms": "p95 TPOT (ms)",
           "ttft_p95_s": "p95 TTFT (s)", "tpot_p50_ms": "p50 TPOT (ms)", "ttft_p50_s": "p50 TTFT (s)",
           "goodput_req_s": "goodput (req/s)", "met_share": "share within SLO", "fill": "batch filled",
           "runs": "runs"}
widgets.table(table[[c for c in columns if c in table]].rename(columns=columns), csv="knee")
widgets.definitions(f"\n- **Knee**: {knee_rule.RULE}.\n- Each row is the mean of the setting's runs.\n- **Batch filled**: the largest batch the run "
                    "held ÷ max_num_seqs (1 = it filled).")
