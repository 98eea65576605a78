"""Lab: scheduler orders. One multi-tenant workload under fcfs, priority, sjf, fair and edf: who wins, who
loses. The simulator answers at once; the real runs replace it."""
import streamlit as st

from labs.scheduler_orders import experiment as lab
from ui import calculators, predict, session, widgets


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_runs(step_model, orders: tuple, rate: float, seed: int):
    """Every order on the simulator for these settings (read-only)."""
    return lab.simulated_order_runs(step_model, orders, rate, seed)


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

with st.sidebar:
    widgets.choice(st.multiselect, "Orders", lab.ORDER_NAMES, lab.ORDER_NAMES, key="so_orders",
                   help="Which admission orders to run. fcfs is the baseline the others are compared with.")
    widgets.slider("Arrival rate (requests/s)", 2.0, 12.0, lab.RATE, step=1.0, key="so_rate",
                   help="All tenants together. Orders only matter when requests queue, so near or above capacity.")
    widgets.number_input("Seed", 0, 999, 0, key="so_seed",
                         help="Draws arrival times and lengths; same seed, same requests.")
widgets.write_link(["so_orders", "so_rate", "so_seed"])
orders = [o for o in lab.ORDER_NAMES if o in st.session_state.so_orders] or ["fcfs"]
if "fcfs" not in orders:
    orders = ["fcfs", *orders]
rate, seed = st.session_state.so_rate, st.session_state.so_seed

st.markdown(
    "Three tenants: " + "; ".join(f"**{t}** sends {s:.0%} of the requests, priority {p}, its own TTFT target {slo:g} s"
                                  for t, s, p, slo in lab.TENANTS)
    + f". Prompts are long-tailed ({lab.PROMPT.lo} tokens typical, up to {lab.PROMPT.hi}); "
      f"{lab.REQUESTS} requests, {lab.POLICY.max_num_seqs} slots, token budget "
      f"{lab.POLICY.max_num_batched_tokens}.")
st.markdown("\n".join(f"- **{o}**: {ORDER_HELP[o]}" for o in orders))
settings = (tuple(orders), rate, seed)
question = predict.Question("scheduler_orders", "Under fcfs (first come, first served), which tenant will have "
                            "the worst p95 TTFT?", choices=tuple(t for t, _, _, _ in lab.TENANTS))
guess = predict.gate(question)
step_model, profiled = calculators.machine_step_model()
got = widgets.stored_or_measure("orders", settings, lambda m, **kw: lab.order_runs(m, orders, rate, seed, **kw),
                                "Run every order",
                                lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), *settings)),
                                "Running each order…", stop=False)
widgets.simulated_first_caption(step_model, profiled, "Run every order", got is not None,
                                "every sentence, chart and table")
measured = got is not None
if not measured:
    got = simulated_runs(step_model, tuple(orders), rate, seed)

table = lab.tenant_table(got)
worst = lab.worst_tenant(table)
fcfs_p95 = table[table["order"] == "fcfs"].set_index("tenant")["ttft_p95_s"]
because = (f"fcfs favours nobody: it serves in arrival order, so each tenant waits as long as the queue it "
           f"arrives into. {worst} came out worst here (p95 TTFT {fcfs_p95[worst]:.2f} s against "
           f"{fcfs_p95.min():.2f} s for the best). Under fcfs the differences come from who sends more, who "
           "sends long prompts, and chance: with few requests per tenant a p95 is noisy.")
if measured:
    predict.record("scheduler_orders", fcfs_ttft_p95=f"{got['fcfs'][0].summary['ttft_s']['p95']:.2f} s")
    predict.reveal(question, guess, worst, because)
else:
    widgets.simulated_answer(f"**{guess}**", f"**{worst}** has the worst p95 TTFT under fcfs", because)
sentences = lab.winners(table)
for order in orders:
    st.markdown(f"- {widgets.plain(sentences[order])}")    # tenant names from the stored run
widgets.plot(lab.tenant_bars(table, "ttft_p95_s"))
widgets.plot(lab.tenant_bars(table, "ttft_p50_s"))
widgets.table(table.rename(columns={"ttft_p50_s": "p50 TTFT (s)", "ttft_p95_s": "p95 TTFT (s)",
                                    "ttft_p99_s": "p99 TTFT (s)", "met_own_ttft": "share within own TTFT target",
                                    "output_tok_s": "run output tok/s"}).round(3), csv="scheduler_orders")
with st.expander("By prompt length: who pays for short-first orders"):
    widgets.table(lab.bucket_table(got).rename(columns={"ttft_p50_s": "p50 TTFT (s)", "ttft_p99_s": "p99 TTFT (s)"})
                  .round(3))
widgets.plot(lab.oldest_waiting(lab.waiting_ages(got)))
widgets.definitions("\n- **Wins / loses**: against fcfs, the tenant whose p95 TTFT fell "
                    "the most wins and the one whose p95 TTFT rose the most loses.")
