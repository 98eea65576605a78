"""The instructor's token: who may change the policy, the background load, or reset the engine,
and whom no per-client limit holds. Sent as `Authorization: Bearer TOKEN` (or X-Instructor-Token)."""
from __future__ import annotations

import secrets

from fastapi import Request as HttpRequest

from . import openai_schema as oa


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
