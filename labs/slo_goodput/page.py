"""Lab: SLOs and goodput. Simulated runs at 24 arrival rates at once, then real runs at a few,
all re-scored instantly against the SLO sliders."""
import streamlit as st

from labs.runs import frames, simulated_name
from labs.slo_goodput import experiment as lab
from ui import calculators, predict, session, widgets


@st.cache_resource(max_entries=4, show_spinner=False)
def simulated_runs(step_model):
    """The simulated runs for this step model at SIM_RATES and at the lab's own RATES (read-only)."""
    return lab.simulated_rate_runs(step_model, sorted({*lab.SIM_RATES, *lab.RATES}))

st.title("SLOs and goodput")
st.caption("Throughput counts every token. Goodput counts only requests that met their latency targets. "
           "Move the SLO sliders: the finished runs are re-scored at once, nothing is run again.")

with st.sidebar:
    widgets.slider("TTFT SLO (ms)", 100, 5000, 2000, step=50, key="sg_ttft_ms",
                   help="The longest a user should wait for the first token. Requests slower than this miss the SLO.")
    widgets.slider("TPOT SLO (ms)", 10, 300, 100, step=5, key="sg_tpot_ms",
                   help="The longest average gap between tokens once streaming has started.")
    widgets.choice(st.select_slider, "Arrival rate shown in detail (requests/s)", lab.RATES, lab.RATES[1],
                   key="sg_rate", help="Which of the measured runs the request table and the scatter below show.")
widgets.write_link(["sg_ttft_ms", "sg_tpot_ms", "sg_rate"])
ttft, tpot = st.session_state.sg_ttft_ms / 1000, st.session_state.sg_tpot_ms / 1000

spec = lab.SPEC
st.markdown(f"The workload: {spec.num_requests} requests (prompts {spec.prompt_len.lo}–{spec.prompt_len.hi}, "
            f"outputs {spec.output_len.lo}–{spec.output_len.hi} tokens), Poisson arrivals at "
            f"{', '.join(f'{r:g}' for r in lab.RATES)} requests/s, continuous batching with "
            f"{lab.POLICY.max_num_seqs} slots.")
question = predict.Question("slo_goodput", "As the arrival rate rises, at which rate (requests/s) will goodput "
                            "(requests/s that meet both SLOs) be highest, with the SLOs you set?",
                            choices=tuple(lab.RATES))
guess = predict.gate(question)
step_model, profiled = calculators.machine_step_model()
sim = lab.goodput_table(simulated_runs(step_model), ttft, tpot)
sim_name = simulated_name(step_model)
got = widgets.stored_or_measure("slo", "rates", lab.rate_runs, "Run the arrival rates",
                                lambda: widgets.estimate_text(*lab.estimate_s(session.model_name())),
                                "Running each arrival rate…", stop=False)
widgets.simulated_caption(step_model, profiled, "Run the arrival rates", got is not None)
if got is None:      # the simulated answer, at once; the real measurement waits for the button
    at_choices = sim[sim["rate"].isin(lab.RATES)]
    sim_best = at_choices.loc[at_choices["goodput_req_s"].idxmax()]
    peak = sim.loc[sim["goodput_req_s"].idxmax()]
    widgets.simulated_answer(f"{guess:g} requests/s", f"of those rates goodput is highest at **{sim_best.rate:g} "
                             f"requests/s** ({sim_best.goodput_req_s:.2f} req/s within both SLOs)",
                             f"Over all {len(sim)} simulated rates it peaks near {peak.rate:g} requests/s.")
    widgets.plot(lab.goodput_vs_rate(sim.iloc[0:0], simulated=sim, simulated_label=sim_name))
    st.stop()

table = lab.goodput_table(got, ttft, tpot)
rate = st.session_state.sg_rate
res = next(r for x, r, _ in got if x == rate)
g = table[table["rate"] == rate].iloc[0]

cols = st.columns(4)
cols[0].metric(f"Throughput at {rate:g} req/s", widgets.fmt(g.output_tok_s, "tok/s", 0),
               help="All output tokens per second, on time or not.")
cols[1].metric("Useful tokens/s", widgets.fmt(g.useful_tok_s, "tok/s", 0),
               delta=f"{g.useful_tok_s / g.output_tok_s - 1:.0%}" if g.output_tok_s else None,
               help="Output tokens per second of the requests that met both SLOs.")
cols[2].metric("Goodput", widgets.fmt(g.goodput_req_s, "req/s"), help="Requests meeting both SLOs per second.")
cols[3].metric("Within SLO", f"{g.met_share:.0%}",
               help=f"Share of finished requests meeting both targets. Missed TTFT: {int(g.missed_ttft)}, "
                    f"missed TPOT: {int(g.missed_tpot)}.")

best = table.loc[table["goodput_req_s"].idxmax()]
top_rate, top_res, _ = got[-1]
predict.record("slo_goodput", top_rate=f"{top_rate:g} requests/s",
               ttft_p95_top_rate=f"{top_res.summary['ttft_s']['p95']:.2f} s")
predict.reveal(question, guess, best.rate,
               f"Goodput is {best.goodput_req_s:.2f} req/s at {best.rate:g} req/s. Below that, more arrivals "
               "mean more requests that meet the targets; above it, the queue and the fuller batches push TTFT "
               "and TPOT past the targets faster than new requests arrive, so goodput falls while throughput "
               "still rises. Move the SLO sliders: the peak moves with them.")
widgets.plot(lab.goodput_vs_rate(table, rate, sim, sim_name))
st.markdown(f"With TTFT ≤ {ttft * 1000:g} ms and TPOT ≤ {tpot * 1000:g} ms, goodput peaks at "
            f"**{best.rate:g} requests/s** ({best.goodput_req_s:.2f} req/s within SLO); the highest rate "
            f"makes {table.iloc[-1].output_tok_s:.0f} tokens/s of which {table.iloc[-1].useful_tok_s:.0f} count.")

verdicts = lab.slo_verdicts(frames(res)[0], ttft, tpot)
widgets.plot(lab.slo_scatter(verdicts, ttft, tpot))
first_miss = "TTFT" if g.missed_ttft >= g.missed_tpot else "TPOT"
if g.missed_ttft or g.missed_tpot:
    st.markdown(f"At {rate:g} requests/s, **{first_miss}** is the target missed most "
                f"({int(g.missed_ttft)} TTFT misses, {int(g.missed_tpot)} TPOT misses).")
with st.expander("Every request, met or missed", expanded=False):
    show = verdicts[["id", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "met_slo", "missed"]]
    show = show.assign(met_slo=show["met_slo"].map({True: "✓ met", False: "✗ missed"}))
    widgets.table(show.assign(tpot_ms=show["tpot_s"] * 1000).drop(columns="tpot_s").round(3), csv="slo_requests")
widgets.table(table.rename(columns={"rate": "arrival rate (req/s)", "output_tok_s": "output tok/s",
                                    "useful_tok_s": "useful tok/s", "request_s": "finished req/s",
                                    "goodput_req_s": "goodput (req/s)", "met_share": "within SLO",
                                    "missed_ttft": "missed TTFT", "missed_tpot": "missed TPOT"}).round(3),
              csv="slo_goodput")
widgets.definitions("\n- **Useful tokens/s** = output tokens of requests that met every "
                    "SLO / duration. A request with a single output token has no TPOT and passes that check.")
