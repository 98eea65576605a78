"""The Playground attached to a shared Batching Lab server: a PlaygroundRun whose engine is the
server's. Its own traffic goes over HTTP under its tenant and shows in the shared engine's
steps; a learner without the instructor token cannot change the policy, but still changes
their own traffic; the token's holder can; pause freezes the view and stops sending."""
import time

import httpx2 as httpx
import pytest

from engine.core.config import SchedulerPolicy
from engine.model.model import load_model
from playground import engines
from playground.run import PlaygroundRun
from playground.setup import Setup
from test_server import TOKEN, serving
from conftest import wait_until

# Endless, light traffic of short requests: the tiny model serves it many times over.
SETUP = Setup(continuous=True, rate=8.0, prompt_lo=8, prompt_hi=16, output_lo=4, output_hi=8, max_num_seqs=4)


@pytest.fixture(scope="module")
def shared():
    model = load_model("tiny", "cpu", "fp32")
    with serving(model, policy=SchedulerPolicy(max_num_seqs=6, kv_capacity_tokens=4096)) as (url, service):
        yield url, model






def test_a_learner_watches_the_shared_engine_and_sends_their_own_traffic(shared):
    url, model = shared
    lab = PlaygroundRun(SETUP, model, engine_choice=engines.SERVER, seat=engines.Seat(url, "playground-amy"))
    try:
        # The run shows the server's policy, not the sliders': max_num_seqs is the server's 6
        assert lab.setup.max_num_seqs == 6 and lab.setup.rate == SETUP.rate
        lab.start()
        wait_until(lambda: len(lab.read()[0].steps) > 5 and lab.arrived >= 4)
        wait_until(lambda: (lab.read()[1].requests["tenant"] == "playground-amy").sum() >= 3)
        snap, tables = lab.read()
        mine = set(tables.requests.loc[tables.requests["tenant"] == "playground-amy", "id"])
        served = {m[0] for s in snap.steps for m in s.members}
        assert mine & served, "this learner's requests are in the shared engine's batches"
        assert len(tables.steps) > 5 and tables.steps["step"].is_monotonic_increasing

        # No token: a policy change is refused with the server's reason, and nothing changes
        with pytest.raises(ValueError, match="instructor token"):
            lab.apply(lab.setup.changed(max_num_seqs=2))
        assert httpx.get(url + "/lab/policy").json()["max_num_seqs"] == 6
        # ...but a workload change made together with it still applies to this learner's traffic
        decision = lab.apply(lab.setup.changed(max_num_seqs=3, rate=4.0))
        assert decision.changes == ("workload: rate 8.0→4.0",) and "instructor token" in decision.message
        assert lab.setup.rate == 4.0 and lab.setup.max_num_seqs == 6
        wait_until(lambda: lab.live.feed.spec.rate == 4.0)       # the feed changes on the sending thread

        # The sidebar's own policy values (4 slots here, the server runs 6) are never sent on their
        # own: resting widgets that only differ from the server make no change and no refusal
        assert lab.apply_when_rested(SETUP.changed(rate=4.0), now=100.0) is None
        assert lab.apply_when_rested(SETUP.changed(rate=4.0), now=101.0) is None
        # A moved SLO target is the page's own: it applies without the token
        decision = lab.apply(lab.setup.changed(ttft_slo_s=7.0))
        assert decision.changes == ("ttft_slo_s 2.0→7.0",) and lab.setup.ttft_slo_s == 7.0

        # Pause: the view freezes and this learner sends nothing more
        lab.pause()
        sent, frozen = lab.arrived, lab.read()[0]
        time.sleep(1.0)
        assert lab.arrived == sent and lab.read()[0] is frozen
        with pytest.raises(ValueError, match="steps on its own"):
            lab.step_once()
        lab.resume()
        wait_until(lambda: lab.arrived > sent)
    finally:
        lab.close()
    assert lab.closed and lab.state == "stopped"
    # Closing hung up on this run's requests still streaming: the server aborted them, and
    # nothing of this learner's is left in its engine
    wait_until(lambda: lab.live.generator.in_flight == 0)
    rows = httpx.get(url + "/lab/requests?limit=500").json()["requests"]
    assert not [r for r in rows if r["tenant"] == "playground-amy" and r["status"] in ("waiting", "running")]


def test_the_instructor_changes_the_shared_policy_from_the_playground(shared):
    url, model = shared
    lab = PlaygroundRun(SETUP, model, engine_choice=engines.SERVER,
                        seat=engines.Seat(url, "playground-teacher", TOKEN))
    try:
        lab.start()
        decision = lab.apply(lab.setup.changed(max_num_seqs=3, ttft_slo_s=9.0))
        assert "max_num_seqs 6→3" in decision.changes
        policy = httpx.get(url + "/lab/policy").json()
        assert policy["max_num_seqs"] == 3
        assert policy["ttft_slo_s"] != 9.0, "the SLO targets are the page's own, never sent"
        # Another page (the Classroom's instructor) changes it: this run follows the server, and
        # the page's own widgets, which still hold their values, do not change it back
        httpx.put(url + "/lab/policy", json={"max_num_seqs": 5}, headers={"Authorization": f"Bearer {TOKEN}"})
        lab.read()
        assert lab.setup.max_num_seqs == 5
        widgets = SETUP.changed(max_num_seqs=3, ttft_slo_s=9.0)          # what the sidebar holds now
        lab._widgets = widgets
        assert lab.apply_when_rested(widgets, now=100.0) is None
        assert lab.apply_when_rested(widgets, now=101.0) is None
        assert httpx.get(url + "/lab/policy").json()["max_num_seqs"] == 5
        # ...and a slider the page moves is the one change sent, once it rests
        moved = widgets.changed(max_num_seqs=4)
        assert lab.apply_when_rested(moved, now=102.0) is None                # waits for the rest
        decision = lab.apply_when_rested(moved, now=103.0)
        assert decision.changes == ("max_num_seqs 5→4",), decision
        assert httpx.get(url + "/lab/policy").json()["max_num_seqs"] == 4
    finally:
        lab.close()
        httpx.put(url + "/lab/policy", json={"max_num_seqs": 6}, headers={"Authorization": f"Bearer {TOKEN}"})


def test_a_shared_runs_marks_are_the_servers_policy_changes_and_the_pages_own(shared):
    """Every page attached sees the policy changes the server made (the instructor's too), each once,
    and its own workload and target changes beside them; a decision that moves both marks the policy
    part once (the server's) and the page's part once (its own)."""
    url, model = shared
    lab = PlaygroundRun(SETUP, model, engine_choice=engines.SERVER,
                        seat=engines.Seat(url, "playground-teacher", TOKEN))
    student = PlaygroundRun(SETUP, model, engine_choice=engines.SERVER, seat=engines.Seat(url, "playground-bo"))
    try:
        lab.start()
        student.start()
        wait_until(lambda: len(lab.read()[0].steps) > 2)
        earlier = len(student.read()[1].marks)            # the server's marks from before (earlier tests)
        lab.apply(lab.setup.changed(max_num_seqs=3, rate=4.0, ttft_slo_s=9.0))
        wait_until(lambda: len(student.read()[1].marks) > earlier)
        mine, theirs = lab.read()[1].marks.iloc[earlier:], student.read()[1].marks.iloc[earlier:]
        assert sorted(mine["detail"]) == ["max_num_seqs 6→3", "workload: rate 8.0→4.0, ttft_slo_s 2.0→9.0"], mine
        assert list(theirs["detail"]) == ["max_num_seqs 6→3"] and list(theirs["knobs"]) == [("max_num_seqs",)]
        # the page reads the server a moment behind: a change it makes now still goes after the
        # server's change it has seen, even where its clock lags that mark
        student.live.now = lambda: 0.0
        student.apply(student.setup.changed(rate=2.0))
        marks = student.read()[1].marks.iloc[earlier:]
        assert list(marks["label"]) == ["max_num_seqs 6→3", "workload: rate 8.0→2.0"]
    finally:
        lab.close()
        student.close()
        httpx.put(url + "/lab/policy", json={"max_num_seqs": 6}, headers={"Authorization": f"Bearer {TOKEN}"})


def test_the_shared_engine_is_offered_only_when_the_app_is_attached(monkeypatch):
    monkeypatch.delenv("BATCHING_LAB_ENGINE_URL", raising=False)
    assert engines.SERVER not in engines.choices()
    assert engines.from_query({"engine": "server"})[0] == engines.REAL
    monkeypatch.setenv("BATCHING_LAB_ENGINE_URL", "http://10.0.0.5:8000/v1")
    assert "10.0.0.5:8000" in engines.choices()[engines.SERVER]
    assert engines.from_query({"engine": "server"})[0] == engines.SERVER
    monkeypatch.setenv("BATCHING_LAB_ENGINE_KIND", "openai")      # Any engine's kind: not this choice
    monkeypatch.setenv("BATCHING_LAB_ENGINE_MODEL", "m")
    assert engines.SERVER not in engines.choices()


def test_a_server_that_goes_away_ends_the_run_with_its_reason():
    model = load_model("tiny", "cpu", "fp32")
    with serving(model) as (url, _):
        lab = PlaygroundRun(SETUP, model, engine_choice=engines.SERVER, seat=engines.Seat(url, "playground-gone"))
        lab.start()
        wait_until(lambda: len(lab.read()[0].steps) > 3)
    snap, tables = lab.read()                        # the server has stopped
    assert snap.state == "error" and "stopped answering" in snap.message, snap.message
    assert len(tables.steps) > 3, "the last window read stays on show"
    assert lab.state == "error" and lab.read()[0].state == "error"
    lab.close()


def missing_run_members(cls) -> list[str]:
    from engine.runs.run import Run
    return [m for m in dir(Run) if not m.startswith("_") and not hasattr(cls, m)]


def test_both_kinds_of_run_implement_the_run_protocol():
    from engine.runs.live import LiveRun
    from remote.shared_run import SharedRun
    assert missing_run_members(LiveRun) == [] and missing_run_members(SharedRun) == []

    class Partial:                         # the check sees a run that lacks part of the protocol
        def start(self): ...
    assert "exhausted" in missing_run_members(Partial) and "snapshot" in missing_run_members(Partial)
