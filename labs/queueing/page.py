"""Lab: queueing. Time in system against utilization (the simulator at once, then the real engine), beside the M/M/1 model,
and Little's Law checked on each run's own trace."""
import pandas as pd
import streamlit as st

from analysis import queue_charts
from labs.queueing import experiment as lab
from labs.runs import frames
from ui import load_line, machine_speed, measure, predict, session, widgets


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_runs(step_model, rhos: tuple):
    """mu and each utilization's run on the simulator (read-only)."""
    return lab.simulated_capacity_and_runs(step_model, rhos)


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_overload(step_model, mu: float, rhos: tuple):
    """The runs just below and past capacity, on the simulator (read-only): those of OVERLOAD_RHOS that
    the page's own simulated runs (`rhos`) lack."""
    return lab.simulated_capacity_and_runs(step_model, [r for r in lab.OVERLOAD_RHOS if r not in rhos], mu)[1]


st.title("Queueing")
st.caption("First the engine's sustained capacity μ for this workload is measured (its queue never empty). Then "
           "requests arrive at random (Poisson) at a chosen share of μ, for long enough that the queue settles, "
           "and we time how long each one waits and stays.")
load_line.show(("the capacity run", lab.capacity_spec()), ("each utilization", lab.run_spec(0.5, 1.0)))

CHOICES = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.1, 1.25]
with st.sidebar:
    widgets.choice(st.multiselect, "Utilizations to run (λ / μ)", CHOICES, lab.UTILIZATIONS, key="qu_rhos",
                   format_func=lambda r: f"{r:.0%}",
                   help="Each one is a run whose arrival rate λ is this share of the measured capacity μ. On the "
                        f"real engine each lasts about {lab.REAL_RUN_S:.0f} s of arrivals, so each one you add "
                        "costs that much. Above 100% requests arrive faster than the engine's capacity.")
widgets.write_link(["qu_rhos"])
rhos = sorted(st.session_state.qu_rhos) or [0.5]

spec = lab.SPEC
st.markdown(f"The workload: {load_line.workload(spec, lab.POLICY.max_num_seqs)}. The simulator runs "
            f"{lab.SIM_REQUESTS:,} requests per utilization; the real engine about {lab.REAL_RUN_S:.0f} s of arrivals each.")


def _estimate() -> str:
    cap = lab.service_rate_run(session.model_name(), peek=True)
    return widgets.estimate_text(*lab.estimate_s(session.model_name(), rhos,
                                                 lab.service_rate(cap[0]) if cap else None))


lo, hi = rhos[0], rhos[-1]
question = predict.question("queueing", lo=f"{lo:.0%}", hi=f"{hi:.0%}",
                            settings={"utilizations": ", ".join(f"{r:.0%}" for r in rhos)},
                            help="ρ is the share of the engine's capacity the arrivals ask for. The lesson's "
                                 "M/M/1 table is one way to reason about it.")
guess = predict.gate(question)
speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated
got, source = measure.measured_or_simulated(
    "queueing", tuple(rhos), lambda m, **kw: lab.capacity_and_runs(m, rhos, **kw),
    "Measure μ, then run each utilization", _estimate, "Measuring capacity, then each arrival rate…",
    step_model, profiled, "every number and chart", lab="queueing")
measured = got is not None
mu, runs = got if measured else simulated_runs(step_model, tuple(rhos))
points = lab.points_table(runs, mu)
first, last = points.iloc[0], points.iloc[-1]
ratio = last.queue_mean_s / first.queue_mean_s if first.queue_mean_s > 0 else float("inf")
because = (f"Mean queue time was {first.queue_mean_s:.3g} s at {first.rho:.0%} and {last.queue_mean_s:.3g} s at "
           f"{last.rho:.0%}.")
if measured:
    predict.record("queueing", {"utilizations": ", ".join(f"{r:.0%}" for r in rhos)}, mu=f"{mu:.2f} requests/s")
predict.reveal(question, guess, ratio, because, measured_text=f"×{ratio:.1f}", source=source)
explodes = lab.explodes_verdict(points, mu)
if lab.near_full(rhos):
    predict.show_verdict(explodes, source)
else:
    predict.verdict_elsewhere(explodes, f"add a utilization of {lab.NEAR_FULL:.0%} or more, below 100% (near "
                                        "full use), in the sidebar")
cols = st.columns(3)
cols[0].metric(f"Capacity μ ({source})", widgets.fmt(mu, "req/s"),
               help="Finished requests per second while the queue is never empty: the middle half of a run where "
                    "every request arrives at once.")
cols[1].metric(f"Queue time at {last.rho:.0%} vs {first.rho:.0%}",
               f"{widgets.seconds(last.queue_mean_s)} vs {widgets.seconds(first.queue_mean_s)}")
cols[2].metric(f"W at {last.rho:.0%} vs {first.rho:.0%}", f"{widgets.seconds(last.W_s)} vs {widgets.seconds(first.W_s)}",
               help="W, the time in system, is queue time plus the request's own service (prefill and decode).")
widgets.plot(lab.time_in_system(points, mu, source))
show = points[["rho", "finished", "lambda_set", "lambda_arrivals", "W_s", "W_mm1_s", "queue_mean_s",
               "service_mean_s", "waiting_max"]].rename(
    columns={"rho": "utilization ρ", "finished": "requests finished", "lambda_set": "λ set (req/s)",
             "lambda_arrivals": "λ drawn (req/s)", "W_s": f"W {source} (s)", "W_mm1_s": "W M/M/1 model (s)",
             "queue_mean_s": "mean queue time (s)", "service_mean_s": "mean service time (s)",
             "waiting_max": "most waiting"})
widgets.table(show, csv="queueing")
if drawn := lab.drawn_words(points):
    st.caption(drawn)

st.subheader("Past capacity: what tells you to add a replica")
past = [(rho, res, c) for rho, res, c in runs if rho >= 1]
if measured and past and len(runs) > 1:
    over, over_source = points, "measured"
else:
    sim_mu, sim_runs = (mu, runs) if not measured else simulated_runs(step_model, tuple(rhos))
    mine = [r for r in sim_runs if r[0] in lab.OVERLOAD_RHOS]
    over = lab.points_table(mine + simulated_overload(step_model, sim_mu, tuple(rhos)), sim_mu)
    over_source = "simulated"
st.markdown("The same workload just below capacity and past it: how busy the engine looked, and what its waiting "
            "queue did. " + ("Measured on the real engine." if over_source == "measured" else
                             f"On the simulator (runs at {', '.join(f'{r:.0%}' for r in lab.OVERLOAD_RHOS)}); add a "
                             "utilization above 100% to measure it on the real engine."))
predict.show_verdict(lab.overload_verdict(over), over_source)
widgets.table(over[["rho", "busy_share", "waiting_growth", "waiting_max", "queue_mean_s"]].rename(
    columns={"rho": "utilization ρ", "busy_share": "share of time busy", "waiting_growth": "waiting queue growth (req/s)",
             "waiting_max": "most waiting", "queue_mean_s": "mean queue time (s)"}))

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
                                     "holds": "Little's Law"}), csv="littles_law")

st.subheader("What Little's Law asks of the KV cache")
st.markdown("Every request inside holds its KV cache until it finishes. So if requests arrive at λ per second "
            "and the latency target lets each stay W seconds, about L = λ·W of them are inside at once, and the "
            "cache must hold L × (tokens each). Try your own service:")
kv_dtype = lab.run_dtype(runs[0][1]) if measured else lab.engine_dtype(session.model_name())
if st.session_state.get("qu_kv_source") != (source, round(mu, 4)):    # defaults follow the numbers shown above
    for key in ("qu_kv_lambda", "qu_kv_w"):
        st.session_state.pop(key, None)
    st.session_state.qu_kv_source = (source, round(mu, 4))
lam = widgets.number_input("Arrival rate λ (req/s)", 0.01, 10000.0, round(0.9 * mu, 2), key="qu_kv_lambda",
                           help=f"Defaults to 90% of the capacity above ({source}).")
w = widgets.number_input("Time in system W (s)", 0.01, 3600.0, round(float(last.W_s), 2),
                         key="qu_kv_w", help=f"What each request may take end to end; defaults to the W {source} "
                                             f"at {last.rho:.0%}.")
tokens = widgets.number_input("KV tokens per request", 1, 1 << 20, lab.SPEC.prompt_len.hi + lab.SPEC.output_len.hi,
                              key="qu_kv_tokens", help="Prompt + output: what a request holds when it ends. "
                                                       "Defaults to this lab's longest request.")
capacity = widgets.number_input("KV capacity (tokens)", 16, 1 << 24, lab.POLICY.kv_capacity_tokens, key="qu_kv_cap",
                                help="What the engine's KV cache may hold; defaults to this lab's engine.")
need = lab.kv_demand(lam, w, tokens, lab.kv_bytes_per_token(kv_dtype))
fits = need["tokens"] <= capacity
st.markdown(f"L = {lam:g} × {w:g} = **{need['inside']:.1f} requests inside**, × {widgets.plural(tokens, 'token')} = "
            f"**{need['tokens']:,.0f} tokens** of KV ({need['bytes'] / 2 ** 30:.2f} GiB for SmolLM2 in {kv_dtype}) "
            f"against {widgets.plural(capacity, 'token')}: "
            + (f"**✓ fits** ({need['tokens'] / capacity:.0%} of the cache)." if fits else
               f"**✗ does not fit**: {need['tokens'] / capacity:.1f}× the cache. The engine would preempt "
               "requests (or refuse them), and the latency target could not be met at this rate."))

pick = st.select_slider("Run shown below", list(points.rho), value=points.rho.iloc[-1],
                        format_func=lambda r: f"{r:.0%}", key="qu_pick",
                        help="Which utilization's queue to draw over time.")
res = next(r for rho, r, _ in runs if rho == pick)
widgets.plot(queue_charts.queue_over_time(frames(res)[1]))
widgets.definitions("- **μ** (sustained capacity) = finished requests per second over the middle half of a run "
                    "where every request arrives at once, so the queue is never empty there.\n"
                    "- **Queue time** = first scheduled − arrival; **service time** = W − queue time.\n"
                    "- **Share of time busy** = time inside engine steps / the span from the first arrival to the "
                    "last.\n- **Waiting queue growth** = the slope of a straight line through the waiting count "
                    "over that span.\n- **ρ** = λ / μ with λ the arrival rate the run was given; the drawn arrivals of a short "
                    "run differ a little (λ drawn).\n- **W** = mean (finish − arrival) = mean E2E latency.\n"
                    "- **M/M/1**: W = 1 / (μ − λ), a model, finite only for λ < μ.",
                    with_metrics=False)
