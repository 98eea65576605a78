"""What every route of one server shares: the engine service, the model's limits, the per-client
limits and the lab's feed, made once by create_app and kept on the app (`app.state.shared`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request as HttpRequest
from fastapi.responses import Response

from ..core.validation import max_prompt_chars
from . import openai_schema as oa
from .lab_feed import LabFeed
from .limits import ByteBudget, RefusalPacing, ServerLimits, Tokenizing
from .service import EngineService


@dataclass
class Shared:
    service: EngineService
    model_name: str
    instructor_token: str
    limits: ServerLimits
    tokenizer: object = field(init=False)         # the same model after a reset
    max_model_len: int = field(init=False)
    vocab: int = field(init=False)
    max_chars: int = field(init=False)
    tokenizing: Tokenizing = field(init=False)
    budget: ByteBudget = field(init=False)
    pacing: RefusalPacing = field(init=False)
    feed: LabFeed = field(init=False)
    open_streams: set = field(init=False, default_factory=set)   # answers being streamed now

    def __post_init__(self):
        engine, limits = self.service.engine, self.limits
        self.tokenizer = engine.tokenizer
        self.max_model_len = engine.scheduler.max_model_len
        self.vocab = len(self.tokenizer)
        self.max_chars = max_prompt_chars(self.tokenizer, self.max_model_len)
        self.tokenizing = Tokenizing()
        self.budget = ByteBudget(limits.bytes_per_s_per_client, 2 * limits.max_body_bytes, limits.max_budget_wait_s)
        self.pacing = RefusalPacing(limits)
        self.feed = LabFeed(self.service, engine.keep_steps or 20_000)


def shared(http: HttpRequest) -> Shared:
    return http.app.state.shared


def json_response(data, status: int = 200, headers: dict | None = None) -> Response:
    return Response(oa.json_bytes(data) if not isinstance(data, bytes) else data, status,
                    headers=headers, media_type="application/json")


def error_response(exc: oa.ApiError) -> Response:
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else None
    return json_response(exc.body(), exc.status, headers)
