"""Lab: the token budget. One workload under a sweep of max_num_batched_tokens, chunked prefill on,
decodes first: TTFT against each stream's longest gap between tokens, on the simulator at once and
on the real engine after its button; the same sweep on an H100's roofline beside it; where a chat goal
and a batch goal would set the budget."""
import streamlit as st

from course import machines
from engine.core.config import SchedulerPolicy
from engine.core.knobs import knobs_of
from engine.sim.simulate import resolve_profile
from labs.token_budget import experiment as lab
from labs.runs import simulated_name
from ui import load_line, machine_speed, measure, predict, session, widgets

BUDGET = knobs_of(SchedulerPolicy)["max_num_batched_tokens"]
GPU = "h100-sxm:llama-3.1-8b"     # the roofline the page compares this machine with


@st.cache_resource(max_entries=16, show_spinner=False)
def arrival_rate(step_model) -> float:
    return lab.rate_for(step_model)


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_table(step_model, rate: float, budgets: tuple, workload: str):
    """The sweep on the simulator for these settings (read-only)."""
    return lab.budget_table(lab.simulated_runs(step_model, rate, budgets, workload))


@st.cache_resource(max_entries=16, show_spinner=False)
def gpu_table(budgets: tuple, workload: str):
    """The sweep on the GPU's roofline, at its own arrival rate (the same share of its capacity)."""
    gpu_model = resolve_profile(GPU).step_model
    return lab.budget_table(lab.simulated_runs(gpu_model, lab.rate_for(gpu_model), budgets, workload))


st.title("The token budget")
st.caption("With chunked prefill on, each step carries at most max_num_batched_tokens tokens: decodes first, "
           "then chunks of prompts. Where does a budget put a long prompt's cost: in its own first token, or in "
           "every other stream's pauses?")
load_line.show("open load, random (Poisson) arrivals at a set share of this machine's capacity (a slow server "
               "does not slow them)")

with st.sidebar:
    widgets.choice(st.multiselect, "max_num_batched_tokens values", lab.CHOICES, lab.BUDGETS, key="tb_budgets",
                   help=BUDGET.help + " Each value is one run of the same requests.")
    widgets.choice(st.radio, "Workload", list(lab.WORKLOADS), lab.CLAIM_WORKLOAD, key="tb_workload",
                   help=f"mixed: {lab.WORKLOADS['mixed']:.0%} of the requests carry a long prompt "
                        f"({lab.LONG_PROMPT.lo}–{lab.LONG_PROMPT.hi} tokens). short only: the same short prompts "
                        "without the long ones (the claim's counter-case).")
widgets.write_link(["tb_budgets", "tb_workload"])
budgets = sorted(st.session_state.tb_budgets) or [lab.BUDGETS[0]]
workload = st.session_state.tb_workload
speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated
rate = arrival_rate(step_model)

st.markdown(f"The workload: {lab.REQUESTS} requests arriving at random at {rate:g} per second in all, "
            f"{lab.LOAD:.0%} of what this machine's step model says the engine serves of the mixed workload at a "
            f"budget of {lab.CAPACITY_BUDGET:,}; prompts {lab.SHORT_PROMPT.lo}–{lab.SHORT_PROMPT.hi} tokens"
            + (f", and {lab.WORKLOADS['mixed']:.0%} of them {lab.LONG_PROMPT.lo}–{lab.LONG_PROMPT.hi}"
               if workload == "mixed" else " (short only: no long prompts)")
            + f"; answers {lab.OUTPUT.lo}–{lab.OUTPUT.hi} tokens; {lab.SLOTS} batch slots. Every budget gets the "
              "same requests, chunked prefill on, decodes first (vLLM v1's order).")
named = {"max_num_batched_tokens": ", ".join(f"{b:,}" for b in budgets), "workload": workload}
question = predict.question("token_budget", choices=lab.OUTCOMES, first=f"{budgets[0]:,}", last=f"{budgets[-1]:,}",
                            settings=named)
guess = predict.gate(question)

settings = (rate, tuple(budgets), workload)
sim = simulated_table(step_model, *settings)
sim_name = simulated_name(step_model)
got = measure.stored_or_measure(
    "token_budget", settings, lambda m, **kw: lab.budget_runs(m, rate, budgets, workload, **kw), "Run the sweep",
    lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), rate, budgets, workload)),
    "Sweeping max_num_batched_tokens…", stop=False, lab="token_budget")
measure.simulated_caption(step_model, profiled, "Run the sweep", got is not None)
measured = got is not None
source = "measured" if measured else "simulated"
table = lab.budget_table(got) if measured else sim
first, last = table.iloc[0], table.iloc[-1]
predict.reveal(question, guess, lab.outcome(table), lab.numbers(table), source=source)
verdict = lab.budget_verdict(table)
if workload == lab.CLAIM_WORKLOAD:
    predict.show_verdict(verdict, source)
else:
    predict.verdict_elsewhere(verdict, "pick the **mixed** workload")
    st.markdown(lab.flat_reading(table))

st.markdown(machines.badge(machines.ENGINE if measured else machines.SIMULATOR, machines.source_label(source, profiled))
            + " the numbers, charts and table below")
cols = [*st.columns(2), *st.columns(2)]     # two by two: "5.07 → 17.40 s" is cut short in a quarter of the page
widgets.changes(cols, [
        ("p95 TTFT", f"{first.ttft_p95_s:.2f}", f"{last.ttft_p95_s:.2f} s",
         f"At a budget of {int(first.budget):,} → {int(last.budget):,} tokens."),
        ("Longest gap in a stream (p95)", f"{first.stall_p95_ms:,.0f}", f"{last.stall_p95_ms:,.0f} ms",
         "Each request's longest pause between two of its tokens; the p95 over requests."),
        ("ITL p95 (all gaps)", f"{first.itl_p95_ms:,.0f}", f"{last.itl_p95_ms:,.0f} ms",
         "Every gap of every stream pooled: a rare long step can stay above it."),
        ("Largest step", f"{int(first.max_step_tokens):,}", f"{int(last.max_step_tokens):,} tokens",
         "The most tokens any step of the run carried: below the budget, the budget never bound.")])
shown = table if measured else None
left, right = st.columns(2)
with left:
    widgets.plot(lab.trade_off(shown, sim, sim_name))
with right:
    widgets.plot(lab.by_budget(shown, sim, sim_name))

st.subheader("Where each goal would set it")
st.caption(f"Worked out from the {'measured' if measured else 'simulated'} sweep above, among the budgets tried.")
for words in lab.advice(table).values():
    st.markdown(f"- {words}")

with st.expander("The same sweep on an H100 (roofline of Llama-3.1-8B, simulated)"):
    gpu = gpu_table(tuple(budgets), workload)
    st.markdown(machines.badge(GPU) + f" {lab.numbers(gpu)} Outcome: **{lab.outcome(gpu)}**.")
    st.caption("Below its ridge point a GPU's step costs about the same whatever tokens it carries, so small chunks "
               "ride along with the decodes almost free, and a long prompt pays a whole step for every chunk.")

columns = {"budget": "max_num_batched_tokens", "ttft_p50_s": "p50 TTFT (s)", "ttft_p95_s": "p95 TTFT (s)",
           "stall_p95_ms": "longest gap, p95 (ms)", "itl_p95_ms": "ITL p95 (ms)", "itl_p99_ms": "ITL p99 (ms)",
           "tpot_p95_ms": "TPOT p95 (ms)", "work_tok_s": "tok/s of engine work", "max_step_tokens": "largest step",
           "chunked_prompts": "prompts in 2+ steps"}
widgets.table(table[list(columns)].rename(columns=columns), csv="token_budget")
widgets.definitions("\n- **Longest gap in a stream** = each request's longest pause between two of its tokens; the "
                    "column is the p95 over requests (what the budget bounds: no step is longer than its tokens)."
                    "\n- **Tokens per second of engine work** = prompt and output tokens / the seconds the engine "
                    "spent in steps."
                    "\n- **Largest step** = the most tokens (prompt chunks and decodes) one step carried."
                    "\n- **Prompts in 2+ steps** = prompts whose prefill was cut into chunks.")
