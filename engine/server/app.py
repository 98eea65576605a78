"""The HTTP routes: OpenAI's API, Prometheus metrics, and the lab's own endpoints.

    GET  /health, /v1/models, /metrics
    POST /v1/completions, /v1/chat/completions     (streaming as server-sent events, or not)
    GET  /lab/steps       live step records with their members, as server-sent events
                          (?since=N replays from step N; ?stream=false answers once, as JSON)
    GET  /lab/requests    recent request rows, in the requests.csv columns (?limit=N)
    GET  /lab/policy      the live scheduler policy
    PUT  /lab/policy      change some knobs; needs the instructor token (Authorization: Bearer ...)
    GET  /lab/load        the background load: running or not, its workload, requests sent
    PUT  /lab/load        start it ({"running": true, workload knobs...}) or stop it; instructor
    POST /lab/reset       abort everything in flight and start a fresh engine; instructor

Every check that can be made at once (body, fields, context length, a full queue, a tenant
over its limit) answers with its status before anything is sent. A client that goes away,
mid-stream or while waiting for a whole answer, has its request aborted: its KV blocks are
freed at once.
"""
from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import asdict

from fastapi import FastAPI, Request as HttpRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST

from ..metrics import request_row
from ..request import Request, Status
from . import openai_schema as oa
from .background import spec_from
from .service import EngineService, Stream
from .text import TextStream

MAX_BODY_BYTES = 1 << 20
STEP_POLL_S = 0.05


class ClientGone(Exception):
    pass


def create_app(service: EngineService, model_name: str, instructor_token: str,
               max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    tokenizer = service.engine.tokenizer          # the same model after a reset
    max_model_len = service.engine.scheduler.max_model_len

    @asynccontextmanager
    async def lifespan(_):
        service.start()
        yield
        service.stop()

    app = FastAPI(title="Batching Lab engine", lifespan=lifespan)

    @app.exception_handler(oa.ApiError)
    async def api_error(_, exc: oa.ApiError):
        headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

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

    async def generate(http: HttpRequest, chat: bool):
        body = oa.read_json(await read_body(http, max_body_bytes), max_body_bytes)
        oa.check_model(body, model_name)
        prompt_ids = oa.chat_prompt(body, tokenizer) if chat else oa.completion_prompt(body, tokenizer)
        s = oa.parse_sampling(body, len(prompt_ids), max_model_len, chat)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        req = Request(rid, prompt_ids, s.max_tokens, tenant=s.tenant, priority=s.priority,
                      ignore_eos=s.ignore_eos or s.min_tokens > 0, temperature=s.temperature,
                      top_p=s.top_p, seed=s.seed)
        stream = service.submit(req, s)
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
        return oa.response(chat, stream.req.id, model_name, "".join(pieces), reason, used)

    async def sse_events(stream: Stream, text: TextStream, chat: bool):
        """The answer as server-sent events. The headers are already sent, so a request the
        engine turns away late (a rare race with a full queue) ends with an error event."""
        rid, created, s = stream.req.id, int(time.time()), stream.sampling
        finished = False                      # has the engine finished this request?
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
        finally:
            if not finished:                  # the client went away mid-stream
                service.abort(stream)

    # ----- the lab's endpoints -----

    def step_json(rec) -> dict:
        return {**asdict(rec), "members": [list(m) for m in rec.members]}

    @app.get("/lab/steps")
    async def lab_steps(since: int | None = None, stream: bool = True):
        start = service.engine.step_count if since is None else since
        if not stream:
            run, marks = service.run, [asdict(m) for m in service.engine.marks]
            steps = service.steps_since(start)
            return {"steps": [step_json(r) for r in steps], "next": steps[-1].step + 1 if steps else start,
                    "run": run, "marks": marks}

        async def follow():
            nxt, run = start, service.run
            while True:
                if service.run != run:           # a reset: the fresh engine counts from step 0
                    nxt, run = 0, service.run
                for rec in service.steps_since(nxt):
                    yield oa.sse(step_json(rec))
                    nxt = rec.step + 1
                await asyncio.sleep(STEP_POLL_S)
        return StreamingResponse(follow(), media_type="text/event-stream")

    @app.get("/lab/requests")
    async def lab_requests(limit: int = 200):
        recent = list(service.engine.requests.values())[-max(0, limit):]
        return {"requests": [request_row(r) for r in recent]}

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
            raise oa.ApiError(400, f"running must be true or false (got {running!r:.40})", "running")
        try:
            spec = spec_from(body) if running else None
        except (ValueError, TypeError) as exc:
            raise oa.ApiError(400, str(exc)) from None
        service.set_background(spec)
        return {"running": running}

    @app.post("/lab/reset")
    async def reset(http: HttpRequest):
        check_instructor(http, instructor_token, "a reset")
        service.reset()
        return {"run": service.run + 1}

    async def instructor_body(http: HttpRequest, what: str) -> dict:
        check_instructor(http, instructor_token, what)
        return oa.read_json(await read_body(http, max_body_bytes), max_body_bytes)

    return app


def check_instructor(http: HttpRequest, token: str, what: str) -> None:
    given = http.headers.get("authorization", "").removeprefix("Bearer ").strip() \
        or http.headers.get("x-instructor-token", "")
    if not given:
        raise oa.ApiError(401, f"{what} needs the instructor token (Authorization: Bearer TOKEN)")
    if not secrets.compare_digest(given.encode(), token.encode()):
        raise oa.ApiError(403, "wrong instructor token")


async def read_body(http: HttpRequest, limit_bytes: int) -> bytes:
    """The body, read no further than one byte past the limit (read_json then names the limit)."""
    raw = bytearray()
    async for part in http.stream():
        raw += part
        if len(raw) > limit_bytes:
            break
    return bytes(raw)


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
