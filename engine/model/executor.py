"""The executor of the real model: runs a StepPlan as one packed forward over paged KV (the
model runner), under the engine's wall clock. It decides nothing; the scheduler (engine/core)
never touches torch, and this is where its plans meet the model."""
from __future__ import annotations

from ..core.executor import check_inputs
from ..core.request import Request
from ..core.scheduler import StepPlan
from .runner import ModelRunner, SeqInput


class ModelExecutor:
    def __init__(self, model, num_kv_blocks: int, block_size: int, max_batch: int | None = None):
        from ..model.runner import ModelRunner, SeqInput   # torch is imported only here
        self.model = model
        self.runner = ModelRunner(model, num_kv_blocks, block_size)
        if self.runner.graphs is not None and max_batch:    # on a GPU: decode graphs for its batches, now
            self.runner.graphs.record_ahead(max_batch)
        self.device = str(model.device)
        self.dtype = str(model.dtype).replace("torch.", "")

    def execute(self, plan: StepPlan) -> dict[Request, int | list[int]]:
        check_inputs(plan, self.runner.vocab_size)
        seqs = [SeqInput(request_id=c.request.id,
                               token_ids=c.token_ids,
                               start_pos=c.start,
                               block_table=c.request.block_table,
                               sample=c.samples,
                               temperature=c.request.temperature,
                               top_p=c.request.top_p,
                               seed=c.request.seed,
                               drafts=len(c.draft))
                for c in plan.chunks]
        tokens = self.runner.run(seqs)
        return {c.request: t for c, t in zip(plan.chunks, tokens) if t is not None}
