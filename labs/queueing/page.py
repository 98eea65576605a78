"""Lab: queueing. Time in system against utilization on the real engine, beside the M/M/1 model,
and Little's Law checked on each run's own trace."""
import pandas as pd
import streamlit as st

from analysis import queue
from labs.queueing import experiment as lab
from labs.runs import frames
from ui import widgets

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


got = widgets.stored_or_measure("queueing", tuple(rhos), lambda m, **kw: lab.capacity_and_runs(m, rhos, **kw),
                                "Measure μ, then run each utilization",
                                f"about {8 + sum(6 / r for r in rhos):.0f} s",
                                "Measuring capacity, then each arrival rate…")

mu, runs = got
points = pd.DataFrame([lab.queue_point(rho, res, mu) for rho, res, _ in runs])
cols = st.columns(3)
cols[0].metric("Capacity μ (measured)", widgets.fmt(mu, "req/s"),
               help="Finished requests / duration when every request arrives at once.")
cols[1].metric("Service time 1/μ", widgets.fmt(1 / mu, "s"))
cols[2].metric(f"W at {points.rho.max():.0%} vs {points.rho.min():.0%}",
               f"{points.W_s.iloc[-1]:.2f} vs {points.W_s.iloc[0]:.2f} s")
widgets.plot(lab.time_in_system(points, mu))
st.markdown("The M/M/1 curve is a model of one server with random service times, drawn for the measured μ. "
            "The engine is not one: it batches, so it serves faster as the queue grows, and even alone a request "
            "takes its full decode time. Its points sit elsewhere, but they bend upward the same way.")
show = points[["rho", "lambda_set", "lambda_arrivals", "W_s", "W_mm1_s", "queue_mean_s", "waiting_max"]].rename(
    columns={"rho": "utilization ρ", "lambda_set": "λ set (req/s)", "lambda_arrivals": "λ drawn (req/s)",
             "W_s": "W measured (s)", "W_mm1_s": "W M/M/1 model (s)", "queue_mean_s": "mean queue time (s)",
             "waiting_max": "most waiting"})
widgets.table(show.round(3))

st.subheader("Little's Law on each run's own trace")
st.markdown("L = λ·W holds for any system that starts and ends empty. **L (requests)** is the time-averaged "
            "number of requests between arrival and finish; **λ** is finished requests / that time span; "
            "**W** is the mean time in system. **L (engine counters)** averages the engine's own per-step "
            "waiting + running counts over the same span: an independent measurement.")
little = points[["rho", "L", "L_steps", "lambda", "W_s", "lambda_W"]].rename(
    columns={"rho": "utilization ρ", "L": "L (requests)", "L_steps": "L (engine counters)",
             "lambda": "λ (req/s)", "W_s": "W (s)", "lambda_W": "λ·W"})
widgets.table(little.round(3))

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
