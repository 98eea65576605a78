"""The lab's own endpoints, read from the feed, which reads the engine once for everyone.

    GET  /lab/steps       live step records with their members, as server-sent events
                          (?since=N replays from step N; ?stream=false answers once, as JSON)
    GET  /lab/requests    recent request rows, in the requests.csv columns (?limit=N, 0-5000)
    GET  /lab/policy      the live scheduler policy
    PUT  /lab/policy      change some knobs; needs the instructor token (Authorization: Bearer ...)
    GET  /lab/instructor  200 with the instructor token, 401 without, 403 with a wrong one
    GET  /lab/load        the background load: running or not, its workload, requests sent
    PUT  /lab/load        start it ({"running": true, workload knobs...}) or stop it; instructor
    POST /lab/reset       abort everything in flight and start a fresh engine; instructor
"""
from __future__ import annotations

from fastapi import APIRouter, Request as HttpRequest
from fastapi.responses import StreamingResponse

from . import openai_schema as oa
from .background import spec_from
from .bodies import read_json_body
from .instructor import check_instructor
from .lab_feed import MAX_REQUEST_ROWS
from .shared import json_response, shared

router = APIRouter(prefix="/lab")


@router.get("/steps")
async def lab_steps(http: HttpRequest, since: int | None = None, stream: bool = True):
    if since is not None and since < 0:
        raise oa.ApiError(400, f"since must be a step number, 0 or more (got {since})", "since")
    feed = shared(http).feed
    if not stream:
        return json_response(feed.steps_once(since))
    return StreamingResponse(feed.follow(since), media_type="text/event-stream")


@router.get("/requests")
async def lab_requests(http: HttpRequest, limit: int = 200):
    if not 0 <= limit <= MAX_REQUEST_ROWS:
        raise oa.ApiError(400, f"limit must be 0 to {MAX_REQUEST_ROWS:,} rows (got {limit:,})", "limit")
    return json_response(shared(http).feed.requests(limit))


@router.get("/policy")
async def get_policy(http: HttpRequest):
    return shared(http).service.engine.policy.to_dict()


@router.put("/policy")
async def put_policy(http: HttpRequest):
    changes = await instructor_body(http, "changing the policy")
    service = shared(http).service
    try:
        policy = service.engine.policy.changed(**changes)
    except (ValueError, TypeError) as exc:
        raise oa.ApiError(400, str(exc)) from None
    service.set_policy(policy)
    return policy.to_dict()


@router.get("/load")
async def get_load(http: HttpRequest):
    return shared(http).service.background.state()


@router.put("/load")
async def put_load(http: HttpRequest):
    body = await instructor_body(http, "changing the background load")
    running = body.pop("running", True)
    if not isinstance(running, bool):
        raise oa.ApiError(400, f"running must be true or false (got {oa.short(running, 40)})", "running")
    try:
        spec = spec_from(body) if running else None
    except (ValueError, TypeError) as exc:
        raise oa.ApiError(400, str(exc)) from None
    shared(http).service.set_background(spec)
    return {"running": running}


@router.get("/instructor")
async def instructor(http: HttpRequest):
    """Whether the caller holds the instructor token (the app's teacher view asks before it shows)."""
    check_instructor(http, shared(http).instructor_token, "the instructor's view")
    return {"instructor": True}


@router.post("/reset")
async def reset(http: HttpRequest):
    s = shared(http)
    check_instructor(http, s.instructor_token, "a reset")
    s.service.reset()
    return {"run": s.service.run + 1}


async def instructor_body(http: HttpRequest, what: str) -> dict:
    s = shared(http)
    check_instructor(http, s.instructor_token, what)
    return await read_json_body(http, s.limits)
