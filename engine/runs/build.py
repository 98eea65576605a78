"""Building an engine: one function for every kind, and the one rule that sizes its KV pool.

With a loaded model, the engine runs the real forward on the model's device under a wall
clock. Without one, it runs the cost model: each step's time is predicted from its shape and
a virtual clock moves on by it, so a whole run takes a blink. The same Engine and Scheduler
sit on top of both.
"""
from __future__ import annotations

from dataclasses import replace

from ..core.clock import VirtualClock, WallClock
from ..core.config import EngineConfig, SchedulerPolicy
from ..core.engine import Engine
from ..core.executor import CostModelExecutor
from ..core.knobs import knobs_of
from ..core.kv_cache import BlockPool
from ..core.validation import SMOLLM2_KV_BYTES_PER_TOKEN, available_memory_bytes, check_kv_fits


def size_kv_pool(config: EngineConfig, policy: SchedulerPolicy) -> EngineConfig:
    """The KV capacity rule: the physical pool holds at least the policy's KV capacity.

    kv_capacity_tokens is how much of the pool the scheduler may use. It can be lowered while
    the engine runs; raised above the pool it is held to the pool (BlockPool.set_capacity_tokens).
    """
    return replace(config, kv_pool_tokens=max(config.kv_pool_tokens, policy.kv_capacity_tokens))


def check_kv_memory(config: EngineConfig, policy: SchedulerPolicy, model=None) -> None:
    """Refuse a KV pool this machine cannot hold, naming the knob that asked for it and how much fits.
    The knob's own range is said first: a value outside it is refused as such, not as too much memory."""
    knobs_of(SchedulerPolicy)["kv_capacity_tokens"].check(policy.kv_capacity_tokens)
    field = "kv_capacity_tokens" if policy.kv_capacity_tokens >= config.kv_pool_tokens else "kv_pool_tokens"
    tokens = size_kv_pool(config, policy).kv_pool_tokens
    if model is None:
        check_kv_fits(field, tokens, SMOLLM2_KV_BYTES_PER_TOKEN, available_memory_bytes(),
                      "SmolLM2 in float32, which the cost model stands for")
        return
    from ..model.model import free_memory_bytes, model_kv_bytes_per_token
    check_kv_fits(field, tokens, model_kv_bytes_per_token(model), free_memory_bytes(model.device),
                  f"{model.name} in {str(model.dtype).replace('torch.', '')} on {model.device}")


def build_engine(config: EngineConfig, policy: SchedulerPolicy, model=None, cost=None,
                 draft_acceptance: float = 0.0) -> Engine:
    """An engine for `policy`: on `model` (a LoadedModel) under a wall clock, or, with no model,
    on the cost model under a virtual clock, its step times from `cost` (anything with
    step_ms(plan): a calibrated step model, a roofline model; None: the hand-set StepCost), and
    speculative decoding's drafts accepted with the chance `draft_acceptance` (the workload's).
    Settings it cannot use, or a KV pool beyond this machine's memory, are refused with a
    ValueError that says why."""
    config.validate()                  # the policy is checked by the scheduler, its one owner
    check_kv_memory(config, policy, model)
    config = size_kv_pool(config, policy)
    pool = BlockPool(config.kv_pool_tokens // config.block_size, config.block_size)
    if model is None:
        clock = VirtualClock()
        executor = CostModelExecutor(clock, cost, draft_acceptance=draft_acceptance)
        return Engine(executor, clock, policy, pool, config.max_model_len, drafter=executor.draft)
    from ..model.executor import ModelExecutor     # torch is imported only here
    executor = ModelExecutor(model, pool.num_blocks, pool.block_size, policy.max_num_seqs)
    return Engine(executor, WallClock(), policy, pool, min(config.max_model_len, model.max_model_len),
                  model.tokenizer, model.eos_token_id)
