"""A simulated live run (the cost model on a virtual clock) runs at `speed` times wall time, and
a pause stops its clock. Loose bounds: this checks the pacing, not the machine's timer."""
import time

from engine.core.config import SchedulerPolicy
from engine.runs.live import LiveRun
from engine.runs.workload import WorkloadSpec


class ConstantSteps:
    """Every step takes 100 ms of virtual time."""
    label = "100 ms a step"

    def step_ms(self, plan) -> float:
        return 100.0


def virtual_rate(live: LiveRun, wall_s: float) -> float:
    """Virtual seconds per wall second over the next `wall_s`."""
    v0, w0 = live.engine.clock.now(), time.monotonic()
    time.sleep(wall_s)
    return (live.engine.clock.now() - v0) / (time.monotonic() - w0)


def test_virtual_time_runs_at_the_speed_set_and_stops_on_pause():
    live = LiveRun(SchedulerPolicy(), WorkloadSpec(continuous=True, rate=4.0, seed=3),
                   cost=ConstantSteps(), speed=20)
    live.start()
    try:
        time.sleep(0.2)                                # past the start
        assert 10 < virtual_rate(live, 1.0) < 30
        assert len(live.engine.steps) > 20             # it stepped, not only waited for arrivals

        live.pause()
        time.sleep(0.2)                                # the step in progress ends
        assert virtual_rate(live, 0.5) == 0

        live.set_speed(5)
        live.resume()                                  # the pause is not made up afterwards
        assert 2 < virtual_rate(live, 1.0) < 8
    finally:
        live.stop()
    assert live.state != "error", live.message
