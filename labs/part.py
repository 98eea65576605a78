"""One stream of a mixed workload (labs.runs.mix_run): a WorkloadSpec, optionally relabelled."""
from __future__ import annotations

from dataclasses import dataclass

from engine.runs.workload import WorkloadSpec


@dataclass(frozen=True)
class Part:
    """One stream of a mixed workload: a WorkloadSpec, optionally relabelled.

    tenant: every request of this part belongs to this tenant (and gets `priority`);
    ttft_slo_s: this part's own TTFT target, which the `edf` order uses as its deadline.
    """
    spec: WorkloadSpec
    tenant: str | None = None
    priority: int | None = None
    ttft_slo_s: float | None = None

    def to_dict(self) -> dict:
        return {"spec": self.spec.to_dict(), "tenant": self.tenant, "priority": self.priority,
                "ttft_slo_s": self.ttft_slo_s}
