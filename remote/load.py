"""A load generator: real streaming requests to any OpenAI-compatible server, as one tenant.
Its client, `stream_into`, is the project's one streaming client (the replicas' router sends
with it too).

Every request is timed on this side of the wire, from its stream: sent, the first chunk that
carries text (TTFT), every later text chunk (ITL), the end (E2E). Token counts come from the
final usage chunk (`stream_options.include_usage`), or, for a server that sends none, from the
number of text chunks. TTFT, TPOT and E2E are engine.metrics' own definitions, applied to these
client timestamps; queue time is not visible from a client, so it is left empty.

All generators of a process share one asyncio loop in one background thread: a page calls
`send_*` and returns at once, and reads `rows()` / `table()` whenever it redraws.
"""
from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass, field

import openai
import pandas as pd

from engine.core import metrics
from engine.runs.arrivals import ArrivalFeed
from engine.core.request import Request, Status

T0 = time.perf_counter()        # one time axis for every generator of this process
KEEP_ROWS = 2000
_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def now_s() -> float:
    return time.perf_counter() - T0


def shared_loop() -> asyncio.AbstractEventLoop:
    """The process's one event loop for client requests, started on first use."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, daemon=True, name="batching-lab-load").start()
        return _loop


@dataclass(slots=True, eq=False)
class ClientRecord:
    """One request as the client saw it. engine.metrics reads its times, its status and the
    length of `output_token_ids` (ids are not streamed: only their count is known)."""
    id: str
    tenant: str
    arrival_s: float
    status: Status = Status.RUNNING
    first_token_s: float | None = None
    finish_s: float | None = None
    token_times: list[float] = field(default_factory=list)   # when each text chunk came
    prompt_tokens: int | None = None
    output_tokens: int = 0
    text: str = ""
    error: str = ""

    @property
    def output_token_ids(self) -> range:
        return range(self.output_tokens)

    def row(self) -> dict:
        """This request in the requests.csv columns. The client cannot tell queue from prefill:
        first_scheduled_s is its first token (the timeline draws the whole TTFT as waiting)."""
        done = self.status is not Status.RUNNING
        return {"id": self.id, "tenant": self.tenant, "arrival_s": self.arrival_s,
                "first_scheduled_s": self.first_token_s, "first_token_s": self.first_token_s,
                "finish_s": self.finish_s, "prompt_tokens": self.prompt_tokens,
                # while it streams, the tokens received so far (the server's own count comes at the end)
                "output_tokens": self.output_tokens or len(self.token_times),
                "ttft_s": metrics.ttft(self), "tpot_s": metrics.tpot(self),
                "e2e_s": metrics.e2e(self), "queue_s": None, "preemptions": None, "status": self.status.value,
                "error": self.error, "output_token_ids": "", "output_text": self.text if done else "",
                "partial_text": "" if done else self.text}


class LoadGenerator:
    def __init__(self, api_url: str, model: str, tenant: str, api_key: str = "unused", keep_rows: int = KEEP_ROWS,
                 prompt_as: str = "ids"):
        """prompt_as: "ids" sends a workload request's prompt as its token ids; "words" as text of one
        word per token (" the the ..."), for a server that takes text only (Ollama)."""
        if prompt_as not in ("ids", "words"):
            raise ValueError(f"prompt_as {prompt_as!r} is not allowed: choose ids or words")
        self.model, self.tenant, self.prompt_as = model, tenant, prompt_as
        self.client = openai.AsyncOpenAI(base_url=api_url, api_key=api_key, max_retries=0, timeout=600)
        self.records: list[ClientRecord] = []
        self.keep_rows = keep_rows
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._feed_task = None
        self._fed: set = set()           # requests the feed sent that are still streaming

    # ----- sending (returns at once) -----

    def send_prompt(self, text: str, max_tokens: int, n: int = 1, ignore_eos: bool | None = None):
        """`n` copies of one chat prompt, all sent now. Returns the futures (for a caller that waits)."""
        body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}
        return [self._submit(self._one(body, chat=True, ignore_eos=ignore_eos)) for _ in range(n)]

    def send_requests(self, requests: list[Request]):
        """Workload requests (engine.arrivals), each sent as its token ids at its own arrival
        time (seconds from now), with ignore_eos so the output lengths are the workload's."""
        return self._submit(self._at_their_times(requests))

    def run_feed(self, feed: ArrivalFeed, already_s: float = 0.0, keep_going=lambda: True) -> None:
        """Send an ArrivalFeed's requests as they fall due, until it runs out, stop(), or
        `keep_going()` turns false (its page is gone). `already_s`: how far into the feed's time
        sending starts (a resume goes on from there)."""
        self.stop()
        self._feed_task = self._submit(self._follow(feed, already_s, keep_going))

    def change_feed(self, feed: ArrivalFeed, spec, now_s: float) -> None:
        """feed.set_spec(spec, now_s), on the loop thread that draws from the feed."""
        shared_loop().call_soon_threadsafe(feed.set_spec, spec, now_s)

    @property
    def busy(self) -> bool:
        """Still sending a feed, or a request it sent is still streaming."""
        return (self._feed_task is not None and not self._feed_task.done()) or bool(self._fed)

    def stop(self) -> None:
        """Stop sending the feed's requests (those in flight go on)."""
        if self._feed_task is not None:
            self._feed_task.cancel()
            self._feed_task = None

    def cancel_in_flight(self) -> None:
        """Hang up on the feed's requests still streaming: the server aborts them and frees their KV.
        (On the loop thread, the only one that touches the set of them.)"""
        shared_loop().call_soon_threadsafe(lambda: [t.cancel() for t in list(self._fed)])

    # ----- reading -----

    def rows(self) -> list[dict]:
        with self._lock:
            return [r.row() for r in self.records]

    def table(self) -> pd.DataFrame:
        return pd.DataFrame.from_records(self.rows(), columns=metrics.REQUEST_COLUMNS + ["partial_text"])

    def itls(self) -> list[float]:
        with self._lock:
            return metrics.itls(self.records)

    def gaps(self) -> pd.DataFrame:
        """Every inter-token gap (metrics.itls, one request at a time) with its request's id and
        the time of the later token: the ITL chart's points."""
        with self._lock:
            rows = [(r.id, b, b - a) for r in self.records for a, b in zip(r.token_times, r.token_times[1:])]
        return pd.DataFrame(rows, columns=["id", "token_s", "itl_s"])

    @property
    def in_flight(self) -> int:
        with self._lock:
            return sum(r.status is Status.RUNNING for r in self.records)

    # ----- the loop side -----

    def _submit(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, shared_loop())

    async def _at_their_times(self, requests: list[Request]) -> list[ClientRecord]:
        start = now_s()
        tasks = []
        for r in sorted(requests, key=lambda r: r.arrival_s):
            await asyncio.sleep(max(0.0, start + r.arrival_s - now_s()))
            tasks.append(asyncio.ensure_future(self._one(
                {"prompt": self._prompt(r), "max_tokens": r.max_new_tokens}, chat=False, ignore_eos=r.ignore_eos)))
        return list(await asyncio.gather(*tasks))

    async def _follow(self, feed: ArrivalFeed, already_s: float = 0.0, keep_going=lambda: True) -> None:
        start = now_s() - already_s
        while not feed.exhausted and keep_going():
            for r in feed.due(now_s() - start):
                body = {"prompt": self._prompt(r), "max_tokens": r.max_new_tokens}
                task = asyncio.ensure_future(self._one(body, chat=False, ignore_eos=r.ignore_eos))
                self._fed.add(task)
                task.add_done_callback(self._fed.discard)
            await asyncio.sleep(max(0.001, min(0.5, start + feed.next_s - now_s())))

    def _prompt(self, r: Request):
        return r.prompt_token_ids if self.prompt_as == "ids" else " the" * len(r.prompt_token_ids)

    async def _one(self, body: dict, chat: bool, ignore_eos: bool | None) -> ClientRecord:
        rec = ClientRecord(f"{self.tenant}-{next(self._ids)}", self.tenant, now_s())
        with self._lock:
            self.records.append(rec)
            del self.records[:max(0, len(self.records) - self.keep_rows)]
        return await stream_into(rec, self.client, self.model, body, chat, ignore_eos, user=self.tenant)


async def stream_into(rec: ClientRecord, client: openai.AsyncOpenAI, model: str, body: dict, chat: bool = False,
                      ignore_eos: bool | None = None, user: str | None = None) -> ClientRecord:
    """Send one streaming request (`body`: the prompt or messages, max_tokens, ...) and time it into
    `rec` as its chunks come: the one streaming client of the project (every load generator, the
    replicas' router). `rec.arrival_s` is when the request counts from, on now_s()'s axis."""
    extra = {} if ignore_eos is None else {"ignore_eos": ignore_eos}
    who = {} if user is None else {"user": user}
    api = client.chat.completions if chat else client.completions
    try:
        stream = await api.create(model=model, stream=True, stream_options={"include_usage": True},
                                  extra_body=extra, **who, **body)
        async for chunk in stream:
            _take(rec, chunk, chat)
        rec.output_tokens = rec.output_tokens or len(rec.token_times)
        if rec.status is Status.RUNNING:
            rec.status = Status.FINISHED
    except asyncio.CancelledError:
        rec.status, rec.error = Status.ABORTED, "cancelled by the client"
        raise
    except openai.APIStatusError as exc:
        rec.status = Status.REJECTED if exc.status_code in (400, 429) else Status.FAILED
        rec.error = f"{exc.status_code}: {_message(exc)}"
    except (openai.APIError, OSError) as exc:
        rec.status, rec.error = Status.FAILED, f"{type(exc).__name__}: {exc}"
    finally:
        rec.finish_s = rec.token_times[-1] if rec.status is not Status.FAILED and rec.token_times else now_s()
    return rec


def _take(rec: ClientRecord, chunk, chat: bool) -> None:
    t = now_s()
    rec.id = chunk.id or rec.id
    if chunk.usage:
        rec.prompt_tokens, rec.output_tokens = chunk.usage.prompt_tokens, chunk.usage.completion_tokens
    for choice in chunk.choices:
        if choice.finish_reason == "abort":        # vLLM's word for "ended by the server"
            rec.status, rec.error = Status.ABORTED, "aborted by the server"
        piece = (choice.delta.content if chat else choice.text) or ""
        if piece:
            rec.token_times.append(t)
            rec.first_token_s = rec.first_token_s if rec.first_token_s is not None else t
            rec.text += piece


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    return str(error.get("message", exc.message)) if isinstance(error, dict) else str(exc.message)


def served_model(api_url: str, timeout_s: float = 10.0) -> str:
    """The first model a server's /v1/models lists (our server serves one)."""
    client = openai.OpenAI(base_url=api_url, api_key="unused", max_retries=0, timeout=timeout_s)
    return client.models.list().data[0].id
