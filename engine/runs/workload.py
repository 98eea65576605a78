"""Workloads: when requests arrive, how long their prompts and outputs are, who sends them.

The requests themselves are drawn by engine.arrivals from one seeded random generator, so a
seed reproduces a run. Prompts are real questions and tasks from assets/prompts.jsonl with the
model's chat template applied, cut or extended to the drawn length so a "256-token prompt" is
exactly that.
"""
from __future__ import annotations

import json
import math
import os
import random
from dataclasses import asdict, dataclass, replace

from ..core.knobs import check_all, knob, knobs_of
from ..core.request import Request
from ..core.validation import HORIZON_S, MAX_REQUEST_BYTES, Limits, id_of, parse_json, request_from_dict


PROMPTS_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "assets", "prompts.jsonl")
LENGTH_KINDS = ("fixed", "uniform", "longtail", "short_plus_long")
# The two length ranges of a WorkloadSpec, each a pair of fields: "from" and "to".
LENGTH_RANGES = {"prompt": ("prompt_lo", "prompt_hi"), "output": ("output_lo", "output_hi")}
MIN_RATE = 1 / HORIZON_S
SHORT_SPAN = 2          # short_plus_long: the short requests are 'from' to SHORT_SPAN times that


@dataclass(slots=True)
class LengthDist:
    kind: str = "uniform"   # fixed | uniform | longtail | short_plus_long
    lo: int = 16            # fixed: the length; uniform: the range; longtail: most are near lo
    hi: int = 128           # longtail: rare ones reach hi; short_plus_long: the one long request

    def validate(self, what: str) -> None:
        if self.kind not in LENGTH_KINDS:
            raise ValueError(f"unknown {what} length distribution {self.kind!r}: "
                             f"choose one of {', '.join(LENGTH_KINDS)}")
        if self.lo < 1 or self.hi < self.lo:
            raise ValueError(f"{what} lengths need 1 <= lo <= hi (got lo={self.lo}, hi={self.hi})")

    def draw(self, rng: random.Random, index: int) -> int:
        """The length of the `index`-th request of a workload."""
        lo, hi = self.lo, self.hi
        if self.kind == "fixed":
            return lo
        if self.kind == "uniform":
            return rng.randint(lo, hi)
        if self.kind == "longtail":
            # log-normal around lo: most requests short, a few reach towards hi
            spread = math.log(max(hi / lo, 1.0)) / 2.5
            return min(hi, max(lo, round(lo * math.exp(abs(rng.gauss(0, 1)) * spread))))
        # short_plus_long: the first request is long (hi), the many others short (lo..SHORT_SPAN*lo)
        return hi if index == 0 else min(hi, rng.randint(lo, SHORT_SPAN * lo))

    def as_fields(self, prefix: str) -> dict:
        """This distribution as WorkloadSpec fields: as_fields("prompt") -> prompt_kind, prompt_lo, prompt_hi."""
        return {f"{prefix}_kind": self.kind, f"{prefix}_lo": self.lo, f"{prefix}_hi": self.hi}

    def sample(self, rng: random.Random, n: int) -> list[int]:
        return [self.draw(rng, i) for i in range(n)]


LENGTHS_HELP = ("fixed: every request has the 'from' length. uniform: anywhere in the range. "
                "longtail: most near 'from', a few reach 'to'. short_plus_long: the very first "
                "request is long ('to'), all the others short ('from' to twice that).")


@dataclass(slots=True)
class WorkloadSpec:
    continuous: bool = knob(
        False, "Continuous traffic",
        "Requests keep arriving at the arrival rate until the run is stopped, and the number of "
        "requests is ignored. At rate 0 the workload is one batch of that many requests either way.")
    num_requests: int = knob(
        32, "Requests",
        "How many requests the workload holds in total (without continuous traffic). Raising it "
        "during a run sends more.", lo=0, hi=1_000_000, slider_hi=500)
    rate: float = knob(
        4.0, "Arrival rate (requests/s)",
        "How many requests arrive per second on average. 0 means the whole workload arrives at "
        "once at the start, like an offline batch job.", lo=0.0, hi=10_000.0, step=0.5,
        unit="req/s", slider_hi=20.0)
    burstiness: float = knob(
        1.0, "Burstiness",
        "How clumped arrivals are. 1 = random (Poisson) arrivals; above 1 = bursts with quiet "
        "gaps between them; below 1 = evenly spaced, like a metronome.", lo=0.01, hi=10.0,
        step=0.25, slider_hi=4.0)
    prompt_kind: str = knob(
        "uniform", "Prompt lengths", "How prompt lengths are drawn. " + LENGTHS_HELP,
        choices=LENGTH_KINDS, flag="--prompt-dist")
    prompt_lo: int = knob(
        32, "Prompt tokens (from)", "Shortest prompt, in tokens (the chat template alone is about "
        "30 tokens, so shorter prompts come out a little longer).", lo=1, hi=32768, step=8,
        unit="tokens", slider_hi=1536)
    prompt_hi: int = knob(128, "Prompt tokens (to)", "Longest prompt, in tokens.",
                          lo=1, hi=32768, step=8, unit="tokens", slider_hi=1536)
    output_kind: str = knob(
        "uniform", "Output lengths",
        "How many tokens each request asks the model to generate. " + LENGTHS_HELP,
        choices=LENGTH_KINDS, flag="--output-dist")
    output_lo: int = knob(16, "Output tokens (from)", "Fewest tokens a request generates.",
                          lo=1, hi=32768, unit="tokens", slider_hi=512)
    output_hi: int = knob(64, "Output tokens (to)", "Most tokens a request generates.",
                          lo=1, hi=32768, unit="tokens", slider_hi=512)
    tenants: int = knob(
        1, "Tenants",
        "How many customers send the requests. The first sends half of all traffic; the "
        "others share the rest. Matters for the 'fair' and 'priority' orders.", lo=1, hi=1000,
        slider_hi=8)
    system_prompts: int = knob(
        0, "Shared system prompts",
        "How many different system prompts the requests start with (a conversation keeps the one "
        "it started with; a lone request picks one at random). 0 = none: every prompt is its own "
        "text. Requests that share a system prompt share its KV blocks under prefix caching.",
        lo=0, hi=1000, slider_hi=16)
    system_prompt_tokens: int = knob(
        256, "System prompt tokens", "The length of each shared system prompt, in tokens.",
        lo=1, hi=32768, step=16, unit="tokens", slider_hi=2048)
    conversations: int = knob(
        0, "Conversations (multi-turn)",
        "Multi-turn chat: each new request continues one of this many conversations, picked at "
        "random, and its prompt is the whole conversation so far (earlier questions and replies) "
        "followed by a new question of the drawn prompt length. The earlier replies are drawn "
        "text of the output length, not what the model said. 0 = every request stands alone.",
        lo=0, hi=100_000, slider_hi=64)
    turns: int = knob(
        4, "Turns per conversation", "After this many turns a conversation starts again from its "
        "system prompt (keeps prompts within the model's context).", lo=1, hi=1000, slider_hi=16)
    draft_acceptance: float = knob(
        0.6, "Draft acceptance (simulated engine)",
        "Speculative decoding on the simulated engine, which has no real text to look up: the "
        "chance each drafted token is accepted, given the ones before it were. High where outputs "
        "copy their prompts (a passage repeated, code edited), low for free writing. The real "
        "engine's acceptance comes from its own text and ignores this.", lo=0.0, hi=1.0, step=0.05)
    seed: int = knob(
        0, "Seed",
        "Fixes the random draws (arrival times, lengths, prompts): the same seed and settings "
        "give the same workload.", lo=0, hi=2**31 - 1)
    start_s: float = 0.0
    id_prefix: str = "r"

    @property
    def shares_prefixes(self) -> bool:
        """Prompts built from shared parts (system prompts, conversation history)."""
        return self.system_prompts > 0 or self.conversations > 0

    @property
    def endless(self) -> bool:
        """Continuous traffic with a rate: arrivals that never run out."""
        return self.continuous and self.rate > 0

    @property
    def prompt_len(self) -> LengthDist:
        return LengthDist(self.prompt_kind, self.prompt_lo, self.prompt_hi)

    @property
    def output_len(self) -> LengthDist:
        return LengthDist(self.output_kind, self.output_lo, self.output_hi)

    def validate(self) -> "WorkloadSpec":
        check_all(self)
        if 0 < self.rate < MIN_RATE:   # the first arrival would come after the horizon: a run that never ends
            raise ValueError(f"rate is too low (got {self.rate!r}; allowed 0 for all at once, or "
                             f"{MIN_RATE:.2g}–{knobs_of(WorkloadSpec)['rate'].hi:g} req/s: one request a day at least)")
        self.prompt_len.validate("prompt")
        self.output_len.validate("output")
        return self

    def changed(self, **changes) -> "WorkloadSpec":
        return replace(self, **changes).validate()

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "WorkloadSpec":
        return cls(**d).validate()


def tenant_name(i: int) -> str:
    return "tenant-" + "abcdefghijklmnopqrstuvwxyz"[i % 26] + ("" if i < 26 else str(i // 26))


class PromptMaker:
    """Builds chat-templated prompts of an exact token length from the project's prompt set."""

    def __init__(self, tokenizer, path: str = PROMPTS_PATH):
        self.tokenizer = tokenizer
        with open(path) as f:
            texts = [json.loads(line)["text"] for line in f if line.strip()]
        enc = lambda s: tokenizer.encode(s, add_special_tokens=False)
        self.texts = [enc(t) for t in texts]
        self.separator = enc("\n\n")
        marker = "\u2063MARK\u2063"
        wrapped = tokenizer.apply_chat_template([{"role": "user", "content": marker}],
                                                add_generation_prompt=True, tokenize=False)
        before, after = wrapped.split(marker)
        self.prefix, self.suffix = enc(before), enc(after)

        # The template's pieces around each message of a conversation with a system prompt:
        # start, system, user, assistant, user, and the generation prompt after the last.
        marks = [f"\u2063M{i}\u2063" for i in range(4)]
        try:
            wrapped = tokenizer.apply_chat_template(
                [{"role": role, "content": m} for role, m in zip(("system", "user", "assistant", "user"), marks)],
                add_generation_prompt=True, tokenize=False)
            pieces = []
            for m in marks:
                before, wrapped = wrapped.split(m)
                pieces.append(enc(before))
        except Exception:       # a template without a system role, or one that rewrites the messages
            pieces = [None] * 4
        # (what follows the last user message, the generation prompt, is after_user again)
        self.start, self.after_system, self.after_user, self.after_reply = pieces

    def repeat_passage(self, index: int) -> list[int]:
        """A prompt that asks the model to copy a passage of the prompt set (the `index`-th, wrapping
        round): the output repeats the input, where speculative decoding's n-gram lookup guesses well."""
        passage = self.tokenizer.decode(self.texts[index % len(self.texts)])
        enc = lambda text: self.tokenizer.encode(text, add_special_tokens=False)
        # the reply is started with the passage's opening quotes, which a small model then follows
        return self.prefix + enc(f'Copy this text:\n"""\n{passage}\n"""') + self.suffix + enc('"""\n')

    def content(self, length: int, rng: random.Random) -> list[int]:
        """`length` tokens of text from the prompt set."""
        out: list[int] = []
        while len(out) < length:
            out += rng.choice(self.texts) + self.separator
        return out[:length]

    def make(self, length: int, rng: random.Random) -> list[int]:
        return self.prefix + self.content(max(1, length - len(self.prefix) - len(self.suffix)), rng) + self.suffix

    def chat(self, system: list[int] | None, history: list[tuple[list[int], list[int]]],
             question: list[int]) -> list[int]:
        """A chat prompt: the system prompt (None: the template's default), earlier (question,
        reply) turns, then the new question, with the chat template's tokens between them."""
        if self.start is None:
            raise ValueError("this model's chat template takes no system prompt and turns as the lab writes "
                             "them: use system_prompts 0 and conversations 0 with it")
        out = list(self.start + system + self.after_system if system is not None else self.prefix)
        for q, reply in history:
            out += q + self.after_user + reply + self.after_reply
        return out + question + self.after_user


def request_to_json(r: Request) -> dict:
    d = {"id": r.id, "arrival_s": round(r.arrival_s, 6), "prompt_token_ids": r.prompt_token_ids,
         "max_new_tokens": r.max_new_tokens, "tenant": r.tenant, "priority": r.priority}
    if not r.ignore_eos:
        d["ignore_eos"] = False
    return d


def write_jsonl(path: str, requests: list[Request]) -> None:
    with open(path, "w") as f:
        for r in requests:
            f.write(json.dumps(request_to_json(r)) + "\n")


def check_workload_file(path: str) -> None:
    """A workload path the run can read: an existing, non-empty file (one clear error otherwise)."""
    if os.path.isdir(path):
        raise ValueError(f"workload {path} is a directory: give a JSONL file, one request a line")
    if not os.path.isfile(path):
        raise ValueError(f"workload {path} does not exist")
    if os.path.getsize(path) == 0:
        raise ValueError(f"workload {path} is empty")


def read_jsonl(path: str, tokenizer=None, limits: Limits = Limits(), max_line_bytes: int = MAX_REQUEST_BYTES
               ) -> tuple[list[Request], list[tuple[int, str, str]]]:
    """Parse a workload file line by line: (requests, [(line number, id, error)]). A bad line costs
    only itself, whatever is wrong with it: a line over `max_line_bytes` is skipped unread (it
    never takes more memory than the limit), and anything a line makes the parser or the
    tokenizer raise refuses that line alone. A second line with an id already seen is an error
    that names the first."""
    requests, errors, first_line = [], [], {}
    with open(path, "rb") as f:
        for no, raw in enumerate(bounded_lines(f, max_line_bytes), 1):
            rid = f"line{no}"
            try:
                if raw is None:
                    raise ValueError(f"the line is over {max_line_bytes:,} bytes, the limit for one request")
                if not raw.strip():
                    continue
                d = parse_json(raw, "the line", max_line_bytes + 1)
                rid = id_of(d, rid)
                if rid in first_line:
                    raise ValueError(f"duplicate id {rid!r}; first seen on line {first_line[rid]}")
                req = request_from_dict(d, limits, tokenizer, default_id=rid)
                first_line[rid] = no
                requests.append(req)
            except ValueError as exc:
                errors.append((no, rid, f"line {no}: {exc}"))
            except Exception as exc:    # a tokenizer or template that chokes: this line only
                errors.append((no, rid, f"line {no}: could not be read: {type(exc).__name__}: {exc}"))
    return requests, errors


def bounded_lines(f, max_bytes: int):
    """The lines of a binary file; None for a line over `max_bytes`, whose rest is skipped unread."""
    while line := f.readline(max_bytes + 1):
        if len(line) > max_bytes and not line.endswith(b"\n"):
            while (rest := f.readline(1 << 16)) and not rest.endswith(b"\n"):
                pass
            yield None
        else:
            yield line
