"""OpenAI's API: /health, /v1/models, /v1/completions and /v1/chat/completions (streamed as
server-sent events, or whole).

Every check that can be made at once (content type, body size, fields, text, context length, a
full queue, a client or tenant over its limit) answers with its status before anything is sent,
and before any costly work: a prompt is tokenized off the event loop, and only once it passed
every check that needs no tokenizer (engine/server/limits.py). A client that goes away, mid-stream
or while waiting for a whole answer, has its request aborted: its KV blocks are freed at once.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from fastapi import APIRouter, Request as HttpRequest
from fastapi.responses import Response, StreamingResponse

from ..core.request import Request, Status
from . import openai_schema as oa
from .bodies import body_bytes, read_body_within
from .instructor import is_instructor
from .service import Stream
from .shared import Shared, json_response, shared
from .text import TextStream

log = logging.getLogger("batching_lab.server")
PARSE_INLINE_BYTES = 64 << 10   # longer bodies are parsed on the tokenizing threads, off the event loop

router = APIRouter()


class ClientGone(Exception):
    pass


@router.get("/health")
async def health():
    return {"status": "ok"}


@router.get("/v1/models")
async def models(http: HttpRequest):
    s = shared(http)
    return {"object": "list", "data": [{"id": s.model_name, "object": "model", "created": 0,
                                        "owned_by": "batching-lab", "max_model_len": s.max_model_len}]}


@router.post("/v1/completions")
async def completions(http: HttpRequest):
    return await generate(http, chat=False)


@router.post("/v1/chat/completions")
async def chat_completions(http: HttpRequest):
    return await generate(http, chat=True)


def client_of(http: HttpRequest, s: Shared) -> str | None:
    """The client a request counts against: its address; None for the instructor and the
    trusted addresses, which no per-client limit holds; None for everyone where they are off."""
    host = http.client.host if http.client else ""
    if not s.limits.per_client or host in s.limits.trusted_clients or is_instructor(http, s.instructor_token):
        return None
    return host


async def refused(exc: oa.ApiError, client: str | None, s: Shared):
    """Raise `exc`; a 429 for a client's own limit is held first (RefusalPacing): a client that
    retries in a loop is answered a few times a second, not as fast as it asks."""
    if exc.status == 429 and client is not None:
        try:
            await asyncio.sleep(s.pacing.hold(client))
        finally:
            s.pacing.release(client)
    raise exc


async def take_place(http: HttpRequest, client: str | None, s: Shared) -> None:
    """Before the body is read: the client's place (429 over its requests in flight), the body's
    declared type and size (415, 413), and its bytes from the client's budget (a wait, or 429).
    The place is the caller's to give back once this returned."""
    try:
        s.service.admit(client)
    except oa.ApiError as exc:
        await refused(exc, client, s)
    try:
        await s.budget.take(client, body_bytes(http, s.limits))
    except BaseException as exc:                # refused, or the client went away while it waited
        s.service.release(client)
        if isinstance(exc, oa.ApiError):
            await refused(exc, client, s)
        raise


async def generate(http: HttpRequest, chat: bool):
    s = shared(http)
    service, limits = s.service, s.limits
    client = client_of(http, s)
    await take_place(http, client, s)           # every cost after this is bounded
    try:
        raw = await read_body_within(http, limits)
        if len(raw) > PARSE_INLINE_BYTES:       # a long body's JSON is read off the event loop too
            body = await s.tokenizing.run(client, oa.read_json, raw, limits.max_body_bytes)
        else:
            body = oa.read_json(raw, limits.max_body_bytes)
        oa.check_model(body, s.model_name)
        prompt = oa.chat_messages(body, s.max_chars) if chat else oa.completion_prompt(body, s.vocab, s.max_chars)
        if isinstance(prompt, list) and not chat:
            prompt_ids = prompt
        else:
            encode = oa.encode_chat if chat else oa.encode_text
            prompt_ids = await s.tokenizing.run(client, encode, prompt, s.tokenizer)
        sampling = oa.parse_sampling(body, len(prompt_ids), s.max_model_len, chat)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        req = Request(rid, prompt_ids, sampling.max_tokens, tenant=sampling.tenant, priority=sampling.priority,
                      ignore_eos=sampling.ignore_eos or sampling.min_tokens > 0, temperature=sampling.temperature,
                      top_p=sampling.top_p, seed=sampling.seed)
        stream = service.submit(req, sampling, client)
    except BaseException:
        service.release(client)
        raise
    text = TextStream(s.tokenizer, sampling.stop)
    if sampling.stream:
        return StreamingResponse(sse_events(s, stream, text, chat), media_type="text/event-stream")
    try:
        return await or_gone(whole_answer(s, stream, text, chat), http)
    except ClientGone:
        service.abort(stream)
        return Response(status_code=499)


async def updates_from(s: Shared, stream: Stream, text: TextStream):
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
            s.service.abort(stream, "stop")
            yield piece, "stop"
            return
        yield piece, update.finish_reason if update.done else None
        if update.done:
            return
        update = await stream.updates.get()


async def whole_answer(s: Shared, stream: Stream, text: TextStream, chat: bool) -> dict:
    pieces, reason = [], None
    async for piece, reason in updates_from(s, stream, text):
        pieces.append(piece)
    used = oa.usage(stream.req.prompt_tokens, stream.seen)
    return json_response(oa.response(chat, stream.req.id, s.model_name, "".join(pieces), reason, used))


async def sse_events(s: Shared, stream: Stream, text: TextStream, chat: bool):
    """The answer as server-sent events. The headers are already sent, so a request the
    engine turns away late (a rare race with a full queue) ends with an error event, as
    does any failure on the way; a stop of the server ends it with finish reason "abort"."""
    rid, created, model = stream.req.id, int(time.time()), s.model_name
    finished = False                      # has the engine finished this request?
    s.open_streams.add(stream)
    try:
        if chat:
            yield oa.sse(oa.chunk(chat, rid, model, created, "", role=True))
        async for piece, reason in updates_from(s, stream, text):
            if piece or reason:
                yield oa.sse(oa.chunk(chat, rid, model, created, piece, reason))
        finished = True
        if stream.sampling.include_usage:
            used = oa.usage(stream.req.prompt_tokens, stream.seen)
            yield oa.sse(oa.chunk(chat, rid, model, created, None, used=used))
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
        s.open_streams.discard(stream)
        if not finished:                  # the client went away mid-stream
            s.service.abort(stream)


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
