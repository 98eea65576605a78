"""Presets sized to the machine: each meets the target it is meant to meet, or misses the one it
is meant to miss, on the cost-model engine standing for a machine, and on one ten times faster."""
import pytest

from engine.runs.arrivals import build_requests
from engine.runs.build import build_engine
from engine.core.config import EngineConfig
from engine.core.metrics import SLO, summarize
from engine.sim.roofline import roofline_profile
from engine.core.step_model import StepModel

from playground.capacity import capacity, rate_slider_hi
from playground.checks import check
from playground.engines import H100_PROFILE
from playground.presets import PRESETS, matching_preset
from playground.setup import KNOBS, KV_POOL_TOKENS, Setup, knobs_for

# Machines given by step models with known parameters: a CPU-like one (a decode step grows with
# the batch) and a GPU-like one (flat until large batches).
CPU = StepModel(9.0, (2, 8, 32, 128), (2.0, 0.5, 1.0, 0.8, 0.75), 0.4, 1.5, 0.7, "a CPU-like machine")
MACHINES = {"cpu": CPU, "cpu x10": CPU.scaled(0.1, "ten times faster"),
            "gpu": StepModel(6.0, (64, 512), (0.002, 0.01, 0.02), 0.01, 0.004, 0.0005, "a GPU-like machine"),
            # the Playground's simulated H100: its presets are sized by the roofline model itself
            "h100 roofline": roofline_profile(H100_PROFILE)}
REQUESTS = 200      # enough arrivals for a p95, for the presets with an arrival rate
SEEDS = range(6)


def run(setup: Setup, machine: StepModel) -> dict:
    if setup.rate:
        setup = setup.changed(num_requests=REQUESTS)
    setup = setup.changed(continuous=False)
    engine = build_engine(EngineConfig(kv_pool_tokens=KV_POOL_TOKENS), setup.policy(), cost=machine)
    for r in build_requests(setup.workload()):
        engine.submit(r)
    engine.run()
    return summarize(engine.requests.values(), engine.steps, SLO(setup.ttft_slo_s, setup.tpot_slo_s))


@pytest.mark.parametrize("machine", list(MACHINES))
@pytest.mark.parametrize("pid", list(PRESETS))
def test_a_preset_meets_or_misses_the_targets_it_is_meant_to(pid, machine):
    preset, model = PRESETS[pid], MACHINES[machine]
    assert preset.meets or preset.misses
    # On several seeds: a learner's run draws its own requests, and a preset that met its target
    # on one draw only (long-context RAG did, at 2.5x its unloaded TTFT) teaches nothing reliably
    for seed in SEEDS:
        setup = preset.setup_for(model).changed(seed=seed)
        summary = run(setup, model)
        target = {"ttft": setup.ttft_slo_s, "tpot": setup.tpot_slo_s}
        p95 = {"ttft": summary["ttft_s"]["p95"], "tpot": summary["tpot_s"]["p95"]}
        for name in preset.meets:
            assert p95[name] <= target[name], \
                f"{pid} on {machine}, seed {seed}: p95 {name} {p95[name]:.3g} s over {target[name]:g} s"
        for name in preset.misses:
            assert p95[name] > 2 * target[name], \
                f"{pid} on {machine}, seed {seed}: p95 {name} {p95[name]:.3g} s within 2x {target[name]:g} s"
        assert summary["rejected"] == summary["failed"] == 0


@pytest.mark.parametrize("pid", list(PRESETS))
def test_a_ten_times_faster_machine_gets_ten_times_the_rate_and_a_tenth_of_the_targets(pid):
    slow, fast = (PRESETS[pid].setup_for(m) for m in (MACHINES["cpu"], MACHINES["cpu x10"]))
    assert fast.rate == pytest.approx(10 * slow.rate, rel=0.05)
    assert fast.ttft_slo_s == pytest.approx(slow.ttft_slo_s / 10, rel=0.05)
    assert fast.tpot_slo_s == pytest.approx(slow.tpot_slo_s / 10, rel=0.05)
    assert {k: v for k, v in fast.to_dict().items() if k not in ("rate", "ttft_slo_s", "tpot_slo_s")} \
        == {k: v for k, v in slow.to_dict().items() if k not in ("rate", "ttft_slo_s", "tpot_slo_s")}


@pytest.mark.parametrize("pid", list(PRESETS))
def test_a_preset_says_what_to_see_and_is_recognised(pid):
    preset = PRESETS[pid]
    assert preset.caption.startswith("Good: ") and "{" not in preset.caption
    if preset.load:
        assert f"at {preset.load:.0%}" in preset.caption.lower()
    for name in preset.meets + preset.misses:
        assert f"p95 {name.upper()}" in preset.caption
    setup = preset.setup_for(CPU)
    assert setup.rate == pytest.approx(preset.load * preset.capacity(CPU).rate, rel=0.05)
    assert matching_preset(setup.changed(seed=7, continuous=not setup.continuous), CPU) == pid
    assert matching_preset(setup.changed(max_wait_ms=setup.max_wait_ms + 50), CPU) is None


@pytest.mark.parametrize("machine", ["cpu", "gpu"])
def test_capacity_is_what_the_engine_sustains_when_overloaded(machine):
    """Past capacity the engine finishes requests at the rate capacity() predicts."""
    model = MACHINES[machine]
    preset = PRESETS["rush_hour"]
    summary = run(preset.setup_for(model), model)
    assert summary["request_throughput_req_s"] == pytest.approx(preset.capacity(model).rate, rel=0.15)


def test_capacity_of_a_machine_with_constant_step_time():
    """Every step 50 ms, whatever is in it: B slots each finish a request every output x 50 ms."""
    flat = StepModel(50.0, (), (0.0,), 0.0, 0.0, 0.0)
    setup = Setup(prompt_kind="fixed", prompt_lo=100, output_kind="fixed", output_lo=40, output_hi=40,
                  max_num_seqs=8, enable_chunked_prefill=False)
    cap = capacity(flat, setup)
    assert cap.rate == pytest.approx(8 / (40 * 0.05))
    assert cap.tpot_s == cap.full_tpot_s == pytest.approx(0.05)
    assert cap.ttft_s == pytest.approx(0.1)          # the prompt's step and the step it may wait for


def test_the_rate_slider_reaches_past_a_fast_engines_capacity_and_its_presets():
    """This machine's slider ends at the knob's end; the simulated H100's further, past twice its
    capacity, so every preset sized for it lands on the slider, rush hour included."""
    h100 = MACHINES["h100 roofline"]
    assert rate_slider_hi(CPU) == KNOBS["rate"].hi
    hi = rate_slider_hi(h100)
    assert hi >= 2 * capacity(h100, Setup()).rate > KNOBS["rate"].hi
    rates = {pid: p.setup_for(h100).rate for pid, p in PRESETS.items()}
    assert max(rates.values()) > KNOBS["rate"].hi          # the old slider end would have cut one off
    assert all(rate <= hi for rate in rates.values())


def test_a_link_keeps_a_rate_the_engines_slider_reaches():
    setup, problems = Setup.from_query({"rate": "64"}, knobs_for(130.0))
    assert setup.rate == 64 and not problems
    setup, problems = Setup.from_query({"rate": "64"})
    assert setup.rate == KNOBS["rate"].hi and "outside" in problems[0]


def test_the_rate_at_the_sliders_end_is_called_past_what_the_engine_serves():
    says = lambda setup, hi: any("far more than this engine can serve" in n.text for n in check(setup, rate_hi=hi))
    assert says(Setup(rate=20.0), 20.0)
    assert not says(Setup(rate=20.0), 130.0)
    assert says(Setup(rate=130.0), 130.0)
