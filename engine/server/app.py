"""The server's app: its routers, its start and stop, and OpenAI's shape for every error.

    routes_openai.py   GET /health, /v1/models; POST /v1/completions, /v1/chat/completions
    routes_metrics.py  GET /metrics
    routes_lab.py      the lab's endpoints under /lab/ (steps, requests, policy, load, reset, instructor)

What the routes share (the engine service, the model's limits, the per-client limits, the lab's feed)
is made once here and kept on the app (shared.py). Every error, 404, 422 and 500 included, has
OpenAI's shape, {"error": {"message", "type", "param", "code"}}; a traceback goes to the server's
log, never to the client. Bodies must be sent as application/json: a web page can post text/plain
to any address without asking, but not JSON. /docs and /openapi.json exist only when asked for
(`docs=True`).
"""
from __future__ import annotations

import asyncio
import functools
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import openai_schema as oa
from . import routes_lab, routes_metrics, routes_openai
from .limits import ServerLimits
from .service import EngineService
from .shared import Shared, error_response, json_response

DRAIN_S = 3.0              # at a stop, how long open streams get to send their last chunk and [DONE]


def create_app(service: EngineService, model_name: str, instructor_token: str,
               limits: ServerLimits = ServerLimits(), docs: bool = False) -> FastAPI:
    s = Shared(service, model_name, instructor_token, limits)

    @asynccontextmanager
    async def lifespan(_):
        service.start()
        poll = asyncio.create_task(s.feed.poll())
        yield
        s.feed.close()
        poll.cancel()
        service.stop()
        s.tokenizing.close()

    app = FastAPI(title="Batching Lab engine", lifespan=lifespan, docs_url="/docs" if docs else None,
                  redoc_url=None, openapi_url="/openapi.json" if docs else None)
    app.state.shared = s
    app.state.stop_streams = functools.partial(stop_streams, s)
    add_error_handlers(app)
    for routes in (routes_openai, routes_metrics, routes_lab):
        app.include_router(routes.router)
    return app


async def stop_streams(s: Shared) -> None:
    """A stop begins: every stream ends with its finish reason and [DONE], and every /lab/steps
    follower ends, before uvicorn closes the connections."""
    s.service.close()
    s.feed.close()
    deadline = time.monotonic() + DRAIN_S
    while s.open_streams and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def add_error_handlers(app: FastAPI) -> None:
    """OpenAI's error shape for every error, ours or the framework's."""
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
