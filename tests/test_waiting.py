"""engine/core/waiting.py keeps the admission orders up to date instead of sorting every step: each order
must be what sorting the plain queue gives, through random arrivals, preemptions and admissions."""
import random
from collections import defaultdict

import pytest

from engine.core.request import Request
from engine.core.waiting import WaitingQueue


def reference_round_robin(queue: list[Request], served: dict[str, int]) -> list[Request]:
    """The order as the scheduler computed it from a plain list, every step."""
    queues: dict[str, list[Request]] = defaultdict(list)
    out = [r for r in queue if r.was_preempted]
    for r in queue:
        if not r.was_preempted:
            queues[r.tenant].append(r)
    tenants = sorted(queues, key=lambda t: served[t])
    depth = 0
    while tenants:
        tenants = [t for t in tenants if depth < len(queues[t])]
        out.extend(queues[t][depth] for t in tenants)
        depth += 1
    return out


KEYS = {
    "sjf": lambda r: (not r.was_preempted, r.total_work, r.arrival_s),
    "priority": lambda r: (not r.was_preempted, r.priority, r.arrival_s),
    "edf": lambda r: (not r.was_preempted, r.arrival_s + (r.ttft_slo_s if r.ttft_slo_s is not None else 0.5)),
}


@pytest.mark.parametrize("seed", range(6))
def test_every_order_is_what_sorting_the_plain_queue_gives(seed):
    rng = random.Random(seed)
    queue, plain, served = WaitingQueue(), [], defaultdict(int)
    count = 0
    for step in range(400):
        for _ in range(rng.randrange(4)):                       # arrivals, with ties in every key
            count += 1
            r = Request(f"r{count}", [1] * rng.choice([4, 8, 16]), rng.choice([4, 8]),
                        arrival_s=float(step // 3), tenant=rng.choice("abc"), priority=rng.randrange(2),
                        ttft_slo_s=rng.choice([None, 0.5, 1.0]))
            queue.append(r)
            plain.append(r)
        if plain and rng.random() < 0.2:                         # a preempted request goes to the front
            r = plain.pop(rng.randrange(len(plain)))
            queue.remove(r)
            r.was_preempted = True
            queue.push_front(r)
            plain.insert(0, r)
        name = rng.choice(["fcfs", "fair", *KEYS])
        if name == "fcfs":
            got = list(queue)
            want = list(plain)
        elif name == "fair":
            got = list(queue.round_robin(served))
            want = reference_round_robin(plain, served)
        else:
            got = list(queue.ranked(name, KEYS[name]))
            want = sorted(plain, key=KEYS[name])
        assert got == want, f"step {step}, order {name}"
        for r in got[:rng.randrange(4)]:                          # the first few are admitted
            r.was_preempted = False
            queue.remove(r)
            plain.remove(r)
            served[r.tenant] += rng.randrange(1, 50)
        assert len(queue) == len(plain) and queue.tenants() == {r.tenant for r in plain}
