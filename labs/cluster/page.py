"""Lab: beyond one replica. Four routers on a shared-prefix workload, then two autoscalers under a
traffic ramp, on the simulated cluster: every replica is the engine's own scheduler on the virtual
clock. Predictions first; every sentence that states an outcome is worked out from the runs."""
import pandas as pd
import streamlit as st

from analysis import cluster as charts
from course import machines
from replicas.router import POLICIES, POLICY_HELP
from engine.sim.roofline import DEVICES
from labs.cluster import experiment as lab
from course import claims
from ui import load_line, measure, predict, widgets

PROFILES = [f"{d}:llama-3.1-8b" for d in ("l4", "a100-80gb", "h100-sxm") if d in DEVICES]


@st.cache_resource(max_entries=8, show_spinner=False)
def routing_runs(profile: str, replicas: int, load_bound: float):
    return lab.routing_runs(profile, replicas=replicas, load_bound=load_bound)


@st.cache_data(max_entries=8, show_spinner=False)
def claim_numbers(claim_id: str, profile: str) -> dict:
    """A claim's own runs (a workload or a pair of start-up delays this page's sliders do not set)."""
    return lab.CLAIM_RUNS[claim_id](profile)


@st.cache_resource(max_entries=8, show_spinner=False)
def autoscale_runs(profile: str, startup_s: float):
    return lab.autoscale_runs(profile, startup_s=startup_s)


def compare(a: float, b: float, lower: str, higher: str, same: str, tol: float = 0.02) -> str:
    """Words for a against b: `lower` if clearly below, `higher` if clearly above, else `same`."""
    if a < b * (1 - tol):
        return lower
    if a > b * (1 + tol):
        return higher
    return same


st.title("Beyond one replica: routing and autoscaling")
st.caption("Several copies of the engine behind a router, and an autoscaler that adds or removes copies. "
           "Each replica here is the engine's own scheduler on the simulator's clock: its batches are the ones a "
           "real replica would form. The router sees only what replicas report; the autoscaler sees one number.")
load_line.show(("routing", lab.SHARED), ("autoscaling", "open load whose rate rises and falls (a traffic ramp)"))

with st.sidebar:
    widgets.choice(st.selectbox, "Simulated replica", PROFILES, lab.PROFILE, key="cl_profile",
                   help="Each replica's step times come from a roofline model of this GPU serving Llama-3.1-8B "
                        "(spec-sheet figures, not a measurement).")
    widgets.slider("Replicas (routing)", 2, 16, lab.REPLICAS, key="cl_replicas",
                   help="How many replicas the router spreads the shared-prefix workload over.")
    widgets.slider("Load bound (prefix affinity)", 1.0, 3.0, lab.LOAD_BOUND, step=0.05, key="cl_bound",
                   help="Prefix affinity sends a request to the replica that last had its prefix unless that "
                        "replica would then hold more than this many times a fair share of the outstanding requests.")
    widgets.slider("Start-up delay of a new replica (s)", 0, 180, int(lab.AUTOSCALERS["waiting"].startup_s), step=5,
                   key="cl_startup", help="Scheduling a pod, pulling the image and loading the weights: the time before "
                                          "a replica the autoscaler asked for can take requests.")
widgets.write_link(["cl_profile", "cl_replicas", "cl_bound", "cl_startup"])
profile, replicas = st.session_state.cl_profile, st.session_state.cl_replicas
bound, startup = st.session_state.cl_bound, float(st.session_state.cl_startup)

# ----------------------------------------------------------------------------- routing
st.header("1. Which replica gets each request?")
spec = lab.SHARED
st.markdown(f"The workload: multi-turn chat. Every request starts with one of {spec.system_prompts} system prompts of "
            f"{spec.system_prompt_tokens:,} tokens, then its conversation so far ({spec.conversations} conversations of up "
            f"to {spec.turns} turns), then a new question. Traffic runs at {lab.LOAD:.0%} of what the replicas serve "
            "together; prefix caching is on in every replica. The routers: "
            + "; ".join(f"**{p}**: {POLICY_HELP[p]}" for p in POLICIES) + ".")
question = predict.question("cluster", choices=POLICIES, settings={"replica": profile, "replicas": replicas,
                                                                   "load bound": f"{bound:g}"},
                            help="Think about what each router knows: nothing, the load, the queue, or the prompt.")
guess = predict.gate(question)
with st.spinner(f"Simulating {len(POLICIES)} routers…"):
    runs = routing_runs(profile, replicas, bound)
best = predict.best_of({p: runs[p].summary["ttft_p95_s"] for p in runs})     # a tuple where routers tie
rr, aff = runs["round_robin"].summary, runs["prefix_affinity"].summary
predict.record("cluster", {"replica": profile, "replicas": replicas, "load bound": f"{bound:g}"}, best_router=" and ".join(predict.tied(best)), hit_round_robin=f"{rr['prefix_hit_rate']:.0%}",
               hit_affinity=f"{aff['prefix_hit_rate']:.0%}")
predict.reveal(question, guess, best,
               "p95 TTFT: " + ", ".join(f"{p} {runs[p].summary['ttft_p95_s']:.2f} s" for p in runs)
               + ". Prefix affinity found "
               f"{aff['prefix_hit_rate']:.0%} of prompt tokens in the caches against round-robin's "
               f"{rr['prefix_hit_rate']:.0%}: "
               + compare(aff["ttft_p95_s"], rr["ttft_p95_s"],
                         "the tokens it did not compute are time its requests did not wait for.",
                         "yet its p95 TTFT is higher: the slowest requests are set by bursts of queueing, which "
                         "the saved prefill does not remove (compare the p50 column).",
                         "the two p95 TTFTs are about the same: the saved prefill is small next to the queueing."),
               source="simulated", label=machines.roofline_label(profile))
widgets.plot(charts.routing_bars(runs))
widgets.table(pd.DataFrame(lab.routing_table(runs)), csv="cluster-routing")
groups = charts.prefix_groups(runs["round_robin"], lab.routing_requests(profile, spec, replicas))
left, right = st.columns(2)
with left:
    widgets.plot(charts.router_choices(runs["round_robin"], groups, "round_robin's choices"))
with right:
    widgets.plot(charts.router_choices(runs["prefix_affinity"], groups, "prefix_affinity's choices"))
st.subheader("The same routers on real servers")
st.markdown(f"{lab.REAL_REPLICAS} real engine servers of this page's model on this machine, a smaller shared-prefix "
            f"workload at {lab.REAL_LOAD:.0%} of what they serve (one server's capacity measured first), routed by "
            "round_robin and "
            "prefix_affinity. TTFT is timed by the client; the hit rates come from the servers' own /metrics.")
real = measure.stored_or_measure("cluster", lab.REAL_ROUTERS, lab.real_routing, "Run on real servers",
                                 lambda: widgets.estimate_text(lab.REAL_ESTIMATE_S, None),
                                 "Starting servers and routing…", stop=False)
if real is not None:
    got = real[0]
    r_rr, r_aff = got["round_robin"], got["prefix_affinity"]
    st.dataframe(pd.DataFrame([{"router": k, "p50 TTFT (s)": v["ttft_p50_s"], "p95 TTFT (s)": v["ttft_p95_s"],
                                "prefix hit rate": v["prefix_hit_rate"],
                                "load imbalance": v["load_imbalance"]} for k, v in got.items()]).round(3),
                 hide_index=True)
    same = (r_aff["prefix_hit_rate"] > r_rr["prefix_hit_rate"]) == (aff["prefix_hit_rate"] > rr["prefix_hit_rate"]) \
        and (r_aff["ttft_p50_s"] < r_rr["ttft_p50_s"]) == (aff["ttft_p50_s"] < rr["ttft_p50_s"])
    st.markdown(("The real servers agree with the simulation in direction: " if same else
                 "The real servers do **not** agree with the simulation in direction: ")
                + f"prefix affinity's hit rate {r_aff['prefix_hit_rate']:.0%} against round-robin's "
                f"{r_rr['prefix_hit_rate']:.0%}, p50 TTFT {r_aff['ttft_p50_s']:.2f} s against {r_rr['ttft_p50_s']:.2f} s "
                f"(simulated: {aff['ttft_p50_s']:.2f} s against {rr['ttft_p50_s']:.2f} s).")
shown = widgets.choice(st.selectbox, "Replicas' batches under", list(POLICIES), "prefix_affinity", key="cl_strips")
widgets.plot(charts.replica_strips(runs[shown], title=f"Each replica's batch and queue under {shown}"))

# ----------------------------------------------------------------------------- autoscaling
st.header("2. How many replicas?")
phases = lab.ramp_phases(profile)
lows, peak = min(x for _, x in lab.RAMP), max(x for _, x in lab.RAMP)
st.markdown(f"Traffic ramps from {lows:g}× what one replica serves to {peak:g}× and back: "
            + ", ".join(f"{rate:.1f} req/s for {seconds:g} s" for seconds, rate in phases)
            + f". Two autoscalers start from one replica and may add up to {lab.AUTOSCALERS['busy'].max_replicas}, "
            f"each new one ready {startup:g} s after it is asked for. One scales on **busy fraction** (the share of "
            "time a replica runs steps, what a GPU-utilization graph shows; target "
            f"{lab.AUTOSCALERS['busy'].target:g}), the other on **waiting requests** per replica "
            "(vllm:num_requests_waiting; target "
            f"{lab.AUTOSCALERS['waiting'].target:g}). Both look every "
            f"{lab.AUTOSCALERS['busy'].interval_s:g} s and scale as Kubernetes' HPA does.")
q2 = predict.question("cluster_scale", choices=tuple(lab.AUTOSCALER_NAMES.values()),
                      settings={"replica": profile, "start-up delay": f"{startup:g} s"},
                      help="A replica-second is one replica running (or starting) for one second: what you pay for.")
guess2 = predict.gate(q2)
with st.spinner("Simulating the ramp under both autoscalers…"):
    scaled = autoscale_runs(profile, startup)
b, w = scaled["busy"].summary, scaled["waiting"].summary
cheaper = predict.best_of({lab.AUTOSCALER_NAMES[k]: scaled[k].summary["replica_seconds"] for k in ("busy", "waiting")})
end = sum(s for s, _ in phases)
predict.reveal(q2, guess2, cheaper,
               f"Busy fraction: {b['replica_seconds']:,.0f} replica-seconds, {b['slo_attainment']:.0%} of requests "
               f"within the SLO, {lab.replicas_at(scaled['busy'], end)} replicas at the end. Waiting: "
               f"{w['replica_seconds']:,.0f} replica-seconds, {w['slo_attainment']:.0%} within the SLO, "
               f"{lab.replicas_at(scaled['waiting'], end)} at the end. "
               + compare(b["slo_attainment"], w["slo_attainment"],
                         "Busy fraction also met the SLO less often.",
                         "Busy fraction met the SLO more often: it scaled before the queue grew"
                         + (", and paid for it in replicas it kept when the traffic fell."
                            if cheaper == lab.AUTOSCALER_NAMES["waiting"] else "."),
                         "Both met the SLO about equally often.", tol=0.01),
               source="simulated", label=machines.roofline_label(profile))
widgets.plot(charts.replicas_over_time(scaled, phases, lab.AUTOSCALER_NAMES))
widgets.table(pd.DataFrame(lab.autoscale_table(scaled)), csv="cluster-autoscaling")
left, right = st.columns(2)
with left:
    widgets.plot(charts.replica_strips(scaled["busy"], title="Replicas under the busy-fraction autoscaler"))
with right:
    widgets.plot(charts.replica_strips(scaled["waiting"], title="Replicas under the waiting autoscaler"))

# ----------------------------------------------------------------------------- claims
st.header("The lesson's claims")
st.markdown("Each verdict below is worked out from a simulated run: the first from the routing runs above and the "
            "third from the ramp above (with this page's settings), the other two from runs of their own (one system "
            f"prompt in every request; start-up delays of {lab.STARTUPS_S[0]:g} s and {lab.STARTUPS_S[1]:g} s). "
            "`python -m labs.cluster.check` runs the "
            "main cases on real engine servers.")
own = {"prefix_affinity_hits": lab.router_numbers(runs), "busy_fraction_overprovisions": lab.autoscaler_numbers(scaled)}
for c in claims.for_lab("cluster"):
    with st.spinner(f"Simulating the runs for “{c.id}”…"):
        numbers = own.get(c.id) or claim_numbers(c.id, profile)
    predict.show_verdict(lab.VERDICTS[c.id](numbers), source="simulated", label=machines.roofline_label(profile))
widgets.definitions(
    "\n- **Prefix hit rate** (cluster): prompt tokens found in the replicas' prefix caches / prompt tokens looked up."
    "\n- **Load imbalance**: the busiest replica's time spent running steps over the mean (1.0 = even)."
    "\n- **SLO attainment**: the share of all requests that finished within the TTFT and TPOT targets "
    f"({lab.POLICY.ttft_slo_s:g} s, {lab.POLICY.tpot_slo_s:g} s)."
    "\n- **Replica-seconds**: every replica's time from being asked for to being gone, summed.")
