"""Lab: queueing. Time in system against utilization (the simulator at once, then the real engine), beside the M/M/1 model,
and Little's Law checked on each run's own trace."""
import pandas as pd
import streamlit as st

from analysis import queue
from labs.queueing import experiment as lab
from labs.runs import frames
from ui import calculators, predict, session, widgets


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_runs(step_model, rhos: tuple):
    """mu and each utilization's run on the simulator (read-only)."""
    return lab.simulated_capacity_and_runs(step_model, rhos)


st.title("Queueing")
st.caption("First the engine's capacity μ for this workload is measured (every request at once). Then "
           "requests arrive at random (Poisson) at a chosen share of μ, and we time how long each stays.")

CHOICES = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.1, 1.25]
with st.sidebar:
    widgets.choice(st.multiselect, "Utilizations to run (λ / μ)", CHOICES, lab.UTILIZATIONS, key="qu_rhos",
                   format_func=lambda r: f"{r:.0%}",
                   help="Each one is a run whose arrival rate λ is this share of the measured capacity μ. "
                        "Near 100% a short run is noisy, and takes longer: the run lasts about "
                        "requests / λ seconds. Above 100% requests arrive faster than the engine's measured "
                        "capacity and the queue can only grow.")
widgets.write_link(["qu_rhos"])
rhos = sorted(st.session_state.qu_rhos) or [0.5]

spec = lab.SPEC
st.markdown(f"The workload: {spec.num_requests} requests, prompts {spec.prompt_len.lo}–{spec.prompt_len.hi} "
            f"tokens, outputs {spec.output_len.lo}–{spec.output_len.hi}, continuous batching with "
            f"{lab.POLICY.max_num_seqs} slots.")


def _estimate() -> str:
    cap = lab.service_rate_run(session.model_name(), peek=True)
    return widgets.estimate_text(*lab.estimate_s(session.model_name(), rhos,
                                                 lab.service_rate(cap[0]) if cap else None))


lo, hi = rhos[0], rhos[-1]
question = predict.Question(
    "queueing", f"A request's mean time in the system W at ρ = {lo:.0%} is some number of seconds. How many times "
    f"that will W be at ρ = {hi:.0%}?", lo=0.1, hi=1000.0, default=1.0, unit="×",
    help="ρ is the share of the engine's capacity the arrivals ask for. The M/M/1 model says "
         "W = 1 / (μ − λ): at 90% that is 7 times W at 30%.")
guess = predict.gate(question)
step_model, profiled = calculators.machine_step_model()
got = widgets.stored_or_measure("queueing", tuple(rhos), lambda m, **kw: lab.capacity_and_runs(m, rhos, **kw),
                                "Measure μ, then run each utilization", _estimate,
                                "Measuring capacity, then each arrival rate…", stop=False)
widgets.simulated_first_caption(step_model, profiled, "Measure μ, then run each utilization", got is not None,
                                "every number and chart")
measured = got is not None
mu, runs = got if measured else simulated_runs(step_model, tuple(rhos))
points = pd.DataFrame([lab.queue_point(rho, res, mu) for rho, res, _ in runs])
ratio = points.W_s.iloc[-1] / points.W_s.iloc[0]
because = (f"W was {points.W_s.iloc[0]:.2f} s at {lo:.0%} and {points.W_s.iloc[-1]:.2f} s at {hi:.0%}. "
           "Queueing time explodes as ρ nears 100%: arrivals come in random clumps, and a clump that arrives "
           "while the engine is busy waits. The engine rises less steeply than M/M/1 because it batches: the "
           "longer the queue, the more requests share each step.")
if measured:
    predict.record("queueing", mu=f"{mu:.2f} requests/s")
    predict.reveal(question, guess, ratio, because, measured_text=f"×{ratio:.1f}")
else:
    widgets.simulated_answer(f"×{guess:g}", f"W at {hi:.0%} is **×{ratio:.1f}** W at {lo:.0%}", because)
cols = st.columns(3)
cols[0].metric("Capacity μ (measured)" if measured else "Capacity μ (simulated)", widgets.fmt(mu, "req/s"),
               help="Finished requests / duration when every request arrives at once.")
cols[1].metric("1/μ at full batch", widgets.fmt(1 / mu, "s"),
               help="The inverse of the all-at-once capacity: with the batch full, one request finishes every "
                    "1/μ seconds on average. It is not how long one request takes: each one takes its whole "
                    "prefill and decode, several times 1/μ, while others run beside it.")
cols[2].metric(f"W at {points.rho.max():.0%} vs {points.rho.min():.0%}",
               f"{points.W_s.iloc[-1]:.2f} vs {points.W_s.iloc[0]:.2f} s")
source = "measured" if measured else "simulated"
widgets.plot(lab.time_in_system(points, mu, source))
st.markdown("The M/M/1 curve is a model of one server with random service times, drawn for the measured μ. "
            "The engine is not one: it batches, so it serves faster as the queue grows, and even alone a request "
            "takes its full decode time. Its points sit elsewhere, but they bend upward the same way. Each point "
            f"is one run of {lab.SPEC.num_requests} requests: near 100% a run that short is noisy, so read the "
            "trend, not a single point.")
show = points[["rho", "lambda_set", "lambda_arrivals", "W_s", "W_mm1_s", "queue_mean_s", "waiting_max"]].rename(
    columns={"rho": "utilization ρ", "lambda_set": "λ set (req/s)", "lambda_arrivals": "λ drawn (req/s)",
             "W_s": f"W {source} (s)", "W_mm1_s": "W M/M/1 model (s)", "queue_mean_s": "mean queue time (s)",
             "waiting_max": "most waiting"})
widgets.table(show.round(3), csv="queueing")

st.subheader("Little's Law on a window cut from each run")
st.markdown("L = λ·W: the average number of requests inside equals the arrival rate times the mean time each "
            "stays. The check takes the middle half of each run. **L (engine counters)** averages the engine's "
            "own per-step waiting + running counts over that window; **λ** and **W** come from the requests that "
            "arrived in it, from their timestamps. A window cut mid-run has edges: requests already inside "
            "when it opens, and requests still inside when it closes, make L differ from λ·W by an amount the "
            "timestamps give (**edge**). The law holds when L matches λ·W + edge within "
            f"{lab.LITTLE_TOLERANCE:.0%}.")
little = points[["rho", "window_arrivals", "L_steps", "lambda", "W_window_s", "lambda_W", "edge", "gap", "holds"]]
little = little.assign(holds=little["holds"].map({True: "✓ holds", False: "✗ does not hold"}))
widgets.table(little.rename(columns={"rho": "utilization ρ", "window_arrivals": "arrivals in window",
                                     "L_steps": "L (engine counters)", "lambda": "λ (req/s)", "W_window_s": "W (s)",
                                     "lambda_W": "λ·W", "edge": "edge", "gap": "gap (share of L)",
                                     "holds": "Little's Law"}).round(3), csv="littles_law")

st.subheader("What Little's Law asks of the KV cache")
st.markdown("Every request inside holds its KV cache until it finishes. So if requests arrive at λ per second "
            "and the latency target lets each stay W seconds, about L = λ·W of them are inside at once, and the "
            "cache must hold L × (tokens each). Try your own service:")
lam = widgets.number_input("Arrival rate λ (req/s)", 0.01, 10000.0, round(0.9 * mu, 2), key="qu_kv_lambda",
                           help="Defaults to 90% of the capacity above.")
w = widgets.number_input("Time in system W (s)", 0.01, 3600.0, round(float(points.W_s.iloc[-1]), 2),
                         key="qu_kv_w", help="What each request may take end to end; defaults to the W measured "
                                             f"at {hi:.0%}.")
tokens = widgets.number_input("KV tokens per request", 1, 1 << 20, lab.SPEC.prompt_len.hi + lab.SPEC.output_len.hi,
                              key="qu_kv_tokens", help="Prompt + output: what a request holds when it ends. "
                                                       "Defaults to this lab's longest request.")
capacity = widgets.number_input("KV capacity (tokens)", 16, 1 << 24, lab.POLICY.kv_capacity_tokens, key="qu_kv_cap",
                                help="What the engine's KV cache may hold; defaults to this lab's engine.")
need = lab.kv_demand(lam, w, tokens)
fits = need["tokens"] <= capacity
st.markdown(f"L = {lam:g} × {w:g} = **{need['inside']:.1f} requests inside**, × {tokens} tokens = "
            f"**{need['tokens']:,.0f} tokens** of KV ({need['bytes'] / 2 ** 30:.2f} GiB for SmolLM2 in float32) "
            f"against {capacity:,} tokens: "
            + (f"**✓ fits** ({need['tokens'] / capacity:.0%} of the cache)." if fits else
               f"**✗ does not fit**: {need['tokens'] / capacity:.1f}× the cache. The engine would preempt "
               "requests (or refuse them), and the latency target could not be met at this rate."))

pick = st.select_slider("Run shown below", [p for p in points.rho], value=points.rho.iloc[-1],
                        format_func=lambda r: f"{r:.0%}", key="qu_pick",
                        help="Which utilization's queue to draw over time.")
res = next(r for rho, r, _ in runs if rho == pick)
widgets.plot(queue.queue_over_time(frames(res)[1]))
widgets.definitions("- **μ** (capacity) = finished requests / duration of a run where every request arrives at "
                    "once.\n- **ρ** = λ / μ with λ the arrival rate the run was given; the drawn arrivals of a short "
                    "run differ a little (λ drawn).\n- **W** = mean (finish − arrival) = mean E2E latency.\n"
                    "- **M/M/1**: W = 1 / (μ − λ), a model, finite only for λ < μ.",
                    with_metrics=False)
