"""The HTTP routes: OpenAI's API, Prometheus metrics, and the lab's own endpoints.

    GET  /health, /v1/models, /metrics
    POST /v1/completions, /v1/chat/completions     (streaming as server-sent events, or not)
    GET  /lab/steps       live step records with their members, as server-sent events
                          (?since=N replays from step N; ?stream=false answers once, as JSON)
    GET  /lab/requests    recent request rows, in the requests.csv columns (?limit=N, 0-5000)
    GET  /lab/policy      the live scheduler policy
    PUT  /lab/policy      change some knobs; needs the instructor token (Authorization: Bearer ...)
    GET  /lab/instructor  200 with the instructor token, 401 without, 403 with a wrong one
    GET  /lab/load        the background load: running or not, its workload, requests sent
    PUT  /lab/load        start it ({"running": true, workload knobs...}) or stop it; instructor
    POST /lab/reset       abort everything in flight and start a fresh engine; instructor

Every check that can be made at once (content type, body size, fields, text, context length, a
full queue, a client or tenant over its limit) answers with its status before anything is
sent, and before any costly work: a prompt is tokenized off the event loop, and only once it
passed every check that needs no tokenizer (engine/server/limits.py). Every error, 404, 422
and 500 included, has OpenAI's shape, {"error": {"message", "type", "param", "code"}}; a
traceback goes to the server's log, never to the client. A client that goes away, mid-stream
or while waiting for a whole answer, has its request aborted: its KV blocks are freed at once.
Bodies must be sent as application/json: a web page can post text/plain to any address without
asking, but not JSON. /docs and /openapi.json exist only when asked for (`docs=True`).
"""
from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import asdict

from fastapi import FastAPI, Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..core.request import Request, Status
from ..core.validation import max_prompt_chars
from . import openai_schema as oa
from .background import spec_from
from .lab_feed import MAX_REQUEST_ROWS, LabFeed
from .bodies import body_bytes, read_body_within, read_json_body
from .limits import ByteBudget, RefusalPacing, ServerLimits, Tokenizing
from .service import EngineService, Stream
from .text import TextStream

log = logging.getLogger("batching_lab.server")
DRAIN_S = 3.0              # at a stop, how long open streams get to send their last chunk and [DONE]
PARSE_INLINE_BYTES = 64 << 10   # longer bodies are parsed on the tokenizing threads, off the event loop


class ClientGone(Exception):
    pass


def json_response(data, status: int = 200, headers: dict | None = None) -> Response:
    return Response(oa.json_bytes(data) if not isinstance(data, bytes) else data, status,
                    headers=headers, media_type="application/json")


def error_response(exc: oa.ApiError) -> Response:
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else None
    return json_response(exc.body(), exc.status, headers)


def create_app(service: EngineService, model_name: str, instructor_token: str,
               limits: ServerLimits = ServerLimits(), docs: bool = False) -> FastAPI:
    tokenizer = service.engine.tokenizer          # the same model after a reset
    max_model_len = service.engine.scheduler.max_model_len
    vocab = len(tokenizer)
    max_chars = max_prompt_chars(tokenizer, max_model_len)
    tokenizing = Tokenizing()
    budget = ByteBudget(limits.bytes_per_s_per_client, 2 * limits.max_body_bytes, limits.max_budget_wait_s)
    pacing = RefusalPacing(limits)
    feed = LabFeed(service, service.engine.keep_steps or 20_000)
    open_streams = set()                          # answers being streamed now

    @asynccontextmanager
    async def lifespan(_):
        service.start()
        poll = asyncio.create_task(feed.poll())
        yield
        feed.close()
        poll.cancel()
        service.stop()
        tokenizing.close()

    app = FastAPI(title="Batching Lab engine", lifespan=lifespan, docs_url="/docs" if docs else None,
                  redoc_url=None, openapi_url="/openapi.json" if docs else None)

    async def stop_streams() -> None:
        """A stop begins: every stream ends with its finish reason and [DONE], and every
        /lab/steps follower ends, before uvicorn closes the connections."""
        service.close()
        feed.close()
        deadline = time.monotonic() + DRAIN_S
        while open_streams and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    app.state.stop_streams = stop_streams

    # ----- errors: OpenAI's shape for every one

    @app.exception_handler(oa.ApiError)
    async def api_error(_, exc: oa.ApiError):
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_, exc: StarletteHTTPException):
        return json_response(oa.error_body(exc.status_code, str(exc.detail)), exc.status_code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(_, exc: RequestValidationError):
        first = exc.errors()[0]
        name = str(first["loc"][-1]) if first.get("loc") else None
        got = f" (got {oa.short(first['input'], 40)})" if "input" in first else ""
        return json_response(oa.error_body(400, f"{name}: {first.get('msg', 'invalid')}{got}", name), 400)

    @app.exception_handler(Exception)
    async def internal_error(_, exc: Exception):      # uvicorn logs the traceback
        return json_response(oa.error_body(500, "the server failed to answer this request; "
                                                "the error is in the server's log"), 500)

    # ----- the OpenAI API

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "batching-lab", "max_model_len": max_model_len}]}

    @app.get("/metrics")
    async def metrics():
        return Response(service.metrics.text(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/completions")
    async def completions(http: HttpRequest):
        return await generate(http, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(http: HttpRequest):
        return await generate(http, chat=True)

    def client_of(http: HttpRequest) -> str | None:
        """The client a request counts against: its address; None for the instructor and the
        trusted addresses, which no per-client limit holds; None for everyone where they are off."""
        host = http.client.host if http.client else ""
        if not limits.per_client or host in limits.trusted_clients or is_instructor(http, instructor_token):
            return None
        return host

    async def refused(exc: oa.ApiError, client: str | None):
        """Raise `exc`; a 429 for a client's own limit is held first (RefusalPacing): a client that
        retries in a loop is answered a few times a second, not as fast as it asks."""
        if exc.status == 429 and client is not None:
            try:
                await asyncio.sleep(pacing.hold(client))
            finally:
                pacing.release(client)
        raise exc

    async def take_place(http: HttpRequest, client: str | None) -> None:
        """Before the body is read: the client's place (429 over its requests in flight), the body's
        declared type and size (415, 413), and its bytes from the client's budget (a wait, or 429).
        The place is the caller's to give back once this returned."""
        try:
            service.admit(client)
        except oa.ApiError as exc:
            await refused(exc, client)
        try:
            await budget.take(client, body_bytes(http, limits))
        except BaseException as exc:                # refused, or the client went away while it waited
            service.release(client)
            if isinstance(exc, oa.ApiError):
                await refused(exc, client)
            raise

    async def generate(http: HttpRequest, chat: bool):
        client = client_of(http)
        await take_place(http, client)            # every cost after this is bounded
        try:
            raw = await read_body_within(http, limits)
            if len(raw) > PARSE_INLINE_BYTES:     # a long body's JSON is read off the event loop too
                body = await tokenizing.run(client, oa.read_json, raw, limits.max_body_bytes)
            else:
                body = oa.read_json(raw, limits.max_body_bytes)
            oa.check_model(body, model_name)
            prompt = oa.chat_messages(body, max_chars) if chat else oa.completion_prompt(body, vocab, max_chars)
            if isinstance(prompt, list) and not chat:
                prompt_ids = prompt
            else:
                encode = oa.encode_chat if chat else oa.encode_text
                prompt_ids = await tokenizing.run(client, encode, prompt, tokenizer)
            s = oa.parse_sampling(body, len(prompt_ids), max_model_len, chat)
            rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
            req = Request(rid, prompt_ids, s.max_tokens, tenant=s.tenant, priority=s.priority,
                          ignore_eos=s.ignore_eos or s.min_tokens > 0, temperature=s.temperature,
                          top_p=s.top_p, seed=s.seed)
            stream = service.submit(req, s, client)
        except BaseException:
            service.release(client)
            raise
        text = TextStream(tokenizer, s.stop)
        if s.stream:
            return StreamingResponse(sse_events(stream, text, chat), media_type="text/event-stream")
        try:
            return await or_gone(whole_answer(stream, text, chat), http)
        except ClientGone:
            service.abort(stream)
            return Response(status_code=499)

    async def updates_from(stream: Stream, text: TextStream):
        """(new text, finish reason or None) per update; ends the request at a stop string.
        A request the engine turned away before its first token raises ApiError."""
        update = await stream.updates.get()
        if update.done and not update.token_ids and update.status in (Status.REJECTED, Status.FAILED):
            queue_full = update.error.startswith("queue full")
            status = 429 if queue_full else 400 if update.status is Status.REJECTED else 500
            raise oa.ApiError(status, update.error, retry_after_s=1 if queue_full else None)
        while True:
            piece = text.add(update.token_ids, final=update.done)
            if text.stopped:
                service.abort(stream, "stop")
                yield piece, "stop"
                return
            yield piece, update.finish_reason if update.done else None
            if update.done:
                return
            update = await stream.updates.get()

    async def whole_answer(stream: Stream, text: TextStream, chat: bool) -> dict:
        pieces, reason = [], None
        async for piece, reason in updates_from(stream, text):
            pieces.append(piece)
        used = oa.usage(stream.req.prompt_tokens, stream.seen)
        return json_response(oa.response(chat, stream.req.id, model_name, "".join(pieces), reason, used))

    async def sse_events(stream: Stream, text: TextStream, chat: bool):
        """The answer as server-sent events. The headers are already sent, so a request the
        engine turns away late (a rare race with a full queue) ends with an error event, as
        does any failure on the way; a stop of the server ends it with finish reason "abort"."""
        rid, created, s = stream.req.id, int(time.time()), stream.sampling
        finished = False                      # has the engine finished this request?
        open_streams.add(stream)
        try:
            if chat:
                yield oa.sse(oa.chunk(chat, rid, model_name, created, "", role=True))
            async for piece, reason in updates_from(stream, text):
                if piece or reason:
                    yield oa.sse(oa.chunk(chat, rid, model_name, created, piece, reason))
            finished = True
            if s.include_usage:
                used = oa.usage(stream.req.prompt_tokens, stream.seen)
                yield oa.sse(oa.chunk(chat, rid, model_name, created, None, used=used))
            yield oa.sse("[DONE]")
        except oa.ApiError as exc:
            finished = True
            yield oa.sse(exc.body())
            yield oa.sse("[DONE]")
        except Exception as exc:               # not a disconnect (that is a cancellation)
            log.error("stream %s failed", rid, exc_info=exc)
            yield oa.sse(oa.error_body(500, "the server failed while streaming this answer; "
                                            "the error is in the server's log"))
            yield oa.sse("[DONE]")
        finally:
            open_streams.discard(stream)
            if not finished:                  # the client went away mid-stream
                service.abort(stream)

    # ----- the lab's endpoints: read from the feed, which reads the engine once for everyone

    @app.get("/lab/steps")
    async def lab_steps(since: int | None = None, stream: bool = True):
        if since is not None and since < 0:
            raise oa.ApiError(400, f"since must be a step number, 0 or more (got {since})", "since")
        if not stream:
            return json_response(feed.steps_once(since))
        return StreamingResponse(feed.follow(since), media_type="text/event-stream")

    @app.get("/lab/requests")
    async def lab_requests(limit: int = 200):
        if not 0 <= limit <= MAX_REQUEST_ROWS:
            raise oa.ApiError(400, f"limit must be 0 to {MAX_REQUEST_ROWS:,} rows (got {limit:,})", "limit")
        return json_response(feed.requests(limit))

    @app.get("/lab/policy")
    async def get_policy():
        return service.engine.policy.to_dict()

    @app.put("/lab/policy")
    async def put_policy(http: HttpRequest):
        changes = await instructor_body(http, "changing the policy")
        try:
            policy = service.engine.policy.changed(**changes)
        except (ValueError, TypeError) as exc:
            raise oa.ApiError(400, str(exc)) from None
        service.set_policy(policy)
        return policy.to_dict()

    @app.get("/lab/load")
    async def get_load():
        return service.background.state()

    @app.put("/lab/load")
    async def put_load(http: HttpRequest):
        body = await instructor_body(http, "changing the background load")
        running = body.pop("running", True)
        if not isinstance(running, bool):
            raise oa.ApiError(400, f"running must be true or false (got {oa.short(running, 40)})", "running")
        try:
            spec = spec_from(body) if running else None
        except (ValueError, TypeError) as exc:
            raise oa.ApiError(400, str(exc)) from None
        service.set_background(spec)
        return {"running": running}

    @app.get("/lab/instructor")
    async def instructor(http: HttpRequest):
        """Whether the caller holds the instructor token (the app's teacher view asks before it shows)."""
        check_instructor(http, instructor_token, "the instructor's view")
        return {"instructor": True}

    @app.post("/lab/reset")
    async def reset(http: HttpRequest):
        check_instructor(http, instructor_token, "a reset")
        service.reset()
        return {"run": service.run + 1}

    async def instructor_body(http: HttpRequest, what: str) -> dict:
        check_instructor(http, instructor_token, what)
        return await read_json_body(http, limits)

    return app


def given_token(http: HttpRequest) -> str:
    return http.headers.get("authorization", "").removeprefix("Bearer ").strip() \
        or http.headers.get("x-instructor-token", "")


def is_instructor(http: HttpRequest, token: str) -> bool:
    given = given_token(http)
    return bool(given) and secrets.compare_digest(given.encode(), token.encode())


def check_instructor(http: HttpRequest, token: str, what: str) -> None:
    if not given_token(http):
        raise oa.ApiError(401, f"{what} needs the instructor token (Authorization: Bearer TOKEN)")
    if not is_instructor(http, token):
        raise oa.ApiError(403, "wrong instructor token")


async def or_gone(awaitable, http: HttpRequest):
    """`awaitable`'s result, or ClientGone as soon as the client disconnects."""
    work = asyncio.ensure_future(awaitable)
    gone = asyncio.ensure_future(_disconnected(http))
    done, _ = await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    gone.cancel()
    if work in done:
        return work.result()
    work.cancel()
    raise ClientGone


async def _disconnected(http: HttpRequest) -> None:
    while (await http.receive())["type"] != "http.disconnect":
        pass
