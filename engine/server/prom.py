"""/metrics in vLLM's names, types and bucket boundaries (vllm/v1/metrics/loggers.py), so a
Grafana dashboard or a load generator built for vLLM reads this engine unchanged.

Intervals as vLLM defines them: queue = QUEUED -> SCHEDULED, prefill = SCHEDULED -> first
token, decode = first token -> last token. Prompt tokens are counted once per request, when
its first token comes out (a prefill redone after a preemption is not counted twice).
Only the engine thread writes these; prometheus-client's own locks make the reads safe.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..core.request import Request

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
TOKEN_GAP_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                     7.5, 10.0, 20.0, 40.0, 80.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                           50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
FINISH_REASONS = ("stop", "length", "abort", "error")   # vLLM's FinishReason values
LABELS = ["model_name", "engine"]                       # one engine: always "0"
HISTOGRAMS = {   # our key: (vLLM's name, its help text, its buckets)
    "iteration_tokens": ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                         ITERATION_TOKEN_BUCKETS),
    "ttft": ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS),
    "itl": ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", TOKEN_GAP_BUCKETS),
    "tpot": ("vllm:request_time_per_output_token_seconds",
             "Histogram of time_per_output_token_seconds per request.", TOKEN_GAP_BUCKETS),
    "e2e": ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS),
    "queue": ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
              REQUEST_LATENCY_BUCKETS),
    "prefill": ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
                REQUEST_LATENCY_BUCKETS),
    "decode": ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
               REQUEST_LATENCY_BUCKETS),
}


class ServerMetrics:
    def __init__(self, model_name: str):
        self.registry = CollectorRegistry()   # our own, so two servers in one process never clash
        values = (model_name, "0")

        def gauge(name, doc):
            return Gauge(name, doc, LABELS, registry=self.registry).labels(*values)

        def counter(name, doc):
            return Counter(name, doc, LABELS, registry=self.registry).labels(*values)

        def histogram(name, doc, buckets):
            return Histogram(name, doc, LABELS, buckets=buckets, registry=self.registry).labels(*values)

        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.prefix_queries = counter("vllm:prefix_cache_queries",
                                      "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        # Speculative decoding, as vllm/v1/spec_decode/metrics.py names them. vLLM registers them only
        # when it starts with a speculative config; here speculation is a live knob, so always.
        self.spec_drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")
        self.spec_draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.")
        self.spec_accepted_tokens = counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")
        per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                          LABELS + ["position"], registry=self.registry)
        self._spec_per_pos = lambda pos: per_pos.labels(*values, str(pos))
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          LABELS + ["finished_reason"], registry=self.registry)
        self.success = {reason: success.labels(*values, reason) for reason in FINISH_REASONS}
        self.hist = {key: histogram(name, doc, buckets) for key, (name, doc, buckets) in HISTOGRAMS.items()}

    def engine_state(self, running: int, waiting: int, kv_used_blocks: int, kv_total_blocks: int) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_usage.set(kv_used_blocks / kv_total_blocks if kv_total_blocks else 0.0)

    def step(self, tokens: int, preempted: int) -> None:
        self.hist["iteration_tokens"].observe(tokens)
        if preempted:
            self.preemptions.inc(preempted)

    def prefix_cache(self, queries: int, hits: int) -> None:
        """Tokens looked up in the prefix cache in one step, and tokens found there."""
        if queries:
            self.prefix_queries.inc(queries)
            self.prefix_hits.inc(hits)

    def drafts(self, drafts) -> None:
        """One step's checked drafts: (request id, tokens drafted, tokens accepted) each."""
        for _, drafted, accepted in drafts:
            self.spec_drafts.inc()
            self.spec_draft_tokens.inc(drafted)
            self.spec_accepted_tokens.inc(accepted)
            for pos in range(accepted):
                self._spec_per_pos(pos).inc()

    def new_tokens(self, req: Request, already_seen: int) -> None:
        """The tokens of `req` from index `already_seen` on have just come out."""
        times = req.token_times
        if already_seen == 0 and times:
            self.hist["ttft"].observe(times[0] - req.arrival_s)
            self.prompt_tokens.inc(req.prompt_tokens)
        for i in range(max(1, already_seen), len(times)):
            self.hist["itl"].observe(times[i] - times[i - 1])
        self.generation_tokens.inc(len(times) - already_seen)

    def request_done(self, req: Request, finish_reason: str, end_s: float) -> None:
        self.success[finish_reason].inc()
        self.hist["e2e"].observe(end_s - req.arrival_s)
        if req.first_scheduled_s is not None:
            self.hist["queue"].observe(req.first_scheduled_s - req.arrival_s)
        if req.first_token_s is not None:
            self.hist["prefill"].observe(req.first_token_s - req.first_scheduled_s)
            decode_s = req.token_times[-1] - req.first_token_s
            self.hist["decode"].observe(decode_s)
            if len(req.token_times) > 1:
                self.hist["tpot"].observe(decode_s / (len(req.token_times) - 1))

    def text(self) -> bytes:
        return generate_latest(self.registry)
