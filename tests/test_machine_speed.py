"""This machine's step model, one answer for every page (engine/sim/machine_speed.py): the saved
profile refit online, a quick measurement where a loaded model has none, the hand-set guess said to
be one where nothing was measured, and the refit's current error."""
import pytest

from engine.core import step_fit
from engine.core.step_model import UNCALIBRATED, StepModel, StepShape
from engine.sim import machine_speed as speed
from engine.sim import profile as profiles

KNOWN = StepModel(8.0, (), (0.5,), 0.3, 1.2, 0.4, "calibrated: test model on Test CPU")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty results cache, a fixed machine and code, no refit or profile read in this process yet."""
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(profiles, "machine_name", lambda device: "Test CPU, 2 cores")
    monkeypatch.setattr(profiles, "_forward_code_digest", lambda: "code-1")
    monkeypatch.setattr(step_fit, "_fits", {})
    monkeypatch.setattr(speed, "_read", {})
    return tmp_path


def save(model="tiny", step_model=KNOWN):
    name, dtype, device = speed.identity(model)
    key = profiles.current_key(name, dtype, device)
    return profiles.save_profile(profiles.Profile(**key, step_model=step_model,
                                                  fit={"heldout_mean_error": 0.03, "heldout_max_error": 0.1}))


def test_without_a_profile_it_is_the_guess_and_says_so(cache):
    got = speed.machine_speed("tiny")
    assert got.kind == speed.GUESS and not got.calibrated
    assert got.step_model == UNCALIBRATED and "hand-set guess" in got.step_model.label
    assert got.error is None, "the guess was never checked against a real step"
    assert speed.step_model_here("tiny") == UNCALIBRATED


def test_a_saved_profile_is_this_machines_step_model(cache):
    save()
    got = speed.machine_speed("tiny")
    assert got.kind == speed.CALIBRATED and got.calibrated
    assert got.step_model.coefficients == KNOWN.coefficients
    assert "calibrated: test model on Test CPU" in got.step_model.label
    assert "not yet checked" in got.step_model.label and got.error is None


def test_the_online_refit_is_applied_and_its_error_reported(cache):
    save()
    fit = step_fit.fit_for(speed.identity("tiny"), KNOWN, save().path)
    shapes = [StepShape(b, b, b * 200, 0) for b in (1, 2, 4, 8, 16, 32)] * 40   # 240: the last one refits and saves
    for i, shape in enumerate(shapes):              # the app's steps: 5 ms + 2x the profile, give or take 2%
        fit.observe(shape, (5 + 2 * KNOWN.predict(shape)) * (1.02 if i % 2 else 0.98))
    got = speed.machine_speed("tiny")
    shape = StepShape(8, 8, 8 * 300, 0)
    assert got.step_model.predict(shape) == pytest.approx(5 + 2 * KNOWN.predict(shape), rel=0.05)
    assert got.error == fit.error and 0 < got.error < 0.05
    assert f"current error {100 * fit.error:.0f}%" in got.step_model.label
    # the refit is stored beside the profile: a new process (no refit in memory) starts from it
    step_fit._fits.clear()
    again = speed.machine_speed("tiny")
    assert again.step_model.predict(shape) == pytest.approx(got.step_model.predict(shape))
    assert again.error == pytest.approx(fit.error)


def test_a_profile_made_or_changed_later_is_read_again(cache):
    assert not speed.machine_speed("tiny").calibrated
    save()
    assert speed.machine_speed("tiny").calibrated, "the file appeared: read again at once"
    faster = StepModel(4.0, (), (0.25,), 0.15, 0.6, 0.2, "calibrated: test model, measured again")
    save(step_model=faster)
    assert speed.machine_speed("tiny").step_model.coefficients == faster.coefficients


def test_a_loaded_model_without_a_profile_is_measured_quickly_once(cache, monkeypatch):
    from types import SimpleNamespace
    name, dtype, device = speed.identity("tiny")            # what load_model("tiny") loads here
    loaded = SimpleNamespace(name=name, dtype=f"torch.{dtype}", device=device)
    calls = []

    def quick(model, **kw):
        calls.append(kw)
        key = profiles.current_key(model.name, dtype, device)
        return profiles.Profile(**key, step_model=KNOWN, fit={"quick": True, "heldout_mean_error": 0.05,
                                                              "heldout_max_error": 0.2})
    monkeypatch.setattr(speed, "calibrate", quick)
    assert not speed.machine_speed(loaded).calibrated, "measured only where asked"
    assert calls == []
    first = speed.machine_speed(loaded, measure_if_missing=True)
    second = speed.machine_speed(loaded, measure_if_missing=True)
    assert calls == [{"quick": True}], "measured once, quickly; then read from where it was saved"
    assert first.calibrated and second.step_model.coefficients == KNOWN.coefficients
    assert profiles.load_profile("tiny", dtype, device) is not None, "kept for the next start"
    name_only = speed.machine_speed("tiny", measure_if_missing=True)
    assert name_only.calibrated, "a name finds the profile the loaded model made"


def test_a_result_on_the_guess_is_never_labelled_this_machines(cache):
    """The label of a simulated result follows the kind: this machine's step model only where a profile
    was measured here; on the hand-set guess it says so."""
    from course.machines import SOURCE_LABEL, source_label
    guessed = source_label("simulated", speed.machine_speed("tiny").calibrated)
    assert guessed == SOURCE_LABEL["guessed"] and "this machine's" not in guessed
    assert "guessed step model" in guessed and "not calibrated" in guessed
    save()
    assert source_label("simulated", speed.machine_speed("tiny").calibrated) == SOURCE_LABEL["simulated"]
    assert source_label("measured", False) == SOURCE_LABEL["measured"], "a real run is this machine's either way"
