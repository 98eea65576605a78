"""The step-time model: how long one engine step takes, predicted from its shape.

A step's shape is four numbers read off its plan (`step_shape`):
  - tokens: rows through the model's body (every prompt-chunk token plus one per decode);
  - samples: rows that go through the vocabulary projection (lm_head), one per sequence that
    reaches its last token and samples its next one (1 + its drafts for one verifying drafts);
  - decode_context: keys the decode tokens read from the KV cache (each reads its whole context);
  - prefill_pairs: (query, key) pairs the prefill chunks compute (causal, after their offset), and
    the chunks that verify drafted tokens (speculative decoding), whose rows attend the same way.

The form, chosen from measurements (engine/sim/calibrate.py compares the candidates on held-out
steps and keeps the best):

    step_ms = fixed + body(tokens) + sample·samples + read·decode_context/1000 + pair·prefill_pairs/1000
              + prefill_step·[the step has a prefill chunk]

`body` is piecewise linear in the number of rows, with its own ms per token between knots.
Nearly all arithmetic is in the linear layers, and their cost per row is not constant: at a
few rows a step is bound by reading the weights once (adding a row costs little), and past a
few dozen rows it is bound by arithmetic (each row costs its FLOPs); on a CPU a hand-written
kernel takes one or two rows and oneDNN the rest (engine/model/linear.py), each with its own speed.
One straight line cannot follow all of that; `python -m engine calibrate` prints the held-out
error of each form it tried (one line, or piecewise with few or more knots; knots at 2 and 3
let the switch from one kernel to the other be a jump, since rows are whole numbers). Attention
is apart because its cost grows with context, not rows: a decode token streams its whole
context from memory, a prefill chunk computes a triangle of pairs, and the two run at very
different speeds, so each has its own coefficient. A fixed cost covers what every step pays
(launching about 30 layers' kernels, Python bookkeeping), and the calibration adds to it the
engine loop's mean time between steps in a real run. The last term is what a step with a prefill
chunk costs beyond that: on a GPU a step of decodes alone replays a CUDA graph, a tenth of the
same work launched kernel by kernel, as a step with a prefill chunk is; on a CPU it fits at zero.

`UNCALIBRATED` is a hand-set guess used when this machine has no profile; it says so in its label.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

from .scheduler import StepPlan


class StepShape(NamedTuple):
    tokens: int
    samples: int
    decode_context: int
    prefill_pairs: int


def causal_pairs(start: int, tokens: int) -> int:
    """(query, key) pairs of `tokens` tokens of one sequence at positions start..: a token at
    position p sees p + 1 keys."""
    return tokens * start + tokens * (tokens + 1) // 2


def step_shape(plan: StepPlan) -> StepShape:
    tokens = samples = decode_context = prefill_pairs = 0
    for c in plan.chunks:
        tokens += c.num_tokens
        samples += c.logit_rows
        if c.draft:      # verifying drafts: its rows attend causally as a prompt chunk's do (and on a GPU
            prefill_pairs += causal_pairs(c.start, c.num_tokens)    # run eagerly, as a chunk does)
        elif c.phase == "decode":
            decode_context += c.start + 1
        else:
            prefill_pairs += causal_pairs(c.start, c.num_tokens)
    return StepShape(tokens, samples, decode_context, prefill_pairs)


def row_segments(tokens: float, knots: tuple[int, ...]) -> list[float]:
    """How many of `tokens` rows fall in each segment: [0, k1], [k1, k2], ..., [k_last, inf)."""
    edges = (0, *knots)
    ends = (*knots, float("inf"))
    return [max(0.0, min(tokens, end) - start) for start, end in zip(edges, ends)]


def features(shape: StepShape, knots: tuple[int, ...]) -> list[float]:
    """The shape as the model's regressors, in the order of `StepModel.coefficients`."""
    return [1.0, *row_segments(shape.tokens, knots), float(shape.samples),
            shape.decode_context / 1000, shape.prefill_pairs / 1000, float(shape.prefill_pairs > 0)]


@dataclass(frozen=True)
class StepModel:
    fixed_ms: float
    knots: tuple[int, ...]           # row counts where the ms per token changes
    token_ms: tuple[float, ...]      # ms per row in each segment: len(knots) + 1 values
    sample_ms: float                 # ms per sampled row (the vocabulary projection)
    decode_read_ms: float            # ms per 1000 keys read by decode tokens
    prefill_pair_ms: float           # ms per 1000 (query, key) pairs of prefill attention
    label: str = ""                  # where the numbers come from, in words
    prefill_step_ms: float = 0.0     # ms more for a step with a prefill chunk (0 in profiles made before it)
    error: float | None = None       # its current error against real steps (a share), where it was checked

    def __post_init__(self):
        if len(self.token_ms) != len(self.knots) + 1:
            raise ValueError(f"token_ms needs {len(self.knots) + 1} values for knots {self.knots} "
                             f"(got {len(self.token_ms)})")
        if list(self.knots) != sorted(set(self.knots)) or any(k <= 0 for k in self.knots):
            raise ValueError(f"knots must be increasing positive row counts (got {self.knots})")

    @property
    def coefficients(self) -> list[float]:
        return [self.fixed_ms, *self.token_ms, self.sample_ms, self.decode_read_ms, self.prefill_pair_ms,
                self.prefill_step_ms]

    @classmethod
    def from_coefficients(cls, coefs, knots: tuple[int, ...], label: str) -> "StepModel":
        n = len(knots) + 1
        fixed, token_ms, (sample, read, pair, prefill_step) = coefs[0], coefs[1:1 + n], coefs[1 + n:]
        return cls(float(fixed), tuple(knots), tuple(float(c) for c in token_ms), float(sample), float(read),
                   float(pair), label=label, prefill_step_ms=float(prefill_step))

    def predict(self, shape: StepShape) -> float:
        return sum(c * x for c, x in zip(self.coefficients, features(shape, self.knots)))

    def step_ms(self, plan: StepPlan) -> float:
        return self.predict(step_shape(plan))

    def decode_ms(self, batch: int, context: int) -> float:
        """A decode step of `batch` sequences, each with `context` tokens before its new one."""
        return self.predict(StepShape(batch, batch, batch * (context + 1), 0))

    def prefill_ms(self, prompt: int) -> float:
        """One whole prompt of `prompt` tokens, alone in its step, sampling its first token."""
        return self.predict(StepShape(prompt, 1, 0, prompt * (prompt + 1) // 2))

    def scaled(self, factor: float, label: str) -> "StepModel":
        """Every cost multiplied by `factor`: a machine `1/factor` times as fast."""
        return StepModel.from_coefficients([c * factor for c in self.coefficients], self.knots, label)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "StepModel":
        return cls(**{**d, "knots": tuple(d["knots"]), "token_ms": tuple(d["token_ms"])})


UNCALIBRATED = StepModel(
    fixed_ms=20.0, knots=(), token_ms=(0.9,), sample_ms=0.6, decode_read_ms=2.0, prefill_pair_ms=0.5,
    label="uncalibrated: a hand-set guess, not measured on this machine "
          "(run `python -m engine calibrate` to measure it)")
