"""Lab: what continuous batching costs. A long prompt stalls running decodes (unless prefill is
chunked, and depending on who fills a step first), and a small KV cache forces preemptions. Each
part answers at once from the simulator; the real runs replace it."""
import streamlit as st

from analysis import kv
from analysis.frame_metrics import finished
from engine.core.config import SchedulerPolicy
from engine.core.knobs import knobs_of
from labs.costs import experiment as lab
from labs.runs import frames
from ui import load_line, machine_speed, measure, predict, session, widgets

KNOBS = knobs_of(SchedulerPolicy)      # labels and help as the policy declares them
STEP_PRIORITY = KNOBS["step_priority"]


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_stall(step_model, arrivals: tuple, long_len: int, budget: int, priority: str):
    return lab.simulated_stall_runs(step_model, long_len, budget, priority, arrivals)


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_kv(step_model, capacity: int):
    return lab.simulated_kv_run(step_model, capacity)



st.title("What continuous batching costs")
st.caption("Admitting work at every step means a long prompt can land in the middle of streams that are "
           "already decoding, and every admitted request holds KV-cache memory until it finishes.")
load_line.show(("the stall", "the running streams " + load_line.AT_ONCE + ", then each long prompt at a set time"),
               ("the KV part", lab.KV_SPEC))

with st.sidebar:
    widgets.slider("Long prompt length (tokens)", 256, 1536, lab.LONG_PROMPT, step=128, key="co_long",
                   help="How long the prompts are that arrive while the other requests are decoding.")
    widgets.slider(f"{KNOBS['max_num_batched_tokens'].label} (chunked run)", 64, 512, lab.BUDGET, step=64,
                   key="co_budget", help=KNOBS["max_num_batched_tokens"].help)
    widgets.choice(st.radio, STEP_PRIORITY.label, STEP_PRIORITY.choices, lab.STEP_PRIORITY, key="co_priority",
                   help=STEP_PRIORITY.help)
    widgets.slider(KNOBS["kv_capacity_tokens"].label, lab.KV_MIN, lab.KV_DEFAULT, lab.KV_SMALL, step=128, key="co_kv",
                   help=KNOBS["kv_capacity_tokens"].help)
widgets.write_link(["co_long", "co_budget", "co_priority", "co_kv"])

# ----- 1. chunked prefill
st.header("1 · A long prompt arrives into running decodes")
long_len, budget, priority = st.session_state.co_long, st.session_state.co_budget, st.session_state.co_priority
speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated
arrivals = lab.long_arrivals(step_model)
off_budget = lab.stall_policy(False, budget, long_len).max_num_batched_tokens
first = ("running decodes take their tokens first and the prompt gets what is left" if priority == "decode_first"
         else "the waiting prompt is admitted first and the decodes get what is left")
st.markdown(f"{lab.DECODE_STREAMS} requests start decoding at t = 0 ({lab.DECODE_OUTPUT} tokens each). "
            f"Prompts of {long_len} tokens arrive at t = {', '.join(f'{t:g}' for t in arrivals)} s "
            f"({' and '.join(f'{x:.0%}' for x in lab.ARRIVAL_SHARES)} of the way through the decodes, as this "
            f"machine's step model predicts them). "
            f"Chunked prefill **on**: budget {budget} tokens a step, so a long prompt is prefilled over several "
            f"steps. **Off**: a prompt must fit in one step whole, so the budget is raised to {off_budget} "
            f"(as vLLM requires). Step priority **{priority}**: in each step {first}.")
settings = (arrivals, long_len, budget, priority)
named = {"long prompt": f"{long_len} tokens", "token budget": budget, "step priority": priority}
stall_q = predict.question("costs_stall", settings=named)
stall_guess = predict.ask(stall_q)
if stall_guess is not None:
    got, stall_source = measure.measured_or_simulated(
        "costs_stall", settings, lambda m, **kw: lab.stall_runs(m, *settings, **kw), "Run with chunking off and on",
        lambda: widgets.estimate_text(*lab.stall_estimate_s(session.model_name(), *settings)),
        "Chunked prefill off, then on…", step_model, profiled, "every number and the chart of this part", lab="costs")
    stall_measured = got is not None
    got = got if stall_measured else simulated_stall(step_model, *settings)
    summ = {k: lab.stall_summary(res) for k, (res, _) in got.items()}
    off, on = summ["off"], summ["on"]
    stall_ratio = off["decode_gap_max_ms"] / off["decode_gap_p50_ms"]
    if stall_measured:
        predict.record("costs", named, max_gap_off=f"{off['decode_gap_max_ms']:.0f} ms",
                       max_gap_on=f"{on['decode_gap_max_ms']:.0f} ms")
    predict.reveal(stall_q, stall_guess, stall_ratio, f"The usual gap was {off['decode_gap_p50_ms']:.0f} ms, the "
                   f"longest {off['decode_gap_max_ms']:.0f} ms.", measured_text=f"×{stall_ratio:.1f}", source=stall_source)
    predict.show_verdict(lab.stall_verdict(off, on, long_len), stall_source)
    cols = st.columns(4)
    cols[0].metric("Longest token gap, off", widgets.fmt(off["decode_gap_max_ms"], "ms", 0),
                   help="The longest wait between two tokens of a request that was already decoding.")
    cols[1].metric("Longest token gap, on", widgets.fmt(on["decode_gap_max_ms"], "ms", 0),
                   delta=widgets.difference(on["decode_gap_max_ms"], off["decode_gap_max_ms"], 0, "ms vs off"),
                   delta_color="inverse")
    cols[2].metric("Long prompts' TTFT, off", widgets.fmt(off["long_ttft_mean_s"], "s"), help="Mean over the long prompts.")
    cols[3].metric("Long prompts' TTFT, on", widgets.fmt(on["long_ttft_mean_s"], "s"),
                   delta=widgets.difference(on["long_ttft_mean_s"], off["long_ttft_mean_s"], 2, "s vs off"),
                   delta_color="inverse",
                   help="Chunking spreads a long prompt over several steps, which can delay its first token.")
    st.caption(f"Typical (p50) gap: {off['decode_gap_p50_ms']:.0f} ms off, {on['decode_gap_p50_ms']:.0f} ms on; "
               f"p99: {off['decode_gap_p99_ms']:.0f} ms off, {on['decode_gap_p99_ms']:.0f} ms on.")
    series = {f"chunked prefill {key}": lab.decode_token_times(res) for key, (res, _) in got.items()}
    widgets.plot(lab.token_gaps(series, list(arrivals)))

# ----- 2. KV capacity
st.header("2 · A KV cache too small for the batch")
capacity = st.session_state.co_kv
spec = lab.KV_SPEC
st.markdown(f"{spec.num_requests} requests arrive at once (prompts {spec.prompt_len.lo}–{spec.prompt_len.hi}, "
            f"outputs {spec.output_len.lo}–{spec.output_len.hi} tokens), up to {lab.KV_SLOTS} running together. "
            f"The cache may hold **{capacity} tokens**; all {lab.KV_SLOTS} at their longest need about "
            f"{lab.KV_NEED}.")
kv_q = predict.question("costs_kv", capacity=f"{capacity:,}", settings={"KV capacity": f"{capacity:,} tokens"})
kv_guess = predict.ask(kv_q)
if kv_guess is not None:
    got_kv, kv_source = measure.measured_or_simulated(
        "costs_kv", capacity, lambda m, **kw: lab.kv_run(m, capacity, **kw), "Run at this KV capacity",
        lambda: widgets.estimate_text(*lab.kv_estimate_s(session.model_name(), capacity)),
        f"KV capacity {capacity} tokens…", step_model, profiled, "every number of this part",
        "every request arrives at once, so the simulated preemptions are the real scheduler's; only the times "
        "are predicted", lab="costs")
    kv_measured = got_kv is not None
    res, _ = got_kv if kv_measured else simulated_kv(step_model, capacity)
    k = lab.kv_summary(res)
    predict.reveal(kv_q, kv_guess, k["preemptions"], f"{k['recomputed_tokens']} prompt tokens were prefilled again.",
                   source=kv_source)
    if lab.kv_too_small(capacity):
        predict.show_verdict(lab.kv_verdict(k, capacity), kv_source)
    else:
        predict.verdict_elsewhere(lab.kv_verdict(k, capacity), f"set the KV capacity below {lab.KV_NEED:,} tokens "
                                                               "(too small for the batch) in the sidebar")
    reqs, steps = frames(res)
    cols = st.columns(4)
    cols[0].metric("Preemptions", k["preemptions"], help="Times a running request lost its KV blocks "
                   "and went back to the queue, to be prefilled again later.")
    cols[1].metric("Requests preempted", k["preempted_requests"])
    cols[2].metric("Tokens recomputed", k["recomputed_tokens"],
                   help="Prefill work done again because of preemptions.")
    cols[3].metric("Throughput", widgets.fmt(k["output_tok_s"], "tok/s", 0), help="Output tokens per second.")
    widgets.plot(kv.kv_usage(steps))
    st.markdown(f"Mean E2E of preempted requests: **{widgets.fmt(k['e2e_preempted_s'], 's')}**; of the others: "
                f"**{widgets.fmt(k['e2e_others_s'], 's')}**.")
    with st.expander("Requests"):
        widgets.table(finished(reqs)[["id", "prompt_tokens", "output_tokens", "preemptions", "ttft_s", "e2e_s"]]
                      .sort_values("preemptions", ascending=False)
                      .rename(columns=widgets.REQUEST_COLUMNS))
# ----- 3. scheduling work on every step
st.header("3 · Scheduling work on every step")
if kv_guess is not None:     # like every result on this page, after the learner's guesses
    st.markdown(f"Continuous batching decides anew at every step. Here the scheduler alone (no model) decides a step "
                f"of a full batch with {lab.SCHED_WAITING:,} requests waiting, timed on this machine's CPU, beside the "
                "time of the step it decides, as this page's step model predicts it.")
    sched = lab.scheduling_numbers(lab.scheduling_step_ms(step_model))
    cols = st.columns(3)
    cols[0].metric("Deciding one step", widgets.fmt(sched["scheduler_ms"], "ms"),
                   help=f"The median time of Scheduler.schedule() over {lab.SCHED_REPS} tries: who runs, how many "
                        "tokens each.")
    cols[1].metric("The step it decides", widgets.fmt(sched["step_ms"], "ms", 1),
                   help=f"{sched['running']} requests decoding at {lab.SCHED_CONTEXT} tokens of context, as the step "
                        "model predicts it.")
    cols[2].metric("Share of the step", f"{sched['share']:.1%}")
    predict.show_verdict(lab.scheduling_verdict(sched, f"the step model: {step_model.label}"), "measured")
else:
    st.caption("Commit your guesses above: this part then times the scheduler on this machine.")
widgets.definitions("\n- **Gap** (ITL) here = time between two consecutive tokens of one of the requests that "
                    "started decoding at t = 0, rebuilt from the engine's step records."
                    "\n- **Step priority**: decode_first hands each step's token budget to the running decodes "
                    "first (vLLM v1's order); prefill_first admits and prefills waiting prompts first."
                    "\n- **Preemption by recompute**: the request's KV blocks are freed and it goes back to the "
                    "front of the queue; later its prompt and the tokens it already made are prefilled again.")
