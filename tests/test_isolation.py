"""Isolate, don't cascade: a bad request fails alone, with its reason; the others in its steps
get exactly the tokens they would have got; nothing escapes Engine.step or Engine.run; and
every failed or aborted request gives its KV blocks back (the pool ends empty)."""
import math
import random
import threading
import time

import pytest

from engine.runs.build import build_engine
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.model.model import load_model
from engine.core.request import EventKind, Request, Status

BATCH = SchedulerPolicy(max_num_seqs=16, max_num_batched_tokens=512)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", "cpu", "fp32")


def requests(n: int, new_tokens: int = 6, seed: int = 0) -> list[Request]:
    rng = random.Random(seed)
    return [Request(f"r{i}", [rng.randint(100, 30000) for _ in range(8 + i)], new_tokens) for i in range(n)]


def run(engine, reqs):
    for r in reqs:
        engine.submit(r)
    engine.run()
    return {r.id: r for r in reqs}


def poison_after_forward(engine, victim: str, after_tokens: int = 2):
    """The executor runs the real forward (so every chunk's KV is written), then raises whenever
    `victim` is in the plan and has `after_tokens` tokens: a failure in the middle of its decode."""
    real = engine.executor.execute

    def execute(plan):
        tokens = real(plan)
        if any(c.request.id == victim and len(c.request.output_token_ids) >= after_tokens for c in plan.chunks):
            raise RuntimeError("poisoned request in the plan")
        return tokens
    engine.executor.execute = execute


def check_poisoned_batch(model, kind: str):
    clean = run(build_engine(EngineConfig(model="tiny"), BATCH, model), requests(15))
    engine = build_engine(EngineConfig(model="tiny"), BATCH, model)
    reqs = requests(15)
    poison = Request("poison", [5, 6, 7, 10 ** 9 if kind == "token id" else 8, 9], 6)
    reqs.insert(7, poison)
    if kind == "raises":
        poison_after_forward(engine, "poison")
    done = run(engine, reqs)
    assert poison.status is Status.FAILED
    assert "failed for this request" in poison.error
    assert ("poisoned request" if kind == "raises" else "1000000000 at position 3 is outside the vocabulary") \
        in poison.error
    for rid, r in clean.items():
        assert done[rid].status is Status.FINISHED, (rid, done[rid].error)
        assert done[rid].output_token_ids == r.output_token_ids, rid
    assert any("poison" in s.error for s in engine.steps)
    assert not any(s.error and "poison" not in s.error for s in engine.steps)
    assert engine.pool.used_blocks == 0


@pytest.mark.parametrize("kind", ["raises", "token id"])
def test_one_poisoned_request_in_sixteen_fails_alone(tiny, kind):
    check_poisoned_batch(tiny, kind)


def test_one_poisoned_request_in_sixteen_fails_alone_on_smollm2():
    check_poisoned_batch(load_model("smollm2", "cpu", "fp32"), "raises")


def test_finding_the_culprit_costs_at_most_two_forwards_per_halving():
    engine = build_engine(EngineConfig(), BATCH)
    real, calls = engine.executor.execute, []

    def execute(plan):
        calls.append(len(plan.chunks))
        if any(c.request.id == "r5" for c in plan.chunks):
            raise RuntimeError("bad")
        return real(plan)
    engine.executor.execute = execute
    reqs = requests(16, new_tokens=1)
    run(engine, reqs)
    assert calls[0] == 16 and len(calls) <= 1 + 2 * math.log2(16)
    assert sum(calls[1:]) < 2 * 16
    assert [r.id for r in reqs if r.status is Status.FAILED] == ["r5"]


def test_an_error_no_single_request_causes_fails_the_whole_step_only():
    engine = build_engine(EngineConfig(), BATCH)
    real = engine.executor.execute

    def execute(plan):   # "out of memory" beyond 8 sequences: every half runs fine on its own
        if len(plan.chunks) > 8:
            raise MemoryError("too big a batch")
        return real(plan)
    engine.executor.execute = execute
    first = run(engine, requests(12))
    assert all(r.status is Status.FAILED and r.error == "step 0 failed: MemoryError: too big a batch"
               for r in first.values())
    later = run(engine, [Request("later", [1, 2, 3], 4)])
    assert later["later"].status is Status.FINISHED
    assert engine.pool.used_blocks == 0


BAD_INPUTS = [
    ("prompt_token_ids", [5, 10 ** 9], "token id 1000000000 at position 1 is outside the vocabulary (integers 0 to 49151)"),
    ("prompt_token_ids", [5, 49152], "token id 49152 at position 1"),
    ("prompt_token_ids", [5, -1], "token id -1 at position 1"),
    ("prompt_token_ids", [True, 5], "token id True at position 0"),
    ("prompt_token_ids", [5, 6.0], "token id 6.0 at position 1"),
    ("temperature", math.nan, "temperature nan is not allowed (a finite number >= 0)"),
    ("temperature", math.inf, "temperature inf"),
    ("temperature", -1.0, "temperature -1.0"),
    ("temperature", "0.5", "temperature '0.5'"),
    ("top_p", 0, "top_p 0 is not allowed (a number > 0 and <= 1)"),
    ("top_p", -2, "top_p -2"),
    ("top_p", 1.5, "top_p 1.5"),
    ("top_p", math.nan, "top_p nan"),
    ("seed", "abc", "seed 'abc' is not allowed (an integer, or none)"),
    ("seed", 1.5, "seed 1.5"),
    ("seed", True, "seed True"),
]


@pytest.mark.parametrize("field,value,reason", BAD_INPUTS, ids=[f"{f}={v!r}" for f, v, _ in BAD_INPUTS])
def test_a_request_no_model_can_run_fails_alone_with_its_reason(field, value, reason):
    engine = build_engine(EngineConfig(), BATCH)
    reqs = requests(4)
    setattr(reqs[2], field, value)
    run(engine, reqs)
    assert reqs[2].status is Status.FAILED and reason in reqs[2].error, reqs[2].error
    assert all(r.status is Status.FINISHED for i, r in enumerate(reqs) if i != 2)
    assert engine.pool.used_blocks == 0


def test_nan_temperature_on_the_model_fails_alone(tiny):
    clean = run(build_engine(EngineConfig(model="tiny"), BATCH, tiny), requests(4))
    engine = build_engine(EngineConfig(model="tiny"), BATCH, tiny)
    reqs = requests(4)
    reqs[1].temperature = math.nan
    done = run(engine, reqs)
    assert reqs[1].status is Status.FAILED and "temperature nan" in reqs[1].error
    for rid in ("r0", "r2", "r3"):
        assert done[rid].status is Status.FINISHED and done[rid].output_token_ids == clean[rid].output_token_ids
    assert engine.pool.used_blocks == 0


def test_a_tiny_temperature_samples_the_greedy_token(tiny):
    greedy = run(build_engine(EngineConfig(model="tiny"), BATCH, tiny), requests(2))
    reqs = requests(2)
    for r in reqs:
        r.temperature, r.seed = 1e-300, 3
    done = run(build_engine(EngineConfig(model="tiny"), BATCH, tiny), reqs)
    for rid, r in greedy.items():
        assert done[rid].status is Status.FINISHED, done[rid].error
        assert done[rid].output_token_ids == r.output_token_ids


def test_a_tokenizer_that_fails_on_one_output_fails_that_request_only(tiny):
    engine = build_engine(EngineConfig(model="tiny"), BATCH, tiny)
    real = engine.tokenizer

    class Choking:
        def decode(self, ids, **kw):
            if len(ids) == 5:
                raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
            return real.decode(ids, **kw)
    engine.tokenizer = Choking()
    reqs = requests(4, new_tokens=4)
    reqs[3].max_new_tokens = 5
    run(engine, reqs)
    assert reqs[3].status is Status.FAILED and reqs[3].error.startswith("decoding its output failed: UnicodeDecodeError")
    assert all(r.status is Status.FINISHED and r.output_text for r in reqs[:3])
    assert engine.pool.used_blocks == 0


def test_a_scheduler_error_fails_what_it_holds_and_the_engine_goes_on():
    engine = build_engine(EngineConfig(), BATCH)
    real, calls = engine.scheduler.schedule, {"n": 0}

    def schedule(now):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyError("lost track")
        return real(now)
    engine.scheduler.schedule = schedule
    first = run(engine, requests(3))
    assert all(r.status is Status.FAILED and "could not be scheduled: KeyError" in r.error for r in first.values())
    later = run(engine, [Request("later", [1, 2, 3], 4)])
    assert later["later"].status is Status.FINISHED
    assert engine.pool.used_blocks == 0


def test_a_field_the_scheduler_cannot_use_refuses_that_request_alone():
    engine = build_engine(EngineConfig(), BATCH)
    reqs = requests(3)
    reqs[1].max_new_tokens = "4"
    run(engine, reqs)
    assert reqs[1].status is Status.REJECTED and "could not be queued: TypeError" in reqs[1].error
    assert reqs[0].status is reqs[2].status is Status.FINISHED
    assert engine.pool.used_blocks == 0


def test_abort_ends_pending_waiting_and_running_requests_and_frees_their_blocks():
    engine = build_engine(EngineConfig(), SchedulerPolicy(max_num_seqs=2))
    reqs = requests(5, new_tokens=20)
    reqs[4].arrival_s = 100.0                      # not arrived yet
    for r in reqs:
        engine.submit(r)
    for _ in range(3):
        engine.step()
    running, waiting, pending = reqs[0], reqs[3], reqs[4]
    assert running.status is Status.RUNNING and running.block_table
    assert waiting.status is Status.WAITING and pending in engine.pending
    used = engine.pool.used_blocks
    assert engine.abort(running, "client went away")
    assert engine.pool.used_blocks < used
    assert engine.abort("r3", "run interrupted") and engine.abort(pending, "run interrupted")
    assert not engine.abort(running, "again") and not engine.abort("nobody", "unknown")
    engine.run()
    assert [r.status for r in reqs] == [Status.ABORTED, Status.FINISHED, Status.FINISHED, Status.ABORTED,
                                        Status.ABORTED]
    assert running.error == "client went away" and running.output_token_ids   # keeps what it had
    assert [e.request_id for e in engine.events if e.kind is EventKind.ABORTED] == ["r0", "r3", "r4"]
    assert not engine.has_work() and engine.pool.used_blocks == 0


def test_abort_from_another_thread_lands_between_steps():
    engine = build_engine(EngineConfig(), SchedulerPolicy(max_num_seqs=4))
    real = engine.executor.execute
    engine.executor.execute = lambda plan: (time.sleep(0.002), real(plan))[1]
    reqs = requests(8, new_tokens=2000)     # seconds of work: still running when the abort comes
    for r in reqs:
        engine.submit(r)
    worker = threading.Thread(target=engine.run)
    worker.start()
    time.sleep(0.05)
    aborted = [r.id for r in reqs if engine.abort(r, "stop")]
    worker.join(timeout=30)
    assert not worker.is_alive() and aborted
    assert all(r.status in (Status.FINISHED, Status.ABORTED) for r in reqs)
    ended = set()
    for e in engine.events:
        assert e.request_id not in ended, f"{e.kind} for {e.request_id} after it ended"
        if e.kind in (EventKind.FINISHED, EventKind.ABORTED):
            ended.add(e.request_id)
    assert engine.pool.used_blocks == 0


def test_duplicate_ids_are_refused_by_submit_and_kept_as_rejected_rows():
    engine = build_engine(EngineConfig(), BATCH)
    first, dup, dup2, other = (Request("a", [1, 2], 2), Request("a", [3, 4], 2), Request("a", [5], 2),
                               Request("b", [1, 2], 2))
    engine.submit(first)
    for d in (dup, dup2):
        with pytest.raises(ValueError, match="duplicate request id 'a'"):
            engine.submit(d)
        engine.reject(d, "duplicate request id 'a'")
    engine.submit(other)
    engine.run()
    assert engine.requests == {"a": first, "b": other}
    assert engine.all_requests() == [first, other, dup, dup2]
    assert first.status is Status.FINISHED and other.status is Status.FINISHED
    assert dup.status is dup2.status is Status.REJECTED and dup.error == "duplicate request id 'a'"
    assert engine.pool.used_blocks == 0


@pytest.mark.parametrize("arrival", [math.nan, math.inf, "0.5", None, True])
def test_an_arrival_time_that_cannot_be_ordered_is_refused_at_submit(arrival):
    engine = build_engine(EngineConfig(), BATCH)
    with pytest.raises(ValueError, match=r"arrival_s .* is not allowed \(a finite number of seconds\)"):
        engine.submit(Request("late", [1, 2], 2, arrival_s=arrival))
    assert not engine.requests and not engine.pending
