"""The simulator: the same scheduler as the real engine on a virtual clock. It is deterministic
for a seed, and given the real run's step times it makes the real run's decisions, step by step.
The validation's comparison gives the errors a known difference in step times implies."""
import math
from types import SimpleNamespace

import pytest

from engine.runs.arrivals import build_requests
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.request import EventKind
from engine.sim.simulate import SimProfile, build_simulation, fresh_copy, resolve_profile, simulate
from engine.sim.validate_sim import CASES, compare, error_table, relative_errors, run_real, worst
from engine.runs.workload import PromptMaker, WorkloadSpec

CONFIG = EngineConfig(kv_pool_tokens=8192)


def run_sim(spec: WorkloadSpec, policy=SchedulerPolicy(), profile_name="h100-sxm:llama-3.1-8b"):
    return simulate(CONFIG, policy, resolve_profile(profile_name), build_requests(spec))


def trace(engine):
    return ([(s.t_start_s, s.t_end_s, s.members, s.preempted) for s in engine.steps],
            [(r.id, r.first_token_s, r.finish_s, tuple(r.output_token_ids)) for r in engine.all_requests()])


def test_the_simulator_is_deterministic_for_a_seed():
    spec = WorkloadSpec(num_requests=60, rate=30, burstiness=2, prompt_kind="longtail", prompt_hi=900, seed=3)
    policy = SchedulerPolicy(max_num_seqs=8, kv_capacity_tokens=2048)
    first, again = trace(run_sim(spec, policy)), trace(run_sim(spec, policy))
    assert first == again
    assert trace(run_sim(spec.changed(seed=4), policy)) != first   # a seed does change the run


class ReplayedSteps:
    """Step times that end each simulated step when the real one ended, or when the real engine
    next took in arrivals (its clock had moved on by then): the real run's timeline, replayed."""

    def __init__(self, real_engine):
        queued = [e.t_s for e in real_engine.events if e.kind is EventKind.QUEUED]
        steps = real_engine.steps
        self.ends = []
        for k, s in enumerate(steps):
            next_start = steps[k + 1].t_start_s if k + 1 < len(steps) else math.inf
            admitted = [t for t in queued if s.t_end_s <= t <= next_start]
            self.ends.append(max([s.t_end_s, *admitted]))
        self.clock = None
        self.step = 0

    def step_ms(self, plan) -> float:
        end = self.ends[self.step]
        self.step += 1
        return (end - self.clock.now()) * 1000


@pytest.fixture(scope="module")
def smollm2():
    from engine.model.model import load_model
    return load_model("smollm2", "cpu", "auto")


def test_same_step_times_give_the_same_steps_as_the_real_engine(smollm2):
    spec = WorkloadSpec(num_requests=8, rate=12, prompt_lo=40, prompt_hi=160, output_lo=6, output_hi=20, seed=11)
    policy = SchedulerPolicy(max_num_seqs=4, max_num_batched_tokens=96, long_prefill_token_threshold=48,
                             kv_capacity_tokens=256)
    requests = build_requests(spec, PromptMaker(smollm2.tokenizer))
    real = run_real(CONFIG, policy, smollm2, [fresh_copy(r) for r in requests])
    assert sum(s.preempted for s in real.steps) > 0, "the workload is meant to force preemptions"

    replay = ReplayedSteps(real)
    profile = SimProfile("replay", "the real run's step times", replay)
    sim = build_simulation(CONFIG, policy, profile)
    replay.clock = sim.clock
    # Each request arrives in the simulation when the real engine took it in: a real engine that
    # woke late from an idle wait took in several arrivals at once, and so must the replay.
    taken_in = {e.request_id: e.t_s for e in real.events if e.kind is EventKind.QUEUED}
    for r in requests:
        copy = fresh_copy(r)
        copy.arrival_s = taken_in[r.id]
        sim.submit(copy)
    sim.run()
    assert [s.members for s in sim.steps] == [s.members for s in real.steps]
    assert [s.preempted for s in sim.steps] == [s.preempted for s in real.steps]

    # The comparison has teeth: the same scheduler decides otherwise under other step times. With
    # 1 ms steps each request finishes before the next arrives (batches of one); with 10 s steps
    # every request has arrived by the second step. The two differ from each other, so whatever the
    # real machine's timings were, the real run's batches differ from at least one of them, and the
    # equality with the replay above is not one that any step times would pass.
    def members_under(ms):
        profile = SimProfile(f"{ms} ms", f"{ms} ms a step", SimpleNamespace(step_ms=lambda plan: ms))
        return [s.members for s in simulate(CONFIG, policy, profile, [fresh_copy(r) for r in requests]).steps]

    fast, slow = members_under(1.0), members_under(10_000.0)
    assert fast != slow
    assert any(other != [s.members for s in real.steps] for other in (fast, slow))


class Scaled:
    """A step model `factor` times as slow as another."""

    def __init__(self, inner, factor: float):
        self.inner, self.factor = inner, factor

    def step_ms(self, plan) -> float:
        return self.inner.step_ms(plan) * self.factor


def test_the_comparison_reports_a_known_difference_in_step_times():
    base = resolve_profile("a100-80gb:smollm2-135m")
    slower = SimProfile("slower", "25% slower", Scaled(base.step_model, 1.25))
    case = CASES[1]
    # rate 0: every request is in at the start, so every time in the run scales with the steps
    requests = build_requests(case.spec.changed(rate=0))
    run_with = lambda profile: (lambda policy, rs: simulate(CONFIG, policy, profile, rs))

    same = compare(case, run_with(base), run_with(base), requests)
    assert all(e == 0 for e in same["errors"].values())

    result = compare(case, run_with(base), run_with(slower), requests)
    errors = result["errors"]
    for label in ("TTFT p50", "TTFT p95", "TPOT p50", "TPOT p95", "makespan"):
        assert errors[label] == pytest.approx(0.25, abs=1e-6), label
    assert errors["throughput"] == pytest.approx(1 / 1.25 - 1, abs=1e-6)
    table = error_table([same, result])
    assert "+25.0%*" in table and "-20.0%*" in table and "+0.0% " in table
    assert worst([same, result])[2] == pytest.approx(0.25)


def test_a_miss_counts_as_noise_only_within_the_real_engines_own_spread():
    """An error of 15% on a metric whose real runs spread by 20% is within the noise; 15% where
    they spread by 5%, or 25% where they spread by 20%, is not; 8% passes the 10% tolerance anyway."""
    from engine.sim.validate_sim import within, within_noise
    result = {"errors": {"TTFT p50": 0.15, "TTFT p95": -0.15, "TPOT p50": 0.25, "TPOT p95": 0.08,
                         "throughput": math.nan},
              "real_spread": {"TTFT p50": 0.20, "TTFT p95": 0.05, "TPOT p50": 0.20, "TPOT p95": 0.0,
                              "throughput": 0.0}}
    assert within_noise([result]) == (2, 4)
    assert within([result]) == (1, 4)


def test_a_missing_real_value_gives_no_error_rather_than_a_wrong_one():
    real = {"ttft_s": {"p50": 0.0, "p95": math.nan}, "tpot_s": {"p50": 0.1, "p95": 0.2},
            "output_throughput_tok_s": 10.0, "duration_s": 2.0}
    sim = {"ttft_s": {"p50": 0.1, "p95": 0.1}, "tpot_s": {"p50": 0.11, "p95": 0.2},
           "output_throughput_tok_s": 8.0, "duration_s": 3.0}
    errors = relative_errors(real, sim)
    assert math.isnan(errors["TTFT p50"]) and math.isnan(errors["TTFT p95"])
    assert errors["TPOT p50"] == pytest.approx(0.1) and errors["throughput"] == pytest.approx(-0.2)
    assert errors["makespan"] == pytest.approx(0.5)


def test_a_kv_capacity_beyond_the_simulated_device_is_refused():
    profile = resolve_profile("l4:llama-3.1-8b")
    with pytest.raises(ValueError, match=r"kv_capacity_tokens 100000 .* \(allowed 1 to \d+"):
        simulate(CONFIG, SchedulerPolicy(kv_capacity_tokens=100_000), profile, [])


def test_the_calibrated_profile_is_found_by_default_or_by_its_file(tmp_path, monkeypatch):
    from engine.sim.profile import Profile, current_key, save_profile
    from engine.core.step_model import StepModel
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    known = StepModel(fixed_ms=5.0, knots=(), token_ms=(0.5,), sample_ms=0.1, decode_read_ms=1.0,
                      prefill_pair_ms=0.2, label="known")
    fit = {"heldout_mean_error": 0.02, "heldout_max_error": 0.05}
    saved = save_profile(Profile(**current_key("smollm2", "fp32", "cpu"), step_model=known, fit=fit))
    by_default = resolve_profile(None, "smollm2", "fp32", "cpu")
    by_file = resolve_profile(saved.path)
    for p in (by_default, by_file):
        assert p.calibrated and p.step_model == known and p.label.startswith("calibrated profile:")
    spec = WorkloadSpec(num_requests=5, rate=0, prompt_kind="fixed", prompt_lo=10, output_kind="fixed", output_lo=3)
    engine = simulate(CONFIG, SchedulerPolicy(), by_default, build_requests(spec))
    # one step of five 10-token prompts, then two of five decodes each
    prefill = 5.0 + 0.5 * 50 + 0.1 * 5 + 0.2 * 5 * 55 / 1000
    decode = lambda context: 5.0 + 0.5 * 5 + 0.1 * 5 + 1.0 * 5 * context / 1000
    assert [s.duration_s * 1000 for s in engine.steps] == pytest.approx([prefill, decode(11), decode(12)])
    with pytest.raises(ValueError, match="calibrate"):
        resolve_profile(None, "smollm2", "bf16", "cpu")     # none was saved for bf16


def test_an_unknown_profile_says_what_to_use():
    with pytest.raises(ValueError, match="calibrate.*h100-sxm.*hand-set"):
        resolve_profile("no-such-profile.json")


def test_the_real_side_is_the_median_of_its_repeats():
    """Three real runs, 1x, 1.25x and 3x as slow: each metric is the middle one's, so a simulator
    1.25x as slow is exact (the first run alone would give +25%, the mean of the three about -29%)."""
    base = resolve_profile("a100-80gb:smollm2-135m")
    case = CASES[1]
    requests = build_requests(case.spec.changed(rate=0))
    speeds = iter([1.0, 3.0, 1.25])
    real = lambda policy, rs: simulate(CONFIG, policy, SimProfile("r", "r", Scaled(base.step_model, next(speeds))), rs)
    sim = lambda policy, rs: simulate(CONFIG, policy, SimProfile("s", "s", Scaled(base.step_model, 1.25)), rs)
    result = compare(case, real, sim, requests, repeats=3)
    assert result["real_runs"] == 3
    assert all(e == pytest.approx(0, abs=1e-9) for e in result["errors"].values()), result["errors"]


def test_validate_runs_every_case_in_rounds_on_the_real_engine(lab_env):
    """validate() on the tiny model: each case's real side is the median of `repeats` runs, made
    in rounds (every case once, then again), and each case is also simulated."""
    from engine.sim import validate_sim
    from engine.model.model import load_model
    model = load_model("tiny")
    order = []
    real_run = validate_sim.run_real

    def counted(config, policy, model, requests):
        order.append(policy)
        return real_run(config, policy, model, requests)

    cases = [validate_sim._case("a", dict(num_requests=3, rate=0.0, output_lo=2, output_hi=4), max_num_seqs=2),
             validate_sim._case("b", dict(num_requests=3, rate=0.0, output_lo=2, output_hi=4), mode="static",
                                max_num_seqs=2)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validate_sim, "run_real", counted)
        results = validate_sim.validate(model, resolve_profile("a100-80gb:smollm2-135m"), cases, repeats=2)
    assert [r["case"] for r in results] == ["a", "b"] and all(r["real_runs"] == 2 for r in results)
    # the warm-up, then rounds: a, b, a, b
    assert [p.mode for p in order[1:]] == ["continuous", "static", "continuous", "static"]
    assert all(r["sim"]["steps"] > 0 and r["real"]["steps"] > 0 for r in results)


def test_the_machine_speed_factor_recovers_a_known_slow_down(monkeypatch):
    """validate-sim times the reference steps again and compares them with their calibrated
    times. On the virtual clock a step takes what its cost model says, so an engine whose costs
    are 1.25 times the calibrated ones must give 1.25, and the same costs 1.0."""
    from engine.sim import profile as profiles
    from engine.sim.calibrate import plan_for
    from engine.core.step_model import StepModel, step_shape
    from engine.sim.validate_sim import ANCHOR_STEPS, calibrated_times, retimed, speed_factor
    now = StepModel(9.0, (2, 8, 32, 128), (2.0, 0.5, 1.0, 0.8, 0.75), 0.4, 1.5, 0.7, "the machine now")
    then = now.scaled(1 / 1.25, "the machine when calibrated")
    stored = [[*step_shape(plan_for(chunks)), then.step_ms(plan_for(chunks))] for chunks in ANCHOR_STEPS]
    monkeypatch.setattr(profiles, "read_profile", lambda path: SimpleNamespace(measurements=[[1, 1, 0, 1, 5.0], *stored]))
    profile = SimProfile("calibrated.json", "calibrated", then, calibrated=True)
    calibrated = calibrated_times(profile)
    assert calibrated is not None and len(calibrated) == len(ANCHOR_STEPS)

    big = EngineConfig(kv_pool_tokens=16384)
    engine = build_simulation(big, SchedulerPolicy(kv_capacity_tokens=16384), SimProfile("now", "now", now))
    assert speed_factor(engine, calibrated) == pytest.approx(1.25, rel=1e-6)
    same = build_simulation(big, SchedulerPolicy(kv_capacity_tokens=16384), SimProfile("then", "then", then))
    assert speed_factor(same, calibrated) == pytest.approx(1.0, rel=1e-6)
    assert retimed(profile, 1.25).step_model.step_ms(plan_for(ANCHOR_STEPS[0])) == pytest.approx(
        now.step_ms(plan_for(ANCHOR_STEPS[0])), rel=1e-9)

    # Nothing to compare with: a profile that is not calibrated, or one that did not time every reference step
    assert calibrated_times(SimProfile("h100", "roofline", now)) is None
    monkeypatch.setattr(profiles, "read_profile", lambda path: SimpleNamespace(measurements=stored[1:]))
    assert calibrated_times(profile) is None


def test_the_spread_of_the_real_runs_is_largest_minus_smallest_over_the_median():
    from engine.sim.validate_sim import METRICS, spread
    def summary(ttft_p50):
        return {"ttft_s": {"p50": ttft_p50, "p95": 2.0}, "tpot_s": {"p50": 0.05, "p95": 0.06},
                "output_throughput_tok_s": 100.0, "duration_s": 0.0}
    out = spread([summary(1.0), summary(1.2), summary(0.9)])
    assert list(out) == [label for label, _, _ in METRICS]
    assert out["TTFT p50"] == pytest.approx(0.3) and out["TTFT p95"] == 0 and out["throughput"] == 0
    assert math.isnan(out["makespan"])          # a median of 0: no spread to speak of


def test_a_case_arrives_at_its_share_of_the_capacity_the_profile_gives():
    """validate-sim sizes each arrival-driven workload to LOAD of what the machine serves: the
    capacity is the requests per second of the same requests all arriving at once, on the simulator.
    Twice as slow a machine gets half the rate; a case with no load keeps its own rate."""
    from dataclasses import replace
    from engine.sim.validate_sim import CASES, sized
    from engine.core.step_model import StepModel
    fast = StepModel(9.0, (), (0.5,), 0.4, 1.5, 0.7, "fast")
    case = replace(CASES[2], load=0.5)
    on_fast = sized(case, SimProfile("fast", "fast", fast), None, CONFIG)
    at_once = simulate(CONFIG, case.policy, SimProfile("fast", "fast", fast),
                       build_requests(replace(case.spec, rate=0.0)))
    capacity = case.spec.num_requests / max(r.finish_s for r in at_once.all_requests())
    assert on_fast.spec.rate == pytest.approx(0.5 * capacity, abs=0.01) and on_fast.spec.rate != case.spec.rate
    on_slow = sized(case, SimProfile("slow", "slow", fast.scaled(2.0, "slow")), None, CONFIG)
    assert on_slow.spec.rate == pytest.approx(on_fast.spec.rate / 2, abs=0.01)
    assert sized(replace(case, load=0.0), SimProfile("fast", "fast", fast), None, CONFIG) == replace(case, load=0.0)
