"""OpenAI's request and response shapes, for /v1/completions and /v1/chat/completions.

A request body becomes a `Sampling` (what to generate, and how) and a prompt: text (or chat
messages) checked here, to be tokenized off the event loop, or token ids. Every check names the
field, the value it got and what is allowed, and raises ApiError, which the app turns into
OpenAI's error JSON: {"error": {"message", "type", "param", "code"}}. The text checks are
engine.validation's, the same as the CLI's. Fields this engine cannot honour (n > 1, logprobs,
tools...) are refused, never ignored.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

from ..core.knobs import short
from ..core.validation import (MIN_TEMPERATURE, PRIORITY_RANGE, SEED_MAX, check_unicode, flag, integer, number,
                          parse_json, stop_texts, tenant_text)

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 405: "invalid_request_error", 408: "timeout_error",
               409: "conflict_error", 413: "invalid_request_error", 415: "invalid_request_error",
               429: "rate_limit_error", 431: "invalid_request_error", 500: "server_error",
               503: "service_unavailable_error"}

# Fields we refuse unless they hold their "off" value (what a client sends by default).
UNSUPPORTED = {"n": (None, 1), "best_of": (None, 1), "logprobs": (None, False),
               "top_logprobs": (None, 0), "echo": (None, False), "suffix": (None, ""),
               "tools": (None, []), "tool_choice": (None, "none"), "functions": (None, []),
               "function_call": (None, "none"), "logit_bias": (None, {}),
               "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
               "response_format": (None, {"type": "text"}), "prompt_logprobs": (None, 0),
               "audio": (None,), "modalities": (None, ["text"]), "prediction": (None,)}

MAX_TEMPERATURE = 2.0      # OpenAI's range
MAX_STOP_STRINGS = 16


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, retry_after_s: int | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.retry_after_s = status, message, param, retry_after_s

    def body(self) -> dict:
        return error_body(self.status, self.message, self.param)


def error_body(status: int, message: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "server_error"),
                      "param": param, "code": status}}


@dataclass(slots=True)
class Sampling:
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0
    priority: int = 0
    tenant: str = "default"
    stream: bool = False
    include_usage: bool = False


# ----------------------------------------------------------------------------- body and fields


def read_json(raw: bytes, limit_bytes: int) -> dict:
    if len(raw) > limit_bytes:
        raise ApiError(413, f"request body is over {limit_bytes:,} bytes, the limit")
    try:
        body = parse_json(raw, "request body", limit_bytes)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    if not isinstance(body, dict):
        raise ApiError(400, f"request body must be a JSON object, got {type(body).__name__}")
    return body


def refuse_unsupported(body: dict) -> None:
    for name, off_values in UNSUPPORTED.items():
        if name in body and body[name] not in off_values:
            raise ApiError(400, f"{name}={body[name]!r} is not supported by this server", name)


def checked(check, body: dict, name: str, *args):
    """Run one of engine.validation's field checks; its ValueError (naming the field, the value
    and the allowed range) becomes a 400 about that field."""
    try:
        return check(body, name, *args)
    except ValueError as exc:
        raise ApiError(400, str(exc), name) from None


def temperature_field(body: dict) -> float:
    t = checked(number, body, "temperature", 0.0, 0.0, MAX_TEMPERATURE)
    if 0 < t < MIN_TEMPERATURE:
        raise ApiError(400, f"temperature is too small to sample with (got {t:g}; allowed 0 for greedy, "
                            f"or {MIN_TEMPERATURE:g}–{MAX_TEMPERATURE:g})", "temperature")
    return t


def top_p_field(body: dict) -> float:
    top_p = checked(number, body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0:
        raise ApiError(400, "top_p must be above 0 (got 0; allowed above 0 up to 1)", "top_p")
    return top_p


def stop_field(body: dict) -> tuple[str, ...]:
    return checked(stop_texts, body, "stop", MAX_STOP_STRINGS)


def tenant_field(body: dict) -> str:
    return checked(tenant_text, body, "user", "default")


def check_model(body: dict, served_name: str) -> None:
    model = body.get("model", served_name)
    if model != served_name:
        raise ApiError(404, f"The model {short(model)} does not exist; this server serves `{served_name}`", "model")


# ----------------------------------------------------------------------------- the two endpoints


def completion_prompt(body: dict, vocab: int, max_chars: int) -> str | list[int]:
    """/v1/completions: `prompt` is a string, a list holding one string, or a list of token ids.
    A string comes back checked (valid Unicode, not longer than a prompt that fits can be), to be
    tokenized with `encode_text` off the event loop."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        checked_text("prompt", prompt, max_chars)
        return prompt
    # whole-list checks (type, then range): a per-token Python test was a server's main cost
    # per request when a burst of long prompts arrived at once
    if isinstance(prompt, list) and prompt and set(map(type, prompt)) == {int} \
            and min(prompt) >= 0 and max(prompt) < vocab:
        return list(prompt)
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], (str, list)):
        i, bad = next((i, t) for i, t in enumerate(prompt)
                      if type(t) is not int or not 0 <= t < vocab)
        raise ApiError(400, f"prompt[{i}] is {short(bad, 40)}; token ids are integers from 0 to {vocab - 1:,}", "prompt")
    raise ApiError(400, "prompt must be a non-empty string or a list of token ids below "
                        f"{vocab:,} (one prompt per request)", "prompt")


def chat_messages(body: dict, max_chars: int) -> list[dict]:
    """/v1/chat/completions: the messages as plain {role, content} strings, checked, to be
    tokenized through the model's chat template with `encode_chat` off the event loop."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content} objects", "messages")
    plain = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "developer"):
            raise ApiError(400, f"messages[{i}] needs a role of system, user, assistant or developer "
                                f"(got {short(m, 80)})", "messages")
        role = "system" if m["role"] == "developer" else m["role"]
        plain.append({"role": role, "content": message_text(m.get("content"), i)})
    checked_text("messages", "".join(m["content"] for m in plain), max_chars)
    return plain


def checked_text(name: str, text: str, max_chars: int) -> None:
    """No longer than a prompt that fits can be (counted first: it costs nothing), and valid
    Unicode (engine.validation's rule)."""
    if len(text) > max_chars:
        raise ApiError(400, f"{name} is {len(text):,} characters: more than the {max_chars:,} a prompt that "
                            "fits in this model's context can have", name)
    try:
        check_unicode(name, text)
    except ValueError as exc:
        raise ApiError(400, str(exc), name) from None


def encode_text(prompt: str | list[int], tokenizer) -> list[int]:
    return tokenizer.encode(prompt) if isinstance(prompt, str) else prompt


def encode_chat(messages: list[dict], tokenizer) -> list[int]:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


def message_text(content, i: int) -> str:
    """Chat content: a string, or a list of {"type": "text", "text": ...} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        parts = []
        for p in content:
            if p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise ApiError(400, f"messages[{i}].content: only text parts are supported "
                                    f"(got type {short(p.get('type'), 40)})", "messages")
            parts.append(p["text"])
        return "".join(parts)
    raise ApiError(400, f"messages[{i}].content must be a string or a list of text parts", "messages")


def parse_sampling(body: dict, prompt_tokens: int, max_model_len: int, chat: bool) -> Sampling:
    """The generation settings of either endpoint, checked against the model's context."""
    refuse_unsupported(body)
    body = {k: v for k, v in body.items() if v is not None}     # null means "the default"
    if prompt_tokens >= max_model_len:
        raise ApiError(400, f"prompt is {prompt_tokens:,} tokens; this model takes {max_model_len:,}",
                       "messages" if chat else "prompt")
    room = max_model_len - prompt_tokens
    name = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
    value = body.get(name)
    if isinstance(value, int) and not isinstance(value, bool) and value > room:
        raise ApiError(400, f"prompt is {prompt_tokens:,} tokens and {name} is {value:,}: "
                            f"{prompt_tokens + value:,} in all; this model takes {max_model_len:,}", name)
    default = room if chat else min(16, room)     # OpenAI's defaults: up to the context / 16
    max_tokens = checked(integer, body, name, default, 1, room, "tokens")
    options = body.get("stream_options", {})
    if not isinstance(options, dict):
        raise ApiError(400, f"stream_options must be an object (got {options!r:.60})", "stream_options")
    seed = body.get("seed")
    return Sampling(max_tokens=max_tokens,
                    temperature=temperature_field(body), top_p=top_p_field(body),
                    seed=None if seed is None else checked(integer, body, "seed", 0, 0, SEED_MAX),
                    stop=stop_field(body),
                    ignore_eos=checked(flag, body, "ignore_eos", False),
                    min_tokens=checked(integer, body, "min_tokens", 0, 0, max_tokens, "tokens"),
                    priority=checked(integer, body, "priority", 0, *PRIORITY_RANGE),
                    tenant=tenant_field(body),
                    stream=checked(flag, body, "stream", False),
                    include_usage=checked(flag, options, "include_usage", False))


# ----------------------------------------------------------------------------- response shapes


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def response(chat: bool, rid: str, model: str, text: str, finish_reason: str, used: dict) -> dict:
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish_reason}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return {"id": rid, "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [choice], "usage": used}


def chunk(chat: bool, rid: str, model: str, created: int, text: str | None,
          finish_reason: str | None = None, role: bool = False, used: dict | None = None) -> dict:
    """One streamed chunk; `text=None` with `used` makes the final usage-only chunk."""
    if text is None:
        choices = []
    elif chat:
        delta = {"role": "assistant", "content": text} if role else ({"content": text} if text else {})
        choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    else:
        choices = [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}]
    return {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created, "model": model, "choices": choices, "usage": used}


def sse(data: dict | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def json_bytes(data) -> bytes:
    """JSON for a response: UTF-8, or, for text UTF-8 cannot hold, with every non-ASCII
    character escaped (valid JSON either way: one odd string never turns a reply into a 500)."""
    try:
        return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(data, allow_nan=False, separators=(",", ":")).encode()
