"""A GPU's KV pool as vLLM sizes it at start-up: arithmetic from a model's config, not a measurement.

vLLM (vllm/v1/worker/gpu_worker.py, determine_available_memory) takes the GPU's memory times
`gpu_memory_utilization`, subtracts what is not KV cache (the weights, the activations' peak of a
profiling forward pass, memory outside PyTorch), and cuts the rest into blocks of `block_size`
tokens. It then logs the pool in tokens and how many requests of `max_model_len` tokens it holds
at once (vllm/v1/core/kv_cache_utils.py: "GPU KV cache size: N tokens", "Maximum concurrency for
X tokens per request: Y.YYx"). `kv_pool` does the same sums with the activations' peak as a stated
assumption, since only a real start-up measures it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..core.validation import kv_bytes_per_token
from .roofline import MODELS, Device, ModelShape

BLOCK_SIZE = 16               # tokens per KV block: vLLM's default, and this engine's
ACTIVATION_GB = 4.0           # assumed per GPU: the activations' peak, CUDA graphs, memory outside PyTorch

# The roofline's models, and one whose weights need several GPUs (so it has no one-GPU step model there).
SHAPES = {**MODELS,
          "llama-3.1-70b": ModelShape("Llama-3.1-70B", 80, 8192, 64, 8, 128, 28672, 128256, False,
                                      "meta-llama/Llama-3.1-70B config.json")}


def shape_from_config(config: dict, name: str, source: str) -> ModelShape:
    """A model's shape from its config.json (Hugging Face's Llama field names)."""
    heads = config["num_attention_heads"]
    return ModelShape(name, config["num_hidden_layers"], config["hidden_size"], heads,
                      config.get("num_key_value_heads", heads),
                      config.get("head_dim") or config["hidden_size"] // heads,
                      config["intermediate_size"], config["vocab_size"],
                      bool(config.get("tie_word_embeddings", False)), source)


def shape_from_file(path: Path, name: str) -> ModelShape:
    return shape_from_config(json.loads(Path(path).read_text()), name, str(path))


@dataclass(frozen=True, slots=True)
class KVPool:
    """One model on `gpus` GPUs of one kind, split by tensor parallelism, as vLLM would size it."""
    model: str
    device: str
    gpus: int
    dtype_bytes: int
    kv_bytes_per_token: int        # per GPU: its share of the KV heads, every layer, keys and values
    weights_gb: float              # per GPU
    usable_gb: float               # per GPU: memory x gpu_memory_utilization
    kv_gb: float                   # per GPU, what is left for the pool (<= 0: vLLM would not start)
    tokens: int                    # the pool, in tokens ("GPU KV cache size")
    max_model_len: int
    concurrency: float             # requests of max_model_len tokens at once ("Maximum concurrency")

    @property
    def fits(self) -> bool:
        """Whether the pool holds at least one request of max_model_len tokens (vLLM refuses to start
        otherwise)."""
        return self.concurrency >= 1


def kv_pool(model: ModelShape, device: Device, gpu_memory_utilization: float = 0.9,
            max_model_len: int = 8192, gpus: int = 1, activation_gb: float = ACTIVATION_GB) -> KVPool:
    """The KV pool of `model` on `gpus` x `device` in the device's dtype. Tensor parallelism splits the
    weights and the KV heads evenly over the GPUs (a KV head is copied where there are more GPUs than KV
    heads), so every GPU holds the same tokens, each with its share of the heads."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1] (got {gpu_memory_utilization})")
    if gpus < 1 or max_model_len < 1:
        raise ValueError(f"gpus and max_model_len must be at least 1 (got {gpus}, {max_model_len})")
    b = device.dtype_bytes
    heads_per_gpu = max(1, math.ceil(model.kv_heads / gpus))
    per_token = kv_bytes_per_token(model.layers, heads_per_gpu, model.head_dim, b)
    weights = model.params * b / gpus
    usable = device.memory_bytes * gpu_memory_utilization
    kv = usable - weights - activation_gb * 1e9
    blocks = max(0, int(kv // (per_token * BLOCK_SIZE)))
    per_request = math.ceil(max_model_len / BLOCK_SIZE)   # blocks one request of max_model_len holds
    return KVPool(model.name, device.name, gpus, b, per_token, weights / 1e9, usable / 1e9, kv / 1e9,
                  blocks * BLOCK_SIZE, max_model_len, blocks / per_request)
