"""The lessons' instant calculators: a lesson line `{{place:calculator:<id>}}` shows one (lessons/views.py).

- `mm1`: arrival and service rate -> utilization, mean and p99 time in system, and the p99 curve;
- `step_time`: batch size -> decode step time, time per token and tokens/s, from this machine's
  step model (its calibrated profile, or the hand-set guess when it has none; no model runs);
- `step_example`: lesson 1's worked table on this machine's step model beside a named GPU's roofline model;
- `step_table`: t0 and c -> lesson 1's table of t(B) = t0 + cB, its throughput and the knee, recomputed
  (starting from this machine's step model);
- `slots`: output lengths and slots -> the engine's scheduler, static and continuous, slot by slot;
- `kv_budget`: arrival rate and time in system -> requests inside (Little's Law, L = lambda W), and with
  the tokens each holds and the cache size -> the KV memory they need.

The formulas live in analysis.queueing, course.examples and engine.step_model. Each calculator is a
fragment, so moving its sliders reruns it alone, not the lesson around it. Widget keys start with `calc_`.
"""
from __future__ import annotations

import math

import streamlit as st

from course import examples as course, readings
from analysis.knee import KNEE_SHARE, knee
from analysis.queueing import (littles_law_in_system, mm1_p99_chart, mm1_time_in_system,
                               mm1_time_in_system_quantile)
from engine.core.config import EngineConfig
from engine.core.step_model import StepModel
from engine.sim.machine_speed import machine_speed as engine_speed, step_model_here
from ui import machine_speed

# With t(B) = t0 + c·B, throughput B / t(B) reaches KNEE_SHARE of its ceiling 1/c at B = AT_SHARE · t0/c
AT_SHARE = KNEE_SHARE / (1 - KNEE_SHARE)


def _seconds(s: float) -> str:
    return "unstable" if math.isinf(s) else f"{1000 * s:.0f} ms" if s < 1 else f"{s:.2f} s"


@st.fragment
def mm1() -> None:
    with st.container(border=True):
        st.markdown("**Try it: the M/M/1 queue**")
        left, right = st.columns(2)
        # starts from lesson 5's worked example: the engine's capacity on this machine's step model
        mu0 = min(round(course.capacity(cost=lesson_step_model()), 1), 20.0)
        mu = right.slider("Service rate μ (requests/s)", 0.5, 20.0, mu0, 0.1, key="calc_mm1_mu")
        lam = left.slider("Arrival rate λ (requests/s)", 0.0, 20.0, round(0.9 * mu0, 1), 0.05, key="calc_mm1_lam")
        w, p99 = mm1_time_in_system(lam, mu), mm1_time_in_system_quantile(lam, mu, 0.99)
        cols = st.columns(3)
        cols[0].metric("Utilization ρ = λ/μ", f"{lam / mu:.0%}")
        cols[1].metric("Mean time in system W = 1/(μ−λ)", _seconds(w))
        cols[2].metric("p99 time in system = ln(100)·W", _seconds(p99))
        if math.isinf(w):
            st.markdown(":red[**Unstable: the queue grows without end.**] Requests arrive at least as "
                        "fast as they are finished, so there is no steady state and no mean to give.")
        st.markdown(mm1_table(mu, lam / mu))
        st.plotly_chart(mm1_p99_chart(lam, mu), width="stretch", key="calc_mm1_chart",
                        config={"displaylogo": False})


MM1_ROWS = (0.4, 0.6, 0.7, 0.85, 0.95, 0.98)


def mm1_table(mu: float, rho_now: float) -> str:
    """The M/M/1 table at service rate `mu`: W in units of 1/mu and in seconds, with the row nearest
    the chosen utilization in bold."""
    rows = sorted(set(MM1_ROWS) | ({round(rho_now, 3)} if 0 < rho_now < 1 else set()))
    base = MM1_ROWS[0]              # the last column compares each row's W with the first row's
    lines = [f"| ρ | λ (req/s) | W in units of 1/μ | W | vs {base:.0%} |",
             "|---|---|---|---|---|"]
    for rho in rows:
        cells = [f"{rho:.0%}" if rho in MM1_ROWS else f"{rho:.1%}", f"{rho * mu:.2f}", f"{1 / (1 - rho):.1f}",
                 _seconds(1 / (mu * (1 - rho))), f"×{(1 - base) / (1 - rho):.1f}"]
        bold = abs(rho - rho_now) < 1e-9
        lines.append("| " + " | ".join(f"**{c}**" if bold else c for c in cells) + " |")
    return "\n".join(lines)


def warm() -> None:
    """Read this machine's step model off the page (ui/lesson_pictures.py calls it on its thread)."""
    from ui.session import model_name     # it imports torch, which only this calculator needs
    engine_speed(model_name())


def warm_sweeps() -> None:
    """Run lesson 6's two sweeps off the page (ui/lesson_pictures.py, after the pictures): a page that finds
    them cached answers at once."""
    from ui.session import model_name
    _knee_sweep_here(engine_speed(model_name()).step_model)
    course.knee_sweep()


def _here() -> tuple[StepModel, bool]:
    """This machine's step model (ui.machine_speed), and whether it was measured here (else the hand-set guess)."""
    speed = machine_speed.here()
    return speed.step_model, speed.calibrated


def learner_step_model() -> StepModel:
    """The step model the lessons' worked examples run on: this machine's, as the app runs it (its calibrated
    profile refit from real steps, or the hand-set guess where it has none: its label says which)."""
    from ui.session import model_name     # it imports torch, which only this calculator needs
    return step_model_here(model_name())


LESSON_MODEL_KEY = "lesson_step_model"


def lesson_step_model() -> StepModel:
    """The step model a lesson page's worked examples run on: this machine's as the app runs it, taken once
    per browser session. The app refits it as its real steps come in (and its label changes with every
    step), so a lesson would otherwise read differently on every visit and cost seconds of simulation each
    time; a new session takes the model of its day."""
    if LESSON_MODEL_KEY not in st.session_state:
        st.session_state[LESSON_MODEL_KEY] = _here()[0]
    return st.session_state[LESSON_MODEL_KEY]


@st.fragment
def step_time() -> None:
    with st.container(border=True):
        st.markdown("**Try it: decode step time on this machine**")
        left, right = st.columns(2)
        batch = left.slider("Batch size B (sequences in the step)", 1, 64, 8, key="calc_step_batch")
        context = right.slider("Context per sequence (tokens)", 16, 2048, 128, 16, key="calc_step_context")
        model, measured = _here()
        t, t0 = model.decode_ms(batch, context), model.decode_ms(0, context)
        cols = st.columns(3)
        cols[0].metric("Step time t(B)", f"{t:.1f} ms")
        cols[1].metric("Time per token t(B)/B", f"{t / batch:.2f} ms")
        cols[2].metric("Tokens per second B/t(B)", f"{1000 * batch / t:,.0f}")
        st.markdown(f"$t(B) = t_0 + c\\,B$ with $t_0$ = {t0:.1f} ms, what every step pays, and $c$ = "
                    f"{(t - t0) / batch:.2f} ms per sequence on average up to B = {batch}. "
                    f"Each user still waits the whole t(B) between its own tokens.")
        st.caption(f"Numbers from this machine's step model: {model.label}." if measured else
                   f"This machine has no step model yet, so the numbers are a guess: {model.label}.")


def _step_rows(rows: list[dict]) -> str:
    lines = ["| Batch B | Step t(B) | Tokens/s |", "|---|---|---|"]
    for r in rows:
        mark = " ← knee" if r["knee"] else ""
        lines.append(f"| {r['batch']}{mark} | {r['step_ms']:,.1f} ms | {r['tok_s']:,.0f} |")
    return "\n".join(lines)


@st.fragment
def step_example() -> None:
    """Lesson 1's worked example on two machines: this machine's step model (its calibrated profile, or the
    hand-set guess, said so) and the named GPU's roofline model, each table with its reading and its badge."""
    from course import machines
    from engine.sim.roofline import roofline_profile
    with st.container(border=True):
        st.markdown(f"**The worked example on two machines**: one decode step of B sequences, each with "
                    f"{course.CONTEXT} tokens of context. Each user waits the whole step between two of its tokens.")
        model, measured = _here()
        gpu = roofline_profile(course.KNEE_GPU)
        here_name = "this machine's step model" if measured else "a guessed step model (this machine has none yet)"
        left, right = st.columns(2)
        for col, cost, badge, name in (
                (left, model, machines.badge(machines.SIMULATOR, here_name), here_name),
                (right, gpu, machines.badge(course.KNEE_GPU), course.knee_gpu_name())):
            rows = course.step_table(cost)
            col.markdown(badge + "\n\n" + _step_rows(rows) + "\n\n" + readings.step_example_reading(rows, name))
        st.caption(f"Left: {model.label}. Right: {gpu.label} (spec-sheet figures, a model, not a measurement).")


@st.fragment
def step_table() -> None:
    with st.container(border=True):
        st.markdown("**Try it: the table for your own t₀ and c**")
        # starts from the line through this machine's step model, the one lesson 1's worked example reads
        t0_0, c_0 = course.line_through(course.step_table(_here()[0]))
        t0_0, c_0 = min(max(t0_0, 0.5), 200.0), min(max(c_0, 0.05), 20.0)
        left, right = st.columns(2)
        t0 = left.slider("t₀: what every step pays (ms)", 0.5, 200.0, round(t0_0, 1), 0.5, key="calc_tb_t0")
        c = right.slider("c: cost of each sequence (ms)", 0.05, 20.0, round(c_0, 2), 0.05, key="calc_tb_c")
        batches = course.BATCHES
        tok_s = [1000 * b / (t0 + c * b) for b in batches]
        k = knee(batches, tok_s)
        lines = ["| Batch B | Step t(B) | Tokens/s | Of the best |", "|---|---|---|---|"]
        for b, tps in zip(batches, tok_s):
            mark = " ← knee" if b == k else ""
            lines.append(f"| {b}{mark} | {t0 + c * b:.1f} ms | {tps:,.0f} | {tps / max(tok_s):.0%} |")
        st.markdown("\n".join(lines))
        st.markdown(f"Each user waits the whole step, t(B), between two of its tokens. Ceiling $1/c$ = **{1000 / c:,.0f} tokens/s**; half of it at $B = t_0/c$ = **{t0 / c:.1f}**; "
                    f"{KNEE_SHARE:.0%} of it only at ${AT_SHARE:g}\\,t_0/c$ = **{AT_SHARE * t0 / c:.0f}**. The knee by "
                    "the course's "
                    f"rule, over these rows: **{k}**.")


@st.fragment
def slots() -> None:
    with st.container(border=True):
        st.markdown("**Try it: the engine's scheduler, slot by slot**")
        default = ", ".join(map(str, course.grid_lengths()))
        left, right = st.columns([3, 1])
        text = left.text_input("Output tokens of each request (2 to 8 requests, 1 to 12 tokens each)", default,
                               key="calc_slots_lengths")
        n_slots = right.number_input("Slots", 1, 6, course.GRID_SLOTS, key="calc_slots_n")
        try:
            lengths = [int(x) for x in text.replace(",", " ").split()]
            if not 2 <= len(lengths) <= 8 or not all(1 <= x <= 12 for x in lengths):
                raise ValueError
        except ValueError:
            st.error(f"Write 2 to 8 whole numbers from 1 to 12, separated by commas (got {text!r}).")
            return
        cols = st.columns(2)
        for col, mode in zip(cols, ("static", "continuous")):
            g = course.slot_grid(lengths, int(n_slots), mode)
            head = "| Step | " + " | ".join(f"Slot {i + 1}" for i in range(int(n_slots))) + " |"
            rule = "|---" * (int(n_slots) + 1) + "|"
            body = [f"| {i + 1} | " + " | ".join(cell or "·" for cell in line) + " |" for i, line in enumerate(g["grid"])]
            col.markdown(f"**{mode}**: {g['steps']} steps, {g['used']} of {g['held']} slot-steps used "
                         f"({g['used'] / g['held']:.0%})\n\n" + "\n".join([head, rule, *body]))
        st.caption("Every request is waiting at the start; step 1 prefills and gives each its first token. "
                   "✓ marks a request's last token, · an empty slot.")


@st.fragment
def kv_budget() -> None:
    with st.container(border=True):
        st.markdown("**Try it: the KV cache Little's Law asks for** (waiting requests hold none, so count "
                    "only the time each one runs)")
        # starts from lesson 5's busier worked example, on this machine's step model
        ex = course.load_example(course.LOADS[-1], lesson_step_model())
        a, b = st.columns(2)
        lam = a.slider("Arrival rate λ (requests/s)", 0.1, 50.0, min(max(round(ex["rate"], 2), 0.1), 50.0), 0.01,
                       key="calc_kv_lam")
        # only running requests hold KV blocks: the time that counts starts at a request's first step
        w = b.slider("Time each request runs, first step to last token (s)", 0.1, 30.0,
                     min(max(round(ex["service"], 2), 0.1), 30.0), 0.01, key="calc_kv_w")
        c, d = st.columns(2)
        tokens = c.slider("Tokens each request holds (prompt + output)", 16, 4096,
                          course.QUEUE_SPEC.prompt_hi + course.QUEUE_SPEC.output_hi, 16, key="calc_kv_tokens")
        pool = d.slider("KV cache (tokens)", 1024, 131072, EngineConfig().kv_pool_tokens, 1024, key="calc_kv_pool")
        inside = littles_law_in_system(lam, w)
        need = inside * tokens
        kib = course.kv_bytes_bf16() / 1024
        cols = st.columns(3)
        cols[0].metric("Requests running L = λ × run time", f"{inside:.1f}")
        cols[1].metric("KV tokens held on average", f"{need:,.0f}", help=f"{need * kib / 1024:,.0f} MiB in bf16")
        cols[2].metric("Share of the cache", f"{need / pool:.0%}")
        st.markdown((":red[**The average alone does not fit:** the engine must queue, preempt or shed load.]"
                     if need > pool else "It fits on average; bursts above the average still need headroom.")
                    + f" At {kib:.1f} KiB a token (SmolLM2-135M in bf16), {need:,.0f} tokens are "
                    f"{need * kib / 1024:,.0f} MiB.")


@st.cache_resource(max_entries=2, show_spinner=False)
def _knee_sweep_here(step_model) -> list[dict]:
    """Lesson 6's sweep on this machine's step model (a few seconds on the simulator; once per model)."""
    return course.knee_sweep_on(step_model, course.KNEE_CPU_VALUES)


def _sweep_table(rows: list[dict]) -> str:
    lines = ["| max_num_seqs | tokens/s | p95 TPOT | p95 TTFT |", "|---|---|---|---|"]
    for r in rows:
        mark = " ← knee" if r["knee"] else ""
        lines.append(f"| {r['max_num_seqs']}{mark} | {r['tok_s']:,.0f} | {r['tpot_p95_ms']:,.0f} ms | "
                     f"{r['ttft_p95_s']:,.1f} s |")
    return "\n".join(lines)


@st.fragment
def knee_example() -> None:
    """Lesson 6's worked example on two machines: this machine's step model (its calibrated profile, or the
    hand-set guess, said so) and the named GPU's roofline model, each with its knee and its ridge point."""
    from course import machines
    from engine.sim.roofline import roofline_profile, this_cpu
    with st.container(border=True):
        spec = course.KNEE_SPEC
        st.markdown(f"**The worked example on two machines**: prompts of {spec.prompt_lo}–{spec.prompt_hi} tokens, "
                    f"answers of {spec.output_lo}–{spec.output_hi}, all sent at once; every setting of a machine's "
                    "sweep gets the same requests, as many as its largest setting holds.")
        model, measured = _here()
        with st.spinner("Running the sweep on this machine's step model…"):
            here = _knee_sweep_here(model)
        gpu = course.knee_sweep()
        gpu_model = roofline_profile(course.KNEE_GPU)
        left, right = st.columns(2)
        here_name = "this machine's step model" if measured else "a guessed step model (this machine has none yet)"
        left.markdown(machines.badge(machines.SIMULATOR, "this machine's simulator" if measured else
                                     "this machine's simulator, on a guessed step model") + "\n\n" + _sweep_table(here))
        right.markdown(machines.badge(course.KNEE_GPU) + "\n\n" + _sweep_table(gpu))
        cpu = this_cpu()
        st.markdown(readings.knee_reading(here, here_name) + " " + readings.knee_reading(gpu, course.knee_gpu_name()))
        st.markdown("Where each turns: " + readings.ridge_sentence(cpu, "This machine's CPU (its peaks measured just now; a busy machine moves them)") + ". "
                    + readings.ridge_sentence(gpu_model.device, f"An {gpu_model.device.name}") + ". Past its ridge "
                    "every added sequence costs its own arithmetic; how soon that flattens throughput also depends "
                    "on what every step pays whatever its batch, which is why the knee is read off each sweep.")
        st.caption(f"Left: {model.label}. Right: {gpu_model.label} (spec-sheet figures, a model, not a measurement).")


CALCULATORS = {"mm1": mm1, "step_example": step_example, "step_time": step_time, "step_table": step_table,
               "slots": slots, "kv_budget": kv_budget, "knee_example": knee_example}
CALCULATOR_IDS = tuple(CALCULATORS)


def show_calculator(calc_id: str) -> None:
    """Draw the calculator `calc_id` (one of CALCULATOR_IDS); an unknown id is a clear error line."""
    if calc_id not in CALCULATORS:
        st.error(f"No calculator named {calc_id!r}: calculators are {', '.join(CALCULATOR_IDS)}.")
        return
    CALCULATORS[calc_id]()
