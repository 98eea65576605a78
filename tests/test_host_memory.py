"""A step's freed memory stays in the process for the next step (engine/model/host_memory.py)."""
import subprocess
import sys

import pytest

from engine.model import host_memory

# A fresh process (whose malloc has not yet adapted its own thresholds) runs one prefill step of
# 8 prompts x 256 tokens three times, and prints the page faults of the second and third.
STEPS = """
import resource, sys
from engine.model import host_memory
if sys.argv[1] == "default":
    host_memory._done = False                      # the runner leaves glibc's defaults alone
from engine.model.model import load_model
from engine.model.runner import ModelRunner, SeqInput
runner = ModelRunner(load_model(device="cpu", dtype="float32"), 8 * 16, 16)
seqs = [SeqInput(f"p{i}", [200 + (i * 31 + j) % 4000 for j in range(256)], 0, list(range(i * 16, i * 16 + 16)), True)
        for i in range(8)]
faults = []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    runner.run(seqs)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sum(faults[1:]))
"""


def faults_of_steps(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True, timeout=300, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not host_memory.keep_freed_memory(), reason="not glibc: malloc's thresholds cannot be set")
def test_a_repeated_prefill_step_reuses_freed_memory_instead_of_faulting_it_in_again():
    assert faults_of_steps("keep") < 1_000                 # 4 MB: the step's buffers are reused
    assert faults_of_steps("default") > 10_000             # glibc's own thresholds hand them back
