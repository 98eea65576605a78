"""Validation: every request and setting is checked once, before it reaches the engine.

A request arrives as a dict: a line of a workload file today, an HTTP body tomorrow.
`request_from_dict` turns it into a Request or raises a ValueError that names the field, the
value and what is allowed. Nothing is coerced: the string "4", the float 4.7 and `true` are not
the integer 4, and a null prompt is not the text "None". Only finite numbers pass (json.loads
reads NaN and Infinity, so they do reach us). What is allowed depends on the model: token ids
below its vocabulary size, max_new_tokens within its context; `Limits` carries those.

Settings are checked by their knobs (engine.knobs). This file adds the one check a knob cannot
make on its own: whether a KV pool fits in this machine's memory.
"""
from __future__ import annotations

import json
import os
import unicodedata
from dataclasses import dataclass

from .knobs import check_value, range_text, short
from .request import Request

HORIZON_S = 24 * 3600.0    # an arrival more than a day after the start is a typo, or a run that never ends
MIN_TEMPERATURE = 0.01     # 0 is greedy; a temperature in (0, 0.01) is refused (logits / 1e-300 overflow),
MAX_TEMPERATURE = 100.0    # not quietly made greedy
SEED_MAX = 2**63 - 1
PRIORITY_RANGE = (-2**31, 2**31 - 1)
ID_MAX_CHARS = 128
TENANT_MAX_CHARS = 64      # a tenant (the server's `user`) is a name on a board, not a document
STOP_MAX_CHARS = 256       # a stop string's length is text the server holds back from every stream
MAX_REQUEST_BYTES = 1 << 20    # one request as JSON: an HTTP body, a line of a workload file
KV_MEMORY_SHARE = 0.8      # the KV pool may take at most this share of the memory available now

REQUEST_FIELDS = ("id", "prompt", "prompt_token_ids", "max_new_tokens", "arrival_s", "tenant",
                  "priority", "ignore_eos", "temperature", "top_p", "seed")


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Keys and values of one token across every layer."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes


# SmolLM2-135M in fp32 (30 layers, 3 KV heads of 64): what the cost model stands for.
SMOLLM2_VOCAB = 49152
SMOLLM2_KV_BYTES_PER_TOKEN = kv_bytes_per_token(30, 3, 64, 4)


@dataclass(frozen=True, slots=True)
class Limits:
    """What a request may ask of this engine."""
    vocab_size: int = SMOLLM2_VOCAB     # token ids run from 0 to vocab_size - 1
    max_model_len: int = 2048           # the model's context: prompt + output
    horizon_s: float = HORIZON_S        # the latest arrival time, in seconds from the start
    max_prompt_chars: int | None = None  # a longer text prompt cannot fit (max_prompt_chars); None: no check


# ----------------------------------------------------------------------------- requests


def request_from_dict(d, limits: Limits = Limits(), tokenizer=None, default_id: str = "") -> Request:
    """One request as a dict -> Request; ValueError naming the field, the value and what is allowed."""
    if not isinstance(d, dict):
        raise ValueError(f"a request must be a JSON object with fields {', '.join(REQUEST_FIELDS)} (got {short(d)})")
    unknown = [k for k in d if k not in REQUEST_FIELDS]
    if unknown:
        raise ValueError(f"unknown field {short(unknown[0])} (allowed: {', '.join(REQUEST_FIELDS)})")
    temperature = number(d, "temperature", 0.0, 0.0, MAX_TEMPERATURE)
    if 0 < temperature < MIN_TEMPERATURE:
        raise ValueError(f"temperature is too small to sample with (got {short(temperature)}; allowed 0 "
                         f"for greedy, or {MIN_TEMPERATURE:g}–{MAX_TEMPERATURE:g})")
    top_p = number(d, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0:
        raise ValueError("top_p must be above 0 (got 0; allowed above 0 up to 1)")
    seed = d.get("seed")
    if seed is not None:
        check_value("seed", seed, "int", 0, SEED_MAX)
    return Request(
        id=request_id(d, default_id), prompt_token_ids=prompt_ids(d, limits, tokenizer),
        max_new_tokens=integer(d, "max_new_tokens", 32, 1, limits.max_model_len, "tokens"),
        arrival_s=number(d, "arrival_s", 0.0, 0.0, limits.horizon_s, f"s (a {limits.horizon_s / 3600:g} h horizon)"),
        tenant=tenant_text(d, "tenant"), priority=integer(d, "priority", 0, *PRIORITY_RANGE),
        ignore_eos=flag(d, "ignore_eos", True), temperature=temperature, top_p=top_p, seed=seed,
        prompt=d.get("prompt"))


def request_id(d: dict, default: str) -> str:
    """The request's id: 1–128 printable characters without spaces (steps.csv writes "id:phase:n" lists)."""
    if "id" not in d:
        return default
    rid = text(d, "id", default)
    if len(rid) > ID_MAX_CHARS or any(c.isspace() or not c.isprintable() for c in rid):
        raise ValueError(f"id must be 1–{ID_MAX_CHARS} printable characters without spaces (got {short(rid)})")
    return rid


def id_of(d, default: str) -> str:
    """The id to file a refused request under: its own if it is a usable one, else `default`."""
    try:
        return request_id(d, default) if isinstance(d, dict) else default
    except ValueError:
        return default


def prompt_ids(d: dict, limits: Limits, tokenizer) -> list[int]:
    """The prompt's token ids: given as prompt_token_ids, or a text prompt under the chat template."""
    if ("prompt" in d) == ("prompt_token_ids" in d):
        raise ValueError("give exactly one of 'prompt' (text) or 'prompt_token_ids' (a list of token ids)")
    if "prompt" in d:
        prompt = text(d, "prompt", "", allow_empty=True)
        check_prompt_chars("prompt", len(prompt), limits)
        if tokenizer is None:
            raise ValueError("a text prompt needs a tokenizer (cost-model runs take prompt_token_ids)")
        chat = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                             add_generation_prompt=True, tokenize=False)
        return tokenizer.encode(chat, add_special_tokens=False)
    ids = d["prompt_token_ids"]
    if not isinstance(ids, list) or not ids:
        raise ValueError(f"prompt_token_ids must be a non-empty list of token ids (got {short(ids)})")
    for i, t in enumerate(ids):
        check_value(f"prompt_token_ids[{i}]", t, "int", 0, limits.vocab_size - 1,
                    f"(the vocabulary has {limits.vocab_size:,} tokens)")
    return ids


def integer(d: dict, name: str, default: int, lo: int, hi: int, unit: str = "") -> int:
    value = d.get(name, default)
    check_value(name, value, "int", lo, hi, unit)
    return value


def number(d: dict, name: str, default: float, lo: float, hi: float, unit: str = "") -> float:
    value = d.get(name, default)
    check_value(name, value, "float", lo, hi, unit)
    return float(value)


def flag(d: dict, name: str, default: bool) -> bool:
    value = d.get(name, default)
    check_value(name, value, "bool")
    return value


def text(d: dict, name: str, default: str, allow_empty: bool = False) -> str:
    value = d.get(name, default)
    if not isinstance(value, str) or not (value or allow_empty):
        raise ValueError(f"{name} must be {'a' if allow_empty else 'a non-empty'} string (got {short(value)})")
    check_unicode(name, value)
    return value


# ----------------------------------------------------------------------------- text


def check_unicode(name: str, value: str) -> None:
    """Refuse a string that is not valid Unicode: it holds a lone surrogate (U+D800-U+DFFF)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not valid Unicode text: a lone surrogate U+{ord(value[exc.start]):04X} "
                         f"at character {exc.start:,} (allowed: any Unicode text; a JSON \\u escape must "
                         "give a whole character)") from None


def tenant_text(d: dict, name: str, default: str = "default") -> str:
    """A tenant name: 1-64 characters of valid Unicode without control characters."""
    value = text(d, name, default)
    bad = next((i for i, c in enumerate(value) if unicodedata.category(c) == "Cc"), None)
    if len(value) > TENANT_MAX_CHARS or bad is not None:
        why = f"{len(value):,} characters" if bad is None else f"a control character U+{ord(value[bad]):04X} at character {bad}"
        raise ValueError(f"{name} must be 1–{TENANT_MAX_CHARS} characters without control characters "
                         f"(got {why}: {short(value)})")
    return value


def stop_texts(d: dict, name: str = "stop", most: int = 16) -> tuple[str, ...]:
    """Stop strings: one string, or a list of up to `most`, each 1-STOP_MAX_CHARS characters of valid Unicode."""
    stop = d.get(name)
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not 0 < len(stops) <= most or \
            not all(isinstance(s, str) and 0 < len(s) <= STOP_MAX_CHARS for s in stops):
        raise ValueError(f"{name} must be a string of 1–{STOP_MAX_CHARS} characters or a list of up to "
                         f"{most} of them (got {short(stop)})")
    for i, s in enumerate(stops):
        check_unicode(f"{name}[{i}]" if isinstance(stop, list) else name, s)
    return tuple(stops)


def max_prompt_chars(tokenizer, max_model_len: int) -> int:
    """The most characters a text prompt can have and still fit in the context: every token
    spells at most as many characters as the longest string in the vocabulary (byte-level tokens
    spell one character per byte, so this bounds them too), so a longer text needs more tokens
    than the context holds whatever it says. Checked before tokenizing, whose cost grows with
    the text."""
    longest = max(map(len, tokenizer.get_vocab()), default=1)
    return max_model_len * max(1, longest)


def check_prompt_chars(name: str, chars: int, limits: Limits) -> None:
    if limits.max_prompt_chars is not None and chars > limits.max_prompt_chars:
        raise ValueError(f"{name} is {chars:,} characters: more than the {limits.max_prompt_chars:,} a prompt "
                         f"that fits in this model's {limits.max_model_len:,}-token context can have")


def parse_json(raw: bytes, what: str, limit_bytes: int = MAX_REQUEST_BYTES):
    """One request's JSON; ValueError for a body over the limit, bytes that are not UTF-8, text
    that is not JSON, a name given twice, and nesting too deep to parse (RecursionError)."""
    if len(raw) > limit_bytes:
        raise ValueError(f"{what} is over {limit_bytes:,} bytes, the limit")
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=unique_keys)
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply to read (allowed: a JSON object of fields)") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} is not valid utf-8: byte {raw[exc.start]:#04x} at {exc.start:,}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object that names a field twice is refused (json.loads would keep the last silently)."""
    d = {}
    for key, value in pairs:
        if key in d:
            raise ValueError(f"field {short(key)} appears twice")
        d[key] = value
    return d


# ----------------------------------------------------------------------------- memory


def available_memory_bytes() -> int:
    """Memory this machine could give now (Linux MemAvailable; else the free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_kv_fits(field: str, tokens: int, bytes_per_token: int, available_bytes: int, what: str) -> None:
    """Refuse a KV pool of `tokens` that would not fit in KV_MEMORY_SHARE of `available_bytes`,
    saying how many tokens do fit. `what` says whose KV it is ("smollm2 in float32")."""
    fit = int(available_bytes * KV_MEMORY_SHARE) // bytes_per_token
    if tokens > fit:
        gb = 1e9
        raise ValueError(
            f"{field} {tokens:,} needs {tokens * bytes_per_token / gb:.1f} GB of KV memory "
            f"({bytes_per_token:,} bytes a token for {what}), but this machine has "
            f"{available_bytes / gb:.1f} GB available: at most {fit:,} tokens fit "
            f"(allowed {range_text('int', 16, fit, 'tokens')}, {KV_MEMORY_SHARE:.0%} of the available memory)")
