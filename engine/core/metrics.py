"""Every number the lab reports about a run, defined once, for a finished run and a live one.

The definitions, in the words every page shows, are DEFINITIONS below (vLLM's benchmark
definitions; seconds on the engine's clock). Percentiles use linear interpolation.

The per-request values are worked out from Request objects once, when a request becomes a row
of requests.csv (`request_row`). The run's numbers are worked out from tables of those rows
(`run_totals`, `finished_values`): the CLI's summary, built from the engine's Request objects,
and a page's headline, built from a DataFrame of the same rows, agree at every moment.

A table here is anything that maps a column name to its values: a pandas DataFrame, or a dict
of lists. Missing values (None, NaN) are left out of every sum and percentile.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .request import Request, Status
from .speculative import add_per_position, speculation

PERCENTILES = (50, 90, 95, 99)
FINISHED = Status.FINISHED.value

REQUEST_COLUMNS = ["id", "tenant", "arrival_s", "first_scheduled_s", "first_token_s", "finish_s",
                   "prompt_tokens", "cached_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s", "queue_s",
                   "preemptions", "status", "error", "output_token_ids", "output_text"]
# A live run's request rows carry these too (never written to requests.csv): TPOT over the tokens
# so far, so a headline has TPOT from a request's second token, and the text so far.
LIVE_REQUEST_COLUMNS = REQUEST_COLUMNS + ["tpot_so_far_s", "partial_text"]
STEP_COLUMNS = ["step", "t_start_s", "t_end_s", "waiting", "running", "prefill_tokens",
                "decode_tokens", "kv_used_blocks", "kv_total_blocks", "members", "preempted", "error",
                "prefix_queries", "prefix_hits",
                "max_num_seqs", "arrived", "finished", "rejected", "failed", "aborted", "drafts"]

DEFINITIONS = """
Definitions follow vLLM's benchmarks. Times are seconds on the engine's clock.

- **TTFT** (time to first token) = first token time − arrival time.
- **TPOT** (time per output token) = (E2E − TTFT) / (output tokens − 1), for requests with more
  than one output token.
- **ITL** (inter-token latency) = a gap between two consecutive tokens of one request.
- **E2E** (end-to-end latency) = last token time − arrival time.
- **Queue time** = first scheduled time − arrival time.
- **Duration** = first arrival to the end of the last step (or the last finish, if later).
- **Output throughput** = output tokens made, by every request / duration.
- **Goodput** = finished requests that met every SLO target set / duration.
- **pNN** = the value NN% of finished requests stay at or under (p50 = median).
- **Prefix cache hit rate** = prompt tokens found in the prefix cache / prompt tokens looked up
  there, as vLLM counts them (`vllm:prefix_cache_hits` / `vllm:prefix_cache_queries`): a request
  looks its tokens up each time it starts (again after a preemption); 0 with caching off.
- **Drafts, drafted and accepted tokens** (speculative decoding), as vLLM counts them
  (`vllm:spec_decode_num_drafts`, `_num_draft_tokens`, `_num_accepted_tokens`): a draft is one
  request's guesses checked in one step; its accepted tokens are the leading guesses the model
  agreed with, and the rest are rejected, so accepted + rejected = drafted in every step.
  **Acceptance rate** = accepted / drafted tokens; **mean acceptance length** = 1 + accepted /
  drafts, the tokens one request gains from a step that checks its draft (the model's own
  token included).
- **Arrived** = waiting + running + finished + rejected + failed + aborted, at every step:
  every request whose arrival time has come is in exactly one of these.
- **Running** = requests holding a batch slot at the end of a step (admitted, not yet done);
  the step's **batch** is the ones that ran in it.
- **Wasted slot-steps** = per step, the batch slots left empty while requests waited for one,
  min(empty slots, waiting), summed, each step against its own `max_num_seqs`: capacity that work
  was queueing for. A step with 8 slots, 5 running and 2 waiting wastes 2; with nobody waiting, none
  (an engine with too little work is not wasting its batch).
"""


# ----------------------------------------------------------------------------- per request


def ttft(r: Request) -> float | None:
    return None if r.first_token_s is None else r.first_token_s - r.arrival_s


def e2e(r: Request) -> float | None:
    return None if r.status is not Status.FINISHED else r.finish_s - r.arrival_s


def tpot(r: Request) -> float | None:
    n = len(r.output_token_ids)
    if r.status is not Status.FINISHED or n < 2:
        return None
    return (e2e(r) - ttft(r)) / (n - 1)


def tpot_so_far(r: Request) -> float | None:
    """TPOT over the tokens made so far: from the second token on, finished or not. For a
    finished request it is its TPOT (its last token is its finish)."""
    n = len(r.token_times)
    return None if n < 2 else (r.token_times[-1] - r.token_times[0]) / (n - 1)


def queue_time(r: Request) -> float | None:
    return None if r.first_scheduled_s is None else r.first_scheduled_s - r.arrival_s


def itls(requests) -> list[float]:
    """Every inter-token gap of every request, pooled."""
    return [b - a for r in requests for a, b in zip(r.token_times, r.token_times[1:])]


def measured(value) -> bool:
    """False for a value that is missing: not measured yet (None, an empty cell: NaN) or undefined."""
    return value is not None and value == value


@dataclass(slots=True)
class SLO:
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def met_by(self, status: str, ttft_s, tpot_s, e2e_s) -> bool:
        """A finished request meets the SLO when every target that is set holds; a value that
        is undefined (the TPOT of a one-token request) passes its check."""
        if status != FINISHED:
            return False
        checks = ((self.ttft_s, ttft_s), (self.tpot_s, tpot_s), (self.e2e_s, e2e_s))
        return all(limit is None or not measured(value) or value <= limit for limit, value in checks)

    def met(self, r: Request) -> bool:
        return self.met_by(r.status.value, ttft(r), tpot(r), e2e(r))

    def met_rows(self, requests) -> list[bool]:
        """met_by for every row of a requests table."""
        cols = [column(requests, c) for c in ("status", "ttft_s", "tpot_s", "e2e_s")]
        return [self.met_by(*row) for row in zip(*cols)]


# ----------------------------------------------------------------------------- over a run


def column(table, name: str) -> list:
    """A table's column as a list; a column the table lacks reads as missing values (None)."""
    if table is None:
        return []
    if name in table:
        values = table[name]
        return values.tolist() if hasattr(values, "tolist") else list(values)   # a pandas column: fast
    first = next(iter(table), None)
    return [] if first is None else [None] * len(table[first])


def percentile(values, q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of the measured values; NaN if none."""
    xs = sorted(v for v in values if measured(v))
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def distribution(values) -> dict[str, float]:
    vals = [v for v in values if measured(v)]
    out = {"mean": sum(vals) / len(vals) if vals else math.nan}
    out.update({f"p{q}": percentile(vals, q) for q in PERCENTILES})
    return out


def finished_values(requests, name: str) -> list[float]:
    """The measured values of one column over the finished requests of a table."""
    return [v for v, s in zip(column(requests, name), column(requests, "status"))
            if s == FINISHED and measured(v)]


def duration(requests, steps, retired: Retired | None = None) -> float:
    """Seconds from the first arrival to the end of the last step, or to the last finish if that
    comes later (a table with no steps); 0.0 while there is nothing to measure. `retired` adds
    the part of a live run that has left its window."""
    arrivals = [t for t in column(requests, "arrival_s") if measured(t)]
    ends = [t for t in column(steps, "t_end_s") if measured(t)] + finished_values(requests, "finish_s")
    if retired is not None:
        arrivals += [t for t in (retired.first_arrival_s,) if t is not None]
        ends += [t for t in (retired.last_end_s,) if t is not None]
    if not arrivals or not ends:
        return 0.0
    return max(0.0, max(ends) - min(arrivals))


def _zero_if_nan(rate: float) -> float:
    """summary.json's rates are 0.0 for a run that took no time (the pages show "—" instead)."""
    return 0.0 if math.isnan(rate) else rate


def per_second(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else math.nan


def run_totals(requests, steps, slo: SLO | None = None, retired: Retired | None = None) -> dict:
    """Duration, output tokens, finished requests, and the throughputs and goodput they give,
    over the tables plus, for a live run, the exact counts of what has left its window."""
    old = retired or Retired()
    span = duration(requests, steps, retired)
    tokens = int(sum(n for n in column(requests, "output_tokens") if measured(n))) + old.output_tokens
    finished = sum(s == FINISHED for s in column(requests, "status")) + old.count(FINISHED)
    good = sum((slo or SLO()).met_rows(requests)) + old.good
    return {"duration_s": span, "output_tokens": tokens, "finished": finished,
            "output_throughput_tok_s": per_second(tokens, span),
            "request_throughput_req_s": per_second(finished, span),
            "goodput_req_s": per_second(good, span)}


def wasted_slot_steps(members, slots, waiting) -> int:
    """Batch slots left empty while requests waited: per step min(empty slots, waiting), summed.

    `members` holds each step's members; `slots` is each step's own max_num_seqs (a list), or
    one number for them all; `waiting` each step's waiting requests at its end (a list).
    """
    members = list(members)
    limits = [slots] * len(members) if isinstance(slots, (int, float)) else list(slots)
    return sum(max(0, min(int(limit) - n, int(w))) for n, limit, w in zip(map(len, members), limits, waiting))


@dataclass(slots=True, frozen=True)
class Counts:
    """Where every request that has arrived is now. Engine.counts() keeps them adding up:
    arrived = waiting + running + finished + rejected + failed + aborted."""
    arrived: int = 0
    waiting: int = 0
    running: int = 0         # holding a batch slot
    finished: int = 0
    rejected: int = 0
    failed: int = 0
    aborted: int = 0

    def adds_up(self) -> bool:
        return self.arrived == (self.waiting + self.running + self.finished + self.rejected
                                + self.failed + self.aborted)

    @classmethod
    def of_step(cls, step) -> "Counts":
        """The counts a StepRecord (or a steps-table row: a dict, a pandas row) carries at its end."""
        get = step.__getitem__ if hasattr(step, "__getitem__") else lambda f: getattr(step, f)
        return cls(*(int(get(f)) for f in ("arrived", "waiting", "running", "finished", "rejected",
                                           "failed", "aborted")))

    def text(self) -> str:
        """'31 arrived = 15 waiting + 4 running + 12 finished' (+ the ends that happened)."""
        parts = [f"{self.waiting:,} waiting", f"{self.running:,} running", f"{self.finished:,} finished"]
        parts += [f"{n:,} {name}" for name, n in (("rejected", self.rejected), ("failed", self.failed),
                                                  ("aborted", self.aborted)) if n]
        return f"{self.arrived:,} arrived = " + " + ".join(parts)


def summarize(requests, steps, slo: SLO | None = None, retired: Retired | None = None) -> dict:
    """summary.json: the run's numbers from its Request objects and StepRecords.

    A live run that keeps only a window passes `retired`: the counts and totals then cover the
    whole run exactly, the distributions cover the window, and "percentiles_over" says so."""
    requests, steps, slo = list(requests), list(steps), slo or SLO()
    old = retired or Retired()
    rows = [request_row(r) for r in requests]
    table = {c: [row[c] for row in rows] for c in REQUEST_COLUMNS}
    totals = run_totals(table, {"t_end_s": [s.t_end_s for s in steps]}, slo, retired)
    step_s = [s.t_end_s - s.t_start_s for s in steps]
    summary = {
        "requests": len(requests) + old.requests,
        "finished": totals["finished"],
        "rejected": sum(r.status is Status.REJECTED for r in requests) + old.count(Status.REJECTED.value),
        "failed": sum(r.status is Status.FAILED for r in requests) + old.count(Status.FAILED.value),
        "aborted": sum(r.status is Status.ABORTED for r in requests) + old.count(Status.ABORTED.value),
        "preemptions": sum(r.preemptions for r in requests) + old.preemptions,
        "steps": len(steps) + old.steps,
        "duration_s": totals["duration_s"],
        "busy_s": sum(step_s) + old.busy_s,
        "output_tokens": totals["output_tokens"],
        "prompt_tokens": sum(finished_values(table, "prompt_tokens")) + old.prompt_tokens,
        "output_throughput_tok_s": _zero_if_nan(totals["output_throughput_tok_s"]),
        "request_throughput_req_s": _zero_if_nan(totals["request_throughput_req_s"]),
        "goodput_req_s": _zero_if_nan(totals["goodput_req_s"]),
        "slo": asdict(slo),
        "ttft_s": distribution(finished_values(table, "ttft_s")),
        "tpot_s": distribution(finished_values(table, "tpot_s")),
        "itl_s": distribution(itls(r for r in requests if r.status is Status.FINISHED)),
        "e2e_s": distribution(finished_values(table, "e2e_s")),
        "queue_s": distribution(finished_values(table, "queue_s")),
        "step_ms": distribution([1000 * s for s in step_s]),
        **prefix_cache(steps, old),
        **speculation(steps, old),
    }
    if retired is not None:
        summary["percentiles_over"] = "the whole run" if not (old.steps or old.requests) else (
            f"the last {len(steps):,} steps and the {totals['finished'] - old.count(FINISHED):,} "
            "requests finished in them")
    return summary


UNSERVED = ("rejected", "failed", "aborted")   # statuses of requests that ended without finishing


@dataclass(slots=True)
class Retired:
    """What a live run has forgotten: the steps and ended requests that left its window
    (Engine keep_steps), kept as exact whole-run counts and totals."""
    steps: int = 0
    busy_s: float = 0.0
    requests: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    preemptions: int = 0
    output_tokens: int = 0        # made by every request
    prompt_tokens: int = 0        # of finished requests
    prefix_queries: int = 0       # tokens looked up in the prefix cache
    prefix_hits: int = 0          # tokens found there
    spec_drafts: int = 0          # speculative decoding: drafts checked, tokens drafted, tokens accepted
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)   # accepted at draft position 0, 1, ...
    good: int = 0                 # finished requests that met the SLO in force when they left
    first_arrival_s: float | None = None
    last_end_s: float | None = None
    wasted_slot_steps: int = 0    # each step against its own max_num_seqs

    def count(self, status: str) -> int:
        return self.by_status.get(status, 0)

    def add_step(self, s) -> None:
        self.steps += 1
        self.busy_s += s.t_end_s - s.t_start_s
        self.prefix_queries += s.prefix_queries
        self.prefix_hits += sum(n for _, n in s.prefix_hits)
        for _, drafted, accepted in s.drafts:
            self.spec_drafts += 1
            self.spec_draft_tokens += drafted
            self.spec_accepted_tokens += accepted
            add_per_position(self.spec_accepted_per_pos, accepted)
        self.wasted_slot_steps += wasted_slot_steps([s.members], [s.max_num_seqs], [s.waiting])
        self._ends_at(s.t_end_s)

    def add_request(self, r: Request, slo: SLO) -> None:
        self.requests += 1
        self.by_status[r.status.value] = self.count(r.status.value) + 1
        self.preemptions += r.preemptions
        self.output_tokens += len(r.output_token_ids)
        if r.status is Status.FINISHED:
            self.prompt_tokens += r.prompt_tokens
            self.good += slo.met(r)
            self._ends_at(r.finish_s)
        if self.first_arrival_s is None or r.arrival_s < self.first_arrival_s:
            self.first_arrival_s = r.arrival_s

    def _ends_at(self, t: float) -> None:
        if self.last_end_s is None or t > self.last_end_s:
            self.last_end_s = t


# ----------------------------------------------------------------------------- rows and files


def request_row(r: Request) -> dict:
    return {
        "id": r.id, "tenant": r.tenant, "arrival_s": r.arrival_s,
        "first_scheduled_s": r.first_scheduled_s, "first_token_s": r.first_token_s,
        "finish_s": r.finish_s, "prompt_tokens": r.prompt_tokens, "cached_tokens": r.num_cached_tokens,
        "output_tokens": len(r.output_token_ids), "ttft_s": ttft(r), "tpot_s": tpot(r),
        "e2e_s": e2e(r), "queue_s": queue_time(r), "preemptions": r.preemptions,
        "status": r.status.value, "error": r.error,
        "output_token_ids": " ".join(map(str, r.output_token_ids)), "output_text": r.output_text,
        "tpot_so_far_s": tpot_so_far(r),
    }


def step_row(s) -> dict:
    """A StepRecord as a row of the steps table; members stay (request id, phase, tokens) tuples."""
    return {k: getattr(s, k) for k in STEP_COLUMNS}


def prefix_cache(steps, retired: Retired | None = None) -> dict:
    """The prefix cache's whole-run counts (in tokens) and hit rate, from the step records
    (NaN hit rate when nothing was looked up: caching off)."""
    old = retired or Retired()
    queries = sum(s.prefix_queries for s in steps) + old.prefix_queries
    hits = sum(n for s in steps for _, n in s.prefix_hits) + old.prefix_hits
    return {"prefix_cache_queries": queries, "prefix_cache_hits": hits,
            "prefix_cache_hit_rate": hits / queries if queries else math.nan}

