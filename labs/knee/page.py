"""Lab: the knee. Sweep max_num_seqs on the real engine; throughput against p95 TPOT and p95 TTFT."""
import streamlit as st

from labs.knee import experiment as lab
from ui import widgets

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
widgets.write_link(["kn_values", "kn_tpot_ms", "kn_ttft_s"])
values = sorted(st.session_state.kn_values) or [1]
tpot, ttft = st.session_state.kn_tpot_ms / 1000, st.session_state.kn_ttft_s

spec = lab.SPEC
st.markdown(f"The workload: {spec.num_requests} requests arriving at once, prompts "
            f"{spec.prompt_len.lo}–{spec.prompt_len.hi} tokens, outputs {spec.output_len.lo}–{spec.output_len.hi}. "
            "**The knee** here = the setting that lies furthest above the straight line from the first to the "
            "last point of the throughput-against-p95-TPOT curve, with both axes scaled 0–1 (the \"Kneedle\" "
            "rule: the point of greatest bend). Before it, more slots buy throughput faster than latency; after "
            "it, latency grows faster.")
got = widgets.stored_or_measure("knee", tuple(values), lambda m, **kw: lab.max_num_seqs_runs(m, values, **kw),
                                "Run the sweep", "about 90 s for 1–32", "Sweeping max_num_seqs…")

table = lab.knee_table(got, ttft, tpot)
knee = lab.find_knee(table)
if knee is None:
    st.info("No knee in this sweep: throughput and p95 TPOT grew in step (or fewer than three settings). "
            "Add settings at both ends.")
    knee = int(table.max_num_seqs.iloc[0])
k = table[table.max_num_seqs == knee].iloc[0]
top = table.iloc[-1]
best_good = table.loc[table.goodput_req_s.idxmax()]

cols = st.columns(4)
cols[0].metric("Knee (max_num_seqs)", knee, help="The point of greatest bend of throughput against p95 TPOT.")
cols[1].metric("Throughput at the knee", widgets.fmt(k.output_tok_s, "tok/s", 0),
               delta=f"{k.output_tok_s / table.output_tok_s.max():.0%} of the best", delta_color="off")
cols[2].metric("p95 TPOT at the knee", widgets.fmt(k.tpot_p95_ms, "ms", 0),
               delta=f"{top.tpot_p95_ms:.0f} ms at {int(top.max_num_seqs)}", delta_color="off")
cols[3].metric("Best goodput at max_num_seqs", int(best_good.max_num_seqs),
               help=f"{best_good.goodput_req_s:.2f} requests/s within TPOT ≤ {tpot * 1000:g} ms and TTFT ≤ {ttft:g} s")

left, right = st.columns(2)
with left:
    widgets.plot(lab.throughput_vs_latency(table, "tpot_p95_ms", knee, tpot * 1000))
with right:
    widgets.plot(lab.throughput_vs_latency(table, "ttft_p95_s", knee, ttft))
st.markdown(f"Going from the knee ({knee}) to {int(top.max_num_seqs)} slots changes throughput by "
            f"{top.output_tok_s / k.output_tok_s - 1:+.0%} and p95 TPOT by {top.tpot_p95_ms / k.tpot_p95_ms - 1:+.0%}. "
            f"Goodput (requests/s meeting both SLOs): {k.goodput_req_s:.2f} at the knee, "
            f"{top.goodput_req_s:.2f} at {int(top.max_num_seqs)}.")
widgets.table(table.rename(columns={"output_tok_s": "output tok/s", "tpot_p95_ms": "p95 TPOT (ms)",
                                    "ttft_p95_s": "p95 TTFT (s)", "tpot_p50_ms": "p50 TPOT (ms)",
                                    "ttft_p50_s": "p50 TTFT (s)", "goodput_req_s": "goodput (req/s)",
                                    "met_share": "share within SLO"}).round(3))
widgets.definitions("\n- **Knee** = scale p95 TPOT and throughput to 0–1 between the first and "
                    "the last setting; the knee is the setting whose point lies furthest above the straight line "
                    "joining those two (the Kneedle rule).")
