"""Lab: the tail. CDFs and percentile tables of one run, split by prompt length and by tenant: the
simulator's run at once, the real engine's when run."""
import streamlit as st

from analysis import latency
from analysis.frame_metrics import finished
from labs.runs import frames
from labs.tail import experiment as lab
from ui import load_line, machine_speed, measure, predict, session, widgets

METRICS = {"ttft_s": ("TTFT", 1.0, "s"), "tpot_s": ("TPOT", 1000.0, "ms"), "e2e_s": ("E2E", 1.0, "s")}
SEGMENTS = {"prompt": "prompt length", "tenant": "tenant", "window": "time window", "none": "nothing (all requests)"}


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_run(step_model, rate: float, share: float, bursty: bool, seed: int):
    """The run on the simulator for these settings (read-only)."""
    return lab.simulated_tail_run(step_model, rate, share, bursty, seed)


@st.cache_resource(max_entries=16, show_spinner=False)
def arrival_rate(step_model, share: float) -> float:
    return lab.rate_for(step_model, share)

st.title("The average hides the tail")
st.caption("Two tenants share the engine: one sends steadily, one in bursts. A share of each one's prompts "
           "are long. Look past the median: at p95 and p99, and at who they belong to.")
load_line.show(*((p.tenant + " tenant", p.spec) for p in lab.tail_parts()[::2]))

with st.sidebar:
    widgets.choice(st.select_slider, "Long-prompt share", [0.0, 0.05, 0.1, 0.2], 0.1, key="ta_long",
                   format_func=lambda s: f"{s:.0%}",
                   help=f"The share of requests whose prompt is {lab.LONG_PROMPT.lo}–{lab.LONG_PROMPT.hi} tokens "
                        f"instead of {lab.SHORT_PROMPT.lo}–{lab.SHORT_PROMPT.hi}.")
    widgets.toggle("Bursty tenant", True, key="ta_bursty",
                   help="On: the second tenant sends in bursts with quiet gaps (same average rate). "
                        "Off: both send steadily.")
    widgets.number_input("Seed", 0, 999, 0, key="ta_seed",
                         help="Draws arrival times and lengths; same seed, same requests.")
    widgets.choice(st.radio, "Segment by", list(SEGMENTS), "prompt", key="ta_segment", format_func=SEGMENTS.get,
                   help="Split the percentiles and the CDF into groups, to see whose tail it is.")
    widgets.choice(st.radio, "Metric", list(METRICS), "ttft_s", key="ta_metric", format_func=lambda m: METRICS[m][0],
                   help="TTFT: wait for the first token. TPOT: average gap between tokens. E2E: the whole request.")
widgets.write_link(["ta_long", "ta_bursty", "ta_seed", "ta_segment", "ta_metric"])
share, bursty, seed = st.session_state.ta_long, st.session_state.ta_bursty, st.session_state.ta_seed
metric, segment = st.session_state.ta_metric, st.session_state.ta_segment
speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated
rate = arrival_rate(step_model, share)

st.markdown(f"The workload: requests at {rate:g} per second in all ({lab.LOAD:.0%} of what this machine's step model "
            f"says the engine finishes of this mix), half from each tenant, continuous batching with "
            f"{lab.POLICY.max_num_seqs} slots. The simulator runs {lab.SIM_REQUESTS} requests, the real engine "
            f"{lab.REQUESTS}.")
settings = (rate, share, bursty, seed)
named = {"long-prompt share": f"{share:.0%}", "bursty tenant": "on" if bursty else "off", "seed": seed}   # scored on
question = predict.question("tail", settings=named, help="p99: the time that 99 of 100 requests beat. Its distance from the median "
                                         "is how uneven the service is.")
guess = predict.gate(question)
group_q = predict.question("tail_group", choices=tuple(name for _, _, name in lab.PROMPT_BUCKETS), settings=named)
group_guess = predict.gate(group_q)
got, source = measure.measured_or_simulated(
    "tail", settings, lambda m, **kw: lab.tail_run(m, *settings, **kw), "Run this workload",
    lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), *settings)),
    "Running…", step_model, profiled, "every number, curve and table", lab="tail")
measured = got is not None
res, _ = got if measured else simulated_run(step_model, *settings)
reqs, _ = frames(res)
ttft = lab.percentile_table(reqs, "ttft_s").iloc[0]
if measured:
    predict.record("tail", named, ttft_p50=f"{ttft.p50:.2f} s", ttft_p99=f"{ttft.p99:.2f} s")
predict.reveal(question, guess, ttft.p99 / ttft.p50, f"p50 TTFT {ttft.p50:.2f} s, p99 {ttft.p99:.2f} s, from "
               f"{int(ttft.n)} requests.", measured_text=f"×{ttft.p99 / ttft.p50:.1f}", source=source)
by_prompt = lab.percentile_table(reqs, "ttft_s", lab.prompt_bucket(reqs["prompt_tokens"])).iloc[1:]
if len(by_prompt):
    predict.reveal(group_q, group_guess, predict.best_of(dict(zip(by_prompt["group"], by_prompt["p95"])), highest=True),
                   "p95 TTFT: " + ", ".join(f"{g.group} {g.p95:.2f} s (n = {int(g.n)})" for g in by_prompt.itertuples())
                   + ".", source=source)
# Each claim is judged only on a workload it is about: a cause needs long prompts or bursts to find,
# and the claim about busy windows is about bursts.
if lab.has_a_cause(share, bursty):
    predict.show_verdict(lab.cause_verdict(reqs), source)
else:
    predict.verdict_elsewhere(lab.cause_verdict(reqs), "set a long-prompt share above 0% or turn the bursty tenant "
                                                       "on in the sidebar")
if bursty:
    predict.show_verdict(lab.window_verdict(reqs), source)
else:
    predict.verdict_elsewhere(lab.window_verdict(reqs), "turn the bursty tenant on in the sidebar")
name, scale, unit = METRICS[metric]
by = {"prompt": lab.prompt_bucket(reqs["prompt_tokens"]), "tenant": reqs["tenant"], "window": lab.time_window(reqs),
      "none": None}[segment]
table = lab.percentile_table(reqs, metric, by, scale)
overall = table.iloc[0]
cols = st.columns(4)
for col, q in zip(cols, ("p50", "p90", "p95", "p99")):
    col.metric(f"{q} {name}, all requests", widgets.fmt(overall[q], unit), help=lab.tail_trust(int(overall.n), 99))
few = table[table["n"] < lab.MIN_TAIL_SAMPLES]
if len(few):
    st.warning("**Few samples.** " + "; ".join(f"{widgets.plain(g.group)}: n = {int(g.n)}" for g in few.itertuples())
               + f". A p99 needs well over {lab.MIN_TAIL_SAMPLES} requests per group to mean much: with n requests, "
               "only n/100 lie above it, so below 100 it is about the largest value seen, and one more slow request "
               "moves it. Read these p99s as \"the worst of a few\"; change the seed to see how much they move.")

widgets.plot(latency.cdf(reqs, metric, by=by))
if by is not None:
    st.markdown(lab.owner_words(table.assign(group=table["group"].map(widgets.plain)), name, unit, widgets.fmt))
table = table.assign(p99_from=[lab.tail_trust(int(n)) for n in table["n"]])
widgets.table(table.rename(columns={"group": SEGMENTS[segment] if by is not None else "group", "n": "requests",
                                   "p99_from": "how far p99 can be trusted"}), csv="tail")
with st.expander("Requests"):
    widgets.table(finished(reqs)[["id", "tenant", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s",
                                  "tpot_s", "e2e_s", "queue_s"]].rename(columns=widgets.REQUEST_COLUMNS))
widgets.definitions("\n- **Prompt-length buckets**: " + ", ".join(name for _, _, name in lab.PROMPT_BUCKETS)
                    + " (prompt tokens including the chat template)."
                    "\n- A **CDF** point (x, y) says: a share y of the group's requests took x or less.")
