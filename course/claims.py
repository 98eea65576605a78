"""The claims the lessons make and the labs test: one table, read by the lessons, the lab pages,
tests/test_claims.py and `python -m tools.check_claims`.

Each claim names its lesson, the lab that tests it, the number the lab computes from its own
run (the metric) and the threshold that number must pass. A lab never writes its conclusion in
advance: its experiment.py computes the metric and calls `judge`, which returns a Verdict with
one of three outcomes, each with its own words built from the run's numbers:

- SHOWN: the run shows the claim;
- NOT_SHOWN: the run measured it, and it came out the other way;
- UNDECIDED: this run cannot tell (too few requests, a sweep that hides it, no steady state...),
  and the words say why.

Thresholds are declared here once; a lesson quotes one as {{number:lab.claims.CLAIMS.<id>.threshold}}
(checked by tests/test_lesson_numbers.py). No Streamlit here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

SHOWN, NOT_SHOWN, UNDECIDED = "shown", "not shown", "undecided"
OUTCOME_WORDS = {SHOWN: "this run shows it", NOT_SHOWN: "this run does not show it",
                 UNDECIDED: "this run cannot tell"}


@dataclass(frozen=True, slots=True)
class Claim:
    id: str
    lesson: str          # lesson id (its file name without "NN-")
    lab: str             # lab id (labs/<lab>/)
    text: str            # the claim as the lesson makes it
    metric: str          # what the lab computes from its run, in words
    threshold: float     # the metric must pass it (`above`: at least; else at most)
    unit: str            # how the threshold is written: "×", "%", "req/s" ...
    above: bool          # True: shown when metric >= threshold; False: when metric <= threshold
    counter: str         # a setting where it must not show (tests/test_claims.py runs it)

    def threshold_text(self) -> str:
        value = f"{self.threshold:.0%}" if self.unit == "%" else f"{self.threshold:g}{self.unit}"
        return f"{'at least' if self.above else 'at most'} {value}"

    def passes(self, value: float) -> bool:
        return math.isfinite(value) and (value >= self.threshold if self.above else value <= self.threshold)


@dataclass(frozen=True, slots=True)
class Verdict:
    claim: Claim
    outcome: str         # SHOWN, NOT_SHOWN or UNDECIDED
    value: float         # the metric this run measured (nan when it could not)
    words: str           # what this run shows, with its numbers

    @property
    def shown(self) -> bool:
        return self.outcome == SHOWN

    @property
    def outcome_words(self) -> str:
        return OUTCOME_WORDS[self.outcome]

    def value_text(self) -> str:
        if not math.isfinite(self.value):
            return "—"
        if self.claim.unit == "%":     # a share under 10% keeps a decimal, as the words beside it do
            return f"{self.value:.1%}" if abs(self.value) < 0.1 else f"{self.value:.0%}"
        return f"{self.value:.3g}{self.claim.unit}"


def judge(claim_id: str, value: float, shown: str, not_shown: str, undecided: str | None = None,
          extra_test: bool = True) -> Verdict:
    """The verdict of one run: `undecided` (why this run cannot tell) wins when given; else the
    metric against the claim's threshold (and `extra_test`, a second condition the claim needs)
    picks the words `shown` or `not_shown`."""
    claim = CLAIMS[claim_id]
    value = float(value) if value is not None else math.nan
    if undecided:
        return Verdict(claim, UNDECIDED, value, undecided)
    if claim.passes(value) and extra_test:
        return Verdict(claim, SHOWN, value, shown)
    return Verdict(claim, NOT_SHOWN, value, not_shown)


def _claims(*claims: Claim) -> dict[str, Claim]:
    return {c.id: c for c in claims}


# The course's claims, in lesson order. A lab may test several; a lesson may hold several.
CLAIMS = _claims(
    Claim("batching_amortizes", "why-batch", "why_batch",
          "One decode step streams every weight once, however many sequences ride in it, so tokens per second "
          "grow with the batch: a step of 8 sequences makes more tokens per second than a step of 1 (at least "
          "1.1 times as many).",
          "tokens/s at batch 8 ÷ tokens/s at batch 1", 1.1, "×", above=True,
          counter="a context of 131,072 tokens per sequence, where each sequence's own attention dominates a CPU's step"),
    Claim("continuous_beats_static", "static-vs-continuous", "static_vs_continuous",
          "On mixed-length traffic continuous batching refills a freed slot at the next step, so "
          "arrivals stop waiting for an unrelated long answer: their TTFT falls.",
          "p95 TTFT under static ÷ p95 TTFT under continuous", 1.5, "×", above=True,
          counter="equal lengths, all arriving at once (an offline batch)"),
    Claim("static_fine_offline", "static-vs-continuous", "static_vs_continuous",
          "For an offline batch of equal lengths static batching loses nothing: every member ends at "
          "the same step, so no slot sits empty and both modes finish together.",
          "how far apart the two modes finish (|static ÷ continuous − 1|)", 0.05, "%", above=False,
          counter="many short requests and one long one"),
    Claim("long_prompt_stalls", "costs-of-continuous", "costs",
          "Without chunked prefill, a step that carries a whole long prompt freezes every running "
          "stream for that step; chunking spreads the prompt and shortens the freeze.",
          "longest decode gap with chunking off ÷ the usual (median) gap", 3.0, "×", above=True,
          counter="a 'long' prompt of only 64 tokens"),
    Claim("small_kv_preempts", "costs-of-continuous", "costs",
          "Admitting work fills the KV cache; a cache too small for the running batch forces "
          "preemptions, and the preempted requests' prompts are computed again.",
          "preemptions in the run", 1.0, "", above=True,
          counter="a cache big enough for every slot at its longest (4,096 tokens)"),
    Claim("scheduling_is_small", "costs-of-continuous", "costs",
          "Deciding every step is scheduling work the engine does on every step, and on a CPU's step it is "
          "small: the scheduler's own time to decide a step of a full batch, with a thousand requests "
          "waiting, is at most a fifth of the step it decides. (On a step a fast accelerator takes for a small "
          "model, the same decision is a large share, which is why production engines work on this path.)",
          "the scheduler's time to decide one step ÷ that step's time", 0.20, "%", above=False,
          counter="a step as short as a small model's on a fast accelerator (0.2 ms)"),
    Claim("goodput_falls", "latency-metrics", "slo_goodput",
          "Throughput counts every token; goodput only requests that met both targets. Past some "
          "rate, throughput keeps rising while goodput falls.",
          "goodput at the highest rate ÷ the best goodput of the sweep", 0.9, "%", above=False,
          counter="targets so loose that every request meets them (TTFT 600 s, TPOT 10 s)"),
    Claim("queueing_explodes", "queueing", "queueing",
          "Waiting grows slowly at first and then explodes as the server nears full use.",
          "mean queue time at the highest utilization ÷ at the lowest", 5.0, "×", above=True,
          counter="utilizations of 30% and 50% only, far from full use"),
    Claim("overload_shows_in_waiting", "two-schedulers", "queueing",
          "Past capacity the engine looks no busier than just below it; only the waiting queue "
          "shows the overload, so it is the signal to add a replica.",
          "the waiting queue's growth past capacity, as a share of the arrival rate", 0.05, "%",
          above=True, counter="70% utilization in place of 120%"),
    Claim("knee_below_max", "batch-policy", "knee",
          "Throughput saturates before the engine's limit: past the knee, more slots buy little "
          "throughput and cost latency, so operate at the knee, not the maximum.",
          "p95 TPOT at the largest setting ÷ at the knee (with the knee below the largest)", 1.2, "×",
          above=True, counter="a token budget of 8 tokens a step, which holds every setting's batch at 8"),
    Claim("tail_has_a_cause", "tail-latency", "tail",
          "The slowest requests share a cause (long prompts, one tenant's bursts): split the requests that way "
          "and one group makes up far more of the tail than of the traffic.",
          "the most over-represented group's share of the slowest 5% ÷ its share of all requests", 1.5, "×",
          above=True,
          counter="no long prompts and no bursts"),
    Claim("tail_by_window", "tail-latency", "tail",
          "The tail is not spread evenly over time: it gathers in busy windows (bursts).",
          "p95 TTFT of the worst time window ÷ the median window's", 3.0, "×", above=True,
          counter="steady (non-bursty) traffic at a light load"),
    Claim("orders_favour_someone", "scheduler-policy", "scheduler_orders",
          "When requests queue, every order favours somebody: each one moves some tenant's p95 TTFT "
          "against first come, first served.",
          "the median, over the orders, of the largest change in a tenant's p95 TTFT against fcfs",
          0.2, "%", above=True, counter="a light load (30% of capacity), where few requests queue"),
    Claim("sjf_starves_long", "scheduler-policy", "scheduler_orders",
          "Shortest-job-first starves long prompts: under sjf they wait far longer than under fcfs at the "
          "same load, while fcfs's queue stays bounded (so it is not plain overload).",
          "long prompts' p95 queue time under sjf ÷ under fcfs", 2.0, "×", above=True,
          counter="a light load (30% of capacity), where the queue empties often"),
    Claim("waiting_to_batch", "two-schedulers", "dynamic_batching",
          "Waiting to fill a batch raises the tokens each second of engine work makes, not the tokens "
          "delivered per second, and every request pays for it in TTFT.",
          "tokens per second of engine work, longest wait ÷ no wait", 1.1, "×", above=True,
          counter="arrivals dense enough that every batch fills before the wait runs out"),
    Claim("closed_loop_hides_queue", "benchmarking", "benchmarking",
          "Near capacity, a benchmark at a fixed concurrency (a closed loop) reports a far lower TTFT than users "
          "arriving at random at the same throughput would see: its clients wait to send, so the queue is in "
          "the load generator, not in the server.",
          "open load's p95 TTFT ÷ the closed loop's, at the closed loop's own throughput", 3.0, "×", above=True,
          counter="one client (a light load), where an open arrival seldom finds the engine busy"),
    Claim("kv_pool_caps_batch", "kv-capacity", "kv_capacity",
          "When the KV pool holds fewer tokens than max_num_seqs requests need, the pool, not max_num_seqs, sets "
          "how many run at once: while requests wait, the batch stays well below the slot limit (at most three "
          "quarters of it on average), and requests whose next token finds no free block are preempted.",
          "mean requests running while some waited ÷ max_num_seqs", 0.75, "%", above=False,
          counter="a pool of 3,072 tokens, enough for every slot at its longest"),
    Claim("prefix_cache_cuts_ttft", "kv-capacity", "kv_capacity",
          "On one replica, when prompts start with the same long system prompt, prefix caching finds most of each "
          "prompt in the KV pool (a hit rate of at least 30%) and the median TTFT is at least 1.5 times shorter "
          "than with it off.",
          "median TTFT with caching off ÷ with it on (and hit rate at least 30%)", 1.5, "×", above=True,
          counter="prompts of the same lengths that share nothing: the cache finds no full block"),
    Claim("prefix_affinity_hits", "beyond-one-replica", "cluster",
          "On a shared-prefix, multi-turn workload near capacity, routing by prefix affinity finds more of each "
          "prompt in the replicas' prefix caches than round-robin does, so its requests have fewer prompt tokens "
          "to compute and its median TTFT is lower. (Its p95, set by bursts of queueing, can go either way.)",
          "prefix hit rate under prefix_affinity − under round_robin, in points (and p50 TTFT lower)", 0.05, "%",
          above=True, counter="prompts that share nothing: the hit rates are then within 1 point"),
    Claim("affinity_needs_a_load_bound", "beyond-one-replica", "cluster",
          "When one system prompt is in every request, prefix affinity without a load bound sends them all to "
          "one replica: the load imbalance soars and p95 TTFT is far worse than with the bound.",
          "load imbalance under unbounded prefix affinity (and p95 TTFT at least twice the bounded one's)",
          1.5, "×", above=True,
          counter="eight system prompts and many conversations spread the prefixes: unbounded affinity then stays "
                  "nearly even (imbalance below 1.3) without any bound"),
    Claim("busy_fraction_overprovisions", "beyond-one-replica", "cluster",
          "After a traffic peak, when traffic is back to half of what one replica serves, an autoscaler on busy "
          "fraction (target 0.7) still holds most of its replicas, while one on waiting requests (target 2 per "
          "replica) is back to one or two: every batching replica that holds a request looks busy.",
          "replicas held at the end of the ramp, busy autoscaler − waiting autoscaler", 2, " replicas", above=True,
          counter="batching off (max_num_seqs 1): busy fraction then falls with the traffic, and the busy "
                  "autoscaler ends within one replica of the waiting one"),
    Claim("startup_delay_costs_slo", "beyond-one-replica", "cluster",
          "The longer a new replica takes to start, the more requests miss the SLO while traffic rises: the "
          "waiting autoscaler attains less with a 120 s start-up than with a 10 s one.",
          "SLO attainment with a 10 s start-up − with a 120 s start-up (waiting autoscaler), in points", 0.05, "%",
          above=True, counter="a gentle ramp that one replica serves: no new replica is needed, so the start-up "
                              "delay changes nothing (attainment within 1 point)"),
    Claim("spec_pays_at_batch_1", "speculative-decoding", "speculation",
          "At batch 1 a decode step is bound by reading the weights, so checking a few guessed tokens in the same "
          "step costs little: on prompts that ask the model to copy a passage, n-gram speculation makes output "
          "tokens at least 1.3 times as fast.",
          "output tok/s with n-gram drafts ÷ without, batch 1, copies", 1.3, "×", above=True,
          counter="free questions, whose answers rarely repeat their prompt: few guesses are made or accepted"),
    Claim("spec_costs_compute_bound", "speculative-decoding", "speculation",
          "At a batch large enough for the step to be bound by arithmetic, every drafted token costs its share of "
          "the step whether it is accepted or not: the same copies then make decode tokens more slowly with "
          "speculation than without.",
          "decode tok/s with n-gram drafts ÷ without, large batch, copies", 1.0, "×", above=False,
          counter="batch 1, where the step is bound by reading the weights"),
    Claim("budget_trades_ttft_for_itl", "token-budget", "token_budget",
          "On a mix of long and short prompts, the token budget trades the first token against the gaps between "
          "tokens: a larger budget lets a long prompt through in fewer, longer steps, so p95 TTFT falls and the worst "
          "pauses of the streams decoding beside it grow.",
          "the longest gap between two tokens in a stream (p95 over requests), at the largest budget ÷ at the "
          "smallest (and p95 TTFT at least 10% lower there)", 2.0, "×",
          above=True, counter="short prompts only: no step fills even the smallest budget, so both stay flat"),
)


def for_lab(lab: str) -> list[Claim]:
    return [c for c in CLAIMS.values() if c.lab == lab]


def for_lesson(lesson: str) -> list[Claim]:
    return [c for c in CLAIMS.values() if c.lesson == lesson]


def ratio(a: float, b: float) -> float:
    """a / b, nan when either is missing or b is not positive."""
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return math.nan
    return a / b if math.isfinite(a) and math.isfinite(b) and b > 0 else math.nan
