"""Roofline models: what one engine step would take on named hardware, from spec-sheet figures.

These are models, not measurements. A step's time is worked out from its shape:

    compute = FLOPs / (peak FLOP/s x compute efficiency)
    memory  = bytes / (bandwidth x memory efficiency)
    step    = overhead + max(compute, memory) for the weight GEMMs
                       + max(compute, memory) for the attention over the KV cache

Why max and not compute + memory: a GEMM or an attention kernel streams its operands while it
computes, so whichever of the two is slower sets its time (the roofline model); a sum would
assume no overlap at all. Why two maxes added up: the weight GEMMs and the attention run one
after the other and hit different roofs (a decode step's GEMMs read every weight for a few
rows, its attention reads every token's keys and values), so one max over the whole step
would let one hide the other. The fixed overhead stands for what is neither: scheduling,
kernel launches, sampling. Activations' memory traffic is left out (small next to weights and KV).

The KV capacity is what the device's memory holds once the weights are in: memory x
MEMORY_UTILIZATION - weights, divided by the KV bytes of one token.

The efficiencies and overheads are stated assumptions, not fitted values.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass

from ..core.validation import available_memory_bytes, kv_bytes_per_token
from ..core.step_model import StepShape, causal_pairs

MEMORY_UTILIZATION = 0.9   # the share of device memory the engine may take (vLLM's gpu_memory_utilization default)
TERA = 1e12

# Assumptions for the GPUs: large bf16 GEMMs reach 60-80% of dense peak; streaming kernels
# reach about 80% of the HBM/GDDR figure; ~1 ms a step for scheduling, launches and sampling.
GPU_COMPUTE_EFFICIENCY = 0.6
GPU_MEMORY_EFFICIENCY = 0.8
GPU_OVERHEAD_MS = 1.0
# Assumptions for this CPU: its figures are measured (a 1024x1024 GEMM, a 256 MB read), so they
# are already achieved rates; the model's narrower GEMMs reach about 70% of that, its weight reads
# about 90%; the engine's Python loop over the layers costs ~3 ms a step.
CPU_COMPUTE_EFFICIENCY = 0.7
CPU_MEMORY_EFFICIENCY = 0.9
CPU_OVERHEAD_MS = 3.0


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    peak_flops: float         # dense FLOP/s in the dtype below
    bandwidth: float          # bytes/s of device memory
    memory_bytes: float
    dtype: str                # weights and KV are stored in this: bf16 or fp32
    compute_efficiency: float
    memory_efficiency: float
    overhead_ms: float
    source: str

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]


DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    source: str

    @property
    def layer_params(self) -> int:
        q_and_o = 2 * self.hidden * self.heads * self.head_dim
        k_and_v = 2 * self.hidden * self.kv_heads * self.head_dim
        return q_and_o + k_and_v + 3 * self.hidden * self.intermediate   # gate, up, down

    @property
    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * self.layer_params + embeddings


# Dense (non-sparse) 16-bit tensor-core figures from NVIDIA's datasheets.
DEVICES = {
    "h100-sxm": Device("H100 SXM", 989.4 * TERA, 3.35 * TERA, 80e9, "bf16", GPU_COMPUTE_EFFICIENCY,
                       GPU_MEMORY_EFFICIENCY, GPU_OVERHEAD_MS,
                       "NVIDIA H100 Tensor Core GPU datasheet: BF16 1,979 TFLOPS with sparsity "
                       "(989 dense), 80 GB HBM3 at 3.35 TB/s"),
    "a100-80gb": Device("A100 80GB SXM", 312 * TERA, 2.039 * TERA, 80e9, "bf16", GPU_COMPUTE_EFFICIENCY,
                        GPU_MEMORY_EFFICIENCY, GPU_OVERHEAD_MS,
                        "NVIDIA A100 Tensor Core GPU datasheet: BF16 312 TFLOPS dense, "
                        "80 GB HBM2e at 2,039 GB/s"),
    "l4": Device("L4", 121 * TERA, 300e9, 24e9, "bf16", GPU_COMPUTE_EFFICIENCY, GPU_MEMORY_EFFICIENCY,
                 GPU_OVERHEAD_MS,
                 "NVIDIA L4 Tensor Core GPU datasheet: BF16 242 TFLOPS with sparsity (121 dense), "
                 "24 GB GDDR6 at 300 GB/s"),
}
CPU_DEVICE = "cpu"    # this machine's CPU, measured on first use

# Shapes from each model's config.json on the Hugging Face hub.
MODELS = {
    "smollm2-135m": ModelShape("SmolLM2-135M", 30, 576, 9, 3, 64, 1536, 49152, True,
                               "HuggingFaceTB/SmolLM2-135M-Instruct config.json"),
    "llama-3.1-8b": ModelShape("Llama-3.1-8B", 32, 4096, 32, 8, 128, 14336, 128256, False,
                               "meta-llama/Llama-3.1-8B config.json"),
    "qwen2.5-7b": ModelShape("Qwen2.5-7B", 28, 3584, 28, 4, 128, 18944, 152064, False,
                             "Qwen/Qwen2.5-7B config.json (q/k/v biases left out: 0.01% of the weights)"),
}


@functools.lru_cache(maxsize=4)
def this_cpu(dtype_name: str = "auto") -> Device:
    """This machine's CPU as a Device: its GEMM FLOP/s and memory bandwidth measured with torch
    (about a second), in `dtype_name` (auto: the dtype the engine picks here). Measured once
    per process and dtype."""
    import torch
    from ..model.model import resolve_dtype
    dtype = resolve_dtype(dtype_name, "cpu")
    n = 1024
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    gemm_s = _best_time(lambda: a @ b)
    x = torch.ones(64 * 2**20)                     # 256 MB of fp32: far past the caches
    read_s = _best_time(x.sum)
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")
    return Device("this CPU", 2 * n**3 / gemm_s, x.numel() * 4 / read_s, available_memory_bytes(),
                  name, CPU_COMPUTE_EFFICIENCY, CPU_MEMORY_EFFICIENCY, CPU_OVERHEAD_MS,
                  f"measured here: a {n}x{n} {name} GEMM and a 256 MB read "
                  "with torch; memory is what the machine has available now")


def _best_time(fn, budget_s: float = 0.4) -> float:
    """The fastest of repeated calls within `budget_s` (other work on the machine only slows it)."""
    fn()
    best, end = float("inf"), time.perf_counter() + budget_s
    while time.perf_counter() < end:
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def device_named(key: str, cpu_dtype: str = "auto") -> Device:
    if key == CPU_DEVICE:
        return this_cpu(cpu_dtype)
    if key not in DEVICES:
        raise ValueError(f"unknown device {key!r} for a roofline model: choose one of "
                         f"{', '.join([*DEVICES, CPU_DEVICE])}")
    return DEVICES[key]


def model_named(key: str) -> ModelShape:
    if key not in MODELS:
        raise ValueError(f"unknown model {key!r} for a roofline model: choose one of {', '.join(MODELS)}")
    return MODELS[key]


class RooflineStepModel:
    """step_ms(plan) for `model` on `device`: a model of the step from spec-sheet figures."""

    def __init__(self, device: Device, model: ModelShape):
        self.device, self.model = device, model
        b = device.dtype_bytes
        self.weight_bytes = model.params * b
        self.kv_bytes_per_token = kv_bytes_per_token(model.layers, model.kv_heads, model.head_dim, b)
        free = device.memory_bytes * MEMORY_UTILIZATION - self.weight_bytes
        if free < self.kv_bytes_per_token:
            raise ValueError(f"{model.name} does not fit on {device.name}: its weights take "
                             f"{self.weight_bytes / 1e9:.1f} GB of {device.memory_bytes * MEMORY_UTILIZATION / 1e9:.1f} GB usable")
        self.kv_capacity_tokens = int(free // self.kv_bytes_per_token)
        self.label = f"roofline model: {model.name} on {device.name} ({device.dtype})"
        self._flops = device.peak_flops * device.compute_efficiency
        self._bandwidth = device.bandwidth * device.memory_efficiency

    def breakdown(self, chunks) -> dict[str, float]:
        """The parts of one step's time in ms. `chunks`: (start position, tokens, samples) of each
        sequence in the step; samples is whether it samples, or how many rows it samples (a chunk
        verifying drafts: 1 + its drafts)."""
        return self._parts(tokens=sum(n for _, n, _ in chunks),
                           sampled=sum(int(s) for _, _, s in chunks),
                           attended=sum(causal_pairs(start, n) for start, n, _ in chunks),
                           kv_tokens=sum(start + 2 * n for start, n, _ in chunks))   # read all, write the new

    def predict(self, shape: StepShape) -> float:
        """A step of this shape (engine.step_model's four numbers), in ms, as StepModel.predict
        gives it, so the Playground's capacity and presets can be read off either model. A shape
        does not say which rows are prompt tokens: the KV traffic is counted as the keys its decodes
        read plus one key written per row, leaving out a prompt chunk's reads of its own keys. That
        part of a prefill step's memory time is hidden under its compute time anyway (a 200-token
        prompt: 6.618 ms from its shape, 6.620 ms from its chunk)."""
        return self._parts(tokens=shape.tokens, sampled=shape.samples,
                           attended=shape.decode_context + shape.prefill_pairs,
                           kv_tokens=shape.decode_context + shape.tokens)["step_ms"]

    def decode_ms(self, batch: int, context: int) -> float:
        """A decode step of `batch` sequences, each with `context` tokens before its new one."""
        return self.breakdown([(context, 1, True)] * batch)["step_ms"]

    @property
    def fixed_ms(self) -> float:
        return self.device.overhead_ms

    def _parts(self, tokens: int, sampled: int, attended: int, kv_tokens: int) -> dict[str, float]:
        m = self.model
        # Weight GEMMs: 2 FLOPs per weight per row; the LM head only for rows that sample.
        gemm_flops = 2 * tokens * m.layers * m.layer_params + 2 * sampled * m.hidden * m.vocab
        gemm_bytes = (m.layers * m.layer_params + (m.hidden * m.vocab if sampled else 0)) * self.device.dtype_bytes
        # Attention: 4 FLOPs per head dim for each (query, key) pair (QK^T and PV).
        attn_flops = 4 * m.layers * m.heads * m.head_dim * attended
        kv_bytes = self.kv_bytes_per_token * kv_tokens
        parts = {"gemm_compute_ms": gemm_flops / self._flops * 1000,
                 "gemm_memory_ms": gemm_bytes / self._bandwidth * 1000,
                 "attention_compute_ms": attn_flops / self._flops * 1000,
                 "attention_memory_ms": kv_bytes / self._bandwidth * 1000,
                 "overhead_ms": self.device.overhead_ms}
        parts["step_ms"] = (parts["overhead_ms"] + max(parts["gemm_compute_ms"], parts["gemm_memory_ms"])
                            + max(parts["attention_compute_ms"], parts["attention_memory_ms"]))
        return parts

    def bound(self, chunks) -> str:
        """'memory' or 'compute': which roof sets the larger share of the step."""
        p = self.breakdown(chunks)
        memory = max(p["gemm_memory_ms"] - p["gemm_compute_ms"], 0) + max(p["attention_memory_ms"] - p["attention_compute_ms"], 0)
        compute = max(p["gemm_compute_ms"] - p["gemm_memory_ms"], 0) + max(p["attention_compute_ms"] - p["attention_memory_ms"], 0)
        return "memory" if memory >= compute else "compute"

    def step_ms(self, plan) -> float:
        return self.breakdown([(c.start, c.num_tokens, c.logit_rows) for c in plan.chunks])["step_ms"]

    def decode_tokens_per_s(self, batch: int, context: int) -> float:
        """Output tokens a second for `batch` sequences decoding at `context` tokens each."""
        return batch * 1000 / self.decode_ms(batch, context)

    def describe(self) -> dict:
        d, m = self.device, self.model
        return {"label": self.label, "device": d.name, "model": m.name,
                "peak_tflops": d.peak_flops / TERA, "bandwidth_gb_s": d.bandwidth / 1e9,
                "memory_gb": d.memory_bytes / 1e9, "compute_efficiency": d.compute_efficiency,
                "memory_efficiency": d.memory_efficiency, "overhead_ms": d.overhead_ms,
                "weights_gb": self.weight_bytes / 1e9, "kv_capacity_tokens": self.kv_capacity_tokens,
                "device_source": d.source, "model_source": m.source}


def roofline_profile(name: str, cpu_dtype: str = "auto") -> RooflineStepModel:
    """A roofline model from its name, DEVICE:MODEL, e.g. "h100-sxm:llama-3.1-8b" or
    "cpu:smollm2-135m" (the CPU in `cpu_dtype`; the GPUs always in bf16)."""
    device, sep, model = name.partition(":")
    if not sep:
        raise ValueError(f"roofline profile {name!r}: write it DEVICE:MODEL, devices "
                         f"{', '.join([*DEVICES, CPU_DEVICE])}, models {', '.join(MODELS)}")
    return RooflineStepModel(device_named(device, cpu_dtype), model_named(model))


def is_roofline_name(name: str) -> bool:
    device, sep, model = name.partition(":")
    return bool(sep) and (device in DEVICES or device == CPU_DEVICE) and model in MODELS
