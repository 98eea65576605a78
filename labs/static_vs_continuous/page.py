"""Lab: static vs continuous batching. The same seeded workload through both modes, replayed side by side:
the simulator's answer at once, then the real engine's, with the simulated numbers beside it."""
import pandas as pd
import streamlit as st

from analysis import membership
from analysis.frame_metrics import wasted_slot_steps
from labs.runs import frames
from labs.static_vs_continuous import experiment as lab
from ui import load_line, machine_speed, measure, predict, session, widgets

REPLAY_TICK_S = 0.3
REPLAY_TICKS = 60          # a full replay takes about this many ticks


@st.cache_resource(max_entries=16, show_spinner=False)
def simulated_modes(step_model, workload: str, slots: int, seed: int):
    """Both modes on the simulator for these settings (read-only)."""
    return lab.simulated_modes(step_model, workload, slots, seed)


st.title("Static vs continuous batching")
st.caption("Static batching admits a batch and runs it until its last member finishes. Continuous "
           "batching decides who runs at every step. Same requests, same seed, both modes: the simulator "
           "answers at once, the real engine when you run it.")

with st.sidebar:
    widgets.choice(st.radio, "Workload", list(lab.WORKLOADS), "short_long", key="svc_workload",
                   format_func=lambda k: lab.WORKLOADS[k][0],
                   help=lab.workload_help())
    widgets.slider("Batch slots (max_num_seqs)", 2, 16, lab.SLOTS, key="svc_slots",
                   help="How many requests may share one engine step.")
    widgets.number_input("Seed", 0, 999, 0, key="svc_seed",
                         help="Draws arrival times and lengths; the same seed gives the same requests.")
widgets.write_link(["svc_workload", "svc_slots", "svc_seed"])

workload, slots, seed = st.session_state.svc_workload, st.session_state.svc_slots, st.session_state.svc_seed
spec = lab.workload_spec(workload, seed)
arrive = ("all at once" if spec.rate == 0 else f"at about {spec.rate:g} per second")
st.markdown(f"**{lab.WORKLOADS[workload][0]}**: {spec.num_requests} requests arriving {arrive}, prompts "
            f"{spec.prompt_len.lo}–{spec.prompt_len.hi} tokens, outputs {spec.output_len.lo}–{spec.output_len.hi}.")
load_line.show(spec)

settings = (workload, slots, seed)
named = {"workload": workload, "batch slots": slots, "seed": seed}      # what the predictions are scored on
question = predict.question("static_vs_continuous", choices=lab.FINISH_CHOICES, settings=named,
                            help=f"\"{lab.SAME}\": the two finish within {lab.SAME_WITHIN:.0%} of each other.")
guess = predict.gate(question)
ttft_q = predict.question("svc_ttft", settings=named)
ttft_guess = predict.gate(ttft_q)
speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated
sim = simulated_modes(step_model, *settings)
sim_summ = {mode: lab.mode_summary(res, slots) for mode, (res, _) in sim.items()}
got = measure.stored_or_measure("svc", settings, lambda m, **kw: lab.both_modes(m, *settings, **kw),
                                "Run both modes",
                                lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), *settings)),
                                "Running static, then continuous…", stop=False, lab="static_vs_continuous")
measure.simulated_first_caption(step_model, profiled, "Run both modes", got is not None,
                                "every number, the replay and the table",
                                "the side-by-side table keeps the simulated columns beside the real ones")
measured = got is not None
source = "measured" if measured else "simulated"
shown = got if measured else sim          # until the real engine has run, the page shows the simulation

tables = {mode: frames(res) for mode, (res, _) in shown.items()}
summ = {mode: lab.mode_summary(res, slots) for mode, (res, _) in shown.items()}
s, c = summ["static"], summ["continuous"]
first = lab.first_to_finish({"static": s["duration_s"], "continuous": c["duration_s"]})
if measured:
    predict.record("static_vs_continuous", named, ttft_p95_static=f"{s['ttft_p95_s']:.2f} s",
                   ttft_p95_continuous=f"{c['ttft_p95_s']:.2f} s")
predict.reveal(question, guess, first, f"Static took {s['duration_s']:.2f} s and continuous {c['duration_s']:.2f} s.",
               source=source)
ttft_ratio = s["ttft_p95_s"] / c["ttft_p95_s"] if c["ttft_p95_s"] > 0 else float("nan")
predict.reveal(ttft_q, ttft_guess, ttft_ratio, f"p95 TTFT: static {s['ttft_p95_s']:.2f} s, continuous "
               f"{c['ttft_p95_s']:.2f} s.", measured_text=f"×{ttft_ratio:.2f}", source=source)
for v in lab.verdicts(s, c, workload):
    if lab.about(v, workload):
        predict.show_verdict(v, source)
    else:
        names = " or ".join(f"“{lab.WORKLOADS[w][0]}”" for w in lab.CLAIM_WORKLOADS[v.claim.id])
        predict.verdict_elsewhere(v, f"pick {names} in the sidebar")
cols = st.columns(4)
cols[0].metric("Output throughput (continuous)", widgets.fmt(c["output_tok_s"], "tok/s", 1),
               delta=f"×{c['output_tok_s'] / s['output_tok_s']:.2f} vs static", delta_color="off")
cols[1].metric("Wasted slot-steps (continuous)", c["wasted_slot_steps"],
               delta=f"{c['wasted_slot_steps'] - s['wasted_slot_steps']:+d} vs static", delta_color="inverse",
               help="Batch slots left empty while requests waited for one, summed over the steps: "
                    f"{c['wasted_slot_steps']:,} (continuous) and {s['wasted_slot_steps']:,} (static).")
cols[2].metric("p95 TTFT (continuous)", widgets.fmt(c["ttft_p95_s"], "s"),
               delta=widgets.difference(c["ttft_p95_s"], s["ttft_p95_s"], 2, "s vs static"), delta_color="inverse")
cols[3].metric("Longest request's E2E (continuous)", widgets.fmt(c["long_e2e_s"], "s"),
               delta=widgets.difference(c["long_e2e_s"], s["long_e2e_s"], 2, "s vs static"), delta_color="inverse",
               help=f"{c['long_id']}, {c['long_output_tokens']} output tokens. Continuous batching shares its "
                    "steps with more requests, so it can finish later even when everyone else is faster.")

# ----- synchronized replay
st.subheader("Replay, moment by moment" + ("" if measured else " (simulated)"))
start_s = {mode: float(pd.to_numeric(tables[mode][0]["arrival_s"]).min()) for mode in tables}
ends = {mode: pd.to_numeric(tables[mode][1]["t_end_s"]).to_numpy(float) - start_s[mode] for mode in tables}
t_max = round(max((float(e.max()) for e in ends.values() if len(e)), default=0.0) + 0.005, 2)
n_steps = max(len(tables["static"][1]), len(tables["continuous"][1]))
tick = max(0.01, round(t_max / REPLAY_TICKS, 2))
if st.session_state.get("svc_replaying") != (measured, settings):    # other runs: start at their end
    st.session_state.svc_replaying = (measured, settings)
    st.session_state.svc_t, st.session_state.svc_playing = t_max, False
st.session_state.svc_t = min(float(st.session_state.get("svc_t", t_max)), t_max)
st.session_state.setdefault("svc_playing", False)


def _toggle():
    if not st.session_state.svc_playing and st.session_state.svc_t >= t_max:
        st.session_state.svc_t = 0.0
    st.session_state.svc_playing = not st.session_state.svc_playing


st.button("⏸ Pause" if st.session_state.svc_playing else "▶ Play", key="svc_play", on_click=_toggle,
          help="Advance both runs together through time; drag the slider to scrub.")


@st.fragment(run_every=REPLAY_TICK_S if st.session_state.svc_playing else None)
def replay():
    if st.session_state.svc_playing:
        nxt = round(st.session_state.svc_t + tick, 2)
        st.session_state.svc_t = min(nxt, t_max)
        if nxt >= t_max:
            st.session_state.svc_playing = False
            st.rerun()
    st.slider("Time since the first arrival (s)", 0.0, t_max, key="svc_t", step=tick,
              help="Both runs at the same moment: every step that had ended by then. Both grids share one "
                   "step axis, as long as the longer run, so a run that needs more steps shows it.")
    now = st.session_state.svc_t
    left, right = st.columns(2)
    for col, mode in ((left, "static"), (right, "continuous")):
        reqs, steps = tables[mode]
        done_steps = int((ends[mode] <= now + 1e-9).sum())
        upto = steps.iloc[:done_steps]
        with col:
            st.markdown(f"**{mode}**")
            if len(upto):
                row = upto.iloc[-1]
                done = int((pd.to_numeric(reqs["finish_s"]) <= row.t_end_s).sum())
                st.caption(f"t = {now:.2f} s · step {int(row.step)} · running {int(row.running)} · "
                           f"waiting {int(row.waiting)} · finished {done}/{len(reqs)} · wasted slot-steps so far "
                           f"{wasted_slot_steps(upto, slots)}")
            else:
                st.caption(f"t = {now:.2f} s · not started")
            if done_steps >= len(steps):
                st.caption(f"finished after {len(steps)} steps")
            fig = membership.batch_membership(steps, slots, upto_step=int(upto["step"].iloc[-1]) if len(upto) else -1)
            fig.setdefault("layout", {}).setdefault("xaxis", {})["range"] = [-0.5, n_steps - 0.5]
            widgets.plot(fig, key=f"svc_grid_{mode}")


replay()

# ----- the comparison table
st.subheader("Side by side")
rows = [("output throughput (tok/s)", "output_tok_s", 1), ("duration (s)", "duration_s", 2), ("engine steps", "steps", 0),
        ("p50 TTFT (s)", "ttft_p50_s", 2), ("p95 TTFT (s)", "ttft_p95_s", 2), ("p50 TPOT (ms)", "tpot_p50_ms", 1),
        ("p95 TPOT (ms)", "tpot_p95_ms", 1), ("wasted slot-steps", "wasted_slot_steps", 0),
        ("slot use (busy steps)", "slot_use", 3), ("E2E of the longest request (s)", "long_e2e_s", 2)]
side = {"": [r[0] for r in rows]}
if measured:          # the real numbers, and the simulator's beside them
    side |= {"static": [round(s[k], d) for _, k, d in rows], "continuous": [round(c[k], d) for _, k, d in rows]}
ss, sc = sim_summ["static"], sim_summ["continuous"]
side |= {"static (simulated)": [round(ss[k], d) for _, k, d in rows],
         "continuous (simulated)": [round(sc[k], d) for _, k, d in rows]}
widgets.table(pd.DataFrame(side), csv="static_vs_continuous")
st.markdown(f"{'' if measured else 'Simulated: '}Continuous batching made **{c['output_tok_s'] / s['output_tok_s']:.2f}×** the output tokens per "
            f"second of static batching here and wasted **{c['wasted_slot_steps']:,}** slot-steps (slots left "
            f"empty while requests waited) against static's **{s['wasted_slot_steps']:,}**.")
with st.expander("Requests, both runs"):
    both = pd.concat([tables[m][0].assign(mode=m) for m in ("static", "continuous")])
    widgets.table(both[["mode", "id", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s",
                        "queue_s"]].rename(columns=widgets.REQUEST_COLUMNS))
widgets.definitions("\n- **Static mode**: a batch forms when max_num_seqs requests wait or the oldest has waited "
                    f"{lab.mode_policy('static').max_wait_ms:g} ms, and runs until every member has finished; nobody "
                    "joins mid-batch.")
