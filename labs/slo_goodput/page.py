"""Lab: SLOs and goodput. Simulated runs at 24 arrival rates at once, then real runs at a few,
all re-scored instantly against the SLO sliders."""
import streamlit as st

from labs.runs import frames, simulated_name
from labs.slo_goodput import experiment as lab
from ui import load_line, machine_speed, measure, predict, session, widgets


@st.cache_resource(max_entries=4, show_spinner=False)
def simulated_runs(step_model):
    """The simulated runs for this step model at SIM_LOADS and at the lab's own LOADS (read-only)."""
    return lab.simulated_rate_runs(step_model, lab.rates_for(step_model, sorted({*lab.SIM_LOADS, *lab.LOADS})))


@st.cache_resource(max_entries=4, show_spinner=False)
def real_rates(step_model) -> list[float]:
    return lab.rates_for(step_model)


st.title("SLOs and goodput")
st.caption("Throughput counts every token. Goodput counts only requests that met their latency targets. "
           "Move the SLO sliders: the finished runs are re-scored at once, nothing is run again.")
load_line.show(lab.SPEC)

with st.sidebar:
    widgets.slider("TTFT SLO (ms)", 100, 5000, lab.TTFT_SLO_MS, step=50, key="sg_ttft_ms",
                   help="The longest a user should wait for the first token. Requests slower than this miss the SLO.")
    widgets.slider("TPOT SLO (ms)", 10, 300, lab.TPOT_SLO_MS, step=5, key="sg_tpot_ms",
                   help="The longest average gap between tokens once streaming has started.")
    widgets.choice(st.select_slider, "Load shown in detail (share of capacity)", lab.LOADS, lab.LOADS[1],
                   key="sg_load", format_func=lambda x: f"{x:.0%}",
                   help="Which of the real engine's runs the request table and the scatter below show, once "
                        "\"Run the arrival rates\" has measured them.")
widgets.write_link(["sg_ttft_ms", "sg_tpot_ms", "sg_load"])
ttft, tpot = st.session_state.sg_ttft_ms / 1000, st.session_state.sg_tpot_ms / 1000
speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated
rates = real_rates(step_model)

spec = lab.SPEC
st.markdown(f"The workload: {spec.num_requests} requests (prompts {spec.prompt_len.lo}–{spec.prompt_len.hi}, "
            f"outputs {spec.output_len.lo}–{spec.output_len.hi} tokens), Poisson arrivals at "
            f"{', '.join(f'{r:g}' for r in rates)} requests/s ("
            f"{', '.join(f'{x:.0%}' for x in lab.LOADS)} of the capacity this machine's step model predicts), "
            f"continuous batching with {lab.POLICY.max_num_seqs} slots.")
named = {"TTFT SLO": f"{ttft * 1000:g} ms", "TPOT SLO": f"{tpot * 1000:g} ms"}     # what the predictions are scored on
question = predict.question("slo_goodput", choices=(*rates, "none of them"), settings=named)
guess = predict.gate(question)
miss_q = predict.question("slo_first_miss", settings=named)
miss_guess = predict.gate(miss_q)
sim = lab.goodput_table(simulated_runs(step_model), ttft, tpot)
sim_name = simulated_name(step_model)
got = measure.stored_or_measure("slo", tuple(rates), lambda m, **kw: lab.rate_runs(m, rates, **kw),
                                "Run the arrival rates",
                                lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), rates)),
                                "Running each arrival rate…", stop=False, lab="slo_goodput")
measure.simulated_caption(step_model, profiled, "Run the arrival rates", got is not None)
measured = got is not None
source = "measured" if measured else "simulated"
table = lab.goodput_table(got, ttft, tpot) if measured else sim[sim["rate"].isin(rates)].reset_index(drop=True)
top = table.sort_values("rate").iloc[-1]
predict.reveal(question, guess, predict.best_of(dict(zip(table["rate"], table["goodput_req_s"])), highest=True)
               if table["goodput_req_s"].max() > 0 else "none of them",
               "Goodput (req/s) by arrival rate: " + ", ".join(f"{r.goodput_req_s:.2f} at {r.rate:g}"
                                                              for r in table.sort_values("rate").itertuples())
               + ("" if measured else f"; over all {len(sim)} simulated rates it peaks near "
                  f"{sim.loc[sim['goodput_req_s'].idxmax()].rate:g} req/s") + ".", source=source)
predict.reveal(miss_q, miss_guess, lab.most_missed(top.missed_ttft, top.missed_tpot),
               f"At {top.rate:g} requests/s {int(top.missed_ttft)} requests missed "
               f"TTFT and {int(top.missed_tpot)} missed TPOT ({int(top.missed_both)} of them both).", source=source)
predict.show_verdict(lab.falls_verdict(table, ttft, tpot), source)
rate = rates[lab.LOADS.index(st.session_state.sg_load)]
if not measured:
    widgets.plot(lab.goodput_vs_rate(sim.iloc[0:0], simulated=sim, simulated_label=sim_name))
    st.stop()

res = next(r for x, r, _ in got if x == rate)
g = table[table["rate"] == rate].iloc[0]
if measured:
    top_res = got[-1][1]
    predict.record("slo_goodput", named, top_rate=f"{top.rate:g} requests/s",
                   ttft_p95_top_rate=f"{top_res.summary['ttft_s']['p95']:.2f} s")

cols = st.columns(4)
cols[0].metric(f"Throughput at {rate:g} req/s", widgets.fmt(g.output_tok_s, "tok/s", 0),
               help="All output tokens per second, on time or not.")
cols[1].metric("Useful tokens/s", widgets.fmt(g.useful_tok_s, "tok/s", 0),
               delta=f"{g.useful_tok_s / g.output_tok_s - 1:.0%}" if g.output_tok_s else None,
               help="Output tokens per second of the requests that met both SLOs.")
cols[2].metric("Goodput", widgets.fmt(g.goodput_req_s, "req/s"), help="Requests meeting both SLOs per second.")
cols[3].metric("Within SLO", f"{g.met_share:.0%}",
               help=f"Share of finished requests meeting both targets. Missed TTFT: {int(g.missed_ttft)}, "
                    f"missed TPOT: {int(g.missed_tpot)}, {int(g.missed_both)} of them both.")
widgets.plot(lab.goodput_vs_rate(table, rate, sim, sim_name))

verdicts = lab.slo_verdicts(frames(res)[0], ttft, tpot)
widgets.plot(lab.slo_scatter(verdicts, ttft, tpot))
first_miss = lab.most_missed(g.missed_ttft, g.missed_tpot)
if g.missed_ttft or g.missed_tpot:
    st.markdown(f"At {rate:g} requests/s, " + ("both targets were missed about as often" if first_miss == lab.TIE
                                                  else f"**{first_miss}** is the target missed most")
                + f" ({int(g.missed_ttft)} TTFT misses, {int(g.missed_tpot)} TPOT misses; "
                  f"{int(g.missed_both)} requests missed both).")
with st.expander("Every request, met or missed", expanded=False):
    show = verdicts[["id", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "met_slo", "missed"]]
    show = show.assign(met_slo=show["met_slo"].map({True: "✓ met", False: "✗ missed"}),
                       tpot_s=show["tpot_s"] * 1000)
    widgets.table(show.rename(columns={**widgets.REQUEST_COLUMNS, "tpot_s": "TPOT (ms)", "met_slo": "met both"}),
                  csv="slo_requests")
widgets.table(table.rename(columns={"rate": "arrival rate (req/s)", "output_tok_s": "output tok/s",
                                    "useful_tok_s": "useful tok/s", "request_s": "finished req/s",
                                    "goodput_req_s": "goodput (req/s)", "met_share": "within SLO",
                                    "missed_ttft": "missed TTFT", "missed_tpot": "missed TPOT",
                                    "missed_both": "… of them both"}),
              csv="slo_goodput")
widgets.definitions("\n- **Useful tokens/s** = output tokens of requests that met every "
                    "SLO / duration. A request with a single output token has no TPOT and passes that check."
                    "\n- **Capacity** (for the loads) = requests per second the step model predicts this engine "
                    "finishes with its queue never empty.")
