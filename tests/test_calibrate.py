"""Calibration: the fit recovers a known machine, profiles are keyed and go stale, the command runs."""
import json
import random
from types import SimpleNamespace

import pytest

from engine.sim import calibrate as cal
from engine.sim import profile as profiles
from engine.core.clock import VirtualClock
from engine.core.executor import CostModelExecutor
from engine.core.kv_cache import BlockPool
from engine.core.request import Request
from engine.core.scheduler import ScheduledChunk, StepPlan
from engine.core.step_model import UNCALIBRATED, StepModel, StepShape, step_shape

# A machine whose step times are known exactly: piecewise in rows, like a CPU.
KNOWN = StepModel(fixed_ms=9.0, knots=(2, 8, 32, 128), token_ms=(2.0, 0.3, 0.6, 0.8, 0.75),
                  sample_ms=0.4, decode_read_ms=1.5, prefill_pair_ms=0.7, label="known")


class NoisyExecutor(CostModelExecutor):
    """The known machine, each step off by up to `noise` (relative), as a busy machine would be."""

    def __init__(self, clock, model, noise, seed=0):
        super().__init__(clock, model)
        self.noise, self.rng = noise, random.Random(seed)

    def execute(self, plan):
        t = self.clock.now()
        out = super().execute(plan)
        self.clock.t = t + (self.clock.now() - t) * (1 + self.rng.uniform(-self.noise, self.noise))
        return out


def measure(model, noise=0.0):
    clock = VirtualClock()
    pool = BlockPool(cal.FULL.pool_tokens // 16, 16)
    steps = cal.grid(64, 2048)
    ms = cal.time_steps(NoisyExecutor(clock, model, noise), clock, pool, steps, budget_s=60)
    assert pool.used_blocks == 0                       # every stand-in request gave its blocks back
    return [step_shape(cal.plan_for(s)) for s in steps], ms


class SetUpExecutor(CostModelExecutor):
    """The known machine, where the first step of each shape costs 50 times more (as recording a
    CUDA graph does on a GPU, for each decode batch and context)."""

    def __init__(self, clock, model):
        super().__init__(clock, model)
        self.seen = set()

    def execute(self, plan):
        t = self.clock.now()
        out = super().execute(plan)
        if step_shape(plan) not in self.seen:
            self.seen.add(step_shape(plan))
            self.clock.t = t + (self.clock.now() - t) * 50
        return out


# A GPU's shape: a step of decodes alone replays a CUDA graph in a few ms whatever its rows, and a
# step with a prefill chunk is launched kernel by kernel, ~20 ms more.
GPU_LIKE = StepModel(fixed_ms=3.0, knots=(), token_ms=(0.01,), sample_ms=0.01, decode_read_ms=0.02,
                     prefill_pair_ms=0.0005, label="known GPU", prefill_step_ms=20.0)


def test_calibration_recovers_the_cost_of_a_step_with_a_prefill_chunk():
    shapes, ms = measure(GPU_LIKE)
    model, report = cal.fit(shapes, ms)
    assert model.prefill_step_ms == pytest.approx(20.0, rel=1e-6)
    assert report["heldout_max_error"] < 1e-6
    decode, chunk = StepShape(32, 32, 32 * 300, 0), StepShape(34, 3, 2 * 300, 32 * 33 // 2)
    assert model.predict(chunk) > 5 * model.predict(decode)     # two more rows, six times the time


def test_a_profile_from_before_the_prefill_step_term_loads_with_it_at_zero():
    old = {k: v for k, v in KNOWN.to_dict().items() if k != "prefill_step_ms"}
    assert StepModel.from_dict(old).prefill_step_ms == 0.0
    assert StepModel.from_dict(old).coefficients == KNOWN.coefficients


@pytest.mark.parametrize("grid", [cal.QUICK, cal.FULL])
def test_no_shape_is_timed_at_its_first_call(grid):
    """The first call at a new shape pays set-up: it runs untimed, so even the quick grid's two
    passes measure every shape at its own speed."""
    clock = VirtualClock()
    pool = BlockPool(grid.pool_tokens // 16, 16)
    steps = cal.grid(16, 2048, grid)
    ms = cal.time_steps(SetUpExecutor(clock, KNOWN), clock, pool, steps, budget_s=60, passes=grid.passes)
    want = [KNOWN.predict(step_shape(cal.plan_for(s))) for s in steps]
    assert ms == pytest.approx(want, rel=1e-9)


def test_the_grid_covers_decode_prefill_and_mixed_steps():
    steps = cal.grid(64, 2048)
    decode_batches = {len(s) for s in steps if all(n == 1 for _, n, _ in s)}
    assert {1, 2, 16, 64} <= decode_batches
    assert {n for s in steps if len(s) == 1 and s[0][1] > 1 for _, n, _ in s} >= {8, 64, 512}
    assert any(len(s) > 1 and any(n > 1 for _, n, _ in s) for s in steps)      # mixed
    assert all(sum(a + n + 1 for a, n, _ in s) <= cal.FULL.pool_tokens for s in steps)
    assert max(len(s) for s in cal.grid(8, 2048)) <= 9           # up to max_num_seqs (+ a prefill)


def test_calibration_recovers_a_known_machine_exactly():
    shapes, ms = measure(KNOWN)
    model, report = cal.fit(shapes, ms)
    assert report["knots"] == list(KNOWN.knots)
    for got, want in zip(model.coefficients, KNOWN.coefficients):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-9)
    assert report["heldout_mean_error"] < 1e-9 and report["heldout_shapes"] >= 10


def test_on_a_noisy_machine_the_fit_stays_close_and_no_cost_is_negative():
    shapes, ms = measure(KNOWN, noise=0.04)
    model, report = cal.fit(shapes, ms)
    assert report["heldout_mean_error"] < 0.04
    assert all(c >= 0 for c in model.coefficients)
    for b, ctx in [(1, 100), (8, 500), (64, 16)]:
        assert model.decode_ms(b, ctx) == pytest.approx(KNOWN.decode_ms(b, ctx), rel=0.06)
    assert model.prefill_ms(300) == pytest.approx(KNOWN.prefill_ms(300), rel=0.06)


def test_the_form_is_chosen_by_held_out_error():
    """A machine that is piecewise in rows is not fitted well by one straight line: the data say so."""
    _, report = cal.fit(*measure(KNOWN))
    by_knots = {tuple(c["knots"]): c["heldout_mean_error"] for c in report["candidates"]}
    assert by_knots[()] > 0.02 and by_knots[KNOWN.knots] < 1e-9
    straight = StepModel(5.0, (), (0.8,), 0.3, 1.0, 0.5)
    model, report = cal.fit(*measure(straight))
    assert model.decode_ms(7, 300) == pytest.approx(straight.decode_ms(7, 300), rel=1e-6)


def test_step_shape_counts_rows_samples_and_attention():
    a = Request("a", list(range(10, 21)), 4)       # 11 prompt tokens
    b = Request("b", list(range(10, 30)), 4)       # 20 prompt tokens
    plan = StepPlan([ScheduledChunk(a, 10, 1, "decode"), ScheduledChunk(b, 6, 4, "prefill")])
    # decode reads its 11 keys; chunk rows at 6..9 see 7+8+9+10 keys; only `a` reaches its end
    assert step_shape(plan) == StepShape(tokens=5, samples=1, decode_context=11, prefill_pairs=34)
    clock = VirtualClock()
    CostModelExecutor(clock, KNOWN).execute(plan)
    assert clock.now() * 1000 == pytest.approx(KNOWN.step_ms(plan))
    assert "uncalibrated" in UNCALIBRATED.label


def test_a_step_model_refuses_knots_and_slopes_that_do_not_match():
    with pytest.raises(ValueError, match="token_ms needs 3 values"):
        StepModel(1.0, (2, 8), (1.0,), 0, 0, 0)
    with pytest.raises(ValueError, match="increasing"):
        StepModel(1.0, (8, 2), (1.0, 1.0, 1.0), 0, 0, 0)


# ----------------------------------------------------------------------------- profiles


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(profiles, "machine_name", lambda device: "Test CPU, 2 cores")
    monkeypatch.setattr(profiles, "_forward_code_digest", lambda: "code-1")
    return tmp_path


def a_profile(model="smollm2", dtype="bfloat16"):
    key = profiles.current_key(model, dtype, "cpu")
    return profiles.Profile(**key, step_model=KNOWN, fit={"heldout_mean_error": 0.03, "heldout_max_error": 0.1},
                            measurements=[[1, 1, 17, 0, 12.5]], measured_s=40.0)


def test_a_profile_saves_and_loads(cache):
    assert profiles.load_profile("smollm2", "bf16", "cpu") is None
    saved = profiles.save_profile(a_profile())
    assert saved.path.startswith(str(cache))
    loaded = profiles.load_profile("smollm2", "bf16", "cpu")    # "bf16" and "bfloat16" are one dtype
    assert loaded == saved and loaded.step_model == KNOWN
    assert loaded.step_model.step_ms(StepPlan()) == pytest.approx(KNOWN.fixed_ms)
    assert "Test CPU" in loaded.describe() and "3.0%" in loaded.describe()


@pytest.mark.parametrize("change", ["machine", "code", "model", "dtype"])
def test_a_profile_goes_stale_when_its_key_changes(cache, monkeypatch, change):
    profiles.save_profile(a_profile())
    if change == "machine":
        monkeypatch.setattr(profiles, "machine_name", lambda device: "Other CPU, 64 cores")
    elif change == "code":
        monkeypatch.setattr(profiles, "_forward_code_digest", lambda: "code-2")
    model, dtype = ("smollm2-other" if change == "model" else "smollm2"), ("fp32" if change == "dtype" else "bf16")
    assert profiles.load_profile(model, dtype, "cpu") is None
    if change in ("machine", "code"):           # measured again: the new profile replaces the stale one
        profiles.save_profile(a_profile())
        assert profiles.load_profile("smollm2", "bf16", "cpu") is not None


def test_a_profile_whose_stored_key_differs_is_stale(cache):
    path = profiles.save_profile(a_profile()).path
    data = json.loads(open(path).read())
    data["dtype"] = "float32"                   # measured in another dtype, stored under this name
    open(path, "w").write(json.dumps(data))
    assert profiles.load_profile("smollm2", "bf16", "cpu") is None


def test_a_file_that_is_not_a_profile_is_refused_by_name(cache, tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="p.json.*not a step-time profile"):
        profiles.read_profile(str(bad))
    bad.write_text("not json")
    assert profiles.load_profile("smollm2", "bf16", "cpu") is None


# ----------------------------------------------------------------------------- the command


def test_the_calibrate_command_measures_fits_and_saves(tmp_path, monkeypatch, capsys):
    from engine.cli import main
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    assert main(["calibrate", "--model", "tiny", "--dtype", "fp32", "--device", "cpu",
                 "--max-num-seqs", "8", "--budget-s", "10", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "held-out error" in out and "saved to" in out
    found = profiles.load_profile("tiny", "fp32", "cpu")
    assert found is not None and found.fit["heldout_shapes"] > 0 and found.fit["quick"]
    assert "quick estimate" in found.describe()
    # A 10 s quick fit of noisy timings can put a per-row term at 0, so wider is "not cheaper"
    assert found.step_model.decode_ms(8, 100) >= found.step_model.decode_ms(1, 100) > 0


def test_the_calibrate_command_refuses_bad_settings(capsys):
    from engine.cli import main
    assert main(["calibrate", "--max-num-seqs", "0"]) == 2
    assert "--max-num-seqs 0 is not allowed (1 to 4096)" in capsys.readouterr().err


def test_steps_interrupted_by_other_programs_are_left_out_of_the_fit():
    shapes, ms = measure(KNOWN)
    hit = [i for i in range(len(ms)) if i % 7 == 2]            # some training steps, 4x slower
    ms = [m * 4 if i in hit else m for i, m in enumerate(ms)]
    model, _ = cal.fit(shapes, ms, candidates=(KNOWN.knots,))
    for got, want in zip(model.coefficients, KNOWN.coefficients):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-9)


def test_the_engine_loop_term_is_the_mean_gap_between_steps():
    """Steps at 0-1 s, 1.5-2.5 s and 3.25-4 s leave gaps of 0.5 and 0.75 s: 625 ms a step."""
    steps = [SimpleNamespace(t_start_s=a, t_end_s=b) for a, b in [(0, 1), (1.5, 2.5), (3.25, 4)]]
    assert cal.mean_gap_ms(steps) == pytest.approx(625.0)
    assert cal.mean_gap_ms(steps[:1]) == 0.0


def test_the_engine_loop_term_of_a_real_run_is_its_time_between_steps():
    """On the real engine (tiny model) the loop takes some time between steps, and under 50 ms."""
    from engine.model.model import load_model
    model = load_model("tiny", "cpu", "fp32")
    per_step = cal.loop_ms(model)
    assert 0 < per_step < 50


def test_calibration_recovers_a_jump_where_the_linear_kernel_changes():
    """A machine whose third row costs 6 ms more (one kernel for 1-2 rows, another from 3) is
    found with knots at 2 and 3, and the jump is the 2-3 segment's cost per row."""
    jump = StepModel(fixed_ms=10.0, knots=(2, 3, 16, 64), token_ms=(1.0, 6.0, 0.5, 0.8, 0.65),
                     sample_ms=0.25, decode_read_ms=3.0, prefill_pair_ms=0.8, label="jump at 3 rows")
    shapes, ms = measure(jump)
    model, report = cal.fit(shapes, ms)
    assert report["knots"] == [2, 3, 16, 64]
    assert model.token_ms[1] == pytest.approx(6.0, rel=1e-6)
