"""Lab: guessing ahead. n-gram speculative decoding off and on, side by side: output tok/s at batch 1 on copies
and on free text, decode tok/s at a large batch of copies, the share of guesses accepted, each step's drafts,
and an H100 roofline's prediction beside. The simulator answers at once; the real engine on a button."""
import pandas as pd
import streamlit as st

from course import machines
from course.examples import ridge
from course.readings import ridge_sentence
from analysis.speculation import drafts_by_step
from engine.sim.roofline import DEVICES
from labs.speculation import break_even, experiment as lab, figures
from ui import load_line, machine_speed, measure, predict, session, widgets

GPU_DEVICE = DEVICES[lab.GPU.partition(":")[0]]


@st.cache_resource(max_entries=8, show_spinner=False)
def simulated(step_model, k: int, big: int, chances: tuple):
    """The lab's cases on this machine's step model (read-only)."""
    return lab.simulated_runs(step_model, k, big, dict(chances))


@st.cache_resource(max_entries=8, show_spinner="Simulating the GPU profile…")
def on_gpu(k: int, big: int, chances: tuple):
    """The lab's cases on the GPU roofline, and the copies at a batch past its ridge (read-only)."""
    profile = lab.gpu_profile()
    runs = lab.simulated_runs(profile, k, big, dict(chances))
    past = break_even.past_ridge(GPU_DEVICE)
    runs += [(("copy", past, 0, m), lab.simulated_run(profile, "copy", past, m, k, dict(chances).get(("copy", big))),
              False)
             for m in lab.METHODS]
    return runs


st.title("Guessing ahead: speculative decoding")
st.caption("A decode step makes one token per request. With n-gram speculation the engine guesses the next few "
           "tokens by finding the request's last words earlier in its own text, and checks every guess in the same "
           "forward pass. When does that pay?")
load_line.show(("batch 1, served one at a time", lab.case_spec("copy", 1)),
               ("the large batch", lab.case_spec("copy", lab.BIG)))

with st.sidebar:
    widgets.choice(st.selectbox, "Drafted tokens per step (num_speculative_tokens)", lab.K_CHOICES, lab.K,
                   key="sp_k", help="The most tokens guessed ahead for one request in one step. Each one is a row "
                                    "of the step's forward pass, accepted or not.")
    widgets.choice(st.selectbox, "Large batch (requests at once)", lab.BIG_CHOICES, lab.BIG, key="sp_big",
                   help="The copies run all at once at this batch size, to see what speculation does where the "
                        "step is bound by arithmetic.")
    widgets.slider("A B pairs per case", 1, 3, lab.REPEATS, key="sp_pairs",
                   help="Each case runs off, on, off, on... on fresh engines, so a slow spell of the machine "
                        "falls on both. The ratios are the median over the pairs; the table shows their range.")
widgets.write_link(["sp_k", "sp_big", "sp_pairs"])
k, big, pairs = int(st.session_state.sp_k), int(st.session_state.sp_big), int(st.session_state.sp_pairs)

st.markdown(f"Three cases, each run with speculation off and on ({widgets.plural(pairs, 'A B pair')}): "
            f"**copies at batch 1** ({lab.ONE_REQUESTS} prompts that ask the model to copy a passage of "
            f"{lab.PASSAGE[0]}–{lab.PASSAGE[1]} tokens, one after another), **free text at batch 1** "
            f"({lab.ONE_REQUESTS} questions of {lab.FREE_PROMPT} tokens whose answers are new text) and **copies at "
            f"batch {big}** (all at once). Every request is greedy and writes {lab.MAX_NEW} tokens; n-grams of "
            f"{lab.policy_for('ngram', 1, k).prompt_lookup_min}–{lab.policy_for('ngram', 1, k).prompt_lookup_max} "
            f"tokens are looked up and up to {k} tokens drafted.")
named = {"drafted tokens": k, "large batch": big, "A B pairs": pairs}      # what the predictions are scored on
q_one = predict.question("spec_one", settings=named, k=str(k),
                         help="1× means no change; 2× means twice the tokens a second.")
guess_one = predict.gate(q_one)
q_big = predict.question("spec_big", settings=named, batch=str(big),
                         help="Only the steps that run no prompt count here: every request is decoding.")
guess_big = predict.gate(q_big)

speed = machine_speed.here()
step_model, profiled = speed.step_model, speed.calibrated
got = measure.stored_or_measure("speculation", (k, big, pairs),
                                lambda m, **kw: lab.lab_runs(m, k, big, pairs, **kw), "Run off and on",
                                lambda: widgets.estimate_text(*lab.estimate_s(session.model_name(), k, big, pairs)),
                                "Running speculation off and on…", stop=False, lab="speculation")
measured = got is not None
source = "measured" if measured else "simulated"
table = lab.case_table(got) if measured else None
chances = lab.measured_chances(table, k) if measured else {}
sim_runs = simulated(step_model, k, big, tuple(sorted(chances.items())))
if not measured:
    table = lab.case_table(sim_runs)
gpu_runs = on_gpu(k, big, tuple(sorted(chances.items())))
gpu = lab.case_table(gpu_runs)
measure.simulated_first_caption(step_model, profiled, "Run off and on", measured, "every number and chart",
                                f"the {machines.short(lab.GPU)} prediction stays simulated")
if not measured:
    st.caption(f"The simulator reads no text: it drafts {k} tokens for every decoding request and accepts each with "
               f"a chance, assumed here ({lab.ASSUMED_CHANCE['copy']:.0%} a token for copies, "
               f"{lab.ASSUMED_CHANCE['free']:.0%} for free text) until the real run measures it.")
else:
    st.caption(f"The {machines.short(lab.GPU)} prediction accepts guesses with the chance that makes as many tokens "
               "a decode step as each of this run's cases made: " + ", ".join(
                   f"{lab.case_label(w, b).split(' (')[0]} {a:.0%}" for (w, b), a in sorted(chances.items())) + ".")

one, free, many = lab.row(table, "copy", 1), lab.row(table, "free", 1), lab.row(table, "copy", big)
if measured:
    predict.record("speculation", named, speedup_batch_1=f"{one.speedup:.2f}×", decode_speedup_big=f"{many.decode_speedup:.2f}×")
predict.reveal(q_one, guess_one, one.speedup, f"Output tok/s at batch 1 on copies: {one.ngram_tok_s:.1f} with speculation, "
               f"{one.off_tok_s:.1f} without.", measured_text=f"×{one.speedup:.2f}", source=source)
predict.reveal(q_big, guess_big, break_even.direction(many.decode_speedup),
               f"At batch {big} the steps that ran no prompt made {many.ngram_decode_tok_s:.0f} tokens/s with "
               f"speculation and {many.off_decode_tok_s:.0f} without: {many.decode_speedup:.2f}×.", source=source)
predict.show_verdict(lab.batch1_verdict(table), source)
predict.show_verdict(lab.big_batch_verdict(table, big), source)

machine = machines.ENGINE if measured else machines.SIMULATOR
st.markdown(machines.badge(machine, machines.SOURCE_LABEL[source]) + " the numbers below, unless named otherwise")
c = st.columns(4)
c[0].metric("Output tok/s, batch 1, copies", f"{one.off_tok_s:.1f} → {one.ngram_tok_s:.1f}", delta=f"×{one.speedup:.2f}",
            delta_color="off")
c[1].metric("Output tok/s, batch 1, free text", f"{free.off_tok_s:.1f} → {free.ngram_tok_s:.1f}",
            delta=f"×{free.speedup:.2f}", delta_color="off")
c[2].metric(f"Decode tok/s, batch {big}, copies", f"{many.off_decode_tok_s:.0f} → {many.ngram_decode_tok_s:.0f}",
            delta=f"×{many.decode_speedup:.2f}", delta_color="off")
c[3].metric("Guesses accepted: copies / free text",
            f"{widgets.fmt(one.acceptance * 100, '%', 0)} / {widgets.fmt(free.acceptance * 100, '%', 0)}",
            help="Accepted ÷ drafted tokens at batch 1 (vLLM's draft acceptance rate).")
if measured:
    same, words = lab.identity_words(table)
    st.markdown(("**Greedy outputs identical**: " if same else "**Greedy outputs differ**: ") + words)

gpu_name = machines.words(lab.GPU)
widgets.plot(figures.speedup_chart(table, gpu, source, gpu_name))
r = ridge(GPU_DEVICE)
past = break_even.past_ridge(GPU_DEVICE)
g_big, g_past = lab.row(gpu, "copy", big), lab.row(gpu, "copy", past)
st.markdown(f"**Where the ridge is.** {ridge_sentence(GPU_DEVICE, 'An ' + GPU_DEVICE.name)} (its roofline, "
            f"{machines.words(lab.GPU)}). So at batch {big} its step is still bound by reading the weights, and "
            f"the roofline predicts {break_even.change_words(g_big.decode_speedup)} decode tokens with speculation "
            f"({g_big.decode_speedup:.2f}×); at batch {past}, past its ridge, "
            f"{break_even.change_words(g_past.decode_speedup)} ({g_past.decode_speedup:.2f}×). This machine reaches its "
            "ridge at a far smaller batch: the table below says what the extra rows cost on each.")
st.markdown("**When guessing pays.** A step that checks k guesses per request carries k + 1 rows per request. It "
            "pays when the tokens a request makes per decode step, on average, outnumber how many times longer the "
            "step takes (the break-even, from each machine's step model). The estimate is for a full batch: the runs' "
            "own ratios also hold their last steps, where requests that finished early leave the batch thinner and "
            "each step still reads every weight.")
widgets.table(pd.DataFrame(break_even.break_even_rows(step_model, lab.gpu_profile().step_model, k, big, past, table, gpu)),
              csv="speculation_break_even")

left, right = st.columns(2)
with left:
    widgets.plot(figures.acceptance_chart(table, source))
with right:
    runs = got if measured else sim_runs
    shown = {f"{lab.case_label(w, b).split(' (')[0]}" + (f", pair {p + 1}" if measured and pairs > 1 else ""):
             res for (w, b, p, m), res, _ in runs if m == "ngram"}
    pick = st.selectbox("Drafts of the run", list(shown), key="sp_drafts_run",
                        help="Each step's drafted tokens, accepted and rejected, in one run with speculation on.")
    widgets.plot(drafts_by_step(pd.DataFrame(shown[pick].steps)))

columns = {"workload": "workload", "batch": "batch", "off_tok_s": "output tok/s, off", "ngram_tok_s": "output tok/s, ngram",
           "speedup": "output ngram ÷ off", "speedup_lo": "lowest pair", "speedup_hi": "highest pair",
           "off_decode_tok_s": "decode tok/s, off", "ngram_decode_tok_s": "decode tok/s, ngram",
           "decode_speedup": "decode ngram ÷ off", "off_steps": "steps, off", "ngram_steps": "steps, ngram",
           "drafts": "drafts", "drafted": "drafted tokens", "accepted": "accepted tokens", "acceptance": "accepted share",
           "identical": "greedy tokens identical", "pairs": "pairs"}
widgets.table(table[[c for c in columns if c in table]].rename(columns=columns), csv="speculation")
widgets.definitions("\n- **Output tok/s**: output tokens ÷ the run's span, prompts included (vLLM's benchmark "
                    "counts it so).\n- **Decode tok/s**: the tokens made by the steps that ran no prompt ÷ those steps' "
                    "time: what speculation changes, where a large batch's prompts take much of a short run.\n"
                    "- **Accepted share**: accepted ÷ drafted tokens (vLLM's draft acceptance rate); a step that checks "
                    "a draft makes its accepted tokens plus one of the model's own.\n- **ngram ÷ off**: the median "
                    "over the A B pairs of each pair's ratio.")
