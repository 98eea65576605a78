"""Lab: KV capacity. The pool's size worked out for named GPUs, a sweep of this engine's KV pool on one
burst of requests (running batch, usage, preemptions), and prefix caching off and on. Each run part
answers at once from the simulator; the real runs replace it."""
import streamlit as st

from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.knobs import knobs_of
from labs.kv_capacity import experiment as lab
from ui import load_line, machine_speed, measure, predict, session, widgets

POLICY_KNOBS = knobs_of(SchedulerPolicy)
ENGINE_KNOBS = knobs_of(EngineConfig)


@st.cache_resource(max_entries=8, show_spinner=False)
def simulated_pools(step_model):
    return lab.simulated_pool_runs(step_model)


@st.cache_resource(max_entries=8, show_spinner=False)
def simulated_prefix(step_model, workload: str, rate: float):
    return lab.simulated_prefix_runs(step_model, workload, rate)


st.title("KV capacity")
st.caption("Every running request keeps the keys and values of all its tokens in the KV pool. How big the pool is "
           "decides how many requests can run at once; prefix caching lets requests share what is already in it.")
load_line.show(("the pool sweep", lab.SWEEP_SPEC), ("the prefix pair", lab.prefix_spec("shared", lab.PREFIX_RATE)))

with st.sidebar:
    widgets.slider("gpu_memory_utilization (GPU profiles)", 0.5, 0.98, lab.UTILIZATION, step=0.01, key="kv_util",
                   help="vLLM's share of each GPU's memory for the weights, activations and the KV pool.")
    widgets.choice(st.select_slider, "max_model_len (GPU profiles)", [2048, 4096, 8192, 16384, 32768, 131072],
                   lab.MAX_MODEL_LEN, key="kv_len",
                   help="The longest prompt + output one request may have; vLLM's concurrency figure counts every "
                        "request at this length.")
    widgets.choice(st.select_slider, f"{POLICY_KNOBS['kv_capacity_tokens'].label}: the pool judged", list(lab.POOLS),
                   lab.SMALL_POOL, key="kv_pool", help=POLICY_KNOBS["kv_capacity_tokens"].help)
    widgets.choice(st.radio, "Prompts (prefix caching)", list(lab.WORKLOADS), "shared", key="kv_workload",
                   format_func=lambda w: {"shared": f"share a {lab.SYSTEM_PROMPT}-token system prompt",
                                          "distinct": "share nothing (same lengths)"}[w],
                   help="The counter-case: prompts of the same lengths with nothing in common.")
widgets.write_link(["kv_util", "kv_len", "kv_pool", "kv_workload"])
util, max_len = st.session_state.kv_util, st.session_state.kv_len
judged, workload = st.session_state.kv_pool, st.session_state.kv_workload

# ----- 1. the arithmetic
st.header("1 · How big is the pool?")
try:
    b = lab.bundled_bytes_per_token(4)
except Exception as exc:     # the bundled copy is missing: say so and go on with the GPU profiles
    b = None
    st.warning(widgets.error_message("Could not read the bundled model's config.json", exc))
if b:
    st.markdown(f"From the bundled SmolLM2-135M's own config ({b['layers']} layers, {b['kv_heads']} KV heads of "
                f"{b['head_dim']}, {b['heads']} query heads): 2 (keys and values) × {b['layers']} × {b['kv_heads']} × "
                f"{b['head_dim']} × 4 bytes (float32) = **{b['bytes']:,} bytes a token**, {b['bytes'] // 2:,} in bf16. "
                f"With a KV head for every query head (no grouped-query attention) it would be "
                f"{b['bytes_without_gqa']:,}.")
table = lab.profile_table(util, max_len)
st.markdown(f"The same sums for models on {lab.H100.name} GPUs ({lab.H100.memory_bytes / 1e9:.0f} GB each, bf16), "
            f"as vLLM sizes its pool at start-up: memory × gpu_memory_utilization ({util:.2f}), less the weights and an "
            f"assumed {lab.kv_sizing.ACTIVATION_GB:g} GB for activations (vLLM measures that part with a profiling "
            f"pass), cut into blocks of {lab.kv_sizing.BLOCK_SIZE} tokens. Arithmetic from each model's config, not a "
            "measurement.")
widgets.table(table)
refused = table[~table["starts"]]
if len(refused):
    st.caption("Where a row's pool is below one request of max_model_len, vLLM refuses to start: "
               + "; ".join(f"{r['model']} on {r['GPUs']}" for _, r in refused.iterrows()) + ".")
st.markdown(f"This engine's equivalent: `engine serve --kv-pool-tokens N` allocates the pool once "
            f"({ENGINE_KNOBS['kv_pool_tokens'].label}, {lab.engine_pool_default():,} tokens by default), and the policy "
            f"knob **{POLICY_KNOBS['kv_capacity_tokens'].label}** (`kv_capacity_tokens`) is how much of it the "
            "scheduler may use, which a learner can change while it runs. vLLM fixes its pool at start-up.")

speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated

# ----- 2. the pool sweep
st.header("2 · A pool too small for the batch")
spec = lab.SWEEP_SPEC
st.markdown(f"{spec.num_requests} requests arrive at once (prompts {spec.prompt_len.lo}–{spec.prompt_len.hi} tokens, "
            f"outputs {spec.output_len.lo}–{spec.output_len.hi}), max_num_seqs {lab.SLOTS}, on pools of "
            f"{', '.join(f'{p:,}' for p in lab.POOLS)} tokens. One request holds at most {lab.LONGEST} tokens, so "
            f"{lab.SLOTS} at their longest need {lab.NEED:,}; a vLLM log line would say a pool of **{judged:,}** holds "
            f"{judged / lab.LONGEST:.2f}x requests of {lab.LONGEST} tokens.")
named = {"KV pool judged": f"{judged:,} tokens", "max_num_seqs": lab.SLOTS}
run_q = predict.question("kv_running", pool=f"{judged:,}", slots=lab.SLOTS, settings=named)
run_guess = predict.ask(run_q)
if run_guess is not None:
    got, source = measure.measured_or_simulated(
        "kv_pools", lab.POOLS, lambda m, **kw: lab.pool_runs(m, **kw), "Run the pool sweep",
        lambda: widgets.estimate_text(*lab.pool_estimate_s(session.model_name())),
        "KV pool sweep…", step_model, profiled, "every number and chart of this part",
        "every request arrives at once, so the simulated admissions and preemptions are the real scheduler's", lab="kv_capacity")
    runs = got if got is not None else simulated_pools(step_model)
    t = lab.pool_table(runs)
    row = t[t["pool"] == judged].to_dict("records")[0]     # records keep each column's type: 9, not 9.0
    if source == "measured":
        predict.record("kv_capacity", named, running=f"{row['mean_running_while_waiting']:.1f}",
                       preemptions=str(row["preemptions"]))
    predict.reveal(run_q, run_guess, row["mean_running_while_waiting"],
                   f"At {judged:,} tokens the most running at once was {row['peak_running']}.",
                   measured_text=f"{row['mean_running_while_waiting']:.1f}", source=source)
    predict.show_verdict(lab.caps_verdict(row), source)
    cols = st.columns(4)
    cols[0].metric("Running while others waited", f"{row['mean_running_while_waiting']:.1f}",
                   help="Mean requests holding a slot over the steps where some request waited.")
    cols[1].metric("Preemptions", row["preemptions"], help="vllm:num_preemptions_total on /metrics.")
    cols[2].metric("Pool's peak use", f"{row['kv_peak_pct']:.0f}%", help="vllm:kv_cache_usage_perc at its highest.")
    cols[3].metric("Prompt tokens computed again", f"{row['recomputed_tokens']:,}")
    widgets.table(t.rename(columns={"pool": "pool (tokens)", "concurrency_at_longest": f"requests of {lab.LONGEST} it holds",
                                    "peak_running": "most running", "mean_running_while_waiting": "running while some waited",
                                    "kv_peak_pct": "peak use %", "kv_mean_pct": "mean use %",
                                    "recomputed_tokens": "tokens recomputed", "output_tok_s": "output tok/s",
                                    "e2e_p50_s": "p50 E2E (s)", "duration_s": "run (s)"}), csv="kv_pool_sweep")
    widgets.plot(lab.usage_over_time(runs))
    widgets.plot(lab.running_over_time(runs))

# ----- 3. prefix caching
st.header("3 · Prefix caching on one replica")
if run_guess is None:
    st.caption("Commit your guess above first: this part asks its own after it.")
else:
    rate = lab.PREFIX_RATE
    pspec = lab.prefix_spec(workload, rate)
    what = (f"every prompt starts with the same {lab.SYSTEM_PROMPT}-token system prompt, then a question of "
            f"{pspec.prompt_len.lo}–{pspec.prompt_len.hi} tokens" if workload == "shared" else
            f"prompts of {pspec.prompt_len.lo}–{pspec.prompt_len.hi} tokens that share nothing")
    st.markdown(f"{pspec.num_requests} requests arrive at random, {rate:g} a second on average; {what}. The same "
                "requests run with prefix caching off, then on.")
    pnamed = {"prompts": workload, "arrival rate": f"{rate:g}/s"}
    pq = predict.question("kv_prefix", settings=pnamed)
    pguess = predict.ask(pq)
    if pguess is not None:
        got_p, psource = measure.measured_or_simulated(
            "kv_prefix", (workload, rate), lambda m, **kw: lab.prefix_runs(m, workload, rate, **kw),
            "Run with prefix caching off and on", lambda: widgets.estimate_text(*lab.prefix_estimate_s(
                session.model_name(), workload, rate)), "Prefix caching off, then on…", step_model, profiled,
            "every number of this part", lab="kv_capacity")
        pruns = got_p if got_p is not None else simulated_prefix(step_model, workload, rate)
        s = {k: lab.prefix_summary(res) for k, (res, _) in pruns.items()}
        off, on = s["off"], s["on"]
        ratio = off["ttft_p50_s"] / on["ttft_p50_s"] if on["ttft_p50_s"] else float("nan")
        if psource == "measured":
            predict.record("kv_capacity", pnamed, hit_rate=f"{on['hit_rate']:.0%}",
                           ttft_off=widgets.seconds(off["ttft_p50_s"]), ttft_on=widgets.seconds(on["ttft_p50_s"]))
        predict.reveal(pq, pguess, ratio, f"Median TTFT {widgets.seconds(off['ttft_p50_s'])} off, "
                       f"{widgets.seconds(on['ttft_p50_s'])} on.", measured_text=f"×{ratio:.2f}", source=psource)
        predict.show_verdict(lab.prefix_verdict(off, on, workload), psource)
        cols = st.columns(4)
        cols[0].metric("Prefix cache hit rate", f"{on['hit_rate']:.0%}",
                       help="vllm:prefix_cache_hits ÷ vllm:prefix_cache_queries, in tokens, with caching on.")
        cols[1].metric("Tokens prefilled, off", f"{off['prefill_tokens']:,}")
        cols[2].metric("Tokens prefilled, on", f"{on['prefill_tokens']:,}")
        cols[3].metric("Median TTFT, on", widgets.seconds(on["ttft_p50_s"]),
                       delta=f"{(on['ttft_p50_s'] - off['ttft_p50_s']) * 1000:+,.0f} ms vs off", delta_color="inverse")
        widgets.plot(lab.ttft_bars(s))

widgets.definitions("\n- **KV pool** here = `kv_capacity_tokens`, the tokens of keys and values the scheduler may "
                    "hold; usage = blocks in use ÷ the pool's blocks, what /metrics exports as vllm:kv_cache_usage_perc."
                    "\n- **Running while some waited** = the mean of the running count over the steps where at least "
                    "one request waited: there a free slot or free blocks would have admitted it."
                    "\n- **Tokens recomputed** = prompt tokens prefilled beyond each prompt's own, the work preemption "
                    "by recompute redid (with prefix caching on, blocks still in the cache are found instead)."
                    "\n- **Concurrency at max_model_len** = the pool's blocks ÷ the blocks one request of max_model_len "
                    "holds, as vLLM's start-up log computes it.")
