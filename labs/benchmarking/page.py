"""Lab: benchmarking honestly. One engine under a closed loop and under open load at the same throughput
(the simulator at once, then the real engine), the first requests of a run, and the p99 of repeats."""
import pandas as pd
import streamlit as st

from labs.benchmarking import experiment as lab
from ui import load_line, machine_speed, measure, predict, session, widgets


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_pair(step_model, clients: int):
    """The closed loop and the open load at its throughput, on the simulator (read-only)."""
    return lab.simulated(step_model, clients)


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_p99s(step_model, rate: float, clients: int):
    return lab.simulated_p99s(step_model, rate, clients)


st.title("Benchmarking honestly")
st.caption("The same engine under two kinds of load at the same throughput, the first requests of each run, and "
           "the p99 of repeats of one setting.")
load_line.show(("first", load_line.CLOSED), ("then, at the closed loop's own throughput", lab.open_spec(lab.NEAR, 1.0)))

with st.sidebar:
    widgets.choice(st.select_slider, "Clients in the closed loop", lab.CONCURRENCIES, lab.NEAR, key="bench_clients",
                   help=f"How many requests the closed loop keeps in flight. The engine has "
                        f"{lab.POLICY.max_num_seqs} batch slots: {lab.NEAR} or more clients keep it near capacity, "
                        f"{lab.LIGHT} is a light load.")
widgets.write_link(["bench_clients"])
clients = int(st.session_state.bench_clients)

spec = lab.SPEC
st.markdown(f"The workload: {load_line.workload(spec, lab.POLICY.max_num_seqs)}. The real engine runs "
            f"{lab.requests_for(clients)} requests per run (the simulator {lab.SIM_REQUESTS}); the first {lab.warmup_count(clients)} of every run are warm-up, left out of the percentiles.")


def _estimate() -> str:
    return widgets.estimate_text(*lab.estimate_s(session.model_name(), clients))


question = predict.question("benchmarking", clients=str(clients), settings={"clients": clients},
                            help="In the closed loop a client waits for its answer before it sends again; under open "
                                 "load nobody waits to send.")
guess = predict.gate(question)
speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated
got, source = measure.measured_or_simulated(
    "benchmarking", (clients,), lambda m, **kw: lab.measure(m, clients, **kw),
    "Run the closed loop, then open load at its throughput, then the repeats", _estimate,
    "Running the closed loop, the open load and the repeats…", step_model, profiled, "every number and chart",
    lab="benchmarking")
measured = got is not None
if measured:
    closed, opened, x, reps = got
else:
    closed, opened, x = simulated_pair(step_model, clients)
    reps = None
c, o = lab.run_numbers(closed, clients), lab.run_numbers(opened, clients)
ratio = o["ttft_p95"] / c["ttft_p95"] if c["ttft_p95"] > 0 else float("inf")
if measured:
    predict.record("benchmarking", {"clients": clients}, clients=str(clients), throughput=f"{x:.2f} requests/s")
predict.reveal(question, guess, ratio, f"p95 TTFT {widgets.seconds(c['ttft_p95'])} in the closed loop, "
               f"{widgets.seconds(o['ttft_p95'])} under open load, both at {x:.2f} requests/s ({source}).",
               measured_text=f"×{ratio:.1f}", source=source)
verdict = lab.hidden_queue_verdict(c, o, x, clients, lab.speed_check(closed, opened) if measured else None)
if lab.near_capacity(clients):
    predict.show_verdict(verdict, source)
else:
    predict.verdict_elsewhere(verdict, f"pick {lab.NEAR} clients or more (near capacity)")

cols = st.columns(3)
cols[0].metric(f"Throughput, closed vs open ({source})", f"{c['throughput']:.2f} vs {o['throughput']:.2f} req/s",
               help="Closed loop vs open load: finished requests per second from the first counted arrival to the "
                    "last finish. The open load is given the closed loop's throughput as its rate.")
cols[1].metric("p95 TTFT, closed vs open", f"{widgets.seconds(c['ttft_p95'])} vs {widgets.seconds(o['ttft_p95'])}")
cols[2].metric("Most waiting in the engine, closed vs open", f"{c['waiting_max']} vs {o['waiting_max']}")
widgets.plot(lab.queues_figure(closed, opened, source))
st.caption("The dotted line counts requests the open schedule had sent by then that the closed loop had not yet: "
           "users who, in the closed loop, were never let in. A server's own queue metric cannot see them.")

st.subheader("The first requests of a run")
runs = [("closed loop", closed), ("open load", opened)] + ([(f"repeat {i + 1}", r) for i, r in enumerate(reps[1:], 1)]
                                                             if reps else [])
warm = [{"run": name, **lab.warmup_numbers(r, clients)} for name, r in runs]
first = warm[0]
if measured:
    slower = first["first_step_ms"] / first["median_step_ms"] if first["median_step_ms"] > 0 else float("nan")
    st.markdown(f"On this machine's engine, the closed loop's first step took {first['first_step_ms']:.0f} ms against a "
                f"median step of {first['median_step_ms']:.0f} ms (×{slower:.1f}); its first {lab.warmup_count(clients)} requests "
                f"waited {widgets.seconds(first['first_ttft'])} for a first token on average, the rest "
                f"{widgets.seconds(first['rest_ttft'])}. "
                + ("The first requests paid for a cold start here: leave them out." if slower > 1.5 else
                   "Here the model was already warm from an earlier run, so the first step cost about what the others "
                   "did; a freshly started server is another matter (first forward passes, memory first touched)."))
else:
    st.markdown("The simulator's step model has no cold start: every step of a shape takes the same time, so its "
                "first requests differ only by arriving together. Run the real engine to see its first steps.")
widgets.table(pd.DataFrame(warm).rename(columns={
    "first_ttft": f"mean TTFT, first {lab.warmup_count(clients)} (s)", "rest_ttft": "mean TTFT, the rest (s)",
    "first_step_ms": "first step (ms)", "median_step_ms": "median step (ms)"}))

st.subheader("How far a p99 moves between repeats")
sim_x = x if not measured else simulated_pair(step_model, clients)[2]     # the simulator's own closed-loop rate
sim = simulated_p99s(step_model, sim_x, clients)
few, many = (sim[sim["requests"] == n]["p99"] for n in (lab.FEW, lab.MANY))
real = lab.p99_table(reps, clients) if reps else None
words = (f"Simulated, {lab.SIM_REPEATS} repeats of open load at the simulated closed loop's throughput, "
         f"{sim_x:.2f} req/s: with {lab.FEW} requests a run "
         f"the p99 rests on the single slowest request, and the repeats ranged {widgets.seconds(few.min())}–"
         f"{widgets.seconds(few.max())} (×{lab.spread(few):.1f}); with {lab.MANY:,} requests, on the slowest "
         f"{lab.MANY // 100}, they ranged {widgets.seconds(many.min())}–{widgets.seconds(many.max())} "
         f"(×{lab.spread(many):.1f}).")
if real is not None:
    words += (f" Measured on this machine's engine, {lab.REPEATS} repeats of {int(real['requests'].iloc[0])} counted "
              f"requests: p99 TTFT {', '.join(widgets.seconds(v) for v in real['ttft_p99'])} "
              f"(×{lab.spread(real['ttft_p99']):.1f} from the lowest to the highest).")
st.markdown(words)
widgets.plot(lab.p99_figure(sim, real))
if real is not None:
    widgets.table(real[["repeat", "seed", "requests", "throughput", "ttft_p50", "ttft_p95", "ttft_p99"]].rename(
        columns={"throughput": "throughput (req/s)", "ttft_p50": "p50 TTFT (s)", "ttft_p95": "p95 TTFT (s)",
                 "ttft_p99": "p99 TTFT (s)"}), csv="benchmark_repeats")

st.subheader("The same two loads from a benchmark tool")
st.markdown("Against `python -m engine serve --port 8000` (an OpenAI-compatible server), the closed loop and the "
            "open load of this page are written as below. Both tools make prompts of a set token count with a "
            "tokenizer: give them the model's own (`HuggingFaceTB/SmolLM2-135M-Instruct`, or a folder holding its "
            "tokenizer.json).")
st.code(f"""# vLLM's client: a closed loop of {clients}, then open load at the closed loop's throughput
vllm bench serve --base-url http://127.0.0.1:8000 --model smollm2 \\
  --tokenizer HuggingFaceTB/SmolLM2-135M-Instruct --dataset-name random \\
  --random-input-len 40 --random-output-len 16 --num-prompts 200 --num-warmups {lab.warmup_count(clients)} \\
  --request-rate inf --max-concurrency {clients}
vllm bench serve ... --request-rate {x:.2f} --burstiness 1.0
# guidellm 0.8 (0.5 and before: guidellm benchmark --rate-type concurrent --rate {clients})
guidellm run --backend kind=openai_http,target=http://127.0.0.1:8000 \\
  --tokenizer kind=hf_auto,model=HuggingFaceTB/SmolLM2-135M-Instruct \\
  --data kind=synthetic_text,prompt_tokens=40,output_tokens=16 \\
  --constraint kind=max_requests,count=200 --profile kind=concurrent,streams={clients}
guidellm run ... --profile kind=poisson,rate={x:.2f}""", language="bash")
widgets.definitions(f"- **Closed loop**: {clients} clients; each sends its next request the moment its last one ends "
                    "(no think time).\n- **Open load**: Poisson arrivals at the closed loop's throughput X; the "
                    "server's speed does not change when they come.\n- **Throughput** = counted requests / (last "
                    "finish − first counted arrival).\n- **Behind the open schedule** = requests the open run had "
                    "sent by a moment that the closed loop had not.\n- **Spread** = the highest p99 of the repeats "
                    "÷ the lowest.", with_metrics=False)
