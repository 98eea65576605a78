"""The bench's roofline: this machine's peaks, measured the way the bench measures them."""
import pytest
import torch

from engine.cli import bench
from engine.model.linear import onednn_available


def test_the_roofline_is_the_best_of_its_trials_beside_their_median():
    roof = bench.measure_roofline("cpu", torch.float32)
    assert roof["gemm_flops"] >= roof["gemm_median"] > 0 and roof["mem_bw"] >= roof["mem_median"] > 0
    assert roof["gemm_by"] in ("torch", "oneDNN", "C kernel")


@pytest.mark.skipif(not onednn_available(torch.device("cpu"), torch.float32), reason="no oneDNN in this torch")
def test_a_product_slower_than_any_peak_is_left_out(monkeypatch):
    """As torch's emulated bf16 product is on a CPU without bf16 instructions (a minute a trial)."""
    monkeypatch.setattr(bench, "SLOW_GEMM", 1e18)
    assert bench.measure_roofline("cpu", torch.float32)["gemm_by"] in ("oneDNN", "C kernel")
