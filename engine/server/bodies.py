"""Reading a request's body within the server's limits: its declared type and size from the
headers alone (415, 413), then its bytes within the size limit and the body timeout (413, 408)."""
from __future__ import annotations

import asyncio

from fastapi import Request as HttpRequest

from . import openai_schema as oa
from .limits import ServerLimits


def body_bytes(http: HttpRequest, limits: ServerLimits) -> int:
    """The bytes a body will take, from its headers alone: sent as application/json (415) and
    declared within the size limit (413); a body of no declared length counts as the limit."""
    kind = http.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise oa.ApiError(415, f"the body must be sent as application/json (got {oa.short(kind or 'no content type', 60)})")
    declared = http.headers.get("content-length", "")
    if not declared.isdigit():
        return limits.max_body_bytes
    if int(declared) > limits.max_body_bytes:
        raise oa.ApiError(413, f"request body is {int(declared):,} bytes: over {limits.max_body_bytes:,}, the limit")
    return int(declared)


async def read_body_within(http: HttpRequest, limits: ServerLimits) -> bytes:
    """The body's bytes, read within the size limit (413) and within the body timeout (408)."""
    try:
        raw = await asyncio.wait_for(read_body(http, limits.max_body_bytes), limits.body_timeout_s)
    except asyncio.TimeoutError:
        raise oa.ApiError(408, f"the request body did not arrive within {limits.body_timeout_s:g} s") from None
    if len(raw) > limits.max_body_bytes:
        raise oa.ApiError(413, f"request body is over {limits.max_body_bytes:,} bytes, the limit")
    return raw


async def read_json_body(http: HttpRequest, limits: ServerLimits) -> dict:
    """The body as a JSON object: its headers checked (body_bytes), then read (read_body_within)."""
    body_bytes(http, limits)
    return oa.read_json(await read_body_within(http, limits), limits.max_body_bytes)


async def read_body(http: HttpRequest, limit_bytes: int) -> bytes:
    """The body, read no further than one byte past the limit (read_json then names the limit)."""
    raw = bytearray()
    async for part in http.stream():
        raw += part
        if len(raw) > limit_bytes:
            break
    return bytes(raw)
