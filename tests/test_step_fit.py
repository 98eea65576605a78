"""The app's step model is refit online from the steps its engine really takes, and says its error."""
import json
import random

import numpy as np
import pytest

from engine.core import step_fit
from engine.runs.arrivals import ArrivalFeed
from engine.runs.build import build_engine
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.step_fit import StepFit, fit_offset_scale
from engine.core.step_model import StepModel, StepShape
from engine.runs.workload import WorkloadSpec

PROFILE = StepModel(9.0, (2, 8, 32, 128), (2.0, 0.5, 1.0, 0.8, 0.75), 0.4, 1.5, 0.7, "a profile")


def shapes(n, rng):
    for _ in range(n):
        b = rng.randint(1, 32)
        prefill = rng.choice([0, 0, 0, 64, 256])
        yield StepShape(b + prefill, b, b * rng.randint(50, 600), prefill * (prefill + 1) // 2)


def test_a_slower_app_is_learned_and_its_error_falls():
    """The app's steps take 25 ms + 2.3 × what the profile says (noise ±5%): the model in use
    starts 2-3x optimistic, and a few refits later predicts each new step within a few percent."""
    rng = random.Random(1)
    fit = StepFit(PROFILE)
    for shape in shapes(30, rng):                       # before the first refit: the profile as it is
        fit.observe(shape, (25 + 2.3 * PROFILE.predict(shape)) * rng.uniform(0.95, 1.05))
    early = fit.error
    for shape in shapes(490, rng):
        fit.observe(shape, (25 + 2.3 * PROFILE.predict(shape)) * rng.uniform(0.95, 1.05))
    assert early > 0.5
    assert fit.error < 0.04
    assert fit.offset_ms == pytest.approx(25, abs=6) and fit.scale == pytest.approx(2.3, rel=0.08)
    model = fit.current()
    shape = StepShape(8, 8, 8 * 300, 0)
    assert model.predict(shape) == pytest.approx(25 + 2.3 * PROFILE.predict(shape), rel=0.05)
    assert "refit on 520 of this app's real steps" in model.label
    assert f"current error {100 * fit.error:.0f}% (median over the last 200 steps)" in model.label
    assert model.error == fit.error, "the error as a number, for a legend to name without reading the label"
    assert StepFit(PROFILE).current().error is None, "no real step yet: no error"


def test_interrupted_steps_do_not_bend_the_fit_and_one_shape_fits_a_scale():
    rng = random.Random(2)
    fit = StepFit(PROFILE)
    one = StepShape(4, 4, 4 * 200, 0)
    for i in range(300):
        slow = 8 if i % 20 == 0 else 1                 # one step in 20 interrupted
        fit.observe(one, 1.8 * PROFILE.predict(one) * slow * rng.uniform(0.97, 1.03))
    assert fit.offset_ms == 0 and fit.scale == pytest.approx(1.8, rel=0.03)
    assert fit.error < 0.05                            # the median does not see the interrupted ones
    assert fit_offset_scale(np.array([10.0, 20.0, 40.0]), np.array([25.0, 45.0, 85.0])) == pytest.approx((5.0, 2.0))


def test_an_engine_tells_its_steps_and_the_refit_is_stored_and_read_back(tmp_path):
    """A simulated engine's steps take what its cost model says; a fit started from a profile
    half as slow learns the factor 2 from the engine's own records, and the next process reads it."""
    truth = PROFILE.scaled(2.0, "truth")
    eng = build_engine(EngineConfig(), SchedulerPolicy(max_num_seqs=16), cost=truth)
    path = tmp_path / "profile-x.json"
    fit = step_fit.stored_fit(PROFILE, step_fit.refit_path(str(path)))
    eng.step_observer = fit.observe
    for r in ArrivalFeed(WorkloadSpec(num_requests=80, rate=0, output_lo=10, output_hi=60)).due(0.0):
        eng.submit(r)
    eng.run()
    assert fit.steps >= step_fit.MIN_STEPS + step_fit.REFIT_EVERY
    assert fit.scale == pytest.approx(2.0, rel=0.02) and fit.error < 0.02
    fit.save()
    stored = json.loads((tmp_path / "profile-x.refit.json").read_text())
    again = step_fit.stored_fit(PROFILE, step_fit.refit_path(str(path)))
    assert again.scale == stored["scale"] and again.steps == fit.steps
    assert again.error == pytest.approx(fit.error) and "refit on" in again.current().label
    # a refit of another profile is not taken for this one's
    assert step_fit.stored_fit(PROFILE.scaled(1.1, "other"), step_fit.refit_path(str(path))).steps == 0


def test_a_machine_several_times_slower_than_its_profile_is_followed():
    """Steps 5x what the profile says (a busy machine): the refit must not throw them all away as
    interrupted because the model in use predicts a fifth of them."""
    rng = random.Random(3)
    fit = StepFit(PROFILE)
    for shape in shapes(200, rng):
        fit.observe(shape, 5 * PROFILE.predict(shape) * rng.uniform(0.9, 1.1))
    assert fit.scale == pytest.approx(5, rel=0.1) and fit.error < 0.1
