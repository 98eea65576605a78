"""Lab: scheduler orders. One multi-tenant workload under fcfs, priority, sjf, fair and edf: who wins, who
loses. The simulator answers at once; the real runs replace it."""
import streamlit as st

from labs.scheduler_orders import experiment as lab
from ui import load_line, machine_speed, measure, predict, session, widgets


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_runs(step_model, orders: tuple, rate: float, seed: int):
    """Every order on the simulator for these settings (read-only)."""
    return lab.simulated_order_runs(step_model, rate, orders, seed)


@st.cache_resource(max_entries=16, show_spinner=False)
def capacity(step_model) -> float:
    return lab.capacity(step_model)


ORDER_HELP = {
    "fcfs": "first come, first served",
    "priority": "the tenant with the lower priority number first (tenant-a = 0)",
    "sjf": "shortest job (prompt + output) first",
    "fair": "the tenant served least so far first, taking turns",
    "edf": "earliest TTFT deadline (arrival + the tenant's own TTFT target) first",
}

st.title("Who the scheduler favours")
st.caption("When requests queue, the admission order decides who waits. Same requests, same seed, one run "
           "per order: on the simulator at once, then on the real engine.")
load_line.show(lab.order_parts(1.0)[0].spec)

with st.sidebar:
    widgets.choice(st.multiselect, "Orders", lab.ORDER_NAMES, lab.ORDER_NAMES, key="so_orders",
                   help="Which admission orders to run. fcfs is the baseline the others are compared with.")
    widgets.slider("Load (share of capacity)", 0.2, 1.5, lab.LOAD, step=0.05, key="so_load",
                   help="All tenants together, as a share of the requests per second this machine's step model "
                        "says the engine finishes of this mix. Orders only matter when requests queue.")
    widgets.number_input("Seed", 0, 999, 0, key="so_seed",
                         help="Draws arrival times and lengths; same seed, same requests.")
widgets.write_link(["so_orders", "so_load", "so_seed"])
orders = [o for o in lab.ORDER_NAMES if o in st.session_state.so_orders] or ["fcfs"]
if "fcfs" not in orders:
    orders = ["fcfs", *orders]
load, seed = st.session_state.so_load, st.session_state.so_seed
speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated
mu = capacity(step_model)
rate = round(load * mu, 3)

st.markdown(
    f"{len(lab.TENANTS)} tenants: "
    + "; ".join(f"**{t}** sends {s:.0%} of the requests, priority {p}, its own TTFT target {slo:g} s"
                for t, s, p, slo in lab.TENANTS)
    + f". Prompts are long-tailed ({lab.PROMPT.lo} tokens typical, up to {lab.PROMPT.hi}); arrivals at {rate:g} "
      f"requests/s ({load:.0%} of the {mu:.2f} this machine's step model predicts); {lab.POLICY.max_num_seqs} slots, "
      f"token budget {lab.POLICY.max_num_batched_tokens}. The simulator runs {lab.SIM_REQUESTS} requests per order, "
      f"the real engine {lab.REQUESTS}.")
st.markdown("\n".join(f"- **{o}**: {ORDER_HELP[o]}" for o in orders))
settings = (tuple(orders), rate, seed)
named = {"orders": ", ".join(orders), "load": f"{load:.0%} of capacity", "seed": seed}    # what the predictions are scored on
question = predict.question("scheduler_orders", choices=tuple(t for t, _, _, _ in lab.TENANTS), settings=named)
guess = predict.gate(question)
starve_q = predict.question("orders_starve", choices=tuple(orders), settings=named)
starve_guess = predict.gate(starve_q)
got, source = measure.measured_or_simulated(
    "orders", settings, lambda m, **kw: lab.order_runs(m, rate, orders, seed, **kw), "Run every order",
    lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), rate, orders, seed)),
    "Running each order…", step_model, profiled, "every sentence, chart and table", lab="scheduler_orders")
measured = got is not None
if not measured:
    got = simulated_runs(step_model, tuple(orders), rate, seed)

table = lab.tenant_table(got)
fcfs_p95 = table[table["order"] == lab.BASELINE].set_index("tenant")["ttft_p95_s"]
moves = lab.tenant_moves(table)
if measured:
    predict.record("scheduler_orders", named, fcfs_ttft_p95=f"{got['fcfs'][0].summary['ttft_s']['p95']:.2f} s")
if moves:
    predict.reveal(question, guess, predict.best_of(moves, highest=True),       # a tuple where tenants tie
                   f"Largest change of each tenant's p95 TTFT against {lab.BASELINE}, over the other orders: "
                   + ", ".join(f"{t} {v:.0%}" for t, v in sorted(moves.items(), key=lambda tv: -tv[1])) + ".",
                   source=source)
else:
    st.info(f"Your first guess compares the other orders with {lab.BASELINE}: pick {lab.BASELINE} and at least one other.")
long_waits = {o: lab.long_waits(res)[0] for o, (res, _) in got.items()}
longest = predict.best_of(long_waits, highest=True)
predict.reveal(starve_q, starve_guess, longest, "p95 queue time of the long prompts: "
               + ", ".join(f"{o} {w:.2f} s" for o, w in long_waits.items()) + ".", source=source)
# Both claims are about requests that queue: at a light load the queue empties often, and neither is judged there.
for verdict in (lab.favour_verdict(table), lab.starve_verdict(got)):
    if round(load, 2) > lab.LIGHT:
        predict.show_verdict(verdict, source)
    else:
        predict.verdict_elsewhere(verdict, f"raise the load above {lab.LIGHT:.0%} of capacity (where requests queue) "
                                           "in the sidebar")
sentences = lab.winners(table)
for order in orders:
    st.markdown(f"- {widgets.plain(sentences[order])}")    # tenant names from the stored run
widgets.plot(lab.tenant_bars(table, "ttft_p95_s"))
widgets.plot(lab.tenant_bars(table, "ttft_p50_s"))
widgets.table(table.rename(columns={"order": "order", "tenant": "tenant", "n": "requests",
                                    "ttft_p50_s": "p50 TTFT (s)", "ttft_p95_s": "p95 TTFT (s)",
                                    "ttft_p99_s": "p99 TTFT (s)", "met_own_ttft": "share within own TTFT target",
                                    "output_tok_s": "run output tok/s"}), csv="scheduler_orders")
with st.expander("By prompt length: who pays for short-first orders"):
    widgets.table(lab.bucket_table(got).rename(columns={"order": "order", "n": "requests",
                                                        "ttft_p50_s": "p50 TTFT (s)", "ttft_p99_s": "p99 TTFT (s)"}))
widgets.plot(lab.oldest_waiting(lab.waiting_ages(got)))
widgets.definitions("\n- **Wins / loses**: against fcfs, the tenant whose p95 TTFT fell "
                    f"the most wins and the one whose p95 TTFT rose the most loses.\n- **Long prompts**: over "
                    f"{lab.LONG_PROMPT} tokens.")
